// Q4_K packed 16 rows at a time (backends/quant_q4_k_x16): packing is a
// byte-exact round trip, and the packed products give matmul_q4_k_repacked's
// bits on the stored rows for every batch size, both step orders, rows apart
// or not, any thread count, and on CPUs without AVX-512 VNNI.

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "backends/backend.hpp"
#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_q4_k_x16.hpp"
#include "backends/quant_repack.hpp"
#include "test/support/all_work_split.hpp"

using namespace exo::backend;
using namespace exo::backend::quant;

namespace {

/// rows x k Q4_K from normal weights (ggml's reference quantizer).
std::vector<std::uint8_t> q4_k_matrix(std::size_t rows, std::size_t k,
                                      unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> wf(rows * k);
  for (auto& x : wf)
    x = d(rng);
  const std::size_t rb = *row_bytes(ggml_type::q4_k, k);
  std::vector<std::uint8_t> w(rows * rb);
  for (std::size_t r = 0; r < rows; ++r)
    quantize_row(ggml_type::q4_k, wf.data() + r * k, w.data() + r * rb, k);
  return w;
}

std::vector<float> activations(std::size_t m, std::size_t k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> a(m * k);
  for (auto& x : a)
    x = d(rng);
  // Large activations: Q8_K values reach -128 and 127, the sums' bounds.
  for (std::size_t i = 0; i < a.size(); i += 37)
    a[i] *= 40.0f;
  return a;
}

} // namespace

TEST_CASE("packing Q4_K 16 rows at a time is a byte-exact round trip that "
          "moves every nibble",
          "[quant][x16]") {
  const std::size_t rows = 32, k = 512;
  const auto w = q4_k_matrix(rows, k, 3);
  std::vector<std::uint8_t> packed(w.size()), back(w.size(), 0xAB);
  REQUIRE(q4_k_x16_packs(rows, k));
  pack_q4_k_x16(w.data(), rows, k, packed.data());
  unpack_q4_k_x16(packed.data(), rows, k, back.data());
  CHECK(back == w);
  CHECK(packed != w);
  // Group 1, block 0: row 3's d at bytes 6-7, its scale byte 5 at
  // 64 + 16 * 5 + 3; its weight 8 of sub-block 2 (the low nibble of qs[40]
  // of that row) in unit 1's byte 4 * 3 + 0, low nibble.
  const std::size_t nb = k / 256, rb = nb * sizeof(block_q4_k);
  const auto& row3 =
    *reinterpret_cast<const block_q4_k*>(w.data() + (16 + 3) * rb);
  const std::uint8_t* g1 = packed.data() + nb * 16 * sizeof(block_q4_k);
  std::uint16_t d;
  std::memcpy(&d, g1 + 6, 2);
  CHECK(d == row3.d);
  CHECK(g1[64 + 16 * 5 + 3] == row3.scales[5]);
  CHECK((g1[256 + (4 * 2 + 1) * 64 + 4 * 3] & 0xF) == (row3.qs[32 + 8] & 0xF));
  // Weight 12 of sub-block 3 (high nibble of qs[32 + 12]): unit 1, e = 0,
  // high nibble of sub-block 3's unit.
  CHECK((g1[256 + (4 * 3 + 1) * 64 + 4 * 3] >> 4) == (row3.qs[32 + 12] >> 4));

  CHECK_FALSE(q4_k_x16_packs(24, 512));
  CHECK_FALSE(q4_k_x16_packs(16, 500));
  CHECK_FALSE(q4_k_x16_packs(0, 256));
}

