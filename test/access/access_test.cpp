#include "core/access/access_policy.hpp"
#include "core/access/audit_event.hpp"
#include "core/access/base64url.hpp"
#include "core/access/permission.hpp"
#include "core/access/token.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <set>

using namespace exo::access;
using namespace std::chrono_literals;

namespace {

const std::string key = "0123456789abcdef0123456789abcdef-test-key";

constexpr std::int64_t t0 = 1700000000;

/// A settable clock shared between the test and the policy.
struct fake_clock {
  std::shared_ptr<std::chrono::system_clock::time_point> now =
    std::make_shared<std::chrono::system_clock::time_point>(
      std::chrono::seconds{t0});
  std::function<std::chrono::system_clock::time_point()> fn() const {
    auto p = now;
    return [p] { return *p; };
  }
  void advance(std::chrono::milliseconds d) { *now += d; }
};

token_claims claims_for(role r, std::string principal = "alice") {
  token_claims c;
  c.id = "tok-" + principal + "-" + std::string{to_string(r)};
  c.principal = std::move(principal);
  c.granted_role = r;
  c.all_devices = true;
  c.issued_at = t0;
  c.expires_at = t0 + 3600;
  return c;
}

access_config config(const fake_clock& clock) {
  access_config cfg;
  cfg.key = key;
  cfg.clock = clock.fn();
  return cfg;
}

} // namespace

TEST_CASE("the full role by permission matrix") {
  using p = permission;
  // Expected grants, row by row: monitor, user, power_user, admin.
  const std::set<p> monitor{p::device_list, p::device_info, p::monitoring_read,
                            p::thermal_read};
  std::set<p> user = monitor;
  user.insert({p::memory_allocate, p::memory_free, p::memory_copy,
               p::compute_run, p::compute_sync, p::job_submit, p::job_cancel});
  std::set<p> power = user;
  power.insert({p::p2p_copy, p::audit_read});
  const std::set<p>* expected[] = {&monitor, &user, &power, nullptr};
  fake_clock clock;
  token_issuer issuer{key};
  access_policy policy{config(clock)};
  for (std::size_t ri = 0; ri < role_count; ++ri) {
    auto r = static_cast<role>(ri);
    auto token = issuer.issue(claims_for(r));
    for (std::size_t pi = 0; pi < permission_count; ++pi) {
      auto perm = static_cast<permission>(pi);
      bool want = expected[ri] == nullptr || expected[ri]->count(perm) > 0;
      INFO("role " << to_string(r) << ", permission " << to_string(perm));
      CHECK(role_permissions(r).contains(perm) == want);
      auto d = policy.check(token, perm, "gpu0");
      CHECK(d.allowed() == want);
      if (!want) {
        CHECK(d.code == decision_code::permission_denied);
        CHECK_THAT(d.reason, Catch::Contains(std::string{to_string(perm)}));
      }
    }
  }
}

TEST_CASE("extra permissions in a token add to its role") {
  fake_clock clock;
  token_issuer issuer{key};
  access_policy policy{config(clock)};
  auto c = claims_for(role::user);
  c.extra = {permission::p2p_copy};
  auto token = issuer.issue(c);
  CHECK(policy.check(token, permission::p2p_copy).allowed());
  CHECK_FALSE(policy.check(token, permission::audit_read).allowed());
}

TEST_CASE("a valid token round-trips all its claims") {
  token_issuer issuer{key};
  hmac_sha256 mac{key};
  token_claims c;
  c.id = "id-\"7\"";
  c.principal = "bob";
  c.granted_role = role::power_user;
  c.extra = {permission::policy_admin};
  c.devices = {"gpu0", "node2/gpu1"};
  c.quota_bytes = 1ull << 33;
  c.issued_at = t0;
  c.expires_at = t0 + 60;
  auto token = issuer.issue(c);
  CHECK(token.rfind("exo1.", 0) == 0);
  auto d = decode_token(token, mac);
  REQUIRE(d.code == decision_code::allow);
  CHECK(d.claims.id == c.id);
  CHECK(d.claims.principal == "bob");
  CHECK(d.claims.granted_role == role::power_user);
  CHECK(d.claims.extra == c.extra);
  CHECK(d.claims.devices == c.devices);
  CHECK_FALSE(d.claims.all_devices);
  CHECK(d.claims.quota_bytes == c.quota_bytes);
  CHECK(d.claims.issued_at == t0);
  CHECK(d.claims.expires_at == t0 + 60);
  c.quota_bytes = unlimited_quota;
  CHECK(decode_token(issuer.issue(c), mac).claims.quota_bytes
        == unlimited_quota);
}

