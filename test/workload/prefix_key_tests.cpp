// Keys of prompt prefixes (core/workload/prefix_key.hpp): whole pieces
// only, at least one token left, the key a function of the prefix alone.

#include "core/workload/prefix_cache.hpp"
#include "core/workload/prefix_key.hpp"

#include <catch2/catch.hpp>

#include <set>

using namespace exo::workload;

namespace {

std::vector<std::int32_t> tokens(std::size_t n, std::int32_t mul = 7) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = static_cast<std::int32_t>((mul * i + 1) % 50000);
  return t;
}

} // namespace

TEST_CASE("prefix keys are at whole pieces and leave a token to read",
          "[prefix]") {
  CHECK(prefix_keys(tokens(512), 512).empty()); // nothing left to read
  CHECK(prefix_keys(tokens(100), 0).empty());
  auto k = prefix_keys(tokens(513), 512);
  REQUIRE(k.size() == 1);
  CHECK(k[0].n == 512);
  auto k3 = prefix_keys(tokens(1600), 512);
  REQUIRE(k3.size() == 3);
  CHECK(k3[0].n == 512);
  CHECK(k3[1].n == 1024);
  CHECK(k3[2].n == 1536);
  CHECK(k3[0] == k[0]); // the same 512 tokens: the same key
  std::set<std::uint64_t> distinct;
  for (auto& p : k3) {
    CHECK(p.key != 0);
    distinct.insert(p.key);
  }
  CHECK(distinct.size() == 3);
}

TEST_CASE("a prefix key depends on the prefix's tokens alone", "[prefix]") {
  auto a = tokens(1100);
  auto b = a;
  b[1050] += 1; // after the second piece: the keys are the same
  CHECK(prefix_keys(a, 512) == prefix_keys(b, 512));
  auto c = a;
  c[700] += 1; // in the second piece: only the first key is the same
  auto ka = prefix_keys(a, 512), kc = prefix_keys(c, 512);
  REQUIRE(kc.size() == 2);
  CHECK(ka[0] == kc[0]);
  CHECK(ka[1].key != kc[1].key);
  // Another piece: other keys (the length is in the key).
  auto k256 = prefix_keys(a, 256);
  REQUIRE(k256.size() == 4);
  CHECK(k256[1].n == 512);
  CHECK(k256[1].key == ka[0].key); // the same 512 tokens
  // A token id is 32 bits: 65536 is not 0.
  std::vector<std::int32_t> x(3, 0), y = x;
  y[0] = 65536;
  CHECK(prefix_keys(x, 2).at(0).key != prefix_keys(y, 2).at(0).key);
}

TEST_CASE("a very long prompt keeps its longest prefix keys", "[prefix]") {
  auto t = tokens(300 * 16 + 5);
  auto k = prefix_keys(t, 16);
  REQUIRE(k.size() == max_prefix_keys);
  CHECK(k.back().n == 300 * 16);
  CHECK(k.front().n == (300 - max_prefix_keys + 1) * 16);
}

// -- the bookkeeping of a stage's kept rows (core/workload/prefix_cache) --

TEST_CASE("the prefix cache finds entries by any of their keys, keeps to "
          "its budget, least recently used first, never what a job holds",
          "[prefix]") {
  prefix_cache c{300};
  std::vector<prefix_cache::cache_id> dropped;
  // Entry A (cache 11): keys of its 512 and 1024 prefixes; B (12): 512'.
  c.add(11, 100, {{512, 1}, {1024, 2}});
  c.add(12, 100, {{512, 3}});
  CHECK(c.entries() == 2);
  CHECK(c.keys() == 3);
  CHECK(c.bytes() == 200);
  CHECK(c.touch(2));
  CHECK_FALSE(c.touch(99));
  // Claims hold the entries they find, for their job only.
  const prefix_cache::holder job{1, 7}, other{1, 8};
  CHECK(c.claim({1, 99, 3}, job) == std::vector<std::uint64_t>{1, 3});
  CHECK(c.claimed(1, 512, job) == std::optional<prefix_cache::cache_id>{11});
  CHECK_FALSE(c.claimed(1, 1024, job)); // key 1 is the 512 prefix
  CHECK_FALSE(c.claimed(1, 512, other));
  // Held per entry: A's other key serves the job too.
  CHECK(c.claimed(2, 1024, job) == std::optional<prefix_cache::cache_id>{11});
  // Both held: no room for another 200.
  CHECK_FALSE(c.make_room(200, dropped));
  CHECK(dropped.empty());
  CHECK(c.drop_unheld().empty());
  c.let_go(job);
  // A was used last (claimed() after both claims): B goes first.
  CHECK(c.make_room(150, dropped));
  CHECK(dropped == std::vector<prefix_cache::cache_id>{12});
  CHECK(c.bytes() == 100);
  CHECK_FALSE(c.touch(3));
  CHECK_FALSE(c.make_room(301, dropped)); // more than the budget
  // A key kept by two entries stays found when one goes.
  c.add(13, 100, {{512, 1}, {1024, 4}}); // key 1 stays A's
  dropped.clear();
  c.claim({4}, other);
  CHECK(c.drop_unheld() == std::vector<prefix_cache::cache_id>{11});
  CHECK(c.claimed(1, 512, other)
        == std::optional<prefix_cache::cache_id>{13});
  CHECK_FALSE(c.touch(2));
  c.let_go_slot(1);
  CHECK(c.drop_unheld() == std::vector<prefix_cache::cache_id>{13});
  CHECK(c.entries() == 0);
  CHECK(c.keys() == 0);
  CHECK(c.bytes() == 0);
  CHECK(c.dropped() == 3);
}
