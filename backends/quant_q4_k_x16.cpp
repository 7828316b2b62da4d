#include "backends/quant_q4_k_x16.hpp"
#include "backends/quant_q4_k_x16_simd.hpp"

#include "backends/host_kernels.hpp"
#include "backends/host_parallel.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_x16_groups.hpp"
#include "backends/quant_repack.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EXO_X16_X86 1
#endif

namespace exo::backend::quant {

namespace {

using q4_k_x16_layout::group_block_bytes;
using q4_k_x16_layout::off_dmin;
using q4_k_x16_layout::off_qs;
using q4_k_x16_layout::off_scales;
static_assert(group_block_bytes == q4_k_x16_rows * sizeof(block_q4_k)
                && off_qs + 8 * 4 * 64 == group_block_bytes,
              "a packed group's block holds 16 Q4_K blocks' bytes");

/// Group block `dst` from the 16 rows' blocks rows[r].
void pack_block(const block_q4_k* const* rows, std::uint8_t* dst) {
  for (std::size_t r = 0; r < q4_k_x16_rows; ++r) {
    const block_q4_k& w = *rows[r];
    std::memcpy(dst + 2 * r, &w.d, 2);
    std::memcpy(dst + off_dmin + 2 * r, &w.dmin, 2);
    for (std::size_t i = 0; i < 12; ++i)
      dst[off_scales + 16 * i + r] = w.scales[i];
    // Four weights at a time: bytes x = qs[32c + 8u ..] and y (4 on) hold
    // weights 8u + e and 8u + 4 + e of sub-blocks 2c (low nibbles) and
    // 2c + 1 (high nibbles).
    for (int c = 0; c < 4; ++c)
      for (int u = 0; u < 4; ++u) {
        std::uint32_t x, y;
        std::memcpy(&x, w.qs + 32 * c + 8 * u, 4);
        std::memcpy(&y, w.qs + 32 * c + 8 * u + 4, 4);
        const std::uint32_t even = (x & 0x0F0F0F0Fu) | (y & 0x0F0F0F0Fu) << 4;
        const std::uint32_t odd = (x >> 4 & 0x0F0F0F0Fu) | (y & 0xF0F0F0F0u);
        std::memcpy(dst + off_qs + (4 * (2 * c) + u) * 64 + 4 * r, &even, 4);
        std::memcpy(dst + off_qs + (4 * (2 * c + 1) + u) * 64 + 4 * r, &odd,
                    4);
      }
  }
}

/// The inverse of pack_block.
void unpack_block(const std::uint8_t* src, block_q4_k* const* rows) {
  for (std::size_t r = 0; r < q4_k_x16_rows; ++r) {
    block_q4_k& w = *rows[r];
    std::memcpy(&w.d, src + 2 * r, 2);
    std::memcpy(&w.dmin, src + off_dmin + 2 * r, 2);
    for (std::size_t i = 0; i < 12; ++i)
      w.scales[i] = src[off_scales + 16 * i + r];
    std::memset(w.qs, 0, sizeof w.qs);
    for (int j = 0; j < 8; ++j)
      for (int u = 0; u < 4; ++u)
        for (int e = 0; e < 4; ++e) {
          const std::uint8_t b = src[off_qs + (4 * j + u) * 64 + 4 * r + e];
          const int lo = 8 * u + e, hi = 8 * u + 4 + e;
          const int shift = j % 2 ? 4 : 0;
          std::uint8_t* q = w.qs + 32 * (j / 2);
          q[lo] |= static_cast<std::uint8_t>((b & 0xF) << shift);
          q[hi] |= static_cast<std::uint8_t>((b >> 4) << shift);
        }
  }
}

/// Rows [r0, r0 + n) (whole groups) of a packed rows x k matrix back to
/// ggml's rows at dst.
void unpack_rows(const std::uint8_t* src, std::size_t nb, std::size_t r0,
                 std::size_t n, block_q4_k* dst) {
  x16::for_each_group_block(
    dst, r0 / q4_k_x16_rows, (r0 + n) / q4_k_x16_rows, nb,
    [&](block_q4_k* const* rows, std::size_t g, std::size_t b) {
      unpack_block(src + (g * nb + b) * group_block_bytes, rows);
    });
}

#ifdef EXO_X16_X86
// GCC 12's _mm512_cvtph_ps and _mm512_cvtepi32_ps pass
// _mm512_undefined_*() as their unused merge operand, which
// -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic push
#if !defined(__clang__) // a GCC warning clang does not know
#  pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

/// Tokens a pass of x16_tokens takes.
constexpr int x16_width = 8;

/// Batches from which the groups go through matmul_q4_k_repacked's panels
/// (the weights unpacked to bytes once per product, 6 tokens a pass): at
/// 64 tokens 1.05-1.12x the stored rows' product, at 512 1.01-1.07x,
/// where 8-token passes over the nibbles ran 1.02-1.13x and 0.85-0.95x
/// (one core, 8192 x 2048 in L3, docs/benchmarks.md).
constexpr std::size_t x16_panel_min_tokens = 64;

/// One group's 16 rows against NT tokens: out[t][r] for r < 16, the bits
/// of matmul_q4_k_repacked (dot_row's integers and float chains: Pairs,
/// the chains step per pair of sub-blocks; else per super-block). Per
/// half sub-block (16 positions) and token: four vpdpbusd (two units of
/// 64 bytes, their low and high nibbles, each against the 4 activations
/// of its positions broadcast as a dword) into a sum of at most
/// 16 * 15 * 128 < 2^15 per row, then one vpdpwssd against the rows'
/// scales (low words; high words 0); per pair of sub-blocks, the
/// minimums as one vpdpwssd of (m_2p, m_2p+1) against the token's
/// (bsum_2p, bsum_2p+1) (`bpair`, 4 dwords a block).
template <int NT, bool Pairs>
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
void x16_tokens(const std::uint8_t* group, std::size_t nb,
                const block_q8_k* const* act, const std::int32_t* const* bpair,
                float* const* out, const std::uint8_t* ahead) {
  __m512 acc[NT], accm[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm512_setzero_ps();
    accm[t] = _mm512_setzero_ps();
  }
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (std::size_t b = 0; b < nb; ++b) {
    const std::uint8_t* p = group + b * group_block_bytes;
    if (ahead) {
      // The next group's block b (the matrix is one stream): from DRAM,
      // the hardware's prefetcher alone left this kernel slower than the
      // stored rows' at 4 tokens.
#pragma GCC unroll 36
      for (std::size_t l = 0; l < group_block_bytes / 64; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + b * group_block_bytes
                                                   + 64 * l),
                     _MM_HINT_T0);
    }
    const __m512 d = _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512 dmin = _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + off_dmin)));
    // get_scale_min_k4 on 16 rows at once.
    __m128i sc[8], mn[8];
    x16::scales_mins(p, sc, mn);
    const std::int8_t* aq[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      aq[t] = act[t][b].qs;
    __m512i isum[NT], imin[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      isum[t] = _mm512_setzero_si512();
      imin[t] = _mm512_setzero_si512();
    }
#pragma GCC unroll 1
    for (int pr = 0; pr < 4; ++pr) {
#pragma GCC unroll 2
      for (int h2 = 0; h2 < 2; ++h2) {
        const int j = 2 * pr + h2;
        const __m512i scj = _mm512_cvtepu8_epi32(sc[j]);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const std::uint8_t* wq = p + off_qs + (4 * j + 2 * h) * 64;
          const __m512i w0 = _mm512_loadu_si512(wq);
          const __m512i w1 = _mm512_loadu_si512(wq + 64);
          const __m512i lo0 = _mm512_and_si512(w0, m4);
          const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4);
          const __m512i lo1 = _mm512_and_si512(w1, m4);
          const __m512i hi1 = _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4);
#pragma GCC unroll 8
          for (int t = 0; t < NT; ++t) {
            const std::int8_t* a = aq[t] + 32 * j + 16 * h;
            __m512i v = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo0,
                                            x16::dword_to_all(a));
            v = _mm512_dpbusd_epi32(v, hi0, x16::dword_to_all(a + 4));
            v = _mm512_dpbusd_epi32(v, lo1, x16::dword_to_all(a + 8));
            v = _mm512_dpbusd_epi32(v, hi1, x16::dword_to_all(a + 12));
            isum[t] = _mm512_dpwssd_epi32(isum[t], v, scj);
          }
        }
      }
      const __m512i mp = x16::min_pairs(mn, pr);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m512i bp = _mm512_set1_epi32(bpair[t][4 * b + pr]);
        if constexpr (Pairs) {
          const __m512 ad = _mm512_set1_ps(act[t][b].d);
          const __m512i mins = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                                   mp, bp);
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]),
                                   _mm512_mul_ps(d, ad), acc[t]);
          accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins),
                                    _mm512_mul_ps(dmin, ad), accm[t]);
          isum[t] = _mm512_setzero_si512();
        } else {
          imin[t] = _mm512_dpwssd_epi32(imin[t], mp, bp);
        }
      }
    }
    if constexpr (!Pairs) {
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m512 ad = _mm512_set1_ps(act[t][b].d);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]),
                                 _mm512_mul_ps(d, ad), acc[t]);
        accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[t]),
                                  _mm512_mul_ps(dmin, ad), accm[t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    _mm512_storeu_ps(out[t], _mm512_sub_ps(acc[t], accm[t]));
}

