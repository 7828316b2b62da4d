#pragma once

#include <stdexcept>
#include <string>

namespace exo::tls {

/// What went wrong with TLS material or a handshake proof.
enum class tls_errc {
  invalid_argument,    ///< A bad name, option or size given by the caller.
  io,                  ///< A file is missing, unreadable or unwritable.
  exists,              ///< A file exists and overwriting was not allowed.
  not_pem,             ///< The content is not PEM or not the expected object.
  passphrase_required, ///< An encrypted key was given without a passphrase.
  bad_passphrase,      ///< The passphrase does not decrypt the key.
  key_mismatch,        ///< The private key does not belong to the certificate.
  expired,             ///< The certificate's validity has ended.
  not_yet_valid,       ///< The certificate's validity has not begun.
  untrusted,           ///< The certificate is not signed by the cluster CA.
  self_signed,         ///< The certificate is self-signed, not CA-issued.
  wrong_usage,         ///< Key usage, extended key usage or CA flag is wrong.
  bad_signature,       ///< A challenge signature does not verify.
  name_mismatch,       ///< The certificate's name is not the claimed name.
  internal,            ///< OpenSSL failed unexpectedly.
};

/// Returns a short, stable name for `code`, e.g. "bad_passphrase".
const char* to_string(tls_errc code) noexcept;

/// The one error type of `exo_tls`: every function reports failure by
/// throwing it, with a message that names the file or party and the problem.
class tls_error : public std::runtime_error {
 public:
  tls_error(tls_errc code, const std::string& what)
      : std::runtime_error(what), code_(code) {
    // nop
  }

  tls_errc code() const noexcept { return code_; }

 private:
  tls_errc code_;
};

} // namespace exo::tls
