// Attention and SwiGLU as llama.cpp's CPU backend computes them, bit for
// bit: ggml's flash attention over the F16 KV cache
// (ggml_compute_forward_flash_attn_ext_f16 in ggml-cpu/ops.cpp) and
// ggml_vec_swiglu_f32 with ggml's vector expf (ggml-cpu/vec.h). The AVX-512
// build of ggml is the one reproduced (its vector widths and reduction
// orders); the AVX2 and scalar paths here compute the same operations on
// narrower registers and give the same bits (tested).

#include "backends/expf_ggml.hpp"
#include "backends/host_kernels.hpp"
#include "backends/host_parallel.hpp"
#include "backends/host_reduce.hpp"
#include "backends/quant_formats.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>


namespace exo::backend::host {

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

/// ggml's flash attention tiles (GGML_FA_TILE_Q = GGML_FA_TILE_KV): batches
/// of at least this many tokens take the tiled path.
constexpr std::size_t fa_tile = 64;

// -- ggml_v_expf ------------------------------------------------------------

// The constants and the one-lane steps of ggml_v_expf (expf_ggml.hpp, which
// the GPU kernels share).
using ggml::ex_c1;
using ggml::ex_c2;
using ggml::ex_c3;
using ggml::ex_c4;
using ggml::ex_c5;
using ggml::ex_ln2_hi;
using ggml::ex_ln2_lo;
using ggml::ex_log2e;
using ggml::ex_shift;
using ggml::expf_lane;

__attribute__((target("avx512f"))) inline __m512 expf_avx512(__m512 x) {
  // ggml_v_expf (ggml-cpu/vec.h, __AVX512F__), unchanged.
  const __m512 r = _mm512_set1_ps(ex_shift);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(ex_log2e), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b =
      _mm512_fnmadd_ps(n, _mm512_set1_ps(ex_ln2_lo),
                       _mm512_fnmadd_ps(n, _mm512_set1_ps(ex_ln2_hi), x));
  const __mmask16 d =
      _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(
          _mm512_fmadd_ps(_mm512_set1_ps(ex_c5), b, _mm512_set1_ps(ex_c4)), u,
          _mm512_fmadd_ps(_mm512_set1_ps(ex_c3), b, _mm512_set1_ps(ex_c2))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(ex_c1), b, _mm512_set1_ps(1.0f)));
  const __m512 res = _mm512_maskz_scalef_ps(0xffff, j, n);
  if (_mm512_kortestz(d, d))
    return res;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 alt = _mm512_mask_blend_ps(
      _mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(inf), zero);
  return _mm512_mask_blend_ps(d, res, alt);
}

/// 2^e as floats for integral e in [-126, 127] (lanes outside give garbage
/// that the caller does not select).
__attribute__((target("avx2,fma"))) inline __m256 pow2_avx2(__m256 e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(e), _mm256_set1_epi32(127)), 23));
}

/// expf_avx512 on eight lanes with AVX2 (not ggml's AVX2 expf, which rounds
/// differently): scalef done as in ggml::scalef.
__attribute__((target("avx2,fma"))) inline __m256 expf_avx2(__m256 x) {
  const __m256 r = _mm256_set1_ps(ex_shift);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(ex_log2e), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b =
      _mm256_fnmadd_ps(n, _mm256_set1_ps(ex_ln2_lo),
                       _mm256_fnmadd_ps(n, _mm256_set1_ps(ex_ln2_hi), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(
          _mm256_fmadd_ps(_mm256_set1_ps(ex_c5), b, _mm256_set1_ps(ex_c4)), u,
          _mm256_fmadd_ps(_mm256_set1_ps(ex_c3), b, _mm256_set1_ps(ex_c2))),
      u, _mm256_fmadd_ps(_mm256_set1_ps(ex_c1), b, _mm256_set1_ps(1.0f)));
  // e2 = 127 above 127, -126 below -126, else 0; e1 = n - e2.
  const __m256 hi = _mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_GT_OQ);
  const __m256 lo = _mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
  const __m256 e2 = _mm256_or_ps(_mm256_and_ps(hi, _mm256_set1_ps(127.0f)),
                                 _mm256_and_ps(lo, _mm256_set1_ps(-126.0f)));
  const __m256 e1 = _mm256_sub_ps(n, e2);
  const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n),
                                   _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  // Lanes past 192 (and NaN lanes, through their NaN j) are fixed below;
  // keep their exponents in range so the integer conversion is harmless.
  const __m256 safe_e1 = _mm256_andnot_ps(big, e1);
  const __m256 e2_or_zero = _mm256_andnot_ps(big, e2);
  __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, pow2_avx2(safe_e1)),
                             pow2_avx2(e2_or_zero));
  const __m256 is_nan = _mm256_cmp_ps(n, n, _CMP_UNORD_Q);
  res = _mm256_blendv_ps(res, n, is_nan);
  const __m256 alt = _mm256_andnot_ps(
      _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ), _mm256_set1_ps(inf));
  return _mm256_blendv_ps(res, alt, big);
}

// -- widths -------------------------------------------------------------------

bool use_avx512() {
  return widest_isa() == isa::avx512;
}
bool use_avx2() {
  return widest_isa() >= isa::avx2;
}

inline float round_half(float x) {
  return f16_to_f32(f32_to_f16(x));
}

// -- cache values -------------------------------------------------------------
//
// The attention kernels read K and V through these, templated on what the
// cache stores: f32 values, rounded to half where read, or the halves
// themselves (an f16 cache). Both give the same floats.

/// IEEE half bits, as an f16 cache stores them.
using half_bits = std::uint16_t;

inline float widen(float x) {
  return round_half(x);
}
inline float widen(half_bits h) {
  return f16_to_f32(h);
}

/// y[i] = widen(x[i]) for a row of n values.
void widen_row(const float* x, float* y, std::size_t n) {
  round_to_f16(x, y, n);
}
void widen_row(const half_bits* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    y[i] = f16_to_f32(x[i]);
}

// -- SwiGLU -------------------------------------------------------------------

/// silu(x) * g on whole 16-lane groups as ggml_vec_swiglu_f32: x / (1 +
/// v_expf(0 - x)) * g. Returns how many elements it did.
std::size_t swiglu_groups_scalar(const float* x, const float* g, float* y,
                                 std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::size_t l = i; l < i + 16; ++l)
      y[l] = ggml::swiglu_lane(x[l], g[l]);
  return i;
}

__attribute__((target("avx2,fma"))) inline __m256 swiglu8_avx2(const float* x,
                                                               const float* g) {
  const __m256 xv = _mm256_loadu_ps(x);
  const __m256 e = expf_avx2(_mm256_sub_ps(_mm256_setzero_ps(), xv));
  return _mm256_mul_ps(
      _mm256_div_ps(xv, _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
      _mm256_loadu_ps(g));
}

__attribute__((target("avx2,fma"))) std::size_t
swiglu_groups_avx2(const float* x, const float* g, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, swiglu8_avx2(x + i, g + i));
    _mm256_storeu_ps(y + i + 8, swiglu8_avx2(x + i + 8, g + i + 8));
  }
  return i;
}

__attribute__((target("avx512f"))) std::size_t
swiglu_groups_avx512(const float* x, const float* g, float* y, std::size_t n) {
  std::size_t i = 0;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    __m512 xv = _mm512_loadu_ps(x + i);
    __m512 e = expf_avx512(_mm512_sub_ps(_mm512_setzero_ps(), xv));
    _mm512_storeu_ps(y + i,
                     _mm512_mul_ps(_mm512_div_ps(xv, _mm512_add_ps(one, e)),
                                   _mm512_loadu_ps(g + i)));
  }
  return i;
}

// -- one_chunk: ggml_compute_forward_flash_attn_ext_f16_one_chunk ------------

/// ggml_vec_dot_f16 of a K row (rounded to half here) with Q (already
/// rounded): four 16-lane accumulators over blocks of 64, reduced as
/// GGML_F16_VEC_REDUCE, then the rest of the row in double.
template <class KV>
float dot_f16_scalar(const KV* k, const float* q, std::size_t n) {
  const std::size_t np = n & ~std::size_t{63};
  float acc[64] = {};
  for (std::size_t i = 0; i < np; i += 64)
    for (std::size_t m = 0; m < 64; ++m)
      acc[m] = std::fma(widen(k[i + m]), q[i + m], acc[m]);
  float l[16];
  for (std::size_t m = 0; m < 16; ++m)
    l[m] = (acc[m] + acc[32 + m]) + (acc[16 + m] + acc[48 + m]);
  double sum = reduce16(l);
  for (std::size_t i = np; i < n; ++i)
    sum += static_cast<double>(widen(k[i]) * q[i]);
  return static_cast<float>(sum);
}

__attribute__((target("avx2,fma,f16c"))) inline __m256
load_half_avx2(const float* p) {
  return _mm256_cvtph_ps(
      _mm256_cvtps_ph(_mm256_loadu_ps(p), _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("avx2,fma,f16c"))) inline __m256
load_half_avx2(const half_bits* p) {
  return _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <class KV>
__attribute__((target("avx2,fma,f16c"))) float
dot_f16_avx2(const KV* k, const float* q, std::size_t n) {
  const std::size_t np = n & ~std::size_t{63};
  __m256 a[8];
  for (auto& v : a)
    v = _mm256_setzero_ps();
  for (std::size_t i = 0; i < np; i += 64)
    for (int j = 0; j < 8; ++j)
      a[j] = _mm256_fmadd_ps(load_half_avx2(k + i + 8 * j),
                             _mm256_loadu_ps(q + i + 8 * j), a[j]);
  // a[2j], a[2j+1]: lanes 0-7 and 8-15 of ggml's accumulator j.
  __m256 lo =
      _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
  __m256 hi =
      _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
  double sum = reduce16_avx2(lo, hi);
  // The rest in double, one product after the other as ggml sums it; the
  // products (widen(k) * q, rounded to float) 8 at a time.
  std::size_t i = np;
  for (; i + 8 <= n; i += 8) {
    alignas(32) float p[8];
    _mm256_store_ps(p, _mm256_mul_ps(load_half_avx2(k + i),
                                     _mm256_loadu_ps(q + i)));
    for (int j = 0; j < 8; ++j)
      sum += static_cast<double>(p[j]);
  }
  for (; i < n; ++i)
    sum += static_cast<double>(widen(k[i]) * q[i]);
  return static_cast<float>(sum);
}

// The maskz forms (all lanes) instead of the plain intrinsics, whose GCC 12
// definitions start from an uninitialized register and warn.
__attribute__((target("avx512f"))) inline __m512 round_half_avx512(__m512 x) {
  return _mm512_maskz_cvtph_ps(
      0xffff, _mm512_maskz_cvtps_ph(0xffff, x, _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("avx512f"))) inline __m512
load_half_avx512(const float* p) {
  return round_half_avx512(_mm512_loadu_ps(p));
}

__attribute__((target("avx512f"))) inline __m512
load_half_avx512(const half_bits* p) {
  return _mm512_maskz_cvtph_ps(
      0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

template <class KV>
__attribute__((target("avx512f"))) float
dot_f16_avx512(const KV* k, const float* q, std::size_t n) {
  const std::size_t np = n & ~std::size_t{63};
  __m512 a[4];
  for (auto& v : a)
    v = _mm512_setzero_ps();
  for (std::size_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      a[j] = _mm512_fmadd_ps(load_half_avx512(k + i + 16 * j),
                             _mm512_loadu_ps(q + i + 16 * j), a[j]);
  double sum = reduce16_avx512(
      _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3])));
  for (std::size_t i = np; i < n; ++i)
    sum += static_cast<double>(widen(k[i]) * q[i]);
  return static_cast<float>(sum);
}

/// ggml_vec_scale_f16: acc = half(acc * s), element by element.
void scale_f16_scalar(float* acc, float s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    acc[i] = round_half(acc[i] * s);
}

/// ggml_vec_mad_f16: acc = half(fma(half(v), w, acc)) (the SIMD part and,
/// in the build compared against, the leftovers alike).
template <class KV>
void mad_f16_scalar(float* acc, const KV* v, float w, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    acc[i] = round_half(std::fma(widen(v[i]), w, acc[i]));
}

__attribute__((target("avx2,fma,f16c"))) void
scale_f16_avx2(float* acc, float s, std::size_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 r = _mm256_mul_ps(_mm256_loadu_ps(acc + i), sv);
    _mm256_storeu_ps(acc + i, _mm256_cvtph_ps(_mm256_cvtps_ph(
                                  r, _MM_FROUND_TO_NEAREST_INT)));
  }
  scale_f16_scalar(acc + i, s, n - i);
}

template <class KV>
__attribute__((target("avx2,fma,f16c"))) void
mad_f16_avx2(float* acc, const KV* v, float w, std::size_t n) {
  const __m256 wv = _mm256_set1_ps(w);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 r =
        _mm256_fmadd_ps(load_half_avx2(v + i), wv, _mm256_loadu_ps(acc + i));
    _mm256_storeu_ps(acc + i, _mm256_cvtph_ps(_mm256_cvtps_ph(
                                  r, _MM_FROUND_TO_NEAREST_INT)));
  }
  mad_f16_scalar(acc + i, v + i, w, n - i);
}

__attribute__((target("avx512f"))) void scale_f16_avx512(float* acc, float s,
                                                         std::size_t n) {
  const __m512 sv = _mm512_set1_ps(s);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 r = _mm512_mul_ps(_mm512_loadu_ps(acc + i), sv);
    _mm512_storeu_ps(acc + i, round_half_avx512(r));
  }
  scale_f16_scalar(acc + i, s, n - i);
}

