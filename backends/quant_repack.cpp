#include "backends/quant_repack.hpp"

#include "backends/host_kernels.hpp"
#include "backends/host_parallel.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_q4_k_x16.hpp"
#include "backends/quant_q4_k_x16_simd.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EXO_REPACK_X86 1
#endif

namespace exo::backend::quant {

namespace {

/// The 6-bit scale and minimum of sub-block j of a Q4_K block (ggml's
/// get_scale_min_k4).
void scale_min(int j, const std::uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/// The integer sums of 32 nibbles (low or high halves of qs) with 32
/// activations, for the 4 pairs of sub-blocks of one super-block:
/// lo[c] = sum_l (qs[32c + l] & 15) * q8[64c + l], hi[c] the high nibbles
/// with q8[64c + 32 + l]. Exact integers: any order gives the same.
void nibble_sums_portable(const block_q4_k& w, const block_q8_k& a,
                          std::int32_t lo[4], std::int32_t hi[4]) {
  for (int c = 0; c < 4; ++c) {
    const std::uint8_t* qs = w.qs + 32 * c;
    const std::int8_t* q8 = a.qs + 64 * c;
    std::int32_t l0 = 0, h0 = 0;
    for (int l = 0; l < 32; ++l) {
      l0 += (qs[l] & 0xF) * q8[l];
      h0 += (qs[l] >> 4) * q8[32 + l];
    }
    lo[c] = l0;
    hi[c] = h0;
  }
}

/// One row of Q4_K against one row of Q8_K, in the repacked kernels' order:
/// the float chains step once per super-block (gemv, and gemm in
/// llama.cpp's AVX2 builds) or once per pair of sub-blocks (gemm in its
/// AVX-512 builds).
float dot_row(const block_q4_k* x, const block_q8_k* y, std::size_t nb,
              bool pairs) {
  float acc = 0.0f, accm = 0.0f;
  for (std::size_t b = 0; b < nb; ++b) {
    const block_q4_k& w = x[b];
    const block_q8_k& a = y[b];
    std::int32_t isum = 0, imin = 0;
    std::int32_t los[4], his[4];
    nibble_sums_portable(w, a, los, his);
    const float d = host::f16_to_f32(w.d) * a.d;
    const float dm = host::f16_to_f32(w.dmin) * a.d;
    for (int c = 0; c < 4; ++c) { // 64 elements: sub-blocks 2c and 2c+1
      const std::int32_t lo = los[c], hi = his[c];
      int sc0, m0, sc1, m1;
      scale_min(2 * c, w.scales, sc0, m0);
      scale_min(2 * c + 1, w.scales, sc1, m1);
      isum += sc0 * lo + sc1 * hi;
      imin += m0 * (a.bsums[4 * c] + a.bsums[4 * c + 1])
              + m1 * (a.bsums[4 * c + 2] + a.bsums[4 * c + 3]);
      if (pairs) {
        acc = std::fma(static_cast<float>(isum), d, acc);
        accm = std::fma(static_cast<float>(imin), dm, accm);
        isum = imin = 0;
      }
    }
    if (!pairs) {
      acc = std::fma(static_cast<float>(isum), d, acc);
      accm = std::fma(static_cast<float>(imin), dm, accm);
    }
  }
  return acc - accm;
}


#ifdef EXO_REPACK_X86
/// Q4_K's 12 scale bytes as int16 lanes: the 8 scales (lanes 0-7) and the
/// 8 minimums (lanes 8-15), the 6-bit fields unpacked (get_scale_min_k4).
__attribute__((target("avx2,fma,f16c"))) inline __m256i
scales_mins_avx2(const std::uint8_t* s12) {
  std::uint32_t u[3];
  std::memcpy(u, s12, 12);
  const std::uint32_t low6 = 0x3f3f3f3fu, nib = 0x0f0f0f0fu, top2 = 0x03030303u;
  const std::uint32_t sc_lo = u[0] & low6;
  const std::uint32_t sc_hi = (u[2] & nib) | (((u[0] >> 6) & top2) << 4);
  const std::uint32_t mn_lo = u[1] & low6;
  const std::uint32_t mn_hi = ((u[2] >> 4) & nib) | (((u[1] >> 6) & top2) << 4);
  return _mm256_cvtepu8_epi16(
    _mm_set_epi32(static_cast<int>(mn_hi), static_cast<int>(mn_lo),
                  static_cast<int>(sc_hi), static_cast<int>(sc_lo)));
}

/// The 8 lane sums of each of v[0..7], in that order: lane r of the result
/// is the sum of v[r]'s lanes (exact integers, so any order).
__attribute__((target("avx2,fma,f16c"))) inline __m256i
lane_sums8(const __m256i v[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]),
                                      _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]),
                                      _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

/// lane_sums8 for 4-lane vectors.
__attribute__((target("avx2,fma,f16c"))) inline __m256i
lane_sums8(const __m128i v[8]) {
  // Rows r and r + 4 side by side, so the last hadd leaves rows 0-3 in the
  // low half and rows 4-7 in the high half.
  const __m256i h01 = _mm256_hadd_epi32(_mm256_set_m128i(v[4], v[0]),
                                        _mm256_set_m128i(v[5], v[1]));
  const __m256i h23 = _mm256_hadd_epi32(_mm256_set_m128i(v[6], v[2]),
                                        _mm256_set_m128i(v[7], v[3]));
  return _mm256_hadd_epi32(h01, h23);
}

/// The 4 pair lanes of 8 rows' minimum sums (v[r], lane p) as 4 vectors
/// of the 8 rows (out[p], lane r).
__attribute__((target("avx2,fma,f16c"))) inline void
pair_lanes8(const __m128i v[8], __m256i out[4]) {
  const __m256i r0 = _mm256_set_m128i(v[4], v[0]);
  const __m256i r1 = _mm256_set_m128i(v[5], v[1]);
  const __m256i r2 = _mm256_set_m128i(v[6], v[2]);
  const __m256i r3 = _mm256_set_m128i(v[7], v[3]);
  const __m256i t0 = _mm256_unpacklo_epi32(r0, r1);
  const __m256i t1 = _mm256_unpacklo_epi32(r2, r3);
  const __m256i t2 = _mm256_unpackhi_epi32(r0, r1);
  const __m256i t3 = _mm256_unpackhi_epi32(r2, r3);
  out[0] = _mm256_unpacklo_epi64(t0, t1);
  out[1] = _mm256_unpackhi_epi64(t0, t1);
  out[2] = _mm256_unpacklo_epi64(t2, t3);
  out[3] = _mm256_unpackhi_epi64(t2, t3);
}

/// How far ahead rows8 asks for the weights it reads, in bytes (24
/// blocks): in the loop, each block asking for the one 24 on, rather than
/// a group's 8 rows at once (a burst of up to 576 prefetches that stalls
/// the loads behind it). Q4_K 8192 x 2048, 32 matrices streamed from
/// DRAM, one core, three alternating runs: one token 6.0-7.6 GB/s (group
/// after next, at once) -> 8.1-10.3, four 3.5-5.0 -> 5.2-5.8; nothing
/// asked for ahead, 6.4 and 4.8.
constexpr std::size_t rows8_prefetch = 24 * sizeof(block_q4_k);
/// Super-blocks rows8_avx2 takes per pass (a quarter of them when it keeps
/// the sums of each pair of sub-blocks apart).
constexpr std::size_t rows8_chunk = 32;

/// The 8 lanes of v's low half plus those of its high half.
__attribute__((target("avx512f"))) inline __m256i fold512(__m512i v) {
  return _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xff, v, 0),
                          _mm512_maskz_extracti64x4_epi64(0xff, v, 1));
}

