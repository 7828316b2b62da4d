#include "backends/quant_formats.hpp"
#include "backends/quant_repack.hpp"

#include "backends/host_kernels.hpp"

#include "backends/cpu_features.hpp"
#include "backends/host_parallel.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>
#include <string>
#include <vector>

#include <immintrin.h>

// The reference quantizers must round exactly as ggml's C code does: no
// contraction of a * b + c into a fused multiply-add (the build compiles
// this file with -ffp-contract=off; the dot products fuse explicitly).

namespace exo::backend::quant {

namespace {

/// qk_k as an int, for the loops over a super-block.
constexpr int kqk = static_cast<int>(qk_k);

// -- the descriptor table -----------------------------------------------------

constexpr type_info table[] = {
    {ggml_type::f32, "f32", 1, 4, ggml_type::f32, true},
    {ggml_type::f16, "f16", 1, 2, ggml_type::f16, true},
    {ggml_type::q4_0, "q4_0", 32, 18, ggml_type::q8_0, true},
    {ggml_type::q4_1, "q4_1", 32, 20, ggml_type::q8_1, true},
    {ggml_type::q5_0, "q5_0", 32, 22, ggml_type::q8_0, true},
    {ggml_type::q5_1, "q5_1", 32, 24, ggml_type::q8_1, true},
    {ggml_type::q8_0, "q8_0", 32, 34, ggml_type::q8_0, true},
    {ggml_type::q8_1, "q8_1", 32, 36, ggml_type::q8_1, false},
    {ggml_type::q2_k, "q2_K", kqk, 84, ggml_type::q8_k, true},
    {ggml_type::q3_k, "q3_K", kqk, 110, ggml_type::q8_k, true},
    {ggml_type::q4_k, "q4_K", kqk, 144, ggml_type::q8_k, true},
    {ggml_type::q5_k, "q5_K", kqk, 176, ggml_type::q8_k, true},
    {ggml_type::q6_k, "q6_K", kqk, 210, ggml_type::q8_k, true},
    {ggml_type::q8_k, "q8_K", kqk, 292, ggml_type::q8_k, false},
    {ggml_type::bf16, "bf16", 1, 2, ggml_type::bf16, true},
};

// -- scalar helpers -----------------------------------------------------------

float h2f(std::uint16_t h) noexcept {
  return host::f16_to_f32(h);
}

std::uint16_t f2h(float f) noexcept {
  return host::f32_to_f16(f);
}

/// ggml's nearest_int: round half to even through the float mantissa (only
/// meaningful for |x| < 2^22; other inputs give ggml's same garbage).
int nearest_int(float x) noexcept {
  float v = x + 12582912.f;
  std::int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

/// float -> int32 as x86's cvttss2si (what C's float -> int8_t/uint8_t
/// casts compile to): truncation, INT_MIN when out of range or NaN.
std::int32_t trunc_i32(float x) noexcept {
  if (!(x > -2147483904.f && x < 2147483648.f))
    return INT_MIN;
  return static_cast<std::int32_t>(x);
}

/// float -> int32 as cvtss2si / roundf would: roundf then the x86 cast.
std::int32_t round_i32(float x) noexcept {
  return trunc_i32(std::round(x));
}

template<class T>
T imin(T a, T b) {
  return a < b ? a : b;
}
template<class T>
T imax(T a, T b) {
  return a > b ? a : b;
}

/// ggml's get_scale_min_k4: the 6-bit scale and minimum j of Q4_K/Q5_K.
void scale_min_k4(int j, const std::uint8_t* q, std::uint8_t& d,
                  std::uint8_t& m) noexcept {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/// The 16 signed 6-bit scales of a Q3_K block (already minus 32).
void q3k_scales(const std::uint8_t* s, int out[16]) noexcept {
  for (int j = 0; j < 16; ++j) {
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = (lo | (hi << 4)) - 32;
  }
}

// -- the scale searches of the K-quants (ggml-quants.c) -----------------------

float make_qx_quants(int n, int nmax, const float* x, std::int8_t* L,
                     int rmse_type) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i)
      L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      L[i] = static_cast<std::int8_t>(nmax + imax(-nmax, imin(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  // rmse_type 1 without importance: weights x^2.
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = imax(-nmax, imin(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l + nmax);
    float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0)
      continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = imax(-nmax, imin(nmax - 1, l));
      float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<std::int8_t>(nmax + imax(-nmax, imin(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float make_q3_quants(int n, int nmax, const float* x, std::int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i)
      L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = imax(-nmax, imin(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l);
    float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = imax(-nmax, imin(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<std::int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed)
      break;
  }
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<std::int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

float make_qkx2_quants(int n, int nmax, const float* x, const float* weights,
                       std::uint8_t* L, float* the_min, std::uint8_t* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min)
      min = x[i];
    if (x[i] > max)
      max = x[i];
    float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0)
    min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i)
      L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<std::uint8_t>(imax(0, imin(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = imax(0, imin(nmax, l));
      Laux[i] = static_cast<std::uint8_t>(l);
      float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i)
          L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// -- reference quantizers, one block at a time --------------------------------

void quantize_q4_0(const float* x, block_q4_0& y) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8;
  const float id = d ? 1.0f / d : 0.0f;
  y.d = f2h(d);
  for (int j = 0; j < 16; ++j) {
    auto q0 = static_cast<std::uint8_t>(
        imin<int>(15, static_cast<std::int8_t>(trunc_i32(x[j] * id + 8.5f))));
    auto q1 = static_cast<std::uint8_t>(imin<int>(
        15, static_cast<std::int8_t>(trunc_i32(x[16 + j] * id + 8.5f))));
    y.qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
  }
}

void quantize_q4_1(const float* x, block_q4_1& y) {
  float min = FLT_MAX;
  float max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < min)
      min = x[j];
    if (x[j] > max)
      max = x[j];
  }
  const float d = (max - min) / 15;
  const float id = d ? 1.0f / d : 0.0f;
  y.d = f2h(d);
  y.m = f2h(min);
  for (int j = 0; j < 16; ++j) {
    auto q0 = static_cast<std::uint8_t>(imin<int>(
        15, static_cast<std::int8_t>(trunc_i32((x[j] - min) * id + 0.5f))));
    auto q1 = static_cast<std::uint8_t>(imin<int>(
        15,
        static_cast<std::int8_t>(trunc_i32((x[16 + j] - min) * id + 0.5f))));
    y.qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
  }
}

void quantize_q5_0(const float* x, block_q5_0& y) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -16;
  const float id = d ? 1.0f / d : 0.0f;
  y.d = f2h(d);
  std::uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    auto q0 = static_cast<std::uint8_t>(
        imin<int>(31, static_cast<std::int8_t>(trunc_i32(x[j] * id + 16.5f))));
    auto q1 = static_cast<std::uint8_t>(imin<int>(
        31, static_cast<std::int8_t>(trunc_i32(x[16 + j] * id + 16.5f))));
    y.qs[j] = static_cast<std::uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
    qh |= ((q0 & 0x10u) >> 4) << j;
    qh |= ((q1 & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(y.qh, &qh, 4);
}

void quantize_q5_1(const float* x, block_q5_1& y) {
  float min = FLT_MAX;
  float max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < min)
      min = x[j];
    if (x[j] > max)
      max = x[j];
  }
  const float d = (max - min) / 31;
  const float id = d ? 1.0f / d : 0.0f;
  y.d = f2h(d);
  y.m = f2h(min);
  std::uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    auto q0 = static_cast<std::uint8_t>(trunc_i32((x[j] - min) * id + 0.5f));
    auto q1 =
        static_cast<std::uint8_t>(trunc_i32((x[16 + j] - min) * id + 0.5f));
    y.qs[j] = static_cast<std::uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
    qh |= ((q0 & 0x10u) >> 4) << j;
    qh |= ((q1 & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(y.qh, &qh, 4);
}

void quantize_q8_0(const float* x, block_q8_0& y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j)
    amax = imax(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d ? 1.0f / d : 0.0f;
  y.d = f2h(d);
  for (int j = 0; j < 32; ++j)
    y.qs[j] = static_cast<std::int8_t>(round_i32(x[j] * id));
}

void quantize_q8_1(const float* x, block_q8_1& y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j)
    amax = imax(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d ? 1.0f / d : 0.0f;
  y.d = f2h(d);
  int sum = 0;
  for (int j = 0; j < 16; ++j) {
    y.qs[j] = static_cast<std::int8_t>(round_i32(x[j] * id));
    y.qs[16 + j] = static_cast<std::int8_t>(round_i32(x[16 + j] * id));
    sum += y.qs[j];
    sum += y.qs[16 + j];
  }
  y.s = f2h(sum * d);
}

void quantize_q2_k(const float* x, block_q2_k& y) {
  std::uint8_t L[kqk];
  std::uint8_t Laux[16];
  float weights[16];
  float mins[16];
  float scales[16];
  const float q4scale = 15.f;
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l)
      weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j,
                                 &mins[j], Laux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale)
      max_scale = scales[j];
    if (mins[j] > max_min)
      max_min = mins[j];
  }
  if (max_scale > 0) {
    float iscale = q4scale / max_scale;
    for (int j = 0; j < 16; ++j)
      y.scales[j] = static_cast<std::uint8_t>(nearest_int(iscale * scales[j]));
    y.d = f2h(max_scale / q4scale);
  } else {
    for (int j = 0; j < 16; ++j)
      y.scales[j] = 0;
    y.d = f2h(0.f);
  }
  if (max_min > 0) {
    float iscale = q4scale / max_min;
    for (int j = 0; j < 16; ++j) {
      int l = nearest_int(iscale * mins[j]);
      y.scales[j] = static_cast<std::uint8_t>(y.scales[j] | (l << 4));
    }
    y.dmin = f2h(max_min / q4scale);
  } else {
    y.dmin = f2h(0.f);
  }
  for (int j = 0; j < 16; ++j) {
    const float d = h2f(y.d) * (y.scales[j] & 0xF);
    if (!d)
      continue;
    const float dm = h2f(y.dmin) * (y.scales[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      int l = nearest_int((x[16 * j + ii] + dm) / d);
      L[16 * j + ii] = static_cast<std::uint8_t>(imax(0, imin(3, l)));
    }
  }
  for (int j = 0; j < kqk; j += 128)
    for (int l = 0; l < 32; ++l)
      y.qs[j / 4 + l] = static_cast<std::uint8_t>(
          L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
          (L[j + l + 96] << 6));
}

void quantize_q3_k(const float* x, block_q3_k& y) {
  std::int8_t L[kqk];
  float scales[16];
  float max_scale = 0;
  float amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
    float scale = std::fabs(scales[j]);
    if (scale > amax) {
      amax = scale;
      max_scale = scales[j];
    }
  }
  std::memset(y.scales, 0, 12);
  if (max_scale) {
    float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
      auto l = static_cast<std::int8_t>(nearest_int(iscale * scales[j]));
      l = static_cast<std::int8_t>(imax<int>(-32, imin<int>(31, l)) + 32);
      if (j < 8)
        y.scales[j] = static_cast<std::uint8_t>(l & 0xF);
      else
        y.scales[j - 8] =
            static_cast<std::uint8_t>(y.scales[j - 8] | ((l & 0xF) << 4));
      l = static_cast<std::int8_t>(l >> 4);
      y.scales[j % 4 + 8] =
          static_cast<std::uint8_t>(y.scales[j % 4 + 8] | (l << (2 * (j / 4))));
    }
    y.d = f2h(1 / iscale);
  } else {
    y.d = f2h(0.f);
  }
  int sc[16];
  q3k_scales(y.scales, sc);
  for (int j = 0; j < 16; ++j) {
    float d = h2f(y.d) * sc[j];
    if (!d)
      continue;
    for (int ii = 0; ii < 16; ++ii) {
      int l = nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<std::int8_t>(imax(-4, imin(3, l)) + 4);
    }
  }
  std::memset(y.hmask, 0, 32);
  int m = 0;
  std::uint8_t hm = 1;
  for (int j = 0; j < kqk; ++j) {
    if (L[j] > 3) {
      y.hmask[m] = static_cast<std::uint8_t>(y.hmask[m] | hm);
      L[j] = static_cast<std::int8_t>(L[j] - 4);
    }
    if (++m == 32) {
      m = 0;
      hm = static_cast<std::uint8_t>(hm << 1);
    }
  }
  for (int j = 0; j < kqk; j += 128)
    for (int l = 0; l < 32; ++l)
      y.qs[j / 4 + l] = static_cast<std::uint8_t>(
          L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
          (L[j + l + 96] << 6));
}

/// The part Q4_K and Q5_K share: scales, minimums and the levels L
/// (0..nmax) of 256 elements.
void quantize_k_scales(const float* x, int nmax, float rmin, int nstep,
                       std::uint8_t* scales12, std::uint16_t& d_out,
                       std::uint16_t& dmin_out, std::uint8_t* L) {
  std::uint8_t Laux[32];
  float weights[32];
  float mins[8];
  float scales[8];
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l)
      sum_x2 += x[32 * j + l] * x[32 * j + l];
    float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l)
      weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j,
                                 &mins[j], Laux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale)
      max_scale = scales[j];
    if (mins[j] > max_min)
      max_min = mins[j];
  }
  float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    auto ls = static_cast<std::uint8_t>(nearest_int(inv_scale * scales[j]));
    auto lm = static_cast<std::uint8_t>(nearest_int(inv_min * mins[j]));
    ls = imin<std::uint8_t>(63, ls);
    lm = imin<std::uint8_t>(63, lm);
    if (j < 4) {
      scales12[j] = ls;
      scales12[j + 4] = lm;
    } else {
      scales12[j + 4] =
          static_cast<std::uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales12[j - 4] =
          static_cast<std::uint8_t>(scales12[j - 4] | ((ls >> 4) << 6));
      scales12[j] = static_cast<std::uint8_t>(scales12[j] | ((lm >> 4) << 6));
    }
  }
  d_out = f2h(max_scale / 63.f);
  dmin_out = f2h(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    std::uint8_t sc, m;
    scale_min_k4(j, scales12, sc, m);
    const float d = h2f(d_out) * sc;
    if (!d)
      continue;
    const float dm = h2f(dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<std::uint8_t>(imax(0, imin(nmax, l)));
    }
  }
}

