#include "core/tls/cert_tool.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/x509v3.h>

#include "core/tls/openssl_util.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"

namespace exo::tls {

namespace {

using x509_ptr =
    std::unique_ptr<X509, detail::openssl_deleter<X509, X509_free>>;

constexpr int max_days = 36500;

void check_days(int days) {
  if (days < 1 || days > max_days)
    throw tls_error(tls_errc::invalid_argument,
                    "validity must be between 1 and " +
                        std::to_string(max_days) + " days, got " +
                        std::to_string(days));
}

const EVP_MD* digest_for(const private_key& key) {
  // Ed25519 signs the message itself; ECDSA and RSA sign a SHA-256 digest.
  return EVP_PKEY_is_a(key.native(), "ED25519") ? nullptr : EVP_sha256();
}

void set_serial(X509* cert) {
  detail::bn_ptr bn{BN_new()};
  if (!bn)
    detail::fail(tls_errc::internal, "cannot allocate a serial number");
  // 159 random bits: positive, at most 20 octets (RFC 5280), never zero.
  do {
    if (BN_rand(bn.get(), 159, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1)
      detail::fail(tls_errc::internal, "cannot draw a random serial number");
  } while (BN_is_zero(bn.get()));
  if (BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) == nullptr)
    detail::fail(tls_errc::internal, "cannot set the serial number");
}

void set_common_name(X509* cert, const std::string& name) {
  auto* subject = X509_get_subject_name(cert);
  if (X509_NAME_add_entry_by_txt(
          subject, "CN", MBSTRING_UTF8,
          reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0) != 1)
    detail::fail(tls_errc::invalid_argument,
                 "cannot use '" + name + "' as a common name");
}

void add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  auto* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr)
    detail::fail(tls_errc::invalid_argument, std::string{"invalid "} +
                                                 OBJ_nid2sn(nid) + " value '" +
                                                 value + "'");
  auto ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1)
    detail::fail(tls_errc::internal, "cannot add a certificate extension");
}

x509_ptr new_cert(const private_key& subject_key, std::chrono::seconds offset,
                  int days) {
  check_days(days);
  x509_ptr cert{X509_new()};
  if (!cert)
    detail::fail(tls_errc::internal, "cannot allocate a certificate");
  if (X509_set_version(cert.get(), X509_VERSION_3) != 1)
    detail::fail(tls_errc::internal, "cannot set the certificate version");
  set_serial(cert.get());
  auto secs = static_cast<long>(offset.count());
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), secs) == nullptr ||
      X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, secs, nullptr) ==
          nullptr)
    detail::fail(tls_errc::internal, "cannot set the validity period");
  if (X509_set_pubkey(cert.get(), subject_key.native()) != 1)
    detail::fail(tls_errc::internal, "cannot set the public key");
  return cert;
}

void sign(X509* cert, const private_key& key) {
  if (X509_sign(cert, key.native(), digest_for(key)) <= 0)
    detail::fail(tls_errc::internal, "cannot sign the certificate");
}

void check_alt_name(const std::string& entry) {
  static constexpr const char* prefixes[] = {"DNS:", "IP:", "URI:", "email:"};
  bool known = false;
  for (auto* prefix : prefixes)
    if (entry.rfind(prefix, 0) == 0 && entry.size() > std::strlen(prefix))
      known = true;
  if (!known || entry.find_first_of(",\n\r") != std::string::npos)
    throw tls_error(tls_errc::invalid_argument,
                    "bad subjectAltName entry '" + entry +
                        "' (expected DNS:, IP:, URI: or email: and a value)");
}

std::string errno_text() {
  return std::strerror(errno);
}

std::string join(const std::string& dir, const std::string& file) {
  if (dir.empty())
    return file;
  if (dir.back() == '/')
    return dir + file;
  return dir + "/" + file;
}