/// Sub-blocks 2c and 2c + 1 of a Q4_K block as bytes in 512 bits: the
/// low nibbles of qs[0..31] (weights 64c .. 64c + 31) in the low half, the
/// high nibbles (64c + 32 .. 64c + 63) in the high half. `qs`: w.qs + 32c.
__attribute__((target("avx512f,avx512bw"))) inline __m512i
nibbles512(const std::uint8_t* qs) {
  // 16-bit shift counts: 0 in the low half, 4 in the high.
  const __m512i shift4 = _mm512_mask_blend_epi16(
    0xffff0000u, _mm512_setzero_si512(), _mm512_set1_epi16(4));
  const __m512i q4 = _mm512_maskz_broadcast_i64x4(
    0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs)));
  return _mm512_and_si512(_mm512_srlv_epi16(q4, shift4),
                          _mm512_set1_epi8(0x0F));
}

#define EXO_ROWS8_NAME rows8_avx2
#define EXO_ROWS8_TARGET __attribute__((target("avx2,fma,f16c")))
#define EXO_ROWS8_STEP(s, sc, p) \
  _mm256_add_epi32((s), _mm256_madd_epi16((sc), (p)))
#define EXO_ROWS8_WIDE 0
#include "backends/quant_repack_rows8.inc"
#undef EXO_ROWS8_NAME
#undef EXO_ROWS8_TARGET
#undef EXO_ROWS8_STEP
#undef EXO_ROWS8_WIDE
#define EXO_ROWS8_NAME rows8_vnni
#define EXO_ROWS8_TARGET                                                      \
  __attribute__((                                                             \
    target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define EXO_ROWS8_STEP(s, sc, p) _mm256_dpwssd_epi32((s), (sc), (p))
#define EXO_ROWS8_WIDE 1
#include "backends/quant_repack_rows8.inc"
#undef EXO_ROWS8_NAME
#undef EXO_ROWS8_TARGET
#undef EXO_ROWS8_STEP
#undef EXO_ROWS8_WIDE

// GCC 12's _mm512_cvtepi32_ps (and unpacks) pass _mm512_undefined_*() as
// their unused merge operand, which -Wmaybe-uninitialized (and, inlined
// into the AMX kernels, -Wuninitialized) reports at every use.
#pragma GCC diagnostic push
#if !defined(__clang__) // a GCC warning clang does not know
#  pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

/// The AVX-512 VNNI path for batches (prefill): a panel of 16 rows is
/// unpacked once into lanes (lane r = row r: each dword holds 4 consecutive
/// weights of its row as bytes), then every token of the batch runs
/// through it with vpdpbusd on broadcast activations. Per super-block and
/// token each lane ends with dot_row's integers (isum, imin) for its row,
/// and its float chains run as dot_row's, so the bits are those of the
/// other paths; no horizontal sums are needed.
struct panel_block {
  __m512i w[64];  ///< group g: weights 4g..4g+3 of the 16 rows
  __m512i sc[8];  ///< sub-block j's scale per row (int32)
  __m512i mn[4];  ///< minimums 2p and 2p+1 per row (int16 pairs)
  __m512 d, dmin; ///< the rows' super-block scales
};


/// Two int16 values in one dword, lo in the low half (a vpdpwssd operand).
std::int32_t pair16(int lo, int hi) {
  return static_cast<std::int32_t>(
    static_cast<std::uint32_t>(static_cast<std::uint16_t>(lo))
    | (static_cast<std::uint32_t>(static_cast<std::uint16_t>(hi)) << 16));
}

/// Pair p of a Q8_K block's sub-block sums as one vpdpwssd operand:
/// (bs_2p, bs_2p+1), bs_j = bsums[2j] + bsums[2j+1] (the 32 activations of
/// sub-block j; the minimums' factor).
std::int32_t bsum_pair(const block_q8_k& y, int p) {
  const std::int16_t* s = y.bsums;
  return pair16(s[4 * p] + s[4 * p + 1], s[4 * p + 2] + s[4 * p + 3]);
}

/// std::free for what aligned_array allocates.
struct aligned_free {
  void operator()(void* p) const { std::free(p); }
};

/// count T's at a 64-byte boundary (the kernels' aligned loads and
/// stores), uninitialized; std::bad_alloc when there is no room, as a
/// std::vector would throw.
template <class T>
std::unique_ptr<T, aligned_free> aligned_array(std::size_t count) {
  const std::size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  if (!p)
    throw std::bad_alloc();
  return std::unique_ptr<T, aligned_free>(static_cast<T*>(p));
}

/// The 16-row panels of a rows x nb matrix over `threads`: each thread
/// keeps a 64-byte aligned scratch of nb Blocks, pack(scratch, r0, n)
/// fills it with rows r0 .. r0 + n - 1, then sweep(scratch, r0, mask)
/// runs the tokens through it (mask: the panel's valid lanes).
template <class Block, class Pack, class Sweep>
void for_each_panel(std::size_t rows, std::size_t nb, int threads, Pack pack,
                    Sweep sweep) {
  using scratch = std::unique_ptr<Block, aligned_free>;
  const long panels = static_cast<long>((rows + 15) / 16);
  host::for_each_job(
    panels, threads, [nb] { return aligned_array<Block>(nb); },
    [&](long pi, scratch& buf) {
      const std::size_t r0 = static_cast<std::size_t>(pi) * 16;
      const std::size_t n = std::min<std::size_t>(16, rows - r0);
      pack(buf.get(), r0, n);
      sweep(static_cast<const Block*>(buf.get()), r0,
            static_cast<__mmask16>((1u << n) - 1u));
    });
}

/// Rows a panel's packing asks for ahead: those of the panel after next
/// (rows r0 + 32 .. r0 + 47 of `rows`), or none.
inline std::size_t panel_ahead(std::size_t r0, std::size_t rows) {
  return r0 + 32 < rows ? std::min<std::size_t>(16, rows - r0 - 32) : 0;
}

/// Block b of each of the `ahead` rows 32 panel rows on from x (a panel's
/// first row; nb blocks a row) into L2: packing a panel block by block
/// asks for the panel after next's, so the weights stream from DRAM while
/// the tokens run (each of 16 rows is its own short stream, which the
/// hardware prefetchers pick up late). On the AMX path (then taken from
/// 8 tokens), 1B-shaped Q4_K_M, 8 sequences: 176-182 ms a step against
/// 220-258 asking for the next panel whole at its start, in single runs
/// of an hour when runs moved 30%; the Q6_K panels are bound by their own
/// work either way.
template <class Block>
inline void prefetch_panel_block(const Block* x, std::size_t nb,
                                 std::size_t b, std::size_t ahead) {
  for (std::size_t r = 0; r < ahead; ++r) {
    const char* c = reinterpret_cast<const char*>(x + (32 + r) * nb + b);
    for (std::size_t off = 0; off < sizeof(Block); off += 64)
      _mm_prefetch(c + off, _MM_HINT_T1);
  }
}

/// Tokens the VNNI path takes per pass over a panel (registers: 4 per token).
constexpr int panel_width = 6;
/// Batches with tokens by pair (the gemm of an AVX-512 build) smaller than
/// this keep rows8 (a panel is unpacked anew for each
/// product, which costs more than unpacking each row's blocks for every 4
/// tokens when the tokens are few: batch_step_bench, Q4_K_M 12 x 512, one
/// core, 2026-11-30, with the transposed panels: 8 tokens 8.4-8.6 ms a step
/// through rows8 against 8.8-9.1 through panels, 9 tokens 10.8-12.0
/// against 8.9-11.1, 10 tokens 10.9-11.4 against 9.9-10.0).
constexpr std::size_t panel_min_tokens = 9;
/// Batches whose tokens all step by super-block (rows apart: a batched
/// decode; an AVX2 build's gemm) keep quads_vnni below this: it takes a
/// vpdpbusd per 64 weights and token as the panels do, without their
/// unpacking (AMD EPYC Zen 4, one core, 2026-12-01, Q4_K 8192 x 2048, 64
/// matrices from DRAM, ms, quads against panels: 9 tokens 130 / 178, 16
/// 196 / 224, 24 288 / 289, 32 390 / 337; two matrices in L3: 16 6.1 /
/// 6.8, 20 8.1 / 7.8, 24 8.8 / 8.6).
constexpr std::size_t quads_max_tokens = 20;

/// Batches from which Q6_K goes through panels: below, each row's blocks
/// unpacked once per group of tokens (dot_q6_k_tokens) cost less than a
/// panel unpacked per product, also from DRAM (one core, 2026-12-01, Q6_K
/// 8192 x 2048, ms a product, panels against rows of 4-token groups: in
/// L3 9 tokens 8.1 / 4.1 (8), 16 10.5 / 6.8, 32 14.4 / 13.2, 64 23.3 /
/// 22.7, 128 38.0 / 57.2; from DRAM, 16 matrices: 32 tokens 192 / 178, 64
/// 316 / 360). The rows now go 8 tokens a group, 10-19% faster at 8-32
/// tokens (d10f650), so the crossover is likely higher; not measured
/// again.
constexpr std::size_t q6_panel_min_tokens = 48;

/// Lane r: r * bytes (the gather offsets of a panel's 16 unpacked rows).
__attribute__((target("avx512f"))) inline __m512i
row_offsets(std::size_t bytes) {
  return _mm512_mullo_epi32(
    _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
    _mm512_set1_epi32(static_cast<int>(bytes)));
}

/// r[0..15] (16 dwords each) transposed in place: dword j of r[i] becomes
/// dword i of r[j]. 4 x 4 blocks within each 128-bit lane first
/// (unpacks), then the lanes (shuffle_i32x4).
__attribute__((target("avx512f"))) inline void transpose16(__m512i r[16]) {
  __m512i b[4][4]; // rows 4G..4G+3: lane l holds column 4l + k
#pragma GCC unroll 4
  for (int G = 0; G < 4; ++G) {
    const __m512i a0 = _mm512_unpacklo_epi32(r[4 * G], r[4 * G + 1]);
    const __m512i a1 = _mm512_unpackhi_epi32(r[4 * G], r[4 * G + 1]);
    const __m512i a2 = _mm512_unpacklo_epi32(r[4 * G + 2], r[4 * G + 3]);
    const __m512i a3 = _mm512_unpackhi_epi32(r[4 * G + 2], r[4 * G + 3]);
    b[G][0] = _mm512_unpacklo_epi64(a0, a2);
    b[G][1] = _mm512_unpackhi_epi64(a0, a2);
    b[G][2] = _mm512_unpacklo_epi64(a1, a3);
    b[G][3] = _mm512_unpackhi_epi64(a1, a3);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i s0 = _mm512_shuffle_i32x4(b[0][k], b[1][k], 0x44);
    const __m512i s1 = _mm512_shuffle_i32x4(b[0][k], b[1][k], 0xEE);
    const __m512i s2 = _mm512_shuffle_i32x4(b[2][k], b[3][k], 0x44);
    const __m512i s3 = _mm512_shuffle_i32x4(b[2][k], b[3][k], 0xEE);
    r[k] = _mm512_shuffle_i32x4(s0, s2, 0x88);
    r[4 + k] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
    r[8 + k] = _mm512_shuffle_i32x4(s1, s3, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
  }
}

/// Rows r0 .. r0 + n - 1 (n <= 16; lanes beyond n are zero) of a Q4_K
/// matrix with nb super-blocks per row, unpacked into nb panel blocks.
/// Per block: each row's nibbles as bytes (64 weights per 512 bits, the
/// low nibbles of 32 bytes then their high ones), 16 rows transposed into
/// lanes; the scales and minimums of every row unpacked at once
/// (scales_mins_avx2) and gathered into lanes; d and dmin converted as
/// rows8 converts them.
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) void
pack_panel(const block_q4_k* x, std::size_t nb, std::size_t n,
           std::size_t ahead, panel_block* out) {
  // Row r: its 8 scales then its 8 minimums (int16); rows >= n stay zero.
  alignas(64) std::int16_t sm[16][16] = {};
  alignas(32) std::uint16_t dh[16] = {}, mh[16] = {};
  const __m512i lane_rows = row_offsets(sizeof sm[0]);
  for (std::size_t b = 0; b < nb; ++b) {
    prefetch_panel_block(x, nb, b, ahead);
    panel_block& p = out[b];
    for (std::size_t r = 0; r < n; ++r) {
      const block_q4_k& w = x[r * nb + b];
      _mm256_store_si256(reinterpret_cast<__m256i*>(sm[r]),
                         scales_mins_avx2(w.scales));
      dh[r] = w.d;
      mh[r] = w.dmin;
    }
#pragma GCC unroll 1
    for (int c = 0; c < 4; ++c) { // dwords 16c .. 16c + 15 of every row
      __m512i rows[16];
      for (std::size_t r = 0; r < 16; ++r)
        rows[r] = r < n ? nibbles512(x[r * nb + b].qs + 32 * c)
                        : _mm512_setzero_si512();
      transpose16(rows);
      for (int k = 0; k < 16; ++k)
        _mm512_store_si512(&p.w[16 * c + k], rows[k]);
    }
    // Dword q of each row: scales 2q | 2q + 1 (q < 4), minimums
    // 2(q - 4) | 2(q - 4) + 1 (q >= 4), one row per lane.
    const __m512i low16 = _mm512_set1_epi32(0xffff);
    for (int q = 0; q < 8; ++q) {
      const __m512i t =
        _mm512_i32gather_epi32(lane_rows, &sm[0][2 * q], 1);
      if (q < 4) {
        p.sc[2 * q] = _mm512_and_si512(t, low16);
        p.sc[2 * q + 1] = _mm512_srli_epi32(t, 16);
      } else {
        p.mn[q - 4] = t;
      }
    }
    p.d = _mm512_cvtph_ps(
      _mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
    p.dmin = _mm512_cvtph_ps(
      _mm256_load_si256(reinterpret_cast<const __m256i*>(mh)));
  }
}

/// NT tokens through a packed panel: out[t][r] for the panel's rows
/// (mask: the valid lanes), dot_row's bits (Pairs: its float chains step
/// per pair of sub-blocks). bsp[t] holds per super-block the pairs
/// (bs_2p, bs_2p+1), bs_j = bsums[2j] + bsums[2j+1], as 4 dwords.
template <int NT, bool Pairs>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
void panel_tokens_vnni(const panel_block* p, std::size_t nb,
                       const block_q8_k* const* act,
                       const std::int32_t* const* bsp, float* const* out,
                       __mmask16 mask) {
  __m512 acc[NT], accm[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm512_setzero_ps();
    accm[t] = _mm512_setzero_ps();
  }
  for (std::size_t b = 0; b < nb; ++b) {
    const panel_block& pb = p[b];
    __m512i isum[NT];
    __m512 dd[NT], dm[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      isum[t] = _mm512_setzero_si512();
      const __m512 ad = _mm512_set1_ps(act[t][b].d);
      dd[t] = _mm512_mul_ps(pb.d, ad);
      dm[t] = _mm512_mul_ps(pb.dmin, ad);
    }
    const std::int8_t* aq[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      aq[t] = act[t][b].qs;
    for (int j = 0; j < 8; ++j) {
      __m512i s[NT];
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t)
        s[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m512i w = _mm512_load_si512(&pb.w[8 * j + g]);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          std::int32_t a4;
          std::memcpy(&a4, aq[t] + 32 * j + 4 * g, 4);
          s[t] = _mm512_dpbusd_epi32(s[t], w, _mm512_set1_epi32(a4));
        }
      }
      const __m512i scj = _mm512_load_si512(&pb.sc[j]);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t)
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s[t], scj));
      if constexpr (Pairs) {
        if (j % 2 == 1) { // the pair (j - 1, j) is complete
          const __m512i mnp = _mm512_load_si512(&pb.mn[j / 2]);
#pragma GCC unroll 8
          for (int t = 0; t < NT; ++t) {
            const std::size_t pair = static_cast<std::size_t>(j / 2);
            const __m512i im =
              _mm512_dpwssd_epi32(_mm512_setzero_si512(), mnp,
                                  _mm512_set1_epi32(bsp[t][4 * b + pair]));
            acc[t] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), dd[t], acc[t]);
            accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), dm[t], accm[t]);
            isum[t] = _mm512_setzero_si512();
          }
        }
      }
    }
    if constexpr (!Pairs) {
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        __m512i im = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int q = 0; q < 4; ++q)
          im = _mm512_dpwssd_epi32(im, pb.mn[q],
                                   _mm512_set1_epi32(bsp[t][4 * b + q]));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), dd[t], acc[t]);
        accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), dm[t], accm[t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    _mm512_mask_storeu_ps(out[t], mask, _mm512_sub_ps(acc[t], accm[t]));
}