void quantize_q4_k(const float* x, block_q4_k& y) {
  std::uint8_t L[kqk];
  quantize_k_scales(x, 15, -1.f, 20, y.scales, y.d, y.dmin, L);
  std::uint8_t* q = y.qs;
  for (int j = 0; j < kqk; j += 64) {
    for (int l = 0; l < 32; ++l)
      q[l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    q += 32;
  }
}

void quantize_q5_k(const float* x, block_q5_k& y) {
  std::uint8_t L[kqk];
  quantize_k_scales(x, 31, -0.5f, 15, y.scales, y.d, y.dmin, L);
  std::uint8_t* qh = y.qh;
  std::uint8_t* ql = y.qs;
  std::memset(qh, 0, 32);
  std::uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < kqk; n += 64) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] = static_cast<std::uint8_t>(qh[j] | m1);
      }
      int l2 = L[n + j + 32];
      if (l2 > 15) {
        l2 -= 16;
        qh[j] = static_cast<std::uint8_t>(qh[j] | m2);
      }
      ql[j] = static_cast<std::uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<std::uint8_t>(m1 << 2);
    m2 = static_cast<std::uint8_t>(m2 << 2);
    ql += 32;
  }
}

void quantize_q6_k(const float* x, block_q6_k& y) {
  std::int8_t L[kqk];
  float scales[16];
  float max_scale = 0;
  float max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
    scales[ib] = scale;
    const float abs_scale = std::fabs(scale);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scale;
    }
  }
  if (max_abs_scale < 1e-15f) {
    std::memset(&y, 0, sizeof y);
    y.d = f2h(0.f);
    return;
  }
  float iscale = -128.f / max_scale;
  y.d = f2h(1 / iscale);
  for (int ib = 0; ib < 16; ++ib)
    y.scales[ib] =
        static_cast<std::int8_t>(imin(127, nearest_int(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    float d = h2f(y.d) * y.scales[j];
    if (!d)
      continue;
    for (int ii = 0; ii < 16; ++ii) {
      int l = nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<std::int8_t>(imax(-32, imin(31, l)) + 32);
    }
  }
  std::uint8_t* ql = y.ql;
  std::uint8_t* qh = y.qh;
  for (int j = 0; j < kqk; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l] & 0xF;
      const int q2 = L[j + l + 32] & 0xF;
      const int q3 = L[j + l + 64] & 0xF;
      const int q4 = L[j + l + 96] & 0xF;
      ql[l] = static_cast<std::uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<std::uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<std::uint8_t>(
          (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
          ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
}

void quantize_q8_k(const float* x, block_q8_k& y) {
  float max = 0;
  float amax = 0;
  for (int j = 0; j < kqk; ++j) {
    float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (!amax) {
    // ggml leaves bsums as they were; zeros here (they meet d = 0).
    std::memset(&y, 0, sizeof y);
    return;
  }
  const float iscale = -127.f / max;
  for (int j = 0; j < kqk; ++j)
    y.qs[j] = static_cast<std::int8_t>(imin(127, nearest_int(iscale * x[j])));
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int ii = 0; ii < 16; ++ii)
      sum += y.qs[j * 16 + ii];
    y.bsums[j] = static_cast<std::int16_t>(sum);
  }
  y.d = 1 / iscale;
}

/// Q8_0 / Q8_1 activations as ggml's AVX2 quantize_row_q8_0/_1: the scale
/// multiplied (not divided) in, rounded half to even, saturated to int8.
std::int8_t act_round(float v) noexcept {
  float r = std::nearbyint(v);
  std::int32_t i = (r >= -2147483648.f && r < 2147483648.f)
                       ? static_cast<std::int32_t>(r)
                       : INT_MIN;
  return static_cast<std::int8_t>(imax(-128, imin(127, i)));
}

float act_block(const float* x, std::int8_t* q, std::uint16_t& d_bits) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    float a = std::fabs(x[j]);
    amax = a > amax ? a : amax; // maxps keeps the second operand on NaN
  }
  const float d = amax / 127.f;
  d_bits = f2h(d);
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  for (int j = 0; j < 32; ++j)
    q[j] = act_round(x[j] * id);
  return d;
}

// -- dequantizers -------------------------------------------------------------

template<class Block>
const Block* blocks(const void* p) {
  return static_cast<const Block*>(p);
}

void dequantize_blocks(ggml_type t, const void* src, float* y, std::size_t nb) {
  switch (t) {
  case ggml_type::q4_0:
    for (std::size_t i = 0; i < nb; ++i, y += 32) {
      const auto& b = blocks<block_q4_0>(src)[i];
      const float d = h2f(b.d);
      for (int j = 0; j < 16; ++j) {
        y[j] = ((b.qs[j] & 0x0F) - 8) * d;
        y[j + 16] = ((b.qs[j] >> 4) - 8) * d;
      }
    }
    return;
  case ggml_type::q4_1:
    for (std::size_t i = 0; i < nb; ++i, y += 32) {
      const auto& b = blocks<block_q4_1>(src)[i];
      const float d = h2f(b.d);
      const float m = h2f(b.m);
      for (int j = 0; j < 16; ++j) {
        y[j] = (b.qs[j] & 0x0F) * d + m;
        y[j + 16] = (b.qs[j] >> 4) * d + m;
      }
    }
    return;
  case ggml_type::q5_0:
    for (std::size_t i = 0; i < nb; ++i, y += 32) {
      const auto& b = blocks<block_q5_0>(src)[i];
      const float d = h2f(b.d);
      std::uint32_t qh;
      std::memcpy(&qh, b.qh, 4);
      for (int j = 0; j < 16; ++j) {
        const int h0 = ((qh >> j) << 4) & 0x10;
        const int h1 = (qh >> (j + 12)) & 0x10;
        y[j] = (((b.qs[j] & 0x0F) | h0) - 16) * d;
        y[j + 16] = (((b.qs[j] >> 4) | h1) - 16) * d;
      }
    }
    return;
  case ggml_type::q5_1:
    for (std::size_t i = 0; i < nb; ++i, y += 32) {
      const auto& b = blocks<block_q5_1>(src)[i];
      const float d = h2f(b.d);
      const float m = h2f(b.m);
      std::uint32_t qh;
      std::memcpy(&qh, b.qh, 4);
      for (int j = 0; j < 16; ++j) {
        const int h0 = ((qh >> j) << 4) & 0x10;
        const int h1 = (qh >> (j + 12)) & 0x10;
        y[j] = ((b.qs[j] & 0x0F) | h0) * d + m;
        y[j + 16] = ((b.qs[j] >> 4) | h1) * d + m;
      }
    }
    return;
  case ggml_type::q8_0:
    for (std::size_t i = 0; i < nb; ++i, y += 32) {
      const auto& b = blocks<block_q8_0>(src)[i];
      const float d = h2f(b.d);
      for (int j = 0; j < 32; ++j)
        y[j] = b.qs[j] * d;
    }
    return;
  case ggml_type::q8_1:
    for (std::size_t i = 0; i < nb; ++i, y += 32) {
      const auto& b = blocks<block_q8_1>(src)[i];
      const float d = h2f(b.d);
      for (int j = 0; j < 32; ++j)
        y[j] = b.qs[j] * d;
    }
    return;
  case ggml_type::q2_k:
    for (std::size_t i = 0; i < nb; ++i) {
      const auto& b = blocks<block_q2_k>(src)[i];
      const float d = h2f(b.d);
      const float min = h2f(b.dmin);
      const std::uint8_t* q = b.qs;
      int is = 0;
      for (int n = 0; n < kqk; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
          for (int half = 0; half < 2; ++half) {
            std::uint8_t sc = b.scales[is++];
            float dl = d * (sc & 0xF);
            float ml = min * (sc >> 4);
            for (int l = 0; l < 16; ++l)
              *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
          }
          shift += 2;
        }
        q += 32;
      }
    }
    return;
  case ggml_type::q3_k:
    for (std::size_t i = 0; i < nb; ++i) {
      const auto& b = blocks<block_q3_k>(src)[i];
      const float d_all = h2f(b.d);
      int sc[16];
      q3k_scales(b.scales, sc);
      const std::uint8_t* q = b.qs;
      std::uint8_t m = 1;
      int is = 0;
      for (int n = 0; n < kqk; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
          for (int half = 0; half < 2; ++half) {
            float dl = d_all * sc[is++];
            for (int l = 16 * half; l < 16 * half + 16; ++l)
              *y++ = dl * (((q[l] >> shift) & 3) - ((b.hmask[l] & m) ? 0 : 4));
          }
          shift += 2;
          m = static_cast<std::uint8_t>(m << 1);
        }
        q += 32;
      }
    }
    return;
  case ggml_type::q4_k:
    for (std::size_t i = 0; i < nb; ++i) {
      const auto& b = blocks<block_q4_k>(src)[i];
      const float d = h2f(b.d);
      const float min = h2f(b.dmin);
      const std::uint8_t* q = b.qs;
      for (int j = 0; j < 4; ++j) {
        std::uint8_t sc, m;
        scale_min_k4(2 * j, b.scales, sc, m);
        const float d1 = d * sc;
        const float m1 = min * m;
        scale_min_k4(2 * j + 1, b.scales, sc, m);
        const float d2 = d * sc;
        const float m2 = min * m;
        for (int l = 0; l < 32; ++l)
          *y++ = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l)
          *y++ = d2 * (q[l] >> 4) - m2;
        q += 32;
      }
    }
    return;
  case ggml_type::q5_k:
    for (std::size_t i = 0; i < nb; ++i) {
      const auto& b = blocks<block_q5_k>(src)[i];
      const float d = h2f(b.d);
      const float min = h2f(b.dmin);
      const std::uint8_t* ql = b.qs;
      std::uint8_t u1 = 1, u2 = 2;
      for (int j = 0; j < 4; ++j) {
        std::uint8_t sc, m;
        scale_min_k4(2 * j, b.scales, sc, m);
        const float d1 = d * sc;
        const float m1 = min * m;
        scale_min_k4(2 * j + 1, b.scales, sc, m);
        const float d2 = d * sc;
        const float m2 = min * m;
        for (int l = 0; l < 32; ++l)
          *y++ = d1 * ((ql[l] & 0xF) + (b.qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l)
          *y++ = d2 * ((ql[l] >> 4) + (b.qh[l] & u2 ? 16 : 0)) - m2;
        ql += 32;
        u1 = static_cast<std::uint8_t>(u1 << 2);
        u2 = static_cast<std::uint8_t>(u2 << 2);
      }
    }
    return;
  case ggml_type::q6_k:
    for (std::size_t i = 0; i < nb; ++i) {
      const auto& b = blocks<block_q6_k>(src)[i];
      const float d = h2f(b.d);
      const std::uint8_t* ql = b.ql;
      const std::uint8_t* qh = b.qh;
      const std::int8_t* sc = b.scales;
      for (int n = 0; n < kqk; n += 128) {
        for (int l = 0; l < 32; ++l) {
          int is = l / 16;
          const int q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
          const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[l] = d * sc[is] * q1;
          y[l + 32] = d * sc[is + 2] * q2;
          y[l + 64] = d * sc[is + 4] * q3;
          y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
      }
    }
    return;
  case ggml_type::q8_k:
    for (std::size_t i = 0; i < nb; ++i) {
      const auto& b = blocks<block_q8_k>(src)[i];
      for (int j = 0; j < kqk; ++j)
        *y++ = b.d * b.qs[j];
    }
    return;
  case ggml_type::f32:
  case ggml_type::f16:
  case ggml_type::bf16:
    return; // element formats: handled by dequantize_row
  }
}

// -- the portable dot products ------------------------------------------------
// Each mirrors the lane structure of ggml's AVX2 kernel: 8 int32 lanes per
// block, lane l holding the products of the elements e with e % 32 in
// [4l, 4l + 4) (times their sub-block scale), converted to float and fused
// into 8 float accumulators, which are summed as hsum_float_8 does.

using lanes_i = std::int32_t[8];
using lanes_f = float[8];

float hsum8(const lanes_f a) noexcept {
  const float r0 = a[0] + a[4];
  const float r1 = a[1] + a[5];
  const float r2 = a[2] + a[6];
  const float r3 = a[3] + a[7];
  return (r0 + r2) + (r1 + r3);
}

void fma_lanes(lanes_f acc, float d, const lanes_i s) noexcept {
  for (int l = 0; l < 8; ++l)
    acc[l] = std::fma(d, static_cast<float>(s[l]), acc[l]);
}

/// Lanes of sum q[e] * y[e] over 32 elements (q already signed values).
void lanes32(const int* q, const std::int8_t* y, lanes_i s) noexcept {
  for (int l = 0; l < 8; ++l) {
    int v = 0;
    for (int e = 4 * l; e < 4 * l + 4; ++e)
      v += q[e] * y[e];
    s[l] = v;
  }
}

float dot_q4_0_portable(std::size_t nb, const block_q4_0* x,
                        const block_q8_0* y) {
  lanes_f acc = {};
  for (std::size_t i = 0; i < nb; ++i) {
    int q[32];
    for (int j = 0; j < 16; ++j) {
      q[j] = (x[i].qs[j] & 0xF) - 8;
      q[j + 16] = (x[i].qs[j] >> 4) - 8;
    }
    lanes_i s;
    lanes32(q, y[i].qs, s);
    fma_lanes(acc, h2f(x[i].d) * h2f(y[i].d), s);
  }
  return hsum8(acc);
}