template <class KV>
__attribute__((target("avx512f"))) void
mad_f16_avx512(float* acc, const KV* v, float w, std::size_t n) {
  const __m512 wv = _mm512_set1_ps(w);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 r =
        _mm512_fmadd_ps(load_half_avx512(v + i), wv, _mm512_loadu_ps(acc + i));
    _mm512_storeu_ps(acc + i, round_half_avx512(r));
  }
  mad_f16_scalar(acc + i, v + i, w, n - i);
}

/// Where cache row i of one KV head lies: `stride` values apart in one
/// run (a contiguous cache), or through a block table (a paged cache:
/// row i in block table[i >> shift], row i & mask of it, blocks
/// block_stride values apart). Every kernel below reads rows only
/// through row(), in the order it would read a contiguous cache, so a
/// paged cache gives the same bits.
template <class KV> struct kv_rows {
  const KV* base = nullptr;
  std::size_t stride = 0;
  const std::int32_t* table = nullptr;
  std::size_t shift = 0;
  std::size_t block_stride = 0;

  const KV* row(std::size_t i) const noexcept {
    if (table == nullptr)
      return base + i * stride;
    const auto b = static_cast<std::size_t>(table[i >> shift]);
    return base + b * block_stride
           + (i & ((std::size_t{1} << shift) - 1)) * stride;
  }
  /// The same rows `off` values further in (another KV head).
  kv_rows at(std::size_t off) const noexcept {
    kv_rows r = *this;
    r.base += off;
    return r;
  }
};

/// The rows of a cache as `d` describes it (contiguous, or paged through
/// d.block_table), its strides in units of `per` values (1, or 32 for
/// Q8_0 blocks).
template <class KV>
kv_rows<KV> rows_of(const KV* p, const attention_dims& d, std::size_t per) {
  kv_rows<KV> r;
  r.base = p;
  r.stride = d.kv_stride / per;
  if (d.block_positions != 0 && d.block_table != nullptr) {
    r.table = d.block_table;
    while ((std::size_t{1} << r.shift) < d.block_positions)
      ++r.shift;
    r.block_stride = d.block_stride / per;
  }
  return r;
}

template <class KV>
struct chunk_kernels {
  float (*dot)(const KV*, const float*, std::size_t);
  void (*scale)(float*, float, std::size_t);
  void (*mad)(float*, const KV*, float, std::size_t);
};

template <class KV>
chunk_kernels<KV> chunk_kernels_now() {
  if (use_avx512())
    return {dot_f16_avx512<KV>, scale_f16_avx512, mad_f16_avx512<KV>};
  if (use_avx2())
    return {dot_f16_avx2<KV>, scale_f16_avx2, mad_f16_avx2<KV>};
  return {dot_f16_scalar<KV>, scale_f16_scalar, mad_f16_scalar<KV>};
}

/// The running maximum and sum of one_chunk's online softmax.
struct softmax_state {
  float M = -inf;
  float S = 0.0f;
};

/// What one visible cell does to one_chunk's online softmax: the factor
/// the accumulator is rescaled by when the cell raised the maximum (`grew`,
/// ms = expf(old - new)) and the cell's V weight (vs = expf(s - M), or 1
/// for a new maximum).
struct cell_step {
  float ms = 1.0f;
  float vs = 1.0f;
  bool grew = false;
};

/// One cell of score s (scaled, masked): the maximum and the sum move as
/// ggml moves them, the sum in two roundings (S * ms, then + vs; not a
/// fused multiply-add).
inline cell_step online_step(softmax_state& st, float s) {
  cell_step c;
  const float m_old = st.M;
  if (s > m_old) {
    st.M = s;
    c.ms = std::exp(m_old - s);
    c.grew = true;
  } else {
    c.vs = std::exp(s - m_old);
  }
  const float scaled = st.S * c.ms;
  st.S = scaled + c.vs;
  return c;
}

// -- libm's expf, 16 lanes ----------------------------------------------------
//
// one_chunk's online softmax calls libm's expf for every cell and head.
// glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, built with fused
// multiply-adds as __expf_fma, which x86-64 CPUs with FMA run) computes in
// double: k = round(x * 32 / ln 2) by adding 1.5 * 2^52, 2^(k / 32) from a
// 32-entry table with k's high bits added to the exponent, times a cubic
// in the remainder. The same steps in 8 double lanes give its bits for
// every |x| < 88 (all 2.2e9 such floats compared on glibc 2.36); other
// lanes (|x| >= 88 and NaN: libm's special cases, over- and underflow)
// are libm's own calls. Where this process's libm computes otherwise
// (another C library or version) the check at first use sees it and every
// cell calls expf.

/// 2^(i / 32) correctly rounded, less i << 47 (the exponent bits k's high
/// part adds back): glibc's __exp2f_data.tab.
alignas(64) constexpr std::uint64_t expf_table[32] = {
  0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f,
  0x3fef9301d0125b51, 0x3fef72b83c7d517b, 0x3fef54873168b9aa,
  0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715,
  0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
  0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
  0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74,
  0x3feea11473eb0187, 0x3feea589994cce13, 0x3feeace5422aa0db,
  0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
  0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c,
  0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
  0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

/// expf of 8 floats with |x| < 88 in glibc's steps.
__attribute__((target("avx512f"))) inline __m256
expf_libm8(__m256 x) {
  constexpr double n = 32.0;
  const __m512d z = _mm512_mul_pd(_mm512_maskz_cvtps_pd(0xff, x),
                                  _mm512_set1_pd(0x1.71547652b82fep+0 * n));
  const __m512d shift = _mm512_set1_pd(0x1.8p+52);
  const __m512d kd_shifted = _mm512_add_pd(z, shift);
  const __m512i ki = _mm512_castpd_si512(kd_shifted);
  const __m512d r = _mm512_sub_pd(z, _mm512_sub_pd(kd_shifted, shift));
  // T[ki % 32]: entries 0-15 and 16-31 picked by ki's low 4 bits, bit 4
  // choosing between them.
  const __m512i* t = reinterpret_cast<const __m512i*>(expf_table);
  const __m512i lo = _mm512_permutex2var_epi64(_mm512_load_si512(t), ki,
                                               _mm512_load_si512(t + 1));
  const __m512i hi = _mm512_permutex2var_epi64(_mm512_load_si512(t + 2), ki,
                                               _mm512_load_si512(t + 3));
  const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
  const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(
    _mm512_mask_blend_epi64(upper, lo, hi), _mm512_maskz_slli_epi64(0xff, ki, 47)));
  const __m512d c0 = _mm512_set1_pd(0x1.c6af84b912394p-5 / n / n / n);
  const __m512d c1 = _mm512_set1_pd(0x1.ebfce50fac4f3p-3 / n / n);
  const __m512d c2 = _mm512_set1_pd(0x1.62e42ff0c52d6p-1 / n);
  const __m512d p = _mm512_fmadd_pd(c0, r, c1);
  const __m512d y = _mm512_fmadd_pd(
    p, _mm512_mul_pd(r, r), _mm512_fmadd_pd(c2, r, _mm512_set1_pd(1.0)));
  return _mm512_maskz_cvtpd_ps(0xff, _mm512_mul_pd(y, s));
}

/// es[i] = std::exp(xs[i]) for each bit i of `lanes`: the lanes whose
/// special cases the vector steps leave to libm.
inline void exp_lanes_by_libm(const float* xs, float* es, unsigned lanes) {
  for (; lanes != 0; lanes &= lanes - 1) {
    const int i = __builtin_ctz(lanes);
    es[i] = std::exp(xs[i]);
  }
}

/// std::exp of 16 floats: expf_libm8 where |x| < 88, 0 for -inf, libm's
/// call elsewhere (glibc's other special cases: over- and underflow, +inf,
/// NaN).
__attribute__((target("avx512f"), always_inline)) inline __m512
expf_libm16_avx512(__m512 x) {
  const __m512d xd = _mm512_castps_pd(x);
  const __m256 e0 =
    expf_libm8(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, xd, 0)));
  const __m256 e1 =
    expf_libm8(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, xd, 1)));
  __m512 e = _mm512_castpd_ps(_mm512_maskz_insertf64x4(
    0xff, _mm512_castpd256_pd512(_mm256_castps_pd(e0)), _mm256_castps_pd(e1),
    1));
  // libm's first special case here too: expf(-inf) = 0 (a first cell's
  // rescale of the empty sum).
  const __mmask16 ninf = _mm512_cmpeq_epi32_mask(
    _mm512_castps_si512(x), _mm512_set1_epi32(static_cast<int>(0xff800000u)));
  e = _mm512_mask_mov_ps(e, ninf, _mm512_setzero_ps());
  const __mmask16 libm = static_cast<__mmask16>(
    _mm512_cmpge_epu32_mask(_mm512_and_si512(_mm512_castps_si512(x),
                                             _mm512_set1_epi32(0x7fffffff)),
                            _mm512_set1_epi32(0x42b00000)) // 88.0f
    & ~ninf);
  if (libm != 0) {
    alignas(64) float xs[16], es[16];
    _mm512_store_ps(xs, x);
    _mm512_store_ps(es, e);
    exp_lanes_by_libm(xs, es, libm);
    e = _mm512_load_ps(es);
  }
  return e;
}

/// expf_libm16_avx512 on 16 floats in memory, for callers without
/// AVX-512 code of their own.
__attribute__((target("avx512f"))) void expf_libm16_avx512(const float* x,
                                                           float* e) {
  _mm512_storeu_ps(e, expf_libm16_avx512(_mm512_loadu_ps(x)));
}

/// Whether `lanes` (expf on `width` floats in memory) gives this process's
/// std::exp bits: compared once per kernel, on every 4096th float of both
/// signs below 88 in magnitude and libm's special cases.
bool lanes_give_libm(void (*lanes)(const float*, float*), std::size_t width) {
  std::vector<float> x;
  for (std::uint32_t b = 0; b < 0x42b00000u; b += 4096)
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      float f;
      const std::uint32_t u = b | sign;
      std::memcpy(&f, &u, 4);
      x.push_back(f);
    }
  for (float f : {88.0f, -88.0f, 89.0f, -100.0f, -103.5f, -104.0f, inf,
                  -inf, std::numeric_limits<float>::quiet_NaN()})
    x.push_back(f);
  while (x.size() % width != 0)
    x.push_back(0.0f);
  std::vector<float> e(x.size());
  for (std::size_t i = 0; i < x.size(); i += width)
    lanes(x.data() + i, e.data() + i);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float want = std::exp(x[i]);
    if (std::memcmp(&want, &e[i], 4) != 0)
      return false;
  }
  return true;
}

