#pragma once

/// The scales of packed Q4_K groups (quant_q4_k_x16.hpp) on x86, shared by
/// the packed kernel (quant_q4_k_x16.cpp) and the 16-row panels it fills
/// for prompts (quant_repack.cpp). Internal to the backends.

#if defined(__x86_64__) || defined(__i386__)

#include "backends/quant_q4_k_x16.hpp"

#include <immintrin.h>

#include <cstdint>

namespace exo::backend::quant::x16 {

/// get_scale_min_k4 on a group block's 16 rows at once, from its
/// transposed scale bytes: byte r of sc[j] / mn[j] is row r's scale /
/// minimum of sub-block j (SSE2).
inline void scales_mins(const std::uint8_t* block, __m128i sc[8],
                        __m128i mn[8]) {
  const __m128i low6 = _mm_set1_epi8(63);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i top2 = _mm_set1_epi8(0x30);
  __m128i s[12];
  for (int i = 0; i < 12; ++i)
    s[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
      block + q4_k_x16_layout::off_scales + 16 * i));
  for (int j = 0; j < 4; ++j) {
    sc[j] = _mm_and_si128(s[j], low6);
    mn[j] = _mm_and_si128(s[j + 4], low6);
    sc[j + 4] = _mm_or_si128(_mm_and_si128(s[j + 8], low4),
                             _mm_and_si128(_mm_srli_epi16(s[j], 2), top2));
    mn[j + 4] =
      _mm_or_si128(_mm_and_si128(_mm_srli_epi16(s[j + 8], 4), low4),
                   _mm_and_si128(_mm_srli_epi16(s[j + 4], 2), top2));
  }
}

/// Each row's minimums of sub-blocks 2p and 2p + 1 as a pair of words
/// (m_2p low), row r in dword r: a vpdpwssd operand against a token's
/// (bsum_2p, bsum_2p+1).
__attribute__((target("avx512f"))) inline __m512i
min_pairs(const __m128i mn[8], int p) {
  return _mm512_or_si512(
    _mm512_cvtepu8_epi32(mn[2 * p]),
    _mm512_slli_epi32(_mm512_cvtepu8_epi32(mn[2 * p + 1]), 16));
}

} // namespace exo::backend::quant::x16

#endif
