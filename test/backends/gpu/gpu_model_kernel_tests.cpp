// The GPU kernels of the Llama operations (rope with positions, F16
// products and the quantized products), checked without a GPU: their
// per-element math (kernel_math.hpp) against the host's bit for bit where
// the arithmetic is the same, and their host replicas (kernel_reference.hpp)
// against exo::backend::host, which the conformance suite holds to
// double-precision references. The attention kernels are checked on the
// GPU emulator against host::attention (gpu_emulator_tests).

#include "backends/gpu_common/kernel_math.hpp"
#include "backends/gpu_common/kernel_quant.hpp"
#include "backends/gpu_common/kernel_reference.hpp"
#include "backends/gpu_common/launch_geometry.hpp"
#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_repack.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace exo::backend;
using namespace exo::backend::gpu;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed,
                                 float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> d{lo, hi};
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

void require_close(const std::vector<float>& got,
                   const std::vector<float>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i])
            <= rel * std::max(1.0, std::fabs(double{want[i]})));
  }
}

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

} // namespace

TEST_CASE("the kernels' half conversions agree with the host's bit for bit") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    auto hh = static_cast<std::uint16_t>(h);
    float a = math::half_to_float(hh), b = host::f16_to_f32(hh);
    if (std::isnan(b)) {
      CHECK(std::isnan(a));
      continue;
    }
    INFO("half " << h);
    REQUIRE(bits_of(a) == bits_of(b));
  }
  // Rounding: ties, subnormals, overflow, signed zeros and random values.
  std::vector<float> xs{0.0f,     -0.0f,  1.0f,     65504.0f, 65519.0f,
                        65520.0f, 1e-8f,  2.98e-8f, 6.0e-8f,  1.0f + 1.0f / 2048,
                        1.0f + 3.0f / 2048, -3.14159f, 1e5f, 6.1e-5f};
  for (auto x : random_floats(20000, 1, -70000.0f, 70000.0f))
    xs.push_back(x);
  for (auto x : random_floats(20000, 2, -1e-3f, 1e-3f))
    xs.push_back(x);
  for (auto x : xs) {
    float want;
    host::round_to_f16(&x, &want, 1);
    INFO("x = " << x);
    REQUIRE(bits_of(math::round_to_half(x)) == bits_of(want));
    // to_f16_kernel's halves: the host's, bit for bit.
    REQUIRE(math::float_to_half(x) == host::f32_to_f16(x));
  }
  for (float x : {std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity()})
    CHECK(math::float_to_half(x) == host::f32_to_f16(x));
  CHECK((math::float_to_half(std::numeric_limits<float>::quiet_NaN())
         & 0x7c00u) == 0x7c00u);
  CHECK((math::float_to_half(std::numeric_limits<float>::quiet_NaN())
         & 0x3ffu) != 0u);
}

TEST_CASE("the kernels' Q8_0 and Q8_1 activations are the host's bytes, "
          "ties and scales included") {
  // llama.cpp's x86 activations (quant::quantize_activations: x * (127 /
  // max|x|), half to even), not the file format's quantizer (x / d, half
  // away from zero): with random blocks the two agree almost always (they
  // part where 1 / (max / 127) and 127 / max differ in the last bit and a
  // value sits next to a half), so block 1 makes them differ: max 127,
  // values at k + 0.5, ties that the reference rounds away from zero.
  auto x = random_floats(32 * 64, 3, -4.0f, 4.0f);
  std::fill(x.begin(), x.begin() + 32, 0.0f); // an all-zero block
  for (int j = 0; j < 32; ++j)
    x[32 + j] = j == 0 ? 127.0f : (j % 2 ? -1.0f : 1.0f) * (j + 0.5f);
  std::vector<quant::block_q8_0> want0(64);
  std::vector<quant::block_q8_1> want1(64);
  quant::quantize_activations(quant::ggml_type::q8_0, x.data(), want0.data(),
                              x.size());
  quant::quantize_activations(quant::ggml_type::q8_1, x.data(), want1.data(),
                              x.size());
  std::size_t apart_from_reference = 0;
  for (std::size_t b = 0; b < 64; ++b) {
    INFO("block " << b);
    math::act_q8 got0, got1;
    math::quantize_act_q8(x.data() + b * 32, false, got0);
    math::quantize_act_q8(x.data() + b * 32, true, got1);
    CHECK(bits_of(got0.d) == bits_of(host::f16_to_f32(want0[b].d)));
    CHECK(bits_of(got1.d) == bits_of(host::f16_to_f32(want1[b].d)));
    CHECK(bits_of(got1.s) == bits_of(host::f16_to_f32(want1[b].s)));
    CHECK(std::memcmp(got0.qs, want0[b].qs, 32) == 0);
    CHECK(std::memcmp(got1.qs, want1[b].qs, 32) == 0);
    host::block_q8_0 ref;
    host::quantize_q8_0(x.data() + b * 32, &ref, 32);
    apart_from_reference += std::memcmp(ref.qs, want0[b].qs, 32) != 0;
  }
  // The blocks do what they are for: the reference quantizer differs.
  CHECK(apart_from_reference >= 1);
}