/// panel_tokens_vnni for n (1..panel_width) tokens.
template <bool Pairs>
void panel_tokens(const panel_block* p, std::size_t nb,
                  const block_q8_k* const* act, const std::int32_t* const* bsp,
                  float* const* out, __mmask16 mask, std::size_t n) {
  switch (n) {
  case 1: panel_tokens_vnni<1, Pairs>(p, nb, act, bsp, out, mask); return;
  case 2: panel_tokens_vnni<2, Pairs>(p, nb, act, bsp, out, mask); return;
  case 3: panel_tokens_vnni<3, Pairs>(p, nb, act, bsp, out, mask); return;
  case 4: panel_tokens_vnni<4, Pairs>(p, nb, act, bsp, out, mask); return;
  case 5: panel_tokens_vnni<5, Pairs>(p, nb, act, bsp, out, mask); return;
  default: panel_tokens_vnni<6, Pairs>(p, nb, act, bsp, out, mask); return;
  }
}

/// The whole product through 16-row panels: each thread unpacks its panel
/// and runs every token through it, panel_width at a time.
/// The panels' sweep for any source of panels: pack(buf, r0, n) fills a
/// thread's nb panel blocks with rows r0 .. r0 + n - 1.
template <class Pack>
void sweep_panels(std::size_t rows, std::size_t nb, const block_q8_k* q,
                  std::size_t m, std::size_t mg, bool pairs, float* out,
                  int threads, Pack pack) {
  // The minimums' activation sums, paired per super-block.
  std::vector<std::int32_t> bsp(m * nb * 4);
  for (std::size_t i = 0; i < m * nb; ++i)
    for (int p = 0; p < 4; ++p)
      bsp[4 * i + p] = bsum_pair(q[i], p);
  for_each_panel<panel_block>(
    rows, nb, threads, pack,
    [&](const panel_block* buf, std::size_t r0, __mmask16 mask) {
      // Tokens [0, mg) in the gemm's order, the rest in the gemv's.
      for (std::size_t t0 = 0; t0 < m;) {
        const std::size_t end = t0 < mg ? mg : m;
        const std::size_t nt = std::min<std::size_t>(panel_width, end - t0);
        const block_q8_k* act[panel_width];
        const std::int32_t* bs[panel_width];
        float* dst[panel_width];
        for (std::size_t t = 0; t < nt; ++t) {
          act[t] = q + (t0 + t) * nb;
          bs[t] = bsp.data() + (t0 + t) * nb * 4;
          dst[t] = out + (t0 + t) * rows + r0;
        }
        if (pairs && t0 < mg)
          panel_tokens<true>(buf, nb, act, bs, dst, mask, nt);
        else
          panel_tokens<false>(buf, nb, act, bs, dst, mask, nt);
        t0 += nt;
      }
    });
}

