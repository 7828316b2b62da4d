#include "core/model/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace exo::model {

sampler::sampler(const sampler_params& p) : p_(p), rng_(p.seed) {
}

int32_t sampler::argmax(const float* logits, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (logits[i] > logits[best])
      best = i;
  return static_cast<int32_t>(best);
}

size_t sampler::first_non_finite(const float* logits, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(logits[i]))
      return i;
  return n;
}

void sampler::skip(size_t n) {
  if (p_.temperature > 0.0f)
    rng_.discard(n);
}

int32_t sampler::sample(const float* logits, size_t n) {
  if (n == 0)
    return -1;
  if (p_.temperature <= 0.0f)
    return argmax(logits, n);
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t keep = n;
  if (p_.top_k > 0 && p_.top_k < n) {
    keep = p_.top_k;
    std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), by_logit);
  } else {
    std::sort(idx.begin(), idx.end(), by_logit);
  }
  idx.resize(keep);
  // Probabilities at temperature 1 for top-p, as llama.cpp's sampler chain
  // applies top-p before temperature.
  auto probs = [&](float temp) {
    std::vector<double> pr(idx.size());
    const double mx = logits[idx[0]];
    double sum = 0.0;
    for (size_t i = 0; i < idx.size(); ++i) {
      pr[i] = std::exp((logits[idx[i]] - mx) / temp);
      sum += pr[i];
    }
    for (auto& v : pr)
      v /= sum;
    return pr;
  };
  if (p_.top_p < 1.0f) {
    auto pr = probs(1.0f);
    double cum = 0.0;
    size_t k = 0;
    while (k < pr.size()) {
      cum += pr[k++];
      if (cum >= p_.top_p)
        break;
    }
    idx.resize(std::max<size_t>(k, 1));
  }
  auto pr = probs(p_.temperature);
  // A uniform double in [0, 1) from 53 random bits, portable across
  // standard libraries.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  double cum = 0.0;
  for (size_t i = 0; i < pr.size(); ++i) {
    cum += pr[i];
    if (u < cum)
      return idx[i];
  }
  return idx.back();
}

} // namespace exo::model
