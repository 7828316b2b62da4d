#pragma once

/// The topology actor: measures links over the real transport. Asked
/// (measure_atom, from, to, peer gate), it sends round-trip probes to the
/// peer (ping_atom, each answered at once), then streams bulk chunks
/// (bulk_atom, 1 MiB each, a few in flight) and answers with a link_info:
/// RTT median and p99, jitter, loss and bandwidth. The gate asks it for every
/// peer periodically and when the console says "measure".

#include <caf/fwd.hpp>
#include <caf/actor.hpp>

namespace exo::topology {

struct topology_config {
  int probes = 20;                 ///< round trips per measurement
  int bulk_chunks = 16;            ///< 1 MiB chunks in the bulk phase
  int bulk_window = 4;             ///< chunks in flight at once
};

caf::actor spawn_topology(caf::actor_system& sys, topology_config cfg = {});

} // namespace exo::topology
