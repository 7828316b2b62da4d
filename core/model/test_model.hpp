#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/gguf/gguf.hpp"
#include "core/gguf/gguf_writer.hpp"
#include "core/model/quant_mix.hpp"
#include "core/tokenizer/hf_vocab.hpp"

namespace exo::model {

/// The shape and contents of a generated test model.
struct test_model_options {
  /// "llama", "qwen2" (adds Q/K/V biases) or "qwen3" (adds per-head Q/K
  /// norms); the keys are written under this prefix.
  std::string arch = "llama";
  /// Size of an attention head (<arch>.attention.key_length); 0: dim /
  /// heads, and no key_length key.
  uint32_t head_dim = 0;
  uint32_t layers = 2;
  uint32_t dim = 64;
  uint32_t ff = 128;
  uint32_t heads = 4;
  uint32_t kv_heads = 2;
  uint32_t vocab = 512;
  uint32_t ctx = 256;
  tensor_type type = tensor_type::f32; ///< Of the matrices (norms: F32).
  /// A llama.cpp mix (Q3_K_M, Q4_K_M, Q5_K_M) over `type`: some matrices
  /// get other formats, as llama-quantize assigns them (matrix_type).
  file_type::mix mix = file_type::mix::none;
  /// "llama" (SPM), "gpt2" (byte-level BPE) or "llama3" (byte-level BPE
  /// with Llama 3's pre-tokenizer, special tokens <|begin_of_text|> ...
  /// <|eot_id|> and a chat template in Llama 3's format).
  std::string tokenizer = "llama";
  /// A real vocabulary (hf_vocab_from_json) used instead of a generated
  /// one; `vocab` and `tokenizer` are then ignored.
  std::shared_ptr<const hf_vocab> vocab_from;
  uint64_t seed = 1;
  bool tied = false; ///< Leave out output.weight (head tied to embedding).
  float rope_base = 10000.0f;
  /// Scales the Q and K projections (and qwen3's Q/K norm weights): above
  /// 1, attention scores spread and position (rope) matters more.
  float qk_scale = 1.0f;
  /// Write rope_freqs.weight with Llama 3.1's frequency factors (factor 8,
  /// low 1, high 4, original context 8192), as convert_hf_to_gguf.py does
  /// for rope_type "llama3".
  bool llama3_rope = false;
  float rms_eps = 1e-5f;
};

/// Builds a valid GGUF of the architecture with random weights (deterministic for a seed)
/// and a usable vocabulary: all 256 byte tokens plus merged pieces. Throws
/// gguf_error for inconsistent options (e.g. a vocabulary too small).
gguf_writer build_test_model(const test_model_options& o);

/// build_test_model(o).write(path).
void make_test_model(const test_model_options& o, const std::string& path);

} // namespace exo::model
