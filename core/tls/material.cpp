#include "core/tls/material.hpp"

#include "core/tls/private_key.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"

namespace exo::tls {

material_info check_material(const material& files) {
  auto require = [](const std::string& value, const char* what) {
    if (value.empty())
      throw tls_error(tls_errc::invalid_argument,
                      std::string{"no TLS "} + what +
                          " configured; exo never runs without mutually"
                          " authenticated TLS");
  };
  require(files.certificate, "certificate");
  require(files.key, "private key");
  require(files.cafile, "CA file");
  auto ca = trust_store::load(files.cafile);
  auto cert = certificate::load(files.certificate);
  auto key = private_key::load(files.key, files.passphrase);
  auto what = "certificate '" + files.certificate + "'";
  if (!cert.matches(key))
    throw tls_error(tls_errc::key_mismatch,
                    "key file '" + files.key + "' does not belong to " + what +
                        " (CN '" + cert.common_name() + "')");
  ca.verify(cert, what);
  check_usage(cert, files.role, what);
  auto cn = cert.common_name();
  if (cn.empty())
    throw tls_error(tls_errc::wrong_usage, what + " has no common name");
  return material_info{cn, cert.fingerprint_sha256(), cert.not_after()};
}

} // namespace exo::tls
