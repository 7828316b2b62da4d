#pragma once

/// model::device_ops over a device actor (messages/device.hpp): the way a
/// shard computes on its device. Every call is a synchronous request
/// through a caf::scoped_actor, so it is for blocking contexts only (the
/// shard runs detached). Writes and reads cross in pieces of at most
/// max_chunk_bytes; a batch of operations becomes one (compute_atom,
/// std::vector<kernel_call>) request of at most max_kernel_batch calls.
/// Compute requests (step, run) have no timeout of their own: the job's
/// step watchdog covers a device that stops answering (`timeout` applies
/// to the others: allocate, write, read, copy, sync).
/// A batch refused because the device is paused is sent again every 20 ms
/// until the device resumes (at most `pause_patience`, below the job's
/// 120 s step timeout): a thermal pause delays a step, it does not fail it.

#include "messages/device.hpp"
#include "runtime/model/device_stage.hpp"

#include <caf/fwd.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace exo::shard {

class actor_device_ops final : public model::device_ops {
public:
  actor_device_ops(caf::actor_system& sys, device_actor dev,
                   std::string where,
                   std::chrono::milliseconds timeout = std::chrono::minutes(5),
                   std::chrono::milliseconds pause_patience =
                     std::chrono::seconds(100));
  ~actor_device_ops() override;

  backend::result<model::device_handle> allocate(std::uint64_t bytes) override;
  /// Sends the free without waiting for its reply.
  backend::status free(model::device_handle h) override;
  backend::status write(model::device_handle h, std::uint64_t offset,
                        const void* src, std::uint64_t bytes) override;
  backend::status read(model::device_handle h, std::uint64_t offset,
                       void* dst, std::uint64_t bytes) override;
  /// Sends the region (this process's memory) to the device actor, which
  /// is on this node; after one "unsupported" it stops asking.
  backend::result<model::device_handle>
  adopt_host(const void* data, std::uint64_t bytes,
             std::shared_ptr<const void> keep) override;
  backend::status run(const std::vector<model::device_op>& ops) override;
  backend::status synchronize() override;
  /// One (compute_atom, in, ..., out, ...) request when the pieces fit the
  /// wire's limits (chunk and batch sizes), else write, run and read.
  backend::status step(model::device_handle in, std::uint64_t in_offset,
                       const void* src, std::uint64_t in_bytes,
                       const std::vector<model::device_op>& ops,
                       model::device_handle out, std::uint64_t out_offset,
                       void* dst, std::uint64_t out_bytes) override;
  std::string where() const override {
    return where_;
  }

  /// Copies `bytes` from buffer `src` of this device into buffer `dst` of
  /// device actor `peer` (this one or another of the same node): a device
  /// copy on one device, else the device actor relays bounded chunks.
  backend::status copy_to(model::device_handle src, std::uint64_t src_off,
                          const caf::actor& peer, model::device_handle dst,
                          std::uint64_t dst_off, std::uint64_t bytes);

  /// Requests made so far (each one message round trip).
  std::uint64_t requests() const noexcept {
    return requests_;
  }

  /// Batches sent again because the device was paused.
  std::uint64_t pause_waits() const noexcept {
    return pause_waits_;
  }

private:
  /// Sends a request (`send` makes one and returns its outcome) again
  /// every 20 ms while the device refuses it as paused, for at most
  /// pause_patience_.
  backend::status
  retry_while_paused(const std::function<backend::status(bool& paused)>& send);

  struct impl;
  std::unique_ptr<impl> impl_;
  std::string where_;
  /// The device said it cannot read host memory in place.
  bool adopt_unsupported_ = false;
  /// The last step's kernel calls, returned by the device actor and
  /// refilled by the next step.
  std::vector<kernel_call> spare_calls_;
  std::chrono::milliseconds pause_patience_;
  std::uint64_t requests_ = 0;
  std::uint64_t pause_waits_ = 0;
};

/// The device layer's error for a CAF error from a device actor.
backend::error to_backend_error(const caf::error& err);

} // namespace exo::shard
