#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "backends/host_kernels.hpp"
#include "core/model/sampler.hpp"

using namespace exo::model;

TEST_CASE("greedy sampling picks the largest logit", "[sampler]") {
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.9f};
  sampler s({});
  CHECK(s.sample(l.data(), l.size()) == 1);
  CHECK(sampler::argmax(l.data(), l.size()) == 1);
}

TEST_CASE("top-k 1 and a tiny top-p reduce sampling to greedy",
          "[sampler]") {
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.9f};
  sampler_params p;
  p.temperature = 5.0f;
  p.top_k = 1;
  p.top_p = 1.0f;
  sampler k1(p);
  p.top_k = 0;
  p.top_p = 0.01f;
  sampler tp(p);
  for (int i = 0; i < 50; ++i) {
    CHECK(k1.sample(l.data(), l.size()) == 1);
    CHECK(tp.sample(l.data(), l.size()) == 1);
  }
}

TEST_CASE("top-k keeps only the k best tokens", "[sampler]") {
  std::vector<float> l = {3.0f, 0.0f, 2.9f, 2.8f, -5.0f};
  sampler_params p;
  p.temperature = 10.0f;
  p.top_k = 2;
  p.top_p = 1.0f;
  sampler s(p);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 400; ++i)
    ++seen[s.sample(l.data(), l.size())];
  CHECK(seen.size() == 2);
  CHECK(seen.count(0) == 1);
  CHECK(seen.count(2) == 1);
}

TEST_CASE("the same seed gives the same draws", "[sampler]") {
  std::vector<float> l(100);
  for (size_t i = 0; i < l.size(); ++i)
    l[i] = static_cast<float>((i * 37) % 11) * 0.3f;
  sampler_params p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.9f;
  p.seed = 99;
  sampler a(p), b(p);
  p.seed = 100;
  sampler c(p);
  std::vector<int32_t> da, db, dc;
  for (int i = 0; i < 64; ++i) {
    da.push_back(a.sample(l.data(), l.size()));
    db.push_back(b.sample(l.data(), l.size()));
    dc.push_back(c.sample(l.data(), l.size()));
  }
  CHECK(da == db);
  CHECK(da != dc);
}

TEST_CASE("skip(n) puts a sampler where n samples would, whatever the "
          "logits were", "[sampler]") {
  std::vector<float> l(50), other(50);
  for (size_t i = 0; i < l.size(); ++i) {
    l[i] = static_cast<float>((i * 13) % 7) * 0.4f;
    other[i] = static_cast<float>(i % 3);
  }
  for (float temp : {0.0f, 0.7f, 1.3f}) {
    CAPTURE(temp);
    sampler_params p;
    p.temperature = temp;
    p.top_k = 20;
    p.top_p = 0.95f;
    p.seed = 7;
    sampler run(p), resumed(p);
    // The first 17 tokens came from other logits (another node's run).
    for (int i = 0; i < 17; ++i)
      run.sample(other.data(), other.size());
    resumed.skip(17);
    std::vector<int32_t> a, b;
    for (int i = 0; i < 40; ++i) {
      a.push_back(run.sample(l.data(), l.size()));
      b.push_back(resumed.sample(l.data(), l.size()));
    }
    CHECK(a == b);
    if (temp > 0) { // a sampler that did not skip draws differently
      sampler fresh(p);
      std::vector<int32_t> c;
      for (int i = 0; i < 40; ++i)
        c.push_back(fresh.sample(l.data(), l.size()));
      CHECK(c != a);
    }
  }
}

