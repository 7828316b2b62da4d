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

size_t sampler::candidates(const sampler_params& p, size_t n_vocab) {
  if (p.temperature <= 0.0f)
    return 1;
  return p.top_k > 0 && p.top_k < n_vocab ? p.top_k : 0;
}

void sampler::top_candidates(const float* logits, size_t n, size_t k,
                             int32_t* ids, float* values) {
  k = std::min(k, n);
  if (k == 0)
    return;
  // better(a, b): a comes first (sample()'s order).
  auto better = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (k == 1) {
    ids[0] = argmax(logits, n);
    values[0] = logits[ids[0]];
    return;
  }
  // A heap of the k best so far, the worst of them on top: one pass, and
  // most logits are turned away by one comparison with that worst.
  std::vector<int32_t> heap(k);
  std::iota(heap.begin(), heap.end(), 0);
  std::make_heap(heap.begin(), heap.end(), better);
  for (size_t i = k; i < n; ++i) {
    // Ties with the worst lose: its id is lower.
    if (!(logits[i] > logits[heap.front()]))
      continue;
    std::pop_heap(heap.begin(), heap.end(), better);
    heap.back() = static_cast<int32_t>(i);
    std::push_heap(heap.begin(), heap.end(), better);
  }
  std::sort_heap(heap.begin(), heap.end(), better);
  for (size_t i = 0; i < k; ++i) {
    ids[i] = heap[i];
    values[i] = logits[heap[i]];
  }
}

int32_t sampler::sample(const float* logits, size_t n) {
  if (n == 0)
    return -1;
  if (p_.temperature <= 0.0f)
    return argmax(logits, n);
  size_t keep = candidates(p_, n);
  if (keep == 0)
    keep = n;
  std::vector<int32_t> ids(keep);
  std::vector<float> values(keep);
  if (keep < n) {
    top_candidates(logits, n, keep, ids.data(), values.data());
  } else { // the whole row, in order
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(), [logits](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < n; ++i)
      values[i] = logits[ids[i]];
  }
  return sample_top(ids.data(), values.data(), keep);
}

int32_t sampler::sample_top(const int32_t* ids, const float* values,
                            size_t k) {
  if (k == 0)
    return -1;
  if (p_.temperature <= 0.0f)
    return ids[0];
  if (p_.top_k > 0 && p_.top_k < k)
    k = p_.top_k;
  // Probabilities at temperature 1 for top-p, as llama.cpp's sampler chain
  // applies top-p before temperature.
  auto probs = [&](float temp) {
    std::vector<double> pr(k);
    const double mx = values[0];
    double sum = 0.0;
    for (size_t i = 0; i < k; ++i) {
      pr[i] = std::exp((values[i] - mx) / temp);
      sum += pr[i];
    }
    for (auto& v : pr)
      v /= sum;
    return pr;
  };
  if (p_.top_p < 1.0f) {
    auto pr = probs(1.0f);
    double cum = 0.0;
    size_t kept = 0;
    while (kept < pr.size()) {
      cum += pr[kept++];
      if (cum >= p_.top_p)
        break;
    }
    k = std::max<size_t>(kept, 1);
  }
  auto pr = probs(p_.temperature);
  // A uniform double in [0, 1) from 53 random bits, portable across
  // standard libraries.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  double cum = 0.0;
  for (size_t i = 0; i < pr.size(); ++i) {
    cum += pr[i];
    if (u < cum)
      return ids[i];
  }
  return ids[k - 1];
}

} // namespace exo::model