template <bool Pairs>
void x16_pass(const std::uint8_t* group, std::size_t nb,
              const block_q8_k* const* act, const std::int32_t* const* bpair,
              float* const* out, std::size_t n, const std::uint8_t* ahead) {
  switch (n) {
  case 1:
    x16_tokens<1, Pairs>(group, nb, act, bpair, out, ahead);
    return;
  case 2:
    x16_tokens<2, Pairs>(group, nb, act, bpair, out, ahead);
    return;
  case 3:
    x16_tokens<3, Pairs>(group, nb, act, bpair, out, ahead);
    return;
  case 4:
    x16_tokens<4, Pairs>(group, nb, act, bpair, out, ahead);
    return;
  case 5:
    x16_tokens<5, Pairs>(group, nb, act, bpair, out, ahead);
    return;
  case 6:
    x16_tokens<6, Pairs>(group, nb, act, bpair, out, ahead);
    return;
  case 7:
    x16_tokens<7, Pairs>(group, nb, act, bpair, out, ahead);
    return;
  default:
    x16_tokens<8, Pairs>(group, nb, act, bpair, out, ahead);
    return;
  }
}

#pragma GCC diagnostic pop
#endif

} // namespace

bool q4_k_x16_packs(std::size_t rows, std::size_t k) noexcept {
  return rows > 0 && k > 0 && rows % q4_k_x16_rows == 0 && k % qk_k == 0;
}

