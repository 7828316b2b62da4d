#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <openssl/evp.h>

namespace exo::tls {

/// The key types exo creates. P-256 with ECDSA-SHA256 is the default: CAF's
/// OpenSSL middleman (TLS 1.3, OpenSSL 3) accepts it on every build.
enum class key_algorithm {
  ec_p256,
  ed25519,
};

/// An asymmetric private key (shared, immutable OpenSSL EVP_PKEY).
///
/// An empty passphrase means "no passphrase" everywhere, as in CAF's
/// `openssl.passphrase`. Loading never prompts on the terminal: an encrypted
/// key without a passphrase is an error.
class private_key {
 public:
  /// Generates a fresh key.
  static private_key generate(key_algorithm algorithm = key_algorithm::ec_p256);

  /// Parses a PEM private key; `origin` names it in errors.
  /// @throws tls_error not_pem, passphrase_required or bad_passphrase.
  static private_key from_pem(std::string_view pem,
                              const std::string& passphrase = {},
                              std::string_view origin = "private key");

  /// Reads and parses a PEM private key file.
  /// @throws tls_error io, not_pem, passphrase_required or bad_passphrase.
  static private_key load(const std::string& path,
                          const std::string& passphrase = {});

  /// Returns the key as PKCS#8 PEM, encrypted with AES-256-CBC (PBKDF2)
  /// when `passphrase` is not empty.
  std::string to_pem(const std::string& passphrase = {}) const;

  /// Returns "EC P-256", "Ed25519", ... for people.
  std::string algorithm_name() const;

  /// Returns the underlying OpenSSL key (still owned by this object).
  EVP_PKEY* native() const noexcept { return key_.get(); }

 private:
  explicit private_key(std::shared_ptr<EVP_PKEY> key) : key_(std::move(key)) {
    // nop
  }

  std::shared_ptr<EVP_PKEY> key_;
};

/// Returns whether PEM text holds an encrypted private key.
bool is_encrypted_key_pem(std::string_view pem);

/// Returns a name for the algorithm of any OpenSSL key ("EC P-256").
std::string describe_key(const EVP_PKEY* key);

} // namespace exo::tls
