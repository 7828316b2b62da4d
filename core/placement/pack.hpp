#pragma once

#include <string>
#include <vector>

#include "core/placement/problem.hpp"
#include "core/placement/solve.hpp"

namespace exo::placement {

/// One job of a packing and what became of it.
struct packed_job {
  /// The job's problem as solved: its devices' memory is what the jobs
  /// before it left.
  problem placed_on;
  solve_result result;
  /// Empty when the job has a plan; else why not, for people: the
  /// solver's explanation and what the jobs before it hold.
  std::vector<std::string> refused;
};

/// Places several jobs on one cluster together, in the order given (the
/// first job first: the order is the priority): each job is solved on the
/// memory the plans of the jobs before it leave on every device (devices
/// are matched by id; a device left with nothing is excluded). A job that
/// does not fit is refused with the reason and takes no memory; the jobs
/// after it are still placed. Throws problem_error for an invalid problem
/// (naming the job).
std::vector<packed_job> pack_jobs(const std::vector<problem>& jobs,
                                  const solve_options& opts = {});

} // namespace exo::placement
