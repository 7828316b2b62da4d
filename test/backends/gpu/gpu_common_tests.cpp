// Host logic shared by the CUDA and HIP backends, checked without a GPU:
// error tables, property parsing, launch geometry, the dlopen telemetry
// loaders' absent-library paths, and the kernels' math against
// exo::backend::host.

#include "backends/gpu_common/gpu_errors.hpp"
#include "backends/gpu_common/gpu_properties.hpp"
#include "backends/gpu_common/kernel_math.hpp"
#include "backends/gpu_common/kernel_reference.hpp"
#include "backends/gpu_common/launch_geometry.hpp"
#include "backends/gpu_common/telemetry_loader.hpp"
#include "backends/host_kernels.hpp"
#include "test/support/random.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace exo::backend;
using namespace exo::backend::gpu;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng{seed};
  return exo::test::random_floats(rng, n);
}

void require_close(const std::vector<float>& got,
                   const std::vector<double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i])
            <= rel * std::max(1.0, std::fabs(want[i])));
  }
}

std::vector<double> widen(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

} // namespace

// -- error mapping -----------------------------------------------------------

TEST_CASE("CUDA runtime codes map to the errc a caller can act on") {
  CHECK(classify(api::cuda, 2).code == errc::out_of_memory);
  CHECK(std::string{classify(api::cuda, 2).name}
        == "cudaErrorMemoryAllocation");
  CHECK(classify(api::cuda, 35).code == errc::no_device);
  CHECK(classify(api::cuda, 100).code == errc::no_device);
  CHECK(classify(api::cuda, 1).code == errc::invalid_argument);
  CHECK(classify(api::cuda, 700).code == errc::device_lost);
  CHECK(classify(api::cuda, 719).code == errc::device_lost);
  CHECK(classify(api::cuda, 801).code == errc::unsupported);
  CHECK(classify(api::cuda, 600).code == errc::timeout);
  CHECK(classify(api::cuda, 123456).code == errc::driver_error);
  CHECK(std::string{classify(api::cuda, 123456).name} == "unknown");
}

TEST_CASE("HIP runtime codes map like their CUDA counterparts") {
  for (int code : {1, 2, 35, 100, 101, 600, 700, 701, 719, 801}) {
    INFO("code " << code);
    CHECK(classify(api::hip, code).code == classify(api::cuda, code).code);
  }
  CHECK(std::string{classify(api::hip, 100).name} == "hipErrorNoDevice");
  CHECK(std::string{classify(api::hip, 2).name} == "hipErrorOutOfMemory");
}

TEST_CASE("NVML and rocm_smi codes map to errc") {
  CHECK(classify(api::nvml, 3).code == errc::unsupported);
  CHECK(classify(api::nvml, 9).code == errc::no_device);
  CHECK(classify(api::nvml, 15).code == errc::device_lost);
  CHECK(std::string{classify(api::nvml, 15).name}
        == "NVML_ERROR_GPU_IS_LOST");
  CHECK(classify(api::rocm_smi, 2).code == errc::unsupported);
  CHECK(classify(api::rocm_smi, 8).code == errc::no_device);
  CHECK(std::string{classify(api::rocm_smi, 0xFFFFFFFF).name}
        == "RSMI_STATUS_UNKNOWN_ERROR");
}

TEST_CASE("absent drivers and devices are recognised as such") {
  CHECK(means_absent(api::cuda, 35));
  CHECK(means_absent(api::cuda, 34));
  CHECK(means_absent(api::cuda, 100));
  CHECK_FALSE(means_absent(api::cuda, 2));
  CHECK(means_absent(api::hip, 100));
  CHECK_FALSE(means_absent(api::hip, 700));
  CHECK(means_absent(api::nvml, 9));
}

TEST_CASE("an API error names the call, the code and the library's text") {
  auto e = api_error(api::cuda, "cudaMallocAsync", 2, "out of memory");
  CHECK(e.code == errc::out_of_memory);
  CHECK(e.message
        == "cudaMallocAsync: error 2 (cudaErrorMemoryAllocation): "
           "out of memory");
  auto bare = api_error(api::hip, "hipMemcpyAsync", 1, nullptr);
  CHECK(bare.message == "hipMemcpyAsync: error 1 (hipErrorInvalidValue)");
}