void matmul_panels(const block_q4_k* x, std::size_t rows, std::size_t nb,
                   const std::vector<block_q8_k>& q, std::size_t m,
                   std::size_t mg, bool pairs, float* out, int threads) {
  sweep_panels(rows, nb, q.data(), m, mg, pairs, out, threads,
               [&](panel_block* buf, std::size_t r0, std::size_t n) {
                 pack_panel(x + r0 * nb, nb, n, panel_ahead(r0, rows), buf);
               });
}

/// A packed group's nb blocks (quant_q4_k_x16) as panel blocks: unit u of
/// sub-block j holds the 16 rows' weights 8u .. 8u + 3 (low nibbles:
/// panel group 8j + 2u) and 8u + 4 .. 8u + 7 (high: 8j + 2u + 1), row r in
/// dword r, as a panel holds them; the scales unpacked from the transposed
/// bytes (get_scale_min_k4 on 16 rows), d and dmin converted.
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) void
pack_panel_x16(const std::uint8_t* group, std::size_t nb, panel_block* out) {
  namespace lay = q4_k_x16_layout;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (std::size_t b = 0; b < nb; ++b) {
    const std::uint8_t* p = group + b * lay::group_block_bytes;
    panel_block& pb = out[b];
    for (int u = 0; u < 32; ++u) {
      const __m512i w = _mm512_loadu_si512(p + lay::off_qs + 64 * u);
      pb.w[2 * u] = _mm512_and_si512(w, m4);
      pb.w[2 * u + 1] = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
    }
    __m128i sc[8], mn[8];
    x16::scales_mins(p, sc, mn);
    for (int j = 0; j < 8; ++j)
      pb.sc[j] = _mm512_cvtepu8_epi32(sc[j]);
    for (int q = 0; q < 4; ++q)
      pb.mn[q] = x16::min_pairs(mn, q);
    pb.d = _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    pb.dmin = _mm512_cvtph_ps(_mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(p + lay::off_dmin)));
  }
}


