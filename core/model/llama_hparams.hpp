#pragma once

#include <cstdint>
#include <vector>

#include "core/gguf/gguf.hpp"

namespace exo::model {

/// The hyper-parameters of a llama-architecture GGUF file.
struct llama_hparams {
  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;
  uint32_t n_embd = 0;
  uint32_t n_ff = 0;
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t n_layer = 0;
  uint32_t head_dim = 0; ///< llama.attention.key_length or n_embd / n_head.
  uint32_t n_rot = 0;    ///< llama.rope.dimension_count or head_dim.
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = false; ///< No output.weight: the head is token_embd.

  uint32_t n_embd_q() const {
    return n_head * head_dim;
  }
  uint32_t n_embd_kv() const {
    return n_head_kv * head_dim;
  }

  /// Reads and checks the hyper-parameters; throws gguf_error naming a
  /// missing or inconsistent key (or an architecture other than llama).
  static llama_hparams from_gguf(const gguf_file& f);
};

/// What one layer costs, for the placement solver. The last layer also
/// carries the final norm and the output head (the embedding when the head
/// is tied). The token embedding is in no layer: a stage looks its rows up
/// on the host and never puts the table on a device (device_stage.hpp).
struct layer_cost {
  uint64_t weight_bytes = 0;       ///< Bytes of the layer's tensors.
  uint64_t kv_bytes_per_token = 0; ///< K and V cache bytes (f32) per token.
  uint64_t flops_per_token = 0;    ///< Multiply-adds x2, attention included.
  uint64_t activation_bytes = 0;   ///< Bytes passed on per token.
};

/// Per-layer costs of the model in `f`. Attention FLOPs are counted for a
/// context of `n_ctx` tokens (the average position n_ctx / 2); 0 means the
/// training context length.
std::vector<layer_cost> layer_costs(const gguf_file& f, const llama_hparams& hp,
                                    uint32_t n_ctx = 0);

} // namespace exo::model
