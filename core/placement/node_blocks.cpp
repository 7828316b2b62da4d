#include "core/placement/node_blocks.hpp"

#include "core/placement/bottleneck_search.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>
#include <map>
#include <set>

namespace exo::placement {

namespace {

constexpr std::int64_t inf = std::numeric_limits<std::int64_t>::max() / 4;
constexpr int start_marker = 255;
/// Most device patterns of one node (product of kind count + 1).
constexpr std::size_t max_patterns = 4096;

/// One node's devices as kinds: kind id, count, the devices.
struct node_kinds {
  std::vector<int> kind;
  std::vector<std::vector<int>> devices;
};

std::vector<node_kinds> kinds_per_node(const cost_model& m) {
  std::vector<std::map<int, std::vector<int>>> by(m.nodes());
  for (int d = 0; d < static_cast<int>(m.devices()); ++d)
    by[m.node(d)][m.device_kind(d)].push_back(d);
  std::vector<node_kinds> out(m.nodes());
  for (std::size_t a = 0; a < by.size(); ++a)
    for (auto& [k, ds] : by[a]) {
      out[a].kind.push_back(k);
      out[a].devices.push_back(ds);
    }
  return out;
}

/// The best runs of layers on one node: for a start l, h[u][e] is the
/// least cost of layers [l, e) on the node's devices used as pattern u
/// (a count per kind), cuts inside the node between them.
class node_program {
public:
  /// `limit`: no stage and no cut inside the node above it (inf: none).
  node_program(const cost_model& m, int node, const node_kinds& nk, bool sum,
               std::int64_t limit = inf)
      : m_(m), node_(node), sum_(sum), limit_(limit) {
    const std::size_t K = nk.kind.size();
    std::size_t U = 1;
    for (std::size_t k = 0; k < K; ++k) {
      cnt_.push_back(static_cast<int>(nk.devices[k].size()));
      rep_.push_back(nk.devices[k][0]);
      stride_.push_back(U);
      U *= nk.devices[k].size() + 1;
      if (U > max_patterns) {
        too_large_ = true;
        return;
      }
    }
    U_ = U;
    W_ = m.layers() + 1;
  }
  bool too_large() const { return too_large_; }

