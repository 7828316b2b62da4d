#pragma once

#include <cstdint>
#include <string>

#include "core/gguf/gguf.hpp"

namespace exo::model {

/// A llama.cpp file type (llama_ftype): one format for every matrix, or one
/// of the mixes llama-quantize writes ("Q4_K_M": most matrices Q4_K, some
/// attn_v / ffn_down and the output head Q6_K).
struct file_type {
  tensor_type base = tensor_type::f32; ///< the matrices' default format
  enum class mix { none, q3_k_m, q4_k_m, q5_k_m } kind = mix::none;
};

/// Parses "f32", "q4_0", ..., "q6_k", "bf16" (every tensor_type, one format
/// for all matrices) or "q3_k_m", "q4_k_m", "q5_k_m" (case-insensitive);
/// nullopt-like: returns false for anything else.
bool parse_file_type(const std::string& s, file_type& out);

/// Lower-case name of a file type ("q4_k_m", "q8_0").
std::string to_string(const file_type& ft);

/// llama.cpp's general.file_type number (LLAMA_FTYPE_*) for ft.
uint32_t llama_ftype(const file_type& ft);

/// Where a matrix sits in the model, for the rules below.
struct matrix_role {
  std::string name;   ///< the GGUF tensor name ("blk.3.attn_v.weight")
  uint32_t layer = 0; ///< its block index (ignored for non-block tensors)
  uint32_t n_layer = 1;
  uint32_t n_gqa = 1;     ///< heads / kv heads
  bool has_output = true; ///< false when the head is tied to token_embd
  uint64_t cols = 0;      ///< ne[0]
};

/// The format llama-quantize (without an importance matrix, no overrides)
/// gives the matrix `r` of a llama model quantized to ft, following
/// llama.cpp's llama_tensor_get_type for these file types: the output head
/// (or a tied token_embd) Q6_K for every quantized type but Q8_0 (Q8_0 when
/// its rows are not whole K-quant blocks); with Q3_K_M attn_v Q5_K for the
/// first two layers and Q4_K after, attn_output Q4_K, ffn_down Q5_K for the
/// first n_layer/16 layers and Q4_K after; with Q4_K_M / Q5_K_M attn_v and
/// ffn_down Q6_K on the "use more bits" layers (the first and last eighth
/// and every third in between). 1-D tensors are not matrices: keep them F32.
tensor_type matrix_type(const file_type& ft, const matrix_role& r);

} // namespace exo::model
