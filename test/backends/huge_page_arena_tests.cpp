// The huge-page arena behind the host devices' large buffers.

#include "backends/huge_page_arena.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using exo::backend::huge_page_arena;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::uintptr_t addr(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

/// The VmFlags line of the mapping that holds `p` (/proc/self/smaps).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps{"/proc/self/smaps"};
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head{line};
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = addr(p) >= lo && addr(p) < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0)
      return line;
  }
  return {};
}

} // namespace

TEST_CASE("the arena takes large buffers only, page-aligned inside 2 MiB-"
          "aligned regions advised for huge pages") {
  huge_page_arena arena{256 << 10, 8 * MiB};
  CHECK_FALSE(arena.takes((256 << 10) - 1));
  CHECK(arena.takes(256 << 10));
  CHECK(arena.allocate(0) == nullptr);
  CHECK(arena.allocate(SIZE_MAX) == nullptr); // no wrap-around to a tiny block
  CHECK(arena.allocate(SIZE_MAX - 4096) == nullptr);
  CHECK(arena.regions() == 0);
  void* a = arena.allocate(300 << 10);
  REQUIRE(a != nullptr);
  CHECK(addr(a) % huge_page_arena::granule == 0);
  CHECK(addr(a) % huge_page_arena::huge_page == 0); // the region's start
  CHECK(arena.regions() == 1);
  CHECK(arena.mapped_bytes() == 8 * MiB);
  // Usable to its last byte.
  std::memset(a, 0x5a, 300 << 10);
  // MADV_HUGEPAGE shows as "hg" in the mapping's flags (on a kernel with
  // transparent huge pages at all).
  if (std::ifstream{"/sys/kernel/mm/transparent_hugepage/enabled"}) {
    auto flags = vm_flags_of(a);
    INFO(flags);
    CHECK(flags.find(" hg") != std::string::npos);
  }
  arena.release(a, 300 << 10);
  CHECK(arena.regions() == 0); // an empty region is given back
  CHECK(arena.mapped_bytes() == 0);
}

TEST_CASE("freed neighbours merge, so their combined space is reused") {
  huge_page_arena arena{4096, 4 * MiB};
  void* a = arena.allocate(MiB);
  void* b = arena.allocate(MiB);
  void* c = arena.allocate(MiB);
  REQUIRE((a && b && c));
  CHECK(addr(b) == addr(a) + MiB);
  CHECK(addr(c) == addr(b) + MiB);
  arena.release(a, MiB);
  arena.release(b, MiB);
  // 2 MiB fits only in the merged hole where a and b were.
  void* d = arena.allocate(2 * MiB);
  CHECK(d == a);
  CHECK(arena.regions() == 1);
  // Freed in the other order (right neighbour first), they merge too.
  arena.release(c, MiB);
  arena.release(d, 2 * MiB);
  CHECK(arena.regions() == 0);
}

TEST_CASE("a buffer larger than a region gets a region of its own") {
  huge_page_arena arena{4096, 4 * MiB};
  void* small = arena.allocate(MiB);
  void* big = arena.allocate(9 * MiB + 5);
  REQUIRE((small && big));
  CHECK(arena.regions() == 2);
  CHECK(arena.mapped_bytes() == 4 * MiB + 10 * MiB);
  std::memset(big, 1, 9 * MiB + 5);
  arena.release(big, 9 * MiB + 5);
  CHECK(arena.regions() == 1);
  arena.release(small, MiB);
  CHECK(arena.regions() == 0);
}

TEST_CASE("random allocations never overlap and keep their bytes") {
  huge_page_arena arena{4096, 4 * MiB};
  std::mt19937 rng{11};
  struct block {
    unsigned char* p;
    std::size_t n;
    unsigned char fill;
  };
  std::vector<block> live;
  for (int i = 0; i < 2000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      auto k = rng() % live.size();
      auto b = live[k];
      for (std::size_t j = 0; j < b.n; j += 997)
        REQUIRE(b.p[j] == b.fill);
      REQUIRE(b.p[b.n - 1] == b.fill);
      arena.release(b.p, b.n);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    auto n = 1 + rng() % (3 * MiB);
    auto* p = static_cast<unsigned char*>(arena.allocate(n));
    REQUIRE(p != nullptr);
    auto fill = static_cast<unsigned char>(i);
    std::memset(p, fill, n);
    live.push_back({p, n, fill});
  }
  std::sort(live.begin(), live.end(),
            [](const block& x, const block& y) { return x.p < y.p; });
  for (std::size_t i = 1; i < live.size(); ++i)
    REQUIRE(live[i - 1].p + live[i - 1].n <= live[i].p);
  for (auto& b : live)
    arena.release(b.p, b.n);
  CHECK(arena.regions() == 0);
}
