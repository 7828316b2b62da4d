#include "core/model/sampler.hpp"

#include "backends/host_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>
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
  if (p_.temperature > 0.0f) {
    rng_.discard(n);
    draws_ += n;
  }
}

void sampler::restart(uint64_t draws) {
  rng_.seed(p_.seed);
  rng_.discard(draws);
  draws_ = draws;
}

bool adjusts_logits(const sampler_params& p) {
  return p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f
         || p.repetition_penalty != 1.0f || !p.bias_ids.empty() || p.json;
}

void adjust_logits(const sampler_params& p, const int32_t* prompt,
                   size_t n_prompt, const int32_t* generated,
                   size_t n_generated, float* logits, size_t n) {
  const size_t nb = std::min(p.bias_ids.size(), p.bias_values.size());
  for (size_t i = 0; i < nb; ++i) {
    const auto id = p.bias_ids[i];
    if (id >= 0 && static_cast<size_t>(id) < n)
      logits[id] += p.bias_values[i];
  }
  if (p.repetition_penalty != 1.0f) {
    std::vector<int32_t> seen(prompt, prompt + n_prompt);
    seen.insert(seen.end(), generated, generated + n_generated);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (auto id : seen)
      if (id >= 0 && static_cast<size_t>(id) < n) {
        float& v = logits[id];
        if (v <= 0.0f)
          v *= p.repetition_penalty;
        else
          v /= p.repetition_penalty;
      }
  }
  if (p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f)
    return;
  // Counts of each distinct token: sorted copy, runs.
  std::vector<int32_t> ids(generated, generated + n_generated);
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t e = i + 1;
    while (e < ids.size() && ids[e] == ids[i])
      ++e;
    const auto id = ids[i];
    if (id >= 0 && static_cast<size_t>(id) < n)
      logits[id] -= static_cast<float>(e - i) * p.frequency_penalty
                    + p.presence_penalty;
    i = e;
  }
}

size_t logits_needed(const sampler_params& p, size_t n_vocab) {
  return adjusts_logits(p) ? 0 : sampler::candidates(p, n_vocab);
}

size_t sampler::candidates(const sampler_params& p, size_t n_vocab) {
  if (p.temperature <= 0.0f)
    return 1;
  return p.top_k > 0 && p.top_k < n_vocab ? p.top_k : 0;
}

namespace {

/// Logits are scanned in blocks of this many: a block whose largest value
/// does not pass the bar is turned away at once.
constexpr size_t scan_block = 16;

/// The largest of l[0 .. scan_block) (finite values): a max reduction the
/// compiler vectorises.
inline float block_max(const float* l) {
  float m[scan_block];
  for (size_t j = 0; j < scan_block; ++j)
    m[j] = l[j];
  for (size_t w = scan_block / 2; w > 0; w /= 2)
    for (size_t j = 0; j < w; ++j)
      m[j] = m[j + w] > m[j] ? m[j + w] : m[j];
  return m[0];
}

/// A candidate: its logit and token id.
struct candidate {
  float value;
  int32_t id;
};

/// a comes before b: the larger logit, the lower id among equal ones.
inline bool better(const candidate& a, const candidate& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

} // namespace

void sampler::top_candidates(const float* logits, size_t n, size_t k,
                             int32_t* ids, float* values) {
  k = std::min(k, n);
  if (k == 0)
    return;
  // Up to 2k candidates; when full, the best k are kept (nth_element) and
  // the worst of them is the bar a later logit must pass. A later logit
  // equal to the bar loses (its id is higher), so the bar is strict. One
  // pass over the row, most of it blocks of 16 turned away at once.
  std::vector<candidate> kept;
  kept.reserve(2 * k);
  float bar = 0.0f;
  bool have_bar = false;
  auto take = [&](size_t i) {
    kept.push_back({logits[i], static_cast<int32_t>(i)});
    if (kept.size() < 2 * k)
      return;
    std::nth_element(kept.begin(), kept.begin() + (k - 1), kept.end(),
                     better);
    kept.resize(k);
    bar = kept[k - 1].value;
    have_bar = true;
  };
  size_t i = 0;
  for (; i < n && !have_bar; ++i)
    take(i);
  for (; i + scan_block <= n; i += scan_block)
    if (block_max(logits + i) > bar)
      for (size_t j = i; j < i + scan_block; ++j)
        if (logits[j] > bar)
          take(j);
  for (; i < n; ++i)
    if (!have_bar || logits[i] > bar)
      take(i);
  if (kept.size() > k) {
    std::nth_element(kept.begin(), kept.begin() + (k - 1), kept.end(),
                     better);
    kept.resize(k);
  }
  std::sort(kept.begin(), kept.end(), better);
  for (size_t c = 0; c < k; ++c) {
    ids[c] = kept[c].id;
    values[c] = kept[c].value;
  }
}

int32_t sampler::sample(const float* logits, size_t n) {
  if (n == 0)
    return -1;
  if (p_.temperature <= 0.0f)
    return argmax(logits, n);
  return draw(distribution(logits, n));
}

int32_t sampler::sample_top(const int32_t* ids, const float* values,
                            size_t k) {
  if (k == 0)
    return -1;
  if (p_.temperature <= 0.0f)
    return ids[0];
  return draw(distribution(ids, values, k));
}

token_distribution sampler::distribution(const int32_t* ids,
                                         const float* values,
                                         size_t k) const {
  token_distribution d;
  if (k == 0)
    return d;
  if (p_.temperature <= 0.0f) { // greedy: the best candidate, surely
    d.ids.push_back(ids[0]);
    d.probs.push_back(1.0);
    return d;
  }
  if (p_.top_k > 0 && p_.top_k < k)
    k = p_.top_k;
  // Masked candidates (the worst, sorted) are no candidates at all.
  while (k > 1 && values[k - 1] <= masked_logit)
    --k;
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
  if (p_.min_p > 0.0f) {
    // llama.cpp's min-p, on the logits: those at least the best one's
    // plus log(min_p) stay (the best always does).
    const float bar = values[0] + std::log(p_.min_p);
    size_t kept = 1;
    while (kept < k && values[kept] >= bar)
      ++kept;
    k = kept;
  }
  d.probs = probs(p_.temperature);
  d.ids.assign(ids, ids + k);
  return d;
}

token_distribution sampler::distribution(const float* logits,
                                         size_t n) const {
  size_t keep = candidates(p_, n);
  if (keep == 0) // the whole row, in order
    keep = n;
  keep = std::min(keep, n);
  std::vector<int32_t> ids(keep);
  std::vector<float> values(keep);
  top_candidates(logits, n, keep, ids.data(), values.data());
  return distribution(ids.data(), values.data(), keep);
}

double sampler::uniform() {
  // Portable across standard libraries (no std::uniform_real_distribution).
  ++draws_;
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t sampler::draw(const token_distribution& d) {
  const double u = uniform();
  double cum = 0.0;
  for (size_t i = 0; i < d.probs.size(); ++i) {
    cum += d.probs[i];
    if (u < cum)
      return d.ids[i];
  }
  return d.ids.back(); // u at or above a sum rounded below 1
}

double token_distribution::of(int32_t id) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == id)
      return probs[i];
  return 0.0;
}