float dot_q5_0_portable(std::size_t nb, const block_q5_0* x,
                        const block_q8_0* y) {
  lanes_f acc = {};
  for (std::size_t i = 0; i < nb; ++i) {
    std::uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    int q[32];
    for (int j = 0; j < 16; ++j) {
      q[j] = ((x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
      q[j + 16] = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
    }
    lanes_i s;
    lanes32(q, y[i].qs, s);
    fma_lanes(acc, h2f(x[i].d) * h2f(y[i].d), s);
  }
  return hsum8(acc);
}

float dot_q8_0_portable(std::size_t nb, const block_q8_0* x,
                        const block_q8_0* y) {
  lanes_f acc = {};
  for (std::size_t i = 0; i < nb; ++i) {
    int q[32];
    for (int j = 0; j < 32; ++j)
      q[j] = x[i].qs[j];
    lanes_i s;
    lanes32(q, y[i].qs, s);
    fma_lanes(acc, h2f(x[i].d) * h2f(y[i].d), s);
  }
  return hsum8(acc);
}

/// ggml's `summs += m * s` of Q4_1/Q5_1 (its C compiler fuses it).
float add_min_term(float summs, float m, float s) noexcept {
  return std::fma(m, s, summs);
}

float dot_q4_1_portable(std::size_t nb, const block_q4_1* x,
                        const block_q8_1* y) {
  lanes_f acc = {};
  float summs = 0;
  for (std::size_t i = 0; i < nb; ++i) {
    summs = add_min_term(summs, h2f(x[i].m), h2f(y[i].s));
    int q[32];
    for (int j = 0; j < 16; ++j) {
      q[j] = x[i].qs[j] & 0xF;
      q[j + 16] = x[i].qs[j] >> 4;
    }
    lanes_i s;
    lanes32(q, y[i].qs, s);
    fma_lanes(acc, h2f(x[i].d) * h2f(y[i].d), s);
  }
  return hsum8(acc) + summs;
}

float dot_q5_1_portable(std::size_t nb, const block_q5_1* x,
                        const block_q8_1* y) {
  lanes_f acc = {};
  float summs = 0;
  for (std::size_t i = 0; i < nb; ++i) {
    summs = add_min_term(summs, h2f(x[i].m), h2f(y[i].s));
    std::uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    int q[32];
    for (int j = 0; j < 16; ++j) {
      q[j] = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      q[j + 16] = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    }
    lanes_i s;
    lanes32(q, y[i].qs, s);
    fma_lanes(acc, h2f(x[i].d) * h2f(y[i].d), s);
  }
  return hsum8(acc) + summs;
}

/// Lanes of a 256-element super-block: sum over e of scale[e / group] *
/// q[e] * y[e], lane (e % 32) / 4.
void lanes256(const int* q, const int* scale, int group, const std::int8_t* y,
              lanes_i s) noexcept {
  for (int l = 0; l < 8; ++l)
    s[l] = 0;
  for (int c = 0; c < kqk; c += 32)
    for (int l = 0; l < 8; ++l) {
      int v = 0;
      for (int e = c + 4 * l; e < c + 4 * l + 4; ++e)
        v += scale[e / group] * (q[e] * y[e]);
      s[l] += v;
    }
}

float dot_q2_k_portable(std::size_t nb, const block_q2_k* x,
                        const block_q8_k* y) {
  lanes_f acc = {};
  for (std::size_t i = 0; i < nb; ++i) {
    const float d = y[i].d * h2f(x[i].d);
    const float dmin = -y[i].d * h2f(x[i].dmin);
    lanes_i mins;
    for (int l = 0; l < 8; ++l)
      mins[l] = (x[i].scales[2 * l] >> 4) * y[i].bsums[2 * l] +
                (x[i].scales[2 * l + 1] >> 4) * y[i].bsums[2 * l + 1];
    fma_lanes(acc, dmin, mins);
    int q[kqk], sc[16];
    for (int g = 0; g < 16; ++g)
      sc[g] = x[i].scales[g] & 0xF;
    for (int e = 0; e < kqk; ++e) {
      const int half = e / 128, k = (e % 128) / 32, b = e % 32;
      q[e] = (x[i].qs[32 * half + b] >> (2 * k)) & 3;
    }
    lanes_i s;
    lanes256(q, sc, 16, y[i].qs, s);
    fma_lanes(acc, d, s);
  }
  return hsum8(acc);
}

float dot_q3_k_portable(std::size_t nb, const block_q3_k* x,
                        const block_q8_k* y) {
  lanes_f acc = {};
  for (std::size_t i = 0; i < nb; ++i) {
    const float d = y[i].d * h2f(x[i].d);
    int q[kqk], sc[16];
    q3k_scales(x[i].scales, sc);
    for (int e = 0; e < kqk; ++e) {
      const int half = e / 128, k = (e % 128) / 32, b = e % 32;
      const int lo = (x[i].qs[32 * half + b] >> (2 * k)) & 3;
      const bool hi = (x[i].hmask[b] >> (4 * half + k)) & 1;
      q[e] = lo - (hi ? 0 : 4);
    }
    lanes_i s;
    lanes256(q, sc, 16, y[i].qs, s);
    fma_lanes(acc, d, s);
  }
  return hsum8(acc);
}

/// The 8 scales and 8 minimums of a Q4_K/Q5_K block.
void k4_scales(const std::uint8_t* s12, int sc[8], int mn[8]) noexcept {
  for (int j = 0; j < 8; ++j) {
    std::uint8_t a, b;
    scale_min_k4(j, s12, a, b);
    sc[j] = a;
    mn[j] = b;
  }
}

/// ggml's `summs += dmin * isum` of Q5_K (fused by its C compiler).
float add_q5k_min(float summs, float dmin, int isum) noexcept {
  return std::fma(dmin, static_cast<float>(isum), summs);
}

float dot_q4_k_portable(std::size_t nb, const block_q4_k* x,
                        const block_q8_k* y) {
  lanes_f acc = {};
  float acc_m[4] = {};
  for (std::size_t i = 0; i < nb; ++i) {
    const float d = y[i].d * h2f(x[i].d);
    const float dmin = -y[i].d * h2f(x[i].dmin);
    int sc[8], mn[8];
    k4_scales(x[i].scales, sc, mn);
    for (int l = 0; l < 4; ++l) {
      const int p0 = y[i].bsums[4 * l] + y[i].bsums[4 * l + 1];
      const int p1 = y[i].bsums[4 * l + 2] + y[i].bsums[4 * l + 3];
      const int prod = mn[2 * l] * p0 + mn[2 * l + 1] * p1;
      acc_m[l] = std::fma(dmin, static_cast<float>(prod), acc_m[l]);
    }
    int q[kqk];
    for (int e = 0; e < kqk; ++e) {
      const int j = e / 64, b = e % 32;
      const std::uint8_t byte = x[i].qs[32 * j + b];
      q[e] = (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
    }
    lanes_i s;
    lanes256(q, sc, 32, y[i].qs, s);
    fma_lanes(acc, d, s);
  }
  const float m = (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
  return hsum8(acc) + m;
}

float dot_q5_k_portable(std::size_t nb, const block_q5_k* x,
                        const block_q8_k* y) {
  lanes_f acc = {};
  float summs = 0;
  for (std::size_t i = 0; i < nb; ++i) {
    const float d = y[i].d * h2f(x[i].d);
    const float dmin = -y[i].d * h2f(x[i].dmin);
    int sc[8], mn[8];
    k4_scales(x[i].scales, sc, mn);
    int total = 0;
    for (int j = 0; j < 8; ++j)
      total += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    summs = add_q5k_min(summs, dmin, total);
    int q[kqk];
    for (int e = 0; e < kqk; ++e) {
      const int j = e / 64, b = e % 32;
      const bool high = (e % 64) >= 32;
      const std::uint8_t byte = x[i].qs[32 * j + b];
      const int bit = (x[i].qh[b] >> (2 * j + (high ? 1 : 0))) & 1;
      q[e] = (high ? (byte >> 4) : (byte & 0xF)) | (bit << 4);
    }
    lanes_i s;
    lanes256(q, sc, 32, y[i].qs, s);
    fma_lanes(acc, d, s);
  }
  return hsum8(acc) + summs;
}

float dot_q6_k_portable(std::size_t nb, const block_q6_k* x,
                        const block_q8_k* y) {
  lanes_f acc = {};
  for (std::size_t i = 0; i < nb; ++i) {
    const float d = y[i].d * h2f(x[i].d);
    int q[kqk], sc[16];
    for (int g = 0; g < 16; ++g)
      sc[g] = x[i].scales[g];
    for (int e = 0; e < kqk; ++e) {
      const int half = e / 128, k = (e % 128) / 32, b = e % 32;
      const std::uint8_t lbyte = x[i].ql[64 * half + 32 * (k & 1) + b];
      const int lo = k < 2 ? (lbyte & 0xF) : (lbyte >> 4);
      const int hi = (x[i].qh[32 * half + b] >> (2 * k)) & 3;
      q[e] = lo | (hi << 4); // the -32 comes from the group sums below
    }
    lanes_i s;
    lanes256(q, sc, 16, y[i].qs, s);
    for (int l = 0; l < 8; ++l)
      s[l] -= 32 * (sc[2 * l] * y[i].bsums[2 * l] +
                    sc[2 * l + 1] * y[i].bsums[2 * l + 1]);
    fma_lanes(acc, d, s);
  }
  return hsum8(acc);
}

/// F32/F16/BF16 rows: two 16-lane accumulators over 32 elements as
/// ggml_vec_dot_bf16's AVX-512F build, reduced in double; F32 and F16 the
/// same way (see the header: their exact matrix products are
/// host::matmul_weights').
template<class LoadX, class LoadY>
float dot_elements(std::size_t n, LoadX wx, LoadY ay) {
  float c1[16] = {}, c2[16] = {};
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 16; ++l) {
      c1[l] = wx(i + l) * ay(i + l) + c1[l];
      c2[l] = wx(i + 16 + l) * ay(i + 16 + l) + c2[l];
    }
  auto reduce = [](const float* c) {
    float h[8], q[4];
    for (int l = 0; l < 8; ++l)
      h[l] = c[l] + c[l + 8];
    for (int l = 0; l < 4; ++l)
      q[l] = h[l] + h[l + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
  };
  double sum = 0;
  sum += static_cast<double>(reduce(c1));
  sum += static_cast<double>(reduce(c2));
  for (; i < n; ++i)
    sum += static_cast<double>(wx(i) * ay(i));
  return static_cast<float>(sum);
}

float dot_element_row(ggml_type t, std::size_t n, const void* w,
                      const void* a) {
  if (t == ggml_type::f32) {
    auto x = static_cast<const float*>(w);
    auto y = static_cast<const float*>(a);
    return dot_elements(
        n, [x](std::size_t i) { return x[i]; },
        [y](std::size_t i) { return y[i]; });
  }
  auto bits = [](const void* p, std::size_t i) {
    std::uint16_t h;
    std::memcpy(&h, static_cast<const std::uint8_t*>(p) + 2 * i, 2);
    return h;
  };
  if (t == ggml_type::f16)
    return dot_elements(
        n, [&](std::size_t i) { return h2f(bits(w, i)); },
        [&](std::size_t i) { return h2f(bits(a, i)); });
  return dot_elements(
      n, [&](std::size_t i) { return bf16_to_f32(bits(w, i)); },
      [&](std::size_t i) { return bf16_to_f32(bits(a, i)); });
}

// -- the AVX2 dot products ----------------------------------------------------

bool have_avx2() noexcept {
  static const bool yes = __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("fma") &&
                          host::cpu_has_f16c();
  return yes && host::widest_isa() != host::isa::scalar;
}

#define EXO_AVX2 __attribute__((target("avx2,fma,f16c")))

EXO_AVX2 inline float hsum8_avx2(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

EXO_AVX2 inline float h2f_avx2(std::uint16_t h) {
  return _cvtsh_ss(h);
}

// -- BF16 rows on AVX-512F ---------------------------------------------------

#define EXO_AVX512F __attribute__((target("avx512f,avx2,fma,f16c")))

/// 16 BF16 values from p as floats (their bits, 16 places up).
EXO_AVX512F inline __m512 load16_bf16(const std::uint16_t* p) {
  // The maskz forms with every lane set: GCC 12 warns about the plain
  // ones' undefined pass-through operand.
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
    0xffff,
    _mm512_maskz_cvtepu16_epi32(
      0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
    16));
}

/// 16 activations from element i: floats, or BF16 bits.
template <bool F32>
EXO_AVX512F inline __m512 act16(const void* a, std::size_t i) {
  if constexpr (F32)
    return _mm512_loadu_ps(static_cast<const float*>(a) + i);
  else
    return load16_bf16(static_cast<const std::uint16_t*>(a) + i);
}

/// dot_elements' reduction of one 16-lane accumulator (halves, quarters,
/// then (q0 + q2) + (q1 + q3)).
EXO_AVX512F inline float reduce16_bf16(__m512 c) {
  const __m512d cd = _mm512_castps_pd(c);
  const __m256 h = _mm256_add_ps(
    _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, cd, 0)),
    _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, cd, 1)));
  return hsum8_avx2(h);
}

