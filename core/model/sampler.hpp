#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace exo::model {

/// How to pick the next token. temperature <= 0 means greedy (argmax);
/// top_k == 0, top_p >= 1 and min_p == 0 disable those filters.
///
/// Before any of them, a row of logits may be adjusted (adjust_logits):
/// OpenAI's logit_bias, frequency_penalty and presence_penalty, and the
/// repetition_penalty of vLLM and llama.cpp.
struct sampler_params {
  float temperature = 0.0f;
  uint32_t top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  /// llama.cpp's and vLLM's min-p: after top-k and top-p, only the tokens
  /// at least min_p times as likely as the best stay (0 to 1).
  float min_p = 0.0f;
  /// Divides a positive logit, multiplies a negative one, of every token
  /// in the prompt or generated so far (once each; vLLM's and llama.cpp's
  /// repetition penalty, (0, 2]; 1: none).
  float repetition_penalty = 1.0f;
  /// Subtracted from a token's logit once per time the sequence has
  /// generated it so far (-2 to 2: negative values favour repeats).
  float frequency_penalty = 0.0f;
  /// Subtracted from a token's logit once if the sequence has generated it
  /// so far (-2 to 2).
  float presence_penalty = 0.0f;
  /// Added to the logits of the tokens named (ids ascending, distinct;
  /// each -100 to 100): OpenAI's logit_bias.
  std::vector<int32_t> bias_ids;
  std::vector<float> bias_values;
  /// JSON mode (response_format json_object): the job masks every token
  /// that would make the text no prefix of a JSON object
  /// (json_constraint.hpp), and ends the sequence when the object closes.
  bool json = false;
};

/// A logit no sampler chooses: a candidate with it is left out of every
/// distribution (a token JSON mode forbids: json_constraint.hpp). The
/// lowest finite float, so that rows stay finite.
inline constexpr float masked_logit = std::numeric_limits<float>::lowest();

/// The most tokens a logit_bias may name (OpenAI's own limit is 300).
constexpr size_t max_logit_bias = 1024;

/// The largest |frequency_penalty| and |presence_penalty|, and
/// repetition_penalty, and |bias|.
constexpr float max_penalty = 2.0f;
constexpr float max_repetition_penalty = 2.0f;
constexpr float max_logit_bias_value = 100.0f;

/// Whether `p` adjusts rows before sampling (a bias or a penalty set, or
/// JSON mode's mask).
bool adjusts_logits(const sampler_params& p);

/// How many of a row's best logits a job needs from its last stage to
/// sample with `p`: sampler::candidates, or 0 (whole rows) when the row is
/// adjusted first (a bias or a penalty can lift any token into them).
size_t logits_needed(const sampler_params& p, size_t n_vocab);

/// Adjusts a row of `n` logits as `p` says, given the sequence's prompt
/// and the tokens it has generated so far: first each logit_bias id gets
/// its bias added; then each token of the prompt or generated (once each)
/// gets its logit divided by repetition_penalty when positive, multiplied
/// when not (vLLM's tokens, llama.cpp's arithmetic); then each generated
/// token's logit (its prompt not counted, as OpenAI and vLLM count) loses
/// count * frequency_penalty + presence_penalty (llama.cpp's expression,
/// in float). Ids outside the row are ignored. Touches only the ids named:
/// O((prompt + generated) log + biases).
void adjust_logits(const sampler_params& p, const int32_t* prompt,
                   size_t n_prompt, const int32_t* generated,
                   size_t n_generated, float* logits, size_t n);

/// A distribution over tokens: ids[i] with probability probs[i] (the
/// others 0), in the order sample_top reads them.
struct token_distribution {
  std::vector<int32_t> ids;
  std::vector<double> probs;
  /// The probability of `id` (0 when it is not among ids).
  double of(int32_t id) const;
};

/// The most alternatives a token's log-probabilities name
/// (token_logprobs::top_ids; OpenAI's top_logprobs allows 20).
constexpr size_t max_top_logprobs = 20;