void pack_q4_k_x16(const void* src, std::size_t rows, std::size_t k,
                   void* dst) noexcept {
  const std::size_t nb = k / qk_k;
  const auto* in = static_cast<const block_q4_k*>(src);
  auto* outp = static_cast<std::uint8_t*>(dst);
  x16::for_each_group_block(
    in, 0, rows / q4_k_x16_rows, nb,
    [&](const block_q4_k* const* rs, std::size_t g, std::size_t b) {
      pack_block(rs, outp + (g * nb + b) * group_block_bytes);
    });
}

void unpack_q4_k_x16(const void* src, std::size_t rows, std::size_t k,
                     void* dst) noexcept {
  unpack_rows(static_cast<const std::uint8_t*>(src), k / qk_k, 0, rows,
              static_cast<block_q4_k*>(dst));
}

result<bool> matmul_q4_k_x16(const void* w, std::size_t rows, std::size_t k,
                             const float* a, std::size_t m, float* out,
                             int threads, bool rows_apart) {
  if (!w || !a || !out)
    return fail(errc::invalid_argument, "matmul_q4_k_x16: null operand");
  if (!q4_k_x16_packs(rows, k))
    return fail(errc::invalid_argument,
                "matmul_q4_k_x16: " + std::to_string(rows) + " x "
                  + std::to_string(k)
                  + " does not pack (rows a multiple of 16, k of 256)");
  if (m == 0)
    return true;
  const std::size_t nb = k / qk_k;
  const auto* packed = static_cast<const std::uint8_t*>(w);
  const std::size_t groups = rows / q4_k_x16_rows;
#ifdef EXO_X16_X86
  if (host::have_vnni()) {
    std::vector<block_q8_k> q(nb * m);
    // Per token and block: (bsum_2p, bsum_2p+1) as words, pair p of
    // sub-blocks (bsum_j = bsums[2j] + bsums[2j + 1], |.| <= 4096); the
    // panels pair their own.
    const bool panels = m >= x16_panel_min_tokens;
    std::vector<std::int32_t> bp(panels ? 0 : nb * m * 4);
    host::for_each_index(static_cast<long>(m), m > 1 ? threads : 1,
                         [&](long t) {
      const auto i = static_cast<std::size_t>(t);
      quantize_activations(ggml_type::q8_k, a + i * k, q.data() + i * nb, k);
      for (std::size_t b = 0; b < (panels ? 0 : nb); ++b) {
        const std::int16_t* s = q[i * nb + b].bsums;
        for (int p = 0; p < 4; ++p) {
          const auto lo = static_cast<std::uint16_t>(s[4 * p] + s[4 * p + 1]);
          const auto hi =
            static_cast<std::uint16_t>(s[4 * p + 2] + s[4 * p + 3]);
          bp[(i * nb + b) * 4 + static_cast<std::size_t>(p)] =
            static_cast<std::int32_t>(static_cast<std::uint32_t>(lo)
                                      | static_cast<std::uint32_t>(hi) << 16);
        }
      }
    });
    // The tokens the gemm steps by pair (as matmul_q4_k_repacked).
    const std::size_t mg = q4_k_pair_tokens(m, rows_apart);
    if (panels) {
      matmul_q4_k_x16_panels(w, rows, k, q.data(), m, mg, out, threads);
      return true;
    }
    // Each thread a contiguous range of groups: on two threads as fast as
    // taking groups in turn or faster (4 tokens 0.28-0.41 against
    // 0.42-0.44 ms, 16 tokens 0.72-1.12 against 0.75-1.22, 2048 x 8192
    // from DRAM, three rounds in one binary; docs/benchmarks.md).
    host::for_each_index(static_cast<long>(groups), threads, [&](long gi) {
      const auto g = static_cast<std::size_t>(gi);
      const std::uint8_t* group = packed + g * nb * group_block_bytes;
      // The thread's next group (past its range's end: another thread's,
      // or past the matrix's; prefetches never fault).
      const std::uint8_t* ahead = group + nb * group_block_bytes;
      for (std::size_t t0 = 0; t0 < m;) {
        const bool pairs = t0 < mg;
        const std::size_t nt = std::min<std::size_t>(
          x16_width, (pairs ? mg : m) - t0);
        const block_q8_k* act[x16_width];
        const std::int32_t* bps[x16_width];
        float* dst[x16_width];
        for (std::size_t t = 0; t < nt; ++t) {
          act[t] = q.data() + (t0 + t) * nb;
          bps[t] = bp.data() + (t0 + t) * nb * 4;
          dst[t] = out + (t0 + t) * rows + g * q4_k_x16_rows;
        }
        if (pairs)
          x16_pass<true>(group, nb, act, bps, dst, nt, ahead);
        else
          x16_pass<false>(group, nb, act, bps, dst, nt, ahead);
        ahead = nullptr; // asked for once, in the first pass
        t0 += nt;
      }
    });
    return true;
  }
#endif
  // Elsewhere: the rows back as stored, a slice at a time, through
  // matmul_q4_k_repacked (the same bits by definition).
  constexpr std::size_t slice = 256;
  std::vector<block_q4_k> rowsbuf;
  std::vector<float> part;
  for (std::size_t r0 = 0; r0 < rows; r0 += slice) {
    const std::size_t n = std::min(slice, rows - r0);
    rowsbuf.resize(n * nb);
    part.resize(n * m);
    unpack_rows(packed, nb, r0, n, rowsbuf.data());
    auto done = matmul_q4_k_repacked(rowsbuf.data(), n, k, a, m, part.data(),
                                     threads, rows_apart);
    if (!done)
      return done;
    for (std::size_t t = 0; t < m; ++t)
      std::copy_n(part.data() + t * n, n, out + t * rows + r0);
  }
  (void)groups;
  return true;
}

} // namespace exo::backend::quant
