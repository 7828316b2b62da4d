// Q6_K packed 16 rows at a time (backends/quant_q6_k_x16): packing is a
// byte-exact round trip, and the packed products give matmul_quant's bits
// on the stored rows (llama.cpp's vec_dot_q6_K_q8_K) for every batch size,
// any thread count, and on CPUs without AVX-512 VNNI.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "backends/backend.hpp"
#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_q6_k_x16.hpp"
#include "test/support/all_work_split.hpp"

using namespace exo::backend;
using namespace exo::backend::quant;

namespace {

/// rows x k Q6_K from normal weights (ggml's reference quantizer), or
/// (`any_bytes`) blocks of random bytes with a modest d: every 6-bit value
/// and every scale, -128 and 127 included, which a quantizer rarely writes.
std::vector<std::uint8_t> q6_k_matrix(std::size_t rows, std::size_t k,
                                      unsigned seed, bool any_bytes = false) {
  std::mt19937 rng(seed);
  const std::size_t rb = *row_bytes(ggml_type::q6_k, k);
  std::vector<std::uint8_t> w(rows * rb);
  if (any_bytes) {
    for (auto& b : w)
      b = static_cast<std::uint8_t>(rng());
    auto* blocks = reinterpret_cast<block_q6_k*>(w.data());
    for (std::size_t i = 0; i < rows * k / 256; ++i)
      blocks[i].d = static_cast<std::uint16_t>(0x1000 + rng() % 0x800);
    return w;
  }
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> wf(rows * k);
  for (auto& x : wf)
    x = d(rng);
  for (std::size_t r = 0; r < rows; ++r)
    quantize_row(ggml_type::q6_k, wf.data() + r * k, w.data() + r * rb, k);
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
  // A whole block of one negative value in the last token: every Q8_K
  // value -128 (bsums -2048).
  if (m > 0 && k >= 256)
    for (std::size_t i = 0; i < 256; ++i)
      a[(m - 1) * k + i] = -3.0f;
  return a;
}

} // namespace

TEST_CASE("packing Q6_K 16 rows at a time is a byte-exact round trip that "
          "moves every bit",
          "[quant][x16]") {
  const std::size_t rows = 32, k = 512;
  for (const bool any_bytes : {false, true}) {
    CAPTURE(any_bytes);
    const auto w = q6_k_matrix(rows, k, 3, any_bytes);
    std::vector<std::uint8_t> packed(w.size()), back(w.size(), 0xAB);
    REQUIRE(q6_k_x16_packs(rows, k));
    pack_q6_k_x16(w.data(), rows, k, packed.data());
    unpack_q6_k_x16(packed.data(), rows, k, back.data());
    CHECK(back == w);
    CHECK(packed != w);
  }
  // Group 1, block 1: row 5's d at bytes 10-11, its scale 7 (pair 3's
  // second) at 32 + 32 * 3 + 2 * 5 + 1.
  const auto w = q6_k_matrix(rows, k, 5);
  std::vector<std::uint8_t> packed(w.size());
  pack_q6_k_x16(w.data(), rows, k, packed.data());
  const std::size_t nb = k / 256;
  const auto& row5 =
      reinterpret_cast<const block_q6_k*>(w.data())[(16 + 5) * nb + 1];
  const std::uint8_t* blk = packed.data() + (1 * nb + 1) * 3360;
  std::uint16_t d;
  std::memcpy(&d, blk + 10, 2);
  CHECK(d == row5.d);
  CHECK(static_cast<std::int8_t>(blk[32 + 32 * 3 + 2 * 5 + 1]) ==
        row5.scales[7]);
  // Position x = 104 (chunk 3, lane 2, byte 0): ggml keeps its low 4 bits
  // in the high nibble of ql[32 + 8] (x - 64 = 40 = 32 + 8) and its top 2
  // at bits 6-7 of qh[8].
  const int low = row5.ql[40] >> 4, top = row5.qh[8] >> 6;
  CHECK((blk[288 + (4 * 2 + 1) * 64 + 4 * 5] >> 4) == low);
  CHECK(((blk[2336 + (2 * 2 + 0) * 64 + 4 * 5] >> 6) & 3) == top);

  // Rows past the last group stay as stored, after the groups.
  for (const std::size_t n : {std::size_t{35}, std::size_t{7}}) {
    CAPTURE(n);
    const auto t = q6_k_matrix(n, k, 9, true);
    std::vector<std::uint8_t> tp(t.size()), tb(t.size());
    REQUIRE(q6_k_x16_packs(n, k));
    pack_q6_k_x16(t.data(), n, k, tp.data());
    unpack_q6_k_x16(tp.data(), n, k, tb.data());
    CHECK(tb == t);
    const std::size_t tail = n % 16 * nb * sizeof(block_q6_k);
    CHECK(std::equal(tp.end() - static_cast<long>(tail), tp.end(),
                     t.end() - static_cast<long>(tail)));
  }
  CHECK_FALSE(q6_k_x16_packs(16, 500));
  CHECK_FALSE(q6_k_x16_packs(0, 256));
  CHECK_FALSE(q6_k_x16_packs(16, 0));
}

