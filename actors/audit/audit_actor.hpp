#pragma once

/// The audit sink: one per node, the only writer of the node's hash-chained
/// audit log (<state_dir>/audit). It runs detached (appends and fsyncs
/// block), buffers records and flushes them on a timer, and answers the
/// console:
///
///   any local actor -- (audit_atom, audit_entry) --> sink      (no reply)
///   device actor -- (audit_atom, std::vector<audit_entry>) --> sink
///                   (no reply; entries in order, each as above)
///   console -- (console_atom, "audit", "query [type=T] [principal=P]
///              [since=TIME] [until=TIME] [after=SEQ] [limit=N]") -> reply
///   console -- (console_atom, "audit", "verify") -> reply (chain check)
///   tests   -- (audit_atom, caf::flush_atom) -> std::uint64_t (last seq)
///
/// TIME is µs since the Unix epoch or UTC ISO 8601. Entries whose type or
/// severity is unknown are counted and dropped, never written.

#include "core/audit/audit_log.hpp"
#include "core/audit/query.hpp"
#include "messages/audit.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <string>

namespace exo::audit {

struct audit_actor_config {
  /// directory, node, buffering, fsync policy, rotation.
  audit_log_options log;
  /// Buffered records are written at least this often.
  std::chrono::milliseconds flush_interval{1000};
};

/// Spawns the sink. Throws `audit_error` when the log cannot be opened.
caf::actor spawn_audit_actor(caf::actor_system& sys, audit_actor_config cfg);

/// Parses the arguments of "audit query" ("type=T principal=P ...").
/// Returns an error message, empty on success.
std::string parse_query_args(const std::string& args, audit_query& out);

/// The wire form of an event (for senders that hold an audit::event).
audit_entry to_entry(const event& ev);

/// Sends `ev` to `sink` (nothing when `sink` is invalid).
void emit(const caf::actor& sink, const event& ev);

} // namespace exo::audit
