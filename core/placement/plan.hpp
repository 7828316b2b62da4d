#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "core/placement/cost_model.hpp"
#include "core/placement/problem.hpp"
#include "core/text/json.hpp"
#include "core/text/json_escape.hpp"

namespace exo::placement {

/// One pipeline stage of a plan: a device and the layers it runs.
struct stage {
  /// Index in problem::devices.
  std::size_t device_index = 0;
  std::string device_id;
  std::string node;
  /// Layers [first_layer, end_layer).
  std::size_t first_layer = 0;
  std::size_t end_layer = 0;
  /// Seconds per token this stage computes.
  double compute_seconds = 0;
  /// Seconds per token to pass activations to the next stage (0 for last).
  double transfer_seconds = 0;
  /// Bytes the stage needs: weights, KV caches and working memory
  /// (problem::stage_memory).
  std::uint64_t memory_used_bytes = 0;
  /// Free memory left on the device after loading the stage.
  std::int64_t memory_left_bytes = 0;
};

/// A placement: stages in pipeline order plus how good it is.
struct plan {
  std::vector<stage> stages;
  objective_kind objective = objective_kind::latency;
  /// The objective in seconds (for a blend, the weighted sum).
  double objective_seconds = 0;
  /// The objective in the integer units solvers compare (see cost_model).
  std::int64_t objective_units = 0;
  double latency_seconds = 0;
  double bottleneck_seconds = 0;
  int nodes_used = 0;
  /// Weight bytes put on devices that do not hold them now (the problem's
  /// resident layers; without them, every byte of the model).
  std::int64_t moved_bytes = 0;
  /// Time to bring those weights over the links, each layer from the
  /// fastest device that holds it (0 without resident layers): among plans
  /// of equal objective the solvers take the one with the least.
  double moving_seconds = 0;
  /// The same in whole microseconds (what the solvers compare).
  std::int64_t moving_us = 0;
  /// Best proven lower bound on the objective, in seconds.
  double lower_bound_seconds = 0;
  bool proven_optimal = false;
  double solve_seconds = 0;
  /// "exact", "node-blocks", "ordered", "exact-subset", "gecode" or
  /// "baseline".
  std::string solver;
};

/// Builds the plan of assignment `a` (figures filled, solver fields left
/// at their defaults).
plan make_plan(const cost_model& m, const assignment& a);

/// Every constraint of `p` that plan `x` breaks, as sentences; empty when
/// the plan is valid. Checked in exact bytes and FLOPs: layers covered once
/// and in order, eligible devices each used at most once, memory, thermal
/// caps, pinned layers, pinned devices and the stage limit.
std::vector<std::string> check_plan(const problem& p, const plan& x);

/// How far the plan may be above the optimum, as a fraction: objective /
/// lower bound - 1 (no plan is better than the bound); 0 when proven,
/// nullopt without a bound.
std::optional<double> certified_gap(const plan& x);

/// Prints `x` as a table for people.
void print_plan_table(std::ostream& out, const plan& x);

/// Writes `x` as one JSON object.
/// The plan as JSON (core/text/json.hpp), and written compact.
text::json plan_to_json(const plan& x);
void write_plan_json(std::ostream& out, const plan& x);

using text::json_escape;

} // namespace exo::placement