TEST_CASE("expired tokens are refused") {
  fake_clock clock;
  token_issuer issuer{key};
  access_policy policy{config(clock)};
  auto token = issuer.issue(claims_for(role::admin));
  CHECK(policy.check(token, permission::device_list).allowed());
  clock.advance(3600s);
  auto d = policy.check(token, permission::device_list);
  CHECK(d.code == decision_code::expired);
  CHECK_THAT(d.reason, Catch::Contains("expired"));
  CHECK(d.principal == "alice");
}

TEST_CASE("tokens issued in the future are refused") {
  fake_clock clock;
  token_issuer issuer{key};
  access_policy policy{config(clock)};
  auto c = claims_for(role::admin);
  c.issued_at = t0 + 600;
  c.expires_at = t0 + 7200;
  CHECK(policy.check(issuer.issue(c), permission::device_list).code
        == decision_code::not_yet_valid);
}

TEST_CASE("a revoked token is refused, also from the cache") {
  fake_clock clock;
  token_issuer issuer{key};
  access_policy policy{config(clock)};
  auto c = claims_for(role::user);
  auto token = issuer.issue(c);
  auto other = issuer.issue(claims_for(role::user, "carol"));
  CHECK(policy.check(token, permission::compute_run).allowed());
  policy.revoke_token(c.id, c.expires_at);
  auto d = policy.check(token, permission::compute_run);
  CHECK(d.code == decision_code::revoked);
  CHECK_THAT(d.reason, Catch::Contains(c.id));
  CHECK(policy.check(other, permission::compute_run).allowed());
}

TEST_CASE("revoking a principal stops all its current tokens") {
  fake_clock clock;
  token_issuer issuer{key};
  access_policy policy{config(clock)};
  auto a1 = claims_for(role::user);
  auto a2 = claims_for(role::admin);
  auto t1 = issuer.issue(a1);
  auto t2 = issuer.issue(a2);
  CHECK(policy.check(t1, permission::compute_run).allowed());
  policy.revoke_principal("alice");
  CHECK(policy.check(t1, permission::compute_run).code
        == decision_code::revoked);
  CHECK(policy.check(t2, permission::device_list).code
        == decision_code::revoked);
  // A token issued after the revocation works.
  clock.advance(2s);
  auto fresh = claims_for(role::user);
  fresh.id = "tok-fresh";
  fresh.issued_at = t0 + 2;
  CHECK(policy.check(issuer.issue(fresh), permission::compute_run).allowed());
}

TEST_CASE("forged, truncated and garbage tokens are refused with distinct "
          "reasons") {
  fake_clock clock;
  token_issuer issuer{key};
  token_issuer other_issuer{std::string(40, 'k')};
  access_policy policy{config(clock)};
  auto c = claims_for(role::user);
  auto token = issuer.issue(c);
  auto dot = token.rfind('.');

  // A token signed with another key.
  auto foreign = policy.check(other_issuer.issue(c), permission::device_list);
  CHECK(foreign.code == decision_code::bad_signature);

  // A flipped bit in the MAC.
  auto bad_mac = token;
  bad_mac[dot + 5] = bad_mac[dot + 5] == 'A' ? 'B' : 'A';
  auto d1 = policy.check(bad_mac, permission::device_list);
  CHECK(d1.code == decision_code::bad_signature);

  // A payload changed to claim admin, keeping the old MAC.
  auto admin = claims_for(role::admin);
  admin.id = c.id;
  auto admin_token = issuer.issue(admin);
  auto changed = admin_token.substr(0, admin_token.rfind('.'))
                 + token.substr(dot);
  auto d2 = policy.check(changed, permission::policy_admin);
  CHECK(d2.code == decision_code::bad_signature);
  CHECK_THAT(d2.reason, Catch::Contains("forged or altered"));

  // Truncated: signature cut short, signature gone, payload cut.
  auto d3 = policy.check(token.substr(0, token.size() - 10),
                         permission::device_list);
  CHECK(d3.code == decision_code::truncated);
  CHECK_THAT(d3.reason, Catch::Contains("signature has"));
  auto d4 = policy.check(token.substr(0, dot), permission::device_list);
  CHECK(d4.code == decision_code::truncated);
  CHECK_THAT(d4.reason, Catch::Contains("no signature"));
  auto d5 = policy.check(token.substr(0, 4), permission::device_list);
  CHECK(d5.code == decision_code::truncated);

  // Garbage.
  for (std::string junk : {std::string{}, std::string{"hello"},
                           std::string{"Bearer abc.def.ghi"},
                           std::string("exo1.\0\xff.\x01", 9),
                           std::string(20000, 'a'),
                           std::string{"exo1.!!!.???"}}) {
    auto d = policy.check(junk, permission::device_list);
    INFO(junk.substr(0, 40));
    CHECK(d.code == decision_code::malformed);
    CHECK_FALSE(d.reason.empty());
  }
  auto v2 = policy.check("exo2" + token.substr(4), permission::device_list);
  CHECK(v2.code == decision_code::bad_version);

  // All refusals differ in their reasons.
  std::set<std::string> reasons{foreign.reason, d3.reason, d4.reason,
                                v2.reason};
  CHECK(reasons.size() == 4);
  CHECK(policy.cache_size() == 0); // bad tokens never enter the cache
}

