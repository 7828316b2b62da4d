#pragma once

// Local moves on a plan: what the node-block program cannot reach (a node
// entered twice, a device of a third node as a bridge between two others)
// tried from its plan, kept when the objective falls.
#include "core/placement/cost_model.hpp"
#include "core/placement/problem.hpp"

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
/// What a move must lower after the objective.
enum class move_goal {
  /// Stages and cuts at the bottleneck, latency, then moving time.
  shape,
  /// Moving time first (cost_model::moving_cost: weights already in place
  /// stay), then as `shape`.
  moving,
};

plan_moves_result improve_by_moves(
  const cost_model& m, const assignment& a,
  std::chrono::steady_clock::time_point deadline,
  const std::atomic<bool>* cancel = nullptr,
  move_goal goal = move_goal::shape);

/// `a` with nodes of one class of `bare` (interchangeable_nodes of the
/// same cluster without resident weights) swapped, and devices of one
/// kind of `bare` on one node swapped, wherever that lowers the moving
/// time under `m` (the cluster with them): the stages land where their
/// weights are. Nothing else changes: every swap keeps each stage's
/// time, memory and transfers, so the objective is `a`'s.
assignment keep_in_place(const cost_model& m, const cost_model& bare,
                         const assignment& a);

/// The plan the cluster runs now, from `p.resident` (each device's layers,
/// as the surviving stages of the previous plan hold them) made whole: the
/// stages of eligible devices in layer order, overlaps dropped, a stage
/// that no longer fits its device dropped, every gap (a lost device's
/// layers) given to the stage before as far as its memory allows, then to
/// unused devices, the one that takes most first. Empty when there is
/// nothing resident or the gaps cannot be filled.
assignment previous_plan(const cost_model& m, const problem& p);

} // namespace exo::placement
