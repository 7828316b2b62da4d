// Keys of prompt prefixes (core/workload/prefix_key.hpp): whole pieces
// only, at least one token left, the key a function of the prefix alone.

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