TEST_CASE("a sampler counts its draws, and restart(n) puts it where n "
          "draws did, whatever it drew since", "[sampler]") {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i)
    l[i] = static_cast<float>((i * 13) % 7) * 0.4f;
  sampler_params p;
  p.temperature = 0.9f;
  p.top_k = 20;
  p.seed = 11;
  sampler a(p);
  CHECK(a.draws() == 0);
  // A speculative round's draws: proposals, a verdict, a residual's draw.
  const auto d = a.distribution(l.data(), l.size());
  a.draw(d);
  a.draw(d);
  a.uniform();
  a.sample(l.data(), l.size());
  CHECK(a.draws() == 4);
  a.skip(3);
  CHECK(a.draws() == 7);
  std::vector<double> after7;
  for (int i = 0; i < 5; ++i)
    after7.push_back(a.uniform());
  CHECK(a.draws() == 12);
  // Back to 7 (the five since: a round dropped), and from a fresh one.
  a.restart(7);
  CHECK(a.draws() == 7);
  sampler b(p);
  b.restart(7);
  for (int i = 0; i < 5; ++i) {
    const double u = after7[static_cast<size_t>(i)];
    CHECK(a.uniform() == u);
    CHECK(b.uniform() == u);
  }
  // restart(0) is the fresh sampler; at temperature 0 sample() draws none.
  a.restart(0);
  sampler c(p);
  CHECK(a.uniform() == c.uniform());
  p.temperature = 0.0f;
  sampler greedy(p);
  greedy.sample(l.data(), l.size());
  greedy.skip(5);
  CHECK(greedy.draws() == 0);
}

namespace {

/// A row of n logits with many ties (values on a coarse grid).
std::vector<float> tied_row(size_t n, uint32_t salt) {
  std::vector<float> l(n);
  for (size_t i = 0; i < n; ++i)
    l[i] = static_cast<float>((i * 2654435761u + salt) % 23) * 0.25f - 2.0f;
  return l;
}

} // namespace

TEST_CASE("top_candidates are the k best, larger first, lower id first "
          "among equals",
          "[sampler]") {
  for (size_t n : {1u, 5u, 64u, 1000u, 50000u})
    for (size_t k : {1u, 2u, 7u, 40u, 1000u, 4096u}) {
      if (k > n)
        continue;
      CAPTURE(n, k);
      auto l = tied_row(n, static_cast<uint32_t>(n + k));
      std::vector<int32_t> want(n);
      for (size_t i = 0; i < n; ++i)
        want[i] = static_cast<int32_t>(i);
      std::stable_sort(want.begin(), want.end(),
                       [&](int32_t a, int32_t b) { return l[a] > l[b]; });
      want.resize(k);
      std::vector<int32_t> ids(k);
      std::vector<float> values(k);
      sampler::top_candidates(l.data(), n, k, ids.data(), values.data());
      CHECK(ids == want);
      for (size_t i = 0; i < k; ++i)
        CHECK(values[i] == l[ids[i]]);
    }
}

TEST_CASE("sampling a row's candidates picks what sampling the row picks",
          "[sampler]") {
  const size_t n = 3000;
  for (float temp : {0.0f, 0.6f, 1.5f})
    for (uint32_t top_k : {1u, 2u, 40u, 2999u})
      for (float top_p : {1.0f, 0.95f, 0.3f}) {
        CAPTURE(temp, top_k, top_p);
        sampler_params p;
        p.temperature = temp;
        p.top_k = top_k;
        p.top_p = top_p;
        p.seed = 1234 + top_k;
        const size_t k = sampler::candidates(p, n);
        CHECK(k == (temp <= 0 ? 1 : top_k));
        sampler whole(p), top(p);
        std::vector<int32_t> a, b;
        for (uint32_t step = 0; step < 60; ++step) {
          auto l = tied_row(n, step);
          std::vector<int32_t> ids(k);
          std::vector<float> values(k);
          sampler::top_candidates(l.data(), n, k, ids.data(), values.data());
          a.push_back(whole.sample(l.data(), n));
          b.push_back(top.sample_top(ids.data(), values.data(), k));
        }
        CHECK(a == b);
      }
  sampler_params p;
  p.temperature = 0.8f;
  p.top_k = 0;
  CHECK(sampler::candidates(p, n) == 0); // the whole row
  p.top_k = static_cast<uint32_t>(n);
  CHECK(sampler::candidates(p, n) == 0);
}

namespace {

/// Random logits over `n` tokens (a few ties), from generator g.
std::vector<float> random_logits(std::mt19937_64& g, std::size_t n) {
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> l(n);
  for (auto& v : l)
    v = std::round(u(g) * 8.0f) / 8.0f;
  return l;
}

/// The model's distribution after speculative sampling's one step, exactly:
/// a proposal x from q is kept with probability min(1, p(x)/q(x)); what
/// is not kept draws from the residual.
std::map<std::int32_t, double> after_speculation(const token_distribution& p,
                                                 const token_distribution& q) {
  std::map<std::int32_t, double> out;
  double rejected = 0.0;
  for (std::size_t i = 0; i < q.ids.size(); ++i) {
    const double qx = q.probs[i], px = p.of(q.ids[i]);
    const double keep = std::min(1.0, px / qx);
    out[q.ids[i]] += qx * keep;
    rejected += qx * (1.0 - keep);
  }
  const auto r = residual(p, q);
  for (std::size_t i = 0; i < r.ids.size(); ++i)
    out[r.ids[i]] += rejected * r.probs[i];
  return out;
}

} // namespace

