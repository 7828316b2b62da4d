#pragma once

/// Every atom of exo's wire contract, in one place.

#include <caf/atom.hpp>

namespace exo {

// device actor
using info_atom = caf::atom_constant<caf::atom("info")>;
using allocate_atom = caf::atom_constant<caf::atom("allocate")>;
using adopt_atom = caf::atom_constant<caf::atom("adopt")>;
using free_atom = caf::atom_constant<caf::atom("free")>;
using write_atom = caf::atom_constant<caf::atom("write")>;
using read_atom = caf::atom_constant<caf::atom("read")>;
using copy_atom = caf::atom_constant<caf::atom("copy")>;
using sync_atom = caf::atom_constant<caf::atom("sync")>;
using telemetry_atom = caf::atom_constant<caf::atom("telemetry")>;
using pause_atom = caf::atom_constant<caf::atom("pause")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using compute_atom = caf::atom_constant<caf::atom("compute")>;
using verify_atom = caf::atom_constant<caf::atom("verify")>;
/// (fault_atom, spec, token): inject a fault into a simulated device.
using fault_atom = caf::atom_constant<caf::atom("fault")>;

// node, directory, inspection
using devices_atom = caf::atom_constant<caf::atom("devices")>;
using rescan_atom = caf::atom_constant<caf::atom("rescan")>;
using inspect_atom = caf::atom_constant<caf::atom("inspect")>;
using actors_atom = caf::atom_constant<caf::atom("actors")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
/// A link's figures (topology); a device's own rates, measured again.
using measure_atom = caf::atom_constant<caf::atom("measure")>;
using task_atom = caf::atom_constant<caf::atom("task")>;
/// (subscribe_atom, ...): thermal statuses (messages/thermal.hpp), member
/// events (messages/cluster.hpp).
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>;

} // namespace exo
