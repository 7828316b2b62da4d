#pragma once

/// The per-element and per-tile math of the GPU kernels, as inline
/// functions that compile for the host (g++) and the device (nvcc, hipcc).
/// kernels.cuh calls them on the GPU; the unit tests call the very same
/// functions on the host and compare with exo::backend::host.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/expf_ggml.hpp" // EXO_HD, ggml's expf and SwiGLU
#include "backends/quant_formats.hpp" // the GGUF type ids

namespace exo::backend::gpu::math {

/// Edge length of the square tiles of the tiled matrix product (threads per
/// block: tile x tile).
constexpr unsigned matmul_tile = 16;

/// Element-wise operation codes, as the kernels receive them.
enum class binary_code : int { add = 0, mul = 1 };

EXO_HD inline float binary(binary_code op, float a, float b) {
  return op == binary_code::add ? a + b : a * b;
}

/// SiLU(gate) * up: the gated activation of a Llama feed-forward block,
/// with the platform's expf (ggml_silu_f32 with libm's: the host's
/// silu_mul on the count % 16 elements past its groups of 16; the groups
/// take ggml::swiglu_lane).
EXO_HD inline float silu_mul(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

/// a * b rounded once, never fused into a later addition (nvcc and hipcc
/// contract a product and a sum, even across a widening to double).
EXO_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// a + b rounded once (the other operand of a possible fusion).
EXO_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// 1 / sqrt(mean of squares + eps) as the host's rms_norm finishes a row
/// (ggml's): the float squares' sum in double, divided by cols in double
/// and rounded to float, then eps added and the root taken in float. A
/// sum in another order than the host's one chain gives the host's bits
/// unless the two double sums fall either side of a float's rounding
/// boundary: a chance of about cols x 2^-29 a row.
EXO_HD inline float rms_scale(double sum_sq, std::size_t cols, float eps) {
  const float mean = static_cast<float>(sum_sq / static_cast<double>(cols));
  return 1.0f / sqrtf(mean + eps);
}

/// One normalized element: x * scale * weight.
EXO_HD inline float rmsnorm_apply(float x, float scale, float weight) {
  return x * scale * weight;
}

/// One softmax element given the row's maximum and sum of exponentials.
EXO_HD inline float softmax_apply(float x, float row_max, float row_sum) {
  return expf(x - row_max) / row_sum;
}

/// The rotation angle of pair `pair` (0 .. head_dim/2-1) at position pos:
/// pos * base^(-2 pair / head_dim).
EXO_HD inline float rope_angle(std::size_t pos, std::size_t pair,
                               std::size_t head_dim, float base) {
  float exponent = -2.0f * static_cast<float>(pair)
                   / static_cast<float>(head_dim);
  return static_cast<float>(pos) * powf(base, exponent);
}

/// Rotates the adjacent pair (x0, x1) by angle (Llama's "normal" rope).
EXO_HD inline void rope_rotate(float x0, float x1, float angle, float* y0,
                               float* y1) {
  float c = cosf(angle);
  float s = sinf(angle);
  *y0 = x0 * c - x1 * s;
  *y1 = x0 * s + x1 * c;
}

/// A[row][col] of a row-major [m x k] matrix, or 0 outside it (tile
/// padding).
EXO_HD inline float matmul_load_a(const float* a, std::size_t m,
                                  std::size_t k, std::size_t row,
                                  std::size_t col) {
  return row < m && col < k ? a[row * k + col] : 0.0f;
}

/// B[row][col] of the logical [k x n] right operand, or 0 outside it. With
/// transpose_b the storage is [n x k].
EXO_HD inline float matmul_load_b(const float* b, std::size_t k,
                                  std::size_t n, bool transpose_b,
                                  std::size_t row, std::size_t col) {
  if (row >= k || col >= n)
    return 0.0f;
  return transpose_b ? b[col * k + row] : b[row * n + col];
}

/// One thread's step through a pair of tiles: acc += sum_p As[ty][p] *
/// Bs[p][tx] over a tile's width. The tiles are row-major tile x tile.
EXO_HD inline float matmul_tile_step(const float* as, const float* bs,
                                     unsigned ty, unsigned tx, float acc) {
  for (unsigned p = 0; p < matmul_tile; ++p)
    acc += as[ty * matmul_tile + p] * bs[p * matmul_tile + tx];
  return acc;
}

// -- the Llama operations ----------------------------------------------------

/// The rotation angle of pair `pair` (0 .. n_rot/2-1) at position pos, as
/// rope_dims defines it: pos * base^(-2 pair / n_rot) / factor (factor 1
/// without freq_factors).
EXO_HD inline float rope_theta(std::int32_t pos, std::size_t pair,
                               std::size_t n_rot, float base, float factor) {
  float exponent = -2.0f * static_cast<float>(pair)
                   / static_cast<float>(n_rot);
  return static_cast<float>(pos) * powf(base, exponent) / factor;
}

/// Turns the pair (x0, x1) by the angle whose cosine and sine are c and s
/// as the host does (host_kernels' rotate_heads, ggml's rotate_pairs as
/// GCC contracts it): one fused multiply-add each, with x1 s and x1 c
/// rounded first. fmaf rounds once on every compiler, and nothing is left
/// to contract, so the device's bits are the host's.
EXO_HD inline void rope_rotate_cs(float x0, float x1, float c, float s,
                                  float* y0, float* y1) {
  *y0 = fmaf(x0, c, -(x1 * s));
  *y1 = fmaf(x0, s, x1 * c);
}

/// IEEE half bits to float (exact).
EXO_HD inline float half_to_float(std::uint16_t h) {
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0 || exp == 31) { // subnormal or zero (exact), inf or NaN
    const float v = exp == 0 ? static_cast<float>(mant) * 0x1p-24f
                    : mant != 0 ? NAN
                                : INFINITY;
    return (h & 0x8000u) != 0 ? -v : v;
  }
  // A normal half: the same sign and mantissa, the exponent rebiased
  // (15 -> 127), by integer operations only (a kernel converts every F16
  // weight and cached K/V value it reads).
  const std::uint32_t bits = (static_cast<std::uint32_t>(h & 0x8000u) << 16)
                             | ((exp + 112u) << 23) | (mant << 13);
  float v;
  memcpy(&v, &bits, 4);
  return v;
}

/// x rounded to the nearest half (ties to even) and back: what llama.cpp
/// does to activations that meet F16 weights. Overflow gives infinity.
EXO_HD inline float round_to_half(float x) {
  std::uint32_t bits;
  memcpy(&bits, &x, 4);
  std::uint32_t absx = bits & 0x7fffffffu;
  if (absx >= 0x7f800000u || absx < 0x33000000u) // inf/nan, or rounds to 0
    return absx < 0x33000000u ? x * 0.0f : x;
  if (absx >= 0x477ff000u) // rounds to >= 65520
    return x > 0 ? INFINITY : -INFINITY;
  // The unit in the last place of a half near x: 2^-24 for subnormal halves,
  // else 2^(e - 10). Adding and subtracting 1.5 * 2^23 units rounds to it
  // (ties to even) in float arithmetic; done with exact scaling instead.
  int e = static_cast<int>(absx >> 23) - 127;
  int ulp_exp = e < -14 ? -24 : e - 10;
  float scaled = ldexpf(x, -ulp_exp);          // exact: a power-of-two scale
  float rounded = rintf(scaled);               // ties to even
  return ldexpf(rounded, ulp_exp);
}

/// The half nearest x (ties to even) as IEEE half bits: an f16 KV cache's
/// values (to_f16). Overflow gives infinity, NaN stays NaN.
EXO_HD inline std::uint16_t float_to_half(float x) {
  const float r = round_to_half(x); // a half's value, or inf / NaN
  std::uint32_t bits;
  memcpy(&bits, &r, 4);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t absr = bits & 0x7fffffffu;
  if (absr >= 0x7f800000u) // inf or NaN
    return static_cast<std::uint16_t>(sign | 0x7c00u
                                      | (absr > 0x7f800000u ? 0x200u : 0u));
  if (absr == 0)
    return sign;
  const int e = static_cast<int>(absr >> 23) - 127;
  if (e < -14) // a subnormal half: an exact multiple of 2^-24
    return static_cast<std::uint16_t>(
      sign | static_cast<std::uint32_t>(ldexpf(fabsf(r), 24)));
  return static_cast<std::uint16_t>(
    sign | (static_cast<std::uint32_t>(e + 15) << 10)
    | ((absr >> 13) & 0x3ffu));
}

/// A K or V value as attention reads it: an f32 cache's rounded to half,
/// an f16 cache's widened (the same floats).
EXO_HD inline float kv_value(float x) {
  return round_to_half(x);
}
EXO_HD inline float kv_value(std::uint16_t h) {
  return half_to_float(h);
}

/// Where cache row r of an attention starts, in values: r * kv_stride in
/// one run of rows, or (block_positions != 0) row r % block_positions of
/// block table[r / block_positions], blocks block_stride values apart. An
/// entry past max_block (or negative) reads block max_block: a kernel
/// cannot refuse a table, and never reads outside the cache.
EXO_HD inline std::size_t kv_row_at(std::size_t r, std::size_t kv_stride,
                                    const std::int32_t* table,
                                    std::size_t block_positions,
                                    std::size_t block_stride,
                                    std::size_t max_block) {
  if (block_positions == 0)
    return r * kv_stride;
  std::size_t b = static_cast<std::uint32_t>(table[r / block_positions]);
  if (b > max_block)
    b = max_block;
  return b * block_stride + (r % block_positions) * kv_stride;
}

/// A decode-batch row's position p from its table (attention_paged_rows,
/// store_kv_rows) clamped into the table's positions [0, last]: a kernel
/// cannot refuse a table.
EXO_HD inline std::size_t row_position(std::int32_t p, std::size_t last) {
  return p < 0 ? 0
         : static_cast<std::size_t>(p) > last ? last
                                              : static_cast<std::size_t>(p);
}

/// A little-endian half at p (any alignment).
EXO_HD inline float half_at(const std::uint8_t* p) {
  return half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
}

/// Q4_K/Q5_K's 6-bit scale and minimum of sub-block j from the 12 bytes at
/// s (ggml's get_scale_min_k4).
EXO_HD inline void scale_min_k4(unsigned j, const std::uint8_t* s, int& sc,
                                int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/// The 32 fifth bits of a Q5_0/Q5_1 block: the little-endian word at h.
EXO_HD inline std::uint32_t fifth_bits(const std::uint8_t* h) {
  return static_cast<std::uint32_t>(h[0])
         | (static_cast<std::uint32_t>(h[1]) << 8)
         | (static_cast<std::uint32_t>(h[2]) << 16)
         | (static_cast<std::uint32_t>(h[3]) << 24);
}

/// Element e of the block of ggml format `type` (a GGUF id) at b, as
/// ggml's to_float gives it up to float rounding (ggml's byte layouts,
/// backends/quant_formats.hpp; an F16 "block" is one half). The
/// element-wise form a GPU thread needs; Vulkan's matvec_quant.comp decodes
/// the same way. 0 for another type (f32 and the activation formats).
EXO_HD inline float dequant_element(std::uint32_t type, const std::uint8_t* b,
                                    unsigned e) {
  switch (static_cast<quant::ggml_type>(type)) {
  case quant::ggml_type::f16:
    return half_at(b);
  case quant::ggml_type::q8_0: // d, then 32 int8
    return half_at(b) * static_cast<float>(static_cast<std::int8_t>(b[2 + e]));
  case quant::ggml_type::bf16: {
    std::uint32_t u = static_cast<std::uint32_t>(b[0] | (b[1] << 8)) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  case quant::ggml_type::q4_0:
  case quant::ggml_type::q4_1: {
    const bool one = static_cast<quant::ggml_type>(type) == quant::ggml_type::q4_1;
    const unsigned q = b[(one ? 4 : 2) + e % 16];
    const float v = static_cast<float>(e < 16 ? q & 0xF : q >> 4);
    return one ? half_at(b) * v + half_at(b + 2) : half_at(b) * (v - 8.0f);
  }
  case quant::ggml_type::q5_0:
  case quant::ggml_type::q5_1: {
    const bool one = static_cast<quant::ggml_type>(type) == quant::ggml_type::q5_1;
    const std::uint32_t qh = fifth_bits(b + (one ? 4 : 2));
    const unsigned q = b[(one ? 8 : 6) + e % 16];
    const unsigned v = (e < 16 ? q & 0xF : q >> 4) | (((qh >> e) & 1u) << 4);
    return one ? half_at(b) * static_cast<float>(v) + half_at(b + 2)
               : half_at(b) * (static_cast<float>(v) - 16.0f);
  }
  case quant::ggml_type::q2_k:
  case quant::ggml_type::q3_k: {
    const unsigned n = e / 128, r = e % 128, j = r / 32, hf = (r % 32) / 16,
                   l = r % 16;
    const unsigned is = 8 * n + 2 * j + hf;
    if (static_cast<quant::ggml_type>(type) == quant::ggml_type::q2_k) {
      // scales[16] qs[64] d dmin
      const unsigned sc = b[is];
      const unsigned q = (b[16 + 32 * n + 16 * hf + l] >> (2 * j)) & 3;
      return half_at(b + 80) * static_cast<float>(sc & 0xF)
               * static_cast<float>(q)
             - half_at(b + 82) * static_cast<float>(sc >> 4);
    }
    // hmask[32] qs[64] scales[12] d: 6-bit scales, minus 32.
    const std::uint8_t* s = b + 96;
    const unsigned w4 = is / 4, i4 = is % 4;
    const unsigned nib = w4 < 2 ? s[4 * w4 + i4] & 0xF : s[4 * (w4 - 2) + i4] >> 4;
    const unsigned top = (s[8 + i4] >> (2 * w4)) & 3;
    const int sc = static_cast<int>(nib | (top << 4)) - 32;
    const unsigned q = (b[32 + 32 * n + 16 * hf + l] >> (2 * j)) & 3;
    const unsigned hm = (b[16 * hf + l] >> (4 * n + j)) & 1;
    const int v = static_cast<int>(q) - (hm != 0 ? 0 : 4);
    return half_at(b + 108) * static_cast<float>(sc) * static_cast<float>(v);
  }
  case quant::ggml_type::q4_k:
  case quant::ggml_type::q5_k: {
    // d dmin scales[12] [qh[32]] qs[128]: 64-element chunks j, low nibbles
    // (sub-block 2j) then high nibbles (2j + 1).
    const bool five = static_cast<quant::ggml_type>(type) == quant::ggml_type::q5_k;
    const unsigned j = e / 64, hf = (e % 64) / 32, l = e % 32;
    int sc, mn;
    scale_min_k4(2 * j + hf, b + 4, sc, mn);
    const unsigned q = b[(five ? 48 : 16) + 32 * j + l];
    unsigned v = hf != 0 ? q >> 4 : q & 0xF;
    if (five)
      v |= ((b[16 + l] >> (2 * j + hf)) & 1u) << 4;
    return half_at(b) * sc * static_cast<float>(v) - half_at(b + 2) * mn;
  }
  case quant::ggml_type::q6_k: {
    // ql[128] qh[64] scales[16] (int8) d
    const unsigned n = e / 128, r = e % 128, qt = r / 32, l = r % 32;
    const unsigned lb = b[64 * n + l + 32 * (qt & 1)];
    const unsigned lo = qt < 2 ? lb & 0xF : lb >> 4;
    const unsigned hi = (b[128 + 32 * n + l] >> (2 * qt)) & 3;
    const int q = static_cast<int>(lo | (hi << 4)) - 32;
    const int sc = static_cast<std::int8_t>(b[192 + 8 * n + l / 16 + 2 * qt]);
    return half_at(b + 208) * static_cast<float>(sc) * static_cast<float>(q);
  }
  default: // f32 needs no decoding; q8_1/q8_k are no weights' formats
    break;
  }
  return 0.0f;
}

// -- decode attention with the host's bits ------------------------------------
//
// host::attention below 64 tokens (and every row of a decode batch) is
// ggml's one_chunk flash attention over an F16 cache (host_attention.cpp):
// Q rounded to half, each cell's score by ggml_vec_dot_f16, an online
// softmax with libm's expf, V summed in a half accumulator. The functions
// below are those steps one lane at a time, for attention_exact_kernel and
// for gpu_common_tests, which hold them to the host without a GPU.

/// a * b and a + b in double, each rounded once: never contracted into a
/// fused multiply-add by nvcc or hipcc.
EXO_HD inline double dmul_rn(double a, double b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
EXO_HD inline double dadd_rn(double a, double b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

/// a / b rounded once (IEEE division whatever the compiler's flags).
EXO_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// glibc's expf as x86-64 runs it (sysdeps/ieee754/flt-32/e_expf.c built
/// with fused multiply-adds, __expf_fma): in double, k = round(x * 32 /
/// ln 2) by adding 1.5 * 2^52, 2^(k / 32) from a 32-entry table with k's
/// high bits added to the exponent, times a cubic in the remainder; its
/// special cases first (-inf: 0; inf, NaN: x + x; over- and underflow).
/// The host's attention calls std::exp for every cell, so its kernel
/// computes this (gpu_common_tests: the bits of this process's std::exp
/// on every 4096th float and the special cases).
EXO_HD inline float expf_libm(float x) {
  std::uint32_t u;
  memcpy(&u, &x, 4);
  const std::uint32_t abstop = (u >> 20) & 0x7ffu;
  if (abstop >= 0x42bu) { // |x| >= 88, or NaN
    if (u == 0xff800000u)
      return 0.0f;
    if (abstop >= 0x7f8u)
      return x + x;
    if (x > 0x1.62e42ep6f)
      return INFINITY;
    if (x < -0x1.9fe368p6f)
      return 0.0f;
  }
  // 2^(i / 32) correctly rounded, less i << 47: glibc's __exp2f_data.tab.
  const std::uint64_t tab[32] = {
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
  constexpr double n = 32.0;
  constexpr double shift = 0x1.8p+52;
  const double z = dmul_rn(static_cast<double>(x), 0x1.71547652b82fep+0 * n);
  const double kd_shifted = dadd_rn(z, shift);
  std::uint64_t ki;
  memcpy(&ki, &kd_shifted, 8);
  const double r = dadd_rn(z, -dadd_rn(kd_shifted, -shift));
  const std::uint64_t t = tab[ki % 32] + (ki << 47);
  double s;
  memcpy(&s, &t, 8);
  const double p = fma(0x1.c6af84b912394p-5 / n / n / n, r,
                       0x1.ebfce50fac4f3p-3 / n / n);
  const double y = fma(p, dmul_rn(r, r), fma(0x1.62e42ff0c52d6p-1 / n, r, 1.0));
  return static_cast<float>(dmul_rn(y, s));
}

/// The sum of 16 lanes by _mm512_reduce_add_ps's tree (halves, quarters,
/// then pairs: host_reduce.hpp's reduce16), with which llama.cpp's CPU
/// products and flash attention end a 16-lane accumulator.
EXO_HD inline float reduce16(const float* l) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i)
    t3[i] = add_rn(l[i + 8], l[i]);
  for (int i = 0; i < 4; ++i)
    t6[i] = add_rn(t3[i + 4], t3[i]);
  return add_rn(add_rn(t6[0], t6[2]), add_rn(t6[1], t6[3]));
}

/// ggml_vec_dot_f16 of a K row (n values as the cache holds them: rounded
/// to half where read) with q (already rounded to half), as the host's
/// AVX-512 build sums it: four 16-lane accumulators over blocks of 64
/// (accumulator j, lane m: elements 64 b + 16 j + m, one fused chain
/// each), lanes m of the four added as GGML_F16_VEC_REDUCE adds them
/// ((0 + 2) + (1 + 3)), the 16 lanes by _mm512_reduce_add_ps's tree
/// (host_reduce.hpp), then the rest of the row in double, product by
/// product.
template <class KV>
EXO_HD inline float dot_f16_host(const KV* k, const float* q, std::size_t n) {
  const std::size_t np = n & ~std::size_t{63};
  float l[16];
  for (std::size_t m = 0; m < 16; ++m) {
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (std::size_t i = 0; i < np; i += 64)
      for (std::size_t j = 0; j < 4; ++j)
        a[j] = fmaf(kv_value(k[i + 16 * j + m]), q[i + 16 * j + m], a[j]);
    l[m] = add_rn(add_rn(a[0], a[2]), add_rn(a[1], a[3]));
  }
  double sum = reduce16(l);
  for (std::size_t i = np; i < n; ++i)
    sum = dadd_rn(sum, mul_rn(kv_value(k[i]), q[i]));
  return static_cast<float>(sum);
}

/// A BF16 value's float (exact).
EXO_HD inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/// Whether llama.cpp's CPU backend (its AVX-512 build) multiplies F32 or
/// F16 weights in tinyBLAS's order (llamafile_sgemm: from 2 rows of A
/// that are not apart, k a multiple of 16, rows of W in fours;
/// host::matmul_weights) rather than ggml_vec_dot's.
EXO_HD inline bool tinyblas_takes(std::size_t m, std::size_t n, std::size_t k,
                                  bool rows_apart) {
  return !rows_apart && m >= 2 && k % 16 == 0 && n % 4 == 0;
}

/// The rest of an F16 row's ggml_vec_dot_f16 after its blocks of 64 (the
/// tree's sum s): elements np .. n-1 added in double one product after the
/// other (a product of two halves is exact in float). q rounded to half
/// here where round_q.
EXO_HD inline float vecdot_rest_f16(const std::uint16_t* w, const float* q,
                                    std::size_t np, std::size_t n, float s,
                                    bool round_q) {
  double sum = s;
  for (std::size_t i = np; i < n; ++i)
    sum = dadd_rn(sum, mul_rn(half_to_float(w[i]),
                              round_q ? round_to_half(q[i]) : q[i]));
  return static_cast<float>(sum);
}

/// The rest of an F32 row's ggml_vec_dot_f32 after its blocks of 64, as
/// GCC compiled ggml's leftover loop (host_kernels.cpp, leftover_f32): the
/// rounded products added in order over whole 16s, then one more 8, the
/// last fewer than 8 by fused multiply-adds; all in float.
EXO_HD inline float vecdot_rest_f32(const float* w, const float* x,
                                    std::size_t np, std::size_t n, float s) {
  const std::size_t r = n - np;
  std::size_t plain = r >= 16 ? r & ~std::size_t{15} : 0;
  if (r - plain >= 8)
    plain += 8;
  std::size_t i = 0;
  for (; i < plain; ++i)
    s = add_rn(s, mul_rn(w[np + i], x[np + i]));
  for (; i < r; ++i)
    s = fmaf(w[np + i], x[np + i], s);
  return s;
}

/// One cell of one_chunk's online softmax (the host's online_step): a
/// score s above the running maximum m raises it and rescales what came
/// before by expf(m - s) (its V weight is 1); any other score weighs its
/// V row by expf(s - m). Returns the argument of that expf and whether
/// the maximum grew; m moves.
EXO_HD inline float online_arg(float s, float& m, bool& grew) {
  grew = s > m;
  const float arg = grew ? add_rn(m, -s) : add_rn(s, -m);
  if (grew)
    m = s;
  return arg;
}

/// The running sum after a cell: (S * ms) + vs, two roundings.
EXO_HD inline float online_sum(float S, float ms, float vs) {
  return add_rn(mul_rn(S, ms), vs);
}

/// The half accumulator of one output element after a cell: rescaled
/// (ggml_vec_scale_f16) when the maximum grew, then the cell's V value
/// added (ggml_vec_mad_f16), each rounded to half.
EXO_HD inline float online_acc(float acc, bool grew, float ms, float v,
                               float vs) {
  if (grew)
    acc = round_to_half(mul_rn(acc, ms));
  return round_to_half(fmaf(v, vs, acc));
}

/// Cells of a tile of the host's tiled attention path (ggml's flash
/// attention from 64 query rows: host_attention.cpp's fa_tile), which
/// attention_tiled_kernel walks as the host does.
constexpr std::size_t attention_tile = 64;

/// Whether attention over an f32 or f16 cache takes the host's one_chunk
/// path (attention_exact_kernel's bits) rather than its tiled path
/// (attention_tiled_kernel's): one_chunk below a tile of query rows or
/// with a head size that is not a multiple of 16
/// (host::attention_tiled_path), and for every row of a decode batch
/// (each row is one token of its own).
EXO_HD inline bool attention_one_chunk(std::size_t n_tokens,
                                       std::size_t head_dim,
                                       bool rows_apart) {
  return rows_apart || n_tokens < attention_tile || head_dim % 16 != 0;
}

/// Threads of an attention block; a thread owns output dimensions i and
/// i + attention_threads, so head_dim <= 2 * attention_threads.
constexpr unsigned attention_threads = 128;

} // namespace exo::backend::gpu::math
