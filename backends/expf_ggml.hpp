#pragma once

/// ggml_v_expf (ggml-cpu/vec.h, its AVX-512 build) on one float, and
/// ggml_vec_swiglu_f32's element on it, as inline float steps that compile
/// for the host (g++) and the GPU (nvcc, hipcc): the host kernels' vector
/// lanes are held to expf_lane bit for bit (backend_tests), and the GPU's
/// silu_mul kernel calls the very same functions, so every device's SwiGLU
/// gives the CPU's bits.
///
/// Every step is one rounding that no compiler may change: the fused
/// multiply-adds are fmaf calls, and no product meets an addition outside
/// them (nothing to contract, whatever -ffp-contract or -fmad say). The
/// arithmetic assumes IEEE division and subnormals (nvcc's defaults; no
/// --use_fast_math).

#include <cmath>
#include <cstdint>
#include <cstring>

#if !defined(EXO_HD)
#  if defined(__CUDACC__) || defined(__HIPCC__)
#    define EXO_HD __host__ __device__
#  else
#    define EXO_HD
#  endif
#endif

namespace exo::backend::ggml {

// The constants of ggml_v_expf (ARM's optimized-routines expf).
constexpr float ex_shift = 0x1.8p23f;
constexpr float ex_log2e = 0x1.715476p+0f;
constexpr float ex_ln2_hi = 0x1.62e4p-1f;
constexpr float ex_ln2_lo = 0x1.7f7d1cp-20f;
constexpr float ex_c5 = 0x1.0e4020p-7f;
constexpr float ex_c4 = 0x1.573e2ep-5f;
constexpr float ex_c3 = 0x1.555e66p-3f;
constexpr float ex_c2 = 0x1.fffdb6p-2f;
constexpr float ex_c1 = 0x1.ffffecp-1f;

/// 2^e for -126 <= e <= 127 (a normal float, exact).
EXO_HD inline float pow2(int e) {
  const auto bits = static_cast<std::uint32_t>(e + 127) << 23;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/// j * 2^e rounded once, as _mm512_scalef_ps does, for |e| <= 192 and
/// 0.5 < |j| < 2: out of the normal exponents, a first exact step leaves a
/// single rounding to the second.
EXO_HD inline float scalef(float j, int e) {
  if (e > 127)
    return j * pow2(e - 127) * pow2(127);
  if (e < -126)
    return j * pow2(e + 126) * pow2(-126);
  return j * pow2(e);
}

/// ggml_v_expf's AVX-512 version, one lane: at most 1.5 ulp from e^x, 0
/// below about -104 and infinity above about 88.4 (ggml's own cut-offs).
EXO_HD inline float expf_lane(float x) {
  const float z = fmaf(x, ex_log2e, ex_shift);
  const float n = z - ex_shift;
  const float b = fmaf(-n, ex_ln2_lo, fmaf(-n, ex_ln2_hi, x));
  if (n != n) // NaN in, NaN out
    return n;
  if (fabsf(n) > 192.0f)
    return n <= 0.0f ? 0.0f : INFINITY;
  const float u = b * b;
  const float j = fmaf(fmaf(fmaf(ex_c5, b, ex_c4), u, fmaf(ex_c3, b, ex_c2)),
                       u, fmaf(ex_c1, b, 1.0f));
  return scalef(j, static_cast<int>(n));
}

/// One element of ggml_vec_swiglu_f32's vector groups: silu(x) * g as x /
/// (1 + v_expf(0 - x)) * g.
EXO_HD inline float swiglu_lane(float x, float g) {
  return x / (1.0f + expf_lane(0.0f - x)) * g;
}

} // namespace exo::backend::ggml
