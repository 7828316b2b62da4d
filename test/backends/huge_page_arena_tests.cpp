// The huge-page arena behind the host devices' large buffers.

#include "backends/huge_page_arena.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

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

/// The physical frame behind the page of `p` (/proc/self/pagemap), or 0
/// where the kernel does not say (a process without CAP_SYS_ADMIN reads
/// zeros) or the page is not resident.
std::uint64_t frame_of(const void* p) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0)
    return 0;
  std::uint64_t entry = 0;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto at = static_cast<off_t>(addr(p) / page * sizeof entry);
  const bool ok = ::pread(fd, &entry, sizeof entry, at) == sizeof entry;
  ::close(fd);
  if (!ok || (entry >> 63) == 0) // not present
    return 0;
  return entry & ((std::uint64_t{1} << 55) - 1);
}

/// A block of the random tests: every byte `fill`.
struct block {
  unsigned char* p;
  std::size_t n;
  unsigned char fill;
};

/// Whether b still holds its fill (every 997th byte and the last).
bool intact(const block& b) {
  for (std::size_t j = 0; j < b.n; j += 997)
    if (b.p[j] != b.fill)
      return false;
  return b.p[b.n - 1] == b.fill;
}

/// Resident pages of [p, p + n) (mincore), n a multiple of the page size.
std::size_t resident_pages(const void* p, std::size_t n) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v(n / page);
  if (::mincore(const_cast<void*>(p), n, v.data()) != 0)
    return SIZE_MAX;
  std::size_t k = 0;
  for (auto b : v)
    k += b & 1;
  return k;
}

