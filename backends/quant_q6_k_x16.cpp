#include "backends/quant_q6_k_x16.hpp"

#include "backends/host_kernels.hpp"
#include "backends/host_parallel.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_x16_groups.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EXO_Q6X16_X86 1
#endif

namespace exo::backend::quant {

namespace {

using q6_k_x16_layout::group_block_bytes;
using q6_k_x16_layout::off_qh;
using q6_k_x16_layout::off_ql;
using q6_k_x16_layout::off_scales;
static_assert(group_block_bytes == q6_k_x16_rows * sizeof(block_q6_k) &&
                  off_qh + 16 * 64 == group_block_bytes,
              "a packed group's block holds 16 Q6_K blocks' bytes");

std::uint32_t load_u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void store_u32(std::uint8_t* p, std::uint32_t v) {
  std::memcpy(p, &v, 4);
}

/// Row w's 256 weights (0..63) in position order (dequantize_row_q6_K's).
void q6_values(const block_q6_k& w, std::uint8_t* v) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const std::uint8_t a = w.ql[64 * h + l], b = w.ql[64 * h + 32 + l];
      const std::uint8_t hb = w.qh[32 * h + l];
      v[128 * h + l] = static_cast<std::uint8_t>((a & 0xF) | (hb & 3) << 4);
      v[128 * h + 32 + l] =
          static_cast<std::uint8_t>((b & 0xF) | (hb >> 2 & 3) << 4);
      v[128 * h + 64 + l] =
          static_cast<std::uint8_t>((a >> 4) | (hb >> 4 & 3) << 4);
      v[128 * h + 96 + l] =
          static_cast<std::uint8_t>((b >> 4) | (hb >> 6 & 3) << 4);
    }
}

/// The inverse of q6_values: ql and qh from the 256 weights.
void q6_bits(const std::uint8_t* v, block_q6_k& w) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const std::uint8_t* c = v + 128 * h + l;
      w.ql[64 * h + l] =
          static_cast<std::uint8_t>((c[0] & 0xF) | (c[64] & 0xF) << 4);
      w.ql[64 * h + 32 + l] =
          static_cast<std::uint8_t>((c[32] & 0xF) | (c[96] & 0xF) << 4);
      w.qh[32 * h + l] =
          static_cast<std::uint8_t>((c[0] >> 4) | (c[32] >> 4) << 2 |
                                    (c[64] >> 4) << 4 | (c[96] >> 4) << 6);
    }
}

/// Group block `dst` from the 16 rows' blocks rows[r].
void pack_block(const block_q6_k* const* rows, std::uint8_t* dst) {
  alignas(64) std::uint8_t v[256];
  for (std::size_t r = 0; r < q6_k_x16_rows; ++r) {
    const block_q6_k& w = *rows[r];
    std::memcpy(dst + 2 * r, &w.d, 2);
    for (std::size_t l = 0; l < 8; ++l)
      for (std::size_t i = 0; i < 2; ++i)
        dst[off_scales + 32 * l + 2 * r + i] =
            static_cast<std::uint8_t>(w.scales[2 * l + i]);
    q6_values(w, v);
    for (std::size_t l = 0; l < 8; ++l) {
      for (std::size_t p = 0; p < 4; ++p) {
        const std::uint32_t lo = load_u32(v + 64 * p + 4 * l);
        const std::uint32_t hi = load_u32(v + 64 * p + 32 + 4 * l);
        store_u32(dst + off_ql + (4 * l + p) * 64 + 4 * r,
                  (lo & 0x0F0F0F0Fu) | (hi & 0x0F0F0F0Fu) << 4);
      }
      for (std::size_t q = 0; q < 2; ++q) {
        std::uint32_t bits = 0;
        for (std::size_t i = 0; i < 4; ++i)
          bits |= (load_u32(v + 32 * (4 * q + i) + 4 * l) >> 4 & 0x03030303u)
                  << (2 * i);
        store_u32(dst + off_qh + (2 * l + q) * 64 + 4 * r, bits);
      }
    }
  }
}