TEST_CASE("a sampler's distribution is the one it draws from", "[sampler]") {
  std::mt19937_64 g(7);
  for (int c = 0; c < 40; ++c) {
    const std::size_t n = 1 + g() % 60;
    auto l = random_logits(g, n);
    sampler_params p;
    p.temperature = 0.3f + 0.1f * static_cast<float>(c % 12);
    p.top_k = static_cast<std::uint32_t>(c % 3 == 0 ? 0 : 1 + g() % 50);
    p.top_p = c % 4 == 0 ? 1.0f : 0.5f + 0.1f * static_cast<float>(c % 5);
    p.seed = static_cast<std::uint64_t>(c);
    INFO("case " << c << ": n " << n << ", top_k " << p.top_k << ", top_p "
                 << p.top_p << ", temperature " << p.temperature);
    sampler a(p), b(p);
    const auto d = b.distribution(l.data(), l.size());
    REQUIRE(!d.ids.empty());
    REQUIRE(d.ids.size() == d.probs.size());
    double sum = 0.0;
    for (auto v : d.probs) {
      CHECK(v > 0.0);
      sum += v;
    }
    CHECK(sum == Approx(1.0).epsilon(1e-12));
    // The draws of sample() and of draw() over the distribution: the same
    // tokens from the same seed, and the same draws consumed.
    for (int i = 0; i < 200; ++i)
      REQUIRE(a.sample(l.data(), l.size()) == b.draw(d));
    // From the candidates alone: the same distribution.
    std::vector<std::int32_t> ids(n);
    std::vector<float> values(n);
    sampler::top_candidates(l.data(), n, n, ids.data(), values.data());
    const auto dc = b.distribution(ids.data(), values.data(), n);
    CHECK(dc.ids == d.ids);
    CHECK(dc.probs == d.probs);
  }
  // Greedy: the best candidate, surely.
  std::vector<float> l = {0.5f, 3.0f, 1.0f};
  const auto d = sampler({}).distribution(l.data(), l.size());
  CHECK(d.ids == std::vector<std::int32_t>{1});
  CHECK(d.probs == std::vector<double>{1.0});
  CHECK(d.of(1) == 1.0);
  CHECK(d.of(0) == 0.0);
}

