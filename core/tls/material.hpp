#pragma once

#include <chrono>
#include <string>

#include "core/tls/certificate.hpp"

namespace exo::tls {

/// The TLS files of one node or client: the same four settings as CAF's
/// `openssl.certificate`, `openssl.key`, `openssl.passphrase` and
/// `openssl.cafile`.
struct material {
  std::string certificate; ///< PEM certificate file.
  std::string key;         ///< PEM private key file.
  std::string passphrase;  ///< Key passphrase; empty: the key is plain.
  std::string cafile;      ///< PEM file of the cluster CA.
  cert_role role = cert_role::node;
};

/// What check_material learned about valid material.
struct material_info {
  std::string common_name; ///< The node or client name.
  std::string fingerprint; ///< SHA-256 of the certificate.
  std::chrono::system_clock::time_point not_after;
};

/// Checks TLS material with OpenSSL before any actor system starts (CAF 0.17
/// hangs on a wrong passphrase). Checks, in order: every path is set (no
/// anonymous TLS), each file loads (never prompting for a passphrase), the
/// key belongs to the certificate, the certificate is within its validity,
/// chains to the CA, and has the key usage of `role`.
/// @throws tls_error naming the file and the problem.
material_info check_material(const material& files);

} // namespace exo::tls
