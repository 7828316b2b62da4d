#pragma once

// Helpers shared by the TLS tests: a temporary directory and a way to build
// material that exo's own API refuses to create (self-signed leaves).

#include <cstdlib>
#include <filesystem>
#include <string>

#include <openssl/x509v3.h>

#include "core/tls/cert_tool.hpp"

namespace exo::tls::test {

/// A fresh directory under the system temp folder, removed on destruction.
class temp_dir {
 public:
  temp_dir() {
    auto base = std::filesystem::temp_directory_path() / "exo-tls-XXXXXX";
    std::string templ = base.string();
    if (::mkdtemp(templ.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }

  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  std::string operator/(const std::string& name) const {
    return path_ + "/" + name;
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// Builds a self-signed leaf certificate (CA:FALSE, node usages) named `cn`.
inline credential self_signed_leaf(const std::string& cn) {
  auto key = private_key::generate();
  X509* x = X509_new();
  X509_set_version(x, X509_VERSION_3);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 4711);
  X509_gmtime_adj(X509_getm_notBefore(x), -300);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, key.native());
  auto* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()),
                             -1, -1, 0);
  X509_set_issuer_name(x, name);
  auto add = [x](int nid, const char* value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
    auto* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  };
  add(NID_basic_constraints, "critical,CA:FALSE");
  add(NID_key_usage, "critical,digitalSignature");
  add(NID_ext_key_usage, "serverAuth,clientAuth");
  X509_sign(x, key.native(), EVP_sha256());
  return credential{certificate::adopt(x), key};
}

/// Writes a credential as <dir>/<stem>.crt and <dir>/<stem>.key.
inline void write_credential(const temp_dir& dir, const std::string& stem,
                             const credential& cred,
                             const std::string& passphrase = {}) {
  write_certificate(dir / (stem + ".crt"), cred.cert);
  write_private_key(dir / (stem + ".key"), cred.key, passphrase);
}

} // namespace exo::tls::test