  /// Fills h and par for start l.
  void run(int l) {
    const int L = static_cast<int>(m_.layers());
    h_.assign(U_ * W_, inf);
    par_.assign(U_ * W_, -1);
    mv_.assign(U_ * W_, 0);
    const int K = static_cast<int>(cnt_.size());
    for (int k = 0; k < K; ++k)
      for (int e = l + 1; e <= m_.max_end(rep_[k], l); ++e) {
        if (m_.stage_time(rep_[k], l, e) > limit_)
          break; // longer windows take longer
        auto i = at(stride_[k], e);
        h_[i] = m_.stage_time(rep_[k], l, e);
        mv_[i] = m_.moving_cost(rep_[k], l, e);
        par_[i] = (l << 8) | start_marker;
      }
    std::vector<int> c(K);
    for (std::size_t u = 1; u < U_; ++u) {
      std::size_t r = u;
      for (int k = 0; k < K; ++k) {
        c[k] = static_cast<int>(r % static_cast<std::size_t>(cnt_[k] + 1));
        r /= static_cast<std::size_t>(cnt_[k] + 1);
      }
      for (int e = l + 1; e < L; ++e) {
        const auto base = h_[at(u, e)];
        if (base >= inf)
          continue;
        const auto cut = m_.transfer_nodes(node_, node_, e);
        if (cut > limit_)
          continue;
        const auto t = combine(base, cut);
        const auto tm = mv_[at(u, e)];
        for (int k = 0; k < K; ++k) {
          if (c[k] >= cnt_[k])
            continue;
          const auto u2 = u + stride_[k];
          for (int e2 = e + 1; e2 <= m_.max_end(rep_[k], e); ++e2) {
            if (m_.stage_time(rep_[k], e, e2) > limit_)
              break;
            auto v = combine(t, m_.stage_time(rep_[k], e, e2));
            auto w = tm + m_.moving_cost(rep_[k], e, e2);
            auto i = at(u2, e2);
            if (better(v, w, h_[i], mv_[i])) {
              h_[i] = v;
              mv_[i] = w;
              par_[i] = (e << 8) | k;
            }
          }
        }
      }
    }
  }
  /// The best pattern for a run ending at e: least cost, then fewest
  /// bytes moved.
  std::size_t best_pattern(int e) const {
    std::size_t u = 0;
    for (std::size_t v = 1; v < U_; ++v)
      if (better(h_[at(v, e)], mv_[at(v, e)], h_[at(u, e)], mv_[at(u, e)]))
        u = v;
    return u;
  }
  /// Cost and bytes moved of the best run ending at e.
  std::int64_t best(int e) const { return h_[at(best_pattern(e), e)]; }
  std::int64_t best_moved(int e) const {
    return mv_[at(best_pattern(e), e)];
  }
  /// The stages of a best run ending at e (after run(l)), as (kind index
  /// on the node, first, end), in order.
  std::vector<std::array<int, 3>> stages(int e) const {
    std::size_t u = best_pattern(e);
    std::vector<std::array<int, 3>> out;
    for (;;) {
      auto p = par_[at(u, e)];
      int first = p >> 8;
      int k = p & 0xff;
      if (k == start_marker) {
        // The first stage: its kind is the only one left in u.
        int kk = 0;
        while (stride_[static_cast<std::size_t>(kk)] != u
               && kk + 1 < static_cast<int>(stride_.size()))
          ++kk;
        out.push_back({kk, first, e});
        break;
      }
      // Stage [first, e) on kind k; before it the run ended at first.
      out.push_back({k, first, e});
      u -= stride_[static_cast<std::size_t>(k)];
      e = first;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }

private:
  std::size_t at(std::size_t u, int e) const {
    return u * W_ + static_cast<std::size_t>(e);
  }
  std::int64_t combine(std::int64_t a, std::int64_t b) const {
    return sum_ ? a + b : std::max(a, b);
  }
  const cost_model& m_;
  int node_;
  bool sum_;
  std::int64_t limit_ = inf;
  bool too_large_ = false;
  std::vector<int> cnt_, rep_;
  std::vector<std::size_t> stride_;
  std::size_t U_ = 1, W_ = 1;
  std::vector<std::int64_t> h_, mv_;
  std::vector<std::int32_t> par_;
};

struct dp_out {
  bool found = false;
  assignment best;
  std::int64_t value = 0;
  std::string skipped;
  std::size_t states = 0;
};

/// When a run stops: `cancel` set ("cancelled") or `deadline` passed
/// ("out of time").
struct stop_when {
  const std::atomic<bool>* cancel = nullptr;
  std::chrono::steady_clock::time_point deadline =
    std::chrono::steady_clock::time_point::max();
  /// Why it stops now, or nullptr.
  const char* why() const {
    if (cancel && cancel->load(std::memory_order_relaxed))
      return "cancelled";
    if (deadline != std::chrono::steady_clock::time_point::max()
        && std::chrono::steady_clock::now() >= deadline)
      return "out of time";
    return nullptr;
  }
};

/// One run of the program. States whose every completion costs more than
/// `cap` are skipped (inf: none): the plan found is the best block plan
/// whenever its cost is at most `cap`. `limit`: no stage and no cut above
/// it (the blend's bottleneck; inf: none).
dp_out run_blocks(const cost_model& m, const node_classes& nc, bool sum,
                  const stop_when& stop, std::size_t max_entries,
                  std::int64_t cap = inf, std::int64_t limit = inf) {
  dp_out out;
  const int L = static_cast<int>(m.layers());
  const int C = static_cast<int>(nc.members.size());
  const std::size_t W = static_cast<std::size_t>(L) + 1;
  auto combine = [sum](std::int64_t a, std::int64_t b) {
    return sum ? a + b : std::max(a, b);
  };
  std::vector<int> size(C);
  std::vector<std::size_t> stride(C);
  std::size_t ns = 1;
  for (int c = 0; c < C; ++c) {
    size[c] = static_cast<int>(nc.members[c].size());
    stride[c] = ns;
    ns *= static_cast<std::size_t>(size[c] + 1);
    if (ns * W * static_cast<std::size_t>(C) > max_entries) {
      out.skipped = "more node-visit states than its table allows";
      return out;
    }
  }
  out.states = ns;
  const auto kinds = kinds_per_node(m);
  // Best run of [l, e) on one node of each class.
  std::vector<std::int64_t> block(static_cast<std::size_t>(C) * W * W, inf);
  // Bytes moved by those runs: only with resident layers (then nodes that
  // hold layers are classes of their own, so a class's runs are its
  // members').
  const bool track = m.has_resident();
  std::vector<std::int64_t> block_mv(track ? block.size() : 0, 0);
  std::vector<int> reach(static_cast<std::size_t>(C) * W, 0);
  auto bat = [W](int c, int l, int e) {
    return (static_cast<std::size_t>(c) * W + static_cast<std::size_t>(l))
             * W
           + static_cast<std::size_t>(e);
  };
  for (int c = 0; c < C; ++c) {
    const int rep = nc.members[c][0];
    node_program np(m, rep, kinds[rep], sum, limit);
    if (np.too_large()) {
      out.skipped = "a node has too many device patterns";
      return out;
    }
    for (int l = 0; l < L; ++l) {
      if (const char* why = stop.why()) {
        out.skipped = why;
        return out;
      }
      np.run(l);
      for (int e = l + 1; e <= L; ++e) {
        auto b = np.best(e);
        block[bat(c, l, e)] = b;
        if (track)
          block_mv[bat(c, l, e)] = np.best_moved(e);
        if (b < inf)
          reach[static_cast<std::size_t>(c) * W + l] = e;
      }
    }
  }
  // Transfer between a node of class c and another node of class c2.
  auto inter = [&](int c, int c2, int cut) {
    const int a = nc.members[c][0];
    const int b = c == c2 ? nc.members[c2][1] : nc.members[c2][0];
    return m.transfer_nodes(a, b, cut);
  };
  // What completing layers [l, L) from a node costs at least: the cheapest
  // cut into another node (any class) and runs of blocks, nodes unlimited.
  std::vector<std::int64_t> min_cut(W, 0), rest(W, inf), after(W, 0);
  for (int l = 1; l < L; ++l) {
    std::int64_t x = inf;
    for (int c = 0; c < C; ++c)
      for (int c2 = 0; c2 < C; ++c2)
        if (c != c2 || size[c] > 1)
          x = std::min(x, inter(c, c2, l));
    min_cut[l] = x;
  }
  rest[L] = 0;
  for (int l = L - 1; l >= 0; --l)
    for (int c = 0; c < C; ++c)
      for (int e = l + 1; e <= reach[static_cast<std::size_t>(c) * W + l];
           ++e) {
        const auto b = block[bat(c, l, e)];
        if (b >= inf || rest[e] >= inf || (e < L && min_cut[e] >= inf))
          continue;
        rest[l] = std::min(
          rest[l], e == L ? b : combine(b, combine(min_cut[e], rest[e])));
      }
  for (int l = 1; l < L; ++l)
    after[l] = rest[l] >= inf || min_cut[l] >= inf
                 ? inf
                 : combine(min_cut[l], rest[l]);
  const std::size_t entries = ns * W * static_cast<std::size_t>(C);
  std::vector<std::int64_t> f(entries, inf);
  std::vector<std::int32_t> par(entries, -1);
  std::vector<std::int64_t> mv(track ? entries : 0, 0);
  auto moved = [&](std::size_t i) { return track ? mv[i] : 0; };
  auto block_moved = [&](std::size_t i) { return track ? block_mv[i] : 0; };
  auto at = [&](std::size_t s, int l, int c) {
    return (s * W + static_cast<std::size_t>(l)) * static_cast<std::size_t>(C)
           + static_cast<std::size_t>(c);
  };
  for (int c = 0; c < C; ++c)
    for (int e = 1; e <= L; ++e)
      if (block[bat(c, 0, e)] < inf) {
        f[at(stride[c], e, c)] = block[bat(c, 0, e)];
        par[at(stride[c], e, c)] = start_marker;
        if (track)
          mv[at(stride[c], e, c)] = block_mv[bat(c, 0, e)];
      }
  std::vector<int> v(C);
  for (std::size_t S = 1; S < ns; ++S) {
    if (const char* why = stop.why()) {
      out.skipped = why;
      return out;
    }
    std::size_t r = S;
    for (int c = 0; c < C; ++c) {
      v[c] = static_cast<int>(r % static_cast<std::size_t>(size[c] + 1));
      r /= static_cast<std::size_t>(size[c] + 1);
    }
    for (int l = 1; l < L; ++l) {
      std::int64_t* row = &f[at(S, l, 0)];
      bool any = false;
      for (int c = 0; c < C; ++c) {
        if (row[c] < inf && (after[l] >= inf || combine(row[c], after[l]) > cap))
          row[c] = inf; // no completion within the cap
        any = any || row[c] < inf;
      }
      if (!any)
        continue;
      for (int c2 = 0; c2 < C; ++c2) {
        if (v[c2] >= size[c2])
          continue;
        const int me = reach[static_cast<std::size_t>(c2) * W + l];
        if (me <= l)
          continue;
        std::int64_t best = inf, best_mv = 0;
        int arg = -1;
        for (int c = 0; c < C; ++c) {
          if (row[c] >= inf)
            continue;
          const auto cut = inter(c, c2, l);
          if (cut > limit)
            continue;
          auto x = combine(row[c], cut);
          auto w = moved(at(S, l, c));
          if (better(x, w, best, best_mv)) {
            best = x;
            best_mv = w;
            arg = c;
          }
        }
        const std::size_t S2 = S + stride[c2];
        for (int e = l + 1; e <= me; ++e) {
          const auto b = block[bat(c2, l, e)];
          if (b >= inf)
            continue;
          auto x = combine(best, b);
          auto w = best_mv + block_moved(bat(c2, l, e));
          auto i = at(S2, e, c2);
          if (better(x, w, f[i], moved(i))) {
            f[i] = x;
            par[i] = (l << 8) | arg;
            if (track)
              mv[i] = w;
          }
        }
      }
    }
  }
  std::int64_t best = inf, best_mv = 0;
  std::size_t best_s = 0;
  int best_c = -1;
  for (std::size_t S = 1; S < ns; ++S) {
    std::size_t r = S;
    int visits = 0;
    for (int c = 0; c < C; ++c) {
      visits += static_cast<int>(r % static_cast<std::size_t>(size[c] + 1));
      r /= static_cast<std::size_t>(size[c] + 1);
    }
    const std::int64_t pen = m.node_penalty() * (visits - 1);
    for (int c = 0; c < C; ++c) {
      auto x = f[at(S, L, c)];
      if (x < inf && better(x + pen, moved(at(S, L, c)), best, best_mv)) {
        best = x + pen;
        best_mv = moved(at(S, L, c));
        best_s = S;
        best_c = c;
      }
    }
  }
  if (best_c < 0)
    return out;
  // The visits, back to front, then each visit's stages on its node.
  struct visit {
    int c, first, end;
  };
  std::vector<visit> visits;
  std::size_t S = best_s;
  int l = L;
  int c = best_c;
  for (;;) {
    auto p = par[at(S, l, c)];
    const int kp = p & 0xff;
    const int first = kp == start_marker ? 0 : p >> 8;
    visits.push_back({c, first, l});
    S -= stride[c];
    if (kp == start_marker)
      break;
    l = first;
    c = kp;
  }
  std::reverse(visits.begin(), visits.end());
  std::vector<int> next(C, 0);
  for (const auto& vi : visits) {
    const int node = nc.members[vi.c][static_cast<std::size_t>(next[vi.c]++)];
    node_program np(m, node, kinds[node], sum, limit);
    np.run(vi.first);
    std::vector<std::size_t> used(kinds[node].kind.size(), 0);
    for (const auto& st : np.stages(vi.end)) {
      const auto k = static_cast<std::size_t>(st[0]);
      out.best.push_back({kinds[node].devices[k][used[k]++], st[1], st[2]});
    }
  }
  out.found = true;
  out.value = best;
  return out;
}

} // namespace

node_classes interchangeable_nodes(const cost_model& m) {
  const int N = static_cast<int>(m.nodes());
  const auto kinds = kinds_per_node(m);
  // Same devices: the sorted (kind, count) list.
  std::map<std::vector<std::pair<int, std::size_t>>, int> by_devices;
  std::vector<int> cls(N);
  for (int a = 0; a < N; ++a) {
    std::vector<std::pair<int, std::size_t>> sig;
    for (std::size_t k = 0; k < kinds[a].kind.size(); ++k)
      sig.emplace_back(kinds[a].kind[k], kinds[a].devices[k].size());
    auto [it, fresh] =
      by_devices.emplace(sig, static_cast<int>(by_devices.size()));
    cls[a] = it->second;
  }
  // Same links: refine the classes by each node's links (the class at the
  // other end and the transfer row) until they stop splitting, as colour
  // refinement does. Then every pair of classes should see one row between
  // any two distinct members; a pair that does not (a pattern refinement
  // cannot see) splits both classes into single nodes, always consistent.
  std::map<std::vector<std::int64_t>, int> row_ids;
  std::vector<int> row(static_cast<std::size_t>(N * N), 0);
  for (int a = 0; a < N; ++a)
    for (int b = 0; b < N; ++b) {
      std::vector<std::int64_t> x;
      for (std::size_t cut = 0; cut <= m.layers(); ++cut)
        x.push_back(m.transfer_nodes(a, b, static_cast<int>(cut)));
      auto [it, fresh] =
        row_ids.emplace(std::move(x), static_cast<int>(row_ids.size()));
      row[static_cast<std::size_t>(a * N + b)] = it->second;
    }
  for (;;) {
    std::map<std::pair<int, std::vector<std::pair<int, int>>>, int> sigs;
    std::vector<int> next(N);
    for (int a = 0; a < N; ++a) {
      std::vector<std::pair<int, int>> links;
      for (int b = 0; b < N; ++b)
        if (b != a)
          links.emplace_back(cls[b], row[static_cast<std::size_t>(a * N + b)]);
      std::sort(links.begin(), links.end());
      auto [it, fresh] = sigs.emplace(std::make_pair(cls[a], links),
                                      static_cast<int>(sigs.size()));
      next[a] = it->second;
    }
    const auto before = std::set<int>(cls.begin(), cls.end()).size();
    cls = next;
    if (sigs.size() == before)
      break;
  }
  for (;;) {
    // The first pair seen of each (class, class), the others against it.
    std::map<std::pair<int, int>, int> ref;
    bool split = false;
    for (int a = 0; a < N && !split; ++a)
      for (int b = 0; b < N && !split; ++b) {
        if (a == b)
          continue;
        const int r = row[static_cast<std::size_t>(a * N + b)];
        auto [it, fresh] = ref.emplace(std::make_pair(cls[a], cls[b]), r);
        if (fresh || it->second == r)
          continue;
        const int ca = cls[a], cb = cls[b];
        int fresh_id = *std::max_element(cls.begin(), cls.end()) + 1;
        for (int x = 0; x < N; ++x)
          if (cls[x] == ca || cls[x] == cb)
            cls[x] = fresh_id++;
        split = true;
      }
    if (!split)
      break;
  }
  node_classes out;
  out.class_of.assign(N, -1);
  std::map<int, int> renumber;
  for (int a = 0; a < N; ++a) {
    auto [it, fresh] =
      renumber.emplace(cls[a], static_cast<int>(out.members.size()));
    if (fresh)
      out.members.emplace_back();
    out.class_of[a] = it->second;
    out.members[it->second].push_back(a);
  }
  return out;
}

bool block_plans_suffice(const cost_model& m) {
  const int L = static_cast<int>(m.layers());
  const int N = static_cast<int>(m.nodes());
  if (m.kind() != objective_kind::latency || m.devices() == 0 || N > 256
      || m.max_stages() < m.devices() || m.any_must_use())
    return false;
  if (L < 3)
    return true; // at most two stages: no node is entered twice
  // Middle layers alike on every device kind: the same ticks each, and a
  // window [b, e) with 1 <= b < e <= L - 1 fits iff e - b <= most.
  for (std::size_t k = 0; k < m.kinds(); ++k) {
    const int d = m.kind_representative(static_cast<int>(k));
    const auto one = m.stage_time(d, 1, 2);
    const int most = std::min(m.max_end(d, 1), L - 1) - 1;
    for (int b = 1; b + 1 < L; ++b)
      if (m.stage_time(d, b, b + 1) != one
          || std::min(m.max_end(d, b), L - 1) != std::min(b + most, L - 1))
        return false;
  }
  // A cut costs the same wherever it falls.
  for (int a = 0; a < N; ++a)
    for (int b = 0; b < N; ++b)
      for (int cut = 2; cut < L; ++cut)
        if (m.transfer_nodes(a, b, cut) != m.transfer_nodes(a, b, 1))
          return false;
  auto c = [&m](int a, int b) { return m.transfer_nodes(a, b, 1); };
  for (int a = 0; a < N; ++a)
    for (int s = 0; s < N; ++s) {
      if (s == a)
        continue;
      for (int y = 0; y < N; ++y)
        if (y != a && c(s, y) + c(a, a) > c(s, a) + c(a, y))
          return false;
    }
  return true;
}

node_block_result solve_node_blocks(
  const cost_model& m, const std::atomic<bool>* cancel,
  std::size_t max_entries, std::optional<std::int64_t> lower,
  std::chrono::steady_clock::time_point deadline) {
  const stop_when stop{cancel, deadline};
  node_block_result res;
  if (m.devices() == 0 || m.layers() == 0) {
    res.skipped = "no devices or no layers";
    return res;
  }
  if (m.any_must_use()) {
    res.skipped = "pinned devices or layers";
    return res;
  }
  if (m.max_stages() < m.devices()) {
    res.skipped = "a stage limit";
    return res;
  }
  const auto nc = interchangeable_nodes(m);
  if (nc.members.size() > 254) {
    res.skipped = "more than 254 node classes";
    return res;
  }
  auto finish = [&](dp_out&& r) {
    res.states = r.states;
    res.skipped = r.skipped;
    if (r.found) {
      res.found = true;
      res.best = std::move(r.best);
      res.objective = m.evaluate(res.best).objective;
    }
  };
  if (m.kind() != objective_kind::blend) {
    const bool sum = m.kind() == objective_kind::latency;
    // With a lower bound: first only the states that can finish within 1%,
    // then 10% of it, then all; a plan within the cap is the best block
    // plan, and when the bound is tight the first pass skips most states.
    if (lower && *lower > 0) {
      for (std::int64_t pct : {1, 10}) {
        const std::int64_t cap = *lower + std::max<std::int64_t>(
                                            *lower * pct / 100, 1);
        auto r = run_blocks(m, nc, sum, stop, max_entries, cap);
        if (!r.skipped.empty() || (r.found && r.value <= cap)) {
          finish(std::move(r));
          return res;
        }
      }
    }
    finish(run_blocks(m, nc, sum, stop, max_entries));
    return res;
  }
  auto a = run_blocks(m, nc, true, stop, max_entries);
  auto b = run_blocks(m, nc, false, stop, max_entries);
  auto ea = a.found ? m.evaluate(a.best) : evaluation{};
  auto eb = b.found ? m.evaluate(b.best) : evaluation{};
  dp_out best;
  evaluation eb_best;
  auto keep = [&](dp_out&& r) {
    if (!r.found)
      return;
    auto e = m.evaluate(r.best);
    if (!best.found || better(e.objective, e.moved, eb_best.objective,
                              eb_best.moved)) {
      eb_best = e;
      best = std::move(r);
    }
  };
  // A blend between the two: the latency program with every stage and cut
  // at most T (a plan of bottleneck B is found by the run at T = B, at no
  // more latency), for bottlenecks T from the throughput plan's to the
  // latency plan's: the values a stage or cut can take there, bisected as
  // the exact program does (least_over_bottlenecks), at most 16 runs.
  if (a.found && b.found && ea.bottleneck > eb.bottleneck
      && !stop.why()) {
    const std::int64_t lo = eb.bottleneck, hi = ea.bottleneck;
    const auto at = bottleneck_values(m, lo, hi);
    std::int64_t incumbent = std::min(ea.objective, eb.objective);
    (void)least_over_bottlenecks(
      at, 100 - m.blend_percent(),
      [&](std::size_t i) -> std::optional<std::int64_t> {
        auto r = run_blocks(m, nc, true, stop, max_entries, inf, at[i]);
        if (!r.found && stop.why())
          return std::nullopt;
        if (!r.found)
          return inf;
        // w x (latency + penalty): at most the blend's latency part.
        const auto v = m.blend_percent() * r.value;
        keep(std::move(r));
        incumbent = std::min(incumbent, eb_best.objective);
        return v;
      },
      incumbent, inf, [](int calls) { return calls < 16; });
  }
  if (!a.found && !b.found) { // skipped: say why
    finish(std::move(b));
    return res;
  }
  keep(std::move(a));
  keep(std::move(b));
  finish(std::move(best));
  return res;
}

} // namespace exo::placement
