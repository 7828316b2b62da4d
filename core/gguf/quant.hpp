#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/host_kernels.hpp"
#include "core/gguf/gguf.hpp"

namespace exo::model {

/// Converts an IEEE half (bits) to float.
float f16_to_f32(uint16_t h);

/// Converts a float to IEEE half bits, rounding to nearest even.
uint16_t f32_to_f16(float f);

/// Rounds every element of `x` to the nearest half and back (what llama.cpp
/// does to activations that meet F16 weights).
void round_to_f16(const float* x, float* y, size_t n);

/// One Q8_0 block as stored in GGUF: a half scale and 32 signed bytes
/// (the device layer's type; one implementation of the encoding).
using block_q8_0 = backend::host::block_q8_0;

/// Quantises `n` floats (a multiple of 32) to Q8_0 as ggml's reference does.
void quantize_q8_0(const float* x, block_q8_0* y, size_t n);

/// Dequantises `n` elements of type `t` (any tensor_type, whole blocks)
/// from `src` into `dst` as ggml's to_float does.
void dequantize(tensor_type t, const uint8_t* src, float* dst, size_t n);

/// Encodes `n` floats into type `t` at `dst`, which holds row_bytes(t, n)
/// bytes (any tensor_type; `n` a whole number of blocks). Quantized formats
/// use ggml's reference quantizers.
void quantize(tensor_type t, const float* src, uint8_t* dst, size_t n);

} // namespace exo::model