/// Q6_K through 16-row panels with AVX-512 VNNI (batches). llama.cpp's
/// vec_dot_q6_K_q8_K (AVX2) keeps 8 int32 lanes per block, lane l holding
/// bytes 4l..4l+3 of each 32-byte chunk times that chunk's scale, minus
/// 32 * (sc[2l] * bsums[2l] + sc[2l+1] * bsums[2l+1]); each lane gets its
/// own float chain (fma with d8 * d), summed at the end as
/// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)). Here the weights are unpacked
/// once, already multiplied by their scale (int16: |63 * 128| fits), rows
/// in lanes, and the 8 lane sums are kept apart per token (vpdpwssd on
/// broadcast int16 activation pairs), so every float operation is the
/// AVX2 kernel's, on 16 rows at once.
struct q6_panel_block {
  __m512i w[64][2]; ///< quad (h, k, l): weights 4l..4l+3 of chunk 4h + k
  __m512i scp[8];   ///< sc[2l] and sc[2l+1] per row (int16 pairs)
  __m512 d;         ///< the rows' block scales
};

constexpr int q6_panel_width = 3;

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) void
pack_q6_panel(const block_q6_k* x, std::size_t nb, std::size_t n,
              std::size_t ahead, q6_panel_block* out) {
  alignas(64) std::int16_t tmp[16][256];
  alignas(64) std::int32_t scp[8][16];
  alignas(64) float d[16];
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m3 = _mm256_set1_epi8(3);
  for (std::size_t b = 0; b < nb; ++b) {
    prefetch_panel_block(x, nb, b, ahead);
    for (std::size_t r = 0; r < 16; ++r) {
      if (r >= n) {
        std::memset(tmp[r], 0, sizeof tmp[r]);
        for (int l = 0; l < 8; ++l)
          scp[l][r] = 0;
        d[r] = 0.0f;
        continue;
      }
      const block_q6_k& w = x[r * nb + b];
      // Value i of chunk (h, k): the low 4 bits from ql (low or high
      // nibbles), the top 2 from qh, times scale 8h + 2k (+1 for i >= 16).
      for (int h = 0; h < 2; ++h) {
        const __m256i l0 = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(w.ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(w.ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(w.qh + 32 * h));
        for (int k = 0; k < 4; ++k) {
          const __m256i lb = (k & 1) ? l1 : l0;
          const __m256i lo =
            k < 2 ? _mm256_and_si256(lb, m4)
                  : _mm256_and_si256(_mm256_srli_epi16(lb, 4), m4);
          const __m256i hi = _mm256_slli_epi16(
            _mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m3), 4);
          const __m512i q16 =
            _mm512_cvtepu8_epi16(_mm256_or_si256(lo, hi));
          const __m512i sc = _mm512_inserti64x4(
            _mm512_set1_epi16(w.scales[8 * h + 2 * k]),
            _mm256_set1_epi16(w.scales[8 * h + 2 * k + 1]), 1);
          _mm512_store_si512(tmp[r] + 128 * h + 32 * k,
                             _mm512_mullo_epi16(q16, sc));
        }
      }
      for (int l = 0; l < 8; ++l)
        scp[l][r] = pair16(w.scales[2 * l], w.scales[2 * l + 1]);
      d[r] = host::f16_to_f32(w.d);
    }
    q6_panel_block& p = out[b];
    // p.w[8c + l][half] is dword 16c + 2l + half of every row (chunk
    // 4h + k = c, bytes 4l..4l+3 of it): the rows' 128 dwords transposed,
    // 16 at a time.
    __m512i* pw = &p.w[0][0];
#pragma GCC unroll 1
    for (int c = 0; c < 8; ++c) {
      __m512i rows[16];
      for (int r = 0; r < 16; ++r)
        rows[r] = _mm512_load_si512(tmp[r] + 32 * c);
      transpose16(rows);
      for (int k = 0; k < 16; ++k)
        _mm512_store_si512(pw + 16 * c + k, rows[k]);
    }
    for (int l = 0; l < 8; ++l)
      p.scp[l] = _mm512_load_si512(scp[l]);
    p.d = _mm512_load_ps(d);
  }
}

/// NT tokens through a packed Q6_K panel. a16[t]: the token's Q8_K values
/// as int16, 256 per block; bsp[t]: per block the pairs (bsums[2l],
/// bsums[2l+1]) as 8 dwords.
template <int NT>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
void q6_panel_tokens_vnni(const q6_panel_block* p, std::size_t nb,
                          const block_q8_k* const* act,
                          const std::int16_t* const* a16,
                          const std::int32_t* const* bsp, float* const* out,
                          __mmask16 mask) {
  __m512 acc[NT][8];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l)
      acc[t][l] = _mm512_setzero_ps();
  for (std::size_t b = 0; b < nb; ++b) {
    const q6_panel_block& pb = p[b];
    __m512i s[NT][8];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l)
        s[t][l] = _mm512_setzero_si512();
    const std::int16_t* ab[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      ab[t] = a16[t] + 256 * b;
    for (int c = 0; c < 8; ++c) {
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        const __m512i w0 = _mm512_load_si512(&pb.w[8 * c + l][0]);
        const __m512i w1 = _mm512_load_si512(&pb.w[8 * c + l][1]);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          std::int32_t a01, a23;
          std::memcpy(&a01, ab[t] + 32 * c + 4 * l, 4);
          std::memcpy(&a23, ab[t] + 32 * c + 4 * l + 2, 4);
          s[t][l] = _mm512_dpwssd_epi32(s[t][l], w0, _mm512_set1_epi32(a01));
          s[t][l] = _mm512_dpwssd_epi32(s[t][l], w1, _mm512_set1_epi32(a23));
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(act[t][b].d), pb.d);
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        const __m512i mins = _mm512_dpwssd_epi32(
          _mm512_setzero_si512(), pb.scp[l],
          _mm512_set1_epi32(bsp[t][8 * b + l]));
        const __m512i v =
          _mm512_sub_epi32(s[t][l], _mm512_slli_epi32(mins, 5));
        acc[t][l] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(v), acc[t][l]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    const __m512 r0 = _mm512_add_ps(acc[t][0], acc[t][4]);
    const __m512 r1 = _mm512_add_ps(acc[t][1], acc[t][5]);
    const __m512 r2 = _mm512_add_ps(acc[t][2], acc[t][6]);
    const __m512 r3 = _mm512_add_ps(acc[t][3], acc[t][7]);
    _mm512_mask_storeu_ps(
      out[t], mask,
      _mm512_add_ps(_mm512_add_ps(r0, r2), _mm512_add_ps(r1, r3)));
  }
}