TEST_CASE("packed Q6_K products give the stored rows' bits for every batch, "
          "thread count and CPU",
          "[quant][x16]") {
  struct shape {
    std::size_t rows, k;
    bool any_bytes;
  };
  // 35 and 7 rows: groups and the rows left as stored, or those alone.
  for (const shape sh :
       {shape{16, 256, false}, shape{48, 768, true}, shape{32, 2048, false},
        shape{64, 512, true}, shape{35, 512, true}, shape{7, 256, false}}) {
    const std::size_t rows = sh.rows, k = sh.k;
    CAPTURE(rows, k, sh.any_bytes);
    const auto w =
        q6_k_matrix(rows, k, static_cast<unsigned>(rows + k), sh.any_bytes);
    std::vector<std::uint8_t> packed(w.size());
    pack_q6_k_x16(w.data(), rows, k, packed.data());
    // 1-5 tokens (one pass and a rest), 8 and 9, 17, and 70 (the stored
    // rows' panels from 48).
    for (const std::size_t m : {1, 2, 3, 4, 5, 8, 9, 17, 70}) {
      CAPTURE(m);
      const auto a = activations(m, k, static_cast<unsigned>(m + rows));
      std::vector<float> stored(m * rows), x16(m * rows), two(m * rows),
          avx2(m * rows), scalar(m * rows);
      REQUIRE(matmul_quant(w.data(), ggml_type::q6_k, rows, k, a.data(), m,
                           stored.data(), 1)
                  .ok());
      REQUIRE(
          matmul_q6_k_x16(packed.data(), rows, k, a.data(), m, x16.data(), 1)
              .ok());
      CHECK(x16 == stored);
      {
        exo::test::all_work_split split;
        REQUIRE(
            matmul_q6_k_x16(packed.data(), rows, k, a.data(), m, two.data(), 2)
                .ok());
      }
      CHECK(two == stored);
      // Without AVX-512 VNNI the rows are unpacked and run as stored.
      host::limit_isa(host::isa::avx2);
      REQUIRE(
          matmul_q6_k_x16(packed.data(), rows, k, a.data(), m, avx2.data(), 1)
              .ok());
      host::limit_isa(host::isa::scalar);
      REQUIRE(
          matmul_q6_k_x16(packed.data(), rows, k, a.data(), m, scalar.data(), 1)
              .ok());
      host::limit_isa(host::isa::avx512);
      CHECK(avx2 == stored);
      CHECK(scalar == stored);
    }
  }
  if (!host::have_vnni())
    WARN("this CPU has no AVX-512 VNNI: the packed kernel itself is not run");
}

TEST_CASE("packed Q6_K products refuse null operands and shapes that do not "
          "pack, only Q6_K packs into q6_k_x16, and a file's Q6_K stays Q6_K",
          "[quant][x16]") {
  std::vector<std::uint8_t> w(16 * sizeof(block_q6_k));
  std::vector<float> a(256), out(16);
  CHECK(matmul_q6_k_x16(w.data(), 16, 256, a.data(), 1, out.data(), 1).ok());
  CHECK_FALSE(
      matmul_q6_k_x16(nullptr, 16, 256, a.data(), 1, out.data(), 1).ok());
  auto r = matmul_q6_k_x16(w.data(), 16, 200, a.data(), 1, out.data(), 1);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().message.find("does not pack") != std::string::npos);
  CHECK_FALSE(
      matmul_q6_k_x16(w.data(), 16, 0, a.data(), 1, out.data(), 1).ok());
  // Any number of rows: those past the last group are stored rows.
  CHECK(matmul_q6_k_x16(w.data(), 8, 256, a.data(), 1, out.data(), 1).ok());
  CHECK(host::check_matmul_weights(weight_type::q6_k_x16, {1, 24, 256, true})
            .ok());
  CHECK_FALSE(
      host::check_matmul_weights(weight_type::q6_k_x16, {1, 16, 200, true})
          .ok());
  // Packing: Q6_K into q6_k_x16 only.
  std::vector<std::uint8_t> dst(w.size());
  CHECK(pack_weights(weight_type::q6_k, weight_type::q6_k_x16, w.data(), 16,
                     256, dst.data())
            .ok());
  CHECK_FALSE(pack_weights(weight_type::q4_k, weight_type::q6_k_x16, w.data(),
                           16, 256, dst.data())
                  .ok());
  CHECK_FALSE(pack_weights(weight_type::q6_k, weight_type::q4_k_x16, w.data(),
                           16, 256, dst.data())
                  .ok());
  auto odd = pack_weights(weight_type::q6_k, weight_type::q6_k_x16, w.data(),
                          16, 200, dst.data());
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.err().message.find("q6_k matrix does not pack into q6_k_x16") !=
        std::string::npos);
  CHECK(std::string{to_string(weight_type::q6_k_x16)} == "q6_k_x16");
  CHECK(weights_op(weight_type::q6_k_x16) == op_kind::matmul_q6_k_x16);
  CHECK(rows_apart_op(op_kind::matmul_q6_k_x16) == op_kind::matmul_q6_k_x16);
  CHECK(*weights_of(op_kind::matmul_q6_k_x16) == weight_type::q6_k_x16);
  CHECK(*weight_row_bytes(weight_type::q6_k_x16, 512) ==
        *weight_row_bytes(weight_type::q6_k, 512));
  // A GGUF file's Q6_K id is still Q6_K.
  CHECK(*weight_type_of_ggml(ggml_type_id(weight_type::q6_k)) ==
        weight_type::q6_k);
}
