#include "core/placement/plan_moves.hpp"

#include "core/placement/node_blocks.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

namespace exo::placement {

namespace {

/// How far a cut moves, and how many layers an inserted device takes from
/// each neighbour.
constexpr int reach = 8;

/// What a move must lower, in this order.
using key = std::array<std::int64_t, 4>;

key key_of(const cost_model& m, const assignment& a, move_goal goal) {
  const auto ev = m.evaluate(a);
  // Stages and cuts at the bottleneck: a plan with three cuts at its
  // bottleneck is improved by removing one of them, long before its
  // bottleneck falls.
  std::int64_t at_max = 0;
  for (std::size_t s = 0; s < a.size(); ++s) {
    if (m.stage_time(a[s].device, a[s].first, a[s].end) == ev.bottleneck)
      ++at_max;
    if (s + 1 < a.size()
        && m.transfer(a[s].device, a[s + 1].device, a[s].end)
             == ev.bottleneck)
      ++at_max;
  }
  if (goal == move_goal::moving)
    return {ev.objective, ev.moved, at_max, ev.latency};
  return {ev.objective, at_max, ev.latency, ev.moved};
}

bool fits(const cost_model& m, const stage_assignment& s) {
  return s.end > s.first && s.end <= m.max_end(s.device, s.first);
}

/// The cuts c at which stage i's layers may go to its neighbours: [0, 0]
/// for the first stage (all to the next), [L, L] for the last.
std::pair<int, int> split_range(const assignment& a, int i) {
  const int S = static_cast<int>(a.size());
  if (i == 0)
    return {0, 0};
  if (i + 1 == S)
    return {a[i].end, a[i].end};
  return {a[i].first, a[i].end};
}

/// a without stage i, its layers [first, c) to the stage before and
/// [c, end) to the stage after.
assignment without(const assignment& a, int i, int c) {
  auto b = a;
  if (i > 0)
    b[i - 1].end = c;
  if (i + 1 < static_cast<int>(a.size()))
    b[i + 1].first = c;
  b.erase(b.begin() + i);
  return b;
}

} // namespace

plan_moves_result improve_by_moves(
  const cost_model& m, const assignment& start,
  std::chrono::steady_clock::time_point deadline,
  const std::atomic<bool>* cancel, move_goal goal) {
  plan_moves_result out;
  out.best = start;
  out.objective = m.evaluate(start).objective;
  if (m.any_must_use())
    return out;
  const int n = static_cast<int>(m.devices());
  auto stop = [&] {
    return (cancel && cancel->load(std::memory_order_relaxed))
           || std::chrono::steady_clock::now() >= deadline;
  };
  assignment a = start;
  key best = key_of(m, a, goal);
  // Tries candidate `b`: kept when its key is lower.
  auto take = [&](const assignment& b) {
    for (const auto& s : b)
      if (!fits(m, s))
        return false;
    auto k = key_of(m, b, goal);
    if (!(k < best))
      return false;
    best = k;
    a = b;
    ++out.moves;
    return true;
  };
  // Inserts device d into r at boundary s (before stage s; s == |r|:
  // after the last), every boundary but `skip`: the new stage takes
  // [c1, c2), the end of stage s - 1 and the start of stage s, each
  // keeping at least one layer. True when a plan was kept.
  auto insert = [&](const assignment& r, int d, int skip) {
    const int R = static_cast<int>(r.size());
    const int L = static_cast<int>(m.layers());
    for (int s = 0; s <= R; ++s) {
      if (s == skip)
        continue;
      const int at = s < R ? r[s].first : r[R - 1].end;
      const int c1_lo = s > 0 ? std::max(r[s - 1].first + 1, at - reach) : 0;
      const int c1_hi = s > 0 ? at : 0;
      const int c2_lo = s < R ? at : L;
      const int c2_hi = s < R ? std::min(r[s].end - 1, at + reach) : L;
      for (int c1 = c1_lo; c1 <= c1_hi; ++c1)
        for (int c2 = std::max(c2_lo, c1 + 1); c2 <= c2_hi; ++c2) {
          auto b = r;
          if (s > 0)
            b[s - 1].end = c1;
          if (s < R)
            b[s].first = c2;
          b.insert(b.begin() + s, stage_assignment{d, c1, c2});
          if (take(b))
            return true;
        }
    }
    return false;
  };
  bool moved = true;
  while (moved && !stop()) {
    moved = false;
    const int S = static_cast<int>(a.size());
    // Cuts moved between neighbours.
    for (int s = 0; s + 1 < S && !moved; ++s)
      for (int c = std::max(a[s].first + 1, a[s].end - reach);
           c <= std::min(a[s + 1].end - 1, a[s].end + reach) && !moved; ++c) {
        if (c == a[s].end)
          continue;
        auto b = a;
        b[s].end = c;
        b[s + 1].first = c;
        moved = take(b);
      }
    if (moved || stop())
      continue;
    // Stages removed: the layers go to the neighbours, split anywhere
    // (the first stage's to the next, the last's to the one before).
    for (int s = 0; s < S && S > 1 && !moved; ++s) {
      const auto [lo, hi] = split_range(a, s);
      for (int c = lo; c <= hi && !moved; ++c)
        moved = take(without(a, s, c));
    }
    if (moved || stop() || a.size() >= m.max_stages())
      continue;
    // A device no stage uses, one per class (interchangeable), inserted at
    // boundary s (before stage s; s == S: after the last).
    std::vector<char> used(static_cast<std::size_t>(n), 0);
    for (const auto& x : a)
      used[static_cast<std::size_t>(x.device)] = 1;
    std::vector<char> class_tried(m.classes(), 0);
    for (int d = 0; d < n && !moved && !stop(); ++d) {
      if (used[static_cast<std::size_t>(d)]
          || class_tried[static_cast<std::size_t>(m.device_class(d))])
        continue;
      class_tried[static_cast<std::size_t>(m.device_class(d))] = 1;
      moved = insert(a, d, -1);
    }
    if (moved || stop())
      continue;
    // A stage moved whole to another place in the pipeline, keeping its
    // number of layers: the stages between slide over by as many layers
    // (each keeps its count). With identical middle layers every stage
    // still fits, so this reaches plans whose memory is full everywhere.
    for (int i = 0; i < S && !moved && !stop(); ++i)
      for (int s = 0; s < S && !moved; ++s) {
        if (s == i)
          continue;
        auto b = a;
        const auto x = b[i];
        b.erase(b.begin() + i);
        b.insert(b.begin() + s, x);
        int at = 0;
        for (auto& y : b) {
          const int len = y.end - y.first;
          y.first = at;
          y.end = at + len;
          at = y.end;
        }
        moved = take(b);
      }
    if (moved || stop())
      continue;
    // A stage's device moved elsewhere: its layers to its neighbours (the
    // best split), the device inserted at another boundary as above.
    for (int i = 0; i < S && S > 2 && !moved && !stop(); ++i) {
      const auto [lo, hi] = split_range(a, i);
      assignment r;
      key rk{};
      for (int c = lo; c <= hi; ++c) {
        auto b = without(a, i, c);
        if (!std::all_of(b.begin(), b.end(),
                         [&](const auto& x) { return fits(m, x); }))
          continue;
        auto k = key_of(m, b, goal);
        if (r.empty() || k < rk) {
          rk = k;
          r = std::move(b);
        }
      }
      if (!r.empty())
        moved = insert(r, a[i].device, i); // not where it was
    }
  }
  out.best = a;
  out.objective = best[0];
  return out;
}

assignment previous_plan(const cost_model& m, const problem& p) {
  const int n = static_cast<int>(m.devices());
  const int L = static_cast<int>(m.layers());
  std::map<std::string, int> index;
  for (int d = 0; d < n; ++d)
    index[p.devices[m.problem_device(d)].id] = d;
  assignment held;
  for (const auto& r : p.resident) {
    auto it = index.find(r.device);
    if (it == index.end() || r.last_layer < r.first_layer
        || r.last_layer >= static_cast<std::size_t>(L))
      continue;
    stage_assignment s{it->second, static_cast<int>(r.first_layer),
                       static_cast<int>(r.last_layer) + 1};
    if (fits(m, s))
      held.push_back(s);
  }
  if (held.empty())
    return {};
  std::sort(held.begin(), held.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<char> used(static_cast<std::size_t>(n), 0);
  assignment kept;
  for (const auto& s : held)
    if ((kept.empty() || s.first >= kept.back().end)
        && !used[static_cast<std::size_t>(s.device)]) {
      kept.push_back(s);
      used[static_cast<std::size_t>(s.device)] = 1;
    }
  assignment out;
  int pos = 0;
  // Layers [pos, to) to the last stage as far as it fits, then to unused
  // devices: each the one that takes most (the faster on a tie).
  auto fill = [&](int to) {
    if (!out.empty() && out.back().end == pos)
      pos = out.back().end =
        std::max(pos, std::min(to, m.max_end(out.back().device,
                                             out.back().first)));
    while (pos < to) {
      int pick = -1, most = 0;
      for (int d = 0; d < n; ++d) {
        if (used[static_cast<std::size_t>(d)])
          continue;
        const int e = std::min(to, m.max_end(d, pos));
        if (e - pos > most
            || (e - pos == most && most > 0
                && m.stage_time(d, pos, e) < m.stage_time(pick, pos, e))) {
          pick = d;
          most = e - pos;
        }
      }
      if (pick < 0)
        return false;
      used[static_cast<std::size_t>(pick)] = 1;
      out.push_back({pick, pos, pos + most});
      pos += most;
    }
    return true;
  };
  for (const auto& s : kept) {
    if (s.first > pos && !fill(s.first))
      return {};
    out.push_back(s);
    pos = s.end;
  }
  if (pos < L && !fill(L))
    return {};
  if (out.size() > m.max_stages())
    return {};
  return out;
}

assignment keep_in_place(const cost_model& m, const cost_model& bare,
                         const assignment& start) {
  if (!m.has_resident() || start.empty())
    return start;
  const auto nc = interchangeable_nodes(bare);
  const int n = static_cast<int>(m.devices());
  const int nodes = static_cast<int>(m.nodes());
  std::vector<std::vector<int>> on_node(static_cast<std::size_t>(nodes));
  for (int d = 0; d < n; ++d)
    on_node[static_cast<std::size_t>(m.node(d))].push_back(d);
  auto moving = [&](const assignment& x) { return m.evaluate(x).moved; };
  assignment a = start;
  std::int64_t best = moving(a);
  // A device of node y of kind k that `taken` does not use, or -1.
  auto partner = [&](int y, int k, const std::vector<char>& taken) {
    for (int d : on_node[static_cast<std::size_t>(y)])
      if (bare.device_kind(d) == k && !taken[static_cast<std::size_t>(d)])
        return d;
    return -1;
  };
  // Swaps nodes x and y: each stage on x goes to a device of y of its
  // kind and the other way; false when the kinds do not match up.
  auto swapped = [&](int x, int y, assignment& b) {
    std::vector<char> taken(static_cast<std::size_t>(n), 0);
    std::vector<int> to(static_cast<std::size_t>(n), -1);
    for (const auto& s : b)
      if (m.node(s.device) == x || m.node(s.device) == y) {
        const int other = m.node(s.device) == x ? y : x;
        const int d =
          partner(other, bare.device_kind(s.device), taken);
        if (d < 0)
          return false;
        taken[static_cast<std::size_t>(d)] = 1;
        to[static_cast<std::size_t>(s.device)] = d;
      }
    for (auto& s : b)
      if (to[static_cast<std::size_t>(s.device)] >= 0)
        s.device = to[static_cast<std::size_t>(s.device)];
    return true;
  };
  bool better = true;
  while (better) {
    better = false;
    // Nodes of one class.
    for (const auto& cls : nc.members)
      for (std::size_t i = 0; i < cls.size(); ++i)
        for (std::size_t j = i + 1; j < cls.size(); ++j) {
          auto b = a;
          if (!swapped(cls[i], cls[j], b))
            continue;
          const auto t = moving(b);
          if (t < best) {
            best = t;
            a = std::move(b);
            better = true;
          }
        }
    // Devices of one kind on one node: a stage to another such device
    // (used by another stage or not).
    for (std::size_t s = 0; s < a.size(); ++s)
      for (int d : on_node[static_cast<std::size_t>(m.node(a[s].device))]) {
        if (d == a[s].device
            || bare.device_kind(d) != bare.device_kind(a[s].device))
          continue;
        auto b = a;
        for (auto& x : b)
          if (x.device == d)
            x.device = a[s].device;
        b[s].device = d;
        const auto t = moving(b);
        if (t < best) {
          best = t;
          a = std::move(b);
          better = true;
        }
      }
  }
  return a;
}

} // namespace exo::placement