TEST_CASE("a missing driver reads as 'CUDA driver not found' with the cause") {
  auto e = absent_error(api::cuda, "cudaGetDeviceCount", 35,
                        "CUDA driver version is insufficient for CUDA "
                        "runtime version");
  CHECK(e.code == errc::no_device);
  CHECK(e.message
        == "CUDA driver not found (cudaGetDeviceCount: error 35: CUDA driver "
           "version is insufficient for CUDA runtime version)");
  auto none = absent_error(api::cuda, "cudaGetDeviceCount", 100, nullptr);
  CHECK(none.message
        == "no CUDA device (cudaGetDeviceCount: error 100: "
           "cudaErrorNoDevice)");
  auto hip = absent_error(api::hip, "hipGetDeviceCount", 100, "no device");
  CHECK(hip.code == errc::no_device);
  CHECK(hip.message == "no ROCm device (hipGetDeviceCount: hipErrorNoDevice)");
}

// -- properties --------------------------------------------------------------

TEST_CASE("compute capabilities become sm_ architecture names") {
  CHECK(cuda_architecture(9, 0) == "sm_90");
  CHECK(cuda_architecture(8, 6) == "sm_86");
  CHECK(cuda_architecture(12, 0) == "sm_120");
  CHECK(cuda_architecture(0, 0).empty());
  CHECK(cuda_architecture(8, 10).empty());
}

TEST_CASE("gcnArchName feature suffixes are stripped to the base target") {
  CHECK(hip_architecture("gfx90a:sramecc+:xnack-") == "gfx90a");
  CHECK(hip_architecture("gfx1030") == "gfx1030");
  CHECK(hip_architecture("gfx942:sramecc+:xnack-") == "gfx942");
  CHECK(hip_architecture("").empty());
  CHECK(hip_architecture("gfx").empty());
  CHECK(hip_architecture("sm_90").empty());
  CHECK(hip_architecture("gfx9z0").empty());
}

TEST_CASE("PCI bus ids format canonically and parse from every library") {
  CHECK(format_pci_bus_id({0, 0x65, 0, 0}) == "0000:65:00.0");
  CHECK(format_pci_bus_id({1, 0xc1, 0x1f, 7}) == "0001:c1:1f.7");
  CHECK(normalize_pci_bus_id("00000000:65:00.0") == "0000:65:00.0");
  CHECK(normalize_pci_bus_id("0000:65:00.0") == "0000:65:00.0");
  CHECK(normalize_pci_bus_id("0000:C1:00.0") == "0000:c1:00.0");
  CHECK(normalize_pci_bus_id("65:00.0") == "0000:65:00.0");
  CHECK_FALSE(normalize_pci_bus_id(""));
  CHECK_FALSE(normalize_pci_bus_id("0000:65:00"));
  CHECK_FALSE(normalize_pci_bus_id("0000:65:20.0")); // device > 0x1f
  CHECK_FALSE(normalize_pci_bus_id("0000:65:00.8")); // function > 7
  CHECK_FALSE(normalize_pci_bus_id("0000:65:00.0x"));
  CHECK_FALSE(normalize_pci_bus_id("zz:00.0"));
  CHECK_FALSE(normalize_pci_bus_id("123456789:65:00.0"));
}

TEST_CASE("rocm_smi BDF ids decode to the same bus id as HIP reports") {
  std::uint64_t bdfid = (std::uint64_t{0} << 32) | (0x65u << 8) | (0x1u << 3)
                        | 0x2u;
  CHECK(format_pci_bus_id(pci_address_from_bdfid(bdfid)) == "0000:65:01.2");
  CHECK(format_pci_bus_id(pci_address_from_bdfid(std::uint64_t{3} << 32))
        == "0003:00:00.0");
}

