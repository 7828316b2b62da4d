#pragma once

#include <iosfwd>

namespace exo::placement {

/// The `plan` command:
///   plan --problem FILE.json [--objective latency|throughput|blend]
///        [--blend-weight W] [--time-limit MS] [--json]
///        [--solver exact|gecode|both|baseline]
/// argv[0] is the program name; a leading "plan" word is skipped. Prints the
/// plan (a table, or JSON with --json) to `out`. Returns 0 with a plan, 2
/// on bad input (the reason on `err`), 1 when infeasible or stopped without
/// a plan (the explanation on `err`, and in the JSON with --json).
int run_plan_command(int argc, char** argv, std::ostream& out,
                     std::ostream& err);

} // namespace exo::placement
