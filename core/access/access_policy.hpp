#pragma once

#include "core/access/permission.hpp"
#include "core/access/token.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace exo::access {

/// The answer to an access check.
struct decision {
  decision_code code = decision_code::malformed;
  /// Why it was refused (empty when allowed).
  std::string reason;
  /// The token's principal, when the token could be read.
  std::string principal;

  bool allowed() const noexcept { return code == decision_code::allow; }
  explicit operator bool() const noexcept { return allowed(); }
};

/// Settings of an `access_policy`.
struct access_config {
  /// The HMAC key shared with the token issuer (at least 32 bytes).
  std::string key;
  /// Default per-principal rate limit in operations per second (0: none).
  double rate_per_s = 0;
  /// Bucket size of the rate limit (at least 1 when a rate is set).
  double burst = 0;
  /// Tolerated clock skew for tokens issued "in the future", in seconds.
  std::int64_t clock_skew_s = 60;
  /// Verified tokens kept in the decision cache.
  std::size_t cache_capacity = 65536;
  /// Wall clock; defaults to the system clock. Injectable for tests.
  std::function<std::chrono::system_clock::time_point()> clock;
};

/// A principal's own rate limit (set_rate_limit).
struct rate_limit_info {
  std::string principal;
  double rate_per_s = 0; ///< 0: unlimited
  double burst = 0;
};

/// Checks bearer tokens: signature (constant time), expiry, revocation,
/// permission, device scope, per-principal quota and rate limit.
///
/// A verified token goes into a decision cache keyed by the token text, so
/// later checks skip the MAC and JSON work. Revocation bumps an epoch that
/// makes every cached entry re-check its revocation state on next use.
/// Not thread-safe: one owner (the access actor) calls it.
class access_policy {
public:
  /// Throws `std::invalid_argument` for a short key or a bad rate setting.
  explicit access_policy(access_config cfg);

  /// May the bearer of `token` perform `p` (on `device`, when not empty)?
  /// Allowed checks count against the principal's rate limit.
  decision check(const std::string& token, permission p,
                 std::string_view device = {});

  /// Checks `memory_allocate` on `device` and reserves `bytes` of the
  /// principal's quota; refused with `quota_exceeded` when over it.
  decision reserve(const std::string& token, std::string_view device,
                   std::uint64_t bytes);

  /// Gives back `bytes` reserved by `principal`; returns false (and clamps
  /// to zero) when more is released than was reserved.
  bool release(const std::string& principal, std::uint64_t bytes);

  /// Bytes `principal` holds now.
  std::uint64_t usage(const std::string& principal) const;

  /// Revokes one token; `expires_at` (Unix seconds) lets `sweep` forget the
  /// revocation once the token would have expired anyway.
  void revoke_token(const std::string& token_id, std::int64_t expires_at);

  /// Revokes every token of `principal` issued up to now.
  void revoke_principal(const std::string& principal);

  /// Revokes every token of `principal` issued up to `through` (Unix
  /// seconds); an earlier revocation through a later time stays.
  void revoke_principal(const std::string& principal, std::int64_t through);

  /// Overrides the rate limit of one principal (rate 0: unlimited).
  /// Throws `std::invalid_argument` for a negative rate or a burst below 1.
  void set_rate_limit(const std::string& principal, double rate_per_s,
                      double burst);

  /// The principals with their own rate limit, by name.
  std::vector<rate_limit_info> rate_limits() const;

  /// The default limit (access_config::rate_per_s, burst).
  rate_limit_info default_rate_limit() const {
    return {"*", cfg_.rate_per_s, cfg_.burst};
  }

  /// Drops expired cache entries and revocations of expired tokens, and
  /// forgets idle principals. Returns how many entries were dropped.
  std::size_t sweep();

  /// Verified tokens in the cache.
  std::size_t cache_size() const noexcept { return cache_.size(); }

private:
  struct principal_state {
    std::uint64_t used_bytes = 0;
    std::int64_t revoked_through = std::numeric_limits<std::int64_t>::min();
    double rate = 0;
    double burst = 0;
    bool custom_rate = false;
    double tokens = 0;
    std::chrono::system_clock::time_point last_refill{};
    bool bucket_started = false;
    std::size_t cache_refs = 0;
  };

  struct cache_entry {
    token_claims claims;
    permission_set perms;
    std::uint64_t epoch = 0;
    bool revoked = false;
    principal_state* principal = nullptr;
  };

  /// Hashes only the MAC at the end of a token: it is uniformly random.
  struct token_hash {
    std::size_t operator()(const std::string& token) const noexcept;
  };

  decision authorize(const std::string& token, permission p,
                     std::string_view device, cache_entry*& entry);
  cache_entry* lookup(const std::string& token, decision& out,
                      std::chrono::system_clock::time_point now);
  bool is_revoked(const token_claims& c, const principal_state& ps) const;
  principal_state& state_of(const std::string& principal);
  bool take_rate_token(principal_state& ps,
                       std::chrono::system_clock::time_point now);

  access_config cfg_;
  hmac_sha256 mac_;
  std::unordered_map<std::string, cache_entry, token_hash> cache_;
  std::unordered_map<std::string, principal_state> principals_;
  std::unordered_map<std::string, std::int64_t> revoked_ids_;
  std::uint64_t epoch_ = 0;
};

} // namespace exo::access
