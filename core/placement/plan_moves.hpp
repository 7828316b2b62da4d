#pragma once

// Local moves on a plan: what the node-block program cannot reach (a node
// entered twice, a device of a third node as a bridge between two others)
// tried from its plan, kept when the objective falls.
#include "core/placement/cost_model.hpp"

#include <atomic>
#include <chrono>

namespace exo::placement {

struct plan_moves_result {
  assignment best;
  /// Objective units of `best`.
  std::int64_t objective = 0;
  /// Moves kept (0: the plan was left as it was).
  int moves = 0;
};

/// Improves `a` (a valid plan of `m`) by moves, each kept when it lowers
/// (objective, stages and cuts at the bottleneck, latency, moving time):
///  - a cut moved by up to 8 layers between two neighbouring stages;
///  - a device no stage uses put between two neighbouring stages (or
///    before the first, after the last), taking the end of the one and
///    the start of the other (up to 8 layers each): a node with a fast
///    network card between two whose cards are slow, even when one of its
///    devices already runs elsewhere in the plan;
///  - a stage removed, its layers given to its neighbours.
/// Every plan it keeps fits each device's memory (cost_model::max_end) and
/// the stage limit. Skipped (returns `a`) with pinned devices or layers.
/// Stops at a local optimum, at `deadline` or when `cancel` is set.
plan_moves_result improve_by_moves(
  const cost_model& m, const assignment& a,
  std::chrono::steady_clock::time_point deadline,
  const std::atomic<bool>* cancel = nullptr);

} // namespace exo::placement
