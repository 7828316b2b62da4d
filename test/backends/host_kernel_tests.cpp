// The host kernels' fast paths (F16C conversions, the batched products)
// against their scalar definitions and llama.cpp's CPU order.

#include "backends/backend.hpp"
#include "backends/host_kernels.hpp"
#include "backends/host_parallel.hpp"
#include "test/support/all_work_split.hpp"
#include "test/support/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sched.h>
#include <cstring>
#include <mutex>
#include <utility>
#include <random>
#include <vector>

using namespace exo::backend;

using exo::test::random_floats;

namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

} // namespace

TEST_CASE("a product runs on several threads only when its weights or "
          "its multiply-adds are large enough to pay for them") {
  using host::product_splits;
  // A decode step's products of a small model stay on the calling thread.
  CHECK_FALSE(product_splits(weight_type::q4_k, 1, 512, 512));
  CHECK_FALSE(product_splits(weight_type::q4_k, 1, 1536, 512));
  CHECK_FALSE(product_splits(weight_type::q8_0, 4, 512, 512));
  CHECK_FALSE(product_splits(weight_type::f32, 1, 256, 256));
  // 512 KiB of weights: a stream that two cores read faster.
  CHECK(product_splits(weight_type::f32, 1, 256, 512));
  CHECK_FALSE(product_splits(weight_type::f32, 1, 255, 512));
  CHECK(product_splits(weight_type::f16, 1, 512, 512));
  CHECK(product_splits(weight_type::q4_k, 1, 2048, 2048));
  // Quantized weights from 1 MiB (Q4_K: 144 bytes a row of 256).
  CHECK(product_splits(weight_type::q4_k, 1, 7282, 256));
  CHECK_FALSE(product_splits(weight_type::q4_k, 1, 7281, 256));
  CHECK_FALSE(product_splits(weight_type::q6_k, 1, 512, 1536));
  CHECK(product_splits(weight_type::bf16, 1, 256, 1024));
  // 8 Mi multiply-adds: a prompt, or a large batch.
  CHECK(product_splits(weight_type::q4_k, 32, 512, 512));
  CHECK_FALSE(product_splits(weight_type::q4_k, 31, 512, 512));
  CHECK(product_splits(weight_type::q4_k, 512, 64, 256));
  {
    exo::test::all_work_split all;
    CHECK(product_splits(weight_type::q4_k, 1, 8, 256));
  }
  CHECK_FALSE(product_splits(weight_type::q4_k, 1, 8, 256));
}

TEST_CASE("rounding arrays to half matches the scalar rounding bit for bit") {
  std::mt19937 rng{7};
  std::vector<float> xs{0.0f,     -0.0f,   1.0f,    65504.0f, 65519.0f,
                        65520.0f, 1e-8f,   2.98e-8f, 6.0e-8f, 1.0f + 1.0f / 2048,
                        1.0f + 3.0f / 2048, -3.14159f, 1e5f,  6.1e-5f,
                        INFINITY, -INFINITY};
  for (auto x : random_floats(rng, 20000, -70000.0f, 70000.0f))
    xs.push_back(x);
  for (auto x : random_floats(rng, 20000, -1e-3f, 1e-3f))
    xs.push_back(x);
  for (auto x : random_floats(rng, 20000, -1e-6f, 1e-6f))
    xs.push_back(x);
  xs.push_back(1.5f); // an odd length leaves a scalar tail
  std::vector<float> got(xs.size()), want(xs.size());
  host::limit_isa(host::isa::scalar);
  host::round_to_f16(xs.data(), want.data(), xs.size());
  host::limit_isa(host::isa::avx512);
  host::round_to_f16(xs.data(), got.data(), xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    INFO("x = " << xs[i]);
    REQUIRE(bits_of(got[i]) == bits_of(want[i]));
    REQUIRE(bits_of(want[i])
            == bits_of(host::f16_to_f32(host::f32_to_f16(xs[i]))));
  }
  float nan = std::nanf(""), out = 0.0f;
  std::vector<float> nans(9, nan), nan_out(9);
  host::round_to_f16(nans.data(), nan_out.data(), nans.size());
  for (auto v : nan_out)
    CHECK(std::isnan(v));
  host::round_to_f16(&nan, &out, 1);
  CHECK(std::isnan(out));
}

