#include "core/gguf/quant.hpp"

#include <cmath>
#include <cstring>

#include "backends/quant_formats.hpp"

namespace exo::model {

// Half conversion and Q8_0 quantization live in backends/host_kernels.cpp,
// shared with the device operations.

float f16_to_f32(uint16_t h) {
  return backend::host::f16_to_f32(h);
}

uint16_t f32_to_f16(float f) {
  return backend::host::f32_to_f16(f);
}

void round_to_f16(const float* x, float* y, size_t n) {
  backend::host::round_to_f16(x, y, n);
}

void quantize_q8_0(const float* x, block_q8_0* y, size_t n) {
  backend::host::quantize_q8_0(x, y, n);
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
    default:
      // Every other format: ggml's to_float (backends/quant_formats).
      backend::quant::dequantize_row(
        static_cast<backend::quant::ggml_type>(t), src, dst, n);
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
        backend::host::quantize_q8_0(src + b * 32, &blk, 32);
        std::memcpy(dst + b * 34, &blk, 34);
      }
      return;
    }
    default:
      // ggml's reference quantizers (what llama-quantize writes without an
      // importance matrix).
      backend::quant::quantize_row(static_cast<backend::quant::ggml_type>(t),
                                   src, dst, n);
      return;
  }
}

} // namespace exo::model
