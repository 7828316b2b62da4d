#include "core/placement/lower_bound.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

namespace exo::placement {

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

/// The relaxation every bound below works on: layer l costs t[d][l] ticks
/// on device d and needs mem[l] of its cap[d] bytes (and flops[l] of its
/// fcap[d] FLOPs per token, when capped).
struct relaxation {
  int n = 0;
  int L = 0;
  std::vector<std::vector<double>> t; // [d][l], ticks
  std::vector<double> mem;            // [l], bytes
  std::vector<double> flops;          // [l]
  std::vector<double> cap;            // [d], bytes for layers
  std::vector<double> fcap;           // [d], 0: none
  double total_mem = 0;
};

relaxation make_relaxation(const cost_model& m) {
  const auto& p = m.source();
  relaxation r;
  r.n = static_cast<int>(m.devices());
  r.L = static_cast<int>(m.layers());
  r.t.assign(r.n, std::vector<double>(r.L, 0));
  for (int d = 0; d < r.n; ++d)
    for (int l = 0; l < r.L; ++l)
      // Per-layer ticks: a stage's ticks are exactly the sum of its
      // layers'.
      r.t[d][l] = static_cast<double>(m.stage_time(d, l, l + 1));
  for (int l = 0; l < r.L; ++l) {
    r.mem.push_back(static_cast<double>(p.layer_memory(l)));
    r.flops.push_back(p.layers[l].flops_per_token);
  }
  r.total_mem = std::accumulate(r.mem.begin(), r.mem.end(), 0.0);
  // A device that runs a stage gives every stage's working memory first;
  // the first and last stages' extras are dropped (a relaxation).
  const double every = static_cast<double>(p.stage_memory_extra.every_stage);
  for (int d = 0; d < r.n; ++d) {
    auto pd = m.problem_device(d);
    r.cap.push_back(
      std::max(0.0, static_cast<double>(p.usable_memory(pd)) - every));
    r.fcap.push_back(p.devices[pd].max_flops_per_token);
  }
  return r;
}

/// Fewest of `caps` (largest first) that together reach `need`; -1 when
/// all of them do not.
int fewest_to_hold(std::vector<double> caps, double need) {
  std::sort(caps.rbegin(), caps.rend());
  double acc = 0;
  for (std::size_t i = 0; i < caps.size(); ++i) {
    if (acc >= need)
      return static_cast<int>(i);
    acc += caps[i];
  }
  return acc >= need ? static_cast<int>(caps.size()) : -1;
}

/// max over multipliers >= 0 of
///   sum_l min_d (t[d][l] + lam_d mem_l + mu_d flops_l)
///     - sum_d (lam_d cap_d + mu_d fcap_d),
/// by projected subgradient ascent: every value is a lower bound on the
/// least compute time of any assignment of layers to devices within their
/// capacities, the best one is kept.
double lagrangian_compute_bound(const relaxation& r) {
  const int n = r.n;
  const int L = r.L;
  // Scale: capacities as fractions of the model, multipliers in ticks.
  std::vector<double> m(L), c(n), f(L, 0), fc(n, 0);
  for (int l = 0; l < L; ++l)
    m[l] = r.total_mem > 0 ? r.mem[l] / r.total_mem : 0;
  for (int d = 0; d < n; ++d)
    c[d] = r.total_mem > 0 ? r.cap[d] / r.total_mem : inf;
  double total_flops = std::accumulate(r.flops.begin(), r.flops.end(), 0.0);
  bool capped = false;
  for (int d = 0; d < n; ++d)
    if (r.fcap[d] > 0 && total_flops > 0) {
      fc[d] = r.fcap[d] / total_flops;
      capped = true;
    }
  if (capped)
    for (int l = 0; l < L; ++l)
      f[l] = r.flops[l] / total_flops;
  // The typical size of a multiplier: the model's time on an average
  // device.
  double scale = 0;
  for (int l = 0; l < L; ++l) {
    double s = 0;
    for (int d = 0; d < n; ++d)
      s += r.t[d][l];
    scale += s / n;
  }
  if (scale <= 0)
    return 0;
  std::vector<double> lam(n, 0), mu(n, 0), gl(n), gm(n);
  double best = -inf;
  const int iterations = 400;
  for (int k = 0; k < iterations; ++k) {
    std::fill(gl.begin(), gl.end(), 0);
    std::fill(gm.begin(), gm.end(), 0);
    double value = 0;
    for (int l = 0; l < L; ++l) {
      double low = inf;
      int arg = 0;
      for (int d = 0; d < n; ++d) {
        double v = r.t[d][l] + lam[d] * m[l] + (fc[d] > 0 ? mu[d] * f[l] : 0);
        if (v < low) {
          low = v;
          arg = d;
        }
      }
      value += low;
      gl[arg] += m[l];
      gm[arg] += f[l];
    }
    for (int d = 0; d < n; ++d) {
      if (std::isfinite(c[d]))
        value -= lam[d] * c[d];
      if (fc[d] > 0)
        value -= mu[d] * fc[d];
    }
    best = std::max(best, value);
    // Subgradient: load beyond capacity raises the device's price.
    double norm = 0;
    for (int d = 0; d < n; ++d) {
      gl[d] = std::isfinite(c[d]) ? gl[d] - c[d] : 0;
      gm[d] = fc[d] > 0 ? gm[d] - fc[d] : 0;
      norm += gl[d] * gl[d] + gm[d] * gm[d];
    }
    if (norm < 1e-18)
      break; // the unconstrained choice fits: this value is the optimum
    const double step = scale * 0.5 / std::sqrt(static_cast<double>(k) + 1)
                        / std::sqrt(norm);
    for (int d = 0; d < n; ++d) {
      lam[d] = std::max(0.0, lam[d] + step * gl[d]);
      mu[d] = std::max(0.0, mu[d] + step * gm[d]);
    }
  }
  return std::max(0.0, best);
}

/// The fractional fill: devices by fewest ticks per byte (rho_d, over the
/// layers), each up to its capacity, until the model's bytes are placed;
/// every layer costs at least rho_d per byte on device d. The same kind of
/// bound as the Lagrangian one, exact when the layers are alike, and a
/// floor under it while its ascent has not converged.
double fill_bound(const relaxation& r) {
  std::vector<std::pair<double, int>> by_rho;
  for (int d = 0; d < r.n; ++d) {
    double rho = inf;
    for (int l = 0; l < r.L; ++l)
      if (r.mem[l] > 0)
        rho = std::min(rho, r.t[d][l] / r.mem[l]);
    by_rho.emplace_back(std::isfinite(rho) ? rho : 0, d);
  }
  std::sort(by_rho.begin(), by_rho.end());
  double left = r.total_mem;
  double value = 0;
  for (auto& [rho, d] : by_rho) {
    if (left <= 0)
      break;
    double take = std::min(r.cap[d], left);
    value += take * rho;
    left -= take;
  }
  return value;
}

/// The least T such that devices each running at most T ticks of layers
/// can hold the model: a device holds at most T / rho_d bytes, rho_d its
/// fewest ticks per byte over the layers, and at most its capacity.
double bottleneck_bound(const relaxation& r) {
  std::vector<double> rho(r.n, inf);
  for (int d = 0; d < r.n; ++d)
    for (int l = 0; l < r.L; ++l)
      if (r.mem[l] > 0)
        rho[d] = std::min(rho[d], r.t[d][l] / r.mem[l]);
  auto holds = [&](double T) {
    double acc = 0;
    for (int d = 0; d < r.n; ++d)
      acc += rho[d] > 0 ? std::min(r.cap[d], T / rho[d]) : r.cap[d];
    return acc >= r.total_mem;
  };
  double hi = 0;
  for (int d = 0; d < r.n; ++d)
    hi = std::max(hi, std::accumulate(r.t[d].begin(), r.t[d].end(), 0.0));
  if (hi <= 0 || !holds(hi))
    return 0;
  double lo = 0;
  for (int i = 0; i < 60; ++i) {
    double mid = (lo + hi) / 2;
    (holds(mid) ? hi : lo) = mid;
  }
  return lo;
}

/// The weight of the `edges` lightest edges Kruskal's algorithm accepts
/// over the nodes, an edge weighing its cheapest transfer at any cut. The
/// node changes of a pipeline that visits k nodes use at least k - 1
/// distinct node pairs forming a connected graph, so a forest of k - 1
/// edges; and of all forests with that many edges, the greedy one weighs
/// least (a matroid's greedy prefix).
std::int64_t lightest_forest(const cost_model& m, int edges) {
  const int nodes = static_cast<int>(m.nodes());
  struct edge {
    std::int64_t w;
    int a, b;
  };
  std::vector<edge> es;
  for (int a = 0; a < nodes; ++a)
    for (int b = a + 1; b < nodes; ++b)
      es.push_back({std::min(m.cheapest_transfer(a, b),
                             m.cheapest_transfer(b, a)),
                    a, b});
  std::sort(es.begin(), es.end(),
            [](const edge& x, const edge& y) { return x.w < y.w; });
  std::vector<int> root(nodes);
  std::iota(root.begin(), root.end(), 0);
  std::function<int(int)> find = [&](int x) {
    return root[x] == x ? x : root[x] = find(root[x]);
  };
  std::int64_t sum = 0;
  int taken = 0;
  for (auto& e : es) {
    if (taken == edges)
      break;
    auto ra = find(e.a);
    auto rb = find(e.b);
    if (ra == rb)
      continue;
    root[ra] = rb;
    sum += e.w;
    ++taken;
  }
  return sum;
}

/// A real bound as whole ticks, rounded down with a margin for the
/// floating-point error of the sums above.
std::int64_t ticks_below(double x) {
  if (!(x > 0))
    return 0;
  return static_cast<std::int64_t>(std::floor(x * (1 - 1e-9)));
}

} // namespace

