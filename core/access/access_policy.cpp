#include "core/access/access_policy.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace exo::access {

namespace {

using clock_type = std::chrono::system_clock;

std::int64_t unix_seconds(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch())
    .count();
}

decision make(decision_code code, std::string reason,
              const std::string& principal = {}) {
  decision d;
  d.code = code;
  d.reason = std::move(reason);
  d.principal = principal;
  return d;
}

void check_rate(double rate, double burst) {
  if (!std::isfinite(rate) || rate < 0)
    throw std::invalid_argument("rate limit must be >= 0 per second");
  if (rate > 0 && !(std::isfinite(burst) && burst >= 1))
    throw std::invalid_argument("rate limit burst must be >= 1");
}

} // namespace

std::size_t
access_policy::token_hash::operator()(const std::string& t) const noexcept {
  auto n = t.size() < 24 ? t.size() : 24;
  return std::hash<std::string_view>{}(
    std::string_view{t.data() + t.size() - n, n});
}

access_policy::access_policy(access_config cfg)
  : cfg_(std::move(cfg)), mac_(cfg_.key) {
  check_rate(cfg_.rate_per_s, cfg_.burst);
  if (cfg_.clock_skew_s < 0)
    throw std::invalid_argument("clock skew must be >= 0 seconds");
  if (cfg_.cache_capacity == 0)
    throw std::invalid_argument("decision cache capacity must be >= 1");
  if (!cfg_.clock)
    cfg_.clock = [] { return clock_type::now(); };
}

access_policy::principal_state&
access_policy::state_of(const std::string& principal) {
  auto [it, added] = principals_.try_emplace(principal);
  if (added) {
    it->second.rate = cfg_.rate_per_s;
    it->second.burst = cfg_.burst;
  }
  return it->second;
}

bool access_policy::is_revoked(const token_claims& c,
                               const principal_state& ps) const {
  return c.issued_at <= ps.revoked_through || revoked_ids_.count(c.id) > 0;
}

access_policy::cache_entry*
access_policy::lookup(const std::string& token, decision& out,
                      clock_type::time_point now) {
  auto it = cache_.find(token);
  if (it == cache_.end()) {
    auto decoded = decode_token(token, mac_);
    if (decoded.code != decision_code::allow) {
      out = make(decoded.code, std::move(decoded.reason));
      return nullptr;
    }
    auto secs = unix_seconds(now);
    if (decoded.claims.issued_at > secs + cfg_.clock_skew_s) {
      out = make(decision_code::not_yet_valid,
                 "token issued in the future (at "
                   + std::to_string(decoded.claims.issued_at) + ", now "
                   + std::to_string(secs) + ")",
                 decoded.claims.principal);
      return nullptr;
    }
    if (cache_.size() >= cfg_.cache_capacity) {
      sweep();
      if (cache_.size() >= cfg_.cache_capacity) {
        for (auto& kv : cache_)
          --kv.second.principal->cache_refs;
        cache_.clear();
      }
    }
    cache_entry entry;
    entry.perms = decoded.claims.permissions();
    entry.principal = &state_of(decoded.claims.principal);
    entry.claims = std::move(decoded.claims);
    entry.epoch = epoch_;
    entry.revoked = is_revoked(entry.claims, *entry.principal);
    ++entry.principal->cache_refs;
    it = cache_.emplace(token, std::move(entry)).first;
  }
  auto& e = it->second;
  if (e.epoch != epoch_) {
    e.revoked = is_revoked(e.claims, *e.principal);
    e.epoch = epoch_;
  }
  return &e;
}

decision access_policy::authorize(const std::string& token, permission p,
                                  std::string_view device,
                                  cache_entry*& entry) {
  auto now = cfg_.clock();
  decision out;
  entry = lookup(token, out, now);
  if (entry == nullptr)
    return out;
  auto& c = entry->claims;
  if (unix_seconds(now) >= c.expires_at)
    return make(decision_code::expired,
                "token expired at " + std::to_string(c.expires_at),
                c.principal);
  if (entry->revoked)
    return make(decision_code::revoked, "token " + c.id + " was revoked",
                c.principal);
  if (!entry->perms.contains(p))
    return make(decision_code::permission_denied,
                "role " + std::string{to_string(c.granted_role)}
                  + " lacks permission " + std::string{to_string(p)},
                c.principal);
  if (!device.empty() && !c.allows_device(device))
    return make(decision_code::device_out_of_scope,
                "device " + std::string{device} + " is outside the token's "
                                                  "scope",
                c.principal);
  if (!take_rate_token(*entry->principal, now))
    return make(decision_code::rate_limited,
                "rate limit of " + std::to_string(entry->principal->rate)
                  + " operations/s exceeded",
                c.principal);
  out.code = decision_code::allow;
  out.principal = c.principal;
  return out;
}