/// Whether expf_libm16_avx512 gives this process's std::exp bits (false
/// without AVX-512).
bool expf_libm16_matches() {
  static const bool same = __builtin_cpu_supports("avx512f")
                           && lanes_give_libm(expf_libm16_avx512, 16);
  return same;
}

/// Lanes k.. of v moved up k lanes, lanes below k `fill`.
template <int K>
__attribute__((target("avx512f"))) inline __m512 lanes_up(__m512 v,
                                                          __m512 fill) {
  const __m512i from = _mm512_sub_epi32(
    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
    _mm512_set1_epi32(K));
  return _mm512_mask_permutexvar_ps(fill, static_cast<__mmask16>(0xffffu << K),
                                    from, v);
}

/// online_step's maximum and weights for cells 0 .. n-1 (n <= 16) of
/// scores s (16 in memory): ms[c] and vs[c] as online_step gives cell
/// c's, in vector lanes. The maximum before each cell is a prefix scan
/// of _mm512_max_ps(later, earlier), which is online_step's "later if
/// greater" (a tie or a NaN keeps the earlier; NaN scores enter as -inf,
/// which no step takes); the cells that raise it take ms = expf(old -
/// s), the others vs = expf(s - old), 16 exponentials together
/// (expf_libm16_avx512 where `lanes`, else one expf each). The sum is left to
/// the caller (S = S * ms[c], then + vs[c]): a chain of two roundings a
/// cell, which the V pass hides where it runs beside it.
__attribute__((target("avx512f"), always_inline)) inline void
online_weights16(softmax_state& st, const float* s, std::size_t n,
                 bool lanes, float* ms, float* vs) {
  const __mmask16 in = static_cast<__mmask16>((1u << n) - 1);
  const __m512 ninf = _mm512_set1_ps(-inf);
  const __m512 sv = _mm512_maskz_loadu_ps(in, s);
  // NaN scores and lanes past n as -inf.
  const __m512 sc = _mm512_mask_mov_ps(
    ninf, _mm512_mask_cmp_ps_mask(in, sv, sv, _CMP_ORD_Q), sv);
  __m512 p = sc; // lane c: the maximum of cells 0 .. c
  p = _mm512_maskz_max_ps(0xffff, p, lanes_up<1>(p, ninf));
  p = _mm512_maskz_max_ps(0xffff, p, lanes_up<2>(p, ninf));
  p = _mm512_maskz_max_ps(0xffff, p, lanes_up<4>(p, ninf));
  p = _mm512_maskz_max_ps(0xffff, p, lanes_up<8>(p, ninf));
  const __m512 m0 = _mm512_set1_ps(st.M);
  p = _mm512_maskz_max_ps(0xffff, p, m0);
  // The maximum each cell finds: the previous cell's, st.M for cell 0.
  const __m512 old = lanes_up<1>(p, m0);
  const __mmask16 grew = _mm512_mask_cmp_ps_mask(in, sv, old, _CMP_GT_OQ);
  const __m512 arg = _mm512_mask_sub_ps(_mm512_sub_ps(sv, old), grew, old, sv);
  st.M = _mm512_cvtss_f32(_mm512_maskz_permutexvar_ps(
    0xffff, _mm512_set1_epi32(15), p));
  __m512 ev;
  if (lanes) {
    ev = expf_libm16_avx512(arg);
  } else {
    alignas(64) float e[16];
    _mm512_store_ps(e, arg);
    exp_lanes_by_libm(e, e, (1u << n) - 1u);
    ev = _mm512_load_ps(e);
  }
  const __m512 one = _mm512_set1_ps(1.0f);
  _mm512_mask_storeu_ps(ms, in, _mm512_mask_mov_ps(one, grew, ev));
  _mm512_mask_storeu_ps(vs, in, _mm512_mask_mov_ps(ev, grew, one));
}

/// One query head (qh: Q already rounded to half) over cache rows
/// c0 .. c1-1 (k, v at its KV head, `stride` floats apart), as one_chunk
/// does with an F16 cache: online softmax with expf, the V sum in a half
/// accumulator `acc` (head_dim floats, left unnormalized).
template <class KV>
softmax_state one_chunk_cells(const chunk_kernels<KV>& kf, const float* qh,
                              kv_rows<KV> k, kv_rows<KV> v, std::size_t c0,
                              std::size_t c1, std::size_t hd, float scale,
                              float* acc) {
  std::fill(acc, acc + hd, 0.0f);
  softmax_state st;
  for (std::size_t ic = c0; ic < c1; ++ic) {
    float s = kf.dot(k.row(ic), qh, hd);
    s = s * scale;
    s += 0.0f; // the mask of a visible cell
    const cell_step c = online_step(st, s);
    if (c.grew)
      kf.scale(acc, c.ms, hd);
    kf.mad(acc, v.row(ic), c.vs, hd);
  }
  return st;
}

// -- one_chunk for several heads at once -------------------------------------
//
// The query heads of one GQA group read the same cache rows. The AVX-512
// kernel walks the cells once for H of them: each cell's K and V rows are
// widened once, each head's half accumulator stays in registers. Every
// head's arithmetic is one_chunk_cells' own, in its order: interleaving
// independent heads only hides the latency of each accumulator's chain
// (fused multiply-add, round to half) behind the others'.

/// A head block's outputs: per head its state and its unnormalized half
/// accumulator (head_dim floats, acc_step apart).
struct heads_out {
  softmax_state* st;
  float* acc;
  std::size_t acc_step;
};

/// Asks for the cache lines of a row of n values (a hint: never faults).
template <class KV> inline void prefetch_row(const KV* p, std::size_t n) {
  const char* b = reinterpret_cast<const char*>(p);
  for (std::size_t i = 0; i < n * sizeof(KV); i += 64)
    __builtin_prefetch(b + i);
}

/// A cache row of 16 * NV values widened into NV registers.
template <int NV, class KV>
__attribute__((target("avx512f"))) inline void
load_row_avx512(const KV* p, __m512 (&row)[NV]) {
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j)
    row[j] = load_half_avx512(p + 16 * j);
}

/// Lanes 0-7 and 8-15 of x as doubles, and back (rounded to nearest):
/// the maskz forms, as above.
__attribute__((target("avx512f"))) inline __m512d widen_low8(__m512 x) {
  return _mm512_maskz_cvtps_pd(
    0xff, _mm256_castpd_ps(
            _mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(x), 0)));
}
__attribute__((target("avx512f"))) inline __m512d widen_high8(__m512 x) {
  return _mm512_maskz_cvtps_pd(
    0xff, _mm256_castpd_ps(
            _mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(x), 1)));
}
__attribute__((target("avx512f"))) inline __m512 narrow16(__m512d lo,
                                                         __m512d hi) {
  return _mm512_castpd_ps(_mm512_maskz_insertf64x4(
    0xff, _mm512_castps_pd(_mm512_castps256_ps512(
            _mm512_maskz_cvtpd_ps(0xff, lo))),
    _mm256_castps_pd(_mm512_maskz_cvtpd_ps(0xff, hi)), 1));
}

/// Rows r[0..15] of 16 floats transposed in place (r[i] lane c: row c's
/// element i): unpacks within 128-bit lanes, then the lanes moved; the
/// maskz forms, as above.
__attribute__((target("avx512f"), always_inline)) inline void
transpose16_avx512(__m512 (&r)[16]) {
  __m512 a[16];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    a[2 * k] = _mm512_maskz_unpacklo_ps(0xffff, r[2 * k], r[2 * k + 1]);
    a[2 * k + 1] = _mm512_maskz_unpackhi_ps(0xffff, r[2 * k], r[2 * k + 1]);
  }
  // b[4k + m], 128-bit lane L: element 4L + m of rows 4k .. 4k+3.
  __m512 b[16];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512d a0 = _mm512_castps_pd(a[4 * k]);
    const __m512d a1 = _mm512_castps_pd(a[4 * k + 1]);
    const __m512d a2 = _mm512_castps_pd(a[4 * k + 2]);
    const __m512d a3 = _mm512_castps_pd(a[4 * k + 3]);
    b[4 * k] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xff, a0, a2));
    b[4 * k + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xff, a0, a2));
    b[4 * k + 2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xff, a1, a3));
    b[4 * k + 3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xff, a1, a3));
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512 e01 =
      _mm512_maskz_shuffle_f32x4(0xffff, b[m], b[4 + m], 0x88);
    const __m512 o01 =
      _mm512_maskz_shuffle_f32x4(0xffff, b[m], b[4 + m], 0xdd);
    const __m512 e23 =
      _mm512_maskz_shuffle_f32x4(0xffff, b[8 + m], b[12 + m], 0x88);
    const __m512 o23 =
      _mm512_maskz_shuffle_f32x4(0xffff, b[8 + m], b[12 + m], 0xdd);
    r[m] = _mm512_maskz_shuffle_f32x4(0xffff, e01, e23, 0x88);
    r[4 + m] = _mm512_maskz_shuffle_f32x4(0xffff, o01, o23, 0x88);
    r[8 + m] = _mm512_maskz_shuffle_f32x4(0xffff, e01, e23, 0xdd);
    r[12 + m] = _mm512_maskz_shuffle_f32x4(0xffff, o01, o23, 0xdd);
  }
}

/// Cells per step of cells_heads_avx512.
constexpr std::size_t cells_step = 16;

