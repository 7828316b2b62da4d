#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/tls/certificate.hpp"

namespace exo::tls {

/// The cluster CA certificates a peer's certificate must chain to.
class trust_store {
 public:
  /// Trusts exactly `ca`.
  /// @throws tls_error wrong_usage when `ca` is not a CA certificate.
  explicit trust_store(certificate ca);

  /// Reads a PEM CA file (one or more CA certificates).
  /// @throws tls_error io, not_pem or wrong_usage.
  static trust_store load(const std::string& cafile);

  /// Parses PEM CA certificates; `origin` names them in errors.
  static trust_store from_pem(std::string_view pem,
                              std::string_view origin = "CA certificate");

  /// Checks that `cert` is within its validity period and chains to one of
  /// the trusted CAs (X509_verify_cert); `what` names it in errors.
  /// @throws tls_error expired, not_yet_valid, self_signed, untrusted or
  ///         wrong_usage.
  void verify(const certificate& cert, std::string_view what) const;

  const std::vector<certificate>& certificates() const noexcept { return cas_; }

 private:
  explicit trust_store(std::vector<certificate> cas);

  std::vector<certificate> cas_;
};

/// Checks that now lies within the validity period of `cert`.
/// @throws tls_error expired or not_yet_valid.
void check_validity(const certificate& cert, std::string_view what);

} // namespace exo::tls