/// dot_element_row for BF16 weights against NT tokens at once, on
/// AVX-512F: ggml_vec_dot_bf16's AVX-512F order (two 16-lane
/// accumulators over 32 elements, multiply then add, each reduced and
/// summed in double, the rest in double) with the same bits as the
/// portable loop, the weights converted once for all tokens. Activations:
/// BF16 bits (ActF32 false) or those values as floats.
template <int NT, bool ActF32>
EXO_AVX512F void dot_bf16_tokens(std::size_t n, const std::uint16_t* w,
                                 const void* const* a, float* out) {
  __m512 c1[NT], c2[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    c1[t] = c2[t] = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    // The weights 8 KiB on (the rest of the row, then the next rows) into
    // L2: the hardware prefetchers alone kept a single token's stream at
    // two thirds of the core's read rate. Prefetches never fault; the
    // address is an integer's.
    _mm_prefetch(reinterpret_cast<const char*>(
                   reinterpret_cast<std::uintptr_t>(w + i) + 8192),
                 _MM_HINT_T1);
    const __m512 w1 = load16_bf16(w + i), w2 = load16_bf16(w + i + 16);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      c1[t] = _mm512_add_ps(_mm512_mul_ps(w1, act16<ActF32>(a[t], i)), c1[t]);
      c2[t] = _mm512_add_ps(_mm512_mul_ps(w2, act16<ActF32>(a[t], i + 16)), c2[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    double sum = 0;
    sum += static_cast<double>(reduce16_bf16(c1[t]));
    sum += static_cast<double>(reduce16_bf16(c2[t]));
    for (std::size_t j = i; j < n; ++j) {
      float x;
      if constexpr (ActF32) {
        x = static_cast<const float*>(a[t])[j];
      } else {
        x = bf16_to_f32(static_cast<const std::uint16_t*>(a[t])[j]);
      }
      sum += static_cast<double>(bf16_to_f32(w[j]) * x);
    }
    out[t] = static_cast<float>(sum);
  }
}

bool bf16_simd() noexcept {
  return host::widest_isa() == host::isa::avx512;
}

/// One BF16 row against n tokens' activations as floats, 8 at a time.
void dot_bf16_rows(std::size_t k, const std::uint16_t* w,
                   const float* const* a, float* out, std::size_t n) {
  for (std::size_t t0 = 0; t0 < n; t0 += 8) {
    const std::size_t nt = std::min<std::size_t>(8, n - t0);
    const void* at[8];
    for (std::size_t t = 0; t < nt; ++t)
      at[t] = a[t0 + t];
    switch (nt) {
    case 1: dot_bf16_tokens<1, true>(k, w, at, out + t0); break;
    case 2: dot_bf16_tokens<2, true>(k, w, at, out + t0); break;
    case 3: dot_bf16_tokens<3, true>(k, w, at, out + t0); break;
    case 4: dot_bf16_tokens<4, true>(k, w, at, out + t0); break;
    case 5: dot_bf16_tokens<5, true>(k, w, at, out + t0); break;
    case 6: dot_bf16_tokens<6, true>(k, w, at, out + t0); break;
    case 7: dot_bf16_tokens<7, true>(k, w, at, out + t0); break;
    default: dot_bf16_tokens<8, true>(k, w, at, out + t0); break;
    }
  }
}

/// 8 int32 lanes of 4-byte dot products of signed x and signed y.
EXO_AVX2 inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i p =
      _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/// The same with unsigned x (0..127).
EXO_AVX2 inline __m256i dot_u8(__m256i x, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

/// 32 nibbles of 16 bytes: low nibbles first, then high.
EXO_AVX2 inline __m256i nibbles(const std::uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m),
                          _mm_and_si128(b, m));
}

/// 0xFF in byte j where bit j of the 32 bits at p is set.
EXO_AVX2 inline __m256i bit_bytes(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(v)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                        0x0101010101010101, 0x0000000000000000));
  const __m256i bit =
      _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

EXO_AVX2 float dot_q8_0_avx2(std::size_t nb, const block_q8_0* x,
                             const block_q8_0* y) {
  __m256 acc = _mm256_setzero_ps();
  for (std::size_t i = 0; i < nb; ++i) {
    const __m256 d = _mm256_set1_ps(h2f_avx2(x[i].d) * h2f_avx2(y[i].d));
    const __m256i qx =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    const __m256i qy =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(qx, qy)), acc);
  }
  return hsum8_avx2(acc);
}

/// The 32 weights of a block of the 32-element formats as bytes, as
/// their AVX2 dot products unpack them (signed: Q4_0, Q5_0; unsigned with
/// a minimum: Q4_1, Q5_1).
struct unpack_q4_0 {
  using block = block_q4_0;
  using act = block_q8_0;
  static constexpr bool with_min = false;
  EXO_AVX2 __m256i operator()(const block& b) const {
    return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8));
  }
};
struct unpack_q5_0 {
  using block = block_q5_0;
  using act = block_q8_0;
  static constexpr bool with_min = false;
  EXO_AVX2 __m256i operator()(const block& b) const {
    const __m256i sixteen = _mm256_set1_epi8(16);
    const __m256i hi = _mm256_and_si256(bit_bytes(b.qh), sixteen);
    return _mm256_sub_epi8(_mm256_or_si256(nibbles(b.qs), hi), sixteen);
  }
};
struct unpack_q4_1 {
  using block = block_q4_1;
  using act = block_q8_1;
  static constexpr bool with_min = true;
  EXO_AVX2 __m256i operator()(const block& b) const {
    return nibbles(b.qs);
  }
};
struct unpack_q5_1 {
  using block = block_q5_1;
  using act = block_q8_1;
  static constexpr bool with_min = true;
  EXO_AVX2 __m256i operator()(const block& b) const {
    const __m256i hi =
        _mm256_and_si256(bit_bytes(b.qh), _mm256_set1_epi8(16));
    return _mm256_or_si256(nibbles(b.qs), hi);
  }
};

/// The 32-element formats' dot products (Q4_0, Q5_0, Q4_1, Q5_1: U says
/// which) for NT tokens at once, each token as ggml's AVX2 vec_dot kernel
/// sums it (the same bits): a block's weights are unpacked once for all of
/// them; each token's integer lanes, float steps and minimum term are its
/// own. A decode batch took each row once per token (12 x 512 Q4_0
/// model, one core: 4 sequences 1.22x one sequence's step).
template <class U, int NT>
EXO_AVX2 void dot_32_tokens(std::size_t nb, const typename U::block* x,
                            const typename U::act* const* y, float* out) {
  const U unpack;
  __m256 acc[NT];
  float summs[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    summs[t] = 0;
  }
  for (std::size_t i = 0; i < nb; ++i) {
    const float dx = h2f_avx2(x[i].d);
    if constexpr (U::with_min) {
      const float mx = h2f_avx2(x[i].m);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t)
        summs[t] = add_min_term(summs[t], mx, h2f_avx2(y[t][i].s));
    }
    const __m256i qx = unpack(x[i]);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const __m256 d = _mm256_set1_ps(dx * h2f_avx2(y[t][i].d));
      const __m256i qy =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[t][i].qs));
      const __m256i p = U::with_min ? dot_u8(qx, qy) : dot_i8(qx, qy);
      acc[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
    out[t] = U::with_min ? hsum8_avx2(acc[t]) + summs[t] : hsum8_avx2(acc[t]);
}

/// dot_32_tokens for n tokens, 4 at a time; y: n activation rows.
template <class U>
void dot_32_tokens_n(std::size_t nb, const void* x, const void* const* y,
                     float* out, std::size_t n) {
  const auto* b = static_cast<const typename U::block*>(x);
  const typename U::act* ys[4];
  for (std::size_t t0 = 0; t0 < n; t0 += 4) {
    const std::size_t nt = std::min<std::size_t>(4, n - t0);
    for (std::size_t t = 0; t < nt; ++t)
      ys[t] = static_cast<const typename U::act*>(y[t0 + t]);
    switch (nt) {
    case 1: dot_32_tokens<U, 1>(nb, b, ys, out + t0); break;
    case 2: dot_32_tokens<U, 2>(nb, b, ys, out + t0); break;
    case 3: dot_32_tokens<U, 3>(nb, b, ys, out + t0); break;
    default: dot_32_tokens<U, 4>(nb, b, ys, out + t0); break;
    }
  }
}

/// The one-token dot products of the 32-element formats (ggml's AVX2
/// vec_dot kernels' bits): dot_32_tokens for one token.
#define EXO_DOT32(T, U)                                                      \
  EXO_AVX2 float dot_##T##_avx2(std::size_t nb, const U::block* x,           \
                                const U::act* y) {                           \
    float out;                                                               \
    dot_32_tokens<U, 1>(nb, x, &y, &out);                                    \
    return out;                                                              \
  }
EXO_DOT32(q4_0, unpack_q4_0)
EXO_DOT32(q5_0, unpack_q5_0)
EXO_DOT32(q4_1, unpack_q4_1)
EXO_DOT32(q5_1, unpack_q5_1)
#undef EXO_DOT32

/// The token kernel of a 32-element weight format, or null (other
/// formats; no AVX2).
using tokens_fn = void (*)(std::size_t, const void*, const void* const*,
                           float*, std::size_t);
tokens_fn tokens_kernel(ggml_type t) {
  switch (t) {
  case ggml_type::q4_0: return &dot_32_tokens_n<unpack_q4_0>;
  case ggml_type::q5_0: return &dot_32_tokens_n<unpack_q5_0>;
  case ggml_type::q4_1: return &dot_32_tokens_n<unpack_q4_1>;
  case ggml_type::q5_1: return &dot_32_tokens_n<unpack_q5_1>;
  default: return nullptr;
  }
}

EXO_AVX2 inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

/// Byte shuffles that spread int16 scales over the 16 int16 of a vector:
/// pair_masks[k] puts scale 2k (of the 8 in a 128-bit lane) in the low 8
/// int16 and scale 2k + 1 in the high 8; one_masks[i] puts scale i in all.
struct shuffle_masks {
  alignas(32) std::uint8_t pair[4][32];
  alignas(32) std::uint8_t one[8][32];
  shuffle_masks() {
    for (int k = 0; k < 4; ++k)
      for (int b = 0; b < 32; ++b)
        pair[k][b] =
            static_cast<std::uint8_t>(4 * k + (b >= 16 ? 2 : 0) + (b & 1));
    for (int i = 0; i < 8; ++i)
      for (int b = 0; b < 32; ++b)
        one[i][b] = static_cast<std::uint8_t>(2 * i + (b & 1));
  }
};
const shuffle_masks masks;

/// The 8 int16 scales of 128-bit half h of sc16, in both halves.
EXO_AVX2 inline __m256i half_of(__m256i sc16, int h) {
  return h ? _mm256_permute2x128_si256(sc16, sc16, 0x11)
           : _mm256_permute2x128_si256(sc16, sc16, 0x00);
}

EXO_AVX2 inline __m256i pair_of(__m256i half, int k) {
  return _mm256_shuffle_epi8(half, load32(masks.pair[k]));
}

/// Q4_K/Q5_K's 12 scale bytes as 8 scales (bytes 0..7) and 8 minimums
/// (bytes 8..15), the 6-bit fields unpacked.
inline __m128i k4_unpack(const std::uint8_t* s12) {
  std::uint32_t u[3];
  std::memcpy(u, s12, 12);
  const std::uint32_t low6 = 0x3f3f3f3f, nib = 0x0f0f0f0f, top2 = 0x03030303;
  const std::uint32_t sc_lo = u[0] & low6;
  const std::uint32_t sc_hi = (u[2] & nib) | (((u[0] >> 6) & top2) << 4);
  const std::uint32_t mn_lo = u[1] & low6;
  const std::uint32_t mn_hi = ((u[2] >> 4) & nib) | (((u[1] >> 6) & top2) << 4);
  return _mm_set_epi32(static_cast<int>(mn_hi), static_cast<int>(mn_lo),
                       static_cast<int>(sc_hi), static_cast<int>(sc_lo));
}

/// Q3_K's 12 scale bytes as 16 signed scales (minus 32) in int8.
inline __m128i q3k_unpack(const std::uint8_t* s12) {
  std::uint32_t u[3];
  std::memcpy(u, s12, 12);
  const std::uint32_t nib = 0x0f0f0f0f, top2 = 0x03030303;
  const __m128i v = _mm_set_epi32(
      static_cast<int>(((u[1] >> 4) & nib) | (((u[2] >> 6) & top2) << 4)),
      static_cast<int>(((u[0] >> 4) & nib) | (((u[2] >> 4) & top2) << 4)),
      static_cast<int>((u[1] & nib) | (((u[2] >> 2) & top2) << 4)),
      static_cast<int>((u[0] & nib) | ((u[2] & top2) << 4)));
  return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

/// Q2_K's (Q3 false) and Q3_K's (Q3 true) dot products with Q8_K for NT
/// tokens at once on AVX2, each token as ggml's vec_dot_q2_K_q8_K /
/// vec_dot_q3_K_q8_K AVX2 kernels sum it (the same bits): a block's scales,
/// 2-bit fields (and Q3_K's high-bit offsets: 4 where the bit is clear,
/// subtracted) unpacked once for all of them. Q2_K's minimum term goes
/// into each token's float lanes first, as ggml's does.
template <bool Q3, int NT>
EXO_AVX2 void dot_q23_k_avx2_tokens(std::size_t nb, const void* xv,
                                    const block_q8_k* const* y, float* out) {
  using block = std::conditional_t<Q3, block_q3_k, block_q2_k>;
  const auto* x = static_cast<const block*>(xv);
  __m256 acc[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
    acc[t] = _mm256_setzero_ps();
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i four = _mm256_set1_epi8(4);
  for (std::size_t i = 0; i < nb; ++i) {
    const float dx = h2f_avx2(x[i].d);
    __m256i sc16;
    __m256i hbits = _mm256_setzero_si256();
    if constexpr (Q3) {
      sc16 = _mm256_cvtepi8_epi16(q3k_unpack(x[i].scales));
      hbits = load32(x[i].hmask);
    } else {
      const __m128i m4 = _mm_set1_epi8(0xF);
      const __m128i packed =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
      const __m256i mins =
          _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
      const float dmx = h2f_avx2(x[i].dmin);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m256i prod = _mm256_madd_epi16(mins, load32(y[t][i].bsums));
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-y[t][i].d * dmx),
                                 _mm256_cvtepi32_ps(prod), acc[t]);
      }
      sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(packed, m4));
    }
    __m256i sumi[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i half = half_of(sc16, h);
      const __m256i bits = load32(x[i].qs + 32 * h);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
        __m256i off = _mm256_setzero_si256();
        if constexpr (Q3) {
          const __m256i mask =
              _mm256_set1_epi8(static_cast<char>(1 << (4 * h + k)));
          off = _mm256_andnot_si256(
              _mm256_cmpeq_epi8(_mm256_and_si256(hbits, mask), mask), four);
        }
        const __m256i sc = pair_of(half, k);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const __m256i qy = load32(y[t][i].qs + 128 * h + 32 * k);
          __m256i p = _mm256_maddubs_epi16(lo, qy);
          if constexpr (Q3)
            p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(off, qy));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(sc, p));
        }
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * dx),
                               _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
    out[t] = hsum8_avx2(acc[t]);
}