/// The scores of cells b0 .. b0+n-1 (n <= cells_step) for H heads of
/// cells_heads_avx512 and their online softmax weights: each cell's K row
/// widened once, per head ggml_vec_dot_f16's four accumulators over
/// blocks of 64 (d[j % 4]) summed into dk, then per head the 16 cells'
/// trees together (reduce16_rows_avx512), scaled and masked (+ 0), and
/// online_weights16: st[h].M moves, ms[h][c] and vs[h][c] are cell c's.
/// A head_dim that is not a multiple of 64 leaves ggml a rest it sums in
/// double, one product after the other, from the tree's result (all of
/// the row below 64): the rest's products go to `rest` row by row, and
/// its sums run in cell lanes (8 cells to a register of doubles, each
/// lane its own cell's chain, in ggml's order) over 16 x 16 blocks of it
/// transposed in registers (columns gathered from memory cost twice as
/// much).
template <int NV, int H, class KV>
__attribute__((target("avx512f"))) void
cells_weights_avx512(const float* qh, std::size_t q_step, kv_rows<KV> k,
                     kv_rows<KV> v, std::size_t b0, std::size_t n,
                     std::size_t c1, float scale, bool lanes,
                     softmax_state* st, float (*ms)[cells_step],
                     float (*vs)[cells_step]) {
  constexpr int NT = NV & ~3; // registers in the blocks of 64
  constexpr int NR = NV - NT; // registers of the rest
  constexpr int R = 16 * NR;  // floats of the rest
  // Per head and cell the sum of the score's four accumulators.
  alignas(64) float dk[H][cells_step][16];
  // Per head and cell the rest's products.
  alignas(64) float rest[H][cells_step][R > 0 ? R : 1];
  for (std::size_t c = 0; c < n; ++c) {
    // The rows are a stride apart: K and V fetched ahead of their passes.
    if (b0 + c + 24 < c1)
      prefetch_row(k.row(b0 + c + 24), NV * 16);
    if (b0 + c + 8 < c1)
      prefetch_row(v.row(b0 + c + 8), NV * 16);
    __m512 row[NV];
    load_row_avx512<NV>(k.row(b0 + c), row);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const float* q = qh + static_cast<std::size_t>(h) * q_step;
      if constexpr (NT > 0) {
        __m512 d[4];
#pragma GCC unroll 16
        for (int j = 0; j < 4; ++j)
          d[j] = _mm512_fmadd_ps(row[j], _mm512_loadu_ps(q + 16 * j),
                                 _mm512_setzero_ps());
#pragma GCC unroll 16
        for (int j = 4; j < NT; ++j)
          d[j % 4] =
            _mm512_fmadd_ps(row[j], _mm512_loadu_ps(q + 16 * j), d[j % 4]);
        _mm512_store_ps(dk[h][c], _mm512_add_ps(_mm512_add_ps(d[0], d[2]),
                                                _mm512_add_ps(d[1], d[3])));
      }
#pragma GCC unroll 16
      for (int j = NT; j < NV; ++j)
        _mm512_store_ps(&rest[h][c][16 * (j - NT)],
                        _mm512_mul_ps(row[j], _mm512_loadu_ps(q + 16 * j)));
    }
  }
  for (int h = 0; h < H; ++h)
    for (std::size_t c = n; c < cells_step; ++c) {
      if constexpr (NT > 0)
        _mm512_store_ps(dk[h][c], _mm512_setzero_ps());
      if constexpr (R > 0)
        std::fill(rest[h][c], rest[h][c] + R, 0.0f);
    }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
    alignas(64) float s[cells_step];
    __m512 sum = NT > 0 ? reduce16_rows_avx512(&dk[h][0][0])
                        : _mm512_setzero_ps();
    if constexpr (R > 0) {
      // Cells 0-7 and 8-15 in double lanes, the rest's columns in order.
      __m512d lo = widen_low8(sum);
      __m512d hi = widen_high8(sum);
#pragma GCC unroll 1
      for (int jb = 0; jb < NR; ++jb) {
        __m512 col[16];
#pragma GCC unroll 16
        for (int c = 0; c < 16; ++c)
          col[c] = _mm512_load_ps(&rest[h][c][16 * jb]);
        transpose16_avx512(col);
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          lo = _mm512_add_pd(lo, widen_low8(col[i]));
          hi = _mm512_add_pd(hi, widen_high8(col[i]));
        }
      }
      sum = narrow16(lo, hi);
    }
    _mm512_store_ps(s, _mm512_add_ps(_mm512_mul_ps(sum, _mm512_set1_ps(scale)),
                                     _mm512_setzero_ps()));
    online_weights16(st[h], s, n, lanes, ms[h], vs[h]);
  }
}

/// H heads of NV 16-lane registers each (head_dim = 16 * NV:
/// ggml_vec_dot_f16's four accumulators over its blocks of 64 are
/// d[j % 4], the rest it sums in double). qh: the heads' queries rounded to half, q_step floats apart.
/// Steps of 16 cells: the scores and online softmax weights
/// (cells_weights_avx512: the trees, the maximum and the exponentials in
/// vector lanes, libm's bits), then the V sums replayed in one_chunk's
/// order: for each cell, the sum S (S * ms, then + vs), the rescale where
/// the maximum rose (a factor of 1 changes no half), then the fused
/// multiply-add rounded to half. The next step's weights are computed
/// before this step's V sums, so that their chain of latencies runs
/// beside the V pass instead of stalling it.
template <int NV, int H, class KV>
__attribute__((target("avx512f"))) void
cells_heads_avx512(const float* qh, std::size_t q_step, kv_rows<KV> k,
                   kv_rows<KV> v, std::size_t c0, std::size_t c1, float scale,
                   const heads_out& o) {
  static_assert(NV >= 1 && H * NV <= 16, "registers");
  __m512 a[H][NV];
  softmax_state st[H];
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j)
      a[h][j] = _mm512_setzero_ps();
  }
  // Two steps' weights: ms (the rescale) and vs (the V weight).
  float vs[2][H][cells_step];
  float ms[2][H][cells_step];
  const bool lanes = expf_libm16_matches();
  int cur = 0;
  if (c0 < c1)
    cells_weights_avx512<NV, H>(qh, q_step, k, v, c0,
                                std::min(cells_step, c1 - c0), c1, scale,
                                lanes, st, ms[0], vs[0]);
  for (std::size_t b0 = c0; b0 < c1; b0 += cells_step, cur ^= 1) {
    const std::size_t n = std::min(cells_step, c1 - b0);
    const std::size_t b1 = b0 + cells_step;
    if (b1 < c1)
      cells_weights_avx512<NV, H>(qh, q_step, k, v, b1,
                                  std::min(cells_step, c1 - b1), c1, scale,
                                  lanes, st, ms[cur ^ 1], vs[cur ^ 1]);
    for (std::size_t c = 0; c < n; ++c) {
      __m512 row[NV];
      load_row_avx512<NV>(v.row(b0 + c), row);
#pragma GCC unroll 16
      for (int h = 0; h < H; ++h) {
        const float m = ms[cur][h][c];
        const float scaled = st[h].S * m;
        st[h].S = scaled + vs[cur][h][c];
        if (m != 1.0f) {
          const __m512 f = _mm512_set1_ps(m);
#pragma GCC unroll 16
          for (int j = 0; j < NV; ++j)
            a[h][j] = round_half_avx512(_mm512_mul_ps(a[h][j], f));
        }
        const __m512 w = _mm512_set1_ps(vs[cur][h][c]);
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j)
          a[h][j] = round_half_avx512(_mm512_fmadd_ps(row[j], w, a[h][j]));
      }
    }
  }
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
    float* acc = o.acc + static_cast<std::size_t>(h) * o.acc_step;
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j)
      _mm512_storeu_ps(acc + 16 * j, a[h][j]);
    o.st[h] = st[h];
  }
}

#define EXO_SLICED_NAME cells_heads_sliced_avx512
#define EXO_SLICED_TARGET __attribute__((target("avx512f")))
#define EXO_SLICED_VEC __m512
#define EXO_SLICED_LANES 16
#define EXO_SLICED_MAX_ACC 24
#define EXO_SLICED_STEP cells_step
#define EXO_SLICED_WEIGHTS cells_weights_avx512
#define EXO_SLICED_EXPF_LANES expf_libm16_matches
#define EXO_SLICED_LOADU _mm512_loadu_ps
#define EXO_SLICED_STOREU _mm512_storeu_ps
#define EXO_SLICED_SET1 _mm512_set1_ps
#define EXO_SLICED_MUL _mm512_mul_ps
#define EXO_SLICED_FMADD _mm512_fmadd_ps
#define EXO_SLICED_ROUND_HALF round_half_avx512
#define EXO_SLICED_LOAD_HALF load_half_avx512
#include "backends/host_attention_sliced.inc"
#include "backends/host_attention_sliced_undef.inc"

// -- one_chunk for several heads at once, AVX2 ---------------------------------
//
// cells_heads_avx512's steps on 8 lanes: the scores of 8 cells for H heads
// (each cell's K row widened once a block of 64 for all of them), their
// trees together (reduce16_rows_avx2), the rest in cell lanes (4 cells to a
// register of doubles), the maximum and the exponentials in vector lanes
// (glibc's expf steps, its table read by a gather), then the V sums in
// one_chunk's order. Sixteen registers hold no head of 128 and its V row
// at once: the V pass walks a step's cells once per slice of each head's
// accumulator (elements do not interact), the slice loaded from and
// stored to the output between steps.

/// expf of 4 floats with |x| < 88 in glibc's steps (expf_libm8's).
__attribute__((target("avx2,fma"), always_inline)) inline __m128
expf_libm4_avx2(__m128 x) {
  constexpr double n = 32.0;
  const __m256d z = _mm256_mul_pd(_mm256_cvtps_pd(x),
                                  _mm256_set1_pd(0x1.71547652b82fep+0 * n));
  const __m256d shift = _mm256_set1_pd(0x1.8p+52);
  const __m256d kd_shifted = _mm256_add_pd(z, shift);
  const __m256i ki = _mm256_castpd_si256(kd_shifted);
  const __m256d r = _mm256_sub_pd(z, _mm256_sub_pd(kd_shifted, shift));
  const __m256i t = _mm256_i64gather_epi64(
    reinterpret_cast<const long long*>(expf_table),
    _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
  const __m256d s =
    _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
  const __m256d c0 = _mm256_set1_pd(0x1.c6af84b912394p-5 / n / n / n);
  const __m256d c1 = _mm256_set1_pd(0x1.ebfce50fac4f3p-3 / n / n);
  const __m256d c2 = _mm256_set1_pd(0x1.62e42ff0c52d6p-1 / n);
  const __m256d p = _mm256_fmadd_pd(c0, r, c1);
  const __m256d y = _mm256_fmadd_pd(
    p, _mm256_mul_pd(r, r), _mm256_fmadd_pd(c2, r, _mm256_set1_pd(1.0)));
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
}

/// std::exp of 8 floats as expf_libm16_avx512 computes 16.
__attribute__((target("avx2,fma"), always_inline)) inline __m256
expf_libm8_avx2(__m256 x) {
  __m256 e = _mm256_set_m128(expf_libm4_avx2(_mm256_extractf128_ps(x, 1)),
                             expf_libm4_avx2(_mm256_castps256_ps128(x)));
  const __m256i xi = _mm256_castps_si256(x);
  const __m256i ninf =
    _mm256_cmpeq_epi32(xi, _mm256_set1_epi32(static_cast<int>(0xff800000u)));
  e = _mm256_andnot_ps(_mm256_castsi256_ps(ninf), e);
  // |x| >= 88 (NaN too) but not -inf: libm's call.
  const __m256i big = _mm256_cmpgt_epi32(
    _mm256_and_si256(xi, _mm256_set1_epi32(0x7fffffff)),
    _mm256_set1_epi32(0x42afffff));
  const int libm =
    _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_andnot_si256(ninf, big)));
  if (libm != 0) {
    alignas(32) float xs[8], es[8];
    _mm256_store_ps(xs, x);
    _mm256_store_ps(es, e);
    exp_lanes_by_libm(xs, es, static_cast<unsigned>(libm));
    e = _mm256_load_ps(es);
  }
  return e;
}

__attribute__((target("avx2,fma"))) void expf_libm8_avx2(const float* x,
                                                         float* e) {
  _mm256_storeu_ps(e, expf_libm8_avx2(_mm256_loadu_ps(x)));
}

/// Whether expf_libm8_avx2 gives this process's std::exp bits (false
/// without AVX2 and FMA).
bool expf_libm8_matches() {
  static const bool same = __builtin_cpu_supports("avx2")
                           && __builtin_cpu_supports("fma")
                           && lanes_give_libm(expf_libm8_avx2, 8);
  return same;
}

/// Lanes k.. of v moved up k lanes, lanes below k `fill`.
template <int K>
__attribute__((target("avx2"), always_inline)) inline __m256
lanes_up8(__m256 v, __m256 fill) {
  const __m256i from = _mm256_and_si256(
    _mm256_sub_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                     _mm256_set1_epi32(K)),
    _mm256_set1_epi32(7));
  return _mm256_blend_ps(_mm256_permutevar8x32_ps(v, from), fill,
                         (1 << K) - 1);
}

