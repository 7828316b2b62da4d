#pragma once

/// A model as placement sees it, read from a GGUF file. Its own library
/// (exo_placement_model, no CAF) so that the model code's OpenMP flags stay
/// out of targets that reuse the precompiled CAF headers.

#include "actors/placement/problem.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace exo::placement {

/// A model as placement sees it.
struct model_spec {
  std::string name;
  std::vector<layer> layers;
  /// The model's training context (used when a request gives none).
  std::uint32_t context_train = 0;
};

/// Reads the per-layer costs of a llama GGUF file for a context of `n_ctx`
/// tokens (0: the training context). Throws problem_error naming the file
/// and the reason.
model_spec load_model_spec(const std::string& path, std::uint32_t n_ctx = 0);

} // namespace exo::placement
