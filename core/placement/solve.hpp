#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/placement/device_score.hpp"
#include "core/placement/plan.hpp"
#include "core/placement/problem.hpp"

namespace exo::placement {

/// Which method(s) solve() runs.
enum class solver_kind {
  /// The dynamic program only (proves optimality; refuses huge state spaces).
  exact,
  /// The Gecode model only.
  gecode,
  /// The dynamic program, then Gecode seeded with its plan when the
  /// program did not prove optimality.
  both,
  /// exo's memory-proportional split (comparison only).
  baseline,
};

const char* to_string(solver_kind k);
std::optional<solver_kind> parse_solver_kind(const std::string& s);

struct solve_options {
  solver_kind solver = solver_kind::both;
  /// Override the problem's objective.
  std::optional<objective_kind> objective;
  std::optional<double> blend_weight;
  /// Limit for the Gecode search (the exact solver obeys only `cancel`).
  std::chrono::milliseconds time_limit{3000};
  /// Bound on the exact solver's table (entries of 12 bytes).
  std::size_t exact_max_entries = 16'000'000;
};

enum class solve_status {
  /// A plan proven optimal.
  optimal,
  /// A valid plan, not proven optimal (time limit or cancelled).
  feasible,
  /// Proven: no plan satisfies the constraints (see explanation).
  infeasible,
  /// Stopped (time limit or cancel) before any plan was found.
  no_plan,
};

const char* to_string(solve_status s);

struct solve_result {
  solve_status status = solve_status::no_plan;
  /// The best plan, with lower bound, proof flag, solver and solve time.
  std::optional<plan> best;
  /// For people: why there is no plan.
  std::vector<std::string> explanation;
  /// The memory-proportional baseline and the constraints it breaks.
  std::optional<plan> baseline;
  std::vector<std::string> baseline_violations;
  /// The seeds' weighted device score, per device (explanation only).
  std::vector<device_score> scores;
  /// Remarks such as "exact solver skipped: state space too large".
  std::vector<std::string> notes;
  double lower_bound_seconds = 0;
  double solve_seconds = 0;
  bool cancelled = false;
};

/// Called with each strictly better valid plan as the search finds it.
using plan_callback = std::function<void(const plan&)>;

/// Solves `p`: validates it (throws problem_error when invalid), runs the
/// chosen solvers, checks every plan with check_plan() before reporting it,
/// and explains infeasibility. Blocking; `cancel` (may be null) stops it
/// between search nodes, keeping the best plan so far. Every plan passed to
/// `on_improved` is strictly better than the one before (a lower objective,
/// or the same moving fewer weight bytes: problem::resident).
solve_result solve(const problem& p, const solve_options& opts = {},
                   const plan_callback& on_improved = {},
                   const std::atomic<bool>* cancel = nullptr);

} // namespace exo::placement
