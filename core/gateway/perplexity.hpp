#pragma once

/// llama.cpp's perplexity (llama-perplexity) as a client of the
/// completions API computes it: the text's tokens in chunks of `ctx`,
/// each chunk's first token replaced by BOS when the vocabulary adds one,
/// and of each chunk the tokens of its second half scored, each after the
/// ones before it in the chunk (llama.cpp reads the logits of rows ctx/2 ..
/// ctx - 2, which predict tokens ctx/2 + 1 .. ctx - 1). A served model
/// gives them as an echoed prompt's token_logprobs (echo, logprobs 0,
/// max_tokens 0); `exo-node perplexity` sends the chunks and prints what
/// perplexity_sum gives. Plain logic, no sockets.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace exo::gateway {

/// The chunks of `tokens` (at most `max_chunks`; 0: every whole one), each
/// `ctx` tokens (2 or more), the first one replaced by `bos` when it is 0
/// or more.
std::vector<std::vector<std::int32_t>> perplexity_chunks(
  const std::vector<std::int32_t>& tokens, std::uint32_t ctx,
  std::size_t max_chunks, std::int32_t bos);

/// The first scored position of a chunk of `ctx` tokens: ctx / 2 + 1
/// (positions from there to ctx - 1 are scored).
std::uint32_t first_scored(std::uint32_t ctx);

/// The negative log-likelihood of the scored tokens so far, and what
/// llama-perplexity prints of it.
class perplexity_sum {
public:
  /// Adds one chunk's scores: `logprobs[j]` is token j's (j from 0 to
  /// ctx - 1; the first is not read). "" or what is wrong (too few
  /// numbers, one that is not finite or above 0).
  std::string add_chunk(const std::vector<double>& logprobs,
                        std::uint32_t ctx);
  /// exp(mean negative log-likelihood); 0 before any token.
  double ppl() const;
  /// llama-perplexity's uncertainty of ppl(): ppl * the standard error of
  /// the mean negative log-likelihood; 0 with fewer than two tokens.
  double error() const;
  std::size_t tokens() const noexcept {
    return count_;
  }
  std::size_t chunks() const noexcept {
    return chunks_;
  }

private:
  double nll_ = 0, nll2_ = 0;
  std::size_t count_ = 0, chunks_ = 0;
};

} // namespace exo::gateway