EXO_AVX2 float dot_q2_k_avx2(std::size_t nb, const block_q2_k* x,
                             const block_q8_k* y) {
  float out;
  dot_q23_k_avx2_tokens<false, 1>(nb, x, &y, &out);
  return out;
}

EXO_AVX2 float dot_q3_k_avx2(std::size_t nb, const block_q3_k* x,
                             const block_q8_k* y) {
  float out;
  dot_q23_k_avx2_tokens<true, 1>(nb, x, &y, &out);
  return out;
}

/// The minimum term of Q4_K/Q5_K: 4 int32 lanes, lane l = m[2l] * (b[4l] +
/// b[4l+1]) + m[2l+1] * (b[4l+2] + b[4l+3]).
EXO_AVX2 inline __m128i k4_min_lanes(__m256i mins_and_scales,
                                     const std::int16_t* bsums) {
  const __m256i bs = load32(bsums);
  const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs),
                                       _mm256_extracti128_si256(bs, 1));
  return _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), pairs);
}

EXO_AVX2 float dot_q4_k_avx2(std::size_t nb, const block_q4_k* x,
                             const block_q8_k* y) {
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0xF);
  for (std::size_t i = 0; i < nb; ++i) {
    const float d = y[i].d * h2f_avx2(x[i].d);
    const float dmin = -y[i].d * h2f_avx2(x[i].dmin);
    const __m256i ms = _mm256_cvtepu8_epi16(k4_unpack(x[i].scales));
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin),
                         _mm_cvtepi32_ps(k4_min_lanes(ms, y[i].bsums)), acc_m);
    const __m256i scales = half_of(ms, 0);
    __m256i sumi = _mm256_setzero_si256();
    const std::int8_t* q8 = y[i].qs;
    for (int j = 0; j < 4; ++j, q8 += 64) {
      const __m256i bits = load32(x[i].qs + 32 * j);
      const __m256i lo = _mm256_and_si256(bits, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
      const __m256i pl = _mm256_madd_epi16(
          _mm256_shuffle_epi8(scales, load32(masks.one[2 * j])),
          _mm256_maddubs_epi16(lo, load32(q8)));
      const __m256i ph = _mm256_madd_epi16(
          _mm256_shuffle_epi8(scales, load32(masks.one[2 * j + 1])),
          _mm256_maddubs_epi16(hi, load32(q8 + 32)));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
  acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
  return hsum8_avx2(acc) + _mm_cvtss_f32(acc_m);
}

/// The minimum term of a Q5_K block for one token, added to its running
/// sum as ggml's AVX2 vec_dot_q5_K_q8_K adds it (both Q5_K token kernels).
EXO_AVX2 inline float q5k_min_step(float summs, __m256i ms,
                                   const block_q8_k& y, float dmx) {
  __m128i m = k4_min_lanes(ms, y.bsums);
  m = _mm_add_epi32(m, _mm_unpackhi_epi64(m, m));
  m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 1));
  return add_q5k_min(summs, -y.d * dmx, _mm_cvtsi128_si32(m));
}

/// Q5_K's dot product with Q8_K for NT tokens at once on AVX2, each token
/// as ggml's vec_dot_q5_K_q8_K AVX2 kernel sums it (the same bits): a
/// block's scales and 5-bit weights are unpacked once for all of them,
/// each token's integer sums, minimum term and float steps its own. A
/// decode batch of a Q5_K_M file took each row once per token (12 x 512
/// model, one core: 4 sequences 1.44x one sequence's step).
template <int NT>
EXO_AVX2 void dot_q5_k_avx2_tokens(std::size_t nb, const block_q5_k* x,
                                   const block_q8_k* const* y, float* out) {
  __m256 acc[NT];
  float summs[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    summs[t] = 0;
  }
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (std::size_t i = 0; i < nb; ++i) {
    const float dx = h2f_avx2(x[i].d), dmx = h2f_avx2(x[i].dmin);
    const __m256i ms = _mm256_cvtepu8_epi16(k4_unpack(x[i].scales));
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      summs[t] = q5k_min_step(summs[t], ms, y[t][i], dmx);
    const __m256i scales = half_of(ms, 0);
    const __m256i hbits = load32(x[i].qh);
    __m256i sumi[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = load32(x[i].qs + 32 * j);
      const __m256i mlo = _mm256_set1_epi8(static_cast<char>(1 << (2 * j)));
      const __m256i mhi = _mm256_set1_epi8(static_cast<char>(1 << (2 * j + 1)));
      const __m256i hlo = _mm256_and_si256(
          _mm256_cmpeq_epi8(_mm256_and_si256(hbits, mlo), mlo), sixteen);
      const __m256i hhi = _mm256_and_si256(
          _mm256_cmpeq_epi8(_mm256_and_si256(hbits, mhi), mhi), sixteen);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), hlo);
      const __m256i hi = _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), hhi);
      const __m256i sl = _mm256_shuffle_epi8(scales, load32(masks.one[2 * j]));
      const __m256i sh =
          _mm256_shuffle_epi8(scales, load32(masks.one[2 * j + 1]));
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const std::int8_t* q8 = y[t][i].qs + 64 * j;
        const __m256i pl =
            _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, load32(q8)));
        const __m256i ph =
            _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, load32(q8 + 32)));
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(pl, ph));
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * dx),
                               _mm256_cvtepi32_ps(sumi[t]), acc[t]);
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
    out[t] = hsum8_avx2(acc[t]) + summs[t];
}

/// A K-quant token kernel (dot_q5_k_avx2_tokens etc.) for n tokens, 4 at
/// a time.
template <class B, template <int> class K>
void k_tokens(std::size_t nb, const void* x, const block_q8_k* const* y,
              float* out, std::size_t n) {
  const auto* b = static_cast<const B*>(x);
  for (; n >= 4; n -= 4, y += 4, out += 4)
    K<4>::run(nb, b, y, out);
  switch (n) {
  case 1: K<1>::run(nb, b, y, out); return;
  case 2: K<2>::run(nb, b, y, out); return;
  case 3: K<3>::run(nb, b, y, out); return;
  default: return;
  }
}
template <int NT> struct q2_k_tokens {
  static void run(std::size_t nb, const block_q2_k* x,
                  const block_q8_k* const* y, float* out) {
    dot_q23_k_avx2_tokens<false, NT>(nb, x, y, out);
  }
};
template <int NT> struct q3_k_tokens {
  static void run(std::size_t nb, const block_q3_k* x,
                  const block_q8_k* const* y, float* out) {
    dot_q23_k_avx2_tokens<true, NT>(nb, x, y, out);
  }
};
template <int NT> struct q5_k_tokens {
  static void run(std::size_t nb, const block_q5_k* x,
                  const block_q8_k* const* y, float* out) {
    dot_q5_k_avx2_tokens<NT>(nb, x, y, out);
  }
};

void q5_k_vnni_tokens(std::size_t nb, const void* x,
                      const block_q8_k* const* y, float* out, std::size_t n);
void q2_k_vnni_tokens(std::size_t nb, const void* x,
                      const block_q8_k* const* y, float* out, std::size_t n);
void q3_k_vnni_tokens(std::size_t nb, const void* x,
                      const block_q8_k* const* y, float* out, std::size_t n);

/// The token kernel of a K-quant other than Q4_K and Q6_K (their own
/// paths), or null.
using k_tokens_fn = void (*)(std::size_t, const void*,
                             const block_q8_k* const*, float*, std::size_t);
k_tokens_fn k_tokens_kernel(ggml_type t) {
  switch (t) {
  case ggml_type::q2_k:
    return host::have_vnni() ? &q2_k_vnni_tokens
                             : &k_tokens<block_q2_k, q2_k_tokens>;
  case ggml_type::q3_k:
    return host::have_vnni() ? &q3_k_vnni_tokens
                             : &k_tokens<block_q3_k, q3_k_tokens>;
  case ggml_type::q5_k:
    return host::have_vnni() ? &q5_k_vnni_tokens
                             : &k_tokens<block_q5_k, q5_k_tokens>;
  default: return nullptr;
  }
}

/// vec_dot_q5_K_q8_K's AVX2 bits for one row and token: the token kernel
/// (AVX-512 VNNI where the CPU has it: 1.38x the AVX2 one's speed on a
/// matrix in L2, 1.22x from DRAM).
float dot_q5_k_avx2(std::size_t nb, const block_q5_k* x,
                    const block_q8_k* y) {
  float out;
  k_tokens_kernel(ggml_type::q5_k)(nb, x, &y, &out, 1);
  return out;
}

/// The end of a Q6_K block for one token, as ggml's AVX2 vec_dot ends it:
/// the 8 integer lanes (scale x q x y, q unsigned 0..63) less 32 x the
/// scaled activation sums (the weights' offset of 32), then one fused step
/// of the float lanes by d8 * d.
EXO_AVX2 inline __m256 q6_k_block_end(__m256i sumi, __m256i sc16,
                                      const block_q8_k& y, float dw,
                                      __m256 acc) {
  const __m256i s = _mm256_sub_epi32(
      sumi, _mm256_slli_epi32(_mm256_madd_epi16(sc16, load32(y.bsums)), 5));
  const float d = y.d * dw;
  return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc);
}

/// Q6_K blocks 32 on from `b` asked for in L1 (4 lines: a block is 210
/// bytes). Rows lie one after another, so the kernels reading block after
/// block ask for what they read soon, across rows too; the hardware
/// prefetchers alone keep too few lines in flight for a stream from DRAM.
/// One core, 32 matrices of 8192 x 2048 (and of 2048 x 8192): one token
/// 9.6-10.6 (9.6-9.7) GB/s with the row after next asked for at each
/// row's start -> 12.0-12.4 (10.6-11.9), four tokens 6.7-8.1 -> 9.1. The
/// address is an integer's: no pointer leaves its array; prefetches never
/// fault.
inline void prefetch_q6_k_ahead(const block_q6_k* b) {
  const char* ahead = reinterpret_cast<const char*>(
    reinterpret_cast<std::uintptr_t>(b) + 32 * sizeof(block_q6_k));
  _mm_prefetch(ahead, _MM_HINT_T0);
  _mm_prefetch(ahead + 64, _MM_HINT_T0);
  _mm_prefetch(ahead + 128, _MM_HINT_T0);
  _mm_prefetch(ahead + 192, _MM_HINT_T0);
}

/// One Q6_K row against NT rows of activations at once, each token summed
/// exactly as ggml's vec_dot_q6_K_q8_K sums it (the same bits): the
/// weights are unpacked once per group of 32 for all NT tokens.
template <int NT>
EXO_AVX2 void dot_q6_k_avx2_tokens(std::size_t nb, const block_q6_k* x,
                                 const block_q8_k* const* y, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i m3 = _mm256_set1_epi8(3);
  __m256 acc[NT];
  #pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
    acc[t] = _mm256_setzero_ps();
  for (std::size_t i = 0; i < nb; ++i) {
    prefetch_q6_k_ahead(x + i);
    const __m256i sc16 = _mm256_cvtepi8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    // Two integer chains per token (even and odd groups of 32): the sums
    // are exact, so splitting them changes no bit, and the chained
    // multiply-adds' latency halves.
    __m256i sumi[NT][2];
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      sumi[t][0] = sumi[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i half = half_of(sc16, h);
      const __m256i l0 = load32(x[i].ql + 64 * h);
      const __m256i l1 = load32(x[i].ql + 64 * h + 32);
      const __m256i hb = load32(x[i].qh + 32 * h);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i lbits = (k & 1) ? l1 : l0;
        const __m256i lo =
            k < 2 ? _mm256_and_si256(lbits, m4)
                  : _mm256_and_si256(_mm256_srli_epi16(lbits, 4), m4);
        const __m256i hi = _mm256_slli_epi16(
            _mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m3), 4);
        const __m256i q = _mm256_or_si256(lo, hi);
        const __m256i sc = pair_of(half, k);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const __m256i p =
              _mm256_maddubs_epi16(q, load32(y[t][i].qs + 128 * h + 32 * k));
          sumi[t][k & 1] =
              _mm256_add_epi32(sumi[t][k & 1], _mm256_madd_epi16(sc, p));
        }
      }
    }
    const float dw = h2f_avx2(x[i].d);
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      acc[t] = q6_k_block_end(_mm256_add_epi32(sumi[t][0], sumi[t][1]), sc16,
                              y[t][i], dw, acc[t]);
  }
  #pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
    out[t] = hsum8_avx2(acc[t]);
}

#define EXO_AVX512_VNNI \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/// vpermw indices of the Q6_K scales for 512-bit step (h, kp): the 64
/// weights 128h + 64kp .. +63 are groups of 32 k = 2kp and 2kp + 1, each
/// scaled by 8h + 2k (its first 16) and 8h + 2k + 1 (its last 16); int16
/// lane i of the products belongs to group 2kp + i / 16, half (i / 8) % 2.
struct q6_scale_index {
  alignas(64) std::uint16_t idx[2][2][32];
  q6_scale_index() {
    for (int h = 0; h < 2; ++h)
      for (int kp = 0; kp < 2; ++kp)
        for (int i = 0; i < 32; ++i)
          idx[h][kp][i] = static_cast<std::uint16_t>(
            8 * h + 2 * (2 * kp + i / 16) + (i / 8) % 2);
  }
};
const q6_scale_index q6_scales512;

