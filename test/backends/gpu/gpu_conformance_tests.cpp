// Conformance of the CUDA and HIP backends on a machine with the GPU (label
// backend): the ordering rules of backend.hpp, transfers larger than the
// staging buffers, the native kernels (cuBLAS and the shared tiled kernel)
// against the host reference, events, peer copies. Without a device each
// test WARNs why and returns: a clean skip, not a pass of anything. The
// same checks always run on the GPU emulator's two devices
// (gpu_emulator.hpp): the device code and kernels, on the host.

#include "backends/backend.hpp"
#include "backends/gpu_common/gpu_properties.hpp"
#include "backends/gpu_common/kernel_quant.hpp"
#include "backends/host_kernels.hpp"

#include "backends/gpu_common/gpu_emulator.hpp"
#include "backends/gpu_common/gpu_emulator_backend.hpp"
#ifdef EXO_TEST_CUDA
#  include "backends/cuda/cuda_backend.hpp"
#endif
#ifdef EXO_TEST_HIP
#  include "backends/hip/hip_backend.hpp"
#endif

#include <catch2/catch.hpp>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace exo::backend;

namespace {

struct candidate {
  const char* name;
  std::function<std::unique_ptr<backend>(gpu_options)> make;
};

std::vector<candidate> candidates() {
  std::vector<candidate> out;
#ifdef EXO_TEST_CUDA
  out.push_back({"cuda", [](gpu_options o) { return make_cuda_backend(o); }});
#endif
#ifdef EXO_TEST_HIP
  out.push_back({"hip", [](gpu_options o) { return make_hip_backend(o); }});
#endif
  out.push_back({"cuda-emu", [](gpu_options o) {
                   gpu::emu::configure({2, std::size_t{1} << 30});
                   return make_gpu_emulator_backend(o);
                 }});
  return out;
}

/// Small staging buffers, so that modest transfers take several chunks.
constexpr std::size_t small_staging = std::size_t{1} << 20;

/// Calls f(backend) for every GPU backend that has a device; WARNs for the
/// others.
void for_each_gpu(gpu_options opts,
                  const std::function<void(const char*, backend&)>& f) {
  bool any = false;
  for (auto& c : candidates()) {
    auto be = c.make(opts);
    auto st = be->initialize();
    if (!st.ok()) {
      WARN("skipped " << c.name << ": " << st.err().message);
      continue;
    }
    any = true;
    f(c.name, *be);
    be->shutdown();
  }
  if (!any)
    FAIL("not even the GPU emulator has a device");
}

void for_each_gpu(const std::function<void(const char*, backend&)>& f) {
  gpu_options opts;
  opts.staging_bytes = small_staging;
  for_each_gpu(opts, f);
}

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> d{-1.0f, 1.0f};
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

std::unique_ptr<buffer> alloc(device& dev, std::size_t n) {
  auto r = dev.allocate(n);
  REQUIRE(r.ok());
  return std::move(*r);
}

void require_close(const std::vector<float>& got,
                   const std::vector<float>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::fabs(got[i] - want[i])
            <= rel * std::max(1.0, std::fabs(double{want[i]})));
  }
}

/// W (n rows of k) encoded as t, starting `woff` bytes into the result.
std::vector<std::uint8_t> encode_rows(weight_type t,
                                      const std::vector<float>& w,
                                      const matmul_dims& d, std::size_t woff) {
  const std::size_t rb = *weight_row_bytes(t, d.k);
  std::vector<std::uint8_t> enc(woff + rb * d.n);
  for (std::size_t j = 0; j < d.n; ++j)
    host::encode_row(t, w.data() + j * d.k, enc.data() + woff + j * rb, d.k);
  return enc;
}