TEST_CASE("speculative sampling gives exactly the model's distribution, "
          "whatever the draft's",
          "[sampler][speculative]") {
  std::mt19937_64 g(11);
  auto dist = [&](const std::vector<float>& l, float temp, std::uint32_t k,
                  float top_p) {
    sampler_params sp;
    sp.temperature = temp;
    sp.top_k = k;
    sp.top_p = top_p;
    return sampler(sp).distribution(l.data(), l.size());
  };
  for (int c = 0; c < 60; ++c) {
    const std::size_t n = 2 + g() % 40;
    const auto lp = random_logits(g, n);
    // The draft: other logits (case 0 mod 5: the model's own; 1 mod 5:
    // the model's reversed, far from it), another top-k and top-p, so its
    // candidates may miss many of the model's and hold others.
    auto lq = c % 5 == 0 ? lp : random_logits(g, n);
    if (c % 5 == 1) {
      lq = lp;
      std::reverse(lq.begin(), lq.end());
    }
    const auto p = dist(lp, 0.8f, c % 2 ? 0 : 20, c % 3 ? 1.0f : 0.9f);
    const auto q = c % 5 == 0 ? p
                              : dist(lq, 1.2f, static_cast<std::uint32_t>(
                                                 1 + g() % 30),
                                     c % 4 ? 1.0f : 0.8f);
    INFO("case " << c << ": " << p.ids.size() << " model candidates, "
                 << q.ids.size() << " draft candidates");
    const auto out = after_speculation(p, q);
    double total = 0.0;
    for (auto [id, v] : out) {
      CHECK(v == Approx(p.of(id)).margin(1e-12));
      total += v;
    }
    CHECK(total == Approx(1.0).epsilon(1e-12));
    for (std::size_t i = 0; i < p.ids.size(); ++i)
      CHECK(out.count(p.ids[i]) == 1);
    if (c % 5 == 0) { // a draft that is the model: every proposal kept
      sampler_params sp;
      sp.temperature = 0.8f;
      sp.top_k = 40;
      sp.top_p = 1.0f;
      sp.seed = static_cast<std::uint64_t>(c);
      sampler s(sp);
      for (int i = 0; i < 100; ++i)
        CHECK(keep_proposal(p, q, s.draw(q), s.uniform()));
    }
  }
  // The functions as the job uses them, drawn: frequencies within 5 sigma
  // of p over 100000 rounds (a fixed seed: the same counts every run).
  const std::vector<float> lp = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -1.0f};
  const std::vector<float> lq = {-1.0f, 0.0f, 2.5f, 0.5f, 1.0f, 2.0f};
  const auto p = dist(lp, 1.0f, 0, 1.0f);
  const auto q = dist(lq, 1.0f, 4, 1.0f); // misses two of p's tokens
  sampler_params sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.seed = 1234;
  sampler s(sp);
  std::map<std::int32_t, int> counts;
  const int rounds = 100000;
  int kept = 0;
  for (int i = 0; i < rounds; ++i) {
    const auto x = s.draw(q);
    if (keep_proposal(p, q, x, s.uniform())) {
      ++counts[x];
      ++kept;
    } else {
      ++counts[s.draw(residual(p, q))];
    }
  }
  for (std::size_t i = 0; i < p.ids.size(); ++i) {
    const double pi = p.probs[i];
    const double f = counts[p.ids[i]] / static_cast<double>(rounds);
    INFO("token " << p.ids[i] << ": p " << pi << ", drawn " << f);
    CHECK(std::abs(f - pi) <= 5.0 * std::sqrt(pi * (1.0 - pi) / rounds));
  }
  // Kept as often as sum_x min(p(x), q(x)).
  double overlap = 0.0;
  for (std::size_t i = 0; i < q.ids.size(); ++i)
    overlap += std::min(q.probs[i], p.of(q.ids[i]));
  CHECK(std::abs(kept / static_cast<double>(rounds) - overlap)
        <= 5.0 * std::sqrt(overlap * (1.0 - overlap) / rounds));
  // A proposal the draft could not draw is never kept; a residual that
  // leaves nothing is p itself.
  CHECK_FALSE(keep_proposal(p, q, 999, 0.0));
  const auto r = residual(p, p);
  CHECK(r.ids == p.ids);
  CHECK(r.probs == p.probs);
}

