#pragma once

/// The wire contract of a thermal monitor (one per device).
///
///   monitor -- telemetry --> device          every devices.telemetry_interval
///   monitor -- pause(reason) / resume --> device
///   monitor -- (audit_atom, audit_entry) --> audit sink
///   monitor -- (thermal_atom, thermal_status) --> subscribers (jobs)
///   anyone  -- (thermal_atom) --> monitor -> thermal_status
///   anyone  -- (thermal_atom, subscribe_atom, caf::actor) --> monitor
///
/// Between the thermal services of the nodes, every report_interval
/// (through the gates: broadcast_atom with a typed message):
///   service -- (thermal_atom, report_atom, std::vector<thermal_status>)
///           --> every peer's service -> ok (checked: thermal::check_report)
///
/// When a monitor of its node pauses a device, through the gates:
///   service -- (thermal_atom, thermal_status) --> the "jobs" service of
///              every node, this one too -> ok: the runs with a stage on
///              the device move off it (job_coordinator; a peer may send
///              only statuses of its own devices)

#include "messages/atoms.hpp"
#include "messages/wire_real.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>

namespace exo {

using thermal_atom = caf::atom_constant<caf::atom("thermal")>;
using report_atom = caf::atom_constant<caf::atom("report")>;

/// What a thermal monitor knows about its device.
struct thermal_status {
  std::string node;
  std::string device;
  bool has_temperature = false; ///< false: the device reports no temperature
  double temp_c = 0;
  double power_w = 0;
  double predicted_c = 0; ///< highest predicted over the horizon
  double limit_c = 0;
  double time_to_limit_s = -1; ///< -1: never at the current power
  std::string state;           ///< "normal", "warm", "paused"
  bool fitted = false;         ///< model fitted online (not the prior)
  std::string reason;          ///< cause of the latest transition
  std::uint64_t transitions = 0;
  double utilization = -1;     ///< busy fraction 0..1; -1: not reported
  std::uint32_t clock_mhz = 0; ///< 0: not reported
  /// The highest temperature read since the monitor started (0: none yet):
  /// whether the device ever crossed its limit.
  double peak_c = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, thermal_status& x) {
  return wire(f, caf::meta::type_name("exo.thermal_status"), x.node, x.device,
              x.has_temperature, x.temp_c, x.power_w, x.predicted_c, x.limit_c,
              x.time_to_limit_s, x.state, x.fitted, x.reason, x.transitions,
              x.utilization, x.clock_mhz, x.peak_c);
}

} // namespace exo