TEST_CASE("packed Q4_K products give the stored rows' bits for every batch, "
          "step order, thread count and CPU",
          "[quant][x16]") {
  struct shape {
    std::size_t rows, k;
  };
  for (const shape sh : {shape{16, 256}, shape{48, 768}, shape{32, 2048}}) {
    const std::size_t rows = sh.rows, k = sh.k;
    CAPTURE(rows, k);
    const auto w = q4_k_matrix(rows, k, static_cast<unsigned>(rows + k));
    std::vector<std::uint8_t> packed(w.size());
    pack_q4_k_x16(w.data(), rows, k, packed.data());
    // 1-9 tokens (one pass and a rest), 16 and 17 (two passes and one
    // token), 70 (bytes unpacked once, a rest of 6; the gemm's 68 by pair).
    for (const std::size_t m : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 70}) {
      CAPTURE(m);
      const auto a = activations(m, k, static_cast<unsigned>(m));
      for (const auto steps :
           {q4_k_gemm::by_super_block, q4_k_gemm::by_pair}) {
        CAPTURE(static_cast<int>(steps));
        set_q4_k_gemm(steps);
        for (const bool apart : {false, true}) {
          CAPTURE(apart);
          std::vector<float> stored(m * rows), x16(m * rows), two(m * rows),
            avx2(m * rows), scalar(m * rows);
          REQUIRE(matmul_q4_k_repacked(w.data(), rows, k, a.data(), m,
                                       stored.data(), 1, apart)
                    .ok());
          REQUIRE(matmul_q4_k_x16(packed.data(), rows, k, a.data(), m,
                                  x16.data(), 1, apart)
                    .ok());
          CHECK(x16 == stored);
          {
            exo::test::all_work_split split;
            REQUIRE(matmul_q4_k_x16(packed.data(), rows, k, a.data(), m,
                                    two.data(), 2, apart)
                      .ok());
          }
          CHECK(two == stored);
          // Without AVX-512 VNNI the rows are unpacked and run as stored.
          host::limit_isa(host::isa::avx2);
          REQUIRE(matmul_q4_k_x16(packed.data(), rows, k, a.data(), m,
                                  avx2.data(), 1, apart)
                    .ok());
          host::limit_isa(host::isa::scalar);
          REQUIRE(matmul_q4_k_x16(packed.data(), rows, k, a.data(), m,
                                  scalar.data(), 1, apart)
                    .ok());
          host::limit_isa(host::isa::avx512);
          CHECK(avx2 == stored);
          CHECK(scalar == stored);
        }
      }
    }
  }
  set_q4_k_gemm(std::nullopt);
  if (!host::have_vnni())
    WARN("this CPU has no AVX-512 VNNI: the packed kernel itself is not run");
}

TEST_CASE("packed Q4_K products refuse null operands and shapes that do not "
          "pack, only Q4_K packs, and a file's Q4_K stays Q4_K",
          "[quant][x16]") {
  std::vector<std::uint8_t> w(16 * sizeof(block_q4_k));
  std::vector<float> a(256), out(16);
  CHECK(matmul_q4_k_x16(w.data(), 16, 256, a.data(), 1, out.data(), 1).ok());
  CHECK_FALSE(matmul_q4_k_x16(nullptr, 16, 256, a.data(), 1, out.data(), 1)
                .ok());
  auto r = matmul_q4_k_x16(w.data(), 8, 256, a.data(), 1, out.data(), 1);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().message.find("does not pack") != std::string::npos);
  CHECK_FALSE(matmul_q4_k_x16(w.data(), 16, 200, a.data(), 1, out.data(), 1)
                .ok());
  // The sizes every device checks: whole groups of 16 rows.
  CHECK(host::check_matmul_weights(weight_type::q4_k_x16, {1, 16, 256, true})
          .ok());
  auto bad =
    host::check_matmul_weights(weight_type::q4_k_x16, {1, 24, 256, true});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.err().message.find("groups of 16 rows") != std::string::npos);
  // Packing: Q4_K into q4_k_x16 only.
  std::vector<std::uint8_t> dst(w.size());
  CHECK(pack_weights(weight_type::q4_k, weight_type::q4_k_x16, w.data(), 16,
                     256, dst.data())
          .ok());
  CHECK_FALSE(pack_weights(weight_type::q6_k, weight_type::q4_k_x16, w.data(),
                           16, 256, dst.data())
                .ok());
  CHECK_FALSE(pack_weights(weight_type::q4_k, weight_type::q4_k_x16, w.data(),
                           8, 256, dst.data())
                .ok());
  CHECK(std::string{to_string(weight_type::q4_k_x16)} == "q4_k_x16");
  CHECK(weights_op(weight_type::q4_k_x16) == op_kind::matmul_q4_k_x16);
  CHECK(rows_apart_op(op_kind::matmul_q4_k_x16)
        == op_kind::matmul_rows_q4_k_x16);
  CHECK(*weights_of(op_kind::matmul_rows_q4_k_x16) == weight_type::q4_k_x16);
  // A GGUF file's Q4_K id is still Q4_K.
  CHECK(*weight_type_of_ggml(ggml_type_id(weight_type::q4_k))
        == weight_type::q4_k);
}
