// The window bound (lower_bound.hpp): the pipeline's order dropped, but
// every device's stage kept as one window of layers that fits the device,
// the first and the last layer kept where they are, and every node a plan
// enters but one charged the cheapest cut out of it.
#include "core/placement/lower_bound.hpp"

#include "core/placement/bottleneck_search.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

namespace exo::placement {

namespace {

constexpr std::int64_t inf = std::numeric_limits<std::int64_t>::max() / 4;

/// What one device can run, by number of layers j: the cheapest window of
/// j layers it may hold that contains neither the first nor the last layer
/// (`mid`), the window [0, j) (`first`), the window [L - j, L) (`last`),
/// and the whole model (`all`). inf where the device cannot hold it.
struct windows {
  std::vector<std::int64_t> mid, first, last;
  std::int64_t all = inf;
};

windows device_windows(const cost_model& m, int d) {
  const int L = static_cast<int>(m.layers());
  windows w;
  w.mid.assign(L + 1, inf);
  w.first.assign(L + 1, inf);
  w.last.assign(L + 1, inf);
  for (int b = 1; b + 1 < L; ++b) {
    const int me = std::min(m.max_end(d, b), L - 1);
    for (int e = b + 1; e <= me; ++e)
      w.mid[e - b] = std::min(w.mid[e - b], m.stage_time(d, b, e));
  }
  const int me0 = m.max_end(d, 0);
  for (int j = 1; j < L && j <= me0; ++j)
    w.first[j] = m.stage_time(d, 0, j);
  for (int j = 1; j < L; ++j)
    if (m.max_end(d, L - j) == L)
      w.last[j] = m.stage_time(d, L - j, L);
  if (me0 == L)
    w.all = m.stage_time(d, 0, L);
  return w;
}

struct shared {
  std::vector<windows> win; // per device kind
  std::int64_t intra = 0;   // cheapest cut inside any node
  /// Per node pair: the cheapest cut between them, either way.
  std::vector<std::int64_t> between;
  /// Per node: the cheapest cut to any other node, less intra.
  std::vector<std::int64_t> hop;
  /// Per node: a potential p >= 0 with p(a) + p(b) at most the cheapest
  /// cut between a and b less intra, for every two nodes.
  std::vector<std::int64_t> potential;
  /// Per node: smaller potentials q fitted to the part of the cuts that
  /// each end adds (a network card's latency), and the residual hop r(a)
  /// = min over b of (cut(a, b) - intra - q(a) - q(b)) >= 0 (what the
  /// slower end's bandwidth adds).
  std::vector<std::int64_t> fitted, residual;
  /// Potentials leaning to one end of the residual's widest pair, and
  /// their residual hops (fit_potentials).
  std::vector<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>>
    leaning;
};

/// Fits s.fitted and s.residual: cuts of the form q(a) + q(b) + r(a, b),
/// q what each end adds and r the slower end's share (a link as slow as
/// its slower card), give q(a) = min over b != c of (y(a, b) + y(a, c) -
/// y(b, c)) / 2 (exact when r is 0; r's part is what the residual hops
/// charge as a tree). Lowered until every pair fits, so every q is a
/// potential and every residual >= 0 whatever the cuts are.
template <typename Cut>
void fit_potentials(shared& s, int nodes, const Cut& y) {
  s.fitted.assign(nodes, 0);
  s.residual.assign(nodes, 0);
  if (nodes < 2)
    return;
  for (int a = 0; a < nodes; ++a) {
    std::int64_t q = inf;
    for (int b = 0; b < nodes; ++b)
      for (int c = b + 1; c < nodes; ++c)
        if (b != a && c != a)
          q = std::min(q, (y(a, b) + y(a, c) - y(b, c)) / 2);
    // y is in half ticks (prepare()): hop / 2 ticks is hop half ticks.
    s.fitted[a] = q < inf ? std::max<std::int64_t>(0, q) : s.hop[a];
  }
  for (int round = 0; round < 64; ++round) {
    bool fits = true;
    for (int a = 0; a < nodes; ++a)
      for (int b = a + 1; b < nodes; ++b) {
        const auto over = s.fitted[a] + s.fitted[b] - y(a, b);
        if (over <= 0)
          continue;
        fits = false;
        const auto half = (over + 1) / 2;
        s.fitted[a] = std::max<std::int64_t>(0, s.fitted[a] - half);
        s.fitted[b] = std::max<std::int64_t>(0, s.fitted[b] - (over - half));
      }
    if (fits)
      break;
    if (round == 63)
      s.fitted.assign(nodes, 0);
  }
  for (int a = 0; a < nodes; ++a) {
    std::int64_t r = inf;
    for (int b = 0; b < nodes; ++b)
      if (b != a)
        r = std::min(r, y(a, b) - s.fitted[a] - s.fitted[b]);
    s.residual[a] = r < inf ? std::max<std::int64_t>(0, r) : 0;
  }
  // What y does not tell apart: cuts of l(a) + l(b) + max(t(a), t(b)) fit
  // as q = l + t / 2 with the residual |t(a) - t(b)| / 2, which charges
  // nothing where every node has a twin, and as q = l + t_min / 2 with
  // the residual max(t(a), t(b)) - t_min, which a tree charges exactly
  // (each node but the fastest card's pays its own t). The residual's
  // widest pair (e1, e2) is the slowest and the fastest card; lowering
  // each q by its residual to one of them (either, both tried) gives the
  // second fit. Lower potentials keep every residual >= 0.
  std::int64_t widest = 0;
  int e1 = -1, e2 = -1;
  for (int a = 0; a < nodes; ++a)
    for (int b = a + 1; b < nodes; ++b) {
      const auto r = y(a, b) - s.fitted[a] - s.fitted[b];
      if (r > widest) {
        widest = r;
        e1 = a;
        e2 = b;
      }
    }
  if (e1 < 0)
    return;
  for (int e : {e1, e2}) {
    std::vector<std::int64_t> q(nodes), h(nodes, 0);
    for (int a = 0; a < nodes; ++a)
      q[a] = a == e ? s.fitted[a]
                    : std::max<std::int64_t>(
                        0, s.fitted[a]
                             - (y(a, e) - s.fitted[a] - s.fitted[e]));
    for (int a = 0; a < nodes; ++a) {
      std::int64_t r = inf;
      for (int b = 0; b < nodes; ++b)
        if (b != a)
          r = std::min(r, y(a, b) - q[a] - q[b]);
      h[a] = r < inf ? std::max<std::int64_t>(0, r) : 0;
    }
    s.leaning.emplace_back(std::move(q), std::move(h));
  }
}

shared prepare(const cost_model& m) {
  shared s;
  for (std::size_t k = 0; k < m.kinds(); ++k)
    s.win.push_back(
      device_windows(m, m.kind_representative(static_cast<int>(k))));
  const int nodes = static_cast<int>(m.nodes());
  s.intra = inf;
  for (int a = 0; a < nodes; ++a)
    s.intra = std::min(s.intra, m.cheapest_transfer(a, a));
  s.between.assign(static_cast<std::size_t>(nodes * nodes), inf);
  s.hop.assign(nodes, 0);
  for (int a = 0; a < nodes; ++a) {
    std::int64_t h = inf;
    for (int b = 0; b < nodes; ++b)
      if (b != a) {
        auto x = std::min(m.cheapest_transfer(a, b), m.cheapest_transfer(b, a));
        s.between[static_cast<std::size_t>(a * nodes + b)] = x;
        h = std::min(h, x);
      }
    s.hop[a] = h < inf ? std::max<std::int64_t>(0, h - s.intra) : 0;
  }
  // Potentials: half of each node's hop (feasible: the hops of a and b are
  // each at most their cut), then each raised as far as its cuts allow.
  auto y = [&](int a, int b) {
    return std::max<std::int64_t>(
      0, s.between[static_cast<std::size_t>(a * nodes + b)] - s.intra);
  };
  s.potential.assign(nodes, 0);
  for (int a = 0; a < nodes; ++a)
    s.potential[a] = s.hop[a] / 2;
  for (int round = 0; round < 3; ++round)
    for (int a = 0; a < nodes; ++a) {
      std::int64_t room = inf;
      for (int b = 0; b < nodes; ++b)
        if (b != a)
          room = std::min(room, y(a, b) - s.potential[b]);
      if (room < inf)
        s.potential[a] = std::max(s.potential[a], room);
    }
  // In half ticks, so that the halves above are exact.
  fit_potentials(s, nodes, [&](int a, int b) { return 2 * y(a, b); });
  return s;
}

/// How the ends of a plan sit (latency_bound() bounds each case).
enum class ends {
  /// Every stage on one node: no cut between nodes.
  one_node,
  /// The first and the last layer on different nodes: the cuts between
  /// nodes contain a path through every visited node, so a tree rooted at
  /// the visited node of smallest hop gives every other node a cut of its
  /// own, costing at least that node's hop.
  apart,
  /// The first and the last layer on one node, other nodes visited: the
  /// plan leaves that node and comes back, every visited node has two cuts
  /// to other nodes, and the cuts cost at least the sum of all hops.
  together,
};

/// How the cuts between nodes are charged to the nodes a plan visits:
/// potentials q and hops h per node, a cut(a, b) costing at least intra +
/// q(a) + q(b) + h(a) (and + h(b)). A plan's visits v1..vV are joined by
/// V - 1 cuts, so they cost at least twice the potentials of the visits
/// less those of the first and the last visit (every node visited pays
/// 2q; the nodes holding the first and the last layer get q back each when
/// they differ; when they are one node, it is visited twice and keeps
/// paying 2q), plus the hops as `ends` says (a tree: all but the root's).
/// Three ways, each bounding every plan: hops alone (q = 0, h = hop), the
/// largest potentials (h = 0), and the fitted potentials with their
/// residual hops (shared::fitted).
struct charge {
  const std::vector<std::int64_t>& q;
  const std::vector<std::int64_t>& h;
  /// q and h are in 1/unit ticks (the fitted ones in half ticks).
  std::int64_t unit = 1;
};

/// Least latency (in units: `wt` per tick of compute and transfer, `wp`
/// per tick of node penalty) of covering the layers with device windows,
/// over the plans whose ends sit as `e` says. Every plan of several
/// stages is such a cover: its stages are disjoint windows (the first
/// holds layer 0, the last layer L - 1), its cuts cost at least `intra`
/// each, and the cuts between nodes as `ends` and `charge` say. A knapsack
/// over (layers covered, first and last covered, a node entered, this node
/// took the first / the last layer), node by node in order of the charge's
/// hop (the first node entered is the root), device by device.
std::int64_t latency_bound(const cost_model& m, const shared& s,
                           std::int64_t wt, std::int64_t wp, ends e,
                           const charge& c, int only_node = -1) {
  const int L = static_cast<int>(m.layers());
  const int nodes = static_cast<int>(m.nodes());
  const std::int64_t pen = m.node_penalty();
  const std::int64_t U = c.unit;
  constexpr int first_bit = 1, last_bit = 2, entered_bit = 4,
                node_first = 8, node_last = 16, states = 32;
  const std::size_t W = static_cast<std::size_t>(L) + 1;
  auto at = [W](int j, int f) { return static_cast<std::size_t>(f) * W + j; };
  std::vector<std::int64_t> F(states * W, inf), G, H;
  F[at(0, 0)] = 0;
  std::vector<std::vector<int>> on_node(nodes);
  for (int d = 0; d < static_cast<int>(m.devices()); ++d)
    on_node[m.node(d)].push_back(d);
  std::vector<int> order(nodes);
  for (int a = 0; a < nodes; ++a)
    order[a] = a;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return c.h[a] < c.h[b]; });
  for (int a : order) {
    if (only_node >= 0 && a != only_node)
      continue;
    // Enter node a: it pays 2q, and its hop unless it is the root of a
    // plan whose ends are apart; every later node pays the node penalty.
    G.assign(F.size(), inf);
    const std::int64_t p = e == ends::one_node ? 0 : c.q[a];
    const std::int64_t hop = e == ends::one_node ? 0 : c.h[a];
    const std::int64_t later = wt * (2 * p + hop) + wp * U * pen;
    const std::int64_t root =
      wt * (2 * p + (e == ends::together ? hop : 0));
    for (int f = 0; f < entered_bit * 2; ++f)
      for (int j = 0; j <= L; ++j) {
        const auto v = F[at(j, f)];
        if (v >= inf)
          continue;
        auto& cell = G[at(j, f | entered_bit)];
        cell = std::min(cell, v + ((f & entered_bit) ? later : root));
      }
    for (int d : on_node[a]) {
      const auto& w = s.win[m.device_kind(d)];
      H = G;
      for (int f = entered_bit; f < states; ++f)
        for (int j = 0; j < L; ++j) {
          const auto base = G[at(j, f)];
          if (base >= inf)
            continue;
          auto take = [&](const std::vector<std::int64_t>& cost, int bits) {
            if (f & bits)
              return;
            for (int k = 1; j + k <= L; ++k) {
              if (cost[k] >= inf)
                continue;
              auto v = base + wt * U * (cost[k] + s.intra);
              auto& cell = H[at(j + k, f | bits)];
              cell = std::min(cell, v);
            }
          };
          take(w.mid, 0);
          take(w.first, first_bit | node_first);
          take(w.last, last_bit | node_last);
        }
      G.swap(H);
    }
    // Leave node a: keep the covers whose ends sit as `e` says.
    for (int f = entered_bit; f < states; ++f) {
      const bool took_first = f & node_first, took_last = f & node_last;
      const bool keep = e == ends::apart ? !(took_first && took_last)
                        : e == ends::together ? took_first == took_last
                                              : true;
      const std::int64_t back =
        e == ends::apart
          ? wt * p * ((took_first ? 1 : 0) + (took_last ? 1 : 0))
          : 0;
      for (int j = 0; j <= L; ++j) {
        const auto v = G[at(j, f)];
        if (!keep || v >= inf)
          continue;
        auto& cell = F[at(j, f & (entered_bit * 2 - 1))];
        cell = std::min(cell, v - back);
      }
    }
  }
  std::int64_t cover = F[at(L, first_bit | last_bit | entered_bit)];
  if (cover >= inf)
    return inf;
  // Plans cost whole units: the bound in units, rounded up.
  return (cover - wt * U * s.intra + U - 1) / U;
}

