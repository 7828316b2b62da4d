#pragma once

// Random test inputs, the same on every run for a given generator seed.

#include <cstddef>
#include <random>
#include <vector>

namespace exo::test {

/// `n` floats drawn uniformly from [lo, hi).
inline std::vector<float> random_floats(std::mt19937& rng, std::size_t n,
                                        float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d{lo, hi};
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

} // namespace exo::test