TEST_CASE("the rope kernel's rows match the host's rope at any positions") {
  rope_dims d{4, 3, 16, 10, 500000.0f};
  auto x = random_floats(4 * 3 * 16, 4);
  auto ff = random_floats(5, 5, 1.0f, 8.0f);
  std::vector<std::int32_t> pos{0, 7, 2, 300};
  for (bool factors : {false, true}) {
    auto got = x, want = x;
    reference::rope_rows(got.data(), pos.data(),
                         factors ? ff.data() : nullptr, d);
    host::rope(want.data(), pos.data(), factors ? ff.data() : nullptr, d);
    require_close(got, want, 1e-4);
  }
}

TEST_CASE("the F16 product kernel matches the host's numerics") {
  matmul_dims d{3, 20, 96, true};
  auto a = random_floats(d.m * d.k, 9);
  auto w = random_floats(d.n * d.k, 10);
  for (auto t : {weight_type::f16}) {
    auto rb = weight_row_bytes(t, d.k);
    REQUIRE(rb.ok());
    std::vector<std::uint8_t> enc(*rb * d.n);
    for (std::size_t j = 0; j < d.n; ++j)
      host::encode_row(t, w.data() + j * d.k, enc.data() + j * *rb, d.k);
    std::vector<float> got(d.m * d.n), want(d.m * d.n);
    reference::matmul_weights(a.data(), enc.data(), t, got.data(), d);
    host::matmul_weights(a.data(), enc.data(), t, want.data(), d, 1);
    INFO(to_string(t));
    // Same rounding of activations: only the order of summation differs.
    require_close(got, want, 1e-5);
  }
}

TEST_CASE("the quantized product kernels give the CPU engine's bits") {
  // quantize_act_kernel + matvec_lanes_kernel (through their host replica,
  // which runs the same functions lane by lane) against host::matmul_weights
  // -- llama.cpp's x86 arithmetic -- bit for bit: on ggml's quantized
  // weights, on arbitrary bytes with finite scales, and on activations with
  // an all-zero block, ties and a large range.
  // Q4_K batches in both orders of llama.cpp's repacked gemm (by pair of
  // sub-blocks for the first m - m % 4 tokens on AVX-512 builds, by
  // super-block on AVX2 ones), whichever this CPU has; rows_apart: every
  // token by super-block.
  std::mt19937 rng{57};
  std::uniform_int_distribution<int> byte{0, 255};
  std::size_t compared = 0;
  for (auto order : {quant::q4_k_gemm::by_super_block,
                     quant::q4_k_gemm::by_pair})
  for (weight_type t : all_weight_types) {
    if (math::act_format_of(ggml_type_id(t)) == math::act_format::none)
      continue;
    quant::set_q4_k_gemm(order);
    // n = 16: Q4_K the repacked way (a multiple of 8 rows), as llama.cpp.
    for (matmul_dims d : {matmul_dims{1, 13, 256, true},
                          matmul_dims{3, 7, 512, true},
                          matmul_dims{7, 5, 768, true},
                          matmul_dims{2, 16, 512, true},
                          matmul_dims{6, 16, 512, true},
                          matmul_dims{5, 8, 256, true, true}}) {
      for (int variant = 0; variant < 3; ++variant) {
        INFO(to_string(t) << " m=" << d.m << " k=" << d.k << " variant "
                          << variant);
        auto a = random_floats(d.m * d.k, 60 + variant, -3.0f, 3.0f);
        if (variant == 2) {
          for (std::size_t i = 0; i < 256 && i < d.k; ++i)
            a[i] = 0.0f; // a zero block (Q8_K's d = 0 path)
          for (std::size_t i = 256; i < d.m * d.k; i += 7)
            a[i] = static_cast<float>(i % 5) * 0.5f; // exact ties
        }
        const std::size_t rb = *weight_row_bytes(t, d.k);
        std::vector<std::uint8_t> enc(rb * d.n);
        auto w = random_floats(d.n * d.k, 70 + variant);
        for (std::size_t j = 0; j < d.n; ++j)
          host::encode_row(t, w.data() + j * d.k, enc.data() + j * rb, d.k);
        if (variant == 1) {
          // Arbitrary bytes where the format's scales are halves: keep the
          // encoded scales (finite), scramble the quants.
          std::vector<std::uint8_t> keep = enc;
          for (auto& x : enc)
            x = static_cast<std::uint8_t>(byte(rng));
          std::vector<float> row(d.k);
          for (std::size_t j = 0; j < d.n; ++j) {
            host::decode_row(t, enc.data() + j * rb, row.data(), d.k);
            bool finite = true;
            for (float x : row)
              finite = finite && std::isfinite(x) && std::fabs(x) < 1e4f;
            if (!finite)
              std::memcpy(enc.data() + j * rb, keep.data() + j * rb, rb);
          }
        }
        std::vector<float> got(d.m * d.n), want(d.m * d.n);
        reference::matmul_weights(a.data(), enc.data(), t, got.data(), d);
        host::matmul_weights(a.data(), enc.data(), t, want.data(), d, 1);
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO("element " << i << ": " << got[i] << " vs " << want[i]);
          REQUIRE(bits_of(got[i]) == bits_of(want[i]));
          ++compared;
        }
      }
    }
  }
  quant::set_q4_k_gemm(std::nullopt);
  CHECK(compared == 2 * 10 * 3 * (13 + 21 + 35 + 32 + 96 + 40));
}

