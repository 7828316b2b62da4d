#pragma once

/// A device whose memory is host memory: the common base of the cpu and sim
/// backends. Operations run at once on the caller's thread (under the
/// device's lock), so every event is complete when recorded; the ordering
/// rules of backend.hpp hold trivially.

#include "backends/backend.hpp"

#include <mutex>

namespace exo::backend {

class host_device : public device {
public:
  const device_properties& properties() const override {
    return props_;
  }

  result<std::unique_ptr<buffer>> allocate(std::size_t bytes) override;
  memory_info memory() override;

  status write(buffer& dst, std::size_t offset, const void* src,
               std::size_t bytes) override;
  status read(const buffer& src, std::size_t offset, void* dst,
              std::size_t bytes) override;
  status copy(const buffer& src, std::size_t src_offset, buffer& dst,
              std::size_t dst_offset, std::size_t bytes) override;
  void* host_pointer(buffer& buf) override;

  status synchronize() override;
  result<event> record() override;
  status wait(const event& e) override;
  result<bool> completed(const event& e) override;

  status elementwise(binary_op op, const_view a, const_view b, mut_view out,
                     std::size_t count) override;
  status matmul(const_view a, const_view b, mut_view c,
                const matmul_dims& dims) override;

protected:
  /// Hooks for subclasses, called with the lock held.
  /// Before any operation: a refusal (vanished, paused...) or nothing.
  virtual status admit(const char* what);
  /// Room for a new allocation of `bytes`, given `used` bytes live now.
  virtual status reserve(std::size_t bytes, std::uint64_t used);
  /// After an operation that moved `bytes` and computed `flops`.
  virtual void account(double bytes, double flops);

  device_properties props_;
  std::mutex mtx_;
  std::uint64_t used_ = 0;
  std::uint64_t submitted_ = 0;

private:
  class host_buffer;
};

} // namespace exo::backend