TEST_CASE("UUIDs format as 8-4-4-4-12 hex, all-zero as unknown") {
  unsigned char b[16];
  for (int i = 0; i < 16; ++i)
    b[i] = static_cast<unsigned char>(0xa0 + i);
  CHECK(format_uuid(b) == "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
  char zero[16] = {};
  CHECK(format_uuid(zero).empty());
}

TEST_CASE("peak FLOP/s is units x clock x FLOPs per clock, where known") {
  // H100 SXM: 132 SMs, 1980 MHz boost, 128 FP32 lanes: ~66.9 TFLOP/s.
  auto h100 = peak_flops(132, 1980, cuda_fp32_flops_per_clock(9, 0));
  REQUIRE(h100);
  CHECK(*h100 == Approx(66.9e12).epsilon(0.01));
  // A100: 108 SMs, 1410 MHz, 64 lanes: 19.5 TFLOP/s.
  auto a100 = peak_flops(108, 1410, cuda_fp32_flops_per_clock(8, 0));
  REQUIRE(a100);
  CHECK(*a100 == Approx(19.5e12).epsilon(0.01));
  // MI250X GCD: 110 CUs, 1700 MHz, packed FP32: 47.9 TFLOP/s.
  auto mi250 = peak_flops(110, 1700, hip_fp32_flops_per_clock("gfx90a"));
  REQUIRE(mi250);
  CHECK(*mi250 == Approx(47.9e12).epsilon(0.01));
  CHECK_FALSE(cuda_fp32_flops_per_clock(5, 0));
  CHECK_FALSE(hip_fp32_flops_per_clock("gfx000"));
  CHECK_FALSE(peak_flops(0, 1980, 256.0));
  CHECK_FALSE(peak_flops(132, 1980, std::nullopt));
}

TEST_CASE("memory bandwidth comes from the memory clock and bus width") {
  // 1593 MHz HBM2e on a 5120-bit bus: 2.04 TB/s (A100 80 GB).
  auto bw = memory_bandwidth(1593, 5120);
  REQUIRE(bw);
  CHECK(*bw == Approx(2.039e12).epsilon(0.01));
  CHECK_FALSE(memory_bandwidth(0, 5120));
}

// -- launch geometry ---------------------------------------------------------

TEST_CASE("warp launches give each item a warp, eight to a block, and "
          "a capped grid strides over every item once") {
  CHECK(warps_launch(0).grid == 0);
  CHECK(warp_rows_launch({1, 0, 64, true}).grid == 0);
  auto one = warps_launch(1);
  CHECK(one.grid == 1);
  CHECK(one.block == warp_rows_per_block * 32);
  CHECK(warps_launch(16).grid == 2);
  CHECK(warps_launch(17).grid == 3);
  CHECK(warps_launch(std::size_t{1} << 40).grid == max_grid_extent);
  // matvec_vecdot_kernel: 4 rows of W a warp.
  CHECK(warp_rows_launch({4, 17, 64, true}).grid == 1);
  CHECK(warp_rows_launch({4, 100, 64, true}).grid == 4);
  // quantize_q8k_warps_kernel's loop: item b0 + warp, b0 striding by the
  // grid's warps.
  for (std::size_t n : {1u, 7u, 8u, 9u, 22u, 1000u}) {
    auto g = warps_launch(n);
    const std::size_t warps = g.block / 32;
    std::vector<int> hits(n);
    for (std::size_t blk = 0; blk < g.grid; ++blk)
      for (std::size_t w = 0; w < warps; ++w)
        for (auto b0 = blk * warps; b0 < n; b0 += g.grid * warps)
          if (b0 + w < n)
            ++hits[b0 + w];
    for (auto h : hits)
      CHECK(h == 1);
  }
}

TEST_CASE("element-wise launches cover every element once, capped grids "
          "stride") {
  CHECK(elementwise_launch(0).grid == 0);
  auto one = elementwise_launch(1);
  CHECK(one.grid == 1);
  CHECK(one.block == 256);
  auto exact = elementwise_launch(1024);
  CHECK(exact.grid == 4);
  auto plus = elementwise_launch(1025);
  CHECK(plus.grid == 5);
  auto huge = elementwise_launch(std::size_t{1} << 40);
  CHECK(huge.grid == max_grid_extent);
  // The grid-stride loop visits every index exactly once.
  for (std::size_t n : {1u, 255u, 256u, 257u, 100000u}) {
    auto g = elementwise_launch(n, 64);
    std::vector<int> hits(n);
    std::size_t stride = std::size_t{g.block} * g.grid;
    for (std::size_t b = 0; b < g.grid; ++b)
      for (std::size_t t = 0; t < g.block; ++t)
        for (auto i = b * g.block + t; i < n; i += stride)
          ++hits[i];
    for (auto h : hits)
      REQUIRE(h == 1);
  }
}

TEST_CASE("row launches use one block per row and a power-of-two width") {
  CHECK(row_launch(0, 10).grid == 0);
  CHECK(row_launch(10, 0).grid == 0);
  auto small = row_launch(3, 5);
  CHECK(small.grid == 3);
  CHECK(small.block == 32);
  CHECK(row_launch(1, 4096).block == 1024);
  CHECK(row_launch(1, 300).block == 512);
  CHECK(row_launch(1, 512).block == 512);
  CHECK(row_launch(100000, 8).grid == max_grid_extent);
  for (std::size_t cols = 1; cols < 3000; cols += 37) {
    auto b = row_launch(1, cols).block;
    REQUIRE((b & (b - 1)) == 0);
  }
}

TEST_CASE("matmul tiles cover the output and pad the ragged edges") {
  matmul_dims d{33, 17, 5, false};
  auto g = matmul_launch(d);
  CHECK(g.tiles_y == 3);
  CHECK(g.tiles_x == 2);
  CHECK(g.tiles_k == 1);
  CHECK(g.grid_x == 2);
  CHECK(g.grid_y == 3);
  CHECK(g.block_x == math::matmul_tile);
  CHECK(g.block_y == math::matmul_tile);
  CHECK(matmul_launch({0, 1, 1, false}).grid_x == 0);
  auto big = matmul_launch({std::size_t{16} * 70000, 16, 16, false});
  CHECK(big.grid_y == max_grid_extent);
  CHECK(big.tiles_y == 70000);
}

TEST_CASE("staging chunks split a transfer into bounded pieces") {
  chunk_plan p{10, 4};
  CHECK(p.count() == 3);
  CHECK(p.offset(2) == 8);
  CHECK(p.size(0) == 4);
  CHECK(p.size(2) == 2);
  CHECK(p.size(3) == 0);
  CHECK(chunk_plan{0, 4}.count() == 0);
  CHECK(chunk_plan{8, 4}.count() == 2);
  CHECK(chunk_plan{8, 4}.size(1) == 4);
}

namespace {

/// A plain column-major GEMM (the BLAS convention): C = op(A) * B with
/// C rows x cols, leading dimensions as given.
void column_major_sgemm(bool transpose_a, int rows, int cols, int inner,
                        const float* a, int lda, const float* b, int ldb,
                        float* c, int ldc) {
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i) {
      double acc = 0;
      for (int p = 0; p < inner; ++p) {
        float av = transpose_a ? a[p + i * lda] : a[i + p * lda];
        acc += static_cast<double>(av) * b[p + j * ldb];
      }
      c[i + j * ldc] = static_cast<float>(acc);
    }
}

} // namespace

