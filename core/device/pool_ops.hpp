#pragma once

/// model::device_ops over a device actor's buffer pool: how work that runs
/// on the device actor's own thread (device tasks, messages/device.hpp)
/// computes. A shard's stage lives there: its steps run the device's
/// kernels directly, with the pool's handles, instead of crossing the
/// mailbox as kernel calls. Offsets and lengths of writes, reads and copies
/// are checked against the size each handle was allocated with; the device
/// checks every kernel's views against its buffers.
///
/// Only the device actor's thread calls it while the actor lives. An
/// object that holds it (a stage) may be destroyed elsewhere once the actor
/// is gone: the actor detaches it first, and from then on every call fails
/// with device_lost and a free does nothing (a mutex orders the two).

#include "core/device/buffer_pool.hpp"
#include "core/model/device_stage.hpp"

#include <functional>
#include <mutex>

namespace exo::device {

class pool_ops final : public model::device_ops {
public:
  /// What the device actor hears of the calls: every failure (a bad
  /// handle or range, or the device's own; not a device that cannot read
  /// host memory in place), which it counts as its own calls' failures;
  /// and every allocation (bytes, whether read in place) and free, which
  /// it audits.
  struct hooks {
    std::function<void(const backend::error&)> on_error;
    std::function<void(std::uint64_t bytes, bool in_place)> on_allocate;
    std::function<void()> on_free;
    /// A buffer resized to `bytes` (audited like an allocation).
    std::function<void(std::uint64_t bytes)> on_resize;
    /// An allocation (or adoption) found no room: frees what the device
    /// keeps that may go (device::task_context::keep), one thing at a
    /// time; whether anything went (the call is tried again). Called
    /// without the mutex held: what it frees frees through this object.
    std::function<bool()> on_no_room;
  };

  pool_ops(backend::device& dev, buffer_pool& pool, hooks h);

  result<model::device_handle> allocate(std::uint64_t bytes) override;
  status free(model::device_handle h) override;
  status write(model::device_handle h, std::uint64_t offset, const void* src,
               std::uint64_t bytes) override;
  status read(model::device_handle h, std::uint64_t offset, void* dst,
              std::uint64_t bytes) override;
  result<model::device_handle>
  adopt_host(const void* data, std::uint64_t bytes,
             std::shared_ptr<const void> keep) override;
  status run(const std::vector<model::device_op>& ops) override;
  status synchronize() override;
  std::string where() const override;
  /// The device's own answer (false once detached).
  bool runs_weights(backend::weight_type t) const override;
  /// The device's own answer (t once detached).
  backend::weight_type preferred_weights(backend::weight_type t,
                                         std::uint64_t rows,
                                         std::uint64_t cols) const override;
  bool reads_kv_blocks() const override;
  bool paged_rows() const override;
  /// The pool's size of the buffer (0 once detached).
  std::uint64_t footprint(model::device_handle h) const override;

  /// The pool's resize (room made as for an allocation: on_no_room).
  status resize(model::device_handle h, std::uint64_t bytes) override;
  /// The device's answer (false once detached).
  bool resizes() const override;

  /// Copies `bytes` between two buffers of this device.
  status copy(model::device_handle src, std::uint64_t src_off,
              model::device_handle dst, std::uint64_t dst_off,
              std::uint64_t bytes) override;

  /// The pool and device are going away.
  void detach();

  std::uint64_t ops_run() const noexcept {
    return ops_run_;
  }
  std::uint64_t bytes_written() const noexcept {
    return bytes_written_;
  }
  std::uint64_t bytes_read() const noexcept {
    return bytes_read_;
  }
  std::uint64_t copies() const noexcept {
    return copies_;
  }

private:
  /// Runs `attempt` (an allocation from the pool) under the lock; when it
  /// finds no room, asks hooks::on_no_room (without the lock) to free
  /// what may go and tries again while something went. Once detached:
  /// device_lost, and `detached` set.
  template <class Try>
  result<model::device_handle> with_room(Try attempt, bool& detached);
  /// `s`, reported to on_error when it is a failure.
  status reported(status s);
  /// The buffer behind `h` for [offset, offset + bytes); a failure is
  /// reported. Called with mx_ held and the pool attached.
  result<backend::buffer*> resolve(model::device_handle h,
                                   std::uint64_t offset, std::uint64_t bytes);

  mutable std::mutex mx_;
  backend::device* dev_;
  buffer_pool* pool_;
  std::string where_;
  hooks hooks_;
  std::uint64_t ops_run_ = 0;
  std::uint64_t copies_ = 0;
  std::uint64_t bytes_written_ = 0;
  std::uint64_t bytes_read_ = 0;
};

} // namespace exo::device
