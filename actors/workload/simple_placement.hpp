#pragma once

/// The placement a job uses when asked for an even split (`run --stages K`,
/// and `exo-node run` on one node); otherwise the placement service's
/// solver places it (solver_placement.hpp). Layers
/// split evenly into K contiguous stages, stage i on member i mod N (the
/// coordinator first), and on each member its usable devices taken in turn,
/// one of every backend first (cpu, vulkan, cuda, hip, then simulated
/// ones), so that K
/// stages on one node spread over as many kinds of device as it has.

#include "messages/device.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace exo::workload {

/// One stage of a placed job.
struct stage_place {
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  std::string node;
  std::string device;      ///< device id
  std::string device_name;
};

/// The usable devices of one member, in the order stages take them.
std::vector<device_info> stage_order(std::vector<device_info> devices);

/// Places `k` stages of `n_layer` layers over `members` (name and
/// devices, the coordinator first), stage i on the i-th member (round
/// robin) that has a usable device. Members without one (their devices
/// lost, paused or gone) take no stage. Throws std::invalid_argument when
/// k is 0 or above n_layer, or no member has a usable device.
std::vector<stage_place>
simple_placement(std::uint32_t n_layer, std::uint32_t k,
                 const std::vector<std::pair<std::string,
                                             std::vector<device_info>>>&
                   members);

/// "stage 0: layers [0, 2) on node-a cpu0 (CPU ...)" lines.
std::string describe(const std::vector<stage_place>& plan);

} // namespace exo::workload
