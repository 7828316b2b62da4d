#include "core/tls/certificate.hpp"

#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "core/tls/openssl_util.hpp"
#include "core/tls/private_key.hpp"
#include "core/tls/tls_error.hpp"

namespace exo::tls {

namespace {

std::string name_text(const X509_NAME* name) {
  detail::bio_ptr bio{BIO_new(BIO_s_mem())};
  if (!bio || name == nullptr)
    return {};
  X509_NAME_print_ex(bio.get(), name, 0,
                     XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
  return detail::bio_contents(bio.get());
}

certificate::time_point to_time_point(const ASN1_TIME* t) {
  struct tm tm;
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1)
    return {};
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

} // namespace

const char* to_string(cert_role role) noexcept {
  return role == cert_role::node ? "node" : "client";
}

certificate certificate::from_pem(std::string_view pem,
                                  std::string_view origin) {
  detail::error_queue_guard guard;
  auto name = std::string{origin};
  if (pem.find("-----BEGIN ") == std::string_view::npos)
    throw tls_error(tls_errc::not_pem, name + " is not PEM (no BEGIN line)");
  if (pem.find("-----BEGIN CERTIFICATE-----") == std::string_view::npos)
    throw tls_error(tls_errc::not_pem,
                    name + " holds no PEM certificate (is it a key?)");
  auto bio = detail::read_bio(pem);
  auto* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
  if (cert == nullptr)
    detail::fail(tls_errc::not_pem, name + " is not a valid PEM certificate");
  return adopt(cert);
}

std::vector<certificate> certificate::all_from_pem(std::string_view pem,
                                                   std::string_view origin) {
  detail::error_queue_guard guard;
  // Validates the first one with a clear message.
  std::vector<certificate> result{from_pem(pem, origin)};
  auto bio = detail::read_bio(pem);
  X509* first = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
  X509_free(first);
  while (auto* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))
    result.push_back(adopt(cert));
  return result;
}

certificate certificate::load(const std::string& path) {
  auto pem = detail::read_file(path, "certificate file");
  return from_pem(pem, "certificate file '" + path + "'");
}

certificate certificate::adopt(X509* cert) {
  return certificate{std::shared_ptr<X509>{cert, X509_free}};
}

std::string certificate::to_pem() const {
  detail::error_queue_guard guard;
  detail::bio_ptr bio{BIO_new(BIO_s_mem())};
  if (!bio || PEM_write_bio_X509(bio.get(), cert_.get()) != 1)
    detail::fail(tls_errc::internal, "cannot encode the certificate as PEM");
  return detail::bio_contents(bio.get());
}

std::string certificate::common_name() const {
  auto* name = X509_get_subject_name(cert_.get());
  int idx = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (idx < 0)
    return {};
  auto* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
  unsigned char* utf8 = nullptr;
  int len = ASN1_STRING_to_UTF8(&utf8, data);
  if (len < 0)
    return {};
  std::string result{reinterpret_cast<char*>(utf8), static_cast<size_t>(len)};
  OPENSSL_free(utf8);
  return result;
}

std::string certificate::subject() const {
  return name_text(X509_get_subject_name(cert_.get()));
}

std::string certificate::issuer() const {
  return name_text(X509_get_issuer_name(cert_.get()));
}

std::string certificate::serial_hex() const {
  detail::bn_ptr bn{
      ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert_.get()), nullptr)};
  if (!bn)
    return {};
  char* hex = BN_bn2hex(bn.get());
  std::string result{hex};
  OPENSSL_free(hex);
  return result;
}

std::string certificate::fingerprint_sha256() const {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert_.get(), EVP_sha256(), md, &len) != 1)
    return {};
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string result;
  for (unsigned int i = 0; i < len; ++i) {
    if (i > 0)
      result += ':';
    result += digits[md[i] >> 4];
    result += digits[md[i] & 0xF];
  }
  return result;
}

std::vector<std::string> certificate::subject_alt_names() const {
  std::vector<std::string> result;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert_.get(), NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr)
    return result;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    auto* gn = sk_GENERAL_NAME_value(names, i);
    auto str = [](const ASN1_STRING* s) {
      return std::string{
          reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
          static_cast<size_t>(ASN1_STRING_length(s))};
    };
    switch (gn->type) {
    case GEN_DNS:
      result.push_back("DNS:" + str(gn->d.dNSName));
      break;
    case GEN_URI:
      result.push_back("URI:" + str(gn->d.uniformResourceIdentifier));
      break;
    case GEN_EMAIL:
      result.push_back("email:" + str(gn->d.rfc822Name));
      break;
    case GEN_IPADD: {
      auto* bytes = ASN1_STRING_get0_data(gn->d.iPAddress);
      auto len = ASN1_STRING_length(gn->d.iPAddress);
      std::string ip;
      if (len == 4) {
        for (int j = 0; j < 4; ++j)
          ip += (j ? "." : "") + std::to_string(bytes[j]);
      } else {
        static constexpr char digits[] = "0123456789abcdef";
        for (int j = 0; j < len; ++j) {
          if (j > 0 && j % 2 == 0)
            ip += ':';
          ip += digits[bytes[j] >> 4];
          ip += digits[bytes[j] & 0xF];
        }
      }
      result.push_back("IP:" + ip);
      break;
    }
    default:
      result.push_back("(other)");
    }
  }
  GENERAL_NAMES_free(names);
  return result;
}

