#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/gguf/gguf.hpp"

namespace exo::model {

/// The decoder architectures exo runs (`general.architecture`). They share
/// one forward pass; what differs is a handful of properties (arch_traits),
/// as in llama.cpp's architecture tables.
enum class model_arch : uint8_t { llama, qwen2, qwen3 };

/// What sets an architecture apart from plain llama.
struct arch_traits {
  model_arch arch;
  const char* name; ///< The `general.architecture` value and key prefix.
  /// Rope pairs x[i] with x[i + n_rot/2] (llama.cpp's NEOX mode) instead of
  /// the adjacent x[2i], x[2i+1] (NORMAL).
  bool rope_neox;
  /// blk.N.attn_{q,k,v}.bias: required (qwen2); llama loads them when
  /// present, as llama.cpp does; qwen3 has none.
  bool qkv_bias_required;
  bool qkv_bias_allowed;
  /// blk.N.attn_{q,k}_norm.weight: RMSNorm of each Q and K head (head_dim
  /// weights) before rope (qwen3).
  bool qk_norm;
};

/// The traits of the architecture called `name`, or nullptr.
const arch_traits* find_arch(const std::string& name);

/// The hyper-parameters of a llama, qwen2 or qwen3 GGUF file.
struct llama_hparams {
  arch_traits traits = *find_arch("llama");
  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;
  uint32_t n_embd = 0;
  uint32_t n_ff = 0;
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t n_layer = 0;
  uint32_t head_dim = 0; ///< <arch>.attention.key_length or n_embd / n_head.
  uint32_t n_rot = 0;    ///< <arch>.rope.dimension_count or head_dim.
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = false; ///< No output.weight: the head is token_embd.

  uint32_t n_embd_q() const {
    return n_head * head_dim;
  }
  uint32_t n_embd_kv() const {
    return n_head_kv * head_dim;
  }

  model_arch arch() const {
    return traits.arch;
  }
  bool rope_neox() const {
    return traits.rope_neox;
  }

  /// Reads and checks the hyper-parameters (keys under the architecture's
  /// prefix: qwen2.embedding_length ...); throws gguf_error naming a
  /// missing or inconsistent key, an architecture other than llama, qwen2
  /// and qwen3, or a rope scaling exo does not implement.
  static llama_hparams from_gguf(const gguf_file& f);
};

/// What one layer costs, for the placement solver. The last layer also
/// carries the final norm and the output head (the embedding when the head
/// is tied). The token embedding is in no layer: a stage looks its rows up
/// on the host and never puts the table on a device (device_stage.hpp).
struct layer_cost {
  uint64_t weight_bytes = 0;       ///< Bytes of the layer's tensors.
  uint64_t kv_bytes_per_token = 0; ///< K and V cache bytes per token.
  uint64_t flops_per_token = 0;    ///< Multiply-adds x2, attention included.
  uint64_t activation_bytes = 0;   ///< Bytes passed on per token.
  /// Device operations a decode step runs for the layer (each pays the
  /// device's launch cost, backend::device_properties::launch_seconds).
  uint32_t operations = 0;
};

/// The Walsh-Hadamard rotations llama.cpp applies around a quantized KV
/// cache (its attn_rot): Q and K per run of `k` values (the largest power
/// of two from 64 dividing the head width), V and the attention output per
/// `v` (64); both 0 for none (an f16/f32 cache, or heads that are not a
/// multiple of 64 wide). Orthonormal: attention is unchanged up to
/// rounding, the 8-bit blocks lose less.
struct kv_rotation {
  uint64_t k = 0;
  uint64_t v = 0;
  bool any() const {
    return k != 0;
  }
};
kv_rotation kv_rotation_of(backend::kv_type kv, uint32_t head_dim);

/// Per-layer costs of the model in `f` with a KV cache of type `kv`.
/// Attention FLOPs are counted for a context of `n_ctx` tokens (the
/// average position n_ctx / 2); 0 means the training context length.
std::vector<layer_cost> layer_costs(const gguf_file& f, const llama_hparams& hp,
                                    uint32_t n_ctx = 0,
                                    backend::kv_type kv = backend::kv_type::f16);

} // namespace exo::model
