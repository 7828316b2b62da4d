#include "core/tls/private_key.hpp"

#include <cstring>

#include <openssl/ec.h>
#include <openssl/pem.h>

#include "core/tls/openssl_util.hpp"
#include "core/tls/tls_error.hpp"

namespace exo::tls {

namespace {

/// State of the password callback: it never prompts, it only hands out the
/// configured passphrase and records that one was needed.
struct password_state {
  const std::string* passphrase;
  bool asked = false;
};

int password_callback(char* buf, int size, int, void* user_data) {
  auto* state = static_cast<password_state*>(user_data);
  state->asked = true;
  if (state->passphrase->empty())
    return -1;
  auto len = state->passphrase->size();
  if (len > static_cast<size_t>(size))
    return -1;
  std::memcpy(buf, state->passphrase->data(), len);
  return static_cast<int>(len);
}

std::shared_ptr<EVP_PKEY> own(EVP_PKEY* key) {
  return std::shared_ptr<EVP_PKEY>{key, EVP_PKEY_free};
}

} // namespace

private_key private_key::generate(key_algorithm algorithm) {
  detail::error_queue_guard guard;
  EVP_PKEY* key = nullptr;
  switch (algorithm) {
  case key_algorithm::ec_p256:
    key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
    break;
  case key_algorithm::ed25519:
    key = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
    break;
  }
  if (key == nullptr)
    detail::fail(tls_errc::internal, "cannot generate a private key");
  return private_key{own(key)};
}

private_key private_key::from_pem(std::string_view pem,
                                  const std::string& passphrase,
                                  std::string_view origin) {
  detail::error_queue_guard guard;
  auto name = std::string{origin};
  if (pem.find("-----BEGIN ") == std::string_view::npos)
    throw tls_error(tls_errc::not_pem, name + " is not PEM (no BEGIN line)");
  if (pem.find("PRIVATE KEY-----") == std::string_view::npos)
    throw tls_error(tls_errc::not_pem,
                    name + " holds no PEM private key (is it a certificate?)");
  auto bio = detail::read_bio(pem);
  password_state state{&passphrase};
  auto* key =
      PEM_read_bio_PrivateKey(bio.get(), nullptr, password_callback, &state);
  if (key == nullptr) {
    auto details = detail::drain_errors();
    if (state.asked && passphrase.empty())
      throw tls_error(tls_errc::passphrase_required,
                      name + " is encrypted and needs a passphrase, but none"
                             " was given");
    if (state.asked)
      throw tls_error(tls_errc::bad_passphrase, "wrong passphrase for " + name);
    throw tls_error(
        tls_errc::not_pem,
        name + " is not a valid PEM private key" +
            (details.empty() ? std::string{} : " (OpenSSL: " + details + ")"));
  }
  return private_key{own(key)};
}

private_key private_key::load(const std::string& path,
                              const std::string& passphrase) {
  auto pem = detail::read_file(path, "key file");
  return from_pem(pem, passphrase, "key file '" + path + "'");
}

std::string private_key::to_pem(const std::string& passphrase) const {
  detail::error_queue_guard guard;
  detail::bio_ptr bio{BIO_new(BIO_s_mem())};
  if (!bio)
    detail::fail(tls_errc::internal, "cannot allocate a memory BIO");
  int ok;
  if (passphrase.empty()) {
    ok = PEM_write_bio_PKCS8PrivateKey(bio.get(), key_.get(), nullptr, nullptr,
                                       0, nullptr, nullptr);
  } else {
    // The passphrase goes in as a buffer, never through a prompt.
    std::string pass = passphrase;
    ok = PEM_write_bio_PKCS8PrivateKey(
        bio.get(), key_.get(), EVP_aes_256_cbc(), pass.data(),
        static_cast<int>(pass.size()), nullptr, nullptr);
  }
  if (ok != 1)
    detail::fail(tls_errc::internal, "cannot encode the private key as PEM");
  return detail::bio_contents(bio.get());
}

std::string private_key::algorithm_name() const {
  return describe_key(key_.get());
}

bool is_encrypted_key_pem(std::string_view pem) {
  return pem.find("-----BEGIN ENCRYPTED PRIVATE KEY-----") !=
             std::string_view::npos ||
         pem.find("Proc-Type: 4,ENCRYPTED") != std::string_view::npos;
}

std::string describe_key(const EVP_PKEY* key) {
  if (key == nullptr)
    return "(no key)";
  if (EVP_PKEY_is_a(key, "ED25519"))
    return "Ed25519";
  if (EVP_PKEY_is_a(key, "EC")) {
    char group[80] = {0};
    size_t len = 0;
    if (EVP_PKEY_get_utf8_string_param(key, "group", group, sizeof(group),
                                       &len) == 1) {
      std::string name{group, len};
      if (name == "prime256v1")
        name = "P-256";
      return "EC " + name;
    }
    return "EC";
  }
  if (EVP_PKEY_is_a(key, "RSA"))
    return "RSA " + std::to_string(EVP_PKEY_get_bits(key));
  auto* name = EVP_PKEY_get0_type_name(key);
  return name != nullptr ? name : "unknown";
}

} // namespace exo::tls
