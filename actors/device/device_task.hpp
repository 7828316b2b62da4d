#pragma once

/// What a device task (messages/device.hpp) may do on the device actor's
/// thread. The actor makes one context per task; a task that answers later
/// (after a peer's reply) must not keep it.

#include "backends/result.hpp"
#include "messages/device.hpp"
#include "core/model/device_stage.hpp"

#include <caf/actor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace exo::device {

class task_context {
public:
  virtual ~task_context();

  /// The device as device_ops over the actor's buffer pool (its handles).
  /// Shared: a stage the task creates keeps it; it stops working (errors,
  /// no-op frees) once the actor is gone.
  virtual std::shared_ptr<model::device_ops> ops() = 0;

  /// Copies `bytes` between two buffers of this device.
  virtual backend::status copy(handle_id src, std::uint64_t src_off,
                               handle_id dst, std::uint64_t dst_off,
                               std::uint64_t bytes)
    = 0;

  /// Writes `data` into buffer `dst` at `offset` of device actor `peer` (of
  /// this node); `done` runs on this actor's thread with the outcome (none
  /// on success) once the peer answers.
  virtual void write_to_peer(const caf::actor& peer, handle_id dst,
                             std::uint64_t offset, chunk data,
                             std::function<void(const caf::error&)> done)
    = 0;

  /// This device actor.
  virtual caf::actor device() const = 0;

  /// Whether the task was held while the device was paused.
  virtual bool waited_for_resume() const = 0;

  /// Keeps `obj` after the task, for later tasks that may use it again (a
  /// stage whose last job ended: its weights and kept prompt rows). The
  /// device's reference goes, on the actor's thread, when `keep_for` has
  /// passed, when an allocation of this device finds no room (the oldest
  /// first), when let_go() names its ticket, or when the actor exits
  /// (before its buffers go). `bytes` (what it holds of the device's
  /// memory) count as free in the device's free memory while it is kept:
  /// placement sees room it can have. Returns the ticket (never 0).
  virtual std::uint64_t keep(std::shared_ptr<void> obj, std::uint64_t bytes,
                             std::chrono::milliseconds keep_for)
    = 0;

  /// The device stops keeping what `ticket` names (nothing when it is not
  /// kept any more); it goes with its last other holder.
  virtual void let_go(std::uint64_t ticket) = 0;
};

} // namespace exo::device