/// dot_q6_k_avx2_tokens on 512-bit registers (AVX-512 BW + VNNI; the
/// maskz forms with every lane set, as GCC 12 warns about the plain
/// ones' undefined pass-through operand), for up to 8 tokens: two
/// groups of 32 weights per instruction, their products scaled by one
/// vpdpwssd. Lane j of the low and of the high 256 bits sums the bytes
/// 4j .. 4j + 3 of its group, as lane j of the AVX2 kernel does; folded
/// at the end of each block, the exact integer sums are the AVX2 kernel's,
/// so the float steps and the bits are too. Each token has one
/// accumulator for both halves of a block, and the -32 of every weight
/// (sub-block j's scale times 32 times its activation sum, lane j / 2 of
/// the AVX2 kernel's madd) goes into the low lanes by one more vpdpwssd
/// with the scales times -32 (at most 4096 in magnitude: no overflow),
/// instead of a madd, a shift and a subtraction after the fold: integer
/// sums, lane for lane the same.
template <int NT>
EXO_AVX512_VNNI void dot_q6_k_vnni_tokens(std::size_t nb, const block_q6_k* x,
                                          const block_q8_k* const* y,
                                          float* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  // 16-bit shift counts: 0 for the low group, 2 for the high one.
  const __m512i cnt = _mm512_mask_blend_epi16(
    0xffff0000u, _mm512_setzero_si512(), _mm512_set1_epi16(2));
  __m512i sidx[2][2];
  for (int h = 0; h < 2; ++h)
    for (int kp = 0; kp < 2; ++kp)
      sidx[h][kp] = _mm512_load_si512(q6_scales512.idx[h][kp]);
  __m256 acc[NT];
  #pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    acc[t] = _mm256_setzero_ps();
  for (std::size_t i = 0; i < nb; ++i) {
    prefetch_q6_k_ahead(x + i);
    const __m256i sc16 = _mm256_cvtepi8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    // -32 times each scale, in the low 256 bits (the high ones meet
    // activation sums loaded as zeros).
    const __m512i nsc32 = _mm512_castsi256_si512(
      _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5)));
    __m512i sumi[NT];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sumi[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512(x[i].ql + 64 * h);
      const __m512i hb =
        _mm512_maskz_broadcast_i64x4(0xff, load32(x[i].qh + 32 * h));
      // Bits 2k, 2k + 1 of qh are bits 4, 5 of group k's weights: groups
      // 0 | 1 take (hb >> 0 | 2) << 4, groups 2 | 3 (hb >> 0 | 2) & 0x30.
      const __m512i t = _mm512_srlv_epi16(hb, cnt);
      const __m512i q01 = _mm512_or_si512(
        _mm512_and_si512(l, m4),
        _mm512_and_si512(_mm512_slli_epi16(t, 4), m30));
      const __m512i q23 = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
        _mm512_and_si512(t, m30));
      const __m512i s01 = _mm512_permutexvar_epi16(sidx[h][0], sc);
      const __m512i s23 = _mm512_permutexvar_epi16(sidx[h][1], sc);
#pragma GCC unroll 8
      for (int t2 = 0; t2 < NT; ++t2) {
        const std::int8_t* q8 = y[t2][i].qs + 128 * h;
        sumi[t2] = _mm512_dpwssd_epi32(
          sumi[t2], s01, _mm512_maddubs_epi16(q01, _mm512_loadu_si512(q8)));
        sumi[t2] = _mm512_dpwssd_epi32(
          sumi[t2], s23,
          _mm512_maddubs_epi16(q23, _mm512_loadu_si512(q8 + 64)));
      }
    }
    const float dw = h2f_avx2(x[i].d);
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m512i bs = _mm512_maskz_loadu_epi16(0x0000ffffu, y[t][i].bsums);
      const __m512i s2 = _mm512_dpwssd_epi32(sumi[t], nsc32, bs);
      const __m256i s =
        _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xff, s2, 0),
                         _mm512_maskz_extracti64x4_epi64(0xff, s2, 1));
      const float d = y[t][i].d * dw;
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s),
                               acc[t]);
    }
  }
  #pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    out[t] = hsum8_avx2(acc[t]);
}

/// dot_q5_k_avx2_tokens on 512-bit registers (AVX-512 BW + VNNI; the
/// maskz forms with every lane set, as GCC 12 warns about the plain
/// ones' undefined pass-through operand), for up to 8 tokens: a step's two
/// groups of 32 weights (its low nibbles and its high ones) in one
/// register against the step's 64 contiguous activations, one
/// vpmaddubsw and one vpdpwssd with the two groups' scales. Lane j of the
/// low and of the high 256 bits sums the bytes 4j .. 4j + 3 of its group,
/// as lane j of the AVX2 kernel does; folded at the end of each block the
/// exact integer sums are the AVX2 kernel's, so the float steps and the
/// bits are too (and each token's minimum term is its own).
template <int NT>
EXO_AVX512_VNNI void dot_q5_k_vnni_tokens(std::size_t nb, const block_q5_k* x,
                                          const block_q8_k* const* y,
                                          float* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i sixteen = _mm512_set1_epi8(16);
  // 16-bit shift counts: 0 for the low group, 4 for the high one.
  const __m512i cnt = _mm512_mask_blend_epi16(
    0xffff0000u, _mm512_setzero_si512(), _mm512_set1_epi16(4));
  // vpermw indices: words 0-15 scale 2j, 16-31 scale 2j + 1.
  __m512i sidx[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
    sidx[j] = _mm512_mask_blend_epi16(0xffff0000u,
                                      _mm512_set1_epi16(static_cast<short>(2 * j)),
                                      _mm512_set1_epi16(static_cast<short>(2 * j + 1)));
  __m256 acc[NT];
  float summs[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    summs[t] = 0;
  }
  for (std::size_t i = 0; i < nb; ++i) {
    // The block 32 on (rows lie one after another), as Q6_K's kernels.
    const char* ahead = reinterpret_cast<const char*>(
      reinterpret_cast<std::uintptr_t>(x + i) + 32 * sizeof(block_q5_k));
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
    _mm_prefetch(ahead + 128, _MM_HINT_T0);
    const float dx = h2f_avx2(x[i].d), dmx = h2f_avx2(x[i].dmin);
    const __m256i ms = _mm256_cvtepu8_epi16(k4_unpack(x[i].scales));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      summs[t] = q5k_min_step(summs[t], ms, y[t][i], dmx);
    const __m512i sc = _mm512_castsi256_si512(ms); // words 0-7: the scales
    const __m512i hb =
      _mm512_maskz_broadcast_i64x4(0xff, load32(x[i].qh));
    __m512i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sumi[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512i bits =
        _mm512_maskz_broadcast_i64x4(0xff, load32(x[i].qs + 32 * j));
      // Bit 2j of qh is the low group's fifth bit, 2j + 1 the high one's.
      const __m512i hm = _mm512_mask_blend_epi8(
        0xffffffff00000000ull,
        _mm512_set1_epi8(static_cast<char>(1 << (2 * j))),
        _mm512_set1_epi8(static_cast<char>(1 << (2 * j + 1))));
      const __m512i q = _mm512_or_si512(
        _mm512_and_si512(_mm512_srlv_epi16(bits, cnt), m4),
        _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(hb, hm), sixteen));
      const __m512i s = _mm512_permutexvar_epi16(sidx[j], sc);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t)
        sumi[t] = _mm512_dpwssd_epi32(
          sumi[t], s,
          _mm512_maddubs_epi16(q, _mm512_loadu_si512(y[t][i].qs + 64 * j)));
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m256i f =
        _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xff, sumi[t], 0),
                         _mm512_maskz_extracti64x4_epi64(0xff, sumi[t], 1));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * dx),
                               _mm256_cvtepi32_ps(f), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    out[t] = hsum8_avx2(acc[t]) + summs[t];
}

/// dot_q23_k_avx2_tokens (Q2_K: Q3 false; Q3_K: Q3 true)
/// on 512-bit registers (AVX-512 BW + VNNI), for up to 8 tokens: groups
/// k = 2kp and 2kp + 1 of 32 weights (2-bit fields of one 32-byte run,
/// shifted by 2k) in one register against their 64 contiguous
/// activations; the scales by 16 weights through dot_q6_k_vnni_tokens'
/// indices (Q2_K's and Q3_K's sixteen scales lie as Q6_K's). Q3_K keeps
/// the AVX2 kernel's two vpmaddubsw (the low bits, then 4 where the high
/// bit is clear, subtracted: its lanes hold that difference). Lane j of
/// each 256-bit half sums the bytes 4j .. 4j + 3 of its group as lane j of
/// the AVX2 kernel does; folded per block: the same integers and bits.
template <bool Q3, int NT>
EXO_AVX512_VNNI void dot_q23_k_vnni_tokens(std::size_t nb, const void* xv,
                                           const block_q8_k* const* y,
                                           float* out) {
  using block = std::conditional_t<Q3, block_q3_k, block_q2_k>;
  const auto* x = static_cast<const block*>(xv);
  const __m512i m3 = _mm512_set1_epi8(3);
  const __m512i four = _mm512_set1_epi8(4);
  __m512i sidx[2][2], cnt[2];
#pragma GCC unroll 2
  for (int kp = 0; kp < 2; ++kp) {
    // 16-bit shift counts: 2k for group k (the low half 2kp, the high
    // half 2kp + 1).
    cnt[kp] = _mm512_mask_blend_epi16(
      0xffff0000u, _mm512_set1_epi16(static_cast<short>(4 * kp)),
      _mm512_set1_epi16(static_cast<short>(4 * kp + 2)));
    for (int h = 0; h < 2; ++h)
      sidx[h][kp] = _mm512_load_si512(q6_scales512.idx[h][kp]);
  }
  __m256 acc[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    acc[t] = _mm256_setzero_ps();
  for (std::size_t i = 0; i < nb; ++i) {
    const char* ahead = reinterpret_cast<const char*>(
      reinterpret_cast<std::uintptr_t>(x + i) + 32 * sizeof(block));
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
    const float dx = h2f_avx2(x[i].d);
    __m256i sc16;
    __m512i hb = _mm512_setzero_si512();
    if constexpr (Q3) {
      sc16 = _mm256_cvtepi8_epi16(q3k_unpack(x[i].scales));
      hb = _mm512_maskz_broadcast_i64x4(0xff, load32(x[i].hmask));
    } else {
      const __m128i packed =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
      const __m256i mins = _mm256_cvtepu8_epi16(
          _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF)));
      const float dmx = h2f_avx2(x[i].dmin);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m256i prod = _mm256_madd_epi16(mins, load32(y[t][i].bsums));
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-y[t][i].d * dmx),
                                 _mm256_cvtepi32_ps(prod), acc[t]);
      }
      sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0xF)));
    }
    const __m512i sc = _mm512_castsi256_si512(sc16);
    __m512i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sumi[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i bits =
        _mm512_maskz_broadcast_i64x4(0xff, load32(x[i].qs + 32 * h));
#pragma GCC unroll 2
      for (int kp = 0; kp < 2; ++kp) {
        const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(bits, cnt[kp]), m3);
        const __m512i s = _mm512_permutexvar_epi16(sidx[h][kp], sc);
        __m512i off = _mm512_setzero_si512();
        if constexpr (Q3) {
          // 4 where group k's high bit (bit 4h + k of hmask) is clear.
          const __m512i hm = _mm512_mask_blend_epi8(
            0xffffffff00000000ull,
            _mm512_set1_epi8(static_cast<char>(1 << (4 * h + 2 * kp))),
            _mm512_set1_epi8(static_cast<char>(1 << (4 * h + 2 * kp + 1))));
          off = _mm512_maskz_mov_epi8(_mm512_testn_epi8_mask(hb, hm), four);
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m512i qy =
            _mm512_loadu_si512(y[t][i].qs + 128 * h + 64 * kp);
          __m512i p = _mm512_maddubs_epi16(lo, qy);
          if constexpr (Q3)
            p = _mm512_sub_epi16(p, _mm512_maddubs_epi16(off, qy));
          sumi[t] = _mm512_dpwssd_epi32(sumi[t], s, p);
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m256i f =
        _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xff, sumi[t], 0),
                         _mm512_maskz_extracti64x4_epi64(0xff, sumi[t], 1));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][i].d * dx),
                               _mm256_cvtepi32_ps(f), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    out[t] = hsum8_avx2(acc[t]);
}

template <bool Q3>
void q23_k_vnni_tokens(std::size_t nb, const void* x,
                       const block_q8_k* const* y, float* out, std::size_t n) {
  switch (n) {
  case 1: dot_q23_k_vnni_tokens<Q3, 1>(nb, x, y, out); return;
  case 2: dot_q23_k_vnni_tokens<Q3, 2>(nb, x, y, out); return;
  case 3: dot_q23_k_vnni_tokens<Q3, 3>(nb, x, y, out); return;
  case 4: dot_q23_k_vnni_tokens<Q3, 4>(nb, x, y, out); return;
  case 5: dot_q23_k_vnni_tokens<Q3, 5>(nb, x, y, out); return;
  case 6: dot_q23_k_vnni_tokens<Q3, 6>(nb, x, y, out); return;
  case 7: dot_q23_k_vnni_tokens<Q3, 7>(nb, x, y, out); return;
  default: dot_q23_k_vnni_tokens<Q3, 8>(nb, x, y, out); return;
  }
}
void q2_k_vnni_tokens(std::size_t nb, const void* x,
                      const block_q8_k* const* y, float* out, std::size_t n) {
  q23_k_vnni_tokens<false>(nb, x, y, out, n);
}
void q3_k_vnni_tokens(std::size_t nb, const void* x,
                      const block_q8_k* const* y, float* out, std::size_t n) {
  q23_k_vnni_tokens<true>(nb, x, y, out, n);
}

