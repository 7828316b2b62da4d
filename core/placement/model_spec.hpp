#pragma once

/// A model as placement sees it, read from a GGUF file. Its own library
/// (exo_placement_model, no CAF) so that the model code's OpenMP flags stay
/// out of targets that reuse the precompiled CAF headers.

#include "backends/backend.hpp"
#include "core/placement/problem.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace exo::placement {

/// The positions of a KV block in a shard's paged stage
/// (model::device_stage_options::kv_block_positions, checked equal where
/// both are seen): placement counts each sequence's cache in whole blocks
/// (problem::request::kv_block_positions).
constexpr std::uint32_t stage_kv_block_positions = 32;

/// A model as placement sees it.
struct model_spec {
  std::string name;
  std::vector<layer> layers;
  /// The model's training context (used when a request gives none).
  std::uint32_t context_train = 0;
  /// A stage's working memory beyond its layers.
  stage_extras extras;
};

/// Reads the per-layer costs of a llama GGUF file for a context of `n_ctx`
/// tokens (0: the training context). Memory is what a shard's device stage
/// allocates (model::device_stage_memory with model::shard_stage_options):
/// per layer its weights and KV cache per token (the last layer also the
/// output norm and head); on every stage the scratch buffers for a batch
/// and the rope_freqs table; on the last stage the logits buffer; nothing
/// extra on the first (the token embedding stays on the host). So
/// problem::stage_memory(first, end) equals the device_stage_memory of
/// that range; the KV cache of type `kv`. Throws problem_error naming the
/// file and the reason.
model_spec load_model_spec(const std::string& path, std::uint32_t n_ctx = 0,
                           backend::kv_type kv = backend::kv_type::f16);

} // namespace exo::placement