/// Four rows' 16 bytes at p[i] + off, row i in 128-bit lane i.
__attribute__((target("avx512f"))) inline __m512i
lanes4(const std::uint8_t* const* p, std::size_t off) {
  __m512i v = _mm512_castsi128_si512(
    _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[0] + off)));
  v = _mm512_inserti32x4(
    v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[1] + off)), 1);
  v = _mm512_inserti32x4(
    v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[2] + off)), 2);
  return _mm512_inserti32x4(
    v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[3] + off)), 3);
}

/// Tokens quads_vnni takes per pass (registers: the sums of 8 tokens for
/// both quads, the weights of one step and the activations fit the 32).
constexpr int quads_width = 8;

/// 8 consecutive rows against NT tokens with the sums of every token by
/// super-block (dot_row without pairs: the gemv's steps, or rows apart),
/// the same bits as rows8, for AVX-512 VNNI: four rows per 512 bits (row i
/// in 128-bit lane i, 16 of its weights), each token's 16 activations
/// broadcast to the four lanes, one vpdpbusd per 64 weights and token
/// (rows8 takes a vpmaddubsw and a vpdpwssd). Per sub-block a lane's four
/// dwords each hold the sum of 8 products (|s| <= 8 * 15 * 128 < 2^15),
/// so one vpdpwssd against the row's scale (low word; high word 0) scales
/// them exactly. Per super-block the lanes of both quads are summed into
/// the 8 rows' integers, and the float chains are rows8's. The 8 rows are
/// one region of memory; the next 8 rows' region is asked for in order
/// (18 lines a block) while these are read 8 rows side by side, which on
/// their own are 8 streams and half as fast from DRAM.
template <int NT>
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
void quads_vnni(const block_q4_k* x, std::size_t nb,
                const block_q8_k* const* act, float* const* out) {
  __m256 acc[NT], accm[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    accm[t] = _mm256_setzero_ps();
  }
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // vpshufb: dword k of each lane <- scale byte j (high bytes 0); the
  // minimum bytes 8-15 as int16.
  __m512i pick[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j)
    pick[j] = _mm512_set1_epi32(j | (0x80 << 8) | (0x80 << 16) | (0x80 << 24));
  const __m512i pick_mins = _mm512_broadcast_i32x4(_mm_setr_epi8(
    8, -128, 9, -128, 10, -128, 11, -128, 12, -128, 13, -128, 14, -128, 15,
    -128));
  // The 6-bit fields of [u0, u2, u1, u2] (dword 3 shifted by 4) and the
  // top bits of [u0, u0, u1, u1] >> 2 (scales_mins_avx2's).
  const __m512i shift_hi = _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0, 0, 4));
  const __m512i low_bits = _mm512_broadcast_i32x4(
    _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m512i top_bits = _mm512_broadcast_i32x4(
    _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  // Dword 0 of each lane of both quads: rows 0-7's d | dmin << 16.
  const __m512i heads8 =
    _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 28, 24, 20, 16, 12, 8, 4, 0);
  // Dwords 0, 4, 8, 12 (rows 0-3), 2, 6, 10, 14 (rows 4-7) of the integer
  // sums, then the same of the minimums' (quads_vnni's reduction).
  const __m512i gather8 = _mm512_set_epi32(30, 26, 22, 18, 28, 24, 20, 16,
                                           14, 10, 6, 2, 12, 8, 4, 0);
  const std::uintptr_t next =
    reinterpret_cast<std::uintptr_t>(x) + 8 * nb * sizeof(block_q4_k);
  constexpr std::size_t step_bytes = 8 * sizeof(block_q4_k);
  for (std::size_t b = 0; b < nb; ++b) {
    // The next 8 rows, a block's worth of each per block here, in order
    // (prefetches never fault, past the matrix's end too).
#pragma GCC unroll 18
    for (std::size_t l = 0; l < step_bytes / 64; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(next + b * step_bytes
                                                 + 64 * l),
                   _MM_HINT_T1);
    // Per quad, each row's first 16 bytes in its lane: d | dmin << 16,
    // then the 12 scale bytes as u0, u1, u2 (scales_mins_avx2's 6-bit
    // fields, four rows at once): bytes 0-7 of a lane its 8 scales, 8-15
    // its 8 minimums.
    __m512i sc[2][8], mn[2], head[2];
    const std::uint8_t* qs[2][4];
#pragma GCC unroll 2
    for (int q = 0; q < 2; ++q) {
      const std::uint8_t* row[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const block_q4_k& w = x[static_cast<std::size_t>(4 * q + i) * nb + b];
        row[i] = reinterpret_cast<const std::uint8_t*>(&w);
        qs[q][i] = w.qs;
      }
      static_assert(offsetof(block_q4_k, scales) == 4
                      && offsetof(block_q4_k, qs) == 16,
                    "d, dmin and the scales are a block's first 16 bytes");
      head[q] = lanes4(row, 0);
      // [u0, u2, u1, u2] and [u0, u0, u1, u1] of each lane.
      const __m512i a = _mm512_shuffle_epi32(head[q], _MM_PERM_DCDB);
      const __m512i c = _mm512_shuffle_epi32(head[q], _MM_PERM_CCBB);
      const __m512i sm = _mm512_or_si512(
        _mm512_and_si512(_mm512_srlv_epi32(a, shift_hi), low_bits),
        _mm512_and_si512(_mm512_srli_epi32(c, 2), top_bits));
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
        sc[q][j] = _mm512_shuffle_epi8(sm, pick[j]);
      mn[q] = _mm512_shuffle_epi8(sm, pick_mins);
    }
    // d | dmin << 16 of the 8 rows in order.
    const __m256i dd = _mm512_castsi512_si256(
      _mm512_permutex2var_epi32(head[0], heads8, head[1]));
    const __m256 d = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(dd));
    const __m256 dmin =
      _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(dd, 16)));
    __m512i is[2][NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      is[0][t] = _mm512_setzero_si512();
      is[1][t] = _mm512_setzero_si512();
    }
    // Unrolled: GCC keeps the sums in registers only so (a loop left
    // rolled ran 2 and 4 tokens 2x slower).
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      // qs[32c + k]: weight 64c + k (low nibble, sub-block 2c) and
      // 64c + 32 + k (high nibble, sub-block 2c + 1); k < 16, then k >= 16.
      __m512i lo0[2], lo1[2], hi0[2], hi1[2];
