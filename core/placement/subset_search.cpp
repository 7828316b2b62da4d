#include "core/placement/subset_search.hpp"

#include "core/placement/exact_solver.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <vector>

namespace exo::placement {

namespace {

using clock = std::chrono::steady_clock;

/// Nodes from `first`, each next one the cheapest to reach from any node
/// already taken (Prim's order).
std::vector<int> node_order(const cost_model& m, int first) {
  const int nodes = static_cast<int>(m.nodes());
  std::vector<int> order{first};
  std::vector<char> taken(nodes, 0);
  taken[first] = 1;
  while (static_cast<int>(order.size()) < nodes) {
    int best = -1;
    auto best_w = std::numeric_limits<std::int64_t>::max();
    for (int b = 0; b < nodes; ++b) {
      if (taken[b])
        continue;
      for (int a : order) {
        auto w = m.cheapest_transfer(a, b);
        if (w < best_w) {
          best_w = w;
          best = b;
        }
      }
    }
    taken[best] = 1;
    order.push_back(best);
  }
  return order;
}

/// The best plan that uses devices in the order of `order` (some may be
/// left out): a program over (last device used, layers placed), exact for
/// that order — latency sums, throughput takes the largest stage or
/// transfer, a blend is planned for latency. O(n^2 L^2). nullopt when the
/// order admits no plan.
std::optional<assignment> in_order(const cost_model& m,
                                   const std::vector<int>& order) {
  const int n = static_cast<int>(order.size());
  const int L = static_cast<int>(m.layers());
  const int nodes = static_cast<int>(m.nodes());
  const bool sum = m.kind() != objective_kind::throughput;
  constexpr auto none = std::numeric_limits<std::int64_t>::max();
  auto comb = [sum](std::int64_t a, std::int64_t b) {
    return sum ? a + b : std::max(a, b);
  };
  // g[j][e]: best cost with the last stage on order[j], ending at e.
  std::vector<std::int64_t> g(static_cast<std::size_t>(n) * (L + 1), none);
  std::vector<int> from(g.size(), -1), start(g.size(), 0);
  auto at = [L](int i, int e) {
    return static_cast<std::size_t>(i) * (L + 1) + e;
  };
  // The best g over the devices of each node seen so far, per end: the
  // transfer to the next device depends only on the node (O(n nodes L^2)
  // instead of O(n^2 L^2)).
  std::vector<std::int64_t> by_node(static_cast<std::size_t>(nodes) * (L + 1),
                                    none);
  std::vector<int> by_node_arg(by_node.size(), -1);
  auto nat = [L](int a, int e) {
    return static_cast<std::size_t>(a) * (L + 1) + e;
  };
  for (int j = 0; j < n; ++j) {
    const int dj = order[j];
    auto relax = [&](int e, std::int64_t v, int i, int b) {
      if (v < g[at(j, e)]) {
        g[at(j, e)] = v;
        from[at(j, e)] = i;
        start[at(j, e)] = b;
      }
    };
    for (int e = 1; e <= m.max_end(dj, 0); ++e) // the first stage
      relax(e, m.stage_time(dj, 0, e), -1, 0);
    for (int l = 1; l < L; ++l) {
      if (m.max_end(dj, l) <= l)
        continue;
      std::int64_t base = none;
      int arg = -1;
      for (int a = 0; a < nodes; ++a) {
        auto before = by_node[nat(a, l)];
        if (before == none)
          continue;
        auto v = comb(before, m.transfer_nodes(a, m.node(dj), l));
        if (v < base) {
          base = v;
          arg = by_node_arg[nat(a, l)];
        }
      }
      if (base == none)
        continue;
      for (int e = l + 1; e <= m.max_end(dj, l); ++e)
        relax(e, comb(base, m.stage_time(dj, l, e)), arg, l);
    }
    for (int e = 1; e <= L; ++e)
      if (g[at(j, e)] < by_node[nat(m.node(dj), e)]) {
        by_node[nat(m.node(dj), e)] = g[at(j, e)];
        by_node_arg[nat(m.node(dj), e)] = j;
      }
  }
  int last = -1;
  for (int j = 0; j < n; ++j)
    if (g[at(j, L)] != none && (last < 0 || g[at(j, L)] < g[at(last, L)]))
      last = j;
  if (last < 0)
    return std::nullopt;
  assignment a;
  for (int j = last, e = L; j >= 0;) {
    int b = start[at(j, e)];
    a.push_back({order[j], b, e});
    int i = from[at(j, e)];
    e = b;
    j = i;
  }
  std::reverse(a.begin(), a.end());
  if (a.size() > m.max_stages())
    return std::nullopt;
  for (int d = 0; d < static_cast<int>(m.devices()); ++d)
    if (m.must_use(d)
        && std::none_of(a.begin(), a.end(),
                        [d](const stage_assignment& s) { return s.device == d; }))
      return std::nullopt;
  return a;
}

/// The devices of the nodes in `nodes` order, each node's fastest first.
std::vector<int> devices_by_node(const cost_model& m,
                                 const std::vector<int>& nodes) {
  const int n = static_cast<int>(m.devices());
  const int L = static_cast<int>(m.layers());
  std::vector<int> out;
  for (int node : nodes) {
    std::vector<int> ds;
    for (int d = 0; d < n; ++d)
      if (m.node(d) == node)
        ds.push_back(d);
    std::sort(ds.begin(), ds.end(), [&](int x, int y) {
      return m.cum_time(x, L) < m.cum_time(y, L);
    });
    out.insert(out.end(), ds.begin(), ds.end());
  }
  return out;
}

/// Each node's memory: what its devices may hold from layer 0 on.
std::vector<std::int64_t> node_capacity(const cost_model& m) {
  std::vector<std::int64_t> cap(m.nodes(), 0);
  for (int d = 0; d < static_cast<int>(m.devices()); ++d)
    cap[m.node(d)] += m.max_end(d, 0);
  return cap;
}

/// The exact program on the devices of `subset` (model indices): its
/// optimal plan among them, in `m`'s indices.
std::optional<assignment> solve_subset(
  const cost_model& m, const std::vector<int>& subset,
  std::size_t max_entries, const std::atomic<bool>* cancel,
  std::chrono::steady_clock::time_point deadline) {
  problem p = m.source();
  std::set<std::size_t> keep;
  for (int d : subset)
    keep.insert(m.problem_device(d));
  for (std::size_t i = 0; i < p.devices.size(); ++i)
    if (!keep.count(i))
      p.devices[i].excluded = true;
  cost_model sub(p);
  auto r = solve_exact(sub, cancel, max_entries, deadline);
  if (r.status != exact_status::solved)
    return std::nullopt;
  std::map<std::size_t, int> index; // problem device -> m's index
  for (int d = 0; d < static_cast<int>(m.devices()); ++d)
    index[m.problem_device(d)] = d;
  assignment a = r.best;
  for (auto& s : a)
    s.device = index.at(sub.problem_device(s.device));
  return a;
}

/// The table entries of the exact program on `subset`, as
/// exact_state_count() counts them, without building the sub-model: each
/// device its own class (an upper bound).
std::size_t table_entries(std::size_t devices, std::size_t layers) {
  std::size_t states = std::size_t{1} << std::min<std::size_t>(devices, 40);
  return states * (layers + 1) * devices;
}

} // namespace

std::optional<heuristic_plan> search_subsets(
  const cost_model& m, std::size_t max_entries,
  std::chrono::milliseconds budget, const std::atomic<bool>* cancel,
  std::int64_t enough) {
  const auto start = clock::now();
  const int n = static_cast<int>(m.devices());
  const int L = static_cast<int>(m.layers());
  if (n == 0 || L == 0)
    return std::nullopt;
  std::optional<heuristic_plan> best;
  auto offer = [&](const assignment& a, const char* method) {
    auto v = m.evaluate(a).objective;
    if (!best || v < best->objective)
      best = heuristic_plan{a, v, method};
  };
  // Devices in an order (nodes joined by their cheapest links, from each
  // node; each node's devices fastest first): the best plan of each order.
  std::vector<int> starts(m.nodes());
  std::iota(starts.begin(), starts.end(), 0);
  auto cap = node_capacity(m);
  std::sort(starts.begin(), starts.end(),
            [&](int a, int b) { return cap[a] > cap[b]; });
  auto met = [&] { return best && best->objective <= enough; };
  for (int first : starts) {
    if (met())
      return best;
    if (clock::now() - start > budget / 2 || (cancel && cancel->load()))
      break;
    if (auto a = in_order(m, devices_by_node(m, node_order(m, first))))
      offer(*a, "ordered");
  }
  // Subsets as large as the exact table allows.
  std::size_t k = std::min<std::size_t>(n, 24);
  while (k > 1 && table_entries(k, L) > max_entries)
    --k;
  std::vector<int> must;
  for (int d = 0; d < n; ++d)
    if (m.must_use(d))
      must.push_back(d);
  if (k < 2 || must.size() > k)
    return best;
  auto complete = [&](std::vector<int> ds) {
    // The devices that must be in every plan first, then `ds` in order,
    // without repeats, up to k.
    std::vector<int> out = must;
    for (int d : ds)
      if (out.size() < k && std::find(out.begin(), out.end(), d) == out.end())
        out.push_back(d);
    std::sort(out.begin(), out.end());
    return out;
  };
  std::vector<std::vector<int>> subsets;
  // The fastest devices.
  std::vector<int> fastest(n);
  std::iota(fastest.begin(), fastest.end(), 0);
  std::sort(fastest.begin(), fastest.end(), [&](int x, int y) {
    return m.cum_time(x, L) < m.cum_time(y, L);
  });
  subsets.push_back(complete(fastest));
  // Whole nodes joined by cheap links, from each of the roomiest nodes.
  for (std::size_t i = 0; i < starts.size() && i < 4; ++i)
    subsets.push_back(complete(devices_by_node(m, node_order(m, starts[i]))));
  auto tried = [&](std::size_t i) { // the same as an earlier one
    return std::find(subsets.begin(), subsets.begin() + i, subsets[i])
           != subsets.begin() + i;
  };
  auto out_of_time = [&] {
    return met() || clock::now() - start > budget
           || (cancel && cancel->load());
  };
  for (std::size_t i = 0; i < subsets.size(); ++i) {
    if (out_of_time())
      break;
    if (tried(i))
      continue;
    if (auto a = solve_subset(m, subsets[i], max_entries, cancel,
                              start + budget))
      offer(*a, "exact-subset");
  }
  // Around the best plan: its devices, the rest filled with the fastest.
  if (best && !out_of_time()) {
    std::vector<int> ds;
    for (auto& s : best->plan)
      ds.push_back(s.device);
    ds.insert(ds.end(), fastest.begin(), fastest.end());
    auto s = complete(ds);
    if (std::find(subsets.begin(), subsets.end(), s) == subsets.end())
      if (auto a = solve_subset(m, s, max_entries, cancel, start + budget))
        offer(*a, "exact-subset");
  }
  return best;
}

} // namespace exo::placement
