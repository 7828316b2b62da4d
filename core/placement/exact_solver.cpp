#include "core/placement/exact_solver.hpp"

#include "core/placement/bottleneck_search.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

namespace exo::placement {

namespace {

constexpr std::int64_t inf = std::numeric_limits<std::int64_t>::max() / 4;
constexpr int start_marker = 255;

struct dp_out {
  exact_status status = exact_status::infeasible;
  assignment best;
  std::int64_t value = 0;
};

/// One DP run; `sum` selects latency (sum) or bottleneck (max) costs. The
/// node penalty is added to the final value in both cases. `limit`: no
/// stage and no cut above it (a blend's bottleneck; inf: none). The value
/// is time_weight x cost + pen_weight x penalty (a blend's latency part:
/// w and 100; each state's least cost is kept and its nodes fix its
/// penalty, so the weighted choice is exact).
dp_out run_dp(const cost_model& m, bool sum, const std::atomic<bool>* cancel,
              std::size_t max_entries, std::int64_t limit = inf,
              std::int64_t time_weight = 1, std::int64_t pen_weight = 1) {
  dp_out out;
  const int L = static_cast<int>(m.layers());
  const int K = static_cast<int>(m.classes());
  const std::size_t W = static_cast<std::size_t>(L) + 1;
  std::vector<int> size(K), rep(K), node(K);
  std::vector<char> must(K);
  std::vector<std::size_t> stride(K);
  std::size_t ns = 1;
  for (int k = 0; k < K; ++k) {
    size[k] = static_cast<int>(m.class_members(k).size());
    rep[k] = m.class_members(k)[0];
    node[k] = m.node(rep[k]);
    must[k] = m.must_use(rep[k]);
    stride[k] = ns;
    ns *= static_cast<std::size_t>(size[k] + 1);
  }
  const std::size_t entries = ns * W * static_cast<std::size_t>(K);
  if (exact_state_count(m) > max_entries || entries > max_entries) {
    out.status = exact_status::too_large;
    return out;
  }
  const auto max_st = static_cast<int>(m.max_stages());
  std::vector<std::int64_t> f(entries, inf);
  std::vector<std::int32_t> par(entries, -1);
  // Bytes moved, the tie-break between equal costs (exact for a sum; for
  // a bottleneck a cheaper prefix may hide a plan that moves less). Only
  // with resident layers.
  const bool track = m.has_resident();
  std::vector<std::int64_t> mv(track ? entries : 0, 0);
  auto moved = [&](std::size_t i) { return track ? mv[i] : 0; };
  auto at = [&](std::size_t s, int l, int k) {
    return (s * W + static_cast<std::size_t>(l)) * K + k;
  };
  auto combine = [sum](std::int64_t a, std::int64_t b) {
    return sum ? a + b : std::max(a, b);
  };
  // First stages.
  for (int k = 0; k < K; ++k) {
    int me = m.max_end(rep[k], 0);
    for (int e = 1; e <= me; ++e) {
      if (m.stage_time(rep[k], 0, e) > limit)
        break;
      auto i = at(stride[k], e, k);
      f[i] = m.stage_time(rep[k], 0, e);
      par[i] = start_marker;
      if (track)
        mv[i] = m.moving_cost(rep[k], 0, e);
    }
  }
  std::vector<int> c(K);
  for (std::size_t S = 1; S < ns; ++S) {
    if (cancel && cancel->load(std::memory_order_relaxed)) {
      out.status = exact_status::cancelled;
      return out;
    }
    int used = 0;
    std::size_t r = S;
    for (int k = 0; k < K; ++k) {
      c[k] = static_cast<int>(r % static_cast<std::size_t>(size[k] + 1));
      r /= static_cast<std::size_t>(size[k] + 1);
      used += c[k];
    }
    if (used >= max_st)
      continue;
    for (int l = 1; l < L; ++l) {
      const std::int64_t* row = &f[at(S, l, 0)];
      bool any = false;
      for (int k = 0; k < K && !any; ++k)
        any = row[k] < inf;
      if (!any)
        continue;
      for (int k2 = 0; k2 < K; ++k2) {
        if (c[k2] >= size[k2])
          continue;
        const int me = m.max_end(rep[k2], l);
        if (me <= l)
          continue;
        std::int64_t best = inf, best_mv = 0;
        int arg = -1;
        for (int k = 0; k < K; ++k) {
          if (row[k] >= inf)
            continue;
          const auto cut = m.transfer_nodes(node[k], node[k2], l);
          if (cut > limit)
            continue;
          auto v = combine(row[k], cut);
          auto w = moved(at(S, l, k));
          if (better(v, w, best, best_mv)) {
            best = v;
            best_mv = w;
            arg = k;
          }
        }
        const std::size_t S2 = S + stride[k2];
        const std::int64_t base = m.cum_time(rep[k2], l);
        for (int e = l + 1; e <= me; ++e) {
          if (m.cum_time(rep[k2], e) - base > limit)
            break;
          auto v = combine(best, m.cum_time(rep[k2], e) - base);
          auto w = track ? best_mv + m.moving_cost(rep[k2], l, e) : 0;
          auto i = at(S2, e, k2);
          if (better(v, w, f[i], moved(i))) {
            f[i] = v;
            par[i] = (l << 8) | arg;
            if (track)
              mv[i] = w;
          }
        }
      }
    }
  }
  // Final states: pinned classes complete, stage limit, node penalty.
  std::int64_t best = inf, best_mv = 0;
  std::size_t best_s = 0;
  int best_k = -1;
  std::vector<char> seen(m.nodes());
  for (std::size_t S = 1; S < ns; ++S) {
    int used = 0;
    bool ok = true;
    std::size_t r = S;
    std::fill(seen.begin(), seen.end(), 0);
    int nodes = 0;
    for (int k = 0; k < K; ++k) {
      c[k] = static_cast<int>(r % static_cast<std::size_t>(size[k] + 1));
      r /= static_cast<std::size_t>(size[k] + 1);
      used += c[k];
      if (must[k] && c[k] != size[k])
        ok = false;
      if (c[k] > 0 && !seen[node[k]]) {
        seen[node[k]] = 1;
        ++nodes;
      }
    }
    if (!ok || used > max_st)
      continue;
    const std::int64_t pen = pen_weight * m.node_penalty() * (nodes - 1);
    for (int k = 0; k < K; ++k) {
      if (c[k] == 0)
        continue;
      auto v = f[at(S, L, k)];
      if (v < inf
          && better(time_weight * v + pen, moved(at(S, L, k)), best,
                    best_mv)) {
        best = time_weight * v + pen;
        best_mv = moved(at(S, L, k));
        best_s = S;
        best_k = k;
      }
    }
  }
  if (best_k < 0) {
    out.status = exact_status::infeasible;
    return out;
  }
  // Walk the parents back, then give each stage a concrete device.
  struct piece {
    int k, first, end;
  };
  std::vector<piece> pieces;
  std::size_t S = best_s;
  int l = L;
  int k = best_k;
  for (;;) {
    auto p = par[at(S, l, k)];
    int first = p >> 8;
    int kp = p & 0xff;
    pieces.push_back({k, first, l});
    S -= stride[k];
    if (kp == start_marker)
      break;
    l = first;
    k = kp;
  }
  std::reverse(pieces.begin(), pieces.end());
  std::vector<int> next(K, 0);
  for (const auto& pc : pieces)
    out.best.push_back(
      {m.class_members(pc.k)[static_cast<std::size_t>(next[pc.k]++)], pc.first,
       pc.end});
  out.status = exact_status::solved;
  out.value = best;
  return out;
}

} // namespace

std::optional<std::int64_t> relaxed_lower_bound(const cost_model& m) {
  const int n = static_cast<int>(m.devices());
  const int L = static_cast<int>(m.layers());
  if (n == 0 || L == 0)
    return std::nullopt;
  auto run = [&](bool sum) -> std::int64_t {
    auto comb = [sum](std::int64_t a, std::int64_t b) {
      return sum ? a + b : std::max(a, b);
    };
    std::vector<std::int64_t> f(static_cast<std::size_t>((L + 1) * n), inf);
    auto at = [n](int l, int d) { return static_cast<std::size_t>(l * n + d); };
    for (int d = 0; d < n; ++d)
      for (int e = 1; e <= m.max_end(d, 0); ++e)
        f[at(e, d)] = m.stage_time(d, 0, e);
    for (int l = 1; l < L; ++l)
      for (int d2 = 0; d2 < n; ++d2) {
        std::int64_t best = inf;
        for (int d = 0; d < n; ++d)
          if (f[at(l, d)] < inf)
            best = std::min(best, comb(f[at(l, d)], m.transfer(d, d2, l)));
        if (best >= inf)
          continue;
        for (int e = l + 1; e <= m.max_end(d2, l); ++e)
          f[at(e, d2)] = std::min(f[at(e, d2)],
                                  comb(best, m.stage_time(d2, l, e)));
      }
    std::int64_t r = inf;
    for (int d = 0; d < n; ++d)
      r = std::min(r, f[at(L, d)]);
    return r;
  };
  switch (m.kind()) {
    case objective_kind::latency: {
      auto a = run(true);
      return a < inf ? std::optional<std::int64_t>(a) : std::nullopt;
    }
    case objective_kind::throughput: {
      auto b = run(false);
      return b < inf ? std::optional<std::int64_t>(b) : std::nullopt;
    }
    case objective_kind::blend: {
      auto a = run(true);
      if (a >= inf)
        return std::nullopt;
      auto b = run(false);
      return m.combine(a, b, 0);
    }
  }
  return std::nullopt;
}

std::size_t exact_state_count(const cost_model& m) {
  std::size_t ns = 1;
  const std::size_t cap = std::numeric_limits<std::size_t>::max() / 1024;
  for (std::size_t k = 0; k < m.classes(); ++k) {
    ns *= m.class_members(static_cast<int>(k)).size() + 1;
    if (ns > cap)
      return cap;
  }
  return ns;
}

exact_result solve_exact(const cost_model& m, const std::atomic<bool>* cancel,
                         std::size_t max_entries,
                         std::chrono::steady_clock::time_point deadline) {
  exact_result res;
  res.states = exact_state_count(m);
  if (m.devices() == 0 || m.layers() == 0) {
    res.status = exact_status::infeasible;
    return res;
  }
  if (m.kind() != objective_kind::blend) {
    auto r = run_dp(m, m.kind() == objective_kind::latency, cancel,
                    max_entries);
    res.status = r.status;
    if (r.status == exact_status::solved) {
      res.best = std::move(r.best);
      res.objective = m.evaluate(res.best).objective;
      res.lower_bound = res.objective;
    }
    return res;
  }
  // Blend: the latency optimum (a) and the bottleneck optimum (b), then
  // the latency optimum among the plans whose every stage and cut is at
  // most T, P(T), for the values T a stage or a cut can take up to a's
  // bottleneck. A plan of bottleneck B costs at least lat(B) + (100 - w) x
  // B (lat(T): P(T)'s w x latency + 100 x penalty, which falls as T
  // grows), and P(B) costs no more than it: the least over B is the
  // optimum. A run of values [Ti, Tj] costs at least lat(Tj) + (100 - w)
  // x Ti, so runs that cannot beat the best plan are skipped (a
  // bisection); at most 48 runs and until `deadline`, after which the runs
  // left give the lower bound.
  const std::int64_t w = m.blend_percent();
  auto a = run_dp(m, true, cancel, max_entries, inf, w, 100);
  if (a.status != exact_status::solved) {
    res.status = a.status;
    return res;
  }
  auto b = run_dp(m, false, cancel, max_entries);
  if (b.status != exact_status::solved) {
    res.status = b.status;
    return res;
  }
  res.status = exact_status::solved;
  std::int64_t best = inf;
  auto keep = [&](assignment&& x) {
    const auto o = m.evaluate(x).objective;
    if (o < best) {
      best = o;
      res.best = std::move(x);
    }
  };
  const std::int64_t hi = m.evaluate(a.best).bottleneck;
  // Every plan of bottleneck hi or more costs at least this much.
  std::int64_t lower = a.value + (100 - w) * hi;
  keep(std::move(a.best));
  keep(std::move(b.best));
  // Plans of bottleneck hi or more are counted in `lower`.
  const auto at = bottleneck_values(m, 0, hi - 1);
  bool cancelled = false;
  auto least = least_over_bottlenecks(
    at, 100 - w,
    [&](std::size_t i) -> std::optional<std::int64_t> {
      auto r = run_dp(m, true, cancel, max_entries, at[i], w, 100);
      if (r.status == exact_status::cancelled) {
        cancelled = true;
        return std::nullopt;
      }
      if (r.status != exact_status::solved)
        return inf;
      const auto v = r.value;
      keep(std::move(r.best));
      return v;
    },
    best, inf, [&](int calls) {
      return calls < 48 && std::chrono::steady_clock::now() < deadline;
    });
  if (!least || cancelled) {
    res.status = exact_status::cancelled;
    return res;
  }
  lower = std::min(lower, *least);
  res.objective = best;
  res.lower_bound = std::min(lower, best);
  return res;
}

} // namespace exo::placement