TEST_CASE("the kernels decode ggml's other formats as its to_float does, "
          "element by element") {
  // math::dequant_element (CUDA and HIP's dequant_rows_kernel; Vulkan's
  // shader decodes the same way) against the host's dequantize_row, on the
  // bytes ggml's quantizers write and on arbitrary bytes with finite
  // scales; then the reference product against the dequantized one.
  std::mt19937 rng{31};
  std::uniform_int_distribution<int> byte{0, 255};
  std::size_t decoded = 0;
  for (weight_type t : all_weight_types) {
    if (t == weight_type::f32 || t == weight_type::f16
        || t == weight_type::q8_0)
      continue;
    INFO(to_string(t));
    const std::size_t k = 512, be = weight_block_elements(t);
    const std::size_t rb = *weight_row_bytes(t, k), bb = *weight_row_bytes(t, be);
    auto w = random_floats(k, 40);
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<std::uint8_t> enc(rb);
      if (variant == 0)
        host::encode_row(t, w.data(), enc.data(), k);
      else
        for (auto& x : enc)
          x = static_cast<std::uint8_t>(byte(rng));
      std::vector<float> want(k);
      host::decode_row(t, enc.data(), want.data(), k);
      for (std::size_t i = 0; i < k; ++i) {
        if (!std::isfinite(want[i]))
          continue;
        const float got = math::dequant_element(
          ggml_type_id(t), enc.data() + i / be * bb,
          static_cast<unsigned>(i % be));
        INFO("element " << i << " variant " << variant << ": " << got
                        << " vs " << want[i]);
        REQUIRE(bits_of(got) == bits_of(want[i]));
        ++decoded;
      }
    }
    matmul_dims d{3, 9, k, true};
    auto a = random_floats(d.m * d.k, 41);
    auto wm = random_floats(d.n * d.k, 42);
    std::vector<std::uint8_t> enc(rb * d.n);
    for (std::size_t j = 0; j < d.n; ++j)
      host::encode_row(t, wm.data() + j * k, enc.data() + j * rb, k);
    if (math::act_format_of(ggml_type_id(t)) != math::act_format::none)
      continue; // their products: the test above, bit for bit
    std::vector<float> got(d.m * d.n), want(d.m * d.n, 0.0f), row(k);
    reference::matmul_weights(a.data(), enc.data(), t, got.data(), d);
    for (auto& x : a)
      x = math::round_to_bf16(x); // what llama.cpp does to them
    for (std::size_t j = 0; j < d.n; ++j) {
      host::decode_row(t, enc.data() + j * rb, row.data(), k);
      for (std::size_t i = 0; i < d.m; ++i) {
        double s = 0;
        for (std::size_t p = 0; p < k; ++p)
          s += double{a[i * k + p]} * row[p];
        want[i * d.n + j] = static_cast<float>(s);
      }
    }
    require_close(got, want, 1e-4);
  }
  CHECK(decoded > 10 * 4 * 256);
}