/// Whether the kernel moves pages with MREMAP_DONTUNMAP (Linux 5.7).
bool kernel_moves_pages() {
  utsname u{};
  if (::uname(&u) != 0)
    return false;
  int major = 0, minor = 0;
  std::istringstream in{u.release};
  char dot = 0;
  in >> major >> dot >> minor;
  return major > 5 || (major == 5 && minor >= 7);
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

TEST_CASE("a block grows where it is when the space after it is free, and "
          "shrinks giving its tail back") {
  huge_page_arena arena{4096, 8 * MiB};
  auto* a = static_cast<unsigned char*>(arena.allocate(MiB));
  REQUIRE(a != nullptr);
  std::memset(a, 0x11, MiB);
  auto* g = static_cast<unsigned char*>(arena.resize(a, MiB, 3 * MiB + 5));
  CHECK(g == a); // in place
  CHECK(arena.moves() == 0);
  CHECK(a[MiB - 1] == 0x11);
  std::memset(a + MiB, 0x22, 2 * MiB + 5); // all of it is usable
  // The next block comes after the grown one.
  void* b = arena.allocate(MiB);
  REQUIRE(b != nullptr);
  CHECK(addr(b) == addr(a) + 3 * MiB + 4096);
  // Shrunk, its tail is free again and merges with what follows it.
  arena.release(b, MiB);
  CHECK(arena.resize(a, 3 * MiB + 5, MiB / 2) == a);
  void* c = arena.allocate(7 * MiB);
  CHECK(addr(c) == addr(a) + MiB / 2);
  CHECK(a[MiB / 2 - 1] == 0x11);
  CHECK(arena.resize(a, MiB / 2, MiB / 2) == a); // the same size: nothing
  CHECK(arena.resize(nullptr, 1, 2) == nullptr);
  CHECK(arena.resize(a, MiB / 2, 0) == nullptr);
  CHECK(arena.resize(a, MiB / 2, SIZE_MAX) == nullptr);
  int outside = 0;
  CHECK(arena.resize(&outside, 4, 8) == nullptr); // not the arena's
  arena.release(c, 7 * MiB);
  arena.release(a, MiB / 2);
  CHECK(arena.regions() == 0);
}

TEST_CASE("a block with a neighbour after it grows by moving its pages, not "
          "its bytes") {
  huge_page_arena arena{4096, 8 * MiB};
  const std::size_t n = 6 * MiB + 12288; // whole huge pages and a few small
  auto* a = static_cast<unsigned char*>(arena.allocate(n));
  void* b = arena.allocate(MiB); // right after it
  REQUIRE((a && b));
  for (std::size_t i = 0; i < n; ++i)
    a[i] = static_cast<unsigned char>(i * 7 + i / 4096);
  const auto frame = frame_of(a + 2 * MiB + 100);
  const auto lead = addr(a) % huge_page_arena::huge_page;
  auto* g = static_cast<unsigned char*>(arena.resize(a, n, 20 * MiB));
  REQUIRE(g != nullptr);
  CHECK(g != a);
  CHECK(arena.moves() == 1);
  // At the same place within a huge page: huge pages move whole.
  CHECK(addr(g) % huge_page_arena::huge_page == lead);
  bool same = true;
  for (std::size_t i = 0; i < n; ++i)
    same = same && g[i] == static_cast<unsigned char>(i * 7 + i / 4096);
  CHECK(same);
  std::memset(g + n, 0x33, 20 * MiB - n); // the new part is usable
  if (kernel_moves_pages()) {
    CHECK(arena.bytes_copied() == 0);
    // The same physical page, where the kernel tells this process.
    if (frame != 0)
      CHECK(frame_of(g + 2 * MiB + 100) == frame);
  }
  // The old place is free: the region of b takes a block of its size.
  void* c = arena.allocate(n);
  CHECK(c == a);
  CHECK(arena.regions() == 2);
  arena.release(c, n);
  arena.release(b, MiB);
  CHECK(arena.regions() == 1);
  // A block alone in its region moves the same way; the old region goes.
  auto* h = static_cast<unsigned char*>(arena.resize(g, 20 * MiB, 41 * MiB));
  REQUIRE(h != nullptr);
  CHECK(h[n - 1] == static_cast<unsigned char>((n - 1) * 7 + (n - 1) / 4096));
  CHECK(h[20 * MiB - 1] == 0x33);
  arena.release(h, 41 * MiB);
  CHECK(arena.regions() == 0);
}

TEST_CASE("random allocations, resizes and releases never overlap and keep "
          "their bytes") {
  huge_page_arena arena{4096, 4 * MiB};
  std::mt19937 rng{23};
  std::vector<block> live;
  for (int i = 0; i < 2000; ++i) {
    const auto pick = rng() % 4;
    if (!live.empty() && pick == 0) {
      auto k = rng() % live.size();
      REQUIRE(intact(live[k]));
      arena.release(live[k].p, live[k].n);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    if (!live.empty() && pick == 1) {
      auto& b = live[rng() % live.size()];
      REQUIRE(intact(b));
      const auto n = 1 + rng() % (5 * MiB);
      auto* p = static_cast<unsigned char*>(arena.resize(b.p, b.n, n));
      REQUIRE(p != nullptr);
      if (n > b.n)
        std::memset(p + b.n, b.fill, n - b.n);
      b.p = p;
      b.n = n;
      REQUIRE(intact(b));
      continue;
    }
    auto n = 1 + rng() % (3 * MiB);
    auto* p = static_cast<unsigned char*>(arena.allocate(n));
    REQUIRE(p != nullptr);
    auto fill = static_cast<unsigned char>(i);
    std::memset(p, fill, n);
    live.push_back({p, n, fill});
  }
  CHECK(arena.moves() > 0);
  std::sort(live.begin(), live.end(),
            [](const block& x, const block& y) { return x.p < y.p; });
  for (std::size_t i = 1; i < live.size(); ++i)
    REQUIRE(live[i - 1].p + live[i - 1].n <= live[i].p);
  for (auto& b : live) {
    REQUIRE(intact(b));
    arena.release(b.p, b.n);
  }
  CHECK(arena.regions() == 0);
}

TEST_CASE("a released or shrunk-off megabyte and more goes back to the host") {
  huge_page_arena arena{4096, 16 * MiB};
  auto* a = static_cast<unsigned char*>(arena.allocate(8 * MiB));
  auto* keep = static_cast<unsigned char*>(arena.allocate(MiB)); // the region lives
  REQUIRE((a && keep));
  std::memset(a, 1, 8 * MiB);
  std::memset(keep, 2, MiB);
  const std::size_t pages = 8 * MiB / static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  CHECK(resident_pages(a, 8 * MiB) == pages);
  // Shrunk to 1 MiB: the 7 MiB after it are no longer resident.
  REQUIRE(arena.resize(a, 8 * MiB, MiB) == a);
  CHECK(resident_pages(a, MiB) == pages / 8);
  CHECK(resident_pages(a + MiB, 7 * MiB) == 0);
  CHECK(a[MiB - 1] == 1);
  // Released: none of it.
  arena.release(a, MiB);
  CHECK(resident_pages(a, MiB) == 0);
  CHECK(arena.regions() == 1);
  CHECK(keep[MiB - 1] == 2);
  // Reused, the memory is there again (zeroed).
  auto* b = static_cast<unsigned char*>(arena.allocate(2 * MiB));
  CHECK(b == a);
  b[0] = 5;
  CHECK(b[1] == 0);
  arena.release(b, 2 * MiB);
  arena.release(keep, MiB);
}