void q5_k_vnni_tokens(std::size_t nb, const void* x,
                      const block_q8_k* const* y, float* out, std::size_t n) {
  const auto* b = static_cast<const block_q5_k*>(x);
  switch (n) {
  case 1: dot_q5_k_vnni_tokens<1>(nb, b, y, out); return;
  case 2: dot_q5_k_vnni_tokens<2>(nb, b, y, out); return;
  case 3: dot_q5_k_vnni_tokens<3>(nb, b, y, out); return;
  case 4: dot_q5_k_vnni_tokens<4>(nb, b, y, out); return;
  case 5: dot_q5_k_vnni_tokens<5>(nb, b, y, out); return;
  case 6: dot_q5_k_vnni_tokens<6>(nb, b, y, out); return;
  case 7: dot_q5_k_vnni_tokens<7>(nb, b, y, out); return;
  default: dot_q5_k_vnni_tokens<8>(nb, b, y, out); return;
  }
}

/// dot_q6_k_avx2_tokens for n (1..q6_k_token_group) tokens, through the
/// VNNI kernel where `vnni` (host::have_vnni(), asked once by a caller that
/// runs many rows).
void dot_q6_k_tokens(std::size_t nb, const block_q6_k* x,
                     const block_q8_k* const* y, float* out, std::size_t n,
                     bool vnni) {
  if (vnni) {
    switch (n) {
    case 1: dot_q6_k_vnni_tokens<1>(nb, x, y, out); return;
    case 2: dot_q6_k_vnni_tokens<2>(nb, x, y, out); return;
    case 3: dot_q6_k_vnni_tokens<3>(nb, x, y, out); return;
    case 4: dot_q6_k_vnni_tokens<4>(nb, x, y, out); return;
    case 5: dot_q6_k_vnni_tokens<5>(nb, x, y, out); return;
    case 6: dot_q6_k_vnni_tokens<6>(nb, x, y, out); return;
    case 7: dot_q6_k_vnni_tokens<7>(nb, x, y, out); return;
    default: dot_q6_k_vnni_tokens<8>(nb, x, y, out); return;
    }
  }
  if (n > 4) { // the AVX2 kernel's registers hold 4 tokens
    dot_q6_k_tokens(nb, x, y, out, 4, false);
    dot_q6_k_tokens(nb, x, y + 4, out + 4, n - 4, false);
    return;
  }
  switch (n) {
  case 1: dot_q6_k_avx2_tokens<1>(nb, x, y, out); return;
  case 2: dot_q6_k_avx2_tokens<2>(nb, x, y, out); return;
  case 3: dot_q6_k_avx2_tokens<3>(nb, x, y, out); return;
  default: dot_q6_k_avx2_tokens<4>(nb, x, y, out); return;
  }
}

float dot_q6_k_avx2(std::size_t nb, const block_q6_k* x,
                    const block_q8_k* y) {
  float out;
  dot_q6_k_tokens(nb, x, &y, &out, 1, host::have_vnni());
  return out;
}

/// The largest of 8 float lanes (exact in any order; no lane NaN).
EXO_AVX2 inline float hmax8_avx2(__m256 v) {
  __m128 m4 =
    _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

/// The sum of 8 int32 lanes (exact in any order).
EXO_AVX2 inline int hsum8_epi32_avx2(__m256i v) {
  __m128i s4 =
    _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
  return _mm_cvtsi128_si32(s4);
}

/// One block of 32 activations as ggml's AVX2 quantize_row_q8_0/_1: the
/// largest magnitude by max_ps over the four registers, then halves,
/// quarters, pairs; d = max / 127 (stored as half), q = x * (127 / max)
/// rounded half to even (_mm256_round_ps), saturated by the packs.
/// Returns d; `sum`: the 32 rounded values' sum (int32, before the
/// packs), for Q8_1's s. The same bytes as act_block for finite x.
EXO_AVX2 float act_block_avx2(const float* x, std::int8_t* q,
                              std::uint16_t& d_bits, int* sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  for (int i = 0; i < 4; ++i)
    v[i] = _mm256_loadu_ps(x + 8 * i);
  __m256 mx = _mm256_andnot_ps(sign, v[0]);
  for (int i = 1; i < 4; ++i)
    mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
  const float amax = hmax8_avx2(mx);
  const float d = amax / 127.f;
  d_bits = f2h(d);
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
  __m256i r[4];
  for (int i = 0; i < 4; ++i)
    r[i] = _mm256_cvtps_epi32(_mm256_round_ps(
      _mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  if (sum != nullptr) {
    *sum = hsum8_epi32_avx2(_mm256_add_epi32(_mm256_add_epi32(r[0], r[1]),
                                             _mm256_add_epi32(r[2], r[3])));
  }
  const __m256i bytes = _mm256_permutevar8x32_epi32(
    _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]),
                       _mm256_packs_epi32(r[2], r[3])),
    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), bytes);
  return d;
}

/// quantize_q8_k with the same operations 8 lanes at a time: the first
/// largest magnitude (NaN skipped, as the scalar comparison does), the
/// product iscale * x, nearest_int's magic addition, the cap at 127 and
/// the 16-value sums. Same bytes as quantize_q8_k for any input. The
/// largest magnitude in four chains of max (exact in any order), the
/// first value of that magnitude found by comparing 8 at a time, and the
/// sums taken from the 32-bit values before they are packed (they lie in
/// [-127, 127]: the packs keep them).
EXO_AVX2 void quantize_q8_k_avx2(const float* x, block_q8_k& y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 mx[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(),
                  _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int j = 0; j < kqk; j += 32) // max_ps keeps mx where x is NaN
    for (int u = 0; u < 4; ++u)
      mx[u] = _mm256_max_ps(
        _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j + 8 * u)), mx[u]);
  const float amax = hmax8_avx2(
    _mm256_max_ps(_mm256_max_ps(mx[0], mx[1]), _mm256_max_ps(mx[2], mx[3])));
  if (!amax) {
    std::memset(&y, 0, sizeof y);
    return;
  }
  float max = 0;
  const __m256 va = _mm256_set1_ps(amax);
  for (int j = 0; j < kqk; j += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(
      _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), va, _CMP_EQ_OQ));
    if (hit != 0) {
      max = x[j + __builtin_ctz(static_cast<unsigned>(hit))];
      break;
    }
  }
  const float iscale = -127.f / max;
  const __m256 vs = _mm256_set1_ps(iscale);
  const __m256 magic = _mm256_set1_ps(12582912.f);
  const __m256i mant = _mm256_set1_epi32(0x007fffff);
  const __m256i bias = _mm256_set1_epi32(0x00400000);
  const __m256i cap = _mm256_set1_epi32(127);
  for (int j = 0; j < kqk; j += 32) {
    __m256i q[4];
    for (int u = 0; u < 4; ++u) {
      const __m256 v = _mm256_add_ps(
        _mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * u)), magic);
      q[u] = _mm256_min_epi32(
        _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), mant), bias),
        cap);
    }
    // The sums of values j .. j + 15 and j + 16 .. j + 31: pairs, then
    // quads within each 128-bit half, then the halves.
    __m256i h = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]),
                                  _mm256_add_epi32(q[2], q[3]));
    h = _mm256_hadd_epi32(h, h);
    const __m128i s2 = _mm_add_epi32(_mm256_castsi256_si128(h),
                                     _mm256_extracti128_si256(h, 1));
    y.bsums[j / 16] = static_cast<std::int16_t>(_mm_cvtsi128_si32(s2));
    y.bsums[j / 16 + 1] = static_cast<std::int16_t>(_mm_extract_epi32(s2, 1));
    // Values lie in [-128, 127] (|iscale * x| <= 127): the saturating
    // packs keep them; the permute undoes the packs' lane interleaving.
    const __m256i p16a = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p16b = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p8 = _mm256_permutevar8x32_epi32(
      _mm256_packs_epi16(p16a, p16b),
      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y.qs + j), p8);
  }
  y.d = 1 / iscale;
}

/// quantize_q8_k_avx2 16 lanes at a time: the same operations (the first
/// largest magnitude, iscale * x, the magic addition, the cap at 127), so
/// the same bytes for any input. A 16-value sum is one vector's; the
/// values go to bytes by a saturating narrowing (they lie in [-128, 127]).
EXO_AVX512F void quantize_q8_k_avx512(const float* x, block_q8_k& y) {
  __m512 mx[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                  _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int j = 0; j < kqk; j += 64) // max_ps keeps mx where x is NaN
    for (int u = 0; u < 4; ++u)
      mx[u] = _mm512_maskz_max_ps(
        0xffff, _mm512_abs_ps(_mm512_loadu_ps(x + j + 16 * u)), mx[u]);
  // (The maskz forms with every lane set: GCC 12 warns about the plain
  // ones' undefined pass-through operand.)
  const __m512 m16 = _mm512_maskz_max_ps(
    0xffff, _mm512_maskz_max_ps(0xffff, mx[0], mx[1]),
    _mm512_maskz_max_ps(0xffff, mx[2], mx[3]));
  const __m512d m16d = _mm512_castps_pd(m16);
  const __m256 lo =
    _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, m16d, 0));
  const __m256 hi =
    _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, m16d, 1));
  const float amax = hmax8_avx2(_mm256_max_ps(lo, hi));
  if (!amax) {
    std::memset(&y, 0, sizeof y);
    return;
  }
  float max = 0;
  const __m512 va = _mm512_set1_ps(amax);
  for (int j = 0; j < kqk; j += 16) {
    const __mmask16 hit = _mm512_cmp_ps_mask(
      _mm512_abs_ps(_mm512_loadu_ps(x + j)), va, _CMP_EQ_OQ);
    if (hit != 0) {
      max = x[j + __builtin_ctz(static_cast<unsigned>(hit))];
      break;
    }
  }
  const float iscale = -127.f / max;
  const __m512 vs = _mm512_set1_ps(iscale);
  const __m512 magic = _mm512_set1_ps(12582912.f);
  const __m512i mant = _mm512_set1_epi32(0x007fffff);
  const __m512i bias = _mm512_set1_epi32(0x00400000);
  const __m512i cap = _mm512_set1_epi32(127);
  for (int j = 0; j < kqk; j += 16) {
    const __m512 v =
      _mm512_add_ps(_mm512_mul_ps(vs, _mm512_loadu_ps(x + j)), magic);
    const __m512i q = _mm512_maskz_min_epi32(
      0xffff,
      _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(v), mant), bias),
      cap);
    y.bsums[j / 16] = static_cast<std::int16_t>(hsum8_epi32_avx2(
      _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xf, q, 0),
                       _mm512_maskz_extracti64x4_epi64(0xf, q, 1))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y.qs + j),
                     _mm512_maskz_cvtsepi32_epi8(0xffff, q));
  }
  y.d = 1 / iscale;
}

#undef EXO_AVX2

float dot_blocks(ggml_type t, std::size_t n, const void* w, const void* a,
                 bool simd) {
  const std::size_t nb = n / info(t).block_size;
#define EXO_DOT(T, BW, BA)                                                     \
  case ggml_type::T:                                                           \
    return simd ? dot_##T##_avx2(nb, blocks<BW>(w), blocks<BA>(a))             \
                : dot_##T##_portable(nb, blocks<BW>(w), blocks<BA>(a));
  switch (t) {
    EXO_DOT(q4_0, block_q4_0, block_q8_0)
    EXO_DOT(q4_1, block_q4_1, block_q8_1)
    EXO_DOT(q5_0, block_q5_0, block_q8_0)
    EXO_DOT(q5_1, block_q5_1, block_q8_1)
    EXO_DOT(q8_0, block_q8_0, block_q8_0)
    EXO_DOT(q2_k, block_q2_k, block_q8_k)
    EXO_DOT(q3_k, block_q3_k, block_q8_k)
    EXO_DOT(q4_k, block_q4_k, block_q8_k)
    EXO_DOT(q5_k, block_q5_k, block_q8_k)
    EXO_DOT(q6_k, block_q6_k, block_q8_k)
  case ggml_type::bf16:
    if (simd) {
      float out;
      const void* act[1] = {a};
      dot_bf16_tokens<1, false>(n, static_cast<const std::uint16_t*>(w), act,
                                &out);
      return out;
    }
    return dot_element_row(t, n, w, a);
  case ggml_type::f32:
  case ggml_type::f16:
    return dot_element_row(t, n, w, a);
  case ggml_type::q8_1:
  case ggml_type::q8_k:
    return 0.0f; // activation formats: no weights
  }
#undef EXO_DOT
  return 0.0f;
}

error invalid(std::string what) {
  return error{errc::invalid_argument, std::move(what)};
}

} // namespace

// -- the table ----------------------------------------------------------------

const type_info* all_types(std::size_t& count) noexcept {
  count = sizeof table / sizeof table[0];
  return table;
}

const type_info* find_type(std::uint32_t id) noexcept {
  for (const auto& t : table)
    if (static_cast<std::uint32_t>(t.type) == id)
      return &t;
  return nullptr;
}

const type_info& info(ggml_type t) noexcept {
  const type_info* p = find_type(static_cast<std::uint32_t>(t));
  return p ? *p : table[0];
}

const char* name(ggml_type t) noexcept {
  const type_info* p = find_type(static_cast<std::uint32_t>(t));
  return p ? p->name : "unknown";
}

