#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace exo::audit {

/// Kinds of audited events. The names (see `to_string`) are the wire names
/// written into the log; never rename one, only append.
enum class event_type : std::uint8_t {
  device_list,
  device_info,
  device_allocate,
  device_free,
  device_copy,
  device_p2p_copy,
  device_compute,
  device_sync,
  monitoring_read,
  access_granted,
  access_denied,
  policy_change,
  token_issued,
  token_revoked,
  member_joined,
  member_left,
  placement_decided,
  thermal_warn,
  thermal_pause,
  thermal_resume,
  backend_start,
  backend_stop,
  config_load,
  quota_exceeded,
  rate_limited,
  audit_recovered,
  job_submitted,
  job_finished,
  join_refused, ///< a peer's join handshake failed (name, proof, cert)
  node_leave,   ///< a client told this node to leave the cluster
  /// A TLS peer passed a limit of network.limits (connections, message
  /// size, buffered bytes, time, rate) or failed its handshake.
  connection_refused,
  /// The gateway refused an HTTP request by a limit (headers, body,
  /// connections, completions admitted).
  request_refused,
  /// A node's log is behind a checkpoint of it: offered by a peer below
  /// the one witnessed, or found at start below its own latest.
  audit_rollback,
  /// Two histories of a node's log: another head at a witnessed seq, or a
  /// new chain of checkpoints past it.
  audit_fork,
  /// A running job lost a stage (its node died, its device went away) and
  /// was re-placed on the survivors.
  job_recovered,
  /// A fault was injected into a simulated device (console "dev fault").
  device_fault,
};

/// Number of event types.
inline constexpr std::size_t event_type_count = 36;

/// How serious an event is.
enum class severity : std::uint8_t { debug, info, warning, error, critical };

/// Returns the wire name of `t`, e.g. "device_allocate".
std::string_view to_string(event_type t) noexcept;

/// Returns the wire name of `s`, e.g. "warning".
std::string_view to_string(severity s) noexcept;

/// Parses a wire name; returns nothing for an unknown name.
std::optional<event_type> parse_event_type(std::string_view name) noexcept;

/// Parses a wire name; returns nothing for an unknown name.
std::optional<severity> parse_severity(std::string_view name) noexcept;

/// Free-form key/value details of an event (sorted, so serialisation is
/// canonical).
using details_map = std::map<std::string, std::string>;

/// An event as submitted by a component; the log adds sequence number, time,
/// node and the hash chain.
struct event {
  event_type type = event_type::config_load;
  severity level = severity::info;
  /// Who caused the event ("" for the system itself).
  std::string principal;
  details_map details;
  /// Microseconds since the Unix epoch; nothing means "now" (the log's clock).
  std::optional<std::int64_t> time_us;
};

} // namespace exo::audit