TEST_CASE("batched products equal the matrix-vector products within bounds "
          "at every tile remainder") {
  exo::test::all_work_split all; // the two-thread runs split every product
  // F32/F16 batches of 2 tokens and more take tinyBLAS's order where k is a
  // multiple of 16 and n of 4, the matrix-vector (vec_dot) order otherwise;
  // Q8_0 batches of 2 and more the int8 tiles. Rows cross tile (16/32) and panel boundaries, token
  // counts leave every remainder of the 6/8-token register tiles.
  std::mt19937 rng{11};
  struct shape {
    std::size_t m, n, k;
  };
  std::vector<shape> shapes{{4, 1, 32},    {9, 17, 96},   {13, 33, 64},
                            {16, 48, 160}, {6, 300, 512}, {23, 70, 2048}};
  for (std::size_t m = 4; m <= 20; ++m)
    shapes.push_back({m, 37, 64});
  for (auto widest : {host::isa::avx512, host::isa::avx2, host::isa::scalar})
  for (auto t : {weight_type::f32, weight_type::f16, weight_type::q8_0}) {
    host::limit_isa(widest);
    for (auto s : shapes) {
      auto a = random_floats(rng, s.m * s.k, -1.0f, 1.0f);
      auto w = random_floats(rng, s.n * s.k, -1.0f, 1.0f);
      const std::size_t rb = *weight_row_bytes(t, s.k);
      std::vector<std::uint8_t> enc(s.n * rb);
      for (std::size_t r = 0; r < s.n; ++r)
        host::encode_row(t, w.data() + r * s.k, enc.data() + r * rb, s.k);
      matmul_dims d{s.m, s.n, s.k, true};
      std::vector<float> batched(s.m * s.n), single(s.m * s.n);
      for (int threads : {1, 2}) {
        host::matmul_weights(a.data(), enc.data(), t, batched.data(), d,
                             threads);
        for (std::size_t i = 0; i < s.m; ++i) {
          matmul_dims d1{1, s.n, s.k, true};
          host::matmul_weights(a.data() + i * s.k, enc.data(), t,
                               single.data() + i * s.n, d1, 1);
        }
        for (std::size_t i = 0; i < s.m * s.n; ++i) {
          // F32 and F16: same products, another summation order. Q8_0: the
          // same block sums in the same order on both paths, bit for bit.
          INFO("isa " << int(widest) << " type " << int(t) << " m=" << s.m << " n=" << s.n << " k=" << s.k
                      << " threads=" << threads << " at " << i);
          if (t == weight_type::q8_0)
            REQUIRE(bits_of(batched[i]) == bits_of(single[i]));
          else
            REQUIRE(std::fabs(double{batched[i]} - single[i]) <= 1e-5 * s.k);
        }
      }
    }
  }
  host::limit_isa(host::isa::avx512);
}

namespace {

/// Q8_0 weights: random blocks, some with -128 (legal in a file, never
/// written by ggml's quantizer) and some all zero.
std::vector<std::uint8_t> random_q8_weights(std::mt19937& rng, std::size_t n,
                                            std::size_t k) {
  const std::size_t rb = k / 32 * 34;
  std::vector<std::uint8_t> w(n * rb);
  std::uniform_int_distribution<int> q{-128, 127};
  std::uniform_real_distribution<float> d{1e-4f, 0.05f};
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t b = 0; b < k / 32; ++b) {
      host::block_q8_0 blk;
      const int kind = q(rng) & 15;
      blk.d = host::f32_to_f16(kind == 0 ? 0.0f : d(rng));
      for (auto& v : blk.qs)
        v = static_cast<std::int8_t>(kind == 1 ? -128 : kind == 2 ? 0 : q(rng));
      std::memcpy(w.data() + r * rb + b * 34, &blk, 34);
    }
  }
  return w;
}

} // namespace