TEST_CASE("a correctly signed but invalid payload is refused as malformed") {
  hmac_sha256 mac{key};
  auto payload = base64url_encode("{\"v\":1,\"jti\":\"x\",\"sub\":\"a\","
                                  "\"role\":\"emperor\",\"perms\":[],"
                                  "\"dev\":\"*\",\"iat\":1,\"exp\":2}");
  std::string head = "exo1." + payload;
  auto sig = mac.mac(head);
  auto token = head + "."
               + base64url_encode(std::string_view{
                 reinterpret_cast<const char*>(sig.data()), sig.size()});
  auto d = decode_token(token, mac);
  CHECK(d.code == decision_code::malformed);
  CHECK_THAT(d.reason, Catch::Contains("unknown role \"emperor\""));
}

TEST_CASE("device scope limits which devices a token may touch") {
  fake_clock clock;
  token_issuer issuer{key};
  access_policy policy{config(clock)};
  auto c = claims_for(role::user);
  c.all_devices = false;
  c.devices = {"gpu0", "gpu2"};
  auto token = issuer.issue(c);
  CHECK(policy.check(token, permission::compute_run, "gpu0").allowed());
  CHECK(policy.check(token, permission::compute_run, "gpu2").allowed());
  auto d = policy.check(token, permission::compute_run, "gpu1");
  CHECK(d.code == decision_code::device_out_of_scope);
  CHECK_THAT(d.reason, Catch::Contains("gpu1"));
  // Operations that name no device are not scoped.
  CHECK(policy.check(token, permission::device_list).allowed());
  auto star = issuer.issue(claims_for(role::user, "dave"));
  CHECK(policy.check(star, permission::compute_run, "gpu9").allowed());
}

TEST_CASE("allocations over the quota are refused and releases free it") {
  fake_clock clock;
  token_issuer issuer{key};
  access_policy policy{config(clock)};
  auto c = claims_for(role::user);
  c.quota_bytes = 1000;
  auto token = issuer.issue(c);
  CHECK(policy.reserve(token, "gpu0", 600).allowed());
  CHECK(policy.usage("alice") == 600);
  auto d = policy.reserve(token, "gpu0", 500);
  CHECK(d.code == decision_code::quota_exceeded);
  CHECK_THAT(d.reason, Catch::Contains("quota of 1000"));
  CHECK(policy.usage("alice") == 600);
  CHECK(policy.reserve(token, "gpu1", 400).allowed());
  CHECK(policy.usage("alice") == 1000);
  CHECK(policy.reserve(token, "gpu0", 1).code
        == decision_code::quota_exceeded);
  CHECK(policy.release("alice", 700));
  CHECK(policy.reserve(token, "gpu0", 700).allowed());
  CHECK_FALSE(policy.release("alice", 5000)); // more than reserved
  CHECK(policy.usage("alice") == 0);
  CHECK(policy.reserve(token, "gpu0", UINT64_MAX).code
        == decision_code::quota_exceeded);
  // Reserving needs memory_allocate.
  auto mon = issuer.issue(claims_for(role::monitor, "eve"));
  CHECK(policy.reserve(mon, "gpu0", 1).code
        == decision_code::permission_denied);
}

TEST_CASE("a per-principal rate limit refuses bursts and refills over time") {
  fake_clock clock;
  auto cfg = config(clock);
  cfg.rate_per_s = 10;
  cfg.burst = 5;
  token_issuer issuer{key};
  access_policy policy{cfg};
  auto token = issuer.issue(claims_for(role::user));
  auto other = issuer.issue(claims_for(role::user, "bob"));
  for (int i = 0; i < 5; ++i)
    CHECK(policy.check(token, permission::compute_run).allowed());
  auto d = policy.check(token, permission::compute_run);
  CHECK(d.code == decision_code::rate_limited);
  CHECK_THAT(d.reason, Catch::Contains("rate limit"));
  // Another principal has a bucket of its own.
  CHECK(policy.check(other, permission::compute_run).allowed());
  clock.advance(200ms); // refills two
  CHECK(policy.check(token, permission::compute_run).allowed());
  CHECK(policy.check(token, permission::compute_run).allowed());
  CHECK(policy.check(token, permission::compute_run).code
        == decision_code::rate_limited);
  // An override for one principal.
  policy.set_rate_limit("alice", 0, 0);
  for (int i = 0; i < 50; ++i)
    CHECK(policy.check(token, permission::compute_run).allowed());
  CHECK_THROWS_AS(policy.set_rate_limit("alice", -1, 1),
                  std::invalid_argument);
  CHECK_THROWS_AS(policy.set_rate_limit("alice", 5, 0.5),
                  std::invalid_argument);
}

