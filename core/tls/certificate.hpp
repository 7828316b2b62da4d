#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <openssl/x509.h>

namespace exo::tls {

class private_key;

/// What a leaf certificate is for. Nodes need serverAuth and clientAuth
/// (CAF's TLS is mutual: both ends present a certificate); clients need
/// clientAuth.
enum class cert_role {
  node,
  client,
};

/// Returns "node" or "client".
const char* to_string(cert_role role) noexcept;

/// An X.509 certificate (shared, immutable OpenSSL X509).
class certificate {
 public:
  using time_point = std::chrono::system_clock::time_point;

  /// Parses the first certificate of PEM text; `origin` names it in errors.
  /// @throws tls_error not_pem.
  static certificate from_pem(std::string_view pem,
                              std::string_view origin = "certificate");

  /// Parses every certificate of PEM text (a CA bundle); at least one.
  /// @throws tls_error not_pem.
  static std::vector<certificate>
  all_from_pem(std::string_view pem, std::string_view origin = "CA file");

  /// Reads and parses a PEM certificate file.
  /// @throws tls_error io or not_pem.
  static certificate load(const std::string& path);

  /// Adopts an X509 object (takes ownership).
  static certificate adopt(X509* cert);

  /// Returns the certificate as PEM.
  std::string to_pem() const;

  // -- identity ---------------------------------------------------------------

  std::string common_name() const;
  std::string subject() const;
  std::string issuer() const;
  std::string serial_hex() const;
  std::string fingerprint_sha256() const;
  std::vector<std::string> subject_alt_names() const;

  // -- validity ---------------------------------------------------------------

  time_point not_before() const;
  time_point not_after() const;
  std::string not_before_text() const;
  std::string not_after_text() const;

  // -- usage ------------------------------------------------------------------

  bool is_ca() const;
  bool is_self_signed() const;
  bool has_digital_signature() const;
  bool has_server_auth() const;
  bool has_client_auth() const;

  /// Returns whether `key` is the private half of this certificate's key.
  bool matches(const private_key& key) const;

  /// Returns a multi-line description for people (`exo-cert show`).
  std::string describe() const;

  /// Returns the underlying OpenSSL object (still owned by this object).
  X509* native() const noexcept { return cert_.get(); }

 private:
  explicit certificate(std::shared_ptr<X509> cert) : cert_(std::move(cert)) {
    // nop
  }

  std::shared_ptr<X509> cert_;
};

/// Checks that `cert` is a leaf fit for `role` (not a CA, digitalSignature,
/// the right extended key usage); `what` names it in errors.
/// @throws tls_error wrong_usage.
void check_usage(const certificate& cert, cert_role role,
                 std::string_view what);

} // namespace exo::tls
