#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/placement/cost_model.hpp"

namespace exo::placement {

/// How an exact solve ended.
enum class exact_status {
  /// `best` is optimal (for a blend: see exact_result::lower_bound).
  solved,
  /// No plan satisfies the constraints (proven).
  infeasible,
  /// The state space exceeds the limit; nothing was computed.
  too_large,
  /// The cancel flag was raised.
  cancelled,
};

struct exact_result {
  exact_status status = exact_status::infeasible;
  assignment best;
  /// Objective units of `best`.
  std::int64_t objective = 0;
  /// Proven lower bound in objective units. Equals `objective` for the
  /// latency and throughput objectives; for a blend, the least over
  /// bottlenecks B of the latency optimum under B plus B's share, found
  /// with at most 48 runs of the program (exact_solver.cpp): it equals
  /// `objective` unless runs of bottlenecks were left unexplored.
  std::int64_t lower_bound = 0;
  /// Number of DP states (class-count vectors).
  std::size_t states = 0;
  bool proven_optimal() const {
    return status == exact_status::solved && objective == lower_bound;
  }
};

/// Exact dynamic program over (devices used, as a count per class of
/// interchangeable devices; layers placed; class of the last stage).
///
/// f[S][l][k] is the best cost of placing layers [0, l) on the devices of S
/// with the last stage on class k; a stage [l, e) on class k' extends it
/// through g[S][l][k'] = min over k of f[S][l][k] (+ or max) the transfer
/// from k's node to k''s node at cut l. Class identity includes the node,
/// so transfers are exact. Memory, thermal caps and pins come from
/// cost_model::max_end; pinned devices and max_stages are checked on the
/// final states. Runs in O(states * L * K * (K + L)).
///
/// `max_entries` bounds states * (L + 1) * K (12 bytes each).
/// `deadline`: a blend's bisection over bottlenecks stops there (its plan
/// then keeps a certified gap); the programs themselves obey `cancel`.
exact_result solve_exact(
  const cost_model& m, const std::atomic<bool>* cancel = nullptr,
  std::size_t max_entries = 16'000'000,
  std::chrono::steady_clock::time_point deadline =
    std::chrono::steady_clock::time_point::max());

/// A cheap valid lower bound in objective units: the same program with
/// devices allowed to repeat (no device subsets), stage limits, pinned
/// devices and the node penalty dropped. O(L * n * (n + L)). nullopt when
/// even the relaxation has no plan (then the problem is infeasible).
std::optional<std::int64_t> relaxed_lower_bound(const cost_model& m);

/// Number of DP states of `m` (product of class size + 1), saturating.
std::size_t exact_state_count(const cost_model& m);

} // namespace exo::placement