/// A W^T on dev: a and enc uploaded, matmul_weights with W at woff, C read.
std::vector<float> weights_product(device& dev, weight_type t,
                                   const std::vector<float>& a,
                                   const std::vector<std::uint8_t>& enc,
                                   std::size_t woff, const matmul_dims& d) {
  auto ba = alloc(dev, a.size() * 4);
  auto bw = alloc(dev, enc.size());
  auto bc = alloc(dev, d.m * d.n * 4);
  REQUIRE(dev.write(*ba, 0, a.data(), a.size() * 4).ok());
  REQUIRE(dev.write(*bw, 0, enc.data(), enc.size()).ok());
  REQUIRE(dev.matmul_weights({ba.get(), 0}, {bw.get(), woff}, t,
                             {bc.get(), 0}, d)
            .ok());
  std::vector<float> got(d.m * d.n);
  REQUIRE(dev.read(*bc, 0, got.data(), got.size() * 4).ok());
  return got;
}

} // namespace

TEST_CASE("GPU devices report their properties from the runtime") {
  for_each_gpu([](const char* name, backend& be) {
    for (std::size_t i = 0; i < be.device_count(); ++i) {
      auto& p = be.device_at(i)->properties();
      INFO(name << " device " << i << ": " << p.name);
      CHECK_FALSE(p.name.empty());
      CHECK_FALSE(p.architecture.empty());
      CHECK(p.total_memory > 0);
      CHECK(p.compute_units > 0);
      CHECK(gpu::normalize_pci_bus_id(p.pci_bus_id) == p.pci_bus_id);
      CHECK(p.id.rfind(std::string{name} + ":", 0) == 0);
      CHECK_FALSE(p.simulated);
      CHECK(p.has(cap_async));
    }
  });
}

TEST_CASE("GPU transfers larger than the staging buffers keep every byte") {
  for_each_gpu([](const char*, backend& be) {
    auto& dev = *be.device_at(0);
    std::size_t n = 3 * small_staging + 12345;
    std::mt19937 rng{1};
    std::vector<unsigned char> src(n);
    for (auto& b : src)
      b = static_cast<unsigned char>(rng());
    auto buf = alloc(dev, n + 7);
    REQUIRE(dev.write(*buf, 7, src.data(), n).ok());
    std::vector<unsigned char> back(n);
    REQUIRE(dev.read(*buf, 7, back.data(), n).ok());
    CHECK(back == src);
    // The host source may be reused as soon as write returns.
    auto copy = src;
    REQUIRE(dev.write(*buf, 0, src.data(), n).ok());
    std::fill(src.begin(), src.end(), 0);
    REQUIRE(dev.read(*buf, 0, back.data(), n).ok());
    CHECK(back == copy);
  });
}

TEST_CASE("GPU copies within a buffer behave like memmove") {
  for_each_gpu([](const char*, backend& be) {
    auto& dev = *be.device_at(0);
    std::vector<unsigned char> v(1000);
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<unsigned char>(i);
    auto buf = alloc(dev, v.size());
    REQUIRE(dev.write(*buf, 0, v.data(), v.size()).ok());
    REQUIRE(dev.copy(*buf, 0, *buf, 100, 800).ok());
    std::vector<unsigned char> back(v.size());
    REQUIRE(dev.read(*buf, 0, back.data(), back.size()).ok());
    auto want = v;
    std::memmove(want.data() + 100, v.data(), 800);
    CHECK(back == want);
  });
}

TEST_CASE("GPU element-wise kernels match the host") {
  for_each_gpu([](const char*, backend& be) {
    auto& dev = *be.device_at(0);
    for (std::size_t n : {1u, 255u, 100003u}) {
      auto a = random_floats(n, 2);
      auto b = random_floats(n, 3);
      auto ba = alloc(dev, n * 4);
      auto bb = alloc(dev, n * 4);
      auto bc = alloc(dev, n * 4);
      REQUIRE(dev.write(*ba, 0, a.data(), n * 4).ok());
      REQUIRE(dev.write(*bb, 0, b.data(), n * 4).ok());
      for (auto op : {binary_op::add, binary_op::mul}) {
        REQUIRE(dev.elementwise(op, {ba.get(), 0}, {bb.get(), 0},
                                {bc.get(), 0}, n)
                  .ok());
        std::vector<float> got(n), want(n);
        REQUIRE(dev.read(*bc, 0, got.data(), n * 4).ok());
        host::elementwise(op, a.data(), b.data(), want.data(), n);
        CHECK(got == want);
      }
    }
  });
}