TEST_CASE("activations quantize to Q8_0 as llama.cpp's x86 quantizer does, "
          "SIMD and scalar alike") {
  // d = half(max / 127); q = x * (127 / max) rounded half to even.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 3.5f;
  x[4] = -0.5f;
  x[5] = 126.5f;
  for (auto widest : {host::isa::avx512, host::isa::scalar}) {
    host::limit_isa(widest);
    host::block_q8_0 y;
    host::quantize_q8_0_activations(x.data(), &y, 32);
    CHECK(host::f16_to_f32(y.d) == 1.0f);
    CHECK(int{y.qs[0]} == 127);
    CHECK(int{y.qs[1]} == 2);
    CHECK(int{y.qs[2]} == -2);
    CHECK(int{y.qs[3]} == 4);
    CHECK(int{y.qs[4]} == 0);
    CHECK(int{y.qs[5]} == 126);
  }
  std::mt19937 rng{5};
  std::vector<float> xs;
  for (float scale : {1e-6f, 1.0f, 300.0f, 6e4f})
    for (auto v : random_floats(rng, 32 * 200, -scale, scale))
      xs.push_back(v);
  xs.resize(xs.size() + 32, 0.0f); // an all-zero block
  for (std::size_t i = 0; i < 32 * 50; ++i) // small integers: many ties
    xs.push_back(static_cast<float>(static_cast<int>(rng() % 255) - 127) / 2);
  const std::size_t nb = xs.size() / 32;
  std::vector<host::block_q8_0> want(nb), got(nb);
  host::limit_isa(host::isa::scalar);
  host::quantize_q8_0_activations(xs.data(), want.data(), xs.size());
  host::limit_isa(host::isa::avx512);
  host::quantize_q8_0_activations(xs.data(), got.data(), xs.size());
  for (std::size_t b = 0; b < nb; ++b) {
    INFO("block " << b);
    REQUIRE(got[b].d == want[b].d);
    REQUIRE(std::memcmp(got[b].qs, want[b].qs, 32) == 0);
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j)
      amax = std::max(amax, std::fabs(xs[b * 32 + j]));
    const double d = amax / 127.0;
    for (int j = 0; j < 32; ++j) // within half a step, up to float rounding
      REQUIRE(std::fabs(xs[b * 32 + j] - d * want[b].qs[j])
              <= d * (0.5 + 1e-5));
  }
}

TEST_CASE("Q8_0 products give the same bits on every path, row count and "
          "thread count") {
  exo::test::all_work_split all; // the two-thread runs split every product
  // The scalar kernel, AVX2 (maddubs) and AVX-512 VNNI, one token or a
  // batch at every remainder of the 4-row and 2/4/8-token tiles, 1 or 2
  // threads: all compute llama.cpp's eight-lane block sums. VNNI: up to
  // 32 tokens the tiles correct their sums as they read the weights (32
  // and below), more precompute each group's corrections (33, 83).
  std::mt19937 rng{23};
  struct shape {
    std::size_t m, n, k;
  };
  std::vector<shape> shapes{{1, 5, 32},    {2, 7, 64},     {3, 9, 96},
                            {11, 13, 256}, {17, 6, 512},   {83, 21, 768},
                            {5, 70, 2048}, {32, 11, 256},  {33, 10, 256}};
  for (std::size_t m = 1; m <= 19; ++m)
    shapes.push_back({m, 4 + m % 5, 128});
  for (auto s : shapes) {
    auto a = random_floats(rng, s.m * s.k, -3.0f, 3.0f);
    auto w = random_q8_weights(rng, s.n, s.k);
    matmul_dims d{s.m, s.n, s.k, true};
    // The reference: the scalar kernel, one row at a time.
    host::limit_isa(host::isa::scalar);
    std::vector<float> want(s.m * s.n);
    for (std::size_t i = 0; i < s.m; ++i)
      host::matmul_weights(a.data() + i * s.k, w.data(), weight_type::q8_0,
                           want.data() + i * s.n, {1, s.n, s.k, true}, 1);
    for (auto widest : {host::isa::scalar, host::isa::avx2, host::isa::avx512})
      for (int threads : {1, 2}) {
        host::limit_isa(widest);
        std::vector<float> got(s.m * s.n);
        host::matmul_weights(a.data(), w.data(), weight_type::q8_0,
                             got.data(), d, threads);
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO("isa " << int(widest) << " m=" << s.m << " n=" << s.n
                      << " k=" << s.k << " threads=" << threads << " at "
                      << i);
          REQUIRE(bits_of(got[i]) == bits_of(want[i]));
        }
      }
  }
  host::limit_isa(host::isa::avx512);
}