result<std::size_t> row_bytes(ggml_type t, std::size_t n) {
  const type_info* p = find_type(static_cast<std::uint32_t>(t));
  if (!p)
    return invalid("unknown ggml type id " +
                   std::to_string(static_cast<std::uint32_t>(t)));
  if (n % p->block_size != 0)
    return invalid(std::string("a row of ") + p->name +
                   " holds whole blocks of " + std::to_string(p->block_size) +
                   " elements, not " + std::to_string(n));
  const std::size_t nb = n / p->block_size;
  if (nb > std::numeric_limits<std::size_t>::max() / p->block_bytes)
    return invalid(std::string("a row of ") + std::to_string(n) + " " +
                   p->name + " elements overflows the address space");
  return nb * p->block_bytes;
}

result<std::size_t> matrix_bytes(ggml_type t, std::size_t rows, std::size_t n) {
  auto rb = row_bytes(t, n);
  if (!rb)
    return rb;
  if (rows != 0 && *rb > std::numeric_limits<std::size_t>::max() / rows)
    return invalid(std::to_string(rows) + " rows of " + std::to_string(n) +
                   " " + name(t) + " elements overflow the address space");
  return *rb * rows;
}

// -- conversions --------------------------------------------------------------

std::uint16_t f32_to_bf16(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) // NaN: keep it quiet
    return static_cast<std::uint16_t>((u >> 16) | 64);
  return static_cast<std::uint16_t>((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

float bf16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void quantize_row(ggml_type t, const float* x, void* dst,
                  std::size_t n) noexcept {
  const std::size_t nb = n / info(t).block_size;
  auto* out = static_cast<std::uint8_t*>(dst);
  const std::size_t bb = info(t).block_bytes;
  switch (t) {
  case ggml_type::f32:
    std::memcpy(dst, x, n * 4);
    return;
  case ggml_type::f16:
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint16_t h = f2h(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  case ggml_type::bf16:
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint16_t h = f32_to_bf16(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  default:
    break;
  }
  const std::size_t bs = info(t).block_size;
  for (std::size_t i = 0; i < nb; ++i) {
    const float* xb = x + i * bs;
    void* yb = out + i * bb;
    switch (t) {
    case ggml_type::q4_0:
      quantize_q4_0(xb, *static_cast<block_q4_0*>(yb));
      break;
    case ggml_type::q4_1:
      quantize_q4_1(xb, *static_cast<block_q4_1*>(yb));
      break;
    case ggml_type::q5_0:
      quantize_q5_0(xb, *static_cast<block_q5_0*>(yb));
      break;
    case ggml_type::q5_1:
      quantize_q5_1(xb, *static_cast<block_q5_1*>(yb));
      break;
    case ggml_type::q8_0:
      quantize_q8_0(xb, *static_cast<block_q8_0*>(yb));
      break;
    case ggml_type::q8_1:
      quantize_q8_1(xb, *static_cast<block_q8_1*>(yb));
      break;
    case ggml_type::q2_k:
      quantize_q2_k(xb, *static_cast<block_q2_k*>(yb));
      break;
    case ggml_type::q3_k:
      quantize_q3_k(xb, *static_cast<block_q3_k*>(yb));
      break;
    case ggml_type::q4_k:
      quantize_q4_k(xb, *static_cast<block_q4_k*>(yb));
      break;
    case ggml_type::q5_k:
      quantize_q5_k(xb, *static_cast<block_q5_k*>(yb));
      break;
    case ggml_type::q6_k:
      quantize_q6_k(xb, *static_cast<block_q6_k*>(yb));
      break;
    case ggml_type::q8_k:
      quantize_q8_k(xb, *static_cast<block_q8_k*>(yb));
      break;
    default:
      break;
    }
  }
}

void dequantize_row(ggml_type t, const void* src, float* dst,
                    std::size_t n) noexcept {
  const auto* in = static_cast<const std::uint8_t*>(src);
  switch (t) {
  case ggml_type::f32:
    std::memcpy(dst, src, n * 4);
    return;
  case ggml_type::f16:
  case ggml_type::bf16:
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      dst[i] = t == ggml_type::f16 ? h2f(h) : bf16_to_f32(h);
    }
    return;
  default:
    dequantize_blocks(t, src, dst, n / info(t).block_size);
    return;
  }
}

void quantize_activations(ggml_type t, const float* x, void* dst,
                          std::size_t n) noexcept {
  switch (t) {
  case ggml_type::q8_0: {
    auto* y = static_cast<block_q8_0*>(dst);
    const bool avx2 = host::widest_isa() != host::isa::scalar;
    for (std::size_t i = 0; i < n / 32; ++i)
      if (avx2)
        act_block_avx2(x + 32 * i, y[i].qs, y[i].d, nullptr);
      else
        act_block(x + 32 * i, y[i].qs, y[i].d);
    return;
  }
  case ggml_type::q8_1: {
    auto* y = static_cast<block_q8_1*>(dst);
    const bool avx2 = host::widest_isa() != host::isa::scalar;
    for (std::size_t i = 0; i < n / 32; ++i) {
      int sum = 0;
      float d;
      if (avx2) {
        d = act_block_avx2(x + 32 * i, y[i].qs, y[i].d, &sum);
      } else {
        d = act_block(x + 32 * i, y[i].qs, y[i].d);
        for (int j = 0; j < 32; ++j)
          sum += y[i].qs[j];
      }
      y[i].s = f2h(d * static_cast<float>(sum));
    }
    return;
  }
  case ggml_type::q8_k:
    if (host::widest_isa() == host::isa::avx512) {
      auto* y = static_cast<block_q8_k*>(dst);
      for (std::size_t i = 0; i < n / qk_k; ++i)
        quantize_q8_k_avx512(x + qk_k * i, y[i]);
      return;
    }
    if (host::widest_isa() != host::isa::scalar) {
      auto* y = static_cast<block_q8_k*>(dst);
      for (std::size_t i = 0; i < n / qk_k; ++i)
        quantize_q8_k_avx2(x + qk_k * i, y[i]);
      return;
    }
    quantize_row(t, x, dst, n);
    return;
  default:
    quantize_row(t, x, dst, n);
    return;
  }
}

// -- dot products -------------------------------------------------------------

bool vec_dot_has_simd(ggml_type w) noexcept {
  switch (w) {
  case ggml_type::q4_0:
  case ggml_type::q4_1:
  case ggml_type::q5_0:
  case ggml_type::q5_1:
  case ggml_type::q8_0:
  case ggml_type::q2_k:
  case ggml_type::q3_k:
  case ggml_type::q4_k:
  case ggml_type::q5_k:
  case ggml_type::q6_k:
    return have_avx2();
  case ggml_type::bf16:
    return bf16_simd();
  default:
    return false;
  }
}

float vec_dot(ggml_type w, std::size_t n, const void* weights,
              const void* activations) noexcept {
  return dot_blocks(w, n, weights, activations, vec_dot_has_simd(w));
}

float vec_dot_portable(ggml_type w, std::size_t n, const void* weights,
                       const void* activations) noexcept {
  return dot_blocks(w, n, weights, activations, false);
}

result<bool> matmul_quant(const void* w, ggml_type t, std::size_t rows,
                          std::size_t k, const float* a, std::size_t m,
                          float* out, int threads) {
  const type_info* p = find_type(static_cast<std::uint32_t>(t));
  if (!p || !p->weights)
    return invalid(std::string("matmul_quant: ") + name(t) +
                   " is not a weight format");
  if (!w || !a || !out)
    return invalid("matmul_quant: null operand");
  auto wb = matrix_bytes(t, rows, k);
  if (!wb)
    return wb.err();
  auto ab = row_bytes(p->dot_type, k);
  if (!ab)
    return ab.err();
  if (m != 0 && *ab > std::numeric_limits<std::size_t>::max() / m)
    return invalid("matmul_quant: the activations overflow the address space");
  if (rows == 0 || k == 0 || m == 0)
    return true;
  if (t == ggml_type::f32 || t == ggml_type::f16) {
    // llama.cpp's exact F32/F16 products live in the host kernels.
    matmul_dims dims;
    dims.m = m;
    dims.n = rows;
    dims.k = k;
    dims.transpose_b = true;
    host::matmul_weights(a, static_cast<const std::uint8_t*>(w),
                         t == ggml_type::f32 ? weight_type::f32
                                             : weight_type::f16,
                         out, dims, threads);
    return true;
  }
  const std::size_t rb = *wb / rows;
  const std::size_t act = *ab;
  std::vector<std::uint8_t> q(act * m);
  // Each token's row on its own (the same bytes on any thread count).
  host::for_each_index(static_cast<long>(m), m > 1 ? threads : 1, [&](long r) {
    const auto i = static_cast<std::size_t>(r);
    quantize_activations(p->dot_type, a + i * k, q.data() + i * act, k);
  });
  const bool simd = vec_dot_has_simd(t);
  std::vector<float> af; // BF16 activations as floats (AVX-512F path)
  if (simd && t == ggml_type::bf16) {
    af.resize(m * k);
    const auto* ab = reinterpret_cast<const std::uint16_t*>(q.data());
    for (std::size_t i = 0; i < m * k; ++i)
      af[i] = bf16_to_f32(ab[i]);
  }
  if (simd && t == ggml_type::q6_k && q6_k_panels(m)) {
    matmul_q6_k_panels(w, rows, k, q.data(), m, out, threads);
    return true;
  }
  const auto* wbytes = static_cast<const std::uint8_t*>(w);
  // The CPU's answers and the kernels, once for all rows (asked per row,
  // they showed in a one-token step's profile).
  const bool vnni = host::have_vnni();
  const tokens_fn tokens = simd && m > 1 ? tokens_kernel(t) : nullptr;
  const k_tokens_fn k_tokens = simd ? k_tokens_kernel(t) : nullptr;
  host::for_each_index(static_cast<long>(rows), threads, [&](long r) {
    const std::uint8_t* row = wbytes + static_cast<std::size_t>(r) * rb;
    // The row after next into L2: the hardware prefetchers alone keep
    // too few lines in flight for a weight stream from DRAM (Q6_K, 32
    // matrices of 8192 x 2048, one core: one token 8.1 -> 11.7 GB/s, four
    // 5.7 -> 7.9). Q6_K's SIMD kernels now ask in their loop
    // (prefetch_q6_k_ahead), which did better still.
    if (!(simd && (t == ggml_type::q6_k || t == ggml_type::bf16
                   || ((t == ggml_type::q5_k || t == ggml_type::q3_k
                        || t == ggml_type::q2_k)
                       && vnni)))
        && static_cast<std::size_t>(r) + 2 < rows)
      for (std::size_t off = 0; off < rb; off += 64)
        __builtin_prefetch(row + 2 * rb + off, 0, 2);
    if (simd && t == ggml_type::q6_k) {
      // Tokens 8 at a time: each row's weights unpacked once per group (one
      // token: the kernel dot_blocks would reach, without its dispatch).
      for (std::size_t i0 = 0; i0 < m; i0 += 8) {
        const std::size_t n = std::min<std::size_t>(8, m - i0);
        const block_q8_k* ys[8];
        float v[8];
        for (std::size_t i = 0; i < n; ++i)
          ys[i] = blocks<block_q8_k>(q.data() + (i0 + i) * act);
        dot_q6_k_tokens(k / qk_k, blocks<block_q6_k>(row), ys, v, n, vnni);
        for (std::size_t i = 0; i < n; ++i)
          out[(i0 + i) * rows + static_cast<std::size_t>(r)] = v[i];
      }
      return;
    }
    if (simd && t == ggml_type::bf16) {
      const float* as[8];
      float v[8];
      for (std::size_t i0 = 0; i0 < m; i0 += 8) {
        const std::size_t n = std::min<std::size_t>(8, m - i0);
        for (std::size_t i = 0; i < n; ++i)
          as[i] = af.data() + (i0 + i) * k;
        dot_bf16_rows(k, reinterpret_cast<const std::uint16_t*>(row), as, v,
                      n);
        for (std::size_t i = 0; i < n; ++i)
          out[(i0 + i) * rows + static_cast<std::size_t>(r)] = v[i];
      }
      return;
    }
    if (const tokens_fn f = tokens) {
      // The 32-element formats: tokens 8 at a time, each row's blocks
      // unpacked once per 4 tokens.
      const std::size_t nb = k / 32;
      for (std::size_t i0 = 0; i0 < m; i0 += 8) {
        const std::size_t n = std::min<std::size_t>(8, m - i0);
        const void* ys[8];
        float v[8];
        for (std::size_t i = 0; i < n; ++i)
          ys[i] = q.data() + (i0 + i) * act;
        f(nb, row, ys, v, n);
        for (std::size_t i = 0; i < n; ++i)
          out[(i0 + i) * rows + static_cast<std::size_t>(r)] = v[i];
      }
      return;
    }
    if (const k_tokens_fn f = k_tokens) {
      // Q2_K, Q3_K, Q5_K: tokens 8 at a time (the AVX2 kernels take 4
      // a pass), each row's blocks unpacked once per 4 tokens (8 on
      // VNNI); a single token too (Q5_K's VNNI kernel is the faster
      // one; the others' one-token kernels are their kernels' <1>).
      for (std::size_t i0 = 0; i0 < m; i0 += 8) {
        const std::size_t n = std::min<std::size_t>(8, m - i0);
        const block_q8_k* ys[8];
        float v[8];
        for (std::size_t i = 0; i < n; ++i)
          ys[i] = blocks<block_q8_k>(q.data() + (i0 + i) * act);
        f(k / qk_k, row, ys, v, n);
        for (std::size_t i = 0; i < n; ++i)
          out[(i0 + i) * rows + static_cast<std::size_t>(r)] = v[i];
      }
      return;
    }
    for (std::size_t i = 0; i < m; ++i)
      out[i * rows + static_cast<std::size_t>(r)] =
          dot_blocks(t, k, row, q.data() + i * act, simd);
  });
  return true;
}

} // namespace exo::backend::quant
