// The Vulkan backend on whatever Vulkan device the machine has (Mesa's
// lavapipe on CI): properties, memory, transfers, kernels against the host
// reference, events and refusals. Each case runs once with buffers moved by
// memcpy into mapped memory, and where it matters once more with staging
// buffers (the path of discrete GPUs).

#include "backends/cpu/cpu_backend.hpp"
#include "backends/host_kernels.hpp"
#include "backends/vulkan/vulkan_backend.hpp"
#include "test/support/random.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

using namespace exo::backend;

using exo::test::random_floats;

namespace {

/// A Vulkan backend with its first device; fails the test if there is none.
struct fixture {
  explicit fixture(vulkan_options opts = {}) {
    be = make_vulkan_backend(opts);
    auto st = be->initialize();
    if (!st.ok())
      FAIL("Vulkan initialize: " << st.err().to_string());
    REQUIRE(be->device_count() > 0);
    dev = be->device_at(0);
  }

  std::unique_ptr<buffer> alloc(std::size_t n) {
    auto r = dev->allocate(n);
    if (!r.ok())
      FAIL("allocate " << n << ": " << r.err().to_string());
    return std::move(*r);
  }

  std::unique_ptr<backend> be;
  device* dev = nullptr;
};

/// Small chunks make staged transfers take many rounds.
vulkan_options staged() {
  vulkan_options o;
  o.force_staging = true;
  o.staging_chunk = 64 * 1024;
  return o;
}

std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v)
    b = static_cast<std::uint8_t>(rng());
  return v;
}

/// Largest |got - want| relative to the largest |want| (at least 1).
double relative_error(const std::vector<float>& got,
                      const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double scale = 1.0, worst = 0.0;
  for (auto w : want)
    scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  return worst / scale;
}

/// Runs C = A * B on the device at the given byte offsets and compares with
/// host::matmul_reference.
void check_matmul(fixture& fx, const matmul_dims& d, std::size_t off_a,
                  std::size_t off_b, std::size_t off_c, std::mt19937& rng) {
  auto ha = random_floats(rng, d.m * d.k);
  auto hb = random_floats(rng, d.k * d.n);
  std::vector<float> want(d.m * d.n), got(d.m * d.n);
  host::matmul_reference(ha.data(), hb.data(), want.data(), d);
  auto a = fx.alloc(off_a + ha.size() * 4);
  auto b = fx.alloc(off_b + hb.size() * 4);
  auto c = fx.alloc(off_c + got.size() * 4);
  REQUIRE(fx.dev->write(*a, off_a, ha.data(), ha.size() * 4).ok());
  REQUIRE(fx.dev->write(*b, off_b, hb.data(), hb.size() * 4).ok());
  auto st =
      fx.dev->matmul({a.get(), off_a}, {b.get(), off_b}, {c.get(), off_c}, d);
  if (!st.ok())
    FAIL(st.err().to_string());
  REQUIRE(fx.dev->read(*c, off_c, got.data(), got.size() * 4).ok());
  INFO("m=" << d.m << " n=" << d.n << " k=" << d.k
            << " transpose_b=" << d.transpose_b);
  CHECK(relative_error(got, want) < 1e-4);
}

} // namespace