/// online_weights16 on 8 lanes: cells 0 .. n-1 (n <= 8) of scores s (8
/// in memory).
__attribute__((target("avx2,fma"), always_inline)) inline void
online_weights8(softmax_state& st, const float* s, std::size_t n, bool lanes,
                float* ms, float* vs) {
  const __m256 in = _mm256_castsi256_ps(
    _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  const __m256 ninf = _mm256_set1_ps(-inf);
  const __m256 sv = _mm256_loadu_ps(s);
  // NaN scores and lanes past n as -inf.
  const __m256 sc = _mm256_blendv_ps(
    ninf, sv, _mm256_and_ps(in, _mm256_cmp_ps(sv, sv, _CMP_ORD_Q)));
  __m256 p = sc; // lane c: the maximum of cells 0 .. c
  p = _mm256_max_ps(p, lanes_up8<1>(p, ninf));
  p = _mm256_max_ps(p, lanes_up8<2>(p, ninf));
  p = _mm256_max_ps(p, lanes_up8<4>(p, ninf));
  const __m256 m0 = _mm256_set1_ps(st.M);
  p = _mm256_max_ps(p, m0);
  // The maximum each cell finds: the previous cell's, st.M for cell 0.
  const __m256 old = lanes_up8<1>(p, m0);
  const __m256 grew = _mm256_and_ps(in, _mm256_cmp_ps(sv, old, _CMP_GT_OQ));
  const __m256 arg =
    _mm256_blendv_ps(_mm256_sub_ps(sv, old), _mm256_sub_ps(old, sv), grew);
  st.M = _mm_cvtss_f32(_mm_permute_ps(_mm256_extractf128_ps(p, 1), 0xff));
  __m256 ev;
  if (lanes) {
    ev = expf_libm8_avx2(arg);
  } else {
    alignas(32) float e[8];
    _mm256_store_ps(e, arg);
    exp_lanes_by_libm(e, e, (1u << n) - 1u);
    ev = _mm256_load_ps(e);
  }
  const __m256 one = _mm256_set1_ps(1.0f);
  _mm256_storeu_ps(ms, _mm256_blendv_ps(one, ev, grew));
  _mm256_storeu_ps(vs, _mm256_blendv_ps(ev, one, grew));
}

/// Rows r[0..7] of 8 floats transposed in place (r[i] lane c: row c's
/// element i).
__attribute__((target("avx2"), always_inline)) inline void
transpose8_avx2(__m256 (&r)[8]) {
  __m256 t[8];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  // u[4k + m], 128-bit lane L: element 4L + m of rows 4k .. 4k+3.
  __m256 u[8];
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) {
    u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * k + 1] =
      _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * k + 2] =
      _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * k + 3] =
      _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
    r[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
  }
}

__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256
round_half_avx2(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

/// ggml's four 16-lane accumulators as 8 registers (accumulator j's
/// lanes 0-7 in d[2j], 8-15 in d[2j+1]) summed as dot_f16 sums them, (a0
/// + a2) + (a1 + a3), then the tree's first step (lanes i + i+8): the 8
/// floats reduce16_rows_avx2 takes.
__attribute__((target("avx2"), always_inline)) inline __m256
first_tree_avx2(const __m256 (&d)[8]) {
  const __m256 lo =
    _mm256_add_ps(_mm256_add_ps(d[0], d[4]), _mm256_add_ps(d[2], d[6]));
  const __m256 hi =
    _mm256_add_ps(_mm256_add_ps(d[1], d[5]), _mm256_add_ps(d[3], d[7]));
  return _mm256_add_ps(hi, lo);
}

/// Cells per step of cells_heads_avx2.
constexpr std::size_t cells_step8 = 8;

/// cells_weights_avx512 on 8 lanes for cells b0 .. b0+n-1 (n <= 8): per
/// cell and block of 64 the K row widened once, per head ggml's four
/// 16-lane accumulators as 8 registers (lanes 0-7 and 8-15 of each),
/// their first sum (halves: lanes i + i+8) stored per cell and the rest of
/// the tree run for the 8 cells together; the part past the blocks of 64
/// as products per cell, summed in double cell lanes after an 8 x 8
/// transpose.
template <int NV, int H, class KV>
__attribute__((target("avx2,fma,f16c"))) void
cells_weights_avx2(const float* qh, std::size_t q_step, kv_rows<KV> k,
                   kv_rows<KV> v, std::size_t b0, std::size_t n,
                   std::size_t c1, float scale, bool lanes, softmax_state* st,
                   float (*ms)[cells_step8], float (*vs)[cells_step8]) {
  constexpr int NB = NV / 8;      // blocks of 64
  constexpr int NR = NV - 8 * NB; // registers of the rest
  constexpr int R = 8 * NR;       // floats of the rest
  alignas(32) float t3[H][cells_step8][8];
  alignas(32) float rest[H][cells_step8][R > 0 ? R : 1];
  for (std::size_t c = 0; c < n; ++c) {
    if (b0 + c + 16 < c1)
      prefetch_row(k.row(b0 + c + 16), NV * 8);
    if (b0 + c + 8 < c1)
      prefetch_row(v.row(b0 + c + 8), NV * 8);
    const KV* kr = k.row(b0 + c);
    if constexpr (NB > 1) {
      // The row widened once into L1, then each head's 8 accumulators
      // (ggml's four of 16 lanes: accumulator j's lanes 0-7 are d[2j],
      // 8-15 d[2j+1]) over the blocks in order, in registers.
      alignas(32) float kf[64 * NB];
#pragma GCC unroll 16
      for (int j = 0; j < 8 * NB; ++j)
        _mm256_store_ps(kf + 8 * j, load_half_avx2(kr + 8 * j));
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) {
        const float* q = qh + static_cast<std::size_t>(h) * q_step;
        __m256 d[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j)
          d[j] = _mm256_fmadd_ps(_mm256_load_ps(kf + 8 * j),
                                 _mm256_loadu_ps(q + 8 * j),
                                 _mm256_setzero_ps());
#pragma GCC unroll 4
        for (int b = 1; b < NB; ++b)
#pragma GCC unroll 8
          for (int j = 0; j < 8; ++j)
            d[j] = _mm256_fmadd_ps(_mm256_load_ps(kf + 64 * b + 8 * j),
                                   _mm256_loadu_ps(q + 64 * b + 8 * j), d[j]);
        _mm256_store_ps(t3[h][c], first_tree_avx2(d));
      }
    } else if constexpr (NB == 1) {
      // One block: the row in registers for every head.
      __m256 row[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
        row[j] = load_half_avx2(kr + 8 * j);
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) {
        const float* q = qh + static_cast<std::size_t>(h) * q_step;
        __m256 d[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j)
          d[j] = _mm256_fmadd_ps(row[j], _mm256_loadu_ps(q + 8 * j),
                                 _mm256_setzero_ps());
        _mm256_store_ps(t3[h][c], first_tree_avx2(d));
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m256 row = load_half_avx2(kr + 64 * NB + 8 * j);
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h)
        _mm256_store_ps(
          &rest[h][c][8 * j],
          _mm256_mul_ps(row, _mm256_loadu_ps(qh + static_cast<std::size_t>(h)
                                                      * q_step
                                             + 64 * NB + 8 * j)));
    }
  }
  for (int h = 0; h < H; ++h)
    for (std::size_t c = n; c < cells_step8; ++c) {
      if constexpr (NB > 0)
        _mm256_store_ps(t3[h][c], _mm256_setzero_ps());
      if constexpr (R > 0)
        std::fill(rest[h][c], rest[h][c] + R, 0.0f);
    }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
    alignas(32) float s[cells_step8];
    __m256 sum =
      NB > 0 ? reduce16_rows_avx2(&t3[h][0][0]) : _mm256_setzero_ps();
    if constexpr (R > 0) {
      // Cells 0-3 and 4-7 in double lanes, the rest's columns in order.
      __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(sum));
      __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(sum, 1));
#pragma GCC unroll 1
      for (int jb = 0; jb < NR; ++jb) {
        __m256 col[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c)
          col[c] = _mm256_load_ps(&rest[h][c][8 * jb]);
        transpose8_avx2(col);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(col[i])));
          hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(col[i], 1)));
        }
      }
      sum = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
    }
    _mm256_store_ps(s, _mm256_add_ps(_mm256_mul_ps(sum, _mm256_set1_ps(scale)),
                                     _mm256_setzero_ps()));
    online_weights8(st[h], s, n, lanes, ms[h], vs[h]);
  }
}

/// Registers of each head's accumulator a sliced kernel's V pass holds
/// at once: the most that divides NV with H of them in at most MaxAcc.
template <int NV, int H, int MaxAcc> constexpr int slice_width() {
  int s = MaxAcc / H < NV ? MaxAcc / H : NV;
  while (NV % s != 0)
    --s;
  return s;
}

#define EXO_SLICED_NAME cells_heads_avx2
#define EXO_SLICED_TARGET __attribute__((target("avx2,fma,f16c")))
#define EXO_SLICED_VEC __m256
#define EXO_SLICED_LANES 8
#define EXO_SLICED_MAX_ACC 12
#define EXO_SLICED_STEP cells_step8
#define EXO_SLICED_WEIGHTS cells_weights_avx2
#define EXO_SLICED_EXPF_LANES expf_libm8_matches
#define EXO_SLICED_LOADU _mm256_loadu_ps
#define EXO_SLICED_STOREU _mm256_storeu_ps
#define EXO_SLICED_SET1 _mm256_set1_ps
#define EXO_SLICED_MUL _mm256_mul_ps
#define EXO_SLICED_FMADD _mm256_fmadd_ps
#define EXO_SLICED_ROUND_HALF round_half_avx2
#define EXO_SLICED_LOAD_HALF load_half_avx2
#include "backends/host_attention_sliced.inc"
#include "backends/host_attention_sliced_undef.inc"

template <class KV>
using cells_heads_fn = void (*)(const float*, std::size_t, kv_rows<KV>,
                                kv_rows<KV>, std::size_t, std::size_t, float,
                                const heads_out&);

/// The grouped-heads kernels of AVX-512: heads' accumulators in registers
/// for the whole call where they fit (two heads, or up to four of at most
/// 64 values), else in slices of up to 24 registers a step.
struct avx512_heads {
  static constexpr std::size_t lanes = 16;
  template <int NV, int H, class KV> static constexpr cells_heads_fn<KV> kernel() {
    if constexpr (H <= 2 || NV <= 4)
      return cells_heads_avx512<NV, H, KV>;
    else
      return cells_heads_sliced_avx512<NV, H, slice_width<NV, H, 24>(), KV>;
  }
};

/// The grouped-heads kernels of AVX2: accumulators in slices of up to 12
/// registers a step.
struct avx2_heads {
  static constexpr std::size_t lanes = 8;
  template <int NV, int H, class KV> static constexpr cells_heads_fn<KV> kernel() {
    return cells_heads_avx2<NV, H, slice_width<NV, H, 12>(), KV>;
  }
};

/// Isa's kernels for 1-4 heads of head_dim HD (none for 112: no model has
/// it).
template <class Isa, std::size_t HD, class KV>
constexpr std::array<cells_heads_fn<KV>, 4> heads_row() {
  constexpr int nv = static_cast<int>(HD / Isa::lanes);
  if constexpr (HD == 112)
    return {};
  else
    return {Isa::template kernel<nv, 1, KV>(), Isa::template kernel<nv, 2, KV>(),
            Isa::template kernel<nv, 3, KV>(), Isa::template kernel<nv, 4, KV>()};
}

/// Isa's kernel for `heads` heads of head_dim hd (16 .. 128 in steps of 16),
/// or null.
template <class Isa, class KV>
cells_heads_fn<KV> heads_kernel_of(std::size_t hd, std::size_t heads) {
  static constexpr std::array<std::array<cells_heads_fn<KV>, 4>, 8> table = {
    heads_row<Isa, 16, KV>(),  heads_row<Isa, 32, KV>(),
    heads_row<Isa, 48, KV>(),  heads_row<Isa, 64, KV>(),
    heads_row<Isa, 80, KV>(),  heads_row<Isa, 96, KV>(),
    heads_row<Isa, 112, KV>(), heads_row<Isa, 128, KV>()};
  return table[hd / 16 - 1][heads - 1];
}

/// The grouped-heads kernel for `heads` heads of head_dim hd on this CPU
/// (AVX-512, else AVX2), or null where there is none (another width, no
/// such ISA, more than 4 heads).
template <class KV>
cells_heads_fn<KV> cells_heads_kernel(std::size_t hd, std::size_t heads) {
  if (heads < 1 || heads > 4 || hd % 16 != 0 || hd < 16 || hd > 128)
    return nullptr;
  if (use_avx512())
    return heads_kernel_of<avx512_heads, KV>(hd, heads);
  if (use_avx2())
    return heads_kernel_of<avx2_heads, KV>(hd, heads);
  return nullptr;
}

