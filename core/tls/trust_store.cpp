#include "core/tls/trust_store.hpp"

#include <openssl/x509_vfy.h>

#include "core/tls/openssl_util.hpp"
#include "core/tls/tls_error.hpp"

namespace exo::tls {

namespace {

void require_ca(const certificate& cert, const std::string& origin) {
  if (!cert.is_ca())
    throw tls_error(tls_errc::wrong_usage,
                    origin + " holds '" + cert.common_name() +
                        "', which is not a CA certificate");
}

} // namespace

trust_store::trust_store(certificate ca) : cas_{std::move(ca)} {
  require_ca(cas_.front(), "CA certificate");
}

trust_store::trust_store(std::vector<certificate> cas) : cas_(std::move(cas)) {
  // nop
}

trust_store trust_store::load(const std::string& cafile) {
  auto pem = detail::read_file(cafile, "CA file");
  return from_pem(pem, "CA file '" + cafile + "'");
}

trust_store trust_store::from_pem(std::string_view pem,
                                  std::string_view origin) {
  auto cas = certificate::all_from_pem(pem, origin);
  for (auto& ca : cas)
    require_ca(ca, std::string{origin});
  return trust_store{std::move(cas)};
}

void check_validity(const certificate& cert, std::string_view what) {
  auto name = std::string{what};
  if (X509_cmp_current_time(X509_get0_notBefore(cert.native())) >= 0)
    throw tls_error(tls_errc::not_yet_valid,
                    name + " is not valid yet (valid from " +
                        cert.not_before_text() + ")");
  if (X509_cmp_current_time(X509_get0_notAfter(cert.native())) <= 0)
    throw tls_error(tls_errc::expired,
                    name + " expired on " + cert.not_after_text());
}

void trust_store::verify(const certificate& cert, std::string_view what) const {
  detail::error_queue_guard guard;
  auto name = std::string{what};
  check_validity(cert, what);
  detail::store_ptr store{X509_STORE_new()};
  detail::store_ctx_ptr ctx{X509_STORE_CTX_new()};
  if (!store || !ctx)
    detail::fail(tls_errc::internal, "cannot allocate an X509 store");
  for (auto& ca : cas_)
    if (X509_STORE_add_cert(store.get(), ca.native()) != 1)
      detail::fail(tls_errc::internal, "cannot add a CA to the X509 store");
  if (X509_STORE_CTX_init(ctx.get(), store.get(), cert.native(), nullptr) != 1)
    detail::fail(tls_errc::internal, "cannot initialise certificate check");
  if (X509_verify_cert(ctx.get()) == 1)
    return;
  auto err = X509_STORE_CTX_get_error(ctx.get());
  auto depth = X509_STORE_CTX_get_error_depth(ctx.get());
  std::string reason = X509_verify_cert_error_string(err);
  switch (err) {
  case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    throw tls_error(tls_errc::self_signed,
                    name + " is self-signed, not issued by the cluster CA");
  case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
  case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
  case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
  case X509_V_ERR_CERT_SIGNATURE_FAILURE:
  case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    throw tls_error(tls_errc::untrusted, name + " (issuer '" + cert.issuer() +
                                             "') is not signed by the"
                                             " cluster CA: " +
                                             reason);
  case X509_V_ERR_CERT_HAS_EXPIRED:
    throw tls_error(tls_errc::expired, depth == 0
                                           ? name + " has expired"
                                           : "the CA certificate that issued " +
                                                 name + " has expired");
  case X509_V_ERR_CERT_NOT_YET_VALID:
    throw tls_error(tls_errc::not_yet_valid,
                    depth == 0 ? name + " is not valid yet"
                               : "the CA certificate that issued " + name +
                                     " is not valid yet");
  case X509_V_ERR_INVALID_CA:
  case X509_V_ERR_INVALID_PURPOSE:
  case X509_V_ERR_KEYUSAGE_NO_CERTSIGN:
    throw tls_error(tls_errc::wrong_usage,
                    name +
                        " does not chain to the cluster CA with the"
                        " right key usage: " +
                        reason);
  default:
    throw tls_error(tls_errc::untrusted,
                    name + " failed verification against the cluster CA: " +
                        reason + " (at depth " + std::to_string(depth) + ")");
  }
}

} // namespace exo::tls