TEST_CASE("a Vulkan device is found and describes itself sanely") {
  fixture fx;
  const auto& p = fx.dev->properties();
  CHECK(p.kind == backend_kind::vulkan);
  CHECK(p.id.rfind("vulkan:", 0) == 0);
  CHECK(p.id.size() >= 7 + 32);
  CHECK_FALSE(p.name.empty());
  CHECK_FALSE(p.vendor.empty());
  CHECK_FALSE(p.architecture.empty());
  CHECK_FALSE(p.driver_version.empty());
  CHECK(p.total_memory > 0);
  CHECK(p.max_allocation > 0);
  CHECK(p.max_allocation <= p.total_memory);
  CHECK_FALSE(p.simulated);
  CHECK(p.has(cap_async));
  CHECK(p.has(cap_elementwise));
  CHECK(p.has(cap_matmul));
  CHECK_FALSE(p.has(cap_temperature));
  CHECK_FALSE(p.has(cap_power));
  // Every format files store, as stored; not the cpu device's packed Q4_K,
  // and nothing packed is asked for.
  CHECK(fx.dev->runs_weights(weight_type::q4_k));
  CHECK_FALSE(fx.dev->runs_weights(weight_type::q4_k_x16));
  CHECK_FALSE(fx.dev->runs_weights(weight_type::q6_k_x16));
  CHECK(fx.dev->preferred_weights(weight_type::q4_k, 32, 512)
        == weight_type::q4_k);
  CHECK(fx.dev->preferred_weights(weight_type::q6_k, 32, 512)
        == weight_type::q6_k);
  if (p.architecture == "CPU") {
    CHECK(p.support == support_level::experimental);
    CHECK(p.vendor == "Mesa");
  }
  auto t = fx.dev->read_telemetry();
  CHECK_FALSE(t.temperature_c.has_value());
  CHECK_FALSE(t.power_w.has_value());
  CHECK(t.memory.total == p.total_memory);
  // The id is stable: a second backend instance reports the same one.
  fixture again;
  CHECK(again.dev->properties().id == p.id);
  CHECK(again.dev->uid() != fx.dev->uid());
}

TEST_CASE("without a Vulkan driver initialize explains that none exists") {
  // Point the loader at a driver list that does not exist; the loader reads
  // the variable at each vkCreateInstance (this case runs in its own
  // process under ctest).
  ::setenv("VK_ICD_FILENAMES", "/nonexistent/exo_icd.json", 1);
  ::setenv("VK_DRIVER_FILES", "/nonexistent/exo_icd.json", 1);
  auto be = make_vulkan_backend();
  auto st = be->initialize();
  ::unsetenv("VK_ICD_FILENAMES");
  ::unsetenv("VK_DRIVER_FILES");
  REQUIRE_FALSE(st.ok());
  CHECK(st.err().code == errc::no_device);
  INFO(st.err().message);
  CHECK(
      (st.err().message.find("vkCreateInstance failed") != std::string::npos ||
       st.err().message.find("no Vulkan devices found") != std::string::npos));
  CHECK(be->device_count() == 0);
}

TEST_CASE("vulkan allocation refuses zero and too large sizes as values") {
  fixture fx;
  auto zero = fx.dev->allocate(0);
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.err().code == errc::invalid_argument);

  auto huge = fx.dev->allocate(fx.dev->properties().max_allocation + 1);
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.err().code == errc::out_of_memory);
  auto absurd = fx.dev->allocate(std::size_t{1} << 62);
  REQUIRE_FALSE(absurd.ok());
  CHECK(absurd.err().code == errc::out_of_memory);

  auto before = fx.dev->memory();
  {
    auto small = fx.alloc(16);
    auto odd = fx.alloc(1001);
    CHECK(small->size() == 16);
    CHECK(odd->size() == 1001);
    auto during = fx.dev->memory();
    CHECK(during.used_by_exo == before.used_by_exo + 1017);
    CHECK(during.free <= during.total);
    // An unaligned size still round-trips every byte.
    std::mt19937 rng{7};
    auto data = random_bytes(rng, 1001);
    std::vector<std::uint8_t> back(1001);
    REQUIRE(fx.dev->write(*odd, 0, data.data(), 1001).ok());
    REQUIRE(fx.dev->read(*odd, 0, back.data(), 1001).ok());
    CHECK(back == data);
  }
  REQUIRE(fx.dev->synchronize().ok());
  CHECK(fx.dev->memory().used_by_exo == before.used_by_exo);
}