/// The inverse of pack_block.
void unpack_block(const std::uint8_t* src, block_q6_k* const* rows) {
  alignas(64) std::uint8_t v[256];
  for (std::size_t r = 0; r < q6_k_x16_rows; ++r) {
    block_q6_k& w = *rows[r];
    std::memcpy(&w.d, src + 2 * r, 2);
    for (std::size_t l = 0; l < 8; ++l)
      for (std::size_t i = 0; i < 2; ++i)
        w.scales[2 * l + i] =
            static_cast<std::int8_t>(src[off_scales + 32 * l + 2 * r + i]);
    for (std::size_t l = 0; l < 8; ++l) {
      for (std::size_t p = 0; p < 4; ++p) {
        const std::uint32_t u =
            load_u32(src + off_ql + (4 * l + p) * 64 + 4 * r);
        store_u32(v + 64 * p + 4 * l, u & 0x0F0F0F0Fu);
        store_u32(v + 64 * p + 32 + 4 * l, u >> 4 & 0x0F0F0F0Fu);
      }
      for (std::size_t q = 0; q < 2; ++q) {
        const std::uint32_t bits =
            load_u32(src + off_qh + (2 * l + q) * 64 + 4 * r);
        for (std::size_t i = 0; i < 4; ++i) {
          std::uint8_t* c = v + 32 * (4 * q + i) + 4 * l;
          store_u32(c, load_u32(c) | (bits >> (2 * i) & 0x03030303u) << 4);
        }
      }
    }
    q6_bits(v, w);
  }
}

/// Rows [r0, r0 + n) (whole groups) of a packed rows x k matrix back to
/// ggml's rows at dst.
void unpack_rows(const std::uint8_t* src, std::size_t nb, std::size_t r0,
                 std::size_t n, block_q6_k* dst) {
  x16::for_each_group_block(
      dst, r0 / q6_k_x16_rows, (r0 + n) / q6_k_x16_rows, nb,
      [&](block_q6_k* const* rows, std::size_t g, std::size_t b) {
        unpack_block(src + (g * nb + b) * group_block_bytes, rows);
      });
}

#ifdef EXO_Q6X16_X86
// GCC 12's _mm512_cvtph_ps and _mm512_cvtepi32_ps pass
// _mm512_undefined_*() as their unused merge operand, which
// -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic push
#if !defined(__clang__) // a GCC warning clang does not know
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

#define EXO_Q6X16_TARGET                                                       \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,"             \
                        "avx512vnni")))

/// Tokens a pass of x16_tokens takes: 4 ran 1.2-1.3x faster a token than
/// 8 (its sums spill), 5 and 6 no better than 4 (one core, 2048 x 8192).
constexpr int x16_width = 4;

/// Blocks ahead a group's block asks for (13 KB on in the thread's
/// stream): one core, one token, 2048 x 8192 in L3, 0.78-0.83x the stored
/// rows' kernel where asking for the next group's block (107 KB on, as
/// matmul_q4_k_x16 does) gave 0.68-0.73x; 2 and 8 blocks on about as 4;
/// from DRAM about even either way (this kernel, vpmaddubsw form).
constexpr std::size_t ahead_blocks = 4;