/// How many heads of head_dim hd one kernel call takes: the most
/// cells_heads_kernel has a kernel for (1 without one).
std::size_t heads_per_block(std::size_t hd) {
  std::size_t h = 4;
  while (h > 1 && !cells_heads_kernel<float>(hd, h))
    --h;
  return h;
}

/// `heads` query heads sharing a KV head (qh: their queries rounded to
/// half, hd apart) over cache rows c0 .. c1-1 as one_chunk_cells computes
/// each of them.
template <class KV>
void one_chunk_heads(const chunk_kernels<KV>& kf, const float* qh,
                     std::size_t heads, kv_rows<KV> k, kv_rows<KV> v,
                     std::size_t c0, std::size_t c1, std::size_t hd,
                     float scale, const heads_out& o) {
  if (auto fn = cells_heads_kernel<KV>(hd, heads)) {
    fn(qh, hd, k, v, c0, c1, scale, o);
    return;
  }
  for (std::size_t h = 0; h < heads; ++h)
    o.st[h] = one_chunk_cells(kf, qh + h * hd, k, v, c0, c1, hd, scale,
                              o.acc + h * o.acc_step);
}

/// The KV length llama.cpp's graph sees for a sequence of n_pos cells: the
/// cache's used cells padded to a multiple of 256 (llama_kv_cache::
/// get_n_kv; the padding cells are masked).
std::size_t llama_kv_length(std::size_t n_pos) {
  return (n_pos + 255) / 256 * 256;
}

/// Scratch of one block of up to `block` heads (st: one chunk's states;
/// run: the split-KV merge's running states).
struct heads_scratch {
  std::vector<float> qh, acc, fin;
  std::vector<softmax_state> st, run;
  heads_scratch(std::size_t block, std::size_t hd)
      : qh(block * hd), acc(block * hd), fin(block * hd), st(block),
        run(block) {}
};

/// One query row's heads (q: `heads` heads, hd apart, sharing k and v) as
/// one_chunk computes them over cache rows 0 .. n_pos-1: one_chunk_cells,
/// then divided by the sum.
template <class KV>
void one_chunk_rows(const chunk_kernels<KV>& kf, const float* q,
                    std::size_t heads, kv_rows<KV> k, kv_rows<KV> v,
                    std::size_t n_pos, std::size_t hd, float scale,
                    heads_scratch& sc, float* out) {
  round_to_f16(q, sc.qh.data(), heads * hd);
  one_chunk_heads(kf, sc.qh.data(), heads, k, v, 0, n_pos, hd, scale,
                  {sc.st.data(), sc.acc.data(), hd});
  for (std::size_t h = 0; h < heads; ++h) {
    const float S = sc.st[h].S;
    const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (std::size_t d = 0; d < hd; ++d)
      out[h * hd + d] = sc.acc[h * hd + d] * s_inv;
  }
}

/// One token's query heads as ggml's split-KV path computes them with
/// `splits` threads (one token over 512 padded cells or more): the padded
/// length cut into `splits` chunks of ceil(n_kv / splits) cells, one_chunk
/// over each chunk's visible cells (M, S and the half accumulator widened
/// to F32), then ggml_flash_attn_ext_reduce_partials: chunks merged in
/// order, each rescaled by expf of its maximum's distance to the running
/// one, the running sum and output as GCC contracts them
/// (fma(old, scale_old, chunk * scale_new)), finally divided by the sum.
template <class KV>
void split_kv_rows(const chunk_kernels<KV>& kf, const float* q,
                   std::size_t heads, kv_rows<KV> k, kv_rows<KV> v,
                   std::size_t n_pos, std::size_t hd, float scale,
                   std::size_t splits, heads_scratch& sc, float* out) {
  round_to_f16(q, sc.qh.data(), heads * hd);
  const std::size_t n_kv = llama_kv_length(n_pos);
  const std::size_t chunk = (n_kv + splits - 1) / splits;
  std::fill(sc.fin.begin(), sc.fin.begin() + heads * hd, 0.0f);
  auto& run = sc.run;
  std::fill(run.begin(), run.begin() + heads, softmax_state{});
  for (std::size_t c0 = 0; c0 < n_kv && c0 < n_pos; c0 += chunk) {
    const std::size_t c1 = std::min(c0 + chunk, n_pos);
    one_chunk_heads(kf, sc.qh.data(), heads, k, v, c0, c1, hd, scale,
                    {sc.st.data(), sc.acc.data(), hd});
    for (std::size_t h = 0; h < heads; ++h) {
      const softmax_state part = sc.st[h];
      if (part.S == 0.0f)
        continue;
      float& M = run[h].M;
      float& S = run[h].S;
      const float m_new = std::fmax(M, part.M);
      const float scale_old = std::exp(M - m_new);
      const float scale_new = std::exp(part.M - m_new);
      float* fin = sc.fin.data() + h * hd;
      const float* acc = sc.acc.data() + h * hd;
      for (std::size_t d = 0; d < hd; ++d)
        fin[d] = std::fma(fin[d], scale_old, acc[d] * scale_new);
      S = std::fma(S, scale_old, part.S * scale_new);
      M = m_new;
    }
  }
  for (std::size_t h = 0; h < heads; ++h) {
    const float S = run[h].S;
    const float s_inv = S != 0.0f ? 1.0f / S : 0.0f;
    for (std::size_t d = 0; d < hd; ++d)
      out[h * hd + d] =
        S != 0.0f ? sc.fin[h * hd + d] * s_inv : sc.fin[h * hd + d];
  }
}

// -- tiled: ggml_compute_forward_flash_attn_ext_tiled -----------------------
//
// ggml computes 64 query rows x 64 cache cells at a time with simd_gemm:
// every score is a chain of fused multiply-adds over head_dim from zero
// (Q in F32, K widened from half), every output element a chain over the
// tile's cells continuing from its value. Rows do not interact, masked
// cells weigh exactly 0 (fma(0, v, a) == a) and a tile without a visible
// cell changes nothing, so computing row by row over the visible cells of
// each tile gives ggml's bits.

/// One KV head's cache tile, rounded to half: kt[d][c] (transposed, as ggml
/// packs it) and vt[c][d], cells past `cells` zero.
struct kv_tile {
  std::vector<float> kt, vt;
  std::size_t cells = 0;
};

template <class KV>
void pack_tile(kv_rows<KV> k, kv_rows<KV> v, std::size_t c0,
               std::size_t cells, std::size_t hd, kv_tile& t) {
  t.kt.assign(hd * fa_tile, 0.0f);
  t.vt.assign(fa_tile * hd, 0.0f);
  t.cells = cells;
  std::vector<float> row(hd);
  for (std::size_t c = 0; c < cells; ++c) {
    widen_row(k.row(c0 + c), row.data(), hd);
    for (std::size_t d = 0; d < hd; ++d)
      t.kt[d * fa_tile + c] = row[d];
    widen_row(v.row(c0 + c), t.vt.data() + c * hd, hd);
  }
}

/// kq[c] = sum over d of q[d] * kt[d][c], one fused multiply-add per d in
/// order, from 0 (simd_gemm's chain for each score).
void tile_scores_scalar(const float* q, const float* kt, std::size_t hd,
                        float* kq) {
  std::fill(kq, kq + fa_tile, 0.0f);
  for (std::size_t d = 0; d < hd; ++d)
    for (std::size_t c = 0; c < fa_tile; ++c)
      kq[c] = std::fma(kt[d * fa_tile + c], q[d], kq[c]);
}

__attribute__((target("avx2,fma"))) void
tile_scores_avx2(const float* q, const float* kt, std::size_t hd, float* kq) {
  __m256 a[8];
  for (auto& x : a)
    x = _mm256_setzero_ps();
  for (std::size_t d = 0; d < hd; ++d) {
    const __m256 qd = _mm256_set1_ps(q[d]);
    for (int j = 0; j < 8; ++j)
      a[j] =
          _mm256_fmadd_ps(_mm256_loadu_ps(kt + d * fa_tile + 8 * j), qd, a[j]);
  }
  for (int j = 0; j < 8; ++j)
    _mm256_storeu_ps(kq + 8 * j, a[j]);
}

__attribute__((target("avx512f"))) void
tile_scores_avx512(const float* q, const float* kt, std::size_t hd, float* kq) {
  __m512 a[4];
  for (auto& x : a)
    x = _mm512_setzero_ps();
  for (std::size_t d = 0; d < hd; ++d) {
    const __m512 qd = _mm512_set1_ps(q[d]);
    for (int j = 0; j < 4; ++j)
      a[j] =
          _mm512_fmadd_ps(_mm512_loadu_ps(kt + d * fa_tile + 16 * j), qd, a[j]);
  }
  for (int j = 0; j < 4; ++j)
    _mm512_storeu_ps(kq + 16 * j, a[j]);
}

/// ggml_vec_soft_max_f32 over the 64 scores: p = v_expf(x - max) in place;
/// returns the double sum of each 16-lane group's reduce_add.
double tile_softmax_scalar(float* kq, float max) {
  double sum = 0.0;
  for (std::size_t g = 0; g < fa_tile; g += 16) {
    for (std::size_t l = g; l < g + 16; ++l)
      kq[l] = expf_lane(kq[l] - max);
    sum += static_cast<double>(reduce16(kq + g));
  }
  return sum;
}

__attribute__((target("avx2,fma"))) double tile_softmax_avx2(float* kq,
                                                             float max) {
  double sum = 0.0;
  const __m256 mv = _mm256_set1_ps(max);
  for (std::size_t g = 0; g < fa_tile; g += 16) {
    __m256 lo = expf_avx2(_mm256_sub_ps(_mm256_loadu_ps(kq + g), mv));
    __m256 hi = expf_avx2(_mm256_sub_ps(_mm256_loadu_ps(kq + g + 8), mv));
    _mm256_storeu_ps(kq + g, lo);
    _mm256_storeu_ps(kq + g + 8, hi);
    sum += static_cast<double>(reduce16_avx2(lo, hi));
  }
  return sum;
}

__attribute__((target("avx512f"))) double tile_softmax_avx512(float* kq,
                                                              float max) {
  double sum = 0.0;
  const __m512 mv = _mm512_set1_ps(max);
  for (std::size_t g = 0; g < fa_tile; g += 16) {
    __m512 p = expf_avx512(_mm512_sub_ps(_mm512_loadu_ps(kq + g), mv));
    _mm512_storeu_ps(kq + g, p);
    sum += static_cast<double>(reduce16_avx512(p));
  }
  return sum;
}

/// acc[d] = fma(vt[c][d], p[c], acc[d]) for c = 0 .. cells-1 in order.
void tile_values_scalar(const float* p, const float* vt, std::size_t cells,
                        std::size_t hd, float* acc) {
  for (std::size_t c = 0; c < cells; ++c)
    for (std::size_t d = 0; d < hd; ++d)
      acc[d] = std::fma(vt[c * hd + d], p[c], acc[d]);
}

__attribute__((target("avx2,fma"))) void
tile_values_avx2(const float* p, const float* vt, std::size_t cells,
                 std::size_t hd, float* acc) {
  std::size_t d = 0;
  for (; d + 8 <= hd; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (std::size_t c = 0; c < cells; ++c)
      a = _mm256_fmadd_ps(_mm256_loadu_ps(vt + c * hd + d),
                          _mm256_set1_ps(p[c]), a);
    _mm256_storeu_ps(acc + d, a);
  }
  for (; d < hd; ++d)
    for (std::size_t c = 0; c < cells; ++c)
      acc[d] = std::fma(vt[c * hd + d], p[c], acc[d]);
}

