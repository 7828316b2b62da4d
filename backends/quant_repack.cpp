#include "backends/quant_repack.hpp"

#include "backends/host_kernels.hpp"
#include "backends/host_parallel.hpp"
#include "backends/quant_formats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

/// One row of Q4_K against one row of Q8_K, in the repacked kernels' order.
float dot_row(const block_q4_k* x, const block_q8_k* y, std::size_t nb) {
  float acc = 0.0f, accm = 0.0f;
  for (std::size_t b = 0; b < nb; ++b) {
    const block_q4_k& w = x[b];
    const block_q8_k& a = y[b];
    std::int32_t isum = 0, imin = 0;
    std::int32_t los[4], his[4];
    nibble_sums_portable(w, a, los, his);
    for (int c = 0; c < 4; ++c) { // 64 elements: sub-blocks 2c and 2c+1
      const std::int32_t lo = los[c], hi = his[c];
      int sc0, m0, sc1, m1;
      scale_min(2 * c, w.scales, sc0, m0);
      scale_min(2 * c + 1, w.scales, sc1, m1);
      isum += sc0 * lo + sc1 * hi;
      imin += m0 * (a.bsums[4 * c] + a.bsums[4 * c + 1])
              + m1 * (a.bsums[4 * c + 2] + a.bsums[4 * c + 3]);
    }
    const float d = host::f16_to_f32(w.d) * a.d;
    const float dm = host::f16_to_f32(w.dmin) * a.d;
    acc = std::fma(static_cast<float>(isum), d, acc);
    accm = std::fma(static_cast<float>(imin), dm, accm);
  }
  return acc - accm;
}


#ifdef EXO_REPACK_X86
/// dot_row with AVX2: the integer sums (exact, so in any order) in
/// vectors, one horizontal sum per super-block; the float part as above,
/// with the FMA instruction std::fma stands for.
__attribute__((target("avx2,fma,f16c"))) float
dot_row_avx2(const block_q4_k* x, const block_q8_k* y, std::size_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  float acc = 0.0f, accm = 0.0f;
  for (std::size_t b = 0; b < nb; ++b) {
    const block_q4_k& w = x[b];
    const block_q8_k& a = y[b];
    // The 6-bit scales and minimums unpacked four at a time (the bytes
    // scale_min gives: sc[j] = bytes 0-7, mn[j] = bytes 8-15 of u).
    std::uint32_t u[4];
    std::memcpy(u, w.scales, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const std::uint32_t aux = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = aux;
    u[0] &= 0x3f3f3f3fu;
    std::uint8_t sm[16];
    std::memcpy(sm, u, 16);
    const std::uint8_t* sc = sm;
    const std::uint8_t* mn = sm + 8;
    __m256i isum = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q4 = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(w.qs + 32 * c));
      const __m256i ql = _mm256_and_si256(q4, m4);
      const __m256i qh = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
      const __m256i y0 = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(a.qs + 64 * c));
      const __m256i y1 = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(a.qs + 64 * c + 32));
      // u8 x s8 pairs: at most 2 * 15 * 128, no saturation; the scale
      // (< 64) multiplies the int16 pair sums in the same madd: exact.
      const __m256i lo = _mm256_madd_epi16(
        _mm256_maddubs_epi16(ql, y0),
        _mm256_set1_epi16(static_cast<short>(sc[2 * c])));
      const __m256i hi = _mm256_madd_epi16(
        _mm256_maddubs_epi16(qh, y1),
        _mm256_set1_epi16(static_cast<short>(sc[2 * c + 1])));
      isum = _mm256_add_epi32(isum, _mm256_add_epi32(lo, hi));
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(isum),
                               _mm256_extracti128_si256(isum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    const std::int32_t is = _mm_cvtsi128_si32(s4);
    std::int32_t imin = 0;
    for (int j = 0; j < 8; ++j)
      imin += mn[j] * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
    const float d = _cvtsh_ss(w.d) * a.d;
    const float dm = _cvtsh_ss(w.dmin) * a.d;
    acc = std::fma(static_cast<float>(is), d, acc);
    accm = std::fma(static_cast<float>(imin), dm, accm);
  }
  return acc - accm;
}