TEST_CASE("a row-major product through a column-major BLAS swaps operands") {
  for (bool tb : {false, true}) {
    matmul_dims d{7, 5, 3, tb};
    auto a = random_floats(d.m * d.k, 1);
    auto b = random_floats(d.k * d.n, 2);
    std::vector<float> want(d.m * d.n), got(d.m * d.n);
    host::matmul_reference(a.data(), b.data(), want.data(), d);
    auto g = row_major_as_column_major(d);
    column_major_sgemm(g.transpose_first, g.rows, g.cols, g.inner, b.data(),
                       g.ld_first, a.data(), g.ld_second, got.data(),
                       g.ld_result);
    INFO("transpose_b " << tb);
    require_close(got, widen(want), 1e-6);
  }
}

// -- kernel math against the host kernels ------------------------------------

TEST_CASE("the element-wise kernel math matches the host kernels") {
  auto a = random_floats(1000, 3);
  auto b = random_floats(1000, 4);
  for (auto op : {binary_op::add, binary_op::mul}) {
    std::vector<float> want(a.size()), got(a.size());
    host::elementwise(op, a.data(), b.data(), want.data(), a.size());
    reference::binary(op, a.data(), b.data(), got.data(), a.size());
    CHECK(got == want);
  }
}

TEST_CASE("the tiled matmul's tiles reproduce the host product at ragged "
          "sizes") {
  using dims = matmul_dims;
  for (auto d : {dims{1, 1, 1, false}, dims{1, 37, 19, true},
                 dims{17, 16, 15, false}, dims{33, 47, 65, true},
                 dims{64, 32, 16, false}, dims{5, 3, 100, true}}) {
    auto a = random_floats(d.m * d.k, 5);
    auto b = random_floats(d.k * d.n, 6);
    std::vector<float> want(d.m * d.n), got(d.m * d.n, NAN);
    host::matmul_reference(a.data(), b.data(), want.data(), d);
    reference::tiled_matmul(a.data(), b.data(), got.data(), d);
    INFO(d.m << "x" << d.n << "x" << d.k << " transpose_b " << d.transpose_b);
    require_close(got, widen(want), 1e-5);
  }
}