#pragma GCC unroll 2
      for (int q = 0; q < 2; ++q) {
        const __m512i w0 = lanes4(qs[q], 32 * c);
        const __m512i w1 = lanes4(qs[q], 32 * c + 16);
        lo0[q] = _mm512_and_si512(w0, m4);
        hi0[q] = _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4);
        lo1[q] = _mm512_and_si512(w1, m4);
        hi1[q] = _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4);
      }
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const std::int8_t* a = act[t][b].qs + 64 * c;
        const __m512i a0 = _mm512_broadcast_i32x4(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
        const __m512i a1 = _mm512_broadcast_i32x4(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16)));
        const __m512i a2 = _mm512_broadcast_i32x4(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 32)));
        const __m512i a3 = _mm512_broadcast_i32x4(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 48)));
#pragma GCC unroll 2
        for (int q = 0; q < 2; ++q) {
          __m512i sl =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo0[q], a0);
          sl = _mm512_dpbusd_epi32(sl, lo1[q], a1);
          __m512i sh =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi0[q], a2);
          sh = _mm512_dpbusd_epi32(sh, hi1[q], a3);
          is[q][t] = _mm512_dpwssd_epi32(is[q][t], sl, sc[q][2 * c]);
          is[q][t] = _mm512_dpwssd_epi32(is[q][t], sh, sc[q][2 * c + 1]);
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      // Lane p of bs: pair p's activation sums (rows8's bs).
      const __m256i s = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(act[t][b].bsums));
      const __m512i bs = _mm512_broadcast_i32x4(_mm_hadd_epi16(
        _mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
      const __m512i m0 = _mm512_madd_epi16(mn[0], bs);
      const __m512i m1 = _mm512_madd_epi16(mn[1], bs);
      // Lane i: [a02, a13, b02, b13] (a: row i, b: row 4 + i), then
      // [a, a, b, b]; then the 8 rows of both in order.
      __m512i ui = _mm512_add_epi32(_mm512_unpacklo_epi64(is[0][t], is[1][t]),
                                    _mm512_unpackhi_epi64(is[0][t], is[1][t]));
      __m512i um = _mm512_add_epi32(_mm512_unpacklo_epi64(m0, m1),
                                    _mm512_unpackhi_epi64(m0, m1));
      ui = _mm512_add_epi32(ui, _mm512_shuffle_epi32(ui, _MM_PERM_CDAB));
      um = _mm512_add_epi32(um, _mm512_shuffle_epi32(um, _MM_PERM_CDAB));
      const __m512i both = _mm512_permutex2var_epi32(ui, gather8, um);
      const __m256 ad = _mm256_set1_ps(act[t][b].d);
      acc[t] = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(_mm512_castsi512_si256(both)),
        _mm256_mul_ps(d, ad), acc[t]);
      accm[t] = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(both, 1)),
        _mm256_mul_ps(dmin, ad), accm[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    _mm256_storeu_ps(out[t], _mm256_sub_ps(acc[t], accm[t]));
}

/// quads_vnni for n (1..quads_width) tokens.
void quads(const block_q4_k* x, std::size_t nb, const block_q8_k* const* act,
           float* const* out, std::size_t n) {
  switch (n) {
  case 1: quads_vnni<1>(x, nb, act, out); return;
  case 2: quads_vnni<2>(x, nb, act, out); return;
  case 3: quads_vnni<3>(x, nb, act, out); return;
  case 4: quads_vnni<4>(x, nb, act, out); return;
  case 5: quads_vnni<5>(x, nb, act, out); return;
  case 6: quads_vnni<6>(x, nb, act, out); return;
  case 7: quads_vnni<7>(x, nb, act, out); return;
  default: quads_vnni<8>(x, nb, act, out); return;
  }
}

#include "backends/quant_repack_amx.inc"

#pragma GCC diagnostic pop

/// rows8_avx2 for n (1..4) tokens; rows8_vnni for the tokens by pair
/// (the others take quads_vnni where the CPU has VNNI).
template <bool Pairs>
void rows8(const block_q4_k* x, std::size_t nb, const block_q8_k* const* act,
           float* const* out, std::size_t n) {
  if constexpr (Pairs) {
    if (host::have_vnni()) {
      switch (n) {
      case 1: rows8_vnni<1, true>(x, nb, act, out); return;
      case 2: rows8_vnni<2, true>(x, nb, act, out); return;
      case 3: rows8_vnni<3, true>(x, nb, act, out); return;
      default: rows8_vnni<4, true>(x, nb, act, out); return;
      }
    }
  }
  switch (n) {
  case 1: rows8_avx2<1, Pairs>(x, nb, act, out); return;
  case 2: rows8_avx2<2, Pairs>(x, nb, act, out); return;
  case 3: rows8_avx2<3, Pairs>(x, nb, act, out); return;
  default: rows8_avx2<4, Pairs>(x, nb, act, out); return;
  }
}
#endif

} // namespace

bool q6_k_panels(std::size_t m) noexcept {
#ifdef EXO_REPACK_X86
  return m >= q6_panel_min_tokens && host::have_vnni();
#else
  (void)m;
  return false;
#endif
}

void matmul_q6_k_panels(const void* w, std::size_t rows, std::size_t k,
                        const void* q8k, std::size_t m, float* out,
                        int threads) {
#ifdef EXO_REPACK_X86
  const std::size_t nb = k / qk_k;
  const auto* x = static_cast<const block_q6_k*>(w);
  const auto* q = static_cast<const block_q8_k*>(q8k);
  // The activations as int16 and the bsums pairs, once for every panel.
  std::vector<std::int16_t> a16(m * nb * 256);
  std::vector<std::int32_t> bsp(m * nb * 8);
  host::for_each_index(static_cast<long>(m), threads, [&](long ti) {
    const auto t = static_cast<std::size_t>(ti);
    for (std::size_t b = 0; b < nb; ++b) {
      const block_q8_k& y = q[t * nb + b];
      std::int16_t* dst = a16.data() + (t * nb + b) * 256;
      for (int i = 0; i < 256; ++i)
        dst[i] = y.qs[i];
      for (int l = 0; l < 8; ++l)
        bsp[(t * nb + b) * 8 + static_cast<std::size_t>(l)] =
          pair16(y.bsums[2 * l], y.bsums[2 * l + 1]);
    }
  });
  for_each_panel<q6_panel_block>(
    rows, nb, threads,
    [&](q6_panel_block* buf, std::size_t r0, std::size_t n) {
      pack_q6_panel(x + r0 * nb, nb, n, panel_ahead(r0, rows), buf);
    },
    [&](const q6_panel_block* buf, std::size_t r0, __mmask16 mask) {
      for (std::size_t t0 = 0; t0 < m; t0 += q6_panel_width) {
        const std::size_t nt = std::min<std::size_t>(q6_panel_width, m - t0);
        const block_q8_k* act[q6_panel_width];
        const std::int16_t* as[q6_panel_width];
        const std::int32_t* bs[q6_panel_width];
        float* dst[q6_panel_width];
        for (std::size_t t = 0; t < nt; ++t) {
          act[t] = q + (t0 + t) * nb;
          as[t] = a16.data() + (t0 + t) * nb * 256;
          bs[t] = bsp.data() + (t0 + t) * nb * 8;
          dst[t] = out + (t0 + t) * rows + r0;
        }
        switch (nt) {
        case 1:
          q6_panel_tokens_vnni<1>(buf, nb, act, as, bs, dst, mask);
          break;
        case 2:
          q6_panel_tokens_vnni<2>(buf, nb, act, as, bs, dst, mask);
          break;
        default:
          q6_panel_tokens_vnni<3>(buf, nb, act, as, bs, dst, mask);
          break;
        }
      }
    });
#else
  (void)w, (void)rows, (void)k, (void)q8k, (void)m, (void)out, (void)threads;
#endif
}

