// The weight formats without an oracle: block sizes, row sizes and their
// refusals, round trips within each format's error bound, the matrix product
// against dot products one by one, and the portable path against the SIMD
// one. (quant_oracle_tests holds them to llama.cpp's own ggml.)

#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace exo::backend::quant;
namespace host = exo::backend::host;

namespace {

const ggml_type weight_formats[] = {
    ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1,
    ggml_type::q8_0, ggml_type::q2_k, ggml_type::q3_k, ggml_type::q4_k,
    ggml_type::q5_k, ggml_type::q6_k, ggml_type::f16,  ggml_type::bf16,
};

std::vector<float> gaussian(std::size_t n, std::uint32_t seed,
                            float scale = 1.0f) {
  std::mt19937 rng{seed};
  std::normal_distribution<float> g{0.0f, scale};
  std::vector<float> v(n);
  for (auto& e : v)
    e = g(rng);
  return v;
}

bool same_float(float a, float b) {
  std::uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

} // namespace

TEST_CASE("every format has ggml's id, name and block geometry") {
  CHECK(find_type(2)->block_bytes == 18);
  CHECK(find_type(3)->block_bytes == 20);
  CHECK(find_type(6)->block_bytes == 22);
  CHECK(find_type(7)->block_bytes == 24);
  CHECK(find_type(8)->block_bytes == 34);
  CHECK(find_type(9)->block_bytes == 36);
  CHECK(find_type(10)->block_bytes == 84);
  CHECK(find_type(11)->block_bytes == 110);
  CHECK(find_type(12)->block_bytes == 144);
  CHECK(find_type(13)->block_bytes == 176);
  CHECK(find_type(14)->block_bytes == 210);
  CHECK(find_type(15)->block_bytes == 292);
  CHECK(find_type(30)->block_bytes == 2);
  CHECK(std::string(name(ggml_type::q4_k)) == "q4_K");
  CHECK(info(ggml_type::q4_k).dot_type == ggml_type::q8_k);
  CHECK(info(ggml_type::q4_1).dot_type == ggml_type::q8_1);
  CHECK(info(ggml_type::q5_0).dot_type == ggml_type::q8_0);
  CHECK_FALSE(info(ggml_type::q8_k).weights);
  CHECK(find_type(4) == nullptr);  // Q4_2, long removed
  CHECK(find_type(16) == nullptr); // IQ2_XXS: not handled here
}

TEST_CASE("row sizes refuse partial blocks, unknown types and overflow") {
  CHECK(*row_bytes(ggml_type::q4_k, 4096) == 16 * 144);
  CHECK(*row_bytes(ggml_type::q4_0, 64) == 36);
  CHECK(*row_bytes(ggml_type::bf16, 3) == 6);
  auto partial = row_bytes(ggml_type::q6_k, 4000);
  REQUIRE_FALSE(partial.ok());
  CHECK(partial.err().message.find("q6_K") != std::string::npos);
  CHECK(partial.err().message.find("256") != std::string::npos);
  CHECK_FALSE(row_bytes(ggml_type::q8_0, 33).ok());
  CHECK_FALSE(row_bytes(static_cast<ggml_type>(4), 32).ok());
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 256 * 256;
  CHECK_FALSE(row_bytes(ggml_type::q8_k, huge).ok());
  CHECK_FALSE(matrix_bytes(ggml_type::q4_k, huge / 256, 4096).ok());
  CHECK(*matrix_bytes(ggml_type::q4_k, 3, 256) == 3 * 144);
}

TEST_CASE("quantize then dequantize stays within each format's error") {
  struct bound {
    ggml_type t;
    double rms; // relative RMS error of Gaussian rows
  };
  const bound bounds[] = {
      {ggml_type::q8_0, 0.01}, {ggml_type::q6_k, 0.02}, {ggml_type::q5_0, 0.05},
      {ggml_type::q5_1, 0.05}, {ggml_type::q5_k, 0.04}, {ggml_type::q4_0, 0.11},
      {ggml_type::q4_1, 0.11}, {ggml_type::q4_k, 0.08}, {ggml_type::q3_k, 0.2},
      {ggml_type::q2_k, 0.4},  {ggml_type::f16, 1e-3},  {ggml_type::bf16, 5e-3},
  };
  const std::size_t n = 4096;
  auto x = gaussian(n, 1, 0.05f);
  double norm = 0;
  for (float v : x)
    norm += double(v) * v;
  for (const auto& b : bounds) {
    std::vector<std::uint8_t> q(*row_bytes(b.t, n));
    std::vector<float> y(n);
    quantize_row(b.t, x.data(), q.data(), n);
    dequantize_row(b.t, q.data(), y.data(), n);
    double err = 0;
    for (std::size_t i = 0; i < n; ++i)
      err += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    const double rel = std::sqrt(err / norm);
    INFO(name(b.t) << " relative RMS error " << rel);
    CHECK(rel < b.rms);
    CHECK(rel > 0.0);
  }
}

TEST_CASE("zeros quantize to zeros and non-finite input does not crash") {
  const std::size_t n = 512;
  std::vector<float> zeros(n, 0.0f), odd(n, 1.0f);
  odd[3] = std::numeric_limits<float>::quiet_NaN();
  odd[300] = std::numeric_limits<float>::infinity();
  odd[301] = -std::numeric_limits<float>::infinity();
  odd[400] = 1e38f;
  for (ggml_type t : weight_formats) {
    INFO(name(t));
    std::vector<std::uint8_t> q(*row_bytes(t, n));
    std::vector<float> y(n, 1.0f);
    quantize_row(t, zeros.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    for (float v : y)
      CHECK(v == 0.0f);
    quantize_row(t, odd.data(), q.data(), n); // garbage in, no crash
    dequantize_row(t, q.data(), y.data(), n);
    std::vector<std::uint8_t> a(*row_bytes(info(t).dot_type, n));
    quantize_activations(info(t).dot_type, odd.data(), a.data(), n);
    (void)vec_dot(t, n, q.data(), a.data());
  }
}

TEST_CASE("activations quantize to the same bytes on every instruction "
          "set") {
  // Gaussian rows, levels and their midpoints (ties to even), zero blocks
  // and an outlier: the AVX2 quantizers (Q8_0/Q8_1 ggml's AVX2 body, Q8_K
  // its lanes) against the scalar ones.
  const std::size_t n = 1024;
  std::vector<std::vector<float>> rows = {gaussian(n, 5),
                                         gaussian(n, 6, 30.0f)};
  std::vector<float> levels(n);
  for (std::size_t i = 0; i < n; ++i)
    levels[i] = 0.5f * static_cast<float>(static_cast<int>(i % 33) - 16);
  rows.push_back(levels);
  auto zeros = gaussian(n, 7, 0.05f);
  for (std::size_t i = 0; i < 300; ++i)
    zeros[i] = 0.0f;
  zeros[700] = 3.0e4f;
  rows.push_back(zeros);
  // The largest magnitude twice in a block, negative first in some blocks
  // and positive first in others (Q8_K scales by the first one's sign):
  // within 8 values (one compare) in blocks 0 and 1, apart in 2 and 3.
  auto ties = gaussian(n, 8);
  for (std::size_t b = 0; b < n / 256; ++b) {
    const float sign = b % 2 ? 1.0f : -1.0f;
    ties[256 * b + 40 + b] = sign * 9.0f;
    ties[256 * b + (b < 2 ? 43 + b : 200 - 3 * b)] = -sign * 9.0f;
  }
  rows.push_back(ties);
  // Q8_K for any input, NaN (skipped by the largest magnitude's search)
  // included.
  auto nan = gaussian(n, 9);
  nan[5] = std::numeric_limits<float>::quiet_NaN();
  nan[600] = -std::numeric_limits<float>::quiet_NaN();
  rows.push_back(nan);
  for (ggml_type t : {ggml_type::q8_0, ggml_type::q8_1, ggml_type::q8_k})
    for (std::size_t r = 0; r < rows.size(); ++r) {
      if (r == rows.size() - 1 && t != ggml_type::q8_k)
        continue; // (Q8_0/Q8_1: finite input, as act_block_avx2 says)
      const std::size_t bytes = *row_bytes(t, n);
      std::vector<std::uint8_t> scalar(bytes);
      host::limit_isa(host::isa::scalar);
      quantize_activations(t, rows[r].data(), scalar.data(), n);
      // The widest the CPU has (Q8_K: its AVX-512 quantizer where it has
      // AVX-512), then AVX2.
      for (auto isa : {host::isa::avx512, host::isa::avx2}) {
        INFO(name(t) << " row " << r << " isa " << static_cast<int>(isa));
        std::vector<std::uint8_t> simd(bytes);
        host::limit_isa(isa);
        quantize_activations(t, rows[r].data(), simd.data(), n);
        CHECK(simd == scalar);
      }
      host::limit_isa(host::isa::avx512);
    }
}

TEST_CASE("the portable and SIMD dot products give the same bits") {
  const std::size_t n = 2048;
  for (ggml_type t : weight_formats) {
    if (!vec_dot_has_simd(t))
      continue;
    INFO(name(t));
    for (std::uint32_t seed = 0; seed < 4; ++seed) {
      auto w = gaussian(n, 10 + seed, seed == 3 ? 30.0f : 0.03f);
      auto a = gaussian(n, 20 + seed);
      std::vector<std::uint8_t> wq(*row_bytes(t, n)),
          aq(*row_bytes(info(t).dot_type, n));
      quantize_row(t, w.data(), wq.data(), n);
      quantize_activations(info(t).dot_type, a.data(), aq.data(), n);
      const float simd = vec_dot(t, n, wq.data(), aq.data());
      const float portable = vec_dot_portable(t, n, wq.data(), aq.data());
      CHECK(same_float(simd, portable));
      // The AVX2 kernels where the CPU has AVX-512 kernels too.
      host::limit_isa(host::isa::avx2);
      CHECK(same_float(vec_dot(t, n, wq.data(), aq.data()), portable));
      host::limit_isa(host::isa::scalar);
      CHECK_FALSE(vec_dot_has_simd(t));
      CHECK(same_float(vec_dot(t, n, wq.data(), aq.data()), portable));
      host::limit_isa(host::isa::avx512);
    }
  }
}

TEST_CASE("matmul_quant is the row-by-row dot product on any thread count") {
  // One token (the token kernels' <1>, which Q2_K, Q3_K and Q5_K take on
  // VNNI CPUs), 3, token tiles of 4 and 2 (the token kernels of Q6_K,
  // Q5_K, Q3_K, Q2_K, Q4_0, Q4_1, Q5_0 and Q5_1: 6 = 4 + 2, 13 = 4 + 4 +
  // 4 + 1 for the AVX2 ones; the VNNI and BF16 ones 8 a pass: 13 = 8 + 5);
  // with 50 tokens, the AVX-512 VNNI panels of Q6_K (16 rows, a masked
  // rest of 5; from 48 tokens).
  const std::size_t rows = 37, k = 512;
  for (const std::size_t m : {std::size_t{1}, std::size_t{3}, std::size_t{6},
                              std::size_t{13}, std::size_t{50}})
  for (ggml_type t : weight_formats) {
    INFO(name(t) << ", " << m << " tokens");
    auto a = gaussian(m * k, 99);
    auto w = gaussian(rows * k, 98, 0.02f);
    const std::size_t rb = *row_bytes(t, k);
    std::vector<std::uint8_t> wq(rows * rb);
    for (std::size_t r = 0; r < rows; ++r)
      quantize_row(t, w.data() + r * k, wq.data() + r * rb, k);
    std::vector<float> one(m * rows), two(m * rows);
    REQUIRE(matmul_quant(wq.data(), t, rows, k, a.data(), m, one.data(), 1));
    REQUIRE(matmul_quant(wq.data(), t, rows, k, a.data(), m, two.data(), 2));
    for (std::size_t i = 0; i < one.size(); ++i)
      CHECK(same_float(one[i], two[i]));
    // The AVX2 kernels (token tiles too) where the CPU has AVX-512 ones.
    host::limit_isa(host::isa::avx2);
    REQUIRE(matmul_quant(wq.data(), t, rows, k, a.data(), m, two.data(), 1));
    host::limit_isa(host::isa::avx512);
    for (std::size_t i = 0; i < one.size(); ++i)
      CHECK(same_float(one[i], two[i]));
    if (t == ggml_type::f16)
      continue; // F16 goes through host::matmul_weights
    const ggml_type at = info(t).dot_type;
    std::vector<std::uint8_t> aq(*row_bytes(at, k));
    for (std::size_t i = 0; i < m; ++i) {
      quantize_activations(at, a.data() + i * k, aq.data(), k);
      for (std::size_t r = 0; r < rows; ++r)
        CHECK(same_float(one[i * rows + r],
                         vec_dot(t, k, wq.data() + r * rb, aq.data())));
    }
  }
}

TEST_CASE("matmul_quant refuses what it cannot multiply") {
  std::vector<std::uint8_t> w(144 * 2);
  std::vector<float> a(256), out(2, 7.0f);
  CHECK_FALSE(matmul_quant(w.data(), ggml_type::q8_k, 2, 256, a.data(), 1,
                           out.data(), 1));
  CHECK_FALSE(matmul_quant(w.data(), ggml_type::q4_k, 2, 250, a.data(), 1,
                           out.data(), 1));
  CHECK_FALSE(matmul_quant(nullptr, ggml_type::q4_k, 2, 256, a.data(), 1,
                           out.data(), 1));
  CHECK_FALSE(matmul_quant(w.data(), static_cast<ggml_type>(16), 2, 256,
                           a.data(), 1, out.data(), 1));
  CHECK(out[0] == 7.0f);
  CHECK(matmul_quant(w.data(), ggml_type::q4_k, 2, 256, a.data(), 1, out.data(),
                     1));
}
