#pragma once

#include <string>
#include <vector>

#include "core/placement/problem.hpp"

namespace exo::placement {

/// Why a device ranks where it does, in the seeds' weighted score: each
/// part in [0, 1] relative to the best device, total = 0.40 compute + 0.30
/// memory + 0.15 network + 0.10 thermal + 0.05 bandwidth. An explanation
/// for people, never the objective.
struct device_score {
  std::string device_id;
  double compute = 0;
  double memory = 0;
  double network = 0;
  double thermal = 0;
  double bandwidth = 0;
  double total = 0;
};

/// Scores every device of `p` (valid), in the order of p.devices.
std::vector<device_score> score_devices(const problem& p);

} // namespace exo::placement
