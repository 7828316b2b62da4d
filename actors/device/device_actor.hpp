#pragma once

/// The device actor: the only owner of one backend device. It serializes
/// work on its mailbox, hands out opaque handles to pooled buffers, checks
/// every offset and length, refuses new compute while paused, and turns the
/// device's error values into exo errors. It runs detached (its own thread):
/// device calls may block (a synchronize, a hung driver).
///
/// Who may send what (issue 6): the token-bearing variants
/// (messages/access.hpp) are for clients and are always checked against the
/// node's access policy. The variants without a token are for actors of the
/// same node (shards, thermal monitors, the node, console services), which
/// are trusted in-process principals; from an actor of another node, or
/// with no sender at all, they are refused with access_denied and audited.
/// The one exception is inspect_atom (counters only), which the console's
/// `inspect` delegates across nodes.
///
/// Device tasks (task_atom, device_task) run a closure of this process on
/// the actor's thread with the device in reach (device_task.hpp): shards
/// keep their stage here and run each step as one task, which reaches the
/// kernels directly instead of as kernel_call messages. A task's kernels
/// count as one audited compute batch; compute tasks are held (in order)
/// while the device is paused and run when it resumes.

#include "core/access/shared_policy.hpp"
#include "backends/backend.hpp"
#include "messages/device.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace exo::device {

struct device_actor_config {
  std::string node;  ///< name of the node the device sits on
  /// Bytes of freed buffers kept for reuse.
  std::uint64_t pool_cache_limit = 256u << 20;
  /// A freed buffer nobody reused for this long goes back to the device
  /// (checked on each free and on each telemetry request, which the
  /// node's thermal monitor sends every devices.telemetry_interval, so an
  /// idle device gives its cache back too). 0: kept until memory runs out.
  std::chrono::milliseconds pool_cache_idle{10000};
  /// Timeout of each chunk a copy sends to a peer device actor.
  std::chrono::milliseconds peer_timeout{10000};
  /// Set when discovery could not verify the device: every operation but
  /// info/inspect is refused with this reason.
  std::string failed_reason;
  /// Kept alive as long as the actor: whatever owns the device (a backend
  /// registry), so the device outlives every call the actor makes.
  std::shared_ptr<void> keepalive;
  /// The node's audit sink (optional): allocate, free, copy, compute, sync
  /// and every access denial are sent to it as (audit_atom, audit_entry).
  caf::actor audit;
  /// Batched compute (a shard's step: one event per token) is audited in
  /// groups: each event stamped with its own time, sent to the sink as
  /// (audit_atom, std::vector<audit_entry>) at most this long after the
  /// first of the group, when the group is full, before any other event of
  /// this device and when the actor exits. One message per step woke the
  /// sink's thread at every token. Zero sends each event at once (the node
  /// does so when its audit log fsyncs every record).
  std::chrono::milliseconds audit_batch_interval{100};
  /// The node's access policy (optional). Token-bearing requests
  /// (messages/access.hpp) are checked against it: permission, device scope,
  /// memory quota (reserved on allocate, released on free) and rate limit.
  /// Without a policy they are refused with access_denied.
  std::shared_ptr<access::shared_policy> access;
  /// A device that measures its own rates (the cpu device with
  /// devices.cpu_measure_rates) measures them again once it has run
  /// nothing for this long (backend::device::measure_rates_again), and
  /// again after each later spell of work, or every ten such periods
  /// while it stays idle. The figures a node measures as it starts are
  /// those of a moment (other programs starting with it, a loaded CI
  /// machine): placement predicts from what the device does now. 0: never.
  std::chrono::milliseconds measure_again{0};
};

/// Spawns the actor for `dev`, which must outlive it.
exo::device_actor spawn_device_actor(caf::actor_system& sys,
                                     backend::device& dev,
                                     device_actor_config cfg);

/// Builds the wire description of a device.
device_info describe(backend::device& dev, const std::string& node);

} // namespace exo::device