/// dot_row_avx2 for 4 consecutive rows at once (each row's sums in the
/// same order, so the same bits): the activations and their pair sums are
/// loaded once per block, and the four rows' float chains interleave.
__attribute__((target("avx2,fma,f16c"))) void
dot_rows4_avx2(const block_q4_k* x, std::size_t nb, const block_q8_k* y,
               float out[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  float acc[4] = {0, 0, 0, 0}, accm[4] = {0, 0, 0, 0};
  for (std::size_t b = 0; b < nb; ++b) {
    const block_q8_k& a = y[b];
    __m256i y0[4], y1[4];
    for (int c = 0; c < 4; ++c) {
      y0[c] = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(a.qs + 64 * c));
      y1[c] = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(a.qs + 64 * c + 32));
    }
    std::int32_t bs[8];
    for (int j = 0; j < 8; ++j)
      bs[j] = a.bsums[2 * j] + a.bsums[2 * j + 1];
    for (int r = 0; r < 4; ++r) {
      const block_q4_k& w = x[r * nb + b];
      std::uint32_t u[4];
      std::memcpy(u, w.scales, 12);
      u[3] = ((u[2] >> 4) & 0x0f0f0f0fu)
             | (((u[1] >> 6) & 0x03030303u) << 4);
      const std::uint32_t aux = u[1] & 0x3f3f3f3fu;
      u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
      u[2] = aux;
      u[0] &= 0x3f3f3f3fu;
      std::uint8_t sm[16];
      std::memcpy(sm, u, 16);
      __m256i isum = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i q4 = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(w.qs + 32 * c));
        const __m256i ql = _mm256_and_si256(q4, m4);
        const __m256i qh = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
        const __m256i lo = _mm256_madd_epi16(
          _mm256_maddubs_epi16(ql, y0[c]),
          _mm256_set1_epi16(static_cast<short>(sm[2 * c])));
        const __m256i hi = _mm256_madd_epi16(
          _mm256_maddubs_epi16(qh, y1[c]),
          _mm256_set1_epi16(static_cast<short>(sm[2 * c + 1])));
        isum = _mm256_add_epi32(isum, _mm256_add_epi32(lo, hi));
      }
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(isum),
                                 _mm256_extracti128_si256(isum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      const std::int32_t is = _mm_cvtsi128_si32(s4);
      std::int32_t imin = 0;
      for (int j = 0; j < 8; ++j)
        imin += sm[8 + j] * bs[j];
      const float d = _cvtsh_ss(w.d) * a.d;
      const float dm = _cvtsh_ss(w.dmin) * a.d;
      acc[r] = std::fma(static_cast<float>(is), d, acc[r]);
      accm[r] = std::fma(static_cast<float>(imin), dm, accm[r]);
    }
  }
  for (int r = 0; r < 4; ++r)
    out[r] = acc[r] - accm[r];
}
#endif

} // namespace

bool q4_k_repacked(std::size_t rows) noexcept {
  return rows % 8 == 0;
}

result<bool> matmul_q4_k_repacked(const void* w, std::size_t rows,
                                  std::size_t k, const float* a,
                                  std::size_t m, float* out, int threads) {
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
  for (std::size_t t = 0; t < m; ++t)
    quantize_activations(ggml_type::q8_k, a + t * k, q.data() + t * nb, k);
  const auto* blocks = static_cast<const block_q4_k*>(w);
  const bool simd = host::widest_isa() != host::isa::scalar;
  // Groups of 4 rows (the SIMD path takes them together), the rest one by
  // one; every row's bits are the same either way.
  const long groups = static_cast<long>((rows + 3) / 4);
  host::for_each_index(groups, threads, [&](long g) {
    const std::size_t r0 = static_cast<std::size_t>(g) * 4;
    const std::size_t n = std::min<std::size_t>(4, rows - r0);
    for (std::size_t t = 0; t < m; ++t) {
      const block_q8_k* act = q.data() + t * nb;
#ifdef EXO_REPACK_X86
      if (simd && n == 4) {
        float v[4];
        dot_rows4_avx2(blocks + r0 * nb, nb, act, v);
        for (std::size_t i = 0; i < 4; ++i)
          out[t * rows + r0 + i] = v[i];
        continue;
      }
#endif
      for (std::size_t i = 0; i < n; ++i) {
        const block_q4_k* row = blocks + (r0 + i) * nb;
        float v;
#ifdef EXO_REPACK_X86
        if (simd)
          v = dot_row_avx2(row, act, nb);
        else
#endif
          v = dot_row(row, act, nb);
        out[t * rows + r0 + i] = v;
      }
    }
  });
  return true;
}

} // namespace exo::backend::quant
