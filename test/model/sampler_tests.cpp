#include <catch2/catch.hpp>

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
