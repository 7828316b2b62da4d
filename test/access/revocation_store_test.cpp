// Revocations that survive a restart: the store's file format, recovery
// from a torn or garbled file, pruning, and applying it to a policy.

#include "core/access/access_policy.hpp"
#include "core/access/revocation_store.hpp"
#include "test/audit/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

using namespace exo::access;
using exo::test::slurp;
using exo::test::spit;
using exo::test::temp_dir;

namespace {

const std::string key = "0123456789abcdef0123456789abcdef-test-key";
constexpr std::int64_t now = 2000000000;
constexpr std::int64_t day = 86400;

std::string token(const std::string& id, const std::string& principal,
                  std::int64_t issued_at) {
  token_claims c;
  c.id = id;
  c.principal = principal;
  c.granted_role = role::user;
  c.all_devices = true;
  c.issued_at = issued_at;
  c.expires_at = issued_at + day;
  return token_issuer{key}.issue(c);
}

access_policy policy_at(std::int64_t t) {
  access_config cfg;
  cfg.key = key;
  cfg.clock = [t] {
    return std::chrono::system_clock::time_point{std::chrono::seconds{t}};
  };
  return access_policy{cfg};
}

} // namespace

TEST_CASE("revocations written before a restart are refused after it") {
  temp_dir dir;
  auto path = dir.file("revocations");
  {
    revocation_store store{path};
    CHECK(store.load(now, 30 * day).empty()); // no file yet
    store.append({revocation::kind::token, "t1", now + day});
    store.append({revocation::kind::principal, "mallory", now});
  }
  namespace fs = std::filesystem;
  CHECK((fs::status(path).permissions() & fs::perms::mask)
        == (fs::perms::owner_read | fs::perms::owner_write));
  // "Restart": a fresh policy, loaded from the file.
  revocation_store store{path};
  auto rs = store.load(now + 10, 30 * day);
  REQUIRE(rs.size() == 2);
  auto p = policy_at(now + 10);
  auto t1 = token("t1", "alice", now - 5);
  auto t2 = token("t2", "alice", now - 5);
  auto old_mallory = token("t3", "mallory", now - 5);
  auto new_mallory = token("t4", "mallory", now + 5);
  CHECK(p.check(t1, permission::compute_run).allowed());
  CHECK(p.check(old_mallory, permission::compute_run).allowed());
  apply_revocations(p, rs);
  CHECK(p.check(t1, permission::compute_run).code == decision_code::revoked);
  CHECK(p.check(t2, permission::compute_run).allowed());
  CHECK(p.check(old_mallory, permission::compute_run).code
        == decision_code::revoked);
  // Tokens issued after the principal's revocation work again.
  CHECK(p.check(new_mallory, permission::compute_run).allowed());
}

TEST_CASE("a torn or garbled revocations file loses only the bad lines") {
  temp_dir dir;
  auto path = dir.file("revocations");
  spit(path, "token t1 " + std::to_string(now + day) + "\n"
               + "nonsense line\n" + "principal bob notanumber\n"
               + "principal eve " + std::to_string(now) + "\n"
               + "token t2 " + std::to_string(now + day)); // torn: no \n
  revocation_store store{path};
  auto rs = store.load(now, 30 * day);
  CHECK(store.skipped() == 3);
  REQUIRE(rs.size() == 2);
  CHECK(rs[0] == revocation{revocation::kind::token, "t1", now + day});
  CHECK(rs[1] == revocation{revocation::kind::principal, "eve", now});
  // The file was rewritten clean, and appends continue after it.
  store.append({revocation::kind::token, "t3", now + day});
  auto again = store.load(now, 30 * day);
  CHECK(store.skipped() == 0);
  CHECK(again.size() == 3);
}

TEST_CASE("revocations that no longer matter are pruned on load") {
  temp_dir dir;
  auto path = dir.file("revocations");
  revocation_store store{path};
  store.append({revocation::kind::token, "expired", now - 1});
  store.append({revocation::kind::token, "live", now + 1});
  store.append({revocation::kind::principal, "ancient", now - 31 * day});
  store.append({revocation::kind::principal, "recent", now - day});
  auto rs = store.load(now, 30 * day);
  REQUIRE(rs.size() == 2);
  CHECK(rs[0].name == "live");
  CHECK(rs[1].name == "recent");
  CHECK(slurp(path).find("ancient") == std::string::npos);
}

TEST_CASE("names with spaces or newlines cannot be stored") {
  temp_dir dir;
  revocation_store store{dir.file("revocations")};
  CHECK_THROWS_AS(store.append({revocation::kind::principal, "a b", now}),
                  std::invalid_argument);
  CHECK_THROWS_AS(store.append({revocation::kind::token, "x\ny", now}),
                  std::invalid_argument);
  CHECK_THROWS_AS(store.append({revocation::kind::token, "", now}),
                  std::invalid_argument);
}

TEST_CASE("a principal revoked through a later time stays revoked") {
  auto p = policy_at(now);
  auto t = token("t1", "zed", now - 5);
  p.revoke_principal("zed", now);
  p.revoke_principal("zed", now - 100); // an older, relayed revocation
  CHECK(p.check(t, permission::compute_run).code == decision_code::revoked);
}
