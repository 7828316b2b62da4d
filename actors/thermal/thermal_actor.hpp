#pragma once

/// The thermal monitor (one per device) and the node's thermal service.
///
/// Monitor: every `interval` it asks its device actor for telemetry, feeds
/// the sample to a `thermal_policy` (online RC fit + prediction), and on a
/// transition sends pause(reason) / resume to the device actor, an audit
/// event to the sink and (thermal_atom, thermal_status) to subscribers.
///
///   timer   -- (tick_atom) --> monitor                   (sample, no reply)
///   anyone  -- (thermal_atom, tick_atom) --> monitor -> thermal_status
///              (sample now; the reply comes after pause/resume is applied)
///   anyone  -- (thermal_atom) --> monitor -> thermal_status (latest)
///   jobs    -- (thermal_atom, subscribe_atom, caf::actor) --> monitor
///
/// Devices that report no temperature are sampled but never paused; their
/// status says has_temperature = false.
///
/// Service ("thermal" in the directory and the console): asks the node for
/// its device actors, spawns one monitor per device, and answers console
/// `thermal` with a cluster overview. Peers' statuses arrive by broadcast:
/// every `report_interval` each node's service broadcasts a typed report
/// (thermal_atom, report_atom, statuses) through the gate to the "thermal"
/// service of every peer, which checks it (check_report) and caches it.

#include "core/thermal/thermal_policy.hpp"
#include "messages/device.hpp"
#include "messages/thermal.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace exo::thermal {

struct thermal_actor_config {
  std::string node;
  std::string device;           ///< device id
  exo::device_actor target;     ///< the device actor it pauses/resumes
  thermal_config policy;
  caf::actor audit;             ///< optional audit sink
  /// Sampling period; 0: sample only on (thermal_atom, tick_atom).
  std::chrono::milliseconds interval{1000};
  /// Seconds on a monotonic clock; default: steady_clock. Tests pass the
  /// simulated device's clock.
  std::function<double()> clock;
};

/// Spawns a monitor.
caf::actor spawn_thermal_actor(caf::actor_system& sys,
                               thermal_actor_config cfg);

struct thermal_service_config {
  std::string node;
  caf::actor node_actor; ///< (devices_atom, actors_atom) -> device actors
  caf::actor gate;       ///< optional: broadcasts to peers
  caf::actor audit;      ///< optional
  thermal_config policy; ///< interval_s comes from telemetry_interval
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds report_interval{2000};
};

/// Spawns the thermal service (console command "thermal").
caf::actor spawn_thermal_service(caf::actor_system& sys,
                                 thermal_service_config cfg);

/// The most statuses one node's report may carry.
constexpr std::size_t max_report_statuses = 256;

/// Checks a report a peer's thermal service sent (typed, but untrusted):
/// 1 to max_report_statuses statuses of one node, names of bounded length,
/// finite numbers. Returns what is wrong, or nothing.
std::optional<std::string>
check_report(const std::vector<thermal_status>& xs);

/// The console overview: hottest device, paused devices, time to limit.
std::string render_overview(const std::vector<thermal_status>& xs);

} // namespace exo::thermal