TEST_CASE("a token's logprobs are the row's log-softmax, from the whole row "
          "or from its candidates and log-sum-exp",
          "[sampler]") {
  // Values far apart in scale: the log-sum-exp must not overflow.
  std::vector<float> row = {3.0f, 1000.0f, -2.0f, 999.0f, 1000.0f, 0.5f,
                            7.25f, 998.5f, -50.0f};
  double sum = 0;
  for (float v : row)
    sum += std::exp(static_cast<double>(v) - 1000.0);
  const double lse = 1000.0 + std::log(sum);
  // (Exponentials in float, summed in double: within a float's rounding.)
  CHECK(log_sum_exp(row.data(), row.size())
        == Approx(lse).epsilon(0).margin(1e-6));
  // A row of a vocabulary's size on every instruction set (its vector
  // lanes, then the tail one by one): within a float's rounding.
  std::vector<float> big(32003);
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<float>((i * 7919) % 2000) / 97.0f - 12.0f;
  double big_sum = 0;
  const float big_max = *std::max_element(big.begin(), big.end());
  for (float v : big)
    big_sum += std::exp(static_cast<double>(v) - big_max);
  const double big_lse = big_max + std::log(big_sum);
  const auto widest = exo::backend::host::widest_isa();
  for (auto limit : {exo::backend::host::isa::avx512,
                     exo::backend::host::isa::avx2,
                     exo::backend::host::isa::scalar}) {
    exo::backend::host::limit_isa(limit);
    CHECK(log_sum_exp(big.data(), big.size())
          == Approx(big_lse).epsilon(0).margin(1e-6));
  }
  exo::backend::host::limit_isa(widest);
  const std::vector<float> small = {0.0f, 0.0f};
  CHECK(log_sum_exp(small.data(), 2) == Approx(std::log(2.0)));

  const auto a = logprobs_of(row.data(), row.size(), 3, 3);
  CHECK(a.logprob == Approx(999.0 - lse));
  // Best first, the lower id first among equals (1 and 4 tie).
  CHECK(a.top_ids == std::vector<std::int32_t>{1, 4, 3});
  REQUIRE(a.top_logprobs.size() == 3);
  CHECK(a.top_logprobs[0] == Approx(1000.0 - lse));
  CHECK(a.top_logprobs[2] == Approx(999.0 - lse));
  // Its rank: the tokens at least as likely, itself included (vLLM's):
  // two of 1000 and itself; tied best tokens share rank 2; the worst's is
  // the row's size.
  CHECK(a.rank == 3);
  CHECK(logprobs_of(row.data(), row.size(), 1, 0).rank == 2);
  CHECK(logprobs_of(row.data(), row.size(), 8, 0).rank == 9);
  // The probabilities of the whole row add up to one.
  const auto all = logprobs_of(row.data(), row.size(), 0, row.size());
  double p = 0;
  for (float l : all.top_logprobs)
    p += std::exp(static_cast<double>(l));
  CHECK(p == Approx(1.0).epsilon(1e-6));
  CHECK(logprobs_of(row.data(), row.size(), 0, 0).top_ids.empty());

  // From 4 candidates and the row's log-sum-exp: the same numbers.
  std::vector<std::int32_t> ids(4);
  std::vector<float> values(4);
  sampler::top_candidates(row.data(), row.size(), 4, ids.data(),
                          values.data());
  // (The stage's log-sum-exp, as the whole row's path computes it.)
  const double stage_lse = log_sum_exp(row.data(), row.size());
  const auto b = logprobs_of(ids.data(), values.data(), 4, stage_lse, 3, 3);
  CHECK(b.logprob == a.logprob);
  CHECK(b.top_ids == a.top_ids);
  CHECK(b.top_logprobs == a.top_logprobs);
  CHECK(b.rank == a.rank);
  // An id outside the candidates gets at most the worst one's, and no
  // rank (it is not known).
  const auto c = logprobs_of(ids.data(), values.data(), 4, stage_lse, 8, 1);
  CHECK(c.logprob == Approx(values[3] - stage_lse));
  CHECK(c.top_ids == std::vector<std::int32_t>{1});
  CHECK(c.rank == 0);
}

TEST_CASE("a logit bias and OpenAI's penalties adjust a row before it is "
          "sampled", "[sampler]") {
  sampler_params p;
  CHECK_FALSE(adjusts_logits(p));
  CHECK(logits_needed(p, 100) == 1); // greedy: the best candidate
  p.temperature = 0.7f;
  CHECK(logits_needed(p, 100) == 40); // top_k
  std::vector<float> row = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  const auto raw = row;
  // Nothing set: nothing changes.
  const std::vector<std::int32_t> gen = {4, 2, 4, 4, 1, 999, -3};
  adjust_logits(p, nullptr, 0, gen.data(), gen.size(), row.data(),
                row.size());
  CHECK(row == raw);

  // Frequency: once per time generated; presence: once if generated at
  // all (4 three times, 2 and 1 once; 999 and -3 are outside the row).
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  CHECK(adjusts_logits(p));
  CHECK(logits_needed(p, 100) == 0); // whole rows
  adjust_logits(p, nullptr, 0, gen.data(), gen.size(), row.data(),
                row.size());
  CHECK(row == std::vector<float>{1.0f, 2.0f - 0.75f, 3.0f - 0.75f, 4.0f,
                                  5.0f - 1.75f, 6.0f});
  // Negative penalties favour repeats.
  row = raw;
  p.frequency_penalty = -1.0f;
  p.presence_penalty = 0.0f;
  adjust_logits(p, nullptr, 0, gen.data(), gen.size(), row.data(),
                row.size());
  CHECK(row[4] == 8.0f);
  CHECK(row[1] == 3.0f);

  // The bias is added first, to the ids named, whatever was generated.
  row = raw;
  p.frequency_penalty = 0.0f;
  p.bias_ids = {0, 3, 5, 7};
  p.bias_values = {10.0f, -100.0f, -0.5f, 50.0f}; // (7: outside)
  adjust_logits(p, nullptr, 0, nullptr, 0, row.data(), row.size());
  CHECK(row == std::vector<float>{11.0f, 2.0f, 3.0f, -96.0f, 5.0f, 5.5f});
  // Greedy over the adjusted row: the bias made 0 the best.
  CHECK(sampler::argmax(row.data(), row.size()) == 0);
  p.temperature = 0.0f;
  sampler greedy(p);
  CHECK(greedy.sample(row.data(), row.size()) == 0);
}

