// bench_placement: solves a generated suite of placement problems (32 to 128
// layers; 2 to 128 devices on 1 to 16 nodes, some with identical devices) and
// prints solve time, proof, gap to the lower bound, Gecode alone, and the
// memory-proportional baseline against our plan.
//
//   ./placement_bench [gecode-time-limit-ms]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/placement/all.hpp"

using namespace exo::placement;

namespace {

struct row {
  std::size_t layers, devices, nodes, identical;
  objective_kind kind;
  /// Stages have working memory (stage_extras), marked "+wm".
  bool working = false;
  /// Usable memory over the model's need.
  double slack = 1.3;
  /// A cluster of node kinds behind one switch (random_cluster) with this
  /// many node kinds; 0: random_problem.
  std::size_t node_kinds = 0;
  /// Two GPU models per node kind.
  bool two = false;
  /// A network card per node kind instead of one switch speed.
  bool mixed = false;
};

/// The generated cluster of a cluster row (node_kinds > 0).
problem cluster_of(const row& r, std::uint64_t seed) {
  random_cluster_options o;
  o.layers = r.layers;
  o.nodes = r.nodes;
  o.devices_per_node = r.devices / r.nodes;
  o.node_kinds = r.node_kinds;
  o.two_device_kinds = r.two;
  o.mixed_nics = r.mixed;
  o.memory_slack = r.slack;
  o.objective = r.kind;
  o.seed = seed;
  return random_cluster(o);
}

/// "lat switch", "thr nics", ...: a cluster row's label.
std::string cluster_label(const row& r) {
  return std::string{r.kind == objective_kind::throughput ? "thr"
                     : r.kind == objective_kind::blend    ? "blend"
                                                          : "lat"}
         + (r.mixed ? " nics" : " switch");
}

} // namespace

