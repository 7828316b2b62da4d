#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/placement/cost_model.hpp"

namespace exo::placement {

/// Nodes that may be swapped for one another without changing any plan's
/// cost: the same devices (as a multiset of kinds) and, to every other
/// node, the same transfer at every cut as the other members of their
/// class have. Nodes behind one switch with the same hardware fall into
/// one class; a node whose links differ stands alone.
struct node_classes {
  /// Class of each model node (cost_model::node indices).
  std::vector<int> class_of;
  /// Nodes of each class, ascending.
  std::vector<std::vector<int>> members;
};

node_classes interchangeable_nodes(const cost_model& m);

/// Whether, for latency, every plan whose first and last layer sit on
/// different nodes can be rearranged into one that enters each node once
/// (a block plan), no slower. Between two visits of a node A, ... A S A Y
/// becomes ... A A S Y (or, when the second visit holds the last layer,
/// X A S A becomes X S A A): the stages keep their devices and lengths,
/// the same nodes are used, and the cuts S|A and A|Y (X|A and A|S) become
/// A|A and S|Y (X|S and A|A). That is no slower when
/// - the objective is latency, nothing is pinned and no stage limit binds;
/// - every middle layer (neither the first nor the last) costs each device
///   the same ticks and a window of middle layers fits a device by its
///   length alone (the moved stages hold only middle layers);
/// - a cut costs the same wherever it falls (between layers 1 and L - 1);
/// - cut(s, y) + cut(a, a) <= cut(s, a) + cut(a, y) for every node a and
///   nodes s, y other than a (a triangle inequality with the cut inside a).
/// Each step merges two visits, so the best block plan (the node-block
/// program's, exact among them) is at most every such plan; the plans
/// whose first and last layer share a node are bounded by
/// returning_lower_bound(). False beyond 256 nodes (the check is cubic).
bool block_plans_suffice(const cost_model& m);

/// What solve_node_blocks() found.
struct node_block_result {
  /// A plan was found (`best`, `objective`).
  bool found = false;
  assignment best;
  /// Objective units of `best`.
  std::int64_t objective = 0;
  /// Why the program did not run ("" when it ran): constraints it cannot
  /// express, a table beyond the limit, cancelled.
  std::string skipped;
  /// Number of node-visit states (visits per node class).
  std::size_t states = 0;
};

/// The best plan among those that enter every node at most once (a node's
/// stages are consecutive), exact over them: a program over (nodes
/// visited, as a count per class of interchangeable nodes; layers placed;
/// class of the node last visited), whose steps are whole node visits,
/// each the best run of layers [l, e) on one node's devices (a program of
/// its own over the devices used on that node). Its table grows with the
/// product of (class size + 1), not with the devices: 64 devices on 16
/// nodes of four kinds are 5^4 visit states.
///
/// It does not prove optimality by itself (a plan may leave a node and
/// come back); solve() proves its plans with window_lower_bound(). Skipped
/// (nothing found) with pinned devices, pinned layers or a stage limit,
/// more than 254 classes, or more than `max_entries` table entries.
///
/// `lower`: a valid lower bound on the objective (solve() passes the
/// window bound); the program then first skips the states that cannot
/// finish within 1% (then 10%) of it — the same plan, found faster when the
/// bound is tight. `deadline`: the program stops there as when cancelled
/// (skipped "out of time", nothing found).
node_block_result solve_node_blocks(
  const cost_model& m, const std::atomic<bool>* cancel = nullptr,
  std::size_t max_entries = 16'000'000,
  std::optional<std::int64_t> lower = std::nullopt,
  std::chrono::steady_clock::time_point deadline =
    std::chrono::steady_clock::time_point::max());

} // namespace exo::placement