TEST_CASE("vulkan write and read round-trip random sizes and offsets") {
  for (bool staging : {false, true}) {
    DYNAMIC_SECTION((staging ? "staged" : "mapped")) {
      fixture fx{staging ? staged() : vulkan_options{}};
      CHECK(fx.dev->properties().has(cap_host_visible) != staging);
      std::mt19937 rng{staging ? 11u : 12u};
      constexpr std::size_t size = 300'001;
      auto buf = fx.alloc(size);
      std::vector<std::uint8_t> mirror(size, 0);
      REQUIRE(fx.dev->write(*buf, 0, mirror.data(), size).ok());
      for (int round = 0; round < 40; ++round) {
        auto off = std::uniform_int_distribution<std::size_t>{0, size}(rng);
        auto n = std::uniform_int_distribution<std::size_t>{0, size - off}(rng);
        auto data = random_bytes(rng, n);
        REQUIRE(fx.dev->write(*buf, off, data.data(), n).ok());
        std::copy(data.begin(), data.end(), mirror.begin() + off);
        auto roff = std::uniform_int_distribution<std::size_t>{0, size}(rng);
        auto rn =
            std::uniform_int_distribution<std::size_t>{0, size - roff}(rng);
        std::vector<std::uint8_t> back(rn);
        REQUIRE(fx.dev->read(*buf, roff, back.data(), rn).ok());
        REQUIRE(std::equal(back.begin(), back.end(), mirror.begin() + roff));
      }
    }
  }
}

