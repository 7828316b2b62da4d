#pragma once

/// What a device task (messages/device.hpp) may do on the device actor's
/// thread. The actor makes one context per task; a task that answers later
/// (after a peer's reply) must not keep it.

#include "backends/result.hpp"
#include "messages/device.hpp"
#include "core/model/device_stage.hpp"

#include <caf/actor.hpp>

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
};

} // namespace exo::device
