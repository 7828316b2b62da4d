#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <vector>

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