TEST_CASE("vulkan copy moves bytes within the device, overlapping too") {
  for (bool staging : {false, true}) {
    DYNAMIC_SECTION((staging ? "staged" : "mapped")) {
      fixture fx{staging ? staged() : vulkan_options{}};
      std::mt19937 rng{21};
      auto data = random_bytes(rng, 200'000);
      auto src = fx.alloc(data.size());
      auto dst = fx.alloc(data.size());
      REQUIRE(fx.dev->write(*src, 0, data.data(), data.size()).ok());
      REQUIRE(fx.dev->copy(*src, 3, *dst, 17, 150'000).ok());
      std::vector<std::uint8_t> back(150'000);
      REQUIRE(fx.dev->read(*dst, 17, back.data(), back.size()).ok());
      CHECK(std::equal(back.begin(), back.end(), data.begin() + 3));
      // Overlapping ranges in one buffer behave like memmove.
      auto mirror = data;
      REQUIRE(fx.dev->copy(*src, 1000, *src, 1100, 50'000).ok());
      std::memmove(mirror.data() + 1100, mirror.data() + 1000, 50'000);
      REQUIRE(fx.dev->copy(*src, 9000, *src, 8000, 70'000).ok());
      std::memmove(mirror.data() + 8000, mirror.data() + 9000, 70'000);
      std::vector<std::uint8_t> all(data.size());
      REQUIRE(fx.dev->read(*src, 0, all.data(), all.size()).ok());
      CHECK(all == mirror);
      // A copy queued before a write lands before it (rule 1).
      std::vector<std::uint8_t> old_dst(64), fresh(64, 0xAB), got(64);
      REQUIRE(fx.dev->read(*dst, 100, old_dst.data(), 64).ok());
      REQUIRE(fx.dev->copy(*dst, 100, *src, 0, 64).ok());
      REQUIRE(fx.dev->write(*dst, 100, fresh.data(), 64).ok());
      REQUIRE(fx.dev->read(*src, 0, got.data(), 64).ok());
      CHECK(got == old_dst);
      REQUIRE(fx.dev->read(*dst, 100, got.data(), 64).ok());
      CHECK(got == fresh);
    }
  }
}

TEST_CASE("vulkan buffers copy to and from a cpu device") {
  for (bool staging : {false, true}) {
    DYNAMIC_SECTION((staging ? "staged" : "mapped")) {
      fixture fx{staging ? staged() : vulkan_options{}};
      auto cpu = make_cpu_backend();
      REQUIRE(cpu->initialize().ok());
      auto& host = *cpu->device_at(0);
      std::mt19937 rng{31};
      auto data = random_bytes(rng, 500'000);
      auto hbuf = host.allocate(data.size()).value();
      auto vbuf = fx.alloc(data.size());
      REQUIRE(host.write(*hbuf, 0, data.data(), data.size()).ok());
      REQUIRE(copy_between(host, *hbuf, 0, *fx.dev, *vbuf, 8, 400'000).ok());
      std::vector<std::uint8_t> back(400'000);
      REQUIRE(fx.dev->read(*vbuf, 8, back.data(), back.size()).ok());
      CHECK(std::equal(back.begin(), back.end(), data.begin()));
      auto hout = host.allocate(data.size()).value();
      REQUIRE(copy_between(*fx.dev, *vbuf, 8, host, *hout, 100, 400'000).ok());
      REQUIRE(host.read(*hout, 100, back.data(), back.size()).ok());
      CHECK(std::equal(back.begin(), back.end(), data.begin()));
      hbuf.reset();
      hout.reset();
    }
  }
}

TEST_CASE("vulkan elementwise add and mul match the host") {
  fixture fx;
  std::mt19937 rng{41};
  for (std::size_t count : {1u, 255u, 256u, 1000u, 100'003u}) {
    for (auto op : {binary_op::add, binary_op::mul}) {
      auto ha = random_floats(rng, count);
      auto hb = random_floats(rng, count);
      std::vector<float> want(count), got(count);
      host::elementwise(op, ha.data(), hb.data(), want.data(), count);
      // Offsets that are multiples of 4 but not of the storage alignment.
      auto a = fx.alloc(count * 4 + 4);
      auto b = fx.alloc(count * 4 + 12);
      auto c = fx.alloc(count * 4 + 20);
      REQUIRE(fx.dev->write(*a, 4, ha.data(), count * 4).ok());
      REQUIRE(fx.dev->write(*b, 12, hb.data(), count * 4).ok());
      REQUIRE(fx.dev
                  ->elementwise(op, {a.get(), 4}, {b.get(), 12}, {c.get(), 20},
                                count)
                  .ok());
      REQUIRE(fx.dev->read(*c, 20, got.data(), count * 4).ok());
      INFO("count " << count);
      CHECK(relative_error(got, want) < 1e-6);
    }
  }
  // In place: out aliases a.
  auto h = random_floats(rng, 777);
  auto buf = fx.alloc(777 * 4);
  REQUIRE(fx.dev->write(*buf, 0, h.data(), 777 * 4).ok());
  REQUIRE(fx.dev
              ->elementwise(binary_op::add, {buf.get(), 0}, {buf.get(), 0},
                            {buf.get(), 0}, 777)
              .ok());
  std::vector<float> got(777);
  REQUIRE(fx.dev->read(*buf, 0, got.data(), 777 * 4).ok());
  for (std::size_t i = 0; i < 777; ++i)
    REQUIRE(got[i] == h[i] * 2);
}

TEST_CASE("vulkan matmul matches the reference for many shapes") {
  fixture fx;
  std::mt19937 rng{51};
  struct shape {
    std::size_t m, n, k;
  };
  for (auto s : {shape{1, 1, 1}, shape{2, 3, 4}, shape{64, 64, 64},
                 shape{65, 63, 17}, shape{100, 37, 129}, shape{128, 256, 64},
                 shape{7, 300, 50}, shape{200, 1, 33}, shape{1, 1000, 300},
                 shape{1, 5, 1000}, shape{1, 257, 513}})
    for (bool tb : {false, true})
      check_matmul(fx, {s.m, s.n, s.k, tb}, 0, 0, 0, rng);
  // Views at offsets that are not multiples of the storage alignment.
  check_matmul(fx, {33, 45, 70, false}, 4, 8, 12, rng);
  check_matmul(fx, {1, 45, 70, true}, 4, 8, 12, rng);
}

TEST_CASE("vulkan matmul works through staged buffers") {
  fixture fx{staged()};
  std::mt19937 rng{52};
  check_matmul(fx, {70, 90, 110, false}, 0, 4, 0, rng);
  check_matmul(fx, {1, 90, 110, true}, 0, 4, 0, rng);
}

TEST_CASE("vulkan products with F32 weights give a row a lone row's bits, "
          "with and without subgroup arithmetic") {
  // matmul_weights' F32 rows go through matvec_subgroup (or matvec_f32w
  // where the device has no subgroup arithmetic) in tiles of 4 rows and
  // one by one: every row of a product must have the bits it gets alone
  // (a decode batch's sequences, a speculative step's draft rows).
  vulkan_options plain;
  plain.no_subgroup_arithmetic = true;
  for (bool sub : {true, false}) {
    INFO((sub ? "subgroup arithmetic" : "without subgroup arithmetic"));
    fixture fx{sub ? vulkan_options{} : plain};
    std::mt19937 rng{53};
    const std::size_t m = 11, n = 37, k = 129, off = 4;
    auto ha = random_floats(rng, m * k);
    auto hw = random_floats(rng, n * k);
    std::vector<float> want(m * n), got(m * n), alone(n);
    host::matmul_reference(ha.data(), hw.data(), want.data(),
                           {m, n, k, true});
    auto a = fx.alloc(off + ha.size() * 4);
    auto w = fx.alloc(off + hw.size() * 4);
    auto c = fx.alloc(off + got.size() * 4);
    REQUIRE(fx.dev->write(*a, off, ha.data(), ha.size() * 4).ok());
    REQUIRE(fx.dev->write(*w, off, hw.data(), hw.size() * 4).ok());
    REQUIRE(fx.dev
              ->matmul_weights({a.get(), off}, {w.get(), off},
                               weight_type::f32, {c.get(), off},
                               {m, n, k, true})
              .ok());
    REQUIRE(fx.dev->read(*c, off, got.data(), got.size() * 4).ok());
    CHECK(relative_error(got, want) < 1e-4);
    for (std::size_t i = 0; i < m; ++i) {
      INFO("row " << i);
      REQUIRE(fx.dev
                ->matmul_weights({a.get(), off + i * k * 4}, {w.get(), off},
                                 weight_type::f32, {c.get(), off},
                                 {1, n, k, true})
                .ok());
      REQUIRE(fx.dev->read(*c, off, alone.data(), n * 4).ok());
      CHECK(std::memcmp(alone.data(), got.data() + i * n, n * 4) == 0);
    }
    // matmul's one-row product without subgroups: matvec.comp.
    check_matmul(fx, {1, 257, 513, true}, 0, 0, 0, rng);
  }
}

TEST_CASE("vulkan silu_mul, rope_cached and rms_norm without float64 "
          "stay within an ulp or two") {
  // A device without shaderFloat64 runs the shaders' own fma (lavapipe
  // computes it as a product and a sum): not the host's bits (the fp64
  // pipelines give those, backend_conformance), but close to them.
  vulkan_options plain;
  plain.no_float64 = true;
  fixture fx{plain};
  std::mt19937 rng{54};
  const std::size_t n = 16 * 300 + 5;
  auto g = random_floats(rng, n, -12.0f, 12.0f);
  auto u = random_floats(rng, n, -3.0f, 3.0f);
  std::vector<float> want(n), got(n);
  host::silu_mul(g.data(), u.data(), want.data(), n);
  auto bg = fx.alloc(n * 4), bu = fx.alloc(n * 4), bo = fx.alloc(n * 4);
  REQUIRE(fx.dev->write(*bg, 0, g.data(), n * 4).ok());
  REQUIRE(fx.dev->write(*bu, 0, u.data(), n * 4).ok());
  REQUIRE(fx.dev->silu_mul({bg.get(), 0}, {bu.get(), 0}, {bo.get(), 0}, n)
            .ok());
  REQUIRE(fx.dev->read(*bo, 0, got.data(), n * 4).ok());
  for (std::size_t i = 0; i < n; ++i) {
    INFO("silu element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i])
            <= 4e-7 * std::max(1.0f, std::fabs(want[i])));
  }
  // rms_norm's squares summed in float.
  {
    const std::size_t rows = 3, dim = 2048;
    auto x = random_floats(rng, rows * dim, -3.0f, 3.0f);
    auto w = random_floats(rng, dim, 0.5f, 1.5f);
    std::vector<float> nwant(x.size()), ngot(x.size());
    host::rms_norm(x.data(), w.data(), nwant.data(), rows, dim, 1e-5f);
    auto bx = fx.alloc(x.size() * 4), bw = fx.alloc(dim * 4);
    REQUIRE(fx.dev->write(*bx, 0, x.data(), x.size() * 4).ok());
    REQUIRE(fx.dev->write(*bw, 0, w.data(), dim * 4).ok());
    REQUIRE(fx.dev->rms_norm({bx.get(), 0}, {bw.get(), 0}, {bx.get(), 0},
                             rows, dim, 1e-5f)
              .ok());
    REQUIRE(fx.dev->read(*bx, 0, ngot.data(), x.size() * 4).ok());
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("rms_norm element " << i);
      REQUIRE(std::fabs(ngot[i] - nwant[i])
              <= 1e-6 * std::max(1.0f, std::fabs(nwant[i])));
    }
  }
  // rope by the host's angles at far positions.
  rope_dims d{6, 4, 64, 64, 10000.0f, false};
  auto x = random_floats(rng, d.rows * d.heads * d.head_dim, -4.0f, 4.0f);
  std::vector<std::int32_t> pos{0, 1, 17, 4095, 70001, 131071};
  std::vector<float> cs(d.rows * d.n_rot);
  host::rope_cache(cs.data(), pos.data(), nullptr, d);
  auto rx = x;
  host::rope(rx.data(), pos.data(), nullptr, d);
  auto bx = fx.alloc(x.size() * 4), bc = fx.alloc(cs.size() * 4);
  REQUIRE(fx.dev->write(*bx, 0, x.data(), x.size() * 4).ok());
  REQUIRE(fx.dev->write(*bc, 0, cs.data(), cs.size() * 4).ok());
  REQUIRE(fx.dev->rope_cached({bx.get(), 0}, {bc.get(), 0}, d).ok());
  std::vector<float> rgot(x.size());
  REQUIRE(fx.dev->read(*bx, 0, rgot.data(), x.size() * 4).ok());
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("rope element " << i << ": got " << rgot[i] << ", want " << rx[i]);
    REQUIRE(std::fabs(rgot[i] - rx[i]) <= 1e-6 * std::max(1.0f,
                                                          std::fabs(rx[i])));
  }
}

TEST_CASE("an event recorded after a matmul completes with the result") {
  fixture fx;
  std::mt19937 rng{61};
  matmul_dims d{96, 80, 64, true};
  auto ha = random_floats(rng, d.m * d.k);
  auto hb = random_floats(rng, d.n * d.k);
  std::vector<float> want(d.m * d.n);
  host::matmul_reference(ha.data(), hb.data(), want.data(), d);
  auto a = fx.alloc(ha.size() * 4);
  auto b = fx.alloc(hb.size() * 4);
  auto c = fx.alloc(want.size() * 4);
  REQUIRE(fx.dev->write(*a, 0, ha.data(), ha.size() * 4).ok());
  REQUIRE(fx.dev->write(*b, 0, hb.data(), hb.size() * 4).ok());
  REQUIRE(fx.dev->matmul({a.get(), 0}, {b.get(), 0}, {c.get(), 0}, d).ok());
  auto e = fx.dev->record();
  REQUIRE(e.ok());
  CHECK(e->device_uid == fx.dev->uid());
  REQUIRE(fx.dev->wait(*e).ok());
  auto done = fx.dev->completed(*e);
  REQUIRE(done.ok());
  CHECK(*done);
  // After the wait the result is in mapped memory for anyone to see.
  auto* p = static_cast<float*>(fx.dev->host_pointer(*c));
  REQUIRE(p != nullptr);
  std::vector<float> got(p, p + want.size());
  CHECK(relative_error(got, want) < 1e-4);
  // A later event orders after the earlier one.
  REQUIRE(fx.dev
              ->elementwise(binary_op::add, {c.get(), 0}, {c.get(), 0},
                            {c.get(), 0}, want.size())
              .ok());
  auto e2 = fx.dev->record();
  REQUIRE(e2.ok());
  CHECK(e2->sequence > e->sequence);
  REQUIRE(fx.dev->synchronize().ok());
  CHECK(*fx.dev->completed(*e2));
}

TEST_CASE("vulkan refuses events and buffers of other devices") {
  fixture fx;
  fixture other;
  auto e = other.dev->record();
  REQUIRE(e.ok());
  auto w = fx.dev->wait(*e);
  REQUIRE_FALSE(w.ok());
  CHECK(w.err().code == errc::wrong_device);
  auto c = fx.dev->completed(*e);
  REQUIRE_FALSE(c.ok());
  CHECK(c.err().code == errc::wrong_device);
  auto future = fx.dev->wait(event{fx.dev->uid(), 1u << 30});
  REQUIRE_FALSE(future.ok());
  CHECK(future.err().code == errc::invalid_argument);

  auto mine = fx.alloc(64);
  auto theirs = other.alloc(64);
  auto st = fx.dev->copy(*theirs, 0, *mine, 0, 16);
  REQUIRE_FALSE(st.ok());
  CHECK(st.err().code == errc::wrong_device);
  st = fx.dev->elementwise(binary_op::add, {mine.get(), 0}, {theirs.get(), 0},
                           {mine.get(), 0}, 4);
  REQUIRE_FALSE(st.ok());
  CHECK(st.err().code == errc::wrong_device);
  CHECK(fx.dev->host_pointer(*theirs) == nullptr);
}

TEST_CASE("vulkan refuses out-of-range and misaligned views") {
  fixture fx;
  auto buf = fx.alloc(100);
  std::vector<std::uint8_t> host(200);
  auto code = [](const status& s) {
    REQUIRE_FALSE(s.ok());
    return s.err().code;
  };
  CHECK(code(fx.dev->write(*buf, 0, host.data(), 101)) == errc::out_of_range);
  CHECK(code(fx.dev->write(*buf, 101, host.data(), 0)) == errc::out_of_range);
  CHECK(code(fx.dev->read(*buf, 90, host.data(), 11)) == errc::out_of_range);
  CHECK(code(fx.dev->read(*buf, std::size_t(-1), host.data(), 2)) ==
        errc::out_of_range);
  CHECK(code(fx.dev->copy(*buf, 50, *buf, 0, 51)) == errc::out_of_range);
  CHECK(code(fx.dev->write(*buf, 0, nullptr, 4)) == errc::invalid_argument);
  CHECK(code(fx.dev->elementwise(binary_op::add, {buf.get(), 0}, {buf.get(), 0},
                                 {buf.get(), 4}, 25)) == errc::out_of_range);
  CHECK(code(fx.dev->elementwise(binary_op::add, {buf.get(), 2}, {buf.get(), 0},
                                 {buf.get(), 0}, 4)) == errc::invalid_argument);
  CHECK(code(fx.dev->elementwise(binary_op::add, {nullptr, 0}, {buf.get(), 0},
                                 {buf.get(), 0}, 4)) == errc::invalid_argument);
  CHECK(code(fx.dev->matmul({buf.get(), 0}, {buf.get(), 0}, {buf.get(), 0},
                            {5, 6, 1, false})) == errc::out_of_range);
  CHECK(code(fx.dev->matmul({buf.get(), 0}, {buf.get(), 6}, {buf.get(), 0},
                            {2, 2, 2, false})) == errc::invalid_argument);
  CHECK(code(fx.dev->matmul({buf.get(), 0}, {buf.get(), 0}, {buf.get(), 0},
                            {0, 2, 2, false})) == errc::invalid_argument);
  // Nothing above broke the device.
  REQUIRE(fx.dev->write(*buf, 0, host.data(), 100).ok());
  REQUIRE(fx.dev->synchronize().ok());
}

TEST_CASE("vulkan keeps order across many queued operations") {
  // 200 dependent additions exceed one batch: c += one each time.
  fixture fx;
  constexpr std::size_t n = 1000;
  std::vector<float> ones(n, 1.0f), zeros(n, 0.0f), got(n);
  auto one = fx.alloc(n * 4);
  auto acc = fx.alloc(n * 4);
  REQUIRE(fx.dev->write(*one, 0, ones.data(), n * 4).ok());
  REQUIRE(fx.dev->write(*acc, 0, zeros.data(), n * 4).ok());
  for (int i = 0; i < 200; ++i) {
    REQUIRE(fx.dev
                ->elementwise(binary_op::add, {acc.get(), 0}, {one.get(), 0},
                              {acc.get(), 0}, n)
                .ok());
    if (i == 100) {
      // A host write to a buffer with queued work waits for that work.
      REQUIRE(fx.dev->write(*one, 0, ones.data(), n * 4).ok());
    }
  }
  REQUIRE(fx.dev->read(*acc, 0, got.data(), n * 4).ok());
  for (auto v : got)
    REQUIRE(v == 200.0f);
  // A buffer destroyed with work pending is freed once that work is done.
  auto before = fx.dev->memory().used_by_exo;
  {
    auto tmp = fx.alloc(n * 4);
    REQUIRE(fx.dev->copy(*acc, 0, *tmp, 0, n * 4).ok());
  }
  REQUIRE(fx.dev->synchronize().ok());
  CHECK(fx.dev->memory().used_by_exo == before);
}

TEST_CASE("a Vulkan device reports no rates unless it measures them, and "
          "measured ones are its own operations'") {
  {
    fixture f;
    auto& p = f.dev->properties();
    CHECK_FALSE(p.peak_flops);
    CHECK_FALSE(p.memory_bandwidth);
    CHECK_FALSE(p.launch_seconds);
    CHECK_FALSE(f.dev->measure_rates_again());
  }
  vulkan_options o;
  o.measure_rates = true;
  auto t0 = std::chrono::steady_clock::now();
  fixture f{o};
  const double open_s =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
  auto& p = f.dev->properties();
  REQUIRE(p.peak_flops);
  REQUIRE(p.memory_bandwidth);
  REQUIRE(p.launch_seconds);
  std::printf("Vulkan device %s measured %.1f GFLOP/s (F32 matrix product), "
              "%.1f GB/s (matrix-vector over 64 MiB), %.1f us an operation; "
              "opened in %.3f s\n",
              p.name.c_str(), *p.peak_flops / 1e9, *p.memory_bandwidth / 1e9,
              *p.launch_seconds * 1e6, open_s);
  // Broad sanity: a device that computes at all, an operation's cost
  // below a second, and no more bytes a second than a machine moves.
  CHECK(*p.peak_flops > 1e7);
  CHECK(*p.memory_bandwidth > 1e7);
  CHECK(*p.memory_bandwidth < 1e14);
  CHECK(*p.launch_seconds > 0);
  CHECK(*p.launch_seconds < 1);
  // Measured again: new figures of the same kind; the buffers it used are
  // given back.
  const auto used = f.dev->memory().free;
  CHECK(f.dev->measure_rates_again());
  CHECK(f.dev->properties().peak_flops);
  CHECK(f.dev->memory().free == used);
}
