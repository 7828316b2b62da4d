#pragma once

// Throughput plans that may enter a node more than once: where network
// cards differ, two nodes with slow cards may only meet through a node
// with a fast one (a bridge), and a plan that passes such a node twice
// has a lower bottleneck than any plan that enters each node once (the
// node-block program's).
#include "core/placement/cost_model.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

namespace exo::placement {

/// A plan whose every stage and cut takes at most `limit` ticks, built as
/// a walk: the nodes joined by cuts of at most `limit` form a graph; nodes
/// are taken from the one whose devices can take the first layer, then
/// always the neighbour of those taken that adds the most layers, until
/// their devices can hold the model; the walk goes through a spanning tree
/// of them depth first (a node with several branches is passed several
/// times, each time with devices of its own, so it needs as many devices
/// as passes); along the walk each device takes as many layers as fit it
/// under the limit. nullopt when this finds none (there may still be
/// one). Not for pinned devices or layers.
std::optional<assignment> walk_plan(const cost_model& m, std::int64_t limit);

/// The walk plan of least bottleneck with a limit in [lower, upper)
/// (bisected: where a limit finds one, the next tries lower), or nullopt.
/// `upper` may be any larger value (no plan known): the limits then stop
/// at the slowest stage or cut a plan could have.
/// Stops at `deadline` or when `cancel` is set.
std::optional<assignment> least_walk_plan(
  const cost_model& m, std::int64_t lower, std::int64_t upper,
  std::chrono::steady_clock::time_point deadline,
  const std::atomic<bool>* cancel = nullptr);

} // namespace exo::placement
