#include "core/placement/walk_plans.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>

namespace exo::placement {

namespace {

/// Per node pair (a * nodes + b): the dearest cut between them, either
/// way (a walk passes a link both ways).
std::vector<std::int64_t> dearest_cuts(const cost_model& m) {
  const int N = static_cast<int>(m.nodes());
  const int L = static_cast<int>(m.layers());
  std::vector<std::int64_t> worst(static_cast<std::size_t>(N) * N, 0);
  for (int a = 0; a < N; ++a)
    for (int b = 0; b < N; ++b) {
      auto& w = worst[static_cast<std::size_t>(a) * N + b];
      for (int cut = 1; cut < L; ++cut)
        w = std::max({w, m.transfer_nodes(a, b, cut),
                      m.transfer_nodes(b, a, cut)});
    }
  return worst;
}

/// What the walk plans need of the cluster at one limit.
class walk_builder {
public:
  walk_builder(const cost_model& m, const std::vector<std::int64_t>& worst,
               std::int64_t limit)
      : m_(m), worst_(worst), T_(limit), L_(static_cast<int>(m.layers())),
        N_(static_cast<int>(m.nodes())) {
    on_.resize(N_);
    for (int d = 0; d < static_cast<int>(m.devices()); ++d)
      on_[m.node(d)].push_back(d);
    cap_.assign(m.devices(), 0);
    node_cap_.assign(N_, 0);
    usable_.assign(N_, 0);
    for (int a = 0; a < N_; ++a) {
      // Devices by the layers they take from layer 1, most first; with a
      // cut inside the node above the limit, one device a pass.
      auto& ds = on_[a];
      for (int d : ds)
        cap_[d] = L_ > 1 ? reach(d, 1) - 1 : reach(d, 0);
      std::stable_sort(ds.begin(), ds.end(),
                       [&](int x, int y) { return cap_[x] > cap_[y]; });
      while (!ds.empty() && cap_[ds.back()] == 0)
        ds.pop_back();
      if (ds.size() > 1 && worst_[static_cast<std::size_t>(a * N_ + a)] > T_)
        ds.resize(1);
      usable_[a] = static_cast<int>(ds.size());
      for (int d : ds)
        node_cap_[a] += cap_[d];
    }
  }

  /// The walk plan from `root`, or empty.
  assignment from(int root) const {
    if (usable_[root] == 0)
      return {};
    std::vector<int> parent(N_, -2), kids(N_, 0);
    parent[root] = -1;
    std::vector<int> taken{root};
    std::int64_t held = node_cap_[root];
    // A node passed as often as it has devices (kids == usable: each child
    // a pass, none for coming back) must lie on the walk's last branch:
    // such nodes must lie on one path from the root. `allowed`: nodes that
    // may take one more child.
    std::vector<char> allowed(N_), on_path(N_);
    auto update_allowed = [&] {
      int deepest = -1, dd = -1;
      for (int x : taken)
        if (kids[x] > 0 && kids[x] == usable_[x]) {
          const int dx = depth_of(x, parent);
          if (dx > dd) {
            deepest = x;
            dd = dx;
          }
        }
      std::fill(on_path.begin(), on_path.end(), 0);
      for (int x = deepest; x >= 0; x = parent[x])
        on_path[x] = 1;
      for (int u : taken) {
        if (kids[u] + 2 <= usable_[u]) {
          allowed[u] = 1;
          continue;
        }
        bool ok = kids[u] + 1 == usable_[u];
        if (ok && deepest >= 0 && !on_path[u]) {
          // u below the deepest such node keeps them on one path.
          ok = false;
          for (int x = parent[u]; x >= 0 && !ok; x = parent[x])
            ok = x == deepest;
        }
        allowed[u] = ok;
      }
    };
    for (;;) {
      if (held >= L_) {
        auto a = walk(root, parent, kids);
        if (!a.empty())
          return a;
      }
      // The neighbour of the nodes taken that adds the most layers, hung
      // below a taken node that can pass it, the one with most to spare.
      update_allowed();
      int best = -1, via = -1;
      for (int v = 0; v < N_; ++v) {
        if (parent[v] != -2 || usable_[v] == 0)
          continue;
        int u_best = -1;
        for (int u : taken)
          if (adjacent(u, v) && allowed[u]
              && (u_best < 0
                  || usable_[u] - kids[u] > usable_[u_best] - kids[u_best]))
            u_best = u;
        if (u_best < 0)
          continue;
        if (best < 0 || node_cap_[v] > node_cap_[best]
            || (node_cap_[v] == node_cap_[best]
                && usable_[u_best] - kids[u_best]
                     > usable_[via] - kids[via])) {
          best = v;
          via = u_best;
        }
      }
      if (best < 0)
        return {};
      parent[best] = via;
      ++kids[via];
      taken.push_back(best);
      held += node_cap_[best];
    }
  }

  int nodes() const { return N_; }
  /// Most layers one of the node's devices takes from layer 0.
  int first_reach(int a) const {
    int most = 0;
    for (int d : on_[a])
      most = std::max(most, reach(d, 0));
    return most;
  }

private:
  bool adjacent(int a, int b) const {
    return a != b && worst_[static_cast<std::size_t>(a * N_ + b)] <= T_;
  }
  /// Largest e such that device d takes [b, e) within the limit (b: none).
  int reach(int d, int b) const {
    int lo = b, hi = std::min(m_.max_end(d, b), L_);
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (m_.stage_time(d, b, mid) <= T_)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }
  int depth_of(int u, const std::vector<int>& parent) const {
    int d = 0;
    for (int x = parent[u]; x >= 0; x = parent[x])
      ++d;
    return d;
  }