bool access_policy::take_rate_token(principal_state& ps,
                                    clock_type::time_point now) {
  if (ps.rate <= 0)
    return true;
  if (!ps.bucket_started) {
    ps.bucket_started = true;
    ps.tokens = ps.burst;
    ps.last_refill = now;
  } else if (now > ps.last_refill) {
    std::chrono::duration<double> dt = now - ps.last_refill;
    ps.tokens = std::min(ps.burst, ps.tokens + dt.count() * ps.rate);
    ps.last_refill = now;
  }
  if (ps.tokens < 1)
    return false;
  ps.tokens -= 1;
  return true;
}

decision access_policy::check(const std::string& token, permission p,
                              std::string_view device) {
  cache_entry* entry = nullptr;
  return authorize(token, p, device, entry);
}

decision access_policy::reserve(const std::string& token,
                                std::string_view device, std::uint64_t bytes) {
  cache_entry* entry = nullptr;
  auto d = authorize(token, permission::memory_allocate, device, entry);
  if (!d)
    return d;
  auto& ps = *entry->principal;
  auto quota = entry->claims.quota_bytes;
  if (bytes > quota || ps.used_bytes > quota - bytes)
    return make(decision_code::quota_exceeded,
                "allocation of " + std::to_string(bytes) + " bytes exceeds "
                  + "the quota of " + std::to_string(quota) + " bytes ("
                  + std::to_string(ps.used_bytes) + " in use)",
                d.principal);
  ps.used_bytes += bytes;
  return d;
}

bool access_policy::release(const std::string& principal,
                            std::uint64_t bytes) {
  auto it = principals_.find(principal);
  if (it == principals_.end())
    return bytes == 0;
  auto& used = it->second.used_bytes;
  if (bytes > used) {
    used = 0;
    return false;
  }
  used -= bytes;
  return true;
}

std::uint64_t access_policy::usage(const std::string& principal) const {
  auto it = principals_.find(principal);
  return it == principals_.end() ? 0 : it->second.used_bytes;
}

void access_policy::revoke_token(const std::string& token_id,
                                 std::int64_t expires_at) {
  auto& until = revoked_ids_[token_id];
  until = std::max(until, expires_at);
  ++epoch_;
}

void access_policy::revoke_principal(const std::string& principal) {
  revoke_principal(principal, unix_seconds(cfg_.clock()));
}

void access_policy::revoke_principal(const std::string& principal,
                                     std::int64_t through) {
  auto& ps = state_of(principal);
  ps.revoked_through = std::max(ps.revoked_through, through);
  ++epoch_;
}

void access_policy::set_rate_limit(const std::string& principal,
                                   double rate_per_s, double burst) {
  check_rate(rate_per_s, burst);
  auto& ps = state_of(principal);
  ps.rate = rate_per_s;
  ps.burst = burst;
  ps.custom_rate = true;
  ps.bucket_started = false;
}

std::vector<rate_limit_info> access_policy::rate_limits() const {
  std::vector<rate_limit_info> out;
  for (auto& [name, ps] : principals_)
    if (ps.custom_rate)
      out.push_back({name, ps.rate, ps.burst});
  std::sort(out.begin(), out.end(),
            [](const rate_limit_info& a, const rate_limit_info& b) {
              return a.principal < b.principal;
            });
  return out;
}

std::size_t access_policy::sweep() {
  auto now = unix_seconds(cfg_.clock());
  std::size_t dropped = 0;
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (now >= it->second.claims.expires_at) {
      --it->second.principal->cache_refs;
      it = cache_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  for (auto it = revoked_ids_.begin(); it != revoked_ids_.end();) {
    if (now >= it->second) {
      it = revoked_ids_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  // A principal's revocation matters only while one of its older tokens can
  // still be valid; without the tokens we cannot tell, so it is kept.
  for (auto it = principals_.begin(); it != principals_.end();) {
    auto& ps = it->second;
    bool idle = ps.cache_refs == 0 && ps.used_bytes == 0 && !ps.custom_rate
                && ps.revoked_through
                     == std::numeric_limits<std::int64_t>::min();
    if (idle) {
      it = principals_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

} // namespace exo::access