int main(int argc, char** argv) {
  long gecode_ms = argc > 1 ? std::atol(argv[1]) : 500;
  // "clusters": only the rows of generated clusters; "scan [N]": each
  // cluster row on N seeds (default 40), proofs and times.
  const bool clusters_only = argc > 2 && std::string(argv[2]) != "";
  std::printf("placement benchmark: solver 'both' (exact DP, Gecode when "
              "unproven), Gecode alone limited to %ld ms, 1 thread\n\n",
              gecode_ms);
  std::printf("%-13s %3s %3s %5s %7s %-12s %10s %6s %7s | %-14s | %9s %s\n",
              "objective", "L", "D", "nodes", "classes", "solver", "time ms",
              "proven", "gap %", "gecode alone", "base/ours",
              "base breaks memory");
  std::vector<row> rows;
  for (std::size_t L : {32, 80})
    for (std::size_t D : {2, 4, 8, 10, 12, 16}) {
      std::size_t nodes = D <= 2 ? 1 : D <= 4 ? 2 : D <= 8 ? 4 : 8;
      rows.push_back({L, D, nodes, 0, objective_kind::latency});
      if (D >= 8)
        rows.push_back({L, D, nodes, D - 6, objective_kind::latency});
    }
  rows.push_back({80, 10, 8, 0, objective_kind::throughput});
  rows.push_back({80, 16, 8, 10, objective_kind::throughput});
  rows.push_back({80, 10, 8, 0, objective_kind::blend});
  // Working memory per stage (and on the first and last stage).
  rows.push_back({80, 10, 8, 0, objective_kind::latency, true});
  rows.push_back({80, 16, 8, 10, objective_kind::latency, true});
  rows.push_back({80, 10, 8, 0, objective_kind::throughput, true});
  // Cluster scale: 24 to 128 devices on 16 nodes, all different or with
  // copies on one node (identical devices form classes); the model needs
  // about a third of the cluster's memory (slack 3), as when a cluster
  // serves a model that fits on part of it.
  rows.push_back({80, 24, 16, 0, objective_kind::latency, false, 3});
  rows.push_back({80, 32, 16, 0, objective_kind::latency, false, 3});
  rows.push_back({80, 32, 16, 0, objective_kind::throughput, false, 3});
  rows.push_back({80, 64, 16, 48, objective_kind::latency, false, 3});
  rows.push_back({128, 64, 16, 48, objective_kind::latency, false, 3});
  rows.push_back({128, 64, 16, 48, objective_kind::throughput, false, 3});
  rows.push_back({128, 128, 16, 112, objective_kind::latency, false, 3});
  if (clusters_only)
    rows.clear();
  // Clusters as people have them (random_cluster): 16 or 32 nodes of 2 to 8
  // kinds (one or two GPU models each) behind one switch, or with a network
  // card per node kind ("nics"); identical middle layers; the model needs a
  // third of the memory. Marked "cluster" in the objective column.
  for (auto kind : {objective_kind::latency, objective_kind::throughput}) {
    rows.push_back({80, 64, 16, 0, kind, false, 3, 4});
    rows.push_back({128, 64, 16, 0, kind, false, 3, 8});
    rows.push_back({128, 64, 16, 0, kind, false, 3, 4, true});
    rows.push_back({128, 64, 16, 0, kind, false, 3, 4, true, true});
    rows.push_back({128, 128, 16, 0, kind, false, 3, 4, true});
    rows.push_back({128, 128, 32, 0, kind, false, 3, 4});
  }
  rows.push_back({128, 64, 16, 0, objective_kind::blend, false, 3, 4, true});
  if (argc > 2 && std::string(argv[2]) == "scan") {
    // Many seeds of each cluster row: how often a proof, how fast.
    const int seeds = argc > 3 ? std::atoi(argv[3]) : 40;
    std::printf("\n%-13s %3s %3s %5s %6s %7s %9s %9s %8s\n", "cluster", "L",
                "D", "nodes", "kinds", "proven", "median ms", "max ms",
                "max gap %");
    for (const auto& r : rows) {
      if (r.node_kinds == 0)
        continue;
      int proven = 0;
      double worst_gap = 0;
      std::vector<double> times;
      for (int k = 0; k < seeds; ++k) {
        auto p = cluster_of(r, static_cast<std::uint64_t>(1000 + k));
        solve_options so;
        so.time_limit = std::chrono::milliseconds(gecode_ms);
        auto res = solve(p, so);
        times.push_back(res.solve_seconds * 1e3);
        if (!res.best)
          continue;
        if (res.best->proven_optimal)
          ++proven;
        worst_gap = std::max(worst_gap,
                             (res.best->objective_seconds
                                / res.best->lower_bound_seconds
                              - 1)
                               * 100);
      }
      std::sort(times.begin(), times.end());
      std::printf("%-13s %3zu %3zu %5zu %6zu %4d/%-2d %9.1f %9.1f %8.2f\n",
                  cluster_label(r).c_str(),
                  r.layers, r.devices, r.nodes, r.node_kinds * (r.two ? 2 : 1),
                  proven, seeds, times[times.size() / 2], times.back(),
                  worst_gap);
    }
    return 0;
  }
  int seed = 0;
  int cluster_seed = 0;
  for (const auto& r : rows) {
    problem p;
    if (r.node_kinds == 0) {
      random_problem_options o;
      o.layers = r.layers;
      o.devices = r.devices;
      o.nodes = r.nodes;
      o.identical = r.identical;
      o.objective = r.kind;
      o.working_memory = r.working;
      o.memory_slack = r.slack;
      o.seed = static_cast<std::uint64_t>(100 + seed++);
      p = random_problem(o);
    } else {
      p = cluster_of(r, static_cast<std::uint64_t>(500 + cluster_seed++));
    }
    std::string label = std::string{to_string(r.kind)}
                        + (r.working ? "+wm" : "");
    if (r.node_kinds > 0)
      label = cluster_label(r);
    cost_model m(p);
    solve_options so;
    so.time_limit = std::chrono::milliseconds(gecode_ms);
    auto res = solve(p, so);
    solve_options go = so;
    go.solver = solver_kind::gecode;
    auto g = solve(p, go);
    char gec[64] = "no plan";
    if (g.best) {
      double gap = res.best ? (g.best->objective_seconds
                               / res.best->objective_seconds - 1) * 100
                            : 0;
      std::snprintf(gec, sizeof(gec), "%s %.0fms +%.1f%%",
                    g.best->proven_optimal ? "opt" : "stop",
                    g.solve_seconds * 1e3, gap);
    }
    if (!res.best) {
      std::printf("%-13s %3zu %3zu %5zu %7zu %-12s %10.1f  (no plan: %s)\n",
                  label.c_str(), r.layers, r.devices, r.nodes,
                  r.node_kinds ? m.kinds() : m.classes(), "-",
                  res.solve_seconds * 1e3,
                  to_string(res.status));
      continue;
    }
    const auto& b = *res.best;
    double gap = b.lower_bound_seconds > 0
                   ? (b.objective_seconds / b.lower_bound_seconds - 1) * 100
                   : 0;
    double ratio = res.baseline->objective_seconds / b.objective_seconds;
    bool breaks = !res.baseline_violations.empty();
    std::printf("%-13s %3zu %3zu %5zu %7zu %-12s %10.1f %6s %7.2f | %-14s | "
                "%9.2f %s\n",
                label.c_str(), r.layers, r.devices, r.nodes,
                r.node_kinds ? m.kinds() : m.classes(), b.solver.c_str(), res.solve_seconds * 1e3,
                b.proven_optimal ? "yes" : "no", gap, gec, ratio,
                breaks ? "yes" : "no");
  }
  return 0;
}
