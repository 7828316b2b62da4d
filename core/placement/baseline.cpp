#include "core/placement/baseline.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace exo::placement {

assignment baseline_assignment(const cost_model& m) {
  const auto& p = m.source();
  const int n = static_cast<int>(m.devices());
  const int L = static_cast<int>(m.layers());
  assignment out;
  if (n == 0 || L == 0)
    return out;
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto mem = [&](int d) {
    return static_cast<double>(p.devices[m.problem_device(d)].memory_bytes);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return mem(a) > mem(b); });
  double total = 0;
  for (int d : order)
    total += mem(d);
  std::vector<int> share(n);
  std::vector<std::pair<double, int>> rest;
  int given = 0;
  for (int i = 0; i < n; ++i) {
    double exact = L * mem(order[i]) / total;
    share[i] = static_cast<int>(std::floor(exact));
    given += share[i];
    rest.push_back({exact - share[i], i});
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) {
                     return a.first > b.first;
                   });
  for (int j = 0; given < L; ++j, ++given)
    ++share[rest[static_cast<std::size_t>(j % n)].second];
  int at = 0;
  for (int i = 0; i < n; ++i) {
    if (share[i] == 0)
      continue;
    out.push_back({order[i], at, at + share[i]});
    at += share[i];
  }
  return out;
}

} // namespace exo::placement
