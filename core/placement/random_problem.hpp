#pragma once

#include <cstddef>
#include <cstdint>

#include "core/placement/problem.hpp"

namespace exo::placement {

/// Knobs of a generated placement problem (for tests and benchmarks).
struct random_problem_options {
  std::size_t layers = 32;
  std::size_t devices = 4;
  std::size_t nodes = 2;
  /// How many devices are copies of the device before them (same node,
  /// speed and memory), so that they fall into classes.
  std::size_t identical = 0;
  /// Total usable memory over total need (>= 1 usually leaves room).
  double memory_slack = 1.4;
  /// Give about a third of the devices a thermal cap.
  bool thermal_caps = false;
  /// Pin one small layer range to a random device, pin one device, exclude
  /// one device, limit the stages.
  bool operator_constraints = false;
  /// Give stages working memory (stage_extras): every stage 5-30% of a
  /// layer, the first up to half a layer, the last 20-100%.
  bool working_memory = false;
  objective_kind objective = objective_kind::latency;
  std::uint64_t seed = 1;
};

/// Knobs of a generated cluster as people have them: nodes of a few kinds
/// (each kind one or two GPU models, the same on every node of the kind),
/// all behind one switch, serving a transformer whose middle layers are
/// alike.
struct random_cluster_options {
  std::size_t layers = 80;
  std::size_t nodes = 16;
  std::size_t devices_per_node = 4;
  /// Kinds of node; nodes are dealt to them in turn.
  std::size_t node_kinds = 4;
  /// Each node kind has two GPU models (half of its devices each).
  bool two_device_kinds = false;
  /// Each node kind has its own network card (latency and bandwidth): a
  /// link is as slow as its slower end. Otherwise every link is alike.
  bool mixed_nics = false;
  /// Total usable memory over total need.
  double memory_slack = 3;
  objective_kind objective = objective_kind::latency;
  std::uint64_t seed = 1;
};

/// A reproducible cluster problem (always valid): node i is "n<i>", its
/// devices "n<i>/gpu<j>".
problem random_cluster(const random_cluster_options& o);

/// A reproducible random problem: the first and last layers are larger
/// (embeddings, output head), devices span two orders of magnitude of speed,
/// links span LAN to WAN. Always valid (passes validate()).
problem random_problem(const random_problem_options& o);

} // namespace exo::placement