/// Writes `content` to `path` with `mode` via a temporary file in the same
/// directory; link() makes "do not overwrite" atomic, rename() replaces.
void write_file(const std::string& path, const std::string& content,
                mode_t mode, bool force, const std::string& what) {
  static std::atomic<unsigned> counter{0};
  if (!force && detail::path_exists(path))
    throw tls_error(tls_errc::exists, "refusing to overwrite existing " + what +
                                          " '" + path + "' (use --force)");
  auto tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
             std::to_string(counter++);
  int fd = ::open(tmp.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    throw tls_error(tls_errc::io, "cannot create " + what + " '" + path +
                                      "': " + errno_text());
  auto fail_io = [&](const std::string& action) {
    auto text = errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    throw tls_error(tls_errc::io, "cannot " + action + " " + what + " '" +
                                      path + "': " + text);
  };
  if (::fchmod(fd, mode) != 0)
    fail_io("set the mode of");
  size_t done = 0;
  while (done < content.size()) {
    auto n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      fail_io("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0)
    fail_io("sync");
  ::close(fd);
  if (force) {
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      auto text = errno_text();
      ::unlink(tmp.c_str());
      throw tls_error(tls_errc::io,
                      "cannot write " + what + " '" + path + "': " + text);
    }
    return;
  }
  if (::link(tmp.c_str(), path.c_str()) != 0) {
    auto err = errno;
    ::unlink(tmp.c_str());
    if (err == EEXIST)
      throw tls_error(tls_errc::exists, "refusing to overwrite existing " +
                                            what + " '" + path +
                                            "' (use --force)");
    throw tls_error(tls_errc::io, "cannot write " + what + " '" + path +
                                      "': " + std::strerror(err));
  }
  ::unlink(tmp.c_str());
}

} // namespace

void validate_name(std::string_view name, std::string_view what) {
  auto bad = [&](const std::string& why) {
    throw tls_error(tls_errc::invalid_argument, "invalid " + std::string{what} +
                                                    " '" + std::string{name} +
                                                    "': " + why);
  };
  if (name.empty())
    bad("it is empty");
  if (name.size() > 64)
    bad("longer than 64 characters");
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok)
      bad("only letters, digits, '.', '_' and '-' are allowed");
  }
  if (name.front() == '.' || name.front() == '-')
    bad("it must not start with '.' or '-'");
}