TEST_CASE("GPU matrix products match the double-precision reference, "
          "vendor BLAS and tiled kernel alike") {
  for (bool tiled : {false, true}) {
    gpu_options opts;
    opts.tiled_matmul = tiled;
    for_each_gpu(opts, [tiled](const char*, backend& be) {
      auto& dev = *be.device_at(0);
      using dims = matmul_dims;
      for (auto d : {dims{1, 1, 1, false}, dims{1, 300, 129, true},
                     dims{33, 47, 65, false}, dims{64, 64, 64, true},
                     dims{257, 130, 70, false}}) {
        INFO("tiled " << tiled << " " << d.m << "x" << d.n << "x" << d.k
                      << " transpose_b " << d.transpose_b);
        auto a = random_floats(d.m * d.k, 4);
        auto b = random_floats(d.k * d.n, 5);
        auto ba = alloc(dev, a.size() * 4);
        auto bb = alloc(dev, b.size() * 4);
        auto bc = alloc(dev, d.m * d.n * 4);
        REQUIRE(dev.write(*ba, 0, a.data(), a.size() * 4).ok());
        REQUIRE(dev.write(*bb, 0, b.data(), b.size() * 4).ok());
        REQUIRE(dev.matmul({ba.get(), 0}, {bb.get(), 0}, {bc.get(), 0}, d)
                  .ok());
        std::vector<float> got(d.m * d.n), want(d.m * d.n);
        REQUIRE(dev.read(*bc, 0, got.data(), got.size() * 4).ok());
        host::matmul_reference(a.data(), b.data(), want.data(), d);
        require_close(got, want, 1e-4);
      }
    });
  }
}

TEST_CASE("GPU quantized products give the CPU engine's bits") {
  // Q4_0 ... Q8_0 and the K-quants: the activations quantized on the GPU as
  // llama.cpp quantizes them and each row summed in the CPU engine's lanes
  // (gpu_common/kernel_quant.hpp), so the result is host::matmul_weights'
  // bits exactly -- on several rows per block, rows of A and offsets.
  for_each_gpu([](const char*, backend& be) {
    auto& dev = *be.device_at(0);
    std::size_t mismatches = 0, compared = 0;
    for (weight_type t : all_weight_types) {
      const std::uint32_t id = ggml_type_id(t);
      if (gpu::math::act_format_of(id) == gpu::math::act_format::none)
        continue;
      for (matmul_dims d : {matmul_dims{1, 16, 256, true},
                            matmul_dims{6, 24, 512, true},
                            matmul_dims{3, 13, 256, true},
                            matmul_dims{2, 40, 2048, true}}) {
        for (unsigned seed = 0; seed < 4; ++seed) {
          auto a = random_floats(d.m * d.k, 100 + seed);
          auto w = random_floats(d.n * d.k, 200 + seed);
          const std::size_t rb = *weight_row_bytes(t, d.k);
          const std::size_t woff = 6; // even, not 4-aligned
          auto enc = encode_rows(t, w, d, woff);
          auto got = weights_product(dev, t, a, enc, woff, d);
          std::vector<float> want(d.m * d.n);
          host::matmul_weights(a.data(), enc.data() + woff, t, want.data(),
                               d, 1);
          for (std::size_t i = 0; i < got.size(); ++i) {
            ++compared;
            if (std::memcmp(&got[i], &want[i], 4) == 0)
              continue;
            if (++mismatches > 4)
              continue;
            // The host replica's lanes of that element, to show which
            // part differs.
            const std::size_t r = i / d.n, j = i % d.n;
            const auto f = gpu::math::act_format_of(id);
            const std::size_t be_ = gpu::math::act_block_elements(f);
            std::vector<std::uint8_t> act(d.k / be_
                                          * gpu::math::act_block_bytes(f));
            for (std::size_t b = 0; b < d.k / be_; ++b)
              gpu::math::quantize_act_block(f, a.data() + r * d.k, b,
                                            act.data());
            float acc[8], extra[8];
            for (unsigned l = 0; l < 8; ++l)
              gpu::math::lane_dot(id, enc.data() + woff + j * rb, act.data(),
                                  d.k / weight_block_elements(t), l, &acc[l],
                                  &extra[l]);
            std::printf("%s m=%zu n=%zu k=%zu seed %u [%zu][%zu]: gpu %.9g "
                        "host %.9g replica %.9g\n  lanes",
                        to_string(t), d.m, d.n, d.k, seed, r, j,
                        double{got[i]}, double{want[i]},
                        double{gpu::math::combine_lanes(id, acc, extra)});
            for (unsigned l = 0; l < 8; ++l)
              std::printf(" %.9g/%.9g", double{acc[l]}, double{extra[l]});
            std::printf("\n");
          }
        }
      }
    }
    INFO(mismatches << " of " << compared << " elements differ");
    CHECK(mismatches == 0);
    CHECK(compared == 10 * 4 * (16 + 6 * 24 + 3 * 13 + 2 * 40));
  });
}

