#include "core/placement/plan_moves.hpp"

#include <algorithm>
#include <array>
#include <vector>

namespace exo::placement {

namespace {

/// How far a cut moves, and how many layers an inserted device takes from
/// each neighbour.
constexpr int reach = 8;

/// What a move must lower, in this order.
using key = std::array<std::int64_t, 4>;

key key_of(const cost_model& m, const assignment& a) {
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
  const std::atomic<bool>* cancel) {
  plan_moves_result out;
  out.best = start;
  out.objective = m.evaluate(start).objective;
  const int n = static_cast<int>(m.devices());
  for (int d = 0; d < n; ++d)
    if (m.must_use(d))
      return out;
  auto stop = [&] {
    return (cancel && cancel->load(std::memory_order_relaxed))
           || std::chrono::steady_clock::now() >= deadline;
  };
  assignment a = start;
  key best = key_of(m, a);
  // Tries candidate `b`: kept when its key is lower.
  auto take = [&](const assignment& b) {
    for (const auto& s : b)
      if (!fits(m, s))
        return false;
    auto k = key_of(m, b);
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
        auto k = key_of(m, b);
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

} // namespace exo::placement
