#pragma once

/// The scenario runner: brings a parsed scenario up as real exo-node
/// processes on 127.0.0.1, or each in its own network namespace on a bridge
/// ("network": {"namespaces": true}, netns.hpp), with a throwaway PKI made
/// with exo_tls, one node config per node, port 0; runs its steps with
/// exo-console, prints each step with PASS/FAIL and its timing, and always
/// stops its processes, removes its network and its temp dir (unless keep).

#include "runtime/scenario/scenario.hpp"

#include <iosfwd>
#include <string>

namespace exo::scenario {

struct runner_options {
  bool keep = false;    ///< leave the temp dir (logs, configs, PKI)
  bool verbose = false; ///< print every command and its output
  /// Where exo-node, exo-console and exo-model are; empty: $EXO_BIN_DIR,
  /// next to this program, its build-tree siblings, then $PATH.
  std::string bin_dir;
  /// Where to write the JSON report (result, nodes, network, every step
  /// with when it started, how long it took, its result and detail); empty:
  /// none.
  std::string report;
  /// When >= 0, the bound of every run step's expect_step_within_pct
  /// (predicted against measured step time): a machine that runs other
  /// work beside the scenario (CI) passes a looser one than the file's,
  /// which `make scenarios` holds on a quiet machine.
  double step_within_pct = -1;
};

/// The exit status of a scenario that cannot run on this machine (it shapes
/// or partitions links and network namespaces are unavailable); CTest
/// counts it as skipped.
constexpr int skipped_exit = 77;

/// Runs `sc`; prints to `out`. Returns 0 when every step passed, 1 when one
/// failed (or the cluster could not be brought up), skipped_exit when it
/// cannot run here, 130 when interrupted. Never throws.
int run(const scenario& sc, const runner_options& opts, std::ostream& out);

} // namespace exo::scenario
