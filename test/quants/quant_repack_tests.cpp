// The repacked Q4_K order (backends/quant_repack): SIMD and portable paths
// give the same bits, any thread count gives the same bits, and the result
// stays within float rounding of vec_dot's (same integers, another order).

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_repack.hpp"

using namespace exo::backend;
using namespace exo::backend::quant;

TEST_CASE("repacked Q4_K products agree across paths and threads and with "
          "vec_dot",
          "[quant][repack]") {
  // Rows in 16-row panels (AMX tiles from 12 tokens, from 32 for the
  // gemm's steps by pair; AVX-512 VNNI from 9 by pair, from 20 by
  // super-block), groups of 8 (AVX-512 VNNI by super-block: 8 tokens a
  // pass, 15 = 8 + 7, 19 = 8 + 8 + 3; AVX2: 4) and rests; tokens in groups
  // of 16, tiles of 6 or 4 and rests; one token.
  // 17, 35 and 50 tokens: the gemm's tokens and the gemv's in groups of
  // their own (on the tiles by pair: 35, two groups of 16 through one
  // pair's weights; 50, three, the last alone).
  struct shape {
    std::size_t rows, k, m;
  };
  if (!host::have_amx())
    WARN("this CPU (or kernel) gives no AMX tiles: their path is not run");
  for (const shape sh : {shape{20, 512, 9}, shape{40, 768, 13},
                         shape{8, 256, 8}, shape{24, 512, 3},
                         shape{16, 256, 1}, shape{36, 512, 17},
                         shape{16, 1024, 35}, shape{40, 512, 50},
                         shape{24, 2048, 15}, shape{16, 768, 6},
                         shape{32, 512, 19}}) {
    CAPTURE(sh.rows, sh.k, sh.m);
    const std::size_t rows = sh.rows, k = sh.k, m = sh.m;
    std::mt19937 rng(static_cast<unsigned>(5 + rows + m));
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> wf(rows * k), a(m * k);
    for (auto& x : wf)
      x = d(rng) * 0.05f;
    for (auto& x : a)
      x = d(rng);
    const std::size_t rb = *row_bytes(ggml_type::q4_k, k);
    std::vector<std::uint8_t> w(rows * rb);
    for (std::size_t r = 0; r < rows; ++r)
      quantize_row(ggml_type::q4_k, wf.data() + r * k, w.data() + r * rb, k);

    for (const auto steps : {q4_k_gemm::by_super_block, q4_k_gemm::by_pair}) {
    CAPTURE(static_cast<int>(steps));
    set_q4_k_gemm(steps);
    std::vector<float> simd(m * rows), avx2(m * rows), scalar(m * rows),
      two(m * rows), ref(m * rows), apart(m * rows), alone(m * rows),
      vnni(m * rows), vnni_apart(m * rows);
    REQUIRE(
      matmul_q4_k_repacked(w.data(), rows, k, a.data(), m, simd.data(), 1)
        .ok());
    host::allow_amx(false);
    REQUIRE(
      matmul_q4_k_repacked(w.data(), rows, k, a.data(), m, vnni.data(), 1)
        .ok());
    REQUIRE(matmul_q4_k_repacked(w.data(), rows, k, a.data(), m,
                                 vnni_apart.data(), 1, true)
              .ok());
    host::allow_amx(true);
    CHECK(simd == vnni);
    REQUIRE(
      matmul_q4_k_repacked(w.data(), rows, k, a.data(), m, two.data(), 2)
        .ok());
    host::limit_isa(host::isa::avx2);
    REQUIRE(
      matmul_q4_k_repacked(w.data(), rows, k, a.data(), m, avx2.data(), 1)
        .ok());
    host::limit_isa(host::isa::scalar);
    REQUIRE(
      matmul_q4_k_repacked(w.data(), rows, k, a.data(), m, scalar.data(), 1)
        .ok());
    host::limit_isa(host::isa::avx512);
    REQUIRE(matmul_quant(w.data(), ggml_type::q4_k, rows, k, a.data(), m,
                         ref.data(), 1)
              .ok());
    CHECK(simd == scalar);
    CHECK(avx2 == scalar);
    CHECK(simd == two);
    for (std::size_t i = 0; i < ref.size(); ++i)
      CHECK(std::fabs(simd[i] - ref[i])
            <= 1e-5f * (1.0f + std::fabs(ref[i])));
    // Each token alone (m = 1: the gemv), and rows apart: the same bits.
    // A batch's last m % 4 tokens (all of them below 4) are the gemv's,
    // the others the gemm's, which steps by pair where asked.
    for (std::size_t t = 0; t < m; ++t)
      REQUIRE(matmul_q4_k_repacked(w.data(), rows, k, a.data() + t * k, 1,
                                   alone.data() + t * rows, 1)
                .ok());
    REQUIRE(matmul_q4_k_repacked(w.data(), rows, k, a.data(), m,
                                 apart.data(), 1, true)
              .ok());
    CHECK(apart == alone);
    CHECK(vnni_apart == alone);
    const std::size_t mg = m >= 4 ? m - m % 4 : 0;
    std::size_t gemm_differs = 0;
    for (std::size_t i = 0; i < m * rows; ++i) {
      if (i >= mg * rows)
        CHECK(simd[i] == alone[i]);
      else
        gemm_differs += simd[i] != alone[i];
    }
    if (steps == q4_k_gemm::by_super_block || mg == 0)
      CHECK(gemm_differs == 0);
    else
      CHECK(gemm_differs > 0);
    }
  }
  set_q4_k_gemm(std::nullopt);
  const std::size_t rows = 8, k = 256, m = 1;
  std::vector<std::uint8_t> w(rows * *row_bytes(ggml_type::q4_k, k));
  std::vector<float> a(m * k, 0.5f), ref(m * rows);
  CHECK(q4_k_repacked(8));
  CHECK_FALSE(q4_k_repacked(12));
  CHECK_FALSE(
    matmul_q4_k_repacked(w.data(), rows, 100, a.data(), m, ref.data(), 1)
      .ok());
}