namespace {
/// set_q4_k_gemm's choice: 0 none (the CPU's), 1 by super-block, 2 by pair.
std::atomic<int> gemm_override{0};
} // namespace

q4_k_gemm q4_k_gemm_here() noexcept {
  switch (gemm_override.load(std::memory_order_relaxed)) {
  case 1: return q4_k_gemm::by_super_block;
  case 2: return q4_k_gemm::by_pair;
  default: break;
  }
#ifdef EXO_REPACK_X86
  // Its AVX2 (haswell) and AVX-512 (zen4, ...) builds alike: the haswell
  // build's gemm, loaded on an AVX2-only AMD EPYC (Zen 3), gave the bits
  // of by_pair for every product of quant_oracle_tests, not by_super_block's.
  return q4_k_gemm::by_pair;
#else
  return q4_k_gemm::by_super_block;
#endif
}

void set_q4_k_gemm(std::optional<q4_k_gemm> steps) noexcept {
  gemm_override.store(!steps ? 0
                      : *steps == q4_k_gemm::by_super_block ? 1
                                                            : 2,
                      std::memory_order_relaxed);
}

bool q4_k_repacked(std::size_t rows) noexcept {
  return rows % 8 == 0;
}

std::size_t q4_k_pair_tokens(std::size_t m, bool rows_apart) noexcept {
  if (rows_apart || m < 4 || q4_k_gemm_here() != q4_k_gemm::by_pair)
    return 0;
  return m - m % 4;
}

result<bool> matmul_q4_k_repacked(const void* w, std::size_t rows,
                                  std::size_t k, const float* a,
                                  std::size_t m, float* out, int threads,
                                  bool rows_apart) {
  if (!w || !a || !out)
    return fail(errc::invalid_argument, "matmul_q4_k_repacked: null operand");
  if (k % qk_k != 0)
    return fail(errc::invalid_argument,
                "matmul_q4_k_repacked: row length " + std::to_string(k)
                  + " is not a multiple of 256");
  if (rows == 0 || k == 0 || m == 0)
    return true;
  const std::size_t nb = k / qk_k;
  std::vector<block_q8_k> q(nb * m);
  // Each token's row on its own (the same bytes on any thread count).
  host::for_each_index(static_cast<long>(m), m > 1 ? threads : 1, [&](long t) {
    const auto i = static_cast<std::size_t>(t);
    quantize_activations(ggml_type::q8_k, a + i * k, q.data() + i * nb, k);
  });
  const auto* blocks = static_cast<const block_q4_k*>(w);
  // llama.cpp's repacked mul_mat: with 4 tokens or more, the first
  // m - m % 4 go through its gemm, the others (and single tokens) through
  // its gemv, which steps by super-block everywhere. Only an AVX-512
  // build's gemm steps otherwise (by pair): tokens [0, mg) here.
  const std::size_t mg = q4_k_pair_tokens(m, rows_apart);
  const bool pairs = mg > 0;
#ifdef EXO_REPACK_X86
  // The tiles (quant_repack_amx.inc): later for the gemm's tokens.
  if (m >= (pairs ? amx_min_pair_tokens : amx_min_tokens)
      && host::have_amx()) {
    matmul_amx(blocks, rows, nb, q, m, mg, out, threads);
    return true;
  }
  if (m >= (pairs ? panel_min_tokens : quads_max_tokens)
      && host::have_vnni()) {
    matmul_panels(blocks, rows, nb, q, m, mg, pairs, out, threads);
    return true;
  }
#endif
  const bool simd = host::widest_isa() != host::isa::scalar;
  [[maybe_unused]] const bool vnni = host::have_vnni(); // once, not per group
  // Groups of 8 rows (rows is a multiple of 8 wherever llama.cpp repacks;
  // any rest goes one row at a time), tokens 4 at a time on the SIMD path;
  // every row's bits are the same either way.
  const long groups = static_cast<long>((rows + 7) / 8);
  host::for_each_index(groups, threads, [&](long g) {
    const std::size_t r0 = static_cast<std::size_t>(g) * 8;
    const std::size_t n = std::min<std::size_t>(8, rows - r0);
#ifdef EXO_REPACK_X86
    if (simd && n == 8) {
      // The tokens by super-block through quads_vnni where the CPU has
      // VNNI, the others (and AVX2 CPUs) through rows8.
      for (std::size_t t0 = 0; t0 < m;) {
        const std::size_t end = t0 < mg ? mg : m;
        const bool by_pair = pairs && t0 < mg;
        const std::size_t nt = std::min<std::size_t>(
          vnni && !by_pair ? quads_width : 4, end - t0);
        const block_q8_k* act[quads_width];
        float* dst[quads_width];
        // Each token's 8 outputs straight into its row of out (a copy
        // through a buffer stalled on the kernels' fresh stores).
        for (std::size_t t = 0; t < nt; ++t) {
          act[t] = q.data() + (t0 + t) * nb;
          dst[t] = out + (t0 + t) * rows + r0;
        }
        if (by_pair)
          rows8<true>(blocks + r0 * nb, nb, act, dst, nt);
        else if (vnni)
          quads(blocks + r0 * nb, nb, act, dst, nt);
        else
          rows8<false>(blocks + r0 * nb, nb, act, dst, nt);
        t0 += nt;
      }
      return;
    }
#endif
    // The portable sums: no SIMD, or a rest of fewer than 8 rows (the host
    // kernels send only multiples of 8 here, as llama.cpp repacks them).
    for (std::size_t t = 0; t < m; ++t)
      for (std::size_t i = 0; i < n; ++i)
        out[t * rows + r0 + i] = dot_row(blocks + (r0 + i) * nb,
                                         q.data() + t * nb, nb,
                                         pairs && t < mg);
  });
  return true;
}

void matmul_q4_k_x16_panels(const void* packed, std::size_t rows,
                            std::size_t k, const block_q8_k* q,
                            std::size_t m, std::size_t mg, float* out,
                            int threads) {
#ifdef EXO_REPACK_X86
  const std::size_t nb = k / qk_k;
  const auto* bytes = static_cast<const std::uint8_t*>(packed);
  sweep_panels(rows, nb, q, m, mg, mg > 0, out, threads,
               [&](panel_block* buf, std::size_t r0, std::size_t) {
                 pack_panel_x16(bytes + (r0 / q4_k_x16_rows) * nb
                                          * q4_k_x16_layout::group_block_bytes,
                                nb, buf);
               });
#else
  (void)packed, (void)rows, (void)k, (void)q, (void)m, (void)mg, (void)out,
    (void)threads;
#endif
}

} // namespace exo::backend::quant
