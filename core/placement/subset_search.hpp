#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "core/placement/cost_model.hpp"

namespace exo::placement {

/// A plan for a problem too large for the exact program, in `m`'s device
/// indices, and how it was found.
struct heuristic_plan {
  assignment plan;
  std::int64_t objective = 0;
  /// "ordered" or "exact-subset".
  std::string method;
};

/// Good plans without a proof, for problems whose exact table is too large
/// (many different devices):
///   - ordered: the devices in an order — nodes joined by their cheapest
///     links from each node (roomiest first), each node's devices fastest
///     first — and the best plan that uses them in that order (a program
///     over the last device used and the layers placed, exact for the
///     order);
///   - exact-subset: the exact program on subsets of the devices small
///     enough for its table (`max_entries`): the fastest devices, whole
///     nodes joined by their cheapest links, the devices of the best plan
///     so far — its plan is optimal among those devices.
/// Stops after `budget`, when `cancel` is raised or once a plan's objective
/// is at most `enough` (a lower bound: that plan is optimal), keeping the
/// best plan; nullopt when none of them finds a plan.
std::optional<heuristic_plan> search_subsets(
  const cost_model& m, std::size_t max_entries,
  std::chrono::milliseconds budget, const std::atomic<bool>* cancel,
  std::int64_t enough = -1);

} // namespace exo::placement