bool keep_proposal(const token_distribution& p, const token_distribution& q,
                   int32_t x, double u) {
  const double qx = q.of(x);
  // q(x) > 0 for a proposal drawn from q; a q without x keeps nothing.
  return qx > 0.0 && u * qx < p.of(x);
}

token_distribution residual(const token_distribution& p,
                            const token_distribution& q) {
  // q by token (a whole vocabulary's row has as many candidates).
  std::unordered_map<int32_t, double> qs;
  qs.reserve(q.ids.size());
  for (size_t i = 0; i < q.ids.size(); ++i)
    qs.emplace(q.ids[i], q.probs[i]);
  token_distribution r;
  double sum = 0.0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const auto it = qs.find(p.ids[i]);
    const double v = p.probs[i] - (it == qs.end() ? 0.0 : it->second);
    if (v > 0.0) {
      r.ids.push_back(p.ids[i]);
      r.probs.push_back(v);
      sum += v;
    }
  }
  if (r.ids.empty() || !(sum > 0.0))
    return p;
  for (auto& v : r.probs)
    v /= sum;
  return r;
}

double log_sum_exp(const float* logits, size_t n) {
  float m = logits[0];
  for (size_t i = 0; i + scan_block <= n; i += scan_block)
    m = std::max(m, block_max(logits + i));
  for (size_t i = n - n % scan_block; i < n; ++i)
    m = std::max(m, logits[i]);
  // exp(x - max) in float vector lanes (ggml's expf, 1.5 ulp), summed in
  // double: a 128K-token row in about a tenth of a millisecond (one call
  // of std::exp in double each took 2.8 ms), its log-probabilities within
  // a float's rounding.
  const double sum = backend::host::sum_exp(logits, n, m);
  return m + std::log(sum);
}

token_logprobs logprobs_of(const float* logits, size_t n, int32_t id,
                           size_t top) {
  const double lse = log_sum_exp(logits, n);
  token_logprobs out;
  out.logprob = static_cast<float>(logits[id] - lse);
  const float own = logits[id];
  out.rank = static_cast<uint32_t>(
    std::count_if(logits, logits + n, [own](float v) { return v >= own; }));
  top = std::min(top, n);
  out.top_ids.resize(top);
  out.top_logprobs.resize(top);
  sampler::top_candidates(logits, n, top, out.top_ids.data(),
                          out.top_logprobs.data());
  for (auto& v : out.top_logprobs)
    v = static_cast<float>(v - lse);
  return out;
}

token_logprobs logprobs_of(const int32_t* ids, const float* values, size_t k,
                           double lse, int32_t id, size_t top) {
  token_logprobs out;
  out.logprob = k > 0 ? static_cast<float>(values[k - 1] - lse) : 0.0f;
  for (size_t i = 0; i < k; ++i)
    if (ids[i] == id) {
      out.logprob = static_cast<float>(values[i] - lse);
      out.rank = static_cast<uint32_t>(std::count_if(
        values, values + k, [own = values[i]](float v) { return v >= own; }));
      break;
    }
  top = std::min(top, k);
  out.top_ids.assign(ids, ids + top);
  for (size_t i = 0; i < top; ++i)
    out.top_logprobs.push_back(static_cast<float>(values[i] - lse));
  return out;
}

} // namespace exo::model