credential create_ca(const ca_options& options) {
  detail::error_queue_guard guard;
  if (options.name.empty() || options.name.size() > 64)
    throw tls_error(tls_errc::invalid_argument,
                    "the CA name must have 1 to 64 characters");
  for (char c : options.name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      throw tls_error(tls_errc::invalid_argument,
                      "the CA name must not contain control characters");
  auto key = private_key::generate(options.algorithm);
  auto cert = new_cert(key, options.start_offset, options.days);
  set_common_name(cert.get(), options.name);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  add_ext(cert.get(), cert.get(), NID_basic_constraints,
          "critical,CA:TRUE,pathlen:0");
  add_ext(cert.get(), cert.get(), NID_key_usage,
          "critical,keyCertSign,cRLSign");
  add_ext(cert.get(), cert.get(), NID_subject_key_identifier, "hash");
  add_ext(cert.get(), cert.get(), NID_authority_key_identifier, "keyid:always");
  sign(cert.get(), key);
  return credential{certificate::adopt(cert.release()), key};
}

credential issue_certificate(const credential& ca,
                             const cert_options& options) {
  detail::error_queue_guard guard;
  validate_name(options.name, std::string{to_string(options.role)} + " name");
  for (auto& entry : options.alt_names)
    check_alt_name(entry);
  if (!ca.cert.is_ca())
    throw tls_error(tls_errc::wrong_usage, "the issuing certificate '" +
                                               ca.cert.common_name() +
                                               "' is not a CA");
  if (!ca.cert.matches(ca.key))
    throw tls_error(tls_errc::key_mismatch,
                    "the CA key does not belong to the CA certificate");
  auto key = private_key::generate(options.algorithm);
  auto cert = new_cert(key, options.start_offset, options.days);
  set_common_name(cert.get(), options.name);
  if (X509_set_issuer_name(cert.get(),
                           X509_get_subject_name(ca.cert.native())) != 1)
    detail::fail(tls_errc::internal, "cannot set the issuer name");
  auto* issuer = ca.cert.native();
  add_ext(cert.get(), issuer, NID_basic_constraints, "critical,CA:FALSE");
  add_ext(cert.get(), issuer, NID_key_usage, "critical,digitalSignature");
  add_ext(cert.get(), issuer, NID_ext_key_usage,
          options.role == cert_role::node ? "serverAuth,clientAuth"
                                          : "clientAuth");
  add_ext(cert.get(), issuer, NID_subject_key_identifier, "hash");
  add_ext(cert.get(), issuer, NID_authority_key_identifier, "keyid:always");
  std::string san = "DNS:" + options.name;
  for (auto& entry : options.alt_names)
    san += "," + entry;
  add_ext(cert.get(), issuer, NID_subject_alt_name, san);
  sign(cert.get(), ca.key);
  return credential{certificate::adopt(cert.release()), key};
}

void make_private_dir(const std::string& dir) {
  if (dir.empty())
    throw tls_error(tls_errc::invalid_argument, "no directory given");
  std::string path;
  size_t pos = 0;
  while (pos <= dir.size()) {
    auto next = dir.find('/', pos);
    if (next == std::string::npos)
      next = dir.size();
    path = dir.substr(0, next);
    pos = next + 1;
    if (path.empty() || path == "." || path == "..")
      continue;
    if (::mkdir(path.c_str(), 0700) == 0) {
      ::chmod(path.c_str(), 0700);
      continue;
    }
    if (errno != EEXIST)
      throw tls_error(tls_errc::io, "cannot create directory '" + path +
                                        "': " + errno_text());
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw tls_error(tls_errc::io, "'" + path +
                                        "' exists but is not a"
                                        " directory");
  }
}

void write_private_key(const std::string& path, const private_key& key,
                       const std::string& passphrase, bool force) {
  write_file(path, key.to_pem(passphrase), 0600, force, "key file");
}

void write_certificate(const std::string& path, const certificate& cert,
                       bool force) {
  write_file(path, cert.to_pem(), 0644, force, "certificate file");
}

std::string read_passphrase_file(const std::string& path) {
  auto content = detail::read_file(path, "passphrase file");
  auto end = content.find_first_of("\r\n");
  if (end != std::string::npos)
    content.resize(end);
  if (content.empty())
    throw tls_error(tls_errc::invalid_argument,
                    "passphrase file '" + path + "' is empty");
  return content;
}

ca_paths ca_paths_in(const std::string& dir) {
  return ca_paths{join(dir, "ca.crt"), join(dir, "ca.key")};
}

ca_paths init_ca(const std::string& dir, const ca_options& options,
                 const std::string& passphrase, bool force) {
  auto paths = ca_paths_in(dir);
  if (!force) {
    for (auto* p : {&paths.key, &paths.cert})
      if (detail::path_exists(*p))
        throw tls_error(tls_errc::exists,
                        "a CA already exists in '" + dir + "' ('" + *p +
                            "'); refusing to overwrite it (use --force)");
  }
  auto ca = create_ca(options);
  make_private_dir(dir);
  write_private_key(paths.key, ca.key, passphrase, force);
  write_certificate(paths.cert, ca.cert, force);
  return paths;
}

credential load_ca(const std::string& dir, const std::string& passphrase) {
  auto paths = ca_paths_in(dir);
  auto cert = certificate::load(paths.cert);
  auto key = private_key::load(paths.key, passphrase);
  if (!cert.is_ca())
    throw tls_error(tls_errc::wrong_usage,
                    "'" + paths.cert + "' is not a CA certificate");
  if (!cert.matches(key))
    throw tls_error(tls_errc::key_mismatch, "'" + paths.key +
                                                "' does not belong to '" +
                                                paths.cert + "'");
  check_validity(cert, "the CA certificate '" + paths.cert + "'");
  return credential{cert, key};
}

issued_paths issue_to_dir(const std::string& ca_dir,
                          const std::string& ca_passphrase,
                          const std::string& out_dir,
                          const cert_options& options,
                          const std::string& key_passphrase, bool force) {
  validate_name(options.name, std::string{to_string(options.role)} + " name");
  if (options.name == "ca")
    throw tls_error(tls_errc::invalid_argument,
                    "the name 'ca' is reserved for the CA files ca.crt and"
                    " ca.key");
  issued_paths paths{join(out_dir, options.name + ".crt"),
                     join(out_dir, options.name + ".key"),
                     join(out_dir, "ca.crt")};
  if (!force) {
    for (auto* p : {&paths.key, &paths.cert})
      if (detail::path_exists(*p))
        throw tls_error(tls_errc::exists, "refusing to overwrite existing '" +
                                              *p + "' (use --force)");
  }
  auto ca = load_ca(ca_dir, ca_passphrase);
  auto ca_pem = ca.cert.to_pem();
  bool write_ca_copy = true;
  if (detail::path_exists(paths.ca_cert)) {
    auto existing = detail::read_file(paths.ca_cert, "CA file");
    if (existing == ca_pem)
      write_ca_copy = false;
    else if (!force)
      throw tls_error(tls_errc::exists,
                      "'" + paths.ca_cert +
                          "' holds a different CA"
                          " certificate; refusing to overwrite it (use"
                          " --force)");
  }
  auto issued = issue_certificate(ca, options);
  make_private_dir(out_dir);
  write_private_key(paths.key, issued.key, key_passphrase, force);
  write_certificate(paths.cert, issued.cert, force);
  if (write_ca_copy)
    write_certificate(paths.ca_cert, ca.cert, force);
  return paths;
}

} // namespace exo::tls
