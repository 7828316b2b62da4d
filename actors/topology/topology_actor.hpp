#pragma once

/// The topology actor: measures links over the real transport. Asked
/// (measure_atom, from, to, peer gate, fresh), it sends round-trip probes
/// to the peer (ping_atom, each answered at once), then streams bulk
/// chunks (bulk_atom) within the bounds of a bulk_phase (link_stats.hpp)
/// and answers with a link_info: RTT median and p99, jitter, loss and
/// bandwidth. The gate asks it for every peer periodically and, fresh,
/// when the console says "measure". A peer's bandwidth is measured at most
/// every bulk_interval unless fresh (in between its last figure is
/// reported again), one bulk phase at a time, so that measuring never
/// takes much of a slow link and two measurements do not share one.

#include "actors/topology/link_stats.hpp"

#include <caf/fwd.hpp>
#include <caf/actor.hpp>

#include <chrono>

namespace exo::topology {

struct topology_config {
  int probes = 20; ///< round trips per measurement
  bulk_phase::limits bulk;
  /// A peer's bandwidth is measured again after this; in between the last
  /// figure is reused.
  std::chrono::milliseconds bulk_interval{30000};
};

caf::actor spawn_topology(caf::actor_system& sys, topology_config cfg = {});

} // namespace exo::topology