/// One group's 16 rows against NT tokens: out[t][r] for r < 16, the bits
/// of the AVX2 vec_dot_q6_K_q8_K on each row. Lane l (a register of 16
/// rows) of token t sums, per chunk c, a vpdpbusd on zero of the chunk's
/// unit (the rows' 4 weights at lane l, 6 bits rebuilt from the low
/// nibbles and the top bits) against the token's 4 activations there
/// broadcast as a dword: at most 4 x 63 x 128 < 2^15 in magnitude, so its
/// low word is the sum and its high word the sign, and one vpdpwssd
/// against (scale of that chunk half, 0) scales it: the AVX2 kernel's
/// madd of the chunk, lane for lane. (vpmaddubsw into word pairs and a
/// vpdpwssd against (scale, scale), the same integers, ran one token at
/// 0.80x the stored rows in L3 where this runs 0.87x.) The lane's -32 x (sc[2l]
/// bsum[2l] + sc[2l+1] bsum[2l+1]) is one more vpdpwssd (the pair of scales
/// times -32, |.| <= 4096). Then the lane's float chain: fma with d8 * d, and
/// at the end the lanes summed as hsum8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
/// The lanes' float chains live in memory (8 x NT registers would not fit);
/// bsp[t]: per block the token's (bsums[2l], bsums[2l+1]) as 8 dwords.
template<int NT>
EXO_Q6X16_TARGET void x16_tokens(const std::uint8_t* group, std::size_t nb,
                                 const block_q8_k* const* act,
                                 const std::int32_t* const* bsp,
                                 float* const* out, const std::uint8_t* next) {
  alignas(64) float facc[NT][8][16];
  std::memset(facc, 0, sizeof facc);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i m32 = _mm512_set1_epi16(-32);
  for (std::size_t b = 0; b < nb; ++b) {
    const std::uint8_t* p = group + b * group_block_bytes;
    if (next) {
      // The block `ahead_blocks` on in this thread's stream (its next
      // group's after the group's last blocks), 53 lines into L1; only in
      // the first pass (later ones find the group in L2: asking again
      // cost them).
      const std::uint8_t* pf =
          b + ahead_blocks < nb
              ? p + ahead_blocks * group_block_bytes
              : next + (b + ahead_blocks - nb) * group_block_bytes;
#pragma GCC unroll 53
      for (std::size_t l = 0; l < (group_block_bytes + 63) / 64; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(pf + 64 * l), _MM_HINT_T0);
    }
    const __m512 dw = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const std::int8_t* aq[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      aq[t] = act[t][b].qs;
#pragma GCC unroll 1
    for (int half = 0; half < 2; ++half) {
      // The rows' scale of chunk c's half `half` (2c + half), both words.
      __m512i sc[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m512i x = _mm512_cvtepi8_epi16(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(p + off_scales + 32 * c)));
        // (s, 0) words: the scale against a dword sum that fits a word.
        sc[c] = half ? _mm512_srli_epi32(x, 16)
                     : _mm512_and_si512(x, _mm512_set1_epi32(0xFFFF));
      }
#pragma GCC unroll 1
      for (int ll = 0; ll < 4; ++ll) {
        const int l = 4 * half + ll;
        __m512i s[NT];
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
          s[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int q = 0; q < 2; ++q) {
          const std::uint8_t* lq = p + off_ql + (4 * l + 2 * q) * 64;
          const __m512i l0 = _mm512_loadu_si512(lq);
          const __m512i l1 = _mm512_loadu_si512(lq + 64);
          const __m512i hb = _mm512_loadu_si512(p + off_qh + (2 * l + q) * 64);
          __m512i u[4];
          u[0] =
              _mm512_or_si512(_mm512_and_si512(l0, m4),
                              _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30));
          u[1] =
              _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4),
                              _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30));
          u[2] = _mm512_or_si512(_mm512_and_si512(l1, m4),
                                 _mm512_and_si512(hb, m30));
          u[3] =
              _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                              _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30));
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const int c = 4 * q + i;
#pragma GCC unroll 4
            for (int t = 0; t < NT; ++t)
              s[t] = _mm512_dpwssd_epi32(
                  s[t],
                  _mm512_dpbusd_epi32(
                      _mm512_setzero_si512(), u[i],
                      x16::dword_to_all(aq[t] + 32 * c + 4 * l)),
                  sc[c]);
          }
        }
        // Scales 2l and 2l + 1 of every row, times -32.
        const __m512i pair32 = _mm512_mullo_epi16(
            _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(p + off_scales + 32 * l))),
            m32);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const __m512i v = _mm512_dpwssd_epi32(
              s[t], pair32, _mm512_set1_epi32(bsp[t][8 * b + l]));
          const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(act[t][b].d), dw);
          _mm512_store_ps(facc[t][l],
                          _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(v),
                                          _mm512_load_ps(facc[t][l])));
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    const __m512 r0 =
        _mm512_add_ps(_mm512_load_ps(facc[t][0]), _mm512_load_ps(facc[t][4]));
    const __m512 r1 =
        _mm512_add_ps(_mm512_load_ps(facc[t][1]), _mm512_load_ps(facc[t][5]));
    const __m512 r2 =
        _mm512_add_ps(_mm512_load_ps(facc[t][2]), _mm512_load_ps(facc[t][6]));
    const __m512 r3 =
        _mm512_add_ps(_mm512_load_ps(facc[t][3]), _mm512_load_ps(facc[t][7]));
    _mm512_storeu_ps(
        out[t], _mm512_add_ps(_mm512_add_ps(r0, r2), _mm512_add_ps(r1, r3)));
  }
}

