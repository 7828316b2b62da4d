#pragma once

#include <cstdint>
#include <optional>

#include "core/placement/cost_model.hpp"

namespace exo::placement {

/// What capacity_lower_bound() found, in ticks.
struct capacity_bound {
  /// Compute time of every plan, at least: the Lagrangian dual of layers
  /// assigned to devices with their memory (and thermal) capacities, order
  /// and contiguity dropped.
  std::int64_t compute = 0;
  /// Transfer time of every plan, at least: the stages and nodes the
  /// model's memory needs (fewest devices, fewest nodes), each cut at the
  /// cheapest transfer of its kind.
  std::int64_t transfers = 0;
  /// The bottleneck of every plan, at least.
  std::int64_t bottleneck = 0;
  /// Fewest devices and nodes whose memory holds the model.
  int min_devices = 0;
  int min_nodes = 0;
  /// The bound in objective units (cost_model::combine of the above and
  /// the node penalty of min_nodes).
  std::int64_t objective = 0;
};

/// A valid lower bound on the objective of every plan of `m`, found
/// without search in O(iterations * layers * devices): strong where the
/// exact program's table is too large (many different devices), because
/// it keeps what the simple bounds drop — a device holds only what fits
/// in its memory, so the fastest device cannot take the whole model.
/// nullopt when even the relaxation has no solution (the devices' memory
/// together is less than the model's).
std::optional<capacity_bound> capacity_lower_bound(const cost_model& m);

/// A valid lower bound in objective units that keeps what the capacity
/// bound drops: each device runs one window of layers that fits it (with
/// its stage's working memory), the windows of a plan are disjoint and
/// cover the model, the first and the last layer are where they are, and
/// every node a plan enters but the one with the cheapest links costs at
/// least its cheapest cut to another node (or, charged by potentials, each
/// visit twice its potential; or both: potentials fitted to what each
/// network card adds and residual hops for the slower card). Latency: a knapsack over
/// (layers covered, ends covered), device by device, node by node,
/// O(devices * layers^2). Bottleneck: the least T at which windows of at
/// most T ticks cover the model within the nodes that cuts of at most T
/// join. Blend: for each bottleneck B (where a window's ticks start or
/// stop fitting under it), the latency bound over windows of at most B
/// plus B's share, the least over B. Exact for pipelines of identical
/// middle layers on a uniform network, where the node-block program's
/// plans meet it. nullopt when no cover exists (then no plan exists).
std::optional<std::int64_t> window_lower_bound(const cost_model& m);

/// The window bound's part for the plans that come back: a valid lower
/// bound (latency, ticks) on every plan whose first and last layer sit on
/// one node and that visits another node between them (such a plan enters
/// that node twice). nullopt for other objectives, fewer than two layers,
/// or when no such plan can exist. See block_plans_suffice().
std::optional<std::int64_t> returning_lower_bound(const cost_model& m);

} // namespace exo::placement
