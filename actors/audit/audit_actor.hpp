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
/// With a signing key it also signs checkpoints of its log (every
/// `every_records` records, or every `every` when the head moved, and when
/// it stops) into <dir>/checkpoints, and witnesses its peers' checkpoints
/// in <dir>/witness/<node>.checkpoint (see messages/audit.hpp):
///   service -- (audit_atom, checkpoint_atom) -> std::string (latest line)
///   service -- (audit_atom, witness_atom, audit_checkpoint) -> ok
///   service -- (audit_atom, witness_atom, std::string node)
///              -> audit_checkpoint
///   service -- (audit_atom, verify_atom, lines, notes) -> console_reply
/// A peer's checkpoint below the one witnessed is audited as
/// audit_rollback, another head at the same seq as audit_fork; both are
/// kept in <dir>/witness/<node>.conflicts (at most 100 lines).
///
/// TIME is µs since the Unix epoch or UTC ISO 8601. Entries whose type or
/// severity is unknown are counted and dropped, never written.

#include "core/audit/audit_log.hpp"
#include "core/audit/query.hpp"
#include "messages/audit.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>

namespace exo::tls {
class private_key;
class trust_store;
} // namespace exo::tls

namespace exo::audit {

/// Signed checkpoints of the log and the witnessing of peers' checkpoints.
struct checkpoint_config {
  /// The node's key and certificate; no key: no checkpoints are signed.
  std::shared_ptr<const tls::private_key> key;
  std::string cert_pem;
  /// The cluster CA; no CA: peers' checkpoints are refused.
  std::shared_ptr<const tls::trust_store> ca;
  /// Sign when this many records were appended since the last checkpoint.
  std::uint64_t every_records = 1000;
  /// ... or when this much time passed and the head moved.
  std::chrono::milliseconds every{60000};
  /// Own checkpoints kept in <dir>/checkpoints (the file holds K..2K).
  std::size_t keep = 1000;
  /// Seconds since the epoch; defaults to the system clock.
  std::function<std::int64_t()> clock;
};

struct audit_actor_config {
  /// directory, node, buffering, fsync policy, rotation.
  audit_log_options log;
  /// Buffered records are written at least this often.
  std::chrono::milliseconds flush_interval{1000};
  checkpoint_config checkpoints;
  /// Where the operator is told that the log cannot be written (a full
  /// disk, a file too large): one line when a failure starts or changes,
  /// then at most one a minute while it lasts. Default: stderr.
  std::function<void(const std::string&)> operator_log;
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
