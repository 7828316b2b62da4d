#include "core/placement/bottleneck_search.hpp"

#include <algorithm>
#include <utility>

namespace exo::placement {

std::vector<std::int64_t> bottleneck_values(const cost_model& m,
                                            std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> at;
  const int L = static_cast<int>(m.layers());
  for (std::size_t k = 0; k < m.kinds(); ++k) {
    const int d = m.kind_representative(static_cast<int>(k));
    for (int f = 0; f < L; ++f)
      for (int e = f + 1; e <= m.max_end(d, f); ++e) {
        const auto v = m.stage_time(d, f, e);
        if (v > hi)
          break; // longer windows take longer
        if (v >= lo)
          at.push_back(v);
      }
  }
  const int N = static_cast<int>(m.nodes());
  for (int x = 0; x < N; ++x)
    for (int y = 0; y < N; ++y)
      for (int cut = 1; cut < L; ++cut) {
        const auto v = m.transfer_nodes(x, y, cut);
        if (v >= lo && v <= hi)
          at.push_back(v);
      }
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  return at;
}

std::optional<std::int64_t> least_over_bottlenecks(
  const std::vector<std::int64_t>& at, std::int64_t share,
  const std::function<std::optional<std::int64_t>(std::size_t)>& lat_at,
  const std::int64_t& incumbent, std::int64_t none,
  const std::function<bool(int calls)>& more) {
  const std::size_t n = at.size();
  if (n == 0)
    return none;
  std::vector<std::int64_t> lat(n, -1);
  int calls = 0;
  // lat(i), asked once; nullopt: cancelled.
  auto get = [&](std::size_t i) -> std::optional<std::int64_t> {
    if (lat[i] < 0) {
      auto v = lat_at(i);
      if (!v)
        return std::nullopt;
      ++calls;
      lat[i] = std::min(*v, none);
    }
    return lat[i];
  };
  auto cost = [&](std::size_t i) {
    return lat[i] >= none ? none : lat[i] + share * at[i];
  };
  if (!get(0) || !get(n - 1))
    return std::nullopt;
  std::int64_t least = std::min(cost(0), cost(n - 1));
  std::vector<std::pair<std::size_t, std::size_t>> runs{{0, n - 1}};
  while (!runs.empty()) {
    auto [i, j] = runs.back();
    runs.pop_back();
    if (j <= i + 1)
      continue;
    const std::int64_t inside =
      lat[j] >= none ? none : lat[j] + share * at[i + 1];
    if (inside >= std::min(least, incumbent))
      continue; // nothing in (at[i], at[j]) goes below
    if (!more(calls)) {
      least = std::min(least, inside);
      continue;
    }
    const auto mid = i + (j - i) / 2;
    if (!get(mid))
      return std::nullopt;
    least = std::min(least, cost(mid));
    runs.push_back({i, mid});
    runs.push_back({mid, j});
  }
  return least;
}

} // namespace exo::placement
