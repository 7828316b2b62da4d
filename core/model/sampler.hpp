#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

namespace exo::model {

/// How to pick the next token. temperature <= 0 means greedy (argmax);
/// top_k == 0 and top_p >= 1 disable those filters.
struct sampler_params {
  float temperature = 0.0f;
  uint32_t top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
};

/// Picks tokens from logits: top-k, then top-p, then temperature, then a
/// draw from a seeded generator, so a seed always gives the same tokens.
class sampler {
public:
  explicit sampler(const sampler_params& p);

  /// Returns the chosen token id among `n` logits.
  int32_t sample(const float* logits, size_t n);

  /// Puts the sampler where it would be after `n` calls of sample(): each
  /// call at a temperature above 0 draws one number, at 0 none. A job taken
  /// over from another node (its tokens so far replicated) goes on with the
  /// same draws as an uninterrupted run.
  void skip(size_t n);

  /// Index of the largest logit (the lowest index on ties).
  static int32_t argmax(const float* logits, size_t n);

  /// Index of the first NaN or infinite logit, n when all are finite.
  /// Non-finite logits come from non-finite weights or activations that
  /// overflow: no token can be chosen from them, and every caller stops
  /// with an error instead of printing garbage.
  static size_t first_non_finite(const float* logits, size_t n);

private:
  sampler_params p_;
  std::mt19937_64 rng_;
};

} // namespace exo::model