__attribute__((target("avx512f"))) void
tile_values_avx512(const float* p, const float* vt, std::size_t cells,
                   std::size_t hd, float* acc) {
  std::size_t d = 0;
  for (; d + 16 <= hd; d += 16) {
    __m512 a = _mm512_loadu_ps(acc + d);
    for (std::size_t c = 0; c < cells; ++c)
      a = _mm512_fmadd_ps(_mm512_loadu_ps(vt + c * hd + d),
                          _mm512_set1_ps(p[c]), a);
    _mm512_storeu_ps(acc + d, a);
  }
  for (; d < hd; ++d)
    for (std::size_t c = 0; c < cells; ++c)
      acc[d] = std::fma(vt[c * hd + d], p[c], acc[d]);
}

struct tile_kernels {
  void (*scores)(const float*, const float*, std::size_t, float*);
  double (*softmax)(float*, float);
  void (*values)(const float*, const float*, std::size_t, std::size_t, float*);
};

tile_kernels tile_kernels_now() {
  if (use_avx512())
    return {tile_scores_avx512, tile_softmax_avx512, tile_values_avx512};
  if (use_avx2())
    return {tile_scores_avx2, tile_softmax_avx2, tile_values_avx2};
  return {tile_scores_scalar, tile_softmax_scalar, tile_values_scalar};
}

/// The running state of one query row and head in the tiled path.
struct row_state {
  float S = 0.0f;
  float M = -inf;
};

/// One query row (at position pos) of one head meets tile t starting at
/// cell c0: ggml's per-row steps of the tiled loop.
void tile_row(const tile_kernels& kf, const float* q, const kv_tile& t,
              std::size_t c0, std::size_t pos, std::size_t hd, float scale,
              row_state& st, float* acc) {
  const std::size_t visible = std::min(t.cells, pos + 1 - c0);
  float kq[fa_tile];
  kf.scores(q, t.kt.data(), hd, kq);
  for (std::size_t c = 0; c < fa_tile; ++c)
    kq[c] = c < visible ? kq[c] * scale + 0.0f : -inf;
  float tile_max = -inf;
  for (float x : kq)
    tile_max = tile_max > x ? tile_max : x; // ggml_vec_max_f32's MAX
  if (tile_max == -inf)
    return;
  const float m_old = st.M;
  const float m_new = std::fmax(m_old, tile_max);
  if (m_new > m_old) {
    const float ms = std::exp(m_old - m_new);
    for (std::size_t d = 0; d < hd; ++d)
      acc[d] *= ms;
    st.S *= ms;
  }
  st.M = m_new;
  st.S = static_cast<float>(static_cast<double>(st.S) + kf.softmax(kq, m_new));
  kf.values(kq, t.vt.data(), visible, hd, acc);
}

template <class KV>
void attention_tiled(const float* q, kv_rows<KV> k, kv_rows<KV> v,
                     float* out, const attention_dims& d, int threads) {
  const std::size_t hd = d.head_dim;
  const std::size_t group = d.n_heads / d.n_kv_heads;
  const std::size_t row = d.n_heads * hd;
  const std::size_t blocks = (d.n_tokens + fa_tile - 1) / fa_tile;
  const long jobs = static_cast<long>(d.n_kv_heads * blocks);
  const tile_kernels kf = tile_kernels_now();
  struct scratch {
    kv_tile t;
    std::vector<float> acc;
    std::vector<row_state> st;
  };
  auto make = [] { return scratch{}; };
  for_each_job(jobs, threads, make, [&](long job, scratch& sc) {
    auto& t = sc.t;
    auto& acc = sc.acc;
    auto& st = sc.st;
    const auto uj = static_cast<std::size_t>(job);
    const std::size_t g = uj / blocks; // KV head
    // The last rows first: they see the most cells, and the dynamic
    // schedule then ends on the cheapest jobs, not on one thread's longest.
    const std::size_t t0 = (blocks - 1 - uj % blocks) * fa_tile;
    const std::size_t t1 = std::min(d.n_tokens, t0 + fa_tile);
    const std::size_t rows = (t1 - t0) * group;
    acc.assign(rows * hd, 0.0f);
    st.assign(rows, row_state{});
    const std::size_t end = d.pos0 + t1; // cells any row of the block sees
    for (std::size_t c0 = 0; c0 < end; c0 += fa_tile) {
      pack_tile(k.at(g * hd), v.at(g * hd), c0, std::min(fa_tile, end - c0),
                hd, t);
      for (std::size_t tt = t0; tt < t1; ++tt) {
        const std::size_t pos = d.pos0 + tt;
        if (pos < c0)
          continue; // no visible cell in this tile
        for (std::size_t j = 0; j < group; ++j) {
          const std::size_t h = g * group + j;
          const std::size_t r = (tt - t0) * group + j;
          tile_row(kf, q + tt * row + h * hd, t, c0, pos, hd, d.scale, st[r],
                   acc.data() + r * hd);
        }
      }
    }
    for (std::size_t tt = t0; tt < t1; ++tt)
      for (std::size_t j = 0; j < group; ++j) {
        const std::size_t r = (tt - t0) * group + j;
        const float s = st[r].S;
        const float s_inv = s == 0.0f ? 0.0f : 1.0f / s;
        float* o = out + tt * row + (g * group + j) * hd;
        for (std::size_t e = 0; e < hd; ++e)
          o[e] = acc[r * hd + e] * s_inv;
      }
  });
}

/// The heads a job of a chunked attention takes: the most a kernel call
/// takes (`most`, at most the GQA group), fewer where that would leave
/// some of `threads` without a job (one token over few KV heads: a model
/// with 2 KV heads and groups of 7 is 4 jobs in blocks of 4, 14 alone).
/// Each head's arithmetic is its own whatever the block: the bits do not
/// depend on it.
std::size_t block_for_threads(const attention_dims& d, std::size_t most,
                              int threads) {
  const std::size_t group = d.n_heads / d.n_kv_heads;
  std::size_t block = std::min(group, most);
  const auto want = static_cast<std::size_t>(std::max(1, threads));
  while (block > 1
         && d.n_tokens * d.n_kv_heads * ((group + block - 1) / block) < want)
    --block;
  return block;
}

/// The jobs of a chunked attention: one token's block of up to `block`
/// query heads of one KV head each.
struct head_blocks {
  const attention_dims& d;
  std::size_t block;
  std::size_t group = d.n_heads / d.n_kv_heads;
  std::size_t blocks = (group + block - 1) / block;
  long jobs() const {
    return static_cast<long>(d.n_tokens * d.n_kv_heads * blocks);
  }
  struct job_of {
    std::size_t t, g, heads, off; ///< token, KV head, heads, q/out offset
  };
  job_of of(long job) const {
    const auto uj = static_cast<std::size_t>(job);
    const std::size_t t = uj / (d.n_kv_heads * blocks);
    const std::size_t g = uj / blocks % d.n_kv_heads;
    const std::size_t h0 = g * group + uj % blocks * block;
    return {t, g, std::min(block, (g + 1) * group - h0),
            t * d.n_heads * d.head_dim + h0 * d.head_dim};
  }
};

template <class KV>
void attention_chunked(const float* q, kv_rows<KV> k, kv_rows<KV> v,
                       float* out, const attention_dims& d, int threads,
                       int llama_threads) {
  const std::size_t hd = d.head_dim;
  // A job: one token's block of up to `block` heads of one KV head.
  const head_blocks hb{d, block_for_threads(d, heads_per_block(hd), threads)};
  const chunk_kernels<KV> kf = chunk_kernels_now<KV>();
  const bool split = attention_split_kv(d, llama_threads);
  for_each_job(
    hb.jobs(), threads, [&] { return heads_scratch(hb.block, hd); },
    [&](long job, heads_scratch& sc) {
      const auto [t, g, heads, off] = hb.of(job);
      if (split)
        split_kv_rows(kf, q + off, heads, k.at(g * hd), v.at(g * hd),
                      d.pos0 + 1, hd, d.scale,
                      static_cast<std::size_t>(llama_threads), sc, out + off);
      else
        one_chunk_rows(kf, q + off, heads, k.at(g * hd), v.at(g * hd),
                       d.pos0 + t + 1, hd, d.scale, sc, out + off);
    });
}

// -- one_chunk over a Q8_0 cache ----------------------------------------------
//
// ggml_compute_forward_flash_attn_ext_f16_one_chunk with K and V of type
// Q8_0: Q quantized by the CPU backend's quantize_row_q8_0 (vec_dot_type of
// Q8_0), s = ggml_vec_dot_q8_0_q8_0, the V row decoded by
// dequantize_row_q8_0 (q * d, one rounding) and added by ggml_vec_mad_f32
// (fused multiply-adds; GCC contracts its leftovers the same way) into an
// f32 accumulator that ggml_vec_scale_f32 rescales by plain products.

/// Scratch of one job over a Q8_0 cache: up to `heads` query heads of one
/// KV head.
struct q8_scratch {
  std::vector<block_q8_0> qq; ///< the query heads as Q8_0, hd / 32 apart
  std::vector<float> acc, v32;
  std::vector<softmax_state> st;
  q8_scratch(std::size_t heads, std::size_t hd)
    : qq(heads * hd / 32), acc(heads * hd), v32(hd), st(heads) {}
};

/// ggml_vec_dot_q8_0_q8_0 and ggml's V steps (dequantize_row_q8_0, then
/// ggml_vec_mad_f32) on the portable path.
struct q8_kernels_scalar {
  static float dot(const block_q8_0* k, const block_q8_0* q, std::size_t nb) {
    return quant::vec_dot_portable(quant::ggml_type::q8_0, nb * 32, k, q);
  }
  static void decode(const block_q8_0* v, float* y, std::size_t nb) {
    for (std::size_t b = 0; b < nb; ++b) {
      const float d = f16_to_f32(v[b].d);
      for (std::size_t j = 0; j < 32; ++j)
        y[32 * b + j] = static_cast<float>(v[b].qs[j]) * d;
    }
  }
  static void mad(float* acc, const float* x, float w, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      acc[i] = std::fma(x[i], w, acc[i]);
  }
};

/// The same on AVX2 + FMA + F16C: ggml_vec_dot_q8_0_q8_0's AVX2 body (per
/// block |k| times q with k's signs, pairs summed: eight lanes of four
/// products, added to the lanes with d = dk * dq by fused multiply-adds;
/// hsum_float_8), the V bytes widened to floats times d, fused with w.
struct q8_kernels_avx2 {
  __attribute__((target("avx2,fma,f16c"))) static float
  dot(const block_q8_0* k, const block_q8_0* q, std::size_t nb) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (std::size_t b = 0; b < nb; ++b) {
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(k[b].d) * _cvtsh_ss(q[b].d));
      const __m256i qk =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k[b].qs));
      const __m256i qq =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[b].qs));
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qk, qk),
                                               _mm256_sign_epi8(qq, qk));
      const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
      acc = _mm256_fmadd_ps(d, p, acc);
    }
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(acc, 1),
                          _mm256_castps256_ps128(acc));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
  }
  __attribute__((target("avx2,fma,f16c"))) static void
  decode(const block_q8_0* v, float* y, std::size_t nb) {
    for (std::size_t b = 0; b < nb; ++b) {
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(v[b].d));
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(
          reinterpret_cast<const __m128i*>(v[b].qs + 8 * j)));
        _mm256_storeu_ps(y + 32 * b + 8 * j,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
      }
    }
  }
  __attribute__((target("avx2,fma,f16c"))) static void
  mad(float* acc, const float* x, float w, std::size_t n) {
    const __m256 wv = _mm256_set1_ps(w);
    for (std::size_t i = 0; i < n; i += 8) // n: a multiple of 32
      _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), wv,
                                                _mm256_loadu_ps(acc + i)));
  }
};