/// A generated token's log-probability under the model's distribution
/// (the log-softmax of the raw logits: no temperature, top-k or top-p, as
/// OpenAI's and vLLM's logprobs) and its best alternatives', best first
/// (the order of sampler::top_candidates: the lower id among equals).
struct token_logprobs {
  float logprob = 0.0f;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  /// The token's rank in its row: how many tokens are at least as likely
  /// (itself included; vLLM's `rank`, 1 for the best); 0 where it is not
  /// known (a row's candidates that do not hold the token).
  uint32_t rank = 0;
};

/// log(sum(exp(logits[i]))) of `n` finite logits (n > 0), in double:
/// what a row's log-softmax subtracts.
double log_sum_exp(const float* logits, size_t n);

/// Token `id`'s log-probabilities and its row's `top` best (top at most
/// n) from a whole row of `n` finite logits.
token_logprobs logprobs_of(const float* logits, size_t n, int32_t id,
                           size_t top);

/// The same from a row's `k` best logits in top_candidates' order and the
/// whole row's log_sum_exp `lse`: `id` must be among them (what a sampler
/// chose from them is) and `top` at most k. An id that is not gets the
/// logprob of the worst candidate (its probability is at most that).
token_logprobs logprobs_of(const int32_t* ids, const float* values, size_t k,
                           double lse, int32_t id, size_t top);

/// Picks tokens from logits: top-k, then top-p, then min-p, then
/// temperature (llama.cpp's chain), then a draw from a seeded generator,
/// so a seed always gives the same tokens.
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

  /// The distribution sample_top draws from at a temperature above 0
  /// (the same arguments): the candidates top-k and top-p keep, with
  /// their probabilities at the temperature. Draws nothing.
  token_distribution distribution(const int32_t* ids, const float* values,
                                  size_t k) const;
  /// The same from a whole row of `n` logits (what sample() draws from).
  token_distribution distribution(const float* logits, size_t n) const;

  /// A token drawn from `d` (not empty) as sample_top draws: one number.
  int32_t draw(const token_distribution& d);

  /// A uniform double in [0, 1) from 53 random bits: one number.
  double uniform();

  /// Puts the sampler where it would be after `n` calls of sample(): each
  /// call at a temperature above 0 draws one number, at 0 none. A job taken
  /// over from another node (its tokens so far replicated) goes on with the
  /// same draws as an uninterrupted run.
  void skip(size_t n);

  /// How many numbers it has drawn (skip and restart count theirs): what a
  /// job taken over in the middle of speculative rounds, which draw
  /// several numbers a token, must skip (restart).
  uint64_t draws() const { return draws_; }

  /// Puts the sampler where it is after drawing `draws` numbers from its
  /// seed, whatever it drew before (a round's proposals drawn and dropped).
  void restart(uint64_t draws);

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
  uint64_t draws_ = 0;
};

// -- speculative sampling ---------------------------------------------------
//
// Leviathan et al. and Chen et al. (2023): a draft draws proposal x from its
// distribution q; the model, with distribution p at the same position, keeps
// it with probability min(1, p(x) / q(x)), else draws its token from the
// residual max(0, p - q), normalised. Each token kept or drawn is then
// distributed exactly as p, whatever q is: sampling with a draft gives the
// model's distribution, only faster when the draft often agrees.

/// Whether proposal `x`, drawn from `q`, is kept given the model's `p` and
/// a uniform `u` in [0, 1): u < p(x) / q(x).
bool keep_proposal(const token_distribution& p, const token_distribution& q,
                   int32_t x, double u);

/// What the model draws from when it does not keep a proposal drawn from
/// `q`: max(0, p - q) normalised, over p's candidates in p's order. When
/// that leaves nothing (p <= q everywhere, which a rejection makes
/// possible only through rounding), p itself.
token_distribution residual(const token_distribution& p,
                            const token_distribution& q);

} // namespace exo::model
