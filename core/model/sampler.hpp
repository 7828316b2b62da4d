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

  /// How many of a row's best logits sample() reads (top_candidates):
  /// 1 at a temperature <= 0 (the largest), top_k when it is below
  /// n_vocab; 0 when it reads the whole row (top_k 0 or >= n_vocab).
  static size_t candidates(const sampler_params& p, size_t n_vocab);

  /// The `k` best of `n` logits (k <= n), best first: larger values
  /// first, the lower token id first among equal ones (a strict order, so
  /// the k are always the same). Their ids go to `ids`, their values to
  /// `values` (k each). The logits must be finite (first_non_finite).
  static void top_candidates(const float* logits, size_t n, size_t k,
                             int32_t* ids, float* values);

  /// Returns the token sample() would choose from a whole row, given only
  /// its `k` best logits in top_candidates' order, with k >= candidates()
  /// of this sampler's parameters (k of a row that has fewer tokens than
  /// top_k: all of them): what a job samples from when its last stage
  /// returns each row's candidates instead of the row (stage_step::top_k).
  /// Draws what sample() draws.
  int32_t sample_top(const int32_t* ids, const float* values, size_t k);

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