TEST_CASE("rmsnorm math matches the double-precision formula") {
  std::size_t rows = 3, cols = 70;
  auto x = random_floats(rows * cols, 7);
  auto w = random_floats(cols, 8);
  std::vector<float> got(x.size());
  reference::rmsnorm(x.data(), w.data(), got.data(), rows, cols, 1e-5f);
  std::vector<double> want(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::size_t i = 0; i < cols; ++i)
      ss += double{x[r * cols + i]} * x[r * cols + i];
    double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
    for (std::size_t i = 0; i < cols; ++i)
      want[r * cols + i] = x[r * cols + i] * inv * w[i];
  }
  require_close(got, want, 1e-5);
}

TEST_CASE("silu-mul math matches the double-precision formula") {
  auto g = random_floats(500, 9);
  auto u = random_floats(500, 10);
  for (auto& v : g)
    v *= 8; // reach the saturated tails
  std::vector<float> got(g.size());
  reference::silu_mul(g.data(), u.data(), got.data(), g.size());
  std::vector<double> want(g.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    want[i] = g[i] / (1.0 + std::exp(-double{g[i]})) * u[i];
  require_close(got, want, 1e-5);
}

TEST_CASE("softmax rows sum to one and survive large logits") {
  std::size_t rows = 4, cols = 33;
  auto x = random_floats(rows * cols, 11);
  x[0] = 1000.0f; // would overflow exp() without the max shift
  std::vector<float> got(x.size());
  reference::softmax_rows(x.data(), got.data(), rows, cols);
  std::vector<double> want(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (std::size_t i = 0; i < cols; ++i)
      mx = std::max(mx, double{x[r * cols + i]});
    for (std::size_t i = 0; i < cols; ++i)
      sum += std::exp(x[r * cols + i] - mx);
    for (std::size_t i = 0; i < cols; ++i)
      want[r * cols + i] = std::exp(x[r * cols + i] - mx) / sum;
  }
  require_close(got, want, 1e-5);
  CHECK(got[0] == Approx(1.0f));
}

TEST_CASE("the kernels' expf gives this process's libm expf bits") {
  // attention_exact_kernel's exponentials: glibc's steps in double, held to
  // std::exp on every 4096th float of both signs below 88 in magnitude (the
  // host kernel's own check) and every special case.
  std::size_t differ = 0, seen = 0;
  auto check = [&](float x) {
    const float want = std::exp(x), got = math::expf_libm(x);
    ++seen;
    if (std::memcmp(&want, &got, 4) != 0 && !(std::isnan(want) && std::isnan(got)))
      ++differ;
  };
  for (std::uint32_t b = 0; b < 0x42b00000u; b += 4096)
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      float f;
      const std::uint32_t u = b | sign;
      std::memcpy(&f, &u, 4);
      check(f);
    }
  // The special cases and the subnormal results between -88 and -104.
  for (float f : {88.0f, -88.0f, 88.5f, 88.72f, 88.73f, 89.0f, -100.0f,
                  -103.2f, -103.5f, -103.97f, -103.98f, -104.0f, -150.0f,
                  INFINITY, -INFINITY, NAN})
    check(f);
  for (float f = -103.99f; f < -87.0f; f += 0.0371f)
    check(f);
  CHECK(seen > 500000);
  CHECK(differ == 0);
  CHECK(math::expf_libm(-INFINITY) == 0.0f);
  CHECK(std::isnan(math::expf_libm(NAN)));
  CHECK(math::expf_libm(100.0f) == INFINITY);
}