  /// The depth-first walk over the tree `parent`, ending in the branch
  /// that holds the nodes passed once a child (kids == usable), else the
  /// deepest; each pass of a node gets one device, its first pass the
  /// rest; then the layers in walk order, each device as many as fit it.
  assignment walk(int root, const std::vector<int>& parent,
                  const std::vector<int>& kid_count) const {
    std::vector<std::vector<int>> kids(N_);
    for (int v = 0; v < N_; ++v)
      if (parent[v] >= 0)
        kids[parent[v]].push_back(v);
    // Per node: its subtree's height, and whether it holds a tight node.
    std::vector<int> height(N_, 0);
    std::vector<char> tight(N_, 0);
    std::function<void(int)> measure = [&](int u) {
      tight[u] = kid_count[u] > 0 && kid_count[u] == usable_[u];
      for (int v : kids[u]) {
        measure(v);
        height[u] = std::max(height[u], 1 + height[v]);
        tight[u] = tight[u] || tight[v];
      }
    };
    measure(root);
    std::vector<int> passes; // nodes in walk order
    std::function<void(int, bool)> go = [&](int u, bool last) {
      auto& ks = kids[u];
      // The branch the walk ends in last.
      std::stable_sort(ks.begin(), ks.end(), [&](int x, int y) {
        return std::make_pair(tight[x], height[x])
               < std::make_pair(tight[y], height[y]);
      });
      passes.push_back(u);
      for (std::size_t i = 0; i < ks.size(); ++i) {
        const bool final_branch = last && i + 1 == ks.size();
        go(ks[i], final_branch);
        if (!final_branch)
          passes.push_back(u);
      }
    };
    go(root, true);
    std::vector<int> count(N_, 0);
    for (int u : passes)
      ++count[u];
    for (int u = 0; u < N_; ++u)
      if (count[u] > usable_[u])
        return {};
    // Devices of each pass: one each, the first pass the rest (the root's
    // first device is the one that takes most from layer 0).
    std::vector<std::vector<int>> left(N_);
    for (int u = 0; u < N_; ++u)
      if (count[u] > 0)
        left[u] = on_[u];
    {
      auto& r = left[root];
      auto best = std::max_element(r.begin(), r.end(), [&](int x, int y) {
        return reach(x, 0) < reach(y, 0);
      });
      std::rotate(r.begin(), best, best + 1);
    }
    std::vector<int> seen(N_, 0);
    std::vector<int> order;
    for (int u : passes) {
      const int later = count[u] - ++seen[u];
      auto& l = left[u];
      const std::size_t take = l.size() - static_cast<std::size_t>(later);
      order.insert(order.end(), l.begin(),
                   l.begin() + static_cast<std::ptrdiff_t>(take));
      l.erase(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(take));
    }
    assignment a;
    int at = 0;
    for (int d : order) {
      const int e = reach(d, at);
      if (e == at)
        return {}; // a device on the walk that cannot take a layer here
      a.push_back({d, at, e});
      at = e;
      if (at == L_)
        return a;
    }
    return {};
  }

  const cost_model& m_;
  const std::vector<std::int64_t>& worst_;
  std::int64_t T_;
  int L_, N_;
  std::vector<std::vector<int>> on_;
  std::vector<int> cap_;
  std::vector<std::int64_t> node_cap_;
  std::vector<int> usable_;
};

std::optional<assignment> walk_plan(const cost_model& m,
                                    const std::vector<std::int64_t>& worst,
                                    std::int64_t limit) {
  walk_builder w(m, worst, limit);
  // Roots by how much of the model's start their best device takes.
  std::vector<int> roots(w.nodes()), first(w.nodes());
  std::iota(roots.begin(), roots.end(), 0);
  for (int a : roots)
    first[a] = w.first_reach(a);
  std::stable_sort(roots.begin(), roots.end(),
                   [&](int a, int b) { return first[a] > first[b]; });
  for (std::size_t i = 0; i < roots.size() && i < 8; ++i) {
    if (first[roots[i]] == 0)
      break;
    auto a = w.from(roots[i]);
    if (!a.empty() && a.size() <= m.max_stages()
        && m.evaluate(a).bottleneck <= limit)
      return a;
  }
  return std::nullopt;
}

bool walkable(const cost_model& m) {
  return m.devices() > 0 && m.layers() > 0 && !m.any_must_use();
}

} // namespace

std::optional<assignment> walk_plan(const cost_model& m, std::int64_t limit) {
  if (!walkable(m))
    return std::nullopt;
  return walk_plan(m, dearest_cuts(m), limit);
}

std::optional<assignment> least_walk_plan(
  const cost_model& m, std::int64_t lower, std::int64_t upper,
  std::chrono::steady_clock::time_point deadline,
  const std::atomic<bool>* cancel) {
  std::optional<assignment> best;
  if (!walkable(m))
    return best;
  const auto worst = dearest_cuts(m);
  // No plan has a stage slower than a device running the whole model, nor
  // a cut dearer than the dearest.
  std::int64_t slowest = *std::max_element(worst.begin(), worst.end());
  for (int d = 0; d < static_cast<int>(m.devices()); ++d)
    slowest = std::max(slowest, m.cum_time(d, static_cast<int>(m.layers())));
  std::int64_t lo = lower, hi = std::min(upper - 1, slowest);
  while (lo <= hi) {
    if ((cancel && cancel->load(std::memory_order_relaxed))
        || std::chrono::steady_clock::now() >= deadline)
      break;
    const auto mid = lo + (hi - lo) / 2;
    if (auto a = walk_plan(m, worst, mid)) {
      hi = std::min(mid, m.evaluate(*a).bottleneck) - 1;
      best = std::move(a);
    } else {
      lo = mid + 1;
    }
  }
  return best;
}

} // namespace exo::placement
