#pragma once

// Internal helpers of exo_tls: owning handles for OpenSSL objects, error
// queue draining and bounded file I/O. Not part of the public API.

#include <memory>
#include <string>
#include <string_view>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include "core/tls/tls_error.hpp"

namespace exo::tls::detail {

template<class T, void (*Free)(T*)>
struct openssl_deleter {
  void operator()(T* ptr) const noexcept { Free(ptr); }
};

using bio_ptr = std::unique_ptr<BIO, openssl_deleter<BIO, BIO_free_all>>;
using bn_ptr = std::unique_ptr<BIGNUM, openssl_deleter<BIGNUM, BN_free>>;
using md_ctx_ptr =
    std::unique_ptr<EVP_MD_CTX, openssl_deleter<EVP_MD_CTX, EVP_MD_CTX_free>>;
using pkey_ctx_ptr =
    std::unique_ptr<EVP_PKEY_CTX,
                    openssl_deleter<EVP_PKEY_CTX, EVP_PKEY_CTX_free>>;
using store_ptr =
    std::unique_ptr<X509_STORE, openssl_deleter<X509_STORE, X509_STORE_free>>;
using store_ctx_ptr =
    std::unique_ptr<X509_STORE_CTX,
                    openssl_deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;

/// Largest PEM file or string exo_tls accepts (certificates and keys are a
/// few KiB; anything bigger is not material).
constexpr size_t max_pem_size = 1 << 20;

/// Drains OpenSSL's thread-local error queue into one line of text. Leaving
/// stale errors behind would confuse later SSL_get_error calls (in CAF).
std::string drain_errors();

/// Throws a tls_error with `code`, appending the drained OpenSSL errors.
[[noreturn]] void fail(tls_errc code, const std::string& what);

/// Clears the OpenSSL error queue when leaving a scope.
struct error_queue_guard {
  ~error_queue_guard();
};

/// Returns a memory BIO reading `data` (the data must outlive it).
bio_ptr read_bio(std::string_view data);

/// Returns the bytes written into a memory BIO.
std::string bio_contents(BIO* bio);

/// Reads a regular file of at most `max_pem_size` bytes; `what` names it in
/// errors ("certificate file").
std::string read_file(const std::string& path, std::string_view what);

/// Returns whether `path` exists (as anything).
bool path_exists(const std::string& path);

/// Formats an ASN1_TIME as "2025-01-31 12:00:00 UTC".
std::string format_time(const ASN1_TIME* t);

} // namespace exo::tls::detail
