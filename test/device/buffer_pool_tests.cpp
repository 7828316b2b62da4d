// Handles over pooled buffers: opaque, bounds-checked, reused.

#include "core/device/buffer_pool.hpp"
#include "backends/cpu/cpu_backend.hpp"

#include <catch2/catch.hpp>

using namespace exo;
using exo::device::buffer_pool;

namespace {

struct fixture {
  std::unique_ptr<backend::backend> be = backend::make_cpu_backend(
    backend::cpu_options{64u << 20});
  backend::device* dev = nullptr;
  fixture() {
    REQUIRE(be->initialize().ok());
    dev = be->device_at(0);
  }
};

} // namespace

TEST_CASE("size classes round up to powers of two, then to whole MiB") {
  CHECK(buffer_pool::size_class(1) == 4096);
  CHECK(buffer_pool::size_class(4096) == 4096);
  CHECK(buffer_pool::size_class(4097) == 8192);
  CHECK(buffer_pool::size_class(3u << 20) == 4u << 20);
  CHECK(buffer_pool::size_class((64u << 20) + 1) == (65u << 20));
}

TEST_CASE("a freed buffer is reused for the next request of its class") {
  fixture f;
  buffer_pool pool{*f.dev, 1u << 20, 1234};
  auto a = pool.allocate(5000);
  REQUIRE(a.ok());
  auto* first = *pool.resolve(*a, 0, 5000);
  REQUIRE(pool.release(*a).ok());
  CHECK(pool.cached_bytes() == 8192);
  auto b = pool.allocate(6000);
  REQUIRE(b.ok());
  CHECK(*pool.resolve(*b, 0, 1) == first);
  CHECK(pool.reuse_count() == 1);
  CHECK(*b != *a);
}

TEST_CASE("ranges are checked against the size asked for, not the class") {
  fixture f;
  buffer_pool pool{*f.dev, 0, 99};
  auto h = pool.allocate(100);
  REQUIRE(h.ok());
  CHECK(pool.resolve(*h, 0, 100).ok());
  CHECK(pool.resolve(*h, 100, 0).ok());
  CHECK(pool.resolve(*h, 0, 101).err().code == backend::errc::out_of_range);
  CHECK(pool.resolve(*h, 101, 0).err().code == backend::errc::out_of_range);
  CHECK(pool.resolve(*h, UINT64_MAX, 2).err().code
        == backend::errc::out_of_range);
}

TEST_CASE("unknown, freed and forged handles are refused") {
  fixture f;
  buffer_pool pool{*f.dev, 0, 7};
  auto h = pool.allocate(64);
  REQUIRE(h.ok());
  CHECK_FALSE(pool.resolve(*h + 1, 0, 1).ok());
  REQUIRE(pool.release(*h).ok());
  CHECK_FALSE(pool.resolve(*h, 0, 1).ok());
  CHECK_FALSE(pool.release(*h).ok());
  // Handles of another pool mean nothing here.
  buffer_pool other{*f.dev, 0, 8};
  auto h2 = other.allocate(64);
  REQUIRE(h2.ok());
  CHECK_FALSE(pool.resolve(*h2, 0, 1).ok());
}

TEST_CASE("when memory runs out the cache is released and the request "
          "retried") {
  fixture f; // 64 MiB device
  buffer_pool pool{*f.dev, 64u << 20, 5};
  auto a = pool.allocate(32u << 20);
  auto b = pool.allocate(16u << 20);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(pool.release(*a).ok());
  REQUIRE(pool.release(*b).ok());
  CHECK(pool.cached_bytes() == (48u << 20));
  // 40 MiB (class 64 MiB -> rounded) does not fit beside the cache.
  auto c = pool.allocate(40u << 20);
  REQUIRE(c.ok());
  CHECK(pool.cached_bytes() == 0);
  auto d = pool.allocate(60u << 20);
  REQUIRE_FALSE(d.ok());
  CHECK(d.err().code == backend::errc::out_of_memory);
  CHECK(pool.live_handles() == 1);
}

TEST_CASE("a request that fits only unrounded gets exactly what it asked "
          "for") {
  fixture f; // 64 MiB device
  buffer_pool pool{*f.dev, 64u << 20, 9};
  auto a = pool.allocate(8u << 20);
  REQUIRE(a.ok());
  // Class 64 MiB would not fit beside 8 MiB; 50 MiB does.
  auto b = pool.allocate(50u << 20);
  REQUIRE(b.ok());
  CHECK(*pool.size_of(*b) == (50u << 20));
  REQUIRE(pool.release(*b).ok());
  // The exact-size buffer is reused for the same request.
  auto c = pool.allocate(50u << 20);
  REQUIRE(c.ok());
  CHECK(pool.reuse_count() == 1);
}

TEST_CASE("adopted host memory gets a checked handle and is never pooled") {
  fixture f;
  buffer_pool pool{*f.dev, 1u << 20, 7};
  auto mem = std::make_shared<std::vector<float>>(3000, 1.5f);
  std::weak_ptr<std::vector<float>> alive = mem;
  auto h = pool.adopt(mem->data(), mem->size() * 4, mem);
  mem.reset();
  REQUIRE(h.ok());
  CHECK(pool.live_bytes() == 12000);
  auto* buf = *pool.resolve(*h, 0, 12000);
  CHECK(buf->read_only());
  CHECK(pool.resolve(*h, 0, 12001).err().code == backend::errc::out_of_range);
  REQUIRE(pool.release(*h).ok());
  // Handed back to its owner, not cached for the next allocation.
  CHECK(alive.expired());
  CHECK(pool.cached_bytes() == 0);
  CHECK(pool.live_bytes() == 0);
  CHECK_FALSE(pool.resolve(*h, 0, 1).ok());
}

