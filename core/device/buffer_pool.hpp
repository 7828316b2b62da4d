#pragma once

/// The device actor's pure core: opaque handles over pooled device buffers.
///
/// Handles are ids, never addresses: a handle from another pool, a freed
/// handle or a forged one is simply unknown. Every offset and length a caller
/// gives is checked against the size the caller asked for (not the pooled
/// size behind it). Freed buffers stay cached by size class and are reused;
/// when the device runs out of memory the cache is released and the
/// allocation retried once. A cached buffer nobody reused for `max_idle`
/// goes back to the device: the cache holds what the work of the moment
/// reuses, not every size class a long-lived process ever freed (on the
/// cpu device that was host memory a node held for good: 120 MiB over a
/// 30-minute soak, docs/soak.md).

#include "backends/backend.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

namespace exo::device {

using backend::result;
using backend::status;

class buffer_pool {
public:
  using clock = std::chrono::steady_clock;

  /// Pools buffers of `dev`; keeps at most `cache_limit` bytes cached, each
  /// for at most `max_idle` unused (zero: until the cache is trimmed),
  /// timed by `now`.
  buffer_pool(backend::device& dev, std::uint64_t cache_limit,
              std::uint64_t salt, clock::duration max_idle = {},
              std::function<clock::time_point()> now = &clock::now);
  ~buffer_pool();

  buffer_pool(const buffer_pool&) = delete;
  buffer_pool& operator=(const buffer_pool&) = delete;

  /// A new handle to at least `bytes` bytes of device memory.
  result<std::uint64_t> allocate(std::uint64_t bytes);

  /// A new handle to `bytes` of host memory at `data` that the device reads
  /// in place (backend::device::adopt_host), kept alive by `keep`; never
  /// pooled: released, it goes back to its owner.
  result<std::uint64_t> adopt(const void* data, std::uint64_t bytes,
                              std::shared_ptr<const void> keep);

  /// Returns the handle's buffer to the pool (cached, or back to the
  /// device when the cache is full), then gives back the cached buffers
  /// idle for longer than max_idle (trim_idle).
  status release(std::uint64_t handle);

  /// The handle's buffer as one of at least `bytes` (its first bytes
  /// kept; backend::device::resize, so the buffer is resized where it is,
  /// to its new size class, or kept when the class stays). Unsupported
  /// where the device cannot; refused for adopted memory.
  status resize(std::uint64_t handle, std::uint64_t bytes);

  /// The buffer behind a handle after checking [offset, offset + len) lies
  /// inside the size that was asked for.
  result<backend::buffer*> resolve(std::uint64_t handle, std::uint64_t offset,
                                   std::uint64_t len) const;

  /// The view of `offset` in a handle's buffer, limited to the size that
  /// was asked for (the device checks each operand's range against it).
  result<backend::mut_view> view(std::uint64_t handle,
                                 std::uint64_t offset) const;

  /// The size a handle was allocated with, or an error.
  result<std::uint64_t> size_of(std::uint64_t handle) const;
  /// The size of the buffer behind a handle (its size class: what the
  /// device has back when it goes), 0 for an unknown handle and for host
  /// memory read in place on a device whose free memory does not count it
  /// (backend::device::counts_adopted_memory).
  std::uint64_t footprint(std::uint64_t handle) const noexcept;

  /// Frees every cached (unused) buffer.
  void trim();
  /// Frees the cached buffers unused for longer than max_idle (none when
  /// max_idle is zero); the owner calls it now and then, so that an idle
  /// device gives its cache back too.
  void trim_idle();

  std::size_t live_handles() const noexcept {
    return live_.size();
  }
  std::uint64_t live_bytes() const noexcept {
    return live_bytes_;
  }
  std::uint64_t cached_bytes() const noexcept {
    return cached_bytes_;
  }
  std::uint64_t reuse_count() const noexcept {
    return reused_;
  }

  /// The pooled size for a request (a power of two from 4 KiB up to 64 MiB,
  /// 1 MiB steps above).
  static std::uint64_t size_class(std::uint64_t bytes) noexcept;

private:
  /// Registers a live buffer under a new handle.
  std::uint64_t add(std::unique_ptr<backend::buffer> buf, std::uint64_t bytes);

  struct entry {
    std::unique_ptr<backend::buffer> buf;
    std::uint64_t size;
    bool adopted = false; ///< host memory read in place (adopt)
  };
  struct cached {
    std::unique_ptr<backend::buffer> buf;
    clock::time_point since; ///< when it was released
  };

  backend::device& dev_;
  std::uint64_t cache_limit_;
  std::uint64_t salt_;
  clock::duration max_idle_;
  std::function<clock::time_point()> now_;
  std::uint64_t next_ = 1;
  std::unordered_map<std::uint64_t, entry> live_;
  std::multimap<std::uint64_t, cached> cache_; ///< by size class
  std::uint64_t live_bytes_ = 0;
  std::uint64_t cached_bytes_ = 0;
  std::uint64_t reused_ = 0;
};

} // namespace exo::device
