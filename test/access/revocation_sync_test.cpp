// Revocation catch-up between nodes, the pure part: the MAC'd wire list,
// its validation and bounds, and the set that says what a peer lacks.

#include "core/access/revocation_sync.hpp"

#include <catch2/catch.hpp>

using namespace exo::access;

namespace {

const std::string key = "0123456789abcdef0123456789abcdef-test-key";
constexpr std::int64_t now = 2000000000;
constexpr std::int64_t ttl = 30 * 86400;

revocation tok(const std::string& id, std::int64_t at) {
  return {revocation::kind::token, id, at};
}
revocation who(const std::string& p, std::int64_t at) {
  return {revocation::kind::principal, p, at};
}

} // namespace

TEST_CASE("a revocation list round-trips with its MACs") {
  hmac_sha256 mac{key};
  std::vector<revocation> rs{tok("t1", now + 100), who("alice", now - 5)};
  auto text = encode_revocations(rs, mac);
  auto d = decode_revocations(text, mac, now, ttl);
  CHECK(d.error.empty());
  CHECK(d.rejected == 0);
  REQUIRE(d.accepted.size() == 2);
  CHECK(d.accepted[0] == rs[0]);
  CHECK(d.accepted[1] == rs[1]);
}

TEST_CASE("entries with a bad MAC, another key's MAC or garbage are "
          "rejected one by one") {
  hmac_sha256 mac{key};
  hmac_sha256 other{"another-key-another-key-another-key-0123"};
  auto good = encode_revocations({who("alice", now)}, mac);
  auto foreign = encode_revocations({who("bob", now)}, other);
  // Same MAC, another name: the MAC covers the name.
  auto renamed = good;
  renamed.replace(renamed.find("alice"), 5, "carol");
  // Same MAC, a later time.
  auto moved = good;
  moved.replace(moved.find(std::to_string(now)), 10,
                std::to_string(now + 1));
  auto text = good + foreign + renamed + moved + "token\n"
              + "principal x 1 zz extra\n" + "what x 1 00\n"
              + "principal \x01 1 00\n" + "principal torn 1";
  auto d = decode_revocations(text, mac, now, ttl);
  CHECK(d.error.empty());
  REQUIRE(d.accepted.size() == 1);
  CHECK(d.accepted[0] == who("alice", now));
  CHECK(d.rejected == 8);
}

TEST_CASE("times are bounded like a relay's and dead entries dropped") {
  hmac_sha256 mac{key};
  auto text = encode_revocations({who("future", now + 3600),
                                  tok("far", now + 10 * ttl),
                                  tok("expired", now - 1),
                                  who("ancient", now - ttl - 1)},
                                 mac);
  auto d = decode_revocations(text, mac, now, ttl);
  REQUIRE(d.accepted.size() == 2);
  CHECK(d.accepted[0] == who("future", now + 60));
  CHECK(d.accepted[1] == tok("far", now + ttl + 60));
  CHECK(d.stale == 2);
}

TEST_CASE("a list over the bounds is refused whole") {
  hmac_sha256 mac{key};
  std::string many;
  for (std::size_t i = 0; i <= max_sync_entries; ++i)
    many += "token t" + std::to_string(i) + " 1 00\n";
  auto d = decode_revocations(many, mac, now, ttl);
  CHECK_FALSE(d.error.empty());
  CHECK(d.accepted.empty());
  auto d2 = decode_revocations(std::string(max_sync_bytes + 1, 'x'), mac, now,
                               ttl);
  CHECK(d2.error.find("bytes") != std::string::npos);
  // The encoder never makes more than the bound.
  std::vector<revocation> rs;
  for (std::size_t i = 0; i < max_sync_entries + 10; ++i)
    rs.push_back(tok("t" + std::to_string(i), now + 10));
  auto text = encode_revocations(rs, mac);
  auto d3 = decode_revocations(text, mac, now, ttl);
  CHECK(d3.error.empty());
  CHECK(d3.accepted.size() == max_sync_entries);
}

TEST_CASE("a revocation set keeps the latest time and says what a peer "
          "lacks") {
  revocation_set s;
  CHECK(s.add(who("alice", now - 10)));
  CHECK_FALSE(s.add(who("alice", now - 20)));
  CHECK(s.add(who("alice", now)));
  CHECK(s.knows(who("alice", now - 1)));
  CHECK_FALSE(s.knows(who("alice", now + 1)));
  CHECK(s.add(tok("t1", now + 5)));
  CHECK(s.size() == 2);
  // The peer knows alice only up to an earlier time, and not t1.
  auto missing = s.missing_from({who("alice", now - 10), tok("t2", now + 9)});
  REQUIRE(missing.size() == 2);
  CHECK(missing[0] == tok("t1", now + 5));
  CHECK(missing[1] == who("alice", now));
  CHECK(s.missing_from({who("alice", now), tok("t1", now + 5)}).empty());
  s.sweep(now + 6, ttl);
  CHECK(s.size() == 1);
}