/// The least of latency_bound() over every way a plan's ends can sit, and
/// of the plans of one stage; with `only`, over the plans whose ends sit
/// that way.
std::int64_t latency_bound(const cost_model& m, const shared& s,
                           std::int64_t wt, std::int64_t wp,
                           std::optional<ends> only = std::nullopt) {
  const int L = static_cast<int>(m.layers());
  std::int64_t best = inf;
  if (!only)
    for (const auto& w : s.win)
      best = std::min(best, w.all < inf ? wt * w.all : inf);
  if (L < 2)
    return best;
  // Each way of charging the cuts bounds every plan: the largest for each
  // way the ends sit.
  const std::vector<std::int64_t> none(m.nodes(), 0);
  std::vector<charge> ways{{none, s.hop}, {s.potential, none},
                          {s.fitted, s.residual, 2}};
  for (const auto& [q, h] : s.leaning)
    ways.push_back({q, h, 2});
  // A charge no larger than another on every node (q and h) bounds no
  // higher: sum over the visits of 2q + h less the root's h and the ends'
  // q grows with each. Such a charge is skipped.
  auto under = [](const charge& a, const charge& b) {
    for (std::size_t i = 0; i < a.q.size(); ++i)
      if (a.q[i] * b.unit > b.q[i] * a.unit
          || a.h[i] * b.unit > b.h[i] * a.unit)
        return false;
    return true;
  };
  std::vector<const charge*> used;
  for (std::size_t i = 0; i < ways.size(); ++i) {
    bool skip = false;
    for (std::size_t j = 0; j < ways.size() && !skip; ++j)
      skip = j != i && under(ways[i], ways[j])
             && (!under(ways[j], ways[i]) || j < i);
    if (!skip)
      used.push_back(&ways[i]);
  }
  for (auto e : only ? std::vector<ends>{*only}
                      : std::vector<ends>{ends::apart, ends::together}) {
    std::int64_t most = 0;
    for (const auto* c : used)
      most = std::max(most, latency_bound(m, s, wt, wp, e, *c));
    best = std::min(best, most);
  }
  if (only)
    return best;
  for (int a = 0; a < static_cast<int>(m.nodes()); ++a)
    best = std::min(best, latency_bound(m, s, wt, wp, ends::one_node,
                                        ways[0], a));
  return best;
}

