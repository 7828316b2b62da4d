#include "core/tls/challenge.hpp"

#include <openssl/rand.h>

#include "core/tls/cert_tool.hpp"
#include "core/tls/openssl_util.hpp"
#include "core/tls/private_key.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"

namespace exo::tls {

namespace {

std::string message_of(const nonce& challenge, std::string_view context) {
  std::string msg{context};
  msg.append(reinterpret_cast<const char*>(challenge.data()), challenge.size());
  return msg;
}

const EVP_MD* digest_for(EVP_PKEY* key) {
  return EVP_PKEY_is_a(key, "ED25519") ? nullptr : EVP_sha256();
}

} // namespace

nonce make_nonce() {
  detail::error_queue_guard guard;
  nonce result;
  if (RAND_bytes(result.data(), static_cast<int>(result.size())) != 1)
    detail::fail(tls_errc::internal, "cannot draw random bytes for a nonce");
  return result;
}

std::string join_context(std::string_view claimed_name,
                         std::string_view responder_name) {
  std::string result = "exo-join-v1|";
  result += claimed_name;
  result += '|';
  result += responder_name;
  return result;
}

signature sign_message(const private_key& key, std::string_view msg,
                       std::string_view what) {
  detail::error_queue_guard guard;
  std::string w{what};
  detail::md_ctx_ptr ctx{EVP_MD_CTX_new()};
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, digest_for(key.native()),
                                 nullptr, key.native()) != 1)
    detail::fail(tls_errc::internal, "cannot start signing the " + w);
  size_t len = 0;
  auto* data = reinterpret_cast<const unsigned char*>(msg.data());
  if (EVP_DigestSign(ctx.get(), nullptr, &len, data, msg.size()) != 1)
    detail::fail(tls_errc::internal, "cannot size the " + w + " signature");
  signature result(len);
  if (EVP_DigestSign(ctx.get(), result.data(), &len, data, msg.size()) != 1)
    detail::fail(tls_errc::internal, "cannot sign the " + w);
  result.resize(len);
  return result;
}

signature sign_challenge(const private_key& key, const nonce& challenge,
                         std::string_view context) {
  return sign_message(key, message_of(challenge, context), "challenge");
}

std::string verify_message(std::string_view cert_pem, const trust_store& ca,
                           std::string_view msg, const signature& sig,
                           cert_role role, std::string_view what_signed) {
  detail::error_queue_guard guard;
  std::string ws{what_signed};
  if (cert_pem.size() > max_peer_cert_size)
    throw tls_error(tls_errc::invalid_argument,
                    "peer certificate too large (" +
                        std::to_string(cert_pem.size()) + " bytes)");
  if (sig.empty() || sig.size() > max_signature_size)
    throw tls_error(tls_errc::invalid_argument,
                    ws + " signature has a bad size (" +
                        std::to_string(sig.size()) + " bytes)");
  auto cert = certificate::from_pem(cert_pem, "peer certificate");
  auto cn = cert.common_name();
  auto what = "peer certificate '" + cn + "'";
  ca.verify(cert, what);
  check_usage(cert, role, what);
  auto* pub = X509_get0_pubkey(cert.native());
  detail::md_ctx_ptr ctx{EVP_MD_CTX_new()};
  if (pub == nullptr || !ctx ||
      EVP_DigestVerifyInit(ctx.get(), nullptr, digest_for(pub), nullptr, pub) !=
          1)
    detail::fail(tls_errc::internal, "cannot start verifying the " + ws);
  auto ok = EVP_DigestVerify(ctx.get(), sig.data(), sig.size(),
                             reinterpret_cast<const unsigned char*>(msg.data()),
                             msg.size());
  if (ok != 1)
    throw tls_error(tls_errc::bad_signature,
                    ws + " signature does not verify with the key of " + what +
                        (ws == "challenge"
                             ? " (wrong key, altered nonce or altered context)"
                             : " (wrong key or altered content)"));
  return cn;
}

std::string verify_challenge(std::string_view cert_pem, const trust_store& ca,
                             const nonce& challenge, std::string_view context,
                             const signature& sig, cert_role role) {
  return verify_message(cert_pem, ca, message_of(challenge, context), sig,
                        role, "challenge");
}

signature sign_join(const private_key& key, const nonce& challenge,
                    std::string_view claimed_name,
                    std::string_view responder_name) {
  return sign_challenge(key, challenge,
                        join_context(claimed_name, responder_name));
}

std::string verify_join(std::string_view cert_pem, const trust_store& ca,
                        const nonce& challenge, std::string_view claimed_name,
                        std::string_view responder_name, const signature& sig) {
  validate_name(claimed_name, "claimed node name");
  validate_name(responder_name, "responder node name");
  auto cn = verify_challenge(cert_pem, ca, challenge,
                             join_context(claimed_name, responder_name), sig,
                             cert_role::node);
  if (cn != claimed_name)
    throw tls_error(tls_errc::name_mismatch,
                    "node claims the name '" + std::string{claimed_name} +
                        "' but its certificate is for '" + cn + "'");
  return cn;
}

} // namespace exo::tls