TEST_CASE("Q8_0 products agree with a double-precision reference within "
          "their bounds") {
  // Against the exact sum of d_w q_w d_a q_a (activations quantized as the
  // kernels do): float error only, each block's term and the lane sums
  // rounded, at most (blocks + 4) ulps of the sum of |terms|. Against the
  // unquantized activations: one quantization step per activation, as the
  // conformance suite bounds every backend.
  std::mt19937 rng{31};
  for (auto widest : {host::isa::avx512, host::isa::avx2, host::isa::scalar}) {
    host::limit_isa(widest);
    for (std::size_t k : {32, 96, 768, 2048}) {
      const std::size_t m = 9, n = 11, nb = k / 32;
      auto a = random_floats(rng, m * k, -2.0f, 2.0f);
      auto wf = random_floats(rng, n * k, -1.0f, 1.0f);
      std::vector<std::uint8_t> w(n * nb * 34);
      for (std::size_t r = 0; r < n; ++r)
        host::encode_row(weight_type::q8_0, wf.data() + r * k,
                         w.data() + r * nb * 34, k);
      std::vector<float> got(m * n);
      host::matmul_weights(a.data(), w.data(), weight_type::q8_0, got.data(),
                           {m, n, k, true}, 1);
      std::vector<host::block_q8_0> aq(m * nb);
      host::quantize_q8_0_activations(a.data(), aq.data(), m * k);
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t r = 0; r < n; ++r) {
          double exact = 0, mag = 0, step = 0, mag_f = 0, plain = 0;
          for (std::size_t b = 0; b < nb; ++b) {
            host::block_q8_0 wb;
            std::memcpy(&wb, w.data() + (r * nb + b) * 34, 34);
            const auto& ab = aq[i * nb + b];
            const double dw = host::f16_to_f32(wb.d),
                         da = host::f16_to_f32(ab.d);
            double amax = 0;
            for (int j = 0; j < 32; ++j)
              amax = std::max(amax, std::fabs(double{a[i * k + b * 32 + j]}));
            for (int j = 0; j < 32; ++j) {
              const double term = dw * wb.qs[j] * da * ab.qs[j];
              const double av = a[i * k + b * 32 + j];
              exact += term;
              mag += std::fabs(term);
              plain += dw * wb.qs[j] * av;
              mag_f += std::fabs(dw * wb.qs[j] * av);
              step += std::fabs(dw * wb.qs[j]) * amax / 127;
            }
          }
          const double g = got[i * n + r];
          INFO("isa " << int(widest) << " k=" << k << " row " << r
                      << " token " << i);
          REQUIRE(std::fabs(g - exact)
                  <= static_cast<double>(nb + 4) * 0x1p-23 * mag);
          REQUIRE(std::fabs(g - plain) <= step + 1e-5 * mag_f);
        }
      }
    }
  }
  host::limit_isa(host::isa::avx512);
}