TEST_CASE("expired cache entries and revocations are swept") {
  fake_clock clock;
  token_issuer issuer{key};
  access_policy policy{config(clock)};
  auto shortlived = claims_for(role::user, "frank");
  shortlived.expires_at = t0 + 10;
  auto longlived = claims_for(role::user, "grace");
  auto ts = issuer.issue(shortlived);
  auto tl = issuer.issue(longlived);
  CHECK(policy.check(ts, permission::compute_run).allowed());
  CHECK(policy.check(tl, permission::compute_run).allowed());
  policy.revoke_token(shortlived.id, shortlived.expires_at);
  CHECK(policy.cache_size() == 2);
  CHECK(policy.sweep() == 0);
  clock.advance(11s);
  CHECK(policy.sweep() >= 2); // the cache entry and the revocation
  CHECK(policy.cache_size() == 1);
  CHECK(policy.check(ts, permission::compute_run).code
        == decision_code::expired);
  CHECK(policy.check(tl, permission::compute_run).allowed());
}

TEST_CASE("a full decision cache makes room instead of growing") {
  fake_clock clock;
  auto cfg = config(clock);
  cfg.cache_capacity = 4;
  token_issuer issuer{key};
  access_policy policy{cfg};
  for (int i = 0; i < 10; ++i) {
    auto token = issuer.issue(claims_for(role::user, "p" + std::to_string(i)));
    CHECK(policy.check(token, permission::compute_run).allowed());
    CHECK(policy.cache_size() <= 4);
  }
}

TEST_CASE("short keys and invalid claims are refused") {
  CHECK_THROWS_AS(token_issuer{"short"}, std::invalid_argument);
  access_config cfg;
  cfg.key = "short";
  CHECK_THROWS_AS(access_policy{cfg}, std::invalid_argument);
  token_issuer issuer{key};
  auto c = claims_for(role::user);
  c.expires_at = c.issued_at;
  CHECK_THROWS_AS(issuer.issue(c), std::invalid_argument);
  c = claims_for(role::user, "");
  CHECK_THROWS_AS(issuer.issue(c), std::invalid_argument);
}

TEST_CASE("base64url decoding is strict") {
  for (std::string s : {"", "f", "fo", "foo", "foob", "fooba", "foobar"})
    CHECK(base64url_decode(base64url_encode(s)) == s);
  CHECK(base64url_encode("\xfb\xff") == "-_8");
  CHECK_FALSE(base64url_decode("Zm9v+"));   // '+' is not base64url
  CHECK_FALSE(base64url_decode("Zm9vY"));   // impossible length
  CHECK_FALSE(base64url_decode("Zh"));      // non-zero spare bits
  CHECK_FALSE(base64url_decode("Zm9v=")); // no padding
}

TEST_CASE("role and permission names round-trip") {
  for (std::size_t i = 0; i < permission_count; ++i) {
    auto p = static_cast<permission>(i);
    CHECK(parse_permission(to_string(p)) == p);
  }
  for (std::size_t i = 0; i < role_count; ++i) {
    auto r = static_cast<role>(i);
    CHECK(parse_role(to_string(r)) == r);
  }
  CHECK(parse_role("power-user") == role::power_user);
  CHECK_FALSE(parse_role("root"));
}

TEST_CASE("every denial maps to an audit event naming the reason") {
  fake_clock clock;
  token_issuer issuer{key};
  access_policy policy{config(clock)};
  auto token = issuer.issue(claims_for(role::monitor));
  auto d = policy.check(token, permission::compute_run, "gpu0");
  auto ev = make_audit_event(d, permission::compute_run, "gpu0");
  CHECK(ev.type == exo::audit::event_type::access_denied);
  CHECK(ev.level == exo::audit::severity::warning);
  CHECK(ev.principal == "alice");
  CHECK(ev.details.at("decision") == "permission_denied");
  CHECK(ev.details.at("device") == "gpu0");
  CHECK(ev.details.at("reason") == d.reason);
  auto ok = policy.check(token, permission::device_list);
  CHECK(make_audit_event(ok, permission::device_list).type
        == exo::audit::event_type::access_granted);
  decision q;
  q.code = decision_code::quota_exceeded;
  CHECK(make_audit_event(q, permission::memory_allocate).type
        == exo::audit::event_type::quota_exceeded);
}
