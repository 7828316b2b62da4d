#include "runtime/model/quant.hpp"

#include <cmath>
#include <cstring>

namespace exo::model {

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00
                                 | (absx > 0x7f800000 ? 0x200 : 0));
  if (absx >= 0x477ff000) // rounds to >= 65520: overflow to inf
    return static_cast<uint16_t>(sign | 0x7c00);
  if (absx < 0x38800000) { // subnormal half or zero
    // value = absx as float; half subnormal unit is 2^-24.
    float a;
    std::memcpy(&a, &absx, 4);
    float scaled = a * 16777216.0f; // 2^24, exact
    auto m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t mant = absx & 0x7fffff;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h; // may carry into the exponent, which is correct
  return static_cast<uint16_t>(sign | h);
}

void round_to_f16(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i)
    y[i] = f16_to_f32(f32_to_f16(x[i]));
}

void quantize_q8_0(const float* x, block_q8_0* y, size_t n) {
  for (size_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j)
      amax = std::fmax(amax, std::fabs(xb[j]));
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j)
      y[b].qs[j] = static_cast<int8_t>(std::roundf(xb[j] * id));
  }
}

void dequantize(tensor_type t, const uint8_t* src, float* dst, size_t n) {
  switch (t) {
    case tensor_type::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case tensor_type::f16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case tensor_type::q8_0:
      for (size_t b = 0; b < n / 32; ++b) {
        block_q8_0 blk;
        std::memcpy(&blk, src + b * 34, 34);
        float d = f16_to_f32(blk.d);
        for (int j = 0; j < 32; ++j)
          dst[b * 32 + j] = d * blk.qs[j];
      }
      return;
  }
}

void quantize(tensor_type t, const float* src, uint8_t* dst, size_t n) {
  switch (t) {
    case tensor_type::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case tensor_type::f16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case tensor_type::q8_0: {
      for (size_t b = 0; b < n / 32; ++b) {
        block_q8_0 blk;
        quantize_q8_0(src + b * 32, &blk, 32);
        std::memcpy(dst + b * 34, &blk, 34);
      }
      return;
    }
  }
}

} // namespace exo::model
