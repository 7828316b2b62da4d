#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

// Forward declarations of OpenSSL types, so that users need no OpenSSL headers.
struct evp_md_st;
struct evp_md_ctx_st;

namespace exo::audit {

/// A 32-byte SHA-256 digest.
using digest = std::array<std::uint8_t, 32>;

/// The `prev` of the very first record of a chain: 64 zeros.
inline constexpr std::string_view genesis_hash =
  "0000000000000000000000000000000000000000000000000000000000000000";

/// Reusable SHA-256 hasher on OpenSSL's EVP interface. The digest is fetched
/// once, so hashing many small records costs no per-call lookup. Not
/// thread-safe; use one per thread.
class sha256 {
public:
  /// Throws `std::runtime_error` when OpenSSL cannot provide SHA-256.
  sha256();
  ~sha256();
  sha256(const sha256&) = delete;
  sha256& operator=(const sha256&) = delete;

  /// Returns the digest of `data`.
  digest hash(std::string_view data);

  /// Returns the lower-case hex digest of `data` (64 characters).
  std::string hex(std::string_view data);

private:
  evp_md_st* md_;
  evp_md_ctx_st* ctx_;
};

/// Appends the lower-case hex form of `bytes` to `out`.
void append_hex(std::string& out, const std::uint8_t* bytes, std::size_t n);

/// Returns whether `s` is exactly 64 lower-case hex digits.
bool is_hex_digest(std::string_view s) noexcept;

} // namespace exo::audit