void x16_pass(const std::uint8_t* group, std::size_t nb,
              const block_q8_k* const* act, const std::int32_t* const* bsp,
              float* const* out, std::size_t n, const std::uint8_t* next) {
  switch (n) {
  case 1:
    x16_tokens<1>(group, nb, act, bsp, out, next);
    return;
  case 2:
    x16_tokens<2>(group, nb, act, bsp, out, next);
    return;
  case 3:
    x16_tokens<3>(group, nb, act, bsp, out, next);
    return;
  default:
    x16_tokens<4>(group, nb, act, bsp, out, next);
    return;
  }
}

#pragma GCC diagnostic pop
#endif

} // namespace

bool q6_k_x16_packs(std::size_t rows, std::size_t k) noexcept {
  return rows > 0 && k > 0 && k % qk_k == 0;
}

void pack_q6_k_x16(const void* src, std::size_t rows, std::size_t k,
                   void* dst) noexcept {
  const std::size_t nb = k / qk_k;
  const auto* in = static_cast<const block_q6_k*>(src);
  auto* outp = static_cast<std::uint8_t*>(dst);
  x16::for_each_group_block(
      in, 0, rows / q6_k_x16_rows, nb,
      [&](const block_q6_k* const* rs, std::size_t g, std::size_t b) {
        pack_block(rs, outp + (g * nb + b) * group_block_bytes);
      });
  const std::size_t whole = rows / q6_k_x16_rows * q6_k_x16_rows;
  std::memcpy(outp + whole * nb * sizeof(block_q6_k), in + whole * nb,
              (rows - whole) * nb * sizeof(block_q6_k));
}

void unpack_q6_k_x16(const void* src, std::size_t rows, std::size_t k,
                     void* dst) noexcept {
  const std::size_t nb = k / qk_k;
  const std::size_t whole = rows / q6_k_x16_rows * q6_k_x16_rows;
  const auto* in = static_cast<const std::uint8_t*>(src);
  auto* outp = static_cast<block_q6_k*>(dst);
  unpack_rows(in, nb, 0, whole, outp);
  std::memcpy(outp + whole * nb, in + whole * nb * sizeof(block_q6_k),
              (rows - whole) * nb * sizeof(block_q6_k));
}