TEST_CASE("GPU prompt products of many rows multiply the decoded weights "
          "in F32, in pieces too, vendor BLAS and tiled kernel alike") {
  // gpu_options::prompt_gemm_rows: a prompt's product of 40 rows (not
  // apart) in every format other than F32 is the product of A with the
  // decoded weights within F32 rounding (the activations are not rounded
  // to 8 bits or to half, so tighter than the row kernels' bounds), with
  // W in one piece or in pieces of a few rows; with the option off it is
  // the row kernels' (the CPU engine's bits for the quantized formats).
  for (std::size_t chunk : {std::size_t{64} << 20, std::size_t{10240}}) {
    for (bool tiled : {false, true}) {
      gpu_options opts;
      opts.staging_bytes = small_staging;
      opts.tiled_matmul = tiled;
      opts.prompt_gemm_chunk_bytes = chunk;
      for_each_gpu(opts, [&](const char*, backend& be) {
        auto& dev = *be.device_at(0);
        for (weight_type t : all_weight_types) {
          for (matmul_dims d : {matmul_dims{40, 37, 256, true},
                                matmul_dims{33, 8, 512, true}}) {
            INFO(to_string(t) << " chunk " << chunk << " tiled " << tiled
                              << " m=" << d.m << " n=" << d.n
                              << " k=" << d.k);
            auto a = random_floats(d.m * d.k, 300);
            auto w = random_floats(d.n * d.k, 301);
            const std::size_t rb = *weight_row_bytes(t, d.k);
            const std::size_t woff = t == weight_type::f32 ? 8 : 6;
            auto enc = encode_rows(t, w, d, woff);
            auto got = weights_product(dev, t, a, enc, woff, d);
            std::vector<float> deq(d.n * d.k);
            for (std::size_t j = 0; j < d.n; ++j)
              host::decode_row(t, enc.data() + woff + j * rb,
                               deq.data() + j * d.k, d.k);
            for (std::size_t i = 0; i < d.m; ++i)
              for (std::size_t j = 0; j < d.n; ++j) {
                double want = 0, mag = 0;
                for (std::size_t p = 0; p < d.k; ++p) {
                  const double x = double{a[i * d.k + p]} * deq[j * d.k + p];
                  want += x;
                  mag += std::fabs(x);
                }
                INFO("row " << i << " col " << j << ": got "
                            << got[i * d.n + j] << ", want " << want);
                // k unit roundoffs: F32's bound for a sum of k products
                // in any order.
                REQUIRE(std::fabs(got[i * d.n + j] - want)
                        <= static_cast<double>(d.k) * 0x1p-24 * mag + 1e-6);
              }
          }
        }
      });
    }
  }
  // Off: 40 rows of the quantized formats give the CPU engine's bits.
  gpu_options off;
  off.prompt_gemm_rows = 0;
  for_each_gpu(off, [](const char*, backend& be) {
    auto& dev = *be.device_at(0);
    for (weight_type t : {weight_type::q8_0, weight_type::q4_k,
                          weight_type::q6_k}) {
      const matmul_dims d{40, 16, 256, true};
      INFO(to_string(t));
      auto a = random_floats(d.m * d.k, 310);
      auto enc = encode_rows(t, random_floats(d.n * d.k, 311), d, 0);
      auto got = weights_product(dev, t, a, enc, 0, d);
      std::vector<float> want(d.m * d.n);
      host::matmul_weights(a.data(), enc.data(), t, want.data(), d, 1);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
    }
  });
}