std::optional<capacity_bound> capacity_lower_bound(const cost_model& m) {
  if (m.devices() == 0 || m.layers() == 0)
    return std::nullopt;
  const auto r = make_relaxation(m);
  capacity_bound out;
  out.min_devices = fewest_to_hold(r.cap, r.total_mem);
  if (out.min_devices < 0)
    return std::nullopt;
  std::vector<double> node_cap(m.nodes(), 0);
  for (int d = 0; d < r.n; ++d)
    node_cap[m.node(d)] += r.cap[d];
  out.min_nodes = fewest_to_hold(node_cap, r.total_mem);
  out.compute = ticks_below(
    std::max(lagrangian_compute_bound(r), fill_bound(r)));
  // Cuts: at least min_devices - 1, of which min_nodes - 1 between nodes.
  std::int64_t min_inter = std::numeric_limits<std::int64_t>::max();
  std::int64_t min_any = std::numeric_limits<std::int64_t>::max();
  const int nodes = static_cast<int>(m.nodes());
  for (int a = 0; a < nodes; ++a)
    for (int b = 0; b < nodes; ++b) {
      auto x = m.cheapest_transfer(a, b);
      min_any = std::min(min_any, x);
      if (a != b)
        min_inter = std::min(min_inter, x);
    }
  // (One layer has no cut; a model of one layer that no device holds has
  // no plan, which the solvers say.)
  const int inter_cuts = r.L > 1 ? std::max(0, out.min_nodes - 1) : 0;
  const int other_cuts =
    r.L > 1 ? std::max(0, out.min_devices - 1 - inter_cuts) : 0;
  if (inter_cuts > 0)
    out.transfers += lightest_forest(m, inter_cuts);
  if (other_cuts > 0)
    out.transfers += other_cuts * min_any;
  // Bottleneck: every layer somewhere, the model within T per device, and
  // a cut that must exist costs at least its cheapest transfer.
  double per_layer = 0;
  for (int l = 0; l < r.L; ++l) {
    double low = inf;
    for (int d = 0; d < r.n; ++d)
      low = std::min(low, r.t[d][l]);
    per_layer = std::max(per_layer, low);
  }
  out.bottleneck = std::max(ticks_below(per_layer),
                            ticks_below(bottleneck_bound(r)));
  if (inter_cuts > 0)
    out.bottleneck = std::max(out.bottleneck, min_inter);
  else if (other_cuts > 0)
    out.bottleneck = std::max(out.bottleneck, min_any);
  const std::int64_t penalty = m.node_penalty() * inter_cuts;
  out.objective = m.combine(out.compute + out.transfers, out.bottleneck,
                            penalty);
  return out;
}

} // namespace exo::placement