result<bool> matmul_q6_k_x16(const void* w, std::size_t rows, std::size_t k,
                             const float* a, std::size_t m, float* out,
                             int threads) {
  if (!w || !a || !out)
    return fail(errc::invalid_argument, "matmul_q6_k_x16: null operand");
  if (!q6_k_x16_packs(rows, k))
    return fail(errc::invalid_argument,
                "matmul_q6_k_x16: " + std::to_string(rows) + " x " +
                    std::to_string(k) + " does not pack (k a multiple of 256)");
  if (m == 0)
    return true;
  const std::size_t nb = k / qk_k;
  const auto* packed = static_cast<const std::uint8_t*>(w);
  const std::size_t groups = rows / q6_k_x16_rows;
  const std::size_t whole = groups * q6_k_x16_rows;
  // The rows after the last group, as stored (a vocabulary of 100002).
  const auto run_tail = [&]() -> result<bool> {
    if (whole == rows)
      return true;
    const std::size_t n = rows - whole;
    std::vector<float> part(n * m);
    auto done = matmul_quant(packed + whole * nb * sizeof(block_q6_k),
                             ggml_type::q6_k, n, k, a, m, part.data(), threads);
    if (!done)
      return done;
    for (std::size_t t = 0; t < m; ++t)
      std::copy_n(part.data() + t * n, n, out + t * rows + whole);
    return true;
  };
#ifdef EXO_Q6X16_X86
  if (host::have_vnni()) {
    std::vector<block_q8_k> q(nb * m);
    // Per token and block: (bsums[2l], bsums[2l + 1]) as words, lane l.
    std::vector<std::int32_t> bsp(nb * m * 8);
    host::for_each_index(
        static_cast<long>(m), m > 1 ? threads : 1, [&](long t) {
          const auto i = static_cast<std::size_t>(t);
          quantize_activations(ggml_type::q8_k, a + i * k, q.data() + i * nb,
                               k);
          for (std::size_t b = 0; b < nb; ++b) {
            const std::int16_t* s = q[i * nb + b].bsums;
            for (std::size_t l = 0; l < 8; ++l)
              bsp[(i * nb + b) * 8 + l] = static_cast<std::int32_t>(
                  static_cast<std::uint32_t>(
                      static_cast<std::uint16_t>(s[2 * l])) |
                  static_cast<std::uint32_t>(
                      static_cast<std::uint16_t>(s[2 * l + 1]))
                      << 16);
          }
        });
    // Each thread a contiguous range of groups: two threads ran 8-10%
    // faster so than taking groups in turn (2048 x 8192 from DRAM, 1, 4
    // and 16 tokens; docs/benchmarks.md).
    host::for_each_index(
        static_cast<long>(groups), threads, [&](long gi) {
          const auto g = static_cast<std::size_t>(gi);
          const std::uint8_t* group = packed + g * nb * group_block_bytes;
          // The thread's next group (past its range's end: another
          // thread's, or past the matrix's; prefetches never fault).
          const std::uint8_t* next = group + nb * group_block_bytes;
          for (std::size_t t0 = 0; t0 < m;) {
            const std::size_t nt = std::min<std::size_t>(x16_width, m - t0);
            const block_q8_k* act[x16_width];
            const std::int32_t* bs[x16_width];
            float* dst[x16_width];
            for (std::size_t t = 0; t < nt; ++t) {
              act[t] = q.data() + (t0 + t) * nb;
              bs[t] = bsp.data() + (t0 + t) * nb * 8;
              dst[t] = out + (t0 + t) * rows + g * q6_k_x16_rows;
            }
            x16_pass(group, nb, act, bs, dst, nt, next);
            next = nullptr; // the next group asked for once, in the first pass
            t0 += nt;
          }
        });
    return run_tail();
  }
#endif
  // Elsewhere: the groups back as stored, then matmul_quant on them (the
  // same bits by definition).
  std::vector<block_q6_k> rowsbuf(whole * nb);
  unpack_rows(packed, nb, 0, whole, rowsbuf.data());
  if (whole > 0) {
    std::vector<float> part(whole * m);
    auto done = matmul_quant(rowsbuf.data(), ggml_type::q6_k, whole, k, a, m,
                             part.data(), threads);
    if (!done)
      return done;
    for (std::size_t t = 0; t < m; ++t)
      std::copy_n(part.data() + t * whole, whole, out + t * rows);
  }
  return run_tail();
}

} // namespace exo::backend::quant