/// Least bottleneck T (ticks) such that the devices, each running a window
/// of at most T ticks, cover the layers with cuts of at most T: with T
/// below the cheapest cut between nodes, on one node's devices alone.
std::int64_t bottleneck_bound(const cost_model& m, const shared& s) {
  const int L = static_cast<int>(m.layers());
  const int n = static_cast<int>(m.devices());
  const int nodes = static_cast<int>(m.nodes());
  auto most = [L](const std::vector<std::int64_t>& c, std::int64_t T) {
    int best = 0;
    for (int k = 1; k <= L; ++k)
      if (c[k] <= T)
        best = k;
    return best;
  };
  // Can the devices `ds` cover the layers in stages of at most T?
  auto covers = [&](const std::vector<int>& ds, std::int64_t T) {
    for (int d : ds)
      if (s.win[m.device_kind(d)].all <= T)
        return true;
    if (L < 2 || T < s.intra || ds.size() < 2)
      return false;
    std::int64_t sum = 0;
    std::vector<int> mid(ds.size()), gf(ds.size()), gl(ds.size());
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const auto& w = s.win[m.device_kind(ds[i])];
      mid[i] = most(w.mid, T);
      int f = most(w.first, T);
      int l = most(w.last, T);
      gf[i] = f > 0 ? f - mid[i] : -L - 1;
      gl[i] = l > 0 ? l - mid[i] : -L - 1;
      sum += mid[i];
    }
    // Two different devices hold the first and the last layer.
    std::int64_t best = -inf;
    for (std::size_t i = 0; i < ds.size(); ++i)
      for (std::size_t k = 0; k < ds.size(); ++k)
        if (i != k && gf[i] >= -L && gl[k] >= -L)
          best = std::max<std::int64_t>(best, gf[i] + gl[k]);
    return best > -inf && sum + best >= L;
  };
  // With stages of at most T, a plan stays within the nodes joined by cuts
  // of at most T: one component of that graph.
  auto feasible = [&](std::int64_t T) {
    std::vector<int> root(nodes);
    for (int a = 0; a < nodes; ++a)
      root[a] = a;
    auto find = [&](int x) {
      while (root[x] != x)
        x = root[x] = root[root[x]];
      return x;
    };
    for (int a = 0; a < nodes; ++a)
      for (int b = a + 1; b < nodes; ++b)
        if (s.between[static_cast<std::size_t>(a * nodes + b)] <= T)
          root[find(a)] = find(b);
    std::vector<std::vector<int>> part(nodes);
    for (int d = 0; d < n; ++d)
      part[find(m.node(d))].push_back(d);
    for (const auto& ds : part)
      if (!ds.empty() && covers(ds, T))
        return true;
    return false;
  };
  std::int64_t hi = std::int64_t{1} << 50;
  if (!feasible(hi))
    return inf;
  std::int64_t lo = 0;
  while (lo < hi) {
    auto mid = lo + (hi - lo) / 2;
    if (feasible(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/// The blend w x latency + (100 - w) x bottleneck (+ 100 x penalty, in
/// the latency part) bounded as one: a plan whose bottleneck is B runs no
/// window longer than B, so its weighted latency is at least the latency
/// bound over windows of at most B, lat(B), which only changes where B
/// passes a window's ticks. With those values b0 = bottleneck_bound() <
/// b1 < ... (each window's ticks above b0), a plan's B lies in some [bj,
/// bj+1) and costs at least lat(bj) + (100 - w) bj; the least of these is
/// the bound. lat falls as B grows, so a run of values [bi, bk] costs at
/// least lat(bk) + (100 - w) bi: runs that cannot go below the best found
/// are skipped (a bisection over the values, lat computed at few of
/// them). Tighter than the two parts' bounds added, which lets one plan
/// have the best latency and another the best bottleneck.
std::int64_t blend_bound(const cost_model& m, const shared& s) {
  const std::int64_t w = m.blend_percent();
  const std::int64_t t0 = bottleneck_bound(m, s);
  if (t0 >= inf)
    return inf;
  std::vector<std::int64_t> at{t0};
  for (const auto& x : s.win) {
    for (const auto* c : {&x.mid, &x.first, &x.last})
      for (auto v : *c)
        if (v > t0 && v < inf)
          at.push_back(v);
    if (x.all > t0 && x.all < inf)
      at.push_back(x.all);
  }
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  const std::int64_t no_incumbent = inf;
  auto v = least_over_bottlenecks(
    at, 100 - w,
    [&](std::size_t i) -> std::optional<std::int64_t> {
      shared capped = s;
      auto cap = [&](std::int64_t& x) {
        if (x > at[i])
          x = inf;
      };
      for (auto& x : capped.win) {
        for (auto* c : {&x.mid, &x.first, &x.last})
          for (auto& y : *c)
            cap(y);
        cap(x.all);
      }
      return latency_bound(m, capped, w, 100);
    },
    no_incumbent, inf, [](int) { return true; });
  return v.value_or(inf);
}

} // namespace

std::optional<std::int64_t> window_lower_bound(const cost_model& m) {
  if (m.devices() == 0 || m.layers() == 0)
    return std::nullopt;
  const auto s = prepare(m);
  switch (m.kind()) {
    case objective_kind::latency: {
      auto v = latency_bound(m, s, 1, 1);
      return v < inf ? std::optional<std::int64_t>(v) : std::nullopt;
    }
    case objective_kind::throughput: {
      auto v = bottleneck_bound(m, s);
      return v < inf ? std::optional<std::int64_t>(v) : std::nullopt;
    }
    case objective_kind::blend: {
      auto v = blend_bound(m, s);
      return v < inf ? std::optional<std::int64_t>(v) : std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<std::int64_t> returning_lower_bound(const cost_model& m) {
  if (m.devices() == 0 || m.layers() < 2
      || m.kind() != objective_kind::latency)
    return std::nullopt;
  const auto v = latency_bound(m, prepare(m), 1, 1, ends::together);
  return v < inf ? std::optional<std::int64_t>(v) : std::nullopt;
}

} // namespace exo::placement