TEST_CASE("attention and product launches cover their work") {
  auto g = attention_launch({3, 0, 8, 2, 64, 128, 1.0f});
  CHECK(g.grid == 24);
  CHECK(g.block == math::attention_threads);
  CHECK(attention_launch({0, 0, 8, 2, 64, 128, 1.0f}).grid == 0);
  auto big = attention_launch({4096, 0, 64, 8, 128, 1024, 1.0f});
  CHECK(big.grid == max_grid_extent); // the kernel strides over the rest
  auto f16 = weights_launch(weight_type::f16, {1, 4096, 4096, true});
  CHECK(f16.grid == 4096);
  CHECK(f16.block == 256);
  auto bf = weights_launch(weight_type::bf16, {1, 10, 64, true});
  CHECK(bf.grid == 10);
  CHECK(bf.block == 64);
  auto warps = warp_rows_launch({1, 4096, 4096, true});
  CHECK(warps.grid == 4096 / vecdot_rows_per_warp / warp_rows_per_block);
  CHECK(warps.block == warp_rows_per_block * 32);
  CHECK(warp_rows_launch({3, 0, 64, true}).grid == 0);
  auto q8 = lanes_launch({1, 10, 64, true});
  CHECK(q8.grid == 1);
  CHECK(q8.block == lanes_rows_per_block * math::dot_lanes);
  CHECK(lanes_launch({2, 4096, 4096, true}).grid == 4096 / 16);
  CHECK(lanes_launch({1, 0, 64, true}).grid == 0);
  CHECK(act_scratch_bytes(weight_type::q8_0, {2, 8, 64, true})
        == 2 * 2 * sizeof(math::act_q8));
  CHECK(act_scratch_bytes(weight_type::q4_k, {3, 8, 512, true})
        == 3 * 2 * sizeof(math::act_q8k));
  // F16 and BF16 weights meet their activations rounded once, as floats.
  CHECK(act_scratch_bytes(weight_type::f16, {3, 8, 512, true})
        == 3 * 512 * sizeof(float));
  CHECK(act_scratch_bytes(weight_type::bf16, {3, 8, 512, true})
        == 3 * 512 * sizeof(float));
  CHECK(act_scratch_bytes(weight_type::f32, {3, 8, 512, true}) == 0);
}

TEST_CASE("the kernels' q8_0 KV cache math is the host's: blocks, values, "
          "rotation") {
  // Blocks as host::quantize_q8_0_activations writes them (an all-zero
  // block, ties of x * 127 / amax included by the random values' range).
  auto x = random_floats(32 * 64, 5, -4.0f, 4.0f);
  std::fill(x.begin(), x.begin() + 32, 0.0f);
  std::vector<std::uint8_t> got(64 * 34);
  for (std::size_t b = 0; b < 64; ++b)
    math::quantize_kv_q8_0(x.data() + 32 * b, got.data() + 34 * b);
  std::vector<host::block_q8_0> want(64);
  host::quantize_q8_0_activations(x.data(), want.data(), x.size());
  REQUIRE(std::memcmp(got.data(), want.data(), got.size()) == 0);
  // The cache read by value: q * d, through a view offset by whole rows.
  math::q8_kv_ptr view{got.data(), 0};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto& b = want[i / 32];
    const float v = static_cast<float>(b.qs[i % 32]) * host::f16_to_f32(b.d);
    REQUIRE(bits_of(math::kv_value(view[i])) == bits_of(v));
    REQUIRE(bits_of(math::kv_value((view + 64)[i % 64]))
            == bits_of(math::kv_value(view[64 + i % 64])));
  }
  // The rotation, run by run.
  for (std::size_t n : {2u, 64u, 128u}) {
    auto r = random_floats(3 * n, 7, -4.0f, 4.0f);
    std::vector<float> host_out(r.size());
    host::hadamard(r.data(), host_out.data(), r.size(), n);
    for (std::size_t i = 0; i < r.size(); i += n)
      math::hadamard_run(r.data() + i, n,
                         1.0f / std::sqrt(static_cast<float>(n)));
    REQUIRE(std::memcmp(r.data(), host_out.data(), r.size() * 4) == 0);
  }
}