TEST_CASE("a repetition penalty divides the positive logits of the prompt's "
          "and generated tokens and multiplies the negative ones",
          "[sampler]") {
  sampler_params p;
  p.repetition_penalty = 2.0f;
  CHECK(adjusts_logits(p));
  std::vector<float> row = {4.0f, -1.0f, 3.0f, 0.0f, -0.5f, 1.0f};
  const std::vector<std::int32_t> prompt = {0, 1, 1, 1, 77};
  const std::vector<std::int32_t> gen = {4, 0, 0};
  // Each token once, however often it came: 0 (prompt and generated), 1,
  // 4; then the frequency penalty counts only the generated ones.
  p.frequency_penalty = 0.5f;
  adjust_logits(p, prompt.data(), prompt.size(), gen.data(), gen.size(),
                row.data(), row.size());
  CHECK(row == std::vector<float>{4.0f / 2 - 1.0f, -2.0f, 3.0f, 0.0f,
                                  -1.0f - 0.5f, 1.0f});
  // Below 1 it favours them.
  p.repetition_penalty = 0.5f;
  p.frequency_penalty = 0.0f;
  row = {4.0f, -1.0f, 3.0f};
  adjust_logits(p, prompt.data(), prompt.size(), nullptr, 0, row.data(),
                row.size());
  CHECK(row == std::vector<float>{8.0f, -0.5f, 3.0f});
}

TEST_CASE("min-p keeps the candidates at least min_p times as likely as the "
          "best, after top-k and top-p", "[sampler]") {
  // Logits 0, -1, -2, -3 (probabilities relative to the best: 1, e^-1,
  // e^-2, e^-3): min_p 0.2 keeps the first two (e^-1 = 0.37, e^-2 =
  // 0.135).
  const std::vector<std::int32_t> ids = {5, 2, 9, 1};
  const std::vector<float> values = {0.0f, -1.0f, -2.0f, -3.0f};
  sampler_params p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.2f;
  auto d = sampler(p).distribution(ids.data(), values.data(), 4);
  CHECK(d.ids == std::vector<std::int32_t>{5, 2});
  CHECK(d.probs[0] + d.probs[1] == Approx(1.0));
  CHECK(d.probs[0] / d.probs[1] == Approx(std::exp(1.0)));
  // At another temperature the same tokens (llama.cpp's logit bar, before
  // the temperature).
  p.temperature = 3.0f;
  CHECK(sampler(p).distribution(ids.data(), values.data(), 4).ids == d.ids);
  // 0: off; 1: only the best (and its equals).
  p.min_p = 0.0f;
  CHECK(sampler(p).distribution(ids.data(), values.data(), 4).ids.size()
        == 4);
  p.min_p = 1.0f;
  CHECK(sampler(p).distribution(ids.data(), values.data(), 4).ids
        == std::vector<std::int32_t>{5});
  // A whole row: the same as its sorted candidates.
  std::vector<float> row(10, -10.0f);
  for (std::size_t i = 0; i < ids.size(); ++i)
    row[static_cast<std::size_t>(ids[i])] = values[i];
  p.min_p = 0.2f;
  p.temperature = 1.0f;
  CHECK(sampler(p).distribution(row.data(), row.size()).ids == d.ids);
  // Sampling draws only from those.
  sampler s(p);
  for (int i = 0; i < 200; ++i) {
    auto t = s.sample(row.data(), row.size());
    CHECK((t == 5 || t == 2));
  }
}