TEST_CASE("a handle's buffer is resized where it is, to its new class, and "
          "keeps its bytes") {
  fixture f; // 64 MiB device
  buffer_pool pool{*f.dev, 64u << 20, 3};
  auto h = pool.allocate(5000);
  REQUIRE(h.ok());
  std::vector<std::uint8_t> data(5000);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<std::uint8_t>(i * 13);
  REQUIRE(f.dev->write(**pool.resolve(*h, 0, 5000), 0, data.data(), 5000)
            .ok());
  // Within its class (8 KiB): only the size asked for changes.
  auto* b = *pool.resolve(*h, 0, 1);
  REQUIRE(pool.resize(*h, 8000).ok());
  CHECK(*pool.size_of(*h) == 8000);
  CHECK(pool.footprint(*h) == 8192);
  CHECK(pool.live_bytes() == 8000);
  // Past it: the same buffer, of the new class, the first bytes kept.
  REQUIRE(pool.resize(*h, 3u << 20).ok());
  CHECK(*pool.resolve(*h, 0, 1) == b);
  CHECK(pool.footprint(*h) == (4u << 20));
  CHECK(pool.resolve(*h, 0, 3u << 20).ok());
  CHECK_FALSE(pool.resolve(*h, 0, (3u << 20) + 1).ok());
  std::vector<std::uint8_t> back(5000);
  REQUIRE(f.dev->read(*b, 0, back.data(), 5000).ok());
  CHECK(back == data);
  // A class that does not fit beside the cache: the cache goes first.
  auto other = pool.allocate(20u << 20);
  REQUIRE(other.ok());
  REQUIRE(pool.release(*other).ok());
  CHECK(pool.cached_bytes() == (32u << 20));
  REQUIRE(pool.resize(*h, 40u << 20).ok());
  CHECK(pool.cached_bytes() == 0);
  CHECK(pool.footprint(*h) == (64u << 20));
  CHECK(pool.resize(*h, 65u << 20).err().code == backend::errc::out_of_memory);
  CHECK(*pool.size_of(*h) == (40u << 20)); // unchanged
  // A class that does not fit at all: exactly the size asked for.
  REQUIRE(pool.resize(*h, 10u << 20).ok()); // class 16 MiB
  auto small = pool.allocate(4096);
  REQUIRE(small.ok());
  REQUIRE(pool.resize(*h, 63u << 20).ok()); // class 64 MiB: no room
  CHECK(pool.footprint(*h) == (63u << 20));
  REQUIRE(pool.resize(*h, 100).ok());
  CHECK(pool.footprint(*h) == 4096);
  CHECK(pool.live_bytes() == 100 + 4096); // and `small`
  CHECK(pool.resize(*h, 0).err().code == backend::errc::invalid_argument);
  CHECK(pool.resize(*h ^ 1, 10).err().code == backend::errc::invalid_argument);
  auto mem = std::make_shared<std::vector<float>>(1000, 1.0f);
  auto a = pool.adopt(mem->data(), 4000, mem);
  REQUIRE(a.ok());
  CHECK(pool.resize(*a, 8000).err().code == backend::errc::invalid_argument);
}

TEST_CASE("cached buffers nobody reuses go back to the device after max_idle") {
  fixture f; // 64 MiB device: its free memory shows what the pool holds
  using clock = buffer_pool::clock;
  auto now = clock::time_point{} + std::chrono::hours(1);
  buffer_pool pool{*f.dev, 64u << 20, 11, std::chrono::seconds(10),
                   [&now] { return now; }};
  const auto free0 = f.dev->memory().free;
  auto a = pool.allocate(1u << 20);
  auto b = pool.allocate(1u << 20);
  auto c = pool.allocate(3u << 20); // its own class (4 MiB)
  REQUIRE((a.ok() && b.ok() && c.ok()));
  auto* a_buf = *pool.resolve(*a, 0, 1);
  REQUIRE(pool.release(*b).ok()); // b cached first, then a: a is newest
  REQUIRE(pool.release(*a).ok());
  REQUIRE(pool.release(*c).ok());
  CHECK(pool.cached_bytes() == (6u << 20));

  // The work of the moment keeps reusing one 1 MiB buffer: the newest of
  // its class, so the other one ages.
  for (int i = 0; i < 4; ++i) {
    now += std::chrono::seconds(4);
    auto h = pool.allocate(1u << 20);
    REQUIRE(h.ok());
    CHECK(*pool.resolve(*h, 0, 1) == a_buf);
    REQUIRE(pool.release(*h).ok()); // trims on release
  }
  // 16 s on: b and c sat idle for more than 10 s and are gone; a stays.
  CHECK(pool.cached_bytes() == (1u << 20));
  CHECK(f.dev->memory().free == free0 - (1u << 20));

  // An idle device: trim_idle() (the owner's timer) gives back the rest.
  now += std::chrono::seconds(10);
  pool.trim_idle();
  CHECK(pool.cached_bytes() == (1u << 20)); // 10 s is not *more* than 10 s
  now += std::chrono::milliseconds(1);
  pool.trim_idle();
  CHECK(pool.cached_bytes() == 0);
  CHECK(f.dev->memory().free == free0);
  CHECK(pool.live_handles() == 0);
}

TEST_CASE("without max_idle the cache keeps what it holds") {
  fixture f;
  buffer_pool pool{*f.dev, 64u << 20, 12};
  auto a = pool.allocate(1u << 20);
  REQUIRE(a.ok());
  REQUIRE(pool.release(*a).ok());
  pool.trim_idle();
  CHECK(pool.cached_bytes() == (1u << 20));
}
