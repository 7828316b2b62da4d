#pragma once

/// The compute kernels of the Vulkan backend as SPIR-V, compiled from
/// shaders/*.comp by glslc at build time and embedded by embed_spirv.cmake.

#include <cstddef>
#include <cstdint>

namespace exo::backend::vulkan_spirv {

/// One SPIR-V module: `count` 32-bit words.
struct blob {
  const std::uint32_t* words;
  std::size_t count;
};

extern const blob elementwise; ///< out = a (+|*) b, f32
extern const blob matmul;      ///< tiled C = A * B (or B^T), f32
extern const blob matvec;      ///< the m == 1 case of matmul
/// matvec with B^T through subgroup arithmetic, where the device has it.
extern const blob matvec_subgroup;
extern const blob rms_norm;    ///< rows normalised by their RMS, times a weight
extern const blob rope;        ///< rotary embedding, llama "normal" mode
/// rope by the host's angles (cosines and sines per pair and row).
extern const blob rope_cached;
extern const blob attention;   ///< causal grouped-query attention, KV cache
extern const blob matvec_f16;  ///< C = A * W^T, W in IEEE half
extern const blob matvec_q8_0; ///< C = A * W^T, W in GGUF's Q8_0 blocks
extern const blob matvec_quant; ///< C = A * W^T, W in ggml's other formats
extern const blob attention_f16; ///< attention over an f16 KV cache
extern const blob to_f16;      ///< f32 rows stored as IEEE half
extern const blob attention_q8_0; ///< attention over a q8_0 KV cache
extern const blob to_q8_0;     ///< f32 rows stored as Q8_0 blocks
extern const blob hadamard;    ///< Walsh-Hadamard rotation of runs of n
/// attention, attention_f16 and attention_q8_0 over a paged cache (rows
/// found through a block table).
extern const blob attention_paged;
extern const blob attention_f16_paged;
extern const blob attention_q8_0_paged;
/// The paged variants for a decode batch (attention_paged_rows): every
/// query row with its own position and table.
extern const blob attention_paged_rows;
extern const blob attention_f16_paged_rows;
extern const blob attention_q8_0_paged_rows;
extern const blob store_kv_rows; ///< a decode batch's K/V rows into a cache
/// matvec_f16 and matvec_quant with tiles of 4 rows of A
/// (weight_tiles.glsl): each weight read once for 4 rows.
extern const blob matvec_f16_x4;
extern const blob matvec_quant_x4;
/// F32 weights, one row of A and tiles of 4 (a row's bits whatever rows
/// share the product): matvec_subgroup with tiles, and matvec_f16.comp
/// for F32 (WEIGHTS_F32) where the device has no subgroup arithmetic.
extern const blob matvec_subgroup_x4;
extern const blob matvec_f32w;
extern const blob matvec_f32w_x4;
/// elementwise and rope_cached with their fused multiply-adds exact
/// (exact_fma.glsl, through doubles): for devices with shaderFloat64.
extern const blob elementwise_fp64;
extern const blob rope_cached_fp64;
/// rms_norm with the host's sum of float squares in double.
extern const blob rms_norm_fp64;

} // namespace exo::backend::vulkan_spirv
