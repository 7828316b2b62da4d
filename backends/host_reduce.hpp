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

/// reduce16_avx2 of 8 rows at once from their first step (t3: row c's
/// hi + lo at t3[8 * c .. 8 * c + 7], 32-byte aligned): lane c is row c's
/// sum, by the same tree (quarters, then pairs), the rows transposed along
/// the way by shuffles.
__attribute__((target("avx2"))) inline __m256
reduce16_rows_avx2(const float* t3) {
  // w[p], 128-bit half k: row 2p + k's lanes i + i+4.
  __m256 w[4];
  for (int p = 0; p < 4; ++p) {
    const __m256 a = _mm256_load_ps(t3 + 16 * p);
    const __m256 b = _mm256_load_ps(t3 + 16 * p + 8);
    w[p] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20),
                         _mm256_permute2f128_ps(a, b, 0x31));
  }
  // z[u], half k: lanes 0 + 2, 1 + 3 of rows 4u + k, then 4u + 2 + k.
  __m256 z[2];
  for (int u = 0; u < 2; ++u)
    z[u] = _mm256_add_ps(
      _mm256_shuffle_ps(w[2 * u], w[2 * u + 1], _MM_SHUFFLE(1, 0, 1, 0)),
      _mm256_shuffle_ps(w[2 * u], w[2 * u + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Half k: the sums of rows k, 2 + k, 4 + k, 6 + k; then in lane order.
  const __m256 sums = _mm256_add_ps(
    _mm256_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
    _mm256_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(sums,
                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// Quarters (128 bits) qa, qb of a, then qc, qd of b; the maskz form: GCC
/// 12's plain _mm512_shuffle_f32x4 starts from an undefined register and
/// warns.
template <int Imm>
__attribute__((target("avx512f"))) inline __m512 quarters(__m512 a,
                                                          __m512 b) {
  return _mm512_maskz_shuffle_f32x4(0xffff, a, b, Imm);
}

/// In each quarter: lanes ia, ib of a, then ic, id of b (maskz, as above).
template <int Imm>
__attribute__((target("avx512f"))) inline __m512 pairs(__m512 a, __m512 b) {
  return _mm512_maskz_shuffle_ps(0xffff, a, b, Imm);
}

/// reduce16_avx512 of 16 rows of 16 floats (rows[16 * c .. 16 * c + 15],
/// 64-byte aligned) at once: lane c is row c's sum, by the same tree
/// (every lane's adds are its own row's: halves, quarters, pairs), the
/// rows transposed along the way by shuffles: 15 adds for 16 sums.
__attribute__((target("avx512f"))) inline __m512
reduce16_rows_avx512(const float* rows) {
  constexpr int lo = _MM_SHUFFLE(1, 0, 1, 0), hi = _MM_SHUFFLE(3, 2, 3, 2);
  constexpr int even = _MM_SHUFFLE(2, 0, 2, 0), odd = _MM_SHUFFLE(3, 1, 3, 1);
  // Half k of w[p]: row 2p + k's lanes i + i+8.
  __m512 w[8];
  for (int p = 0; p < 8; ++p) {
    const __m512 a = _mm512_load_ps(rows + 32 * p);
    const __m512 b = _mm512_load_ps(rows + 32 * p + 16);
    w[p] = _mm512_add_ps(quarters<lo>(a, b), quarters<hi>(a, b));
  }
  // Quarter j of x[r]: row 4r + j's lanes i + i+4.
  __m512 x[4];
  for (int r = 0; r < 4; ++r)
    x[r] = _mm512_add_ps(quarters<even>(w[2 * r], w[2 * r + 1]),
                         quarters<odd>(w[2 * r], w[2 * r + 1]));
  // Quarter j of y[u]: lanes 0 + 2, 1 + 3 of rows 8u + j and 8u + 4 + j.
  __m512 y[2];
  for (int u = 0; u < 2; ++u)
    y[u] = _mm512_add_ps(pairs<lo>(x[2 * u], x[2 * u + 1]),
                         pairs<hi>(x[2 * u], x[2 * u + 1]));
  // Lane 4j + k: row 4k + j's sum; then the rows in lane order.
  const __m512 sums =
    _mm512_add_ps(pairs<even>(y[0], y[1]), pairs<odd>(y[0], y[1]));
  return _mm512_maskz_permutexvar_ps(
    0xffff,
    _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
    sums);
}

} // namespace exo::backend::host