certificate::time_point certificate::not_before() const {
  return to_time_point(X509_get0_notBefore(cert_.get()));
}

certificate::time_point certificate::not_after() const {
  return to_time_point(X509_get0_notAfter(cert_.get()));
}

std::string certificate::not_before_text() const {
  return detail::format_time(X509_get0_notBefore(cert_.get()));
}

std::string certificate::not_after_text() const {
  return detail::format_time(X509_get0_notAfter(cert_.get()));
}

bool certificate::is_ca() const {
  return X509_check_ca(cert_.get()) != 0;
}

bool certificate::is_self_signed() const {
  detail::error_queue_guard guard;
  return X509_self_signed(cert_.get(), 1) == 1;
}

bool certificate::has_digital_signature() const {
  // X509_get_key_usage returns UINT32_MAX when the extension is absent.
  return (X509_get_key_usage(cert_.get()) & KU_DIGITAL_SIGNATURE) != 0;
}

bool certificate::has_server_auth() const {
  auto xku = X509_get_extended_key_usage(cert_.get());
  return (X509_get_extension_flags(cert_.get()) & EXFLAG_XKUSAGE) != 0 &&
         (xku & XKU_SSL_SERVER) != 0;
}

bool certificate::has_client_auth() const {
  auto xku = X509_get_extended_key_usage(cert_.get());
  return (X509_get_extension_flags(cert_.get()) & EXFLAG_XKUSAGE) != 0 &&
         (xku & XKU_SSL_CLIENT) != 0;
}

bool certificate::matches(const private_key& key) const {
  detail::error_queue_guard guard;
  auto* pub = X509_get0_pubkey(cert_.get());
  return pub != nullptr && EVP_PKEY_eq(pub, key.native()) == 1;
}

std::string certificate::describe() const {
  std::string out;
  auto line = [&out](const char* label, const std::string& value) {
    out += label;
    out += value;
    out += '\n';
  };
  line("common name:  ", common_name());
  line("subject:      ", subject());
  line("issuer:       ", issuer());
  line("serial:       ", serial_hex());
  line("not before:   ", not_before_text());
  line("not after:    ", not_after_text());
  line("key:          ", describe_key(X509_get0_pubkey(cert_.get())));
  line("CA:           ", is_ca() ? "yes" : "no");
  line("self-signed:  ", is_self_signed() ? "yes" : "no");
  std::string sans;
  for (auto& san : subject_alt_names())
    sans += (sans.empty() ? "" : ", ") + san;
  line("alt names:    ", sans.empty() ? "(none)" : sans);
  std::string usage;
  if (has_digital_signature())
    usage += "digitalSignature";
  if ((X509_get_key_usage(cert_.get()) & KU_KEY_CERT_SIGN) != 0)
    usage += (usage.empty() ? "" : ", ") + std::string{"keyCertSign"};
  if (has_server_auth())
    usage += (usage.empty() ? "" : ", ") + std::string{"serverAuth"};
  if (has_client_auth())
    usage += (usage.empty() ? "" : ", ") + std::string{"clientAuth"};
  line("usage:        ", usage.empty() ? "(none)" : usage);
  line("sha256:       ", fingerprint_sha256());
  return out;
}

void check_usage(const certificate& cert, cert_role role,
                 std::string_view what) {
  auto name = std::string{what};
  if (cert.is_ca())
    throw tls_error(tls_errc::wrong_usage,
                    name + " is a CA certificate, not a " + to_string(role) +
                        " certificate");
  if (!cert.has_digital_signature())
    throw tls_error(tls_errc::wrong_usage,
                    name + " lacks the digitalSignature key usage");
  if (role == cert_role::node && !cert.has_server_auth())
    throw tls_error(tls_errc::wrong_usage,
                    name + " lacks the serverAuth extended key usage a node"
                           " certificate needs");
  if (!cert.has_client_auth())
    throw tls_error(tls_errc::wrong_usage,
                    name + " lacks the clientAuth extended key usage (CAF's"
                           " TLS is mutual)");
}

} // namespace exo::tls