namespace {

// A plain transcription of what llama.cpp's AVX-512 CPU backend computes for
// F32/F16 weights (ggml-cpu vec.cpp, simd-mappings.h, llamafile/sgemm.cpp,
// GCC's avx512fintrin.h), one lane at a time. This file is compiled for
// baseline x86-64, which has no FMA instruction, so GCC contracts nothing:
// the fused steps are the explicit std::fma calls.
namespace ggml_ref {

/// _mm512_reduce_add_ps: __MM512_REDUCE_OP (+) on 16 lanes.
float reduce_add_ps(const float* a) {
  float t3[8], t6[4], t8[2];
  for (int i = 0; i < 8; ++i)
    t3[i] = a[8 + i] + a[i]; // upper 256 bits + lower
  for (int i = 0; i < 4; ++i)
    t6[i] = t3[4 + i] + t3[i]; // upper 128 bits + lower
  for (int i = 0; i < 2; ++i)
    t8[i] = t6[i] + t6[i + 2]; // + shuffle {2, 3, 0, 1}
  return t8[0] + t8[1];
}

/// GGML_F32_STEP 64, GGML_F32_EPR 16, GGML_F32_ARR 4; GGML_F32x16_REDUCE.
void vec_sums(const float* x, const float* y, int n, float* lanes) {
  float sum[4][16] = {};
  const int np = n & ~63;
  for (int i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l)
        sum[j][l] = std::fma(x[i + j * 16 + l], y[i + j * 16 + l], sum[j][l]);
  for (int l = 0; l < 16; ++l) {
    sum[0][l] += sum[2][l]; // offset 2
    sum[1][l] += sum[3][l];
    sum[0][l] += sum[1][l]; // offset 1
    lanes[l] = sum[0][l];
  }
}

float vec_dot_f32(const float* x, const float* y, int n) {
  float lanes[16];
  vec_sums(x, y, n, lanes);
  float sumf = reduce_add_ps(lanes);
  // Leftovers `sumf += x[i]*y[i]` as GCC built them for zen4: epilogues of
  // 16 and then 8 elements add rounded products in order, the rest fuse.
  const int np = n & ~63, r = n - np;
  int plain = r >= 16 ? r / 16 * 16 : 0;
  if (r - plain >= 8)
    plain += 8;
  for (int i = np; i < n; ++i)
    sumf = i < np + plain ? sumf + x[i] * y[i] : std::fma(x[i], y[i], sumf);
  return sumf;
}

/// F16 weights and activations (the F32 activations rounded to half).
float vec_dot_f16(const std::vector<float>& x, const std::vector<float>& y,
                  int n) {
  float lanes[16];
  vec_sums(x.data(), y.data(), n, lanes);
  double sumf = reduce_add_ps(lanes); // ggml_float
  for (int i = n & ~63; i < n; ++i)
    sumf += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sumf);
}

/// tinyBLAS<16>::gemm_bloc for one output: Cv = madd(A, B, Cv), hsum.
float tinyblas(const float* a, const float* b, int k) {
  float cv[16] = {};
  for (int l = 0; l < k; l += 16)
    for (int i = 0; i < 16; ++i)
      cv[i] = std::fma(a[l + i], b[l + i], cv[i]);
  return reduce_add_ps(cv);
}

} // namespace ggml_ref

std::vector<float> halves(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    out[i] = host::f16_to_f32(host::f32_to_f16(v[i]));
  return out;
}

} // namespace

TEST_CASE("F32 and F16 products compute llama.cpp's vec_dot and tinyBLAS "
          "orders bit for bit on every path") {
  exo::test::all_work_split all; // the two-thread runs split every product
  // One token: ggml_vec_dot_f32/_f16. Two tokens and more: tinyBLAS where
  // llamafile_sgemm takes the product (k % 16 == 0, rows % 4 == 0),
  // vec_dot per output otherwise and with the rows apart (one row x up
  // to 6 tokens a tile on AVX-512, fewer where long rows' activations
  // would leave L1: 1544 takes 3 a tile, 3100 none that fit, so 6). k
  // covers the vec_dot leftovers (none, < 8, 8-15, 16 + < 8, 32 + 8 + < 8)
  // and sgemm's refusal (k % 16 != 0).
  std::mt19937 rng{23};
  const std::size_t ks[] = {16, 48, 64, 77, 100, 520, 1000, 1544, 3100};
  const std::size_t ms[] = {1, 2, 7, 64, 130};
  const std::size_t ns[] = {8, 6, 5};
  for (auto t : {weight_type::f32, weight_type::f16})
  for (auto k : ks)
  for (auto n : ns)
  for (bool apart : {false, true}) {
    const std::size_t m_max = 130;
    auto a = random_floats(rng, m_max * k, -1.0f, 1.0f);
    auto w = random_floats(rng, n * k, -1.0f, 1.0f);
    const bool f16 = t == weight_type::f16;
    const std::size_t rb = *weight_row_bytes(t, k);
    std::vector<std::uint8_t> enc(n * rb);
    for (std::size_t r = 0; r < n; ++r)
      host::encode_row(t, w.data() + r * k, enc.data() + r * rb, k);
    const auto ah = f16 ? halves(a) : a;
    const auto wh = f16 ? halves(w) : w;
    for (auto m : ms) {
      // Rows apart (matmul_rows_*): vec_dot for every output, as alone.
      const bool sgemm = !apart && m >= 2 && k % 16 == 0 && n % 4 == 0;
      std::vector<float> want(m * n);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t r = 0; r < n; ++r) {
          const float* wr = wh.data() + r * k;
          const float* ai = ah.data() + i * k;
          const int ki = static_cast<int>(k);
          want[i * n + r]
            = sgemm ? ggml_ref::tinyblas(wr, ai, ki)
              : f16 ? ggml_ref::vec_dot_f16(
                        std::vector<float>(wr, wr + k),
                        std::vector<float>(ai, ai + k), ki)
                    : ggml_ref::vec_dot_f32(wr, ai, ki);
        }
      for (auto widest : {host::isa::avx512, host::isa::avx2, host::isa::scalar})
      for (int threads : {1, 2}) {
        host::limit_isa(widest);
        std::vector<float> got(m * n);
        host::matmul_weights(a.data(), enc.data(), t, got.data(),
                             matmul_dims{m, n, k, true, apart}, threads);
        for (std::size_t i = 0; i < m * n; ++i) {
          INFO("type " << int(t) << " isa " << int(widest) << " m=" << m
                       << " apart " << apart
                       << " n=" << n << " k=" << k << " threads=" << threads
                       << " at " << i);
          REQUIRE(bits_of(got[i]) == bits_of(want[i]));
        }
      }
    }
  }
  host::limit_isa(host::isa::avx512);
}