TEST_CASE("the exact attention path is the host's one_chunk path") {
  for (std::size_t tokens : {1u, 3u, 63u, 64u, 200u})
    for (std::size_t hd : {40u, 64u, 72u, 80u, 128u})
      for (bool apart : {false, true}) {
        exo::backend::attention_dims d{tokens, 5, 4, 2, hd, 2 * hd, 0.1f};
        CHECK(math::attention_one_chunk(tokens, hd, apart)
              == (apart || !exo::backend::host::attention_tiled_path(d)));
      }
}

TEST_CASE("rope rotates adjacent pairs by position-dependent angles") {
  std::size_t tokens = 3, heads = 2, dim = 8, pos0 = 5;
  auto x = random_floats(tokens * heads * dim, 12);
  auto got = x;
  reference::rope(got.data(), tokens, heads, dim, pos0, 10000.0f);
  std::vector<double> want(x.size());
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t p = 0; p < dim / 2; ++p) {
        auto base = (t * heads + h) * dim + 2 * p;
        double theta = (pos0 + t) * std::pow(10000.0, -2.0 * p / dim);
        want[base] = x[base] * std::cos(theta) - x[base + 1] * std::sin(theta);
        want[base + 1]
          = x[base] * std::sin(theta) + x[base + 1] * std::cos(theta);
      }
  require_close(got, want, 1e-4);
  // Position 0 leaves the vector unchanged.
  auto same = x;
  reference::rope(same.data(), 1, 1, dim, 0, 10000.0f);
  for (std::size_t i = 0; i < dim; ++i)
    CHECK(same[i] == Approx(x[i]));
}

// -- telemetry loaders -------------------------------------------------------

TEST_CASE("management library units convert to degrees, watts, fractions") {
  CHECK(millidegrees_to_celsius(45500) == Approx(45.5));
  CHECK(microwatts_to_watts(250000000) == Approx(250.0));
  CHECK(milliwatts_to_watts(350000) == Approx(350.0));
  CHECK(percent_to_fraction(75) == Approx(0.75));
  CHECK(percent_to_fraction(250) == Approx(1.0));
}

TEST_CASE("a management library that cannot be loaded reports why") {
  auto nvml = load_nvml({"libexo-no-such-library.so.7"});
  REQUIRE_FALSE(nvml.ok());
  CHECK(nvml.err().code == errc::unsupported);
  CHECK(nvml.err().message.find("NVML not available") == 0);
  CHECK(nvml.err().message.find("libexo-no-such-library.so.7")
        != std::string::npos);
  auto smi = load_rocm_smi({"libexo-no-such-library.so.7", "/nonexistent.so"});
  REQUIRE_FALSE(smi.ok());
  CHECK(smi.err().message.find("rocm_smi not available") == 0);
  CHECK(smi.err().message.find("/nonexistent.so") != std::string::npos);
  CHECK_FALSE(load_nvml({}).ok());
}

TEST_CASE("a library without the expected symbols is refused") {
  // libm loads everywhere and exports none of NVML's or rocm_smi's symbols.
  auto nvml = load_nvml({"libm.so.6"});
  REQUIRE_FALSE(nvml.ok());
  CHECK(nvml.err().code == errc::unsupported);
  CHECK(nvml.err().message.find("nvmlInit_v2") != std::string::npos);
  auto smi = load_rocm_smi({"libm.so.6"});
  REQUIRE_FALSE(smi.ok());
  CHECK(smi.err().message.find("rsmi_init") != std::string::npos);
}

TEST_CASE("the default management libraries load or say why not") {
  // Here: NVML is absent (no driver); rocm_smi may be installed but finds no
  // GPU. Either way nothing is invented: a library that loads must have
  // initialized, and an error always carries a reason.
  for (auto* lib : {"nvml", "rocm_smi"}) {
    auto r = std::string{lib} == "nvml" ? load_nvml() : load_rocm_smi();
    INFO(lib << ": " << (r.ok() ? std::string{"loaded"} : r.err().message));
    if (r.ok()) {
      auto p = (*r)->probe("0000:ff:1f.7");
      CHECK_FALSE(p.ok());
    } else {
      CHECK_FALSE(r.err().message.empty());
    }
  }
}
