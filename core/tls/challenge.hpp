#pragma once

// Cryptographic primitives of the join handshake. TLS (CAF 0.17) only proves
// "the peer holds some certificate of our CA" and does not tell actors which
// one, so the joiner proves which name it holds a key for:
//
//   responder                               joiner
//      |  <------- join(claimed name) --------  |
//      |  -------- nonce (32 random bytes) ---> |
//      |  <------- cert PEM, signature -------  |   sign(key, nonce,
//      |                                        |        join_context(claimed,
//      |  verify_join(cert, CA, nonce,          | responder)) | claimed,
//      responder, sig)  | |   -> CN == claimed name, or refused    |
//
// The context string binds the signature to both names and the protocol
// version, so a proof cannot be replayed to another responder or for
// another name.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tls/certificate.hpp"

namespace exo::tls {

class private_key;
class trust_store;

/// A fresh random challenge.
using nonce = std::array<std::uint8_t, 32>;

/// A signature over (context || nonce).
using signature = std::vector<std::uint8_t>;

/// Largest certificate PEM and signature a verifier accepts from a peer.
constexpr size_t max_peer_cert_size = 16 * 1024;
constexpr size_t max_signature_size = 1024;

/// Returns 32 bytes from OpenSSL's CSPRNG.
nonce make_nonce();

/// Returns "exo-join-v1|<claimed>|<responder>".
std::string join_context(std::string_view claimed_name,
                         std::string_view responder_name);

/// Signs `message` with `key` (ECDSA-SHA256, or Ed25519); `what` names the
/// message in errors. The caller binds the message to its purpose (a context
/// string inside it).
/// @throws tls_error internal.
signature sign_message(const private_key& key, std::string_view message,
                       std::string_view what = "message");

/// Verifies that `sig` is a signature over `message` by the key of
/// `cert_pem`, a `role` certificate within its validity that chains to `ca`
/// (sizes bounded: max_peer_cert_size, max_signature_size). Returns the
/// certificate's CN; `what_signed` names the message in errors.
/// @throws tls_error not_pem, invalid_argument, expired, not_yet_valid,
///         self_signed, untrusted, wrong_usage or bad_signature.
std::string verify_message(std::string_view cert_pem, const trust_store& ca,
                           std::string_view message, const signature& sig,
                           cert_role role = cert_role::node,
                           std::string_view what_signed = "message");

/// Signs (context || nonce) with `key` (ECDSA-SHA256, or Ed25519).
signature sign_challenge(const private_key& key, const nonce& challenge,
                         std::string_view context);

/// Verifies a challenge response: `cert_pem` must be a `role` certificate
/// within its validity that chains to `ca`, and `sig` a signature over
/// (context || nonce) by its key. Returns the certificate's CN.
/// @throws tls_error not_pem, invalid_argument, expired, not_yet_valid,
///         self_signed, untrusted, wrong_usage or bad_signature.
std::string verify_challenge(std::string_view cert_pem, const trust_store& ca,
                             const nonce& challenge, std::string_view context,
                             const signature& sig,
                             cert_role role = cert_role::node);

/// Signs the join challenge of node `claimed_name` to `responder_name`.
signature sign_join(const private_key& key, const nonce& challenge,
                    std::string_view claimed_name,
                    std::string_view responder_name);

/// Verifies a join proof with join_context(claimed, responder) and then that
/// the certificate's CN is `claimed_name`. Returns the verified name.
/// @throws as verify_challenge, and name_mismatch.
std::string verify_join(std::string_view cert_pem, const trust_store& ca,
                        const nonce& challenge, std::string_view claimed_name,
                        std::string_view responder_name, const signature& sig);

} // namespace exo::tls
