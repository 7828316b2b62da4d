#include "core/gateway/perplexity.hpp"

#include <cmath>

namespace exo::gateway {

std::vector<std::vector<std::int32_t>> perplexity_chunks(
  const std::vector<std::int32_t>& tokens, std::uint32_t ctx,
  std::size_t max_chunks, std::int32_t bos) {
  std::vector<std::vector<std::int32_t>> out;
  if (ctx < 2)
    return out;
  std::size_t n = tokens.size() / ctx;
  if (max_chunks > 0 && max_chunks < n)
    n = max_chunks;
  for (std::size_t i = 0; i < n; ++i) {
    out.emplace_back(tokens.begin() + static_cast<std::ptrdiff_t>(i * ctx),
                     tokens.begin()
                       + static_cast<std::ptrdiff_t>((i + 1) * ctx));
    if (bos >= 0)
      out.back()[0] = bos;
  }
  return out;
}

std::uint32_t first_scored(std::uint32_t ctx) {
  return ctx / 2 + 1;
}

std::string perplexity_sum::add_chunk(const std::vector<double>& logprobs,
                                      std::uint32_t ctx) {
  if (ctx < 2 || logprobs.size() < ctx)
    return "a chunk of " + std::to_string(ctx) + " tokens came back with "
           + std::to_string(logprobs.size()) + " log-probabilities";
  double nll = 0, nll2 = 0;
  for (std::uint32_t j = first_scored(ctx); j < ctx; ++j) {
    const double lp = logprobs[j];
    if (!std::isfinite(lp) || lp > 0)
      return "token " + std::to_string(j) + "'s log-probability "
             + std::to_string(lp) + " is not a log-probability";
    nll -= lp;
    nll2 += lp * lp;
  }
  nll_ += nll;
  nll2_ += nll2;
  count_ += ctx - first_scored(ctx);
  ++chunks_;
  return {};
}

double perplexity_sum::ppl() const {
  return count_ == 0 ? 0.0 : std::exp(nll_ / static_cast<double>(count_));
}

double perplexity_sum::error() const {
  if (count_ < 2)
    return 0.0;
  const double n = static_cast<double>(count_);
  const double mean = nll_ / n;
  const double var = nll2_ / n - mean * mean;
  return var > 0 ? std::sqrt(var / (n - 1)) * ppl() : 0.0;
}

} // namespace exo::gateway