/// one_chunk's cells 0 .. n_pos-1 for `heads` query heads of one KV head
/// (qq: their queries as Q8_0): each head's online softmax in its own
/// order, as ggml runs it head by head; the V row decoded once for all.
template <class K>
__attribute__((always_inline)) inline void
cells_q8_0(const block_q8_0* qq, std::size_t heads, kv_rows<block_q8_0> k,
           kv_rows<block_q8_0> v, std::size_t n_pos, std::size_t hd,
           float scale, float* acc, float* v32, softmax_state* st) {
  const std::size_t nb = hd / 32;
  std::fill(acc, acc + heads * hd, 0.0f);
  for (std::size_t h = 0; h < heads; ++h)
    st[h] = softmax_state{};
  for (std::size_t ic = 0; ic < n_pos; ++ic) {
    const block_q8_0* kr = k.row(ic);
    K::decode(v.row(ic), v32, nb);
    for (std::size_t h = 0; h < heads; ++h) {
      float* a = acc + h * hd;
      float s = K::dot(kr, qq + h * nb, nb);
      s = s * scale;
      s += 0.0f; // the mask of a visible cell
      const cell_step c = online_step(st[h], s);
      if (c.grew)
        for (std::size_t d = 0; d < hd; ++d) // ggml_vec_scale_f32
          a[d] = a[d] * c.ms;
      K::mad(a, v32, c.vs, hd);
    }
  }
}

/// cells_q8_0 in steps of 16 cells on AVX-512: each head's scores of the
/// step (K::dot, as cells_q8_0), their softmax steps with the maximum and
/// the exponentials in vector lanes (online_weights16), then per cell the
/// V row decoded once and each head's sum, rescale and V sum in
/// cells_q8_0's order. At most 8 heads (one_chunk_q8_0's blocks).
template <class K>
__attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) inline void
cells_q8_0_steps(const block_q8_0* qq, std::size_t heads,
                 kv_rows<block_q8_0> k, kv_rows<block_q8_0> v,
                 std::size_t n_pos, std::size_t hd, float scale, float* acc,
                 float* v32, softmax_state* st) {
  const std::size_t nb = hd / 32;
  std::fill(acc, acc + heads * hd, 0.0f);
  for (std::size_t h = 0; h < heads; ++h)
    st[h] = softmax_state{};
  const bool lanes = expf_libm16_matches();
  alignas(64) float s[8][cells_step];
  float ms[8][cells_step], vs[8][cells_step];
  for (std::size_t b0 = 0; b0 < n_pos; b0 += cells_step) {
    const std::size_t n = std::min(cells_step, n_pos - b0);
    for (std::size_t c = 0; c < n; ++c) {
      const block_q8_0* kr = k.row(b0 + c);
      for (std::size_t h = 0; h < heads; ++h) {
        const float sc = K::dot(kr, qq + h * nb, nb) * scale;
        s[h][c] = sc + 0.0f; // the mask of a visible cell
      }
    }
    for (std::size_t h = 0; h < heads; ++h)
      online_weights16(st[h], s[h], n, lanes, ms[h], vs[h]);
    for (std::size_t c = 0; c < n; ++c) {
      K::decode(v.row(b0 + c), v32, nb);
      for (std::size_t h = 0; h < heads; ++h) {
        float* a = acc + h * hd;
        const float scaled = st[h].S * ms[h][c];
        st[h].S = scaled + vs[h][c];
        if (ms[h][c] != 1.0f)
          for (std::size_t d = 0; d < hd; ++d) // ggml_vec_scale_f32
            a[d] = a[d] * ms[h][c];
        K::mad(a, v32, vs[h][c], hd);
      }
    }
  }
}

__attribute__((target("avx512f,avx2,fma,f16c"))) void
cells_q8_0_avx512(const block_q8_0* qq, std::size_t heads,
                  kv_rows<block_q8_0> k, kv_rows<block_q8_0> v,
                  std::size_t n_pos, std::size_t hd, float scale, float* acc,
                  float* v32, softmax_state* st) {
  cells_q8_0_steps<q8_kernels_avx2>(qq, heads, k, v, n_pos, hd, scale, acc,
                                    v32, st);
}

__attribute__((target("avx2,fma,f16c"))) void
cells_q8_0_avx2(const block_q8_0* qq, std::size_t heads,
                kv_rows<block_q8_0> k, kv_rows<block_q8_0> v,
                std::size_t n_pos, std::size_t hd, float scale, float* acc,
                float* v32, softmax_state* st) {
  cells_q8_0<q8_kernels_avx2>(qq, heads, k, v, n_pos, hd, scale, acc, v32,
                              st);
}

void cells_q8_0_scalar(const block_q8_0* qq, std::size_t heads,
                       kv_rows<block_q8_0> k, kv_rows<block_q8_0> v,
                       std::size_t n_pos, std::size_t hd, float scale,
                       float* acc, float* v32, softmax_state* st) {
  cells_q8_0<q8_kernels_scalar>(qq, heads, k, v, n_pos, hd, scale, acc, v32,
                                st);
}

/// `heads` query heads q (hd floats each, hd apart) of one KV head over
/// cache rows 0 .. n_pos-1 of k and v (the KV head's blocks, `stride`
/// blocks apart): out = the heads' outputs, hd apart.
void one_chunk_q8_0(const float* q, std::size_t heads, kv_rows<block_q8_0> k,
                    kv_rows<block_q8_0> v, std::size_t n_pos, std::size_t hd,
                    float scale, q8_scratch& sc, float* out) {
  const std::size_t nb = hd / 32;
  for (std::size_t h = 0; h < heads; ++h) // q_to_vec_dot, head by head
    quantize_q8_0_activations(q + h * hd, sc.qq.data() + h * nb, hd);
  auto cells = use_avx512() ? cells_q8_0_avx512
               : use_avx2() ? cells_q8_0_avx2
                            : cells_q8_0_scalar;
  cells(sc.qq.data(), heads, k, v, n_pos, hd, scale, sc.acc.data(),
        sc.v32.data(), sc.st.data());
  for (std::size_t h = 0; h < heads; ++h) {
    const float S = sc.st[h].S;
    const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (std::size_t d = 0; d < hd; ++d)
      out[h * hd + d] = sc.acc[h * hd + d] * s_inv;
  }
}

} // namespace

void hadamard(const float* x, float* y, std::size_t count,
              std::size_t n) noexcept {
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (std::size_t r = 0; r < count; r += n) {
    const float* src = x + r;
    float* dst = y + r;
    for (std::size_t j = 0; j < n; ++j)
      dst[j] = src[j] * scale;
    for (std::size_t len = 1; len < n; len <<= 1)
      for (std::size_t i = 0; i < n; i += 2 * len)
        for (std::size_t j = 0; j < len; ++j) {
          const float u = dst[i + j];
          const float v = dst[i + len + j];
          dst[i + j] = u + v;
          dst[i + len + j] = u - v;
        }
  }
}

void attention(const float* q, const block_q8_0* k, const block_q8_0* v,
               float* out, const attention_dims& d, int threads) noexcept {
  const std::size_t hd = d.head_dim;
  // Strides in blocks of 32 values.
  const auto kr = rows_of(k, d, 32), vr = rows_of(v, d, 32);
  threads = attention_splits(d) ? std::max(1, threads) : 1;
  // A job: one token's block of up to 8 query heads of one KV head (they
  // share the decoded V rows).
  const head_blocks hb{d, block_for_threads(d, 8, threads)};
  for_each_job(
    hb.jobs(), threads, [&] { return q8_scratch(hb.block, hd); },
    [&](long job, q8_scratch& sc) {
      const auto [t, g, heads, off] = hb.of(job);
      one_chunk_q8_0(q + off, heads, kr.at(g * hd / 32), vr.at(g * hd / 32),
                     d.pos0 + t + 1, hd, d.scale, sc, out + off);
    });
}

float expf_ggml(float x) noexcept {
  return expf_lane(x);
}

namespace {

__attribute__((target("avx512f"))) double sum_exp_avx512(const float* x,
                                                          std::size_t n,
                                                          float shift,
                                                          std::size_t& i) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (; i + 16 <= n; i += 16) {
    const __m512 e = expf_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    lo = _mm512_add_pd(lo, widen_low8(e));
    hi = _mm512_add_pd(hi, widen_high8(e));
  }
  alignas(64) double out[8];
  _mm512_store_pd(out, _mm512_add_pd(lo, hi));
  return ((out[0] + out[1]) + (out[2] + out[3]))
         + ((out[4] + out[5]) + (out[6] + out[7]));
}

__attribute__((target("avx2,fma"))) double sum_exp_avx2(const float* x,
                                                        std::size_t n,
                                                        float shift,
                                                        std::size_t& i) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  for (; i + 8 <= n; i += 8) {
    const __m256 e = expf_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double out[4];
  _mm256_store_pd(out, _mm256_add_pd(lo, hi));
  return (out[0] + out[1]) + (out[2] + out[3]);
}

} // namespace

double sum_exp(const float* x, std::size_t n, float shift) noexcept {
  std::size_t i = 0;
  double sum = use_avx512() ? sum_exp_avx512(x, n, shift, i)
               : use_avx2() ? sum_exp_avx2(x, n, shift, i)
                            : 0.0;
  for (; i < n; ++i)
    sum += expf_lane(x[i] - shift);
  return sum;
}

void expf_libm16(const float* x, float* out) noexcept {
  if (use_avx512() && expf_libm16_matches()) {
    expf_libm16_avx512(x, out);
  } else if (use_avx2() && expf_libm8_matches()) {
    expf_libm8_avx2(x, out);
    expf_libm8_avx2(x + 8, out + 8);
  } else {
    for (int i = 0; i < 16; ++i)
      out[i] = std::exp(x[i]);
  }
}

bool expf_libm_lanes() noexcept {
  return (use_avx512() && expf_libm16_matches())
         || (use_avx2() && expf_libm8_matches());
}

void silu_mul(const float* gate, const float* up, float* out,
              std::size_t count) noexcept {
  std::size_t i = use_avx512() ? swiglu_groups_avx512(gate, up, out, count)
                  : use_avx2() ? swiglu_groups_avx2(gate, up, out, count)
                               : swiglu_groups_scalar(gate, up, out, count);
  for (; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i]; // ggml_silu_f32 (libm expf)
  }
}

bool attention_tiled_path(const attention_dims& d) noexcept {
  return d.n_tokens >= fa_tile && d.head_dim % 16 == 0;
}

bool attention_splits(const attention_dims& d) noexcept {
  if (all_work_splits())
    return true;
  // Each query row sees its causal prefix: pos0 + 1 .. pos0 + n_tokens.
  const double rows = static_cast<double>(d.n_tokens);
  const double seen = static_cast<double>(d.pos0)
                      + (static_cast<double>(d.n_tokens) + 1.0) / 2.0;
  const double macs = rows * seen * static_cast<double>(d.n_heads)
                      * static_cast<double>(d.head_dim);
  return macs >= static_cast<double>(attention_split_macs);
}

bool attention_split_kv(const attention_dims& d, int llama_threads) noexcept {
  return llama_threads > 1 && d.n_tokens == 1
         && llama_kv_length(d.pos0 + 1) >= 512;
}

namespace {

template <class KV>
void attention_of(const float* q, const KV* k, const KV* v, float* out,
                  const attention_dims& d, int threads, int llama_threads) {
  threads = attention_splits(d) ? std::max(1, threads) : 1;
  if (attention_tiled_path(d))
    attention_tiled(q, rows_of(k, d, 1), rows_of(v, d, 1), out, d, threads);
  else
    attention_chunked(q, rows_of(k, d, 1), rows_of(v, d, 1), out, d, threads,
                      llama_threads);
}

} // namespace

void attention(const float* q, const float* k, const float* v, float* out,
               const attention_dims& d, int threads,
               int llama_threads) noexcept {
  attention_of(q, k, v, out, d, threads, llama_threads);
}

void attention(const float* q, const std::uint16_t* k, const std::uint16_t* v,
               float* out, const attention_dims& d, int threads,
               int llama_threads) noexcept {
  attention_of(q, k, v, out, d, threads, llama_threads);
}

} // namespace exo::backend::host
