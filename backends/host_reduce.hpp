#pragma once

// The horizontal sum of 16 float lanes in the order of the AVX-512
// intrinsic _mm512_reduce_add_ps (GCC's avx512fintrin.h; Clang's is the
// same tree): halves, then quarters, then pairs. llama.cpp's CPU products
// and flash attention end every 16-lane accumulator with it, so the host
// kernels (host_kernels.cpp, host_attention.cpp) use this one tree on every
// ISA to give llama.cpp's bits. Internal to the host backend.

#include <immintrin.h>

namespace exo::backend::host {

/// The tree on 16 lanes in memory (scalar code).
inline float reduce16(const float* l) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i)
    t3[i] = l[i + 8] + l[i];
  for (int i = 0; i < 4; ++i)
    t6[i] = t3[i + 4] + t3[i];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

/// The tree on lanes 0-7 in lo and 8-15 in hi.
__attribute__((target("avx2"))) inline float reduce16_avx2(__m256 lo,
                                                           __m256 hi) {
  const __m256 t3 = _mm256_add_ps(hi, lo);
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1),
                               _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_permute_ps(t6, 0x4e));
  return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_movehdup_ps(t8));
}

/// The tree on one 512-bit register, written with the zero-masked extract
/// that GCC 12 does not warn about.
__attribute__((target("avx512f"))) inline float reduce16_avx512(__m512 v) {
  const __m512d d = _mm512_castps_pd(v);
  return reduce16_avx2(
    _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, d, 0)),
    _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, d, 1)));
}

} // namespace exo::backend::host
