#pragma once

#include <string>
#include <vector>

#include "core/placement/problem.hpp"

namespace exo::placement {

/// Reasons, for people, why `p` (valid) has no plan, most specific first:
/// "every device is excluded or drained", "layer 0 alone needs 5.1 GiB and
/// no device has it", "total free memory is 11.2 GiB short", conflicting or
/// impossible pins, stage limits. Never empty: when no simple reason
/// applies it says the layers do not pack into contiguous ranges.
std::vector<std::string> explain_infeasible(const problem& p);

} // namespace exo::placement
