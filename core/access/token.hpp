#pragma once

#include "core/access/permission.hpp"

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

// Forward declaration of OpenSSL's MAC context.
struct evp_mac_ctx_st;

namespace exo::access {

/// Quota value meaning "no limit".
inline constexpr std::uint64_t unlimited_quota =
  std::numeric_limits<std::uint64_t>::max();

/// What a bearer token grants.
struct token_claims {
  /// Unique token id (for revocation).
  std::string id;
  /// Who holds it.
  std::string principal;
  role granted_role = role::user;
  /// Permissions on top of the role's.
  permission_set extra;
  /// Device ids the token may touch; ignored when `all_devices`.
  std::vector<std::string> devices;
  bool all_devices = false;
  /// Device memory the principal may hold at once.
  std::uint64_t quota_bytes = unlimited_quota;
  /// Seconds since the Unix epoch.
  std::int64_t issued_at = 0;
  std::int64_t expires_at = 0;

  /// The role's permissions plus the extra ones.
  permission_set permissions() const noexcept {
    return role_permissions(granted_role) | extra;
  }

  /// Whether `device` is in scope.
  bool allows_device(std::string_view device) const noexcept;
};

/// Outcome of an access check. Every refusal has its own code.
enum class decision_code : std::uint8_t {
  allow,
  malformed,          ///< not a well-formed exo token
  truncated,          ///< a part of the token is missing or cut short
  bad_version,        ///< a token format this build does not know
  bad_signature,      ///< the MAC does not match: forged or altered
  expired,
  not_yet_valid,      ///< issued in the future (beyond the clock skew)
  revoked,
  permission_denied,
  device_out_of_scope,
  quota_exceeded,
  rate_limited,
};

std::string_view to_string(decision_code c) noexcept;

/// HMAC-SHA256 with a fixed key (OpenSSL EVP_MAC). The keyed context is set
/// up once and duplicated per use. Thread-safe for concurrent `mac` calls.
class hmac_sha256 {
public:
  /// Throws `std::invalid_argument` for a key shorter than 32 bytes and
  /// `std::runtime_error` when OpenSSL cannot provide HMAC-SHA256.
  explicit hmac_sha256(std::string_view key);
  ~hmac_sha256();
  hmac_sha256(const hmac_sha256&) = delete;
  hmac_sha256& operator=(const hmac_sha256&) = delete;

  std::array<std::uint8_t, 32> mac(std::string_view data) const;

private:
  evp_mac_ctx_st* keyed_;
};

/// Token format, version 1:
///
///   "exo1." base64url(payload JSON) "." base64url(HMAC-SHA256(key, prefix))
///
/// where prefix is everything before the second '.', and the payload is
///
///   {"v":1,"jti":"..","sub":"..","role":"user","perms":["p2p_copy"],
///    "dev":"*" or ["gpu0",..],"quota":N,"iat":N,"exp":N}
///
/// ("quota" is omitted when unlimited).
inline constexpr std::string_view token_prefix = "exo1.";

/// Signs tokens. Throws `std::invalid_argument` for a short key or invalid
/// claims (empty id or principal, expiry not after issue).
class token_issuer {
public:
  explicit token_issuer(std::string_view key);

  std::string issue(const token_claims& claims) const;

private:
  hmac_sha256 mac_;
};

/// A token checked for format and signature (not for time or revocation).
struct decoded_token {
  decision_code code = decision_code::malformed;
  std::string reason;
  token_claims claims;
};

/// Checks the format and the MAC (in constant time) before parsing the
/// payload; never throws for bad input.
decoded_token decode_token(std::string_view token, const hmac_sha256& mac);

} // namespace exo::access