TEST_CASE("bind_threads gives the kernels' threads one CPU each, the "
          "caller's first") {
  // ctest runs each case in its own process: the binding stays here.
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  const int cpus = CPU_COUNT(&mask);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &mask))
      first = c;
  CHECK(host::bind_threads(1) == 0);    // nothing to spread
  CHECK(host::bind_threads(cpus + 1) == 0); // more threads than CPUs
  REQUIRE(cpus >= 2); // the project's machines have two cores or more
  CHECK(host::bind_threads(2) == 2);
  cpu_set_t now;
  CPU_ZERO(&now);
  REQUIRE(sched_getaffinity(0, sizeof now, &now) == 0);
  CHECK(CPU_COUNT(&now) == 1);
  CHECK(CPU_ISSET(first, &now));
  // The kernels still give the same bits on the bound team.
  std::vector<float> a(4 * 64, 0.5f), c1(4 * 8), c2(4 * 8);
  std::vector<std::uint8_t> w(8 * 64 * 4);
  for (std::size_t i = 0; i < w.size(); i += 4) {
    const float v = 0.01f * static_cast<float>(i % 37);
    std::memcpy(w.data() + i, &v, 4);
  }
  matmul_dims d{4, 8, 64, true};
  host::matmul_weights(a.data(), w.data(), weight_type::f32, c1.data(), d, 1);
  host::matmul_weights(a.data(), w.data(), weight_type::f32, c2.data(), d, 2);
  CHECK(c1 == c2);
}

TEST_CASE("for_each_range cuts 0 .. n into one range per thread, each but "
          "the last a multiple of the grain, and stays whole when small") {
  auto ranges = [](std::size_t n, int threads, std::size_t grain,
                   std::size_t min_split) {
    std::mutex m;
    std::vector<std::pair<std::size_t, std::size_t>> out;
    host::for_each_range(n, threads, grain, min_split,
                         [&](std::size_t b, std::size_t e) {
                           std::lock_guard<std::mutex> g{m};
                           out.emplace_back(b, e);
                         });
    std::sort(out.begin(), out.end());
    return out;
  };
  using v = std::vector<std::pair<std::size_t, std::size_t>>;
  CHECK(ranges(0, 4, 16, 0).empty());
  CHECK(ranges(100, 1, 16, 0) == v{{0, 100}});
  CHECK(ranges(100, 4, 16, 1000) == v{{0, 100}}); // below the bound
  CHECK(ranges(10, 4, 16, 0) == v{{0, 10}});       // one grain: whole
  CHECK(ranges(100, 2, 16, 0) == v{{0, 64}, {64, 100}});
  CHECK(ranges(100, 3, 16, 0) == v{{0, 48}, {48, 96}, {96, 100}});
  CHECK(ranges(1201, 2, 1, 0) == v{{0, 601}, {601, 1201}});
  // More threads than grains: one range per grain.
  CHECK(ranges(40, 8, 16, 0) == v{{0, 16}, {16, 32}, {32, 40}});
}
