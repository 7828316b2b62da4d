#pragma once

// The least over a blend's bottlenecks: shared by the window bound and the
// exact program (both bound a blend by the latency under each bottleneck).
#include "core/placement/cost_model.hpp"

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

namespace exo::placement {

/// The least over i of lat(i) + share x at[i], at ascending and lat (from
/// `lat_at(i)`, each i asked at most once; a value of `none` or more: no
/// plan) not increasing with i. A run of values [i, j] costs at least
/// lat(j) + share x at[i + 1] inside: runs that cannot go below the least
/// found or `incumbent` (what the caller already has; read each time, so
/// lat_at may lower it) are skipped, the others halved (a bisection). Once
/// `more(calls)` says no (a budget of calls, a deadline), each run left
/// counts with that bound. nullopt when lat_at returns nullopt
/// (cancelled). `none` when at is empty or no value has a plan.
/// The values a plan's bottleneck can take in [lo, hi]: the time of every
/// window of layers on every device kind, and every cut between two nodes
/// (or inside one), ascending, once each.
std::vector<std::int64_t> bottleneck_values(const cost_model& m,
                                            std::int64_t lo, std::int64_t hi);

std::optional<std::int64_t> least_over_bottlenecks(
  const std::vector<std::int64_t>& at, std::int64_t share,
  const std::function<std::optional<std::int64_t>(std::size_t)>& lat_at,
  const std::int64_t& incumbent, std::int64_t none,
  const std::function<bool(int calls)>& more);

} // namespace exo::placement