TEST_CASE("GPU events complete in queue order and belong to their device") {
  for_each_gpu([](const char*, backend& be) {
    auto& dev = *be.device_at(0);
    std::size_t n = 1 << 20;
    auto a = random_floats(n, 6);
    auto ba = alloc(dev, n * 4);
    auto bc = alloc(dev, n * 4);
    REQUIRE(dev.write(*ba, 0, a.data(), n * 4).ok());
    std::vector<event> events;
    for (int i = 0; i < 20; ++i) {
      REQUIRE(dev.elementwise(binary_op::add, {ba.get(), 0}, {ba.get(), 0},
                              {bc.get(), 0}, n)
                .ok());
      auto e = dev.record();
      REQUIRE(e.ok());
      events.push_back(*e);
    }
    REQUIRE(dev.wait(events.back()).ok());
    for (auto& e : events) {
      auto done = dev.completed(e);
      REQUIRE(done.ok());
      CHECK(*done);
    }
    event future{dev.uid(), events.back().sequence + 1};
    CHECK(dev.wait(future).err().code == errc::invalid_argument);
    event foreign{dev.uid() + 1000, 1};
    CHECK(dev.wait(foreign).err().code == errc::wrong_device);
  });
}

TEST_CASE("GPU allocations beyond the device are out-of-memory values") {
  for_each_gpu([](const char*, backend& be) {
    auto& dev = *be.device_at(0);
    auto r = dev.allocate(dev.properties().total_memory + 1);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().code == errc::out_of_memory);
    CHECK(dev.allocate(0).err().code == errc::invalid_argument);
    auto before = dev.memory().used_by_exo;
    {
      auto b = alloc(dev, 1 << 20);
      CHECK(dev.memory().used_by_exo == before + (1 << 20));
    }
    CHECK(dev.memory().used_by_exo == before);
  });
}

TEST_CASE("GPU peer copies move the bytes between every pair of devices") {
  for_each_gpu([](const char* name, backend& be) {
    if (be.device_count() < 2) {
      WARN(name << ": one device, no peer copies to check");
      return;
    }
    std::size_t n = 3 * small_staging + 1;
    std::vector<unsigned char> src(n);
    for (std::size_t i = 0; i < n; ++i)
      src[i] = static_cast<unsigned char>(i * 7);
    for (std::size_t i = 0; i < be.device_count(); ++i)
      for (std::size_t j = 0; j < be.device_count(); ++j) {
        if (i == j)
          continue;
        auto& a = *be.device_at(i);
        auto& b = *be.device_at(j);
        auto ba = alloc(a, n);
        auto bb = alloc(b, n);
        REQUIRE(a.write(*ba, 0, src.data(), n).ok());
        REQUIRE(copy_between(a, *ba, 0, b, *bb, 0, n).ok());
        std::vector<unsigned char> back(n);
        REQUIRE(b.read(*bb, 0, back.data(), n).ok());
        CHECK(back == src);
      }
  });
}

TEST_CASE("GPU telemetry reports memory and only readings it can make") {
  for_each_gpu([](const char*, backend& be) {
    auto& dev = *be.device_at(0);
    auto t = dev.read_telemetry();
    CHECK(t.memory.total > 0);
    CHECK(t.memory.free <= t.memory.total);
    auto& p = dev.properties();
    CHECK(t.temperature_c.has_value() == p.has(cap_temperature));
    if (t.temperature_c)
      CHECK((*t.temperature_c > 0 && *t.temperature_c < 150));
    if (t.power_w)
      CHECK(*t.power_w >= 0);
  });
}
