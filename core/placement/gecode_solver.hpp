#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "core/placement/cost_model.hpp"

namespace exo::placement {

struct gecode_options {
  /// Search stops after this long (the best plan so far is kept).
  std::chrono::milliseconds time_limit{3000};
  /// Search stops between nodes when this flag becomes true.
  const std::atomic<bool>* cancel = nullptr;
  /// Objective units of the best known plan; only strictly better plans
  /// are searched for.
  std::optional<std::int64_t> upper_bound;
};

struct gecode_result {
  /// The best plan found (none if none better than upper_bound was found).
  std::optional<assignment> best;
  std::int64_t objective = 0;
  /// The search space was exhausted: `best` (or, without one, the plan of
  /// upper_bound) is optimal, or the problem is infeasible.
  bool complete = false;
  /// The cancel flag stopped the search.
  bool cancelled = false;
  unsigned long nodes = 0;
  unsigned long solutions = 0;
};

/// Called with each strictly better plan and its objective units.
using gecode_solution_callback =
  std::function<void(const assignment&, std::int64_t)>;

/// Branch and bound over the Gecode model of `m` (see placement_space in
/// gecode_solver.cpp), one thread, deterministic.
gecode_result solve_gecode(const cost_model& m, const gecode_options& opts,
                           const gecode_solution_callback& on_solution = {});

} // namespace exo::placement
