#include "backends/host_device.hpp"

#include "backends/host_info.hpp"
#include "backends/host_kernels.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace exo::backend {

/// Host memory, 64-byte aligned (a cache line; enough for any SIMD load).
class host_device::host_buffer : public buffer {
public:
  host_buffer(host_device& owner, std::size_t size, void* mem)
    : buffer(owner, size), mem_(mem), owner_(owner) {
  }
  ~host_buffer() override {
    std::free(mem_);
    std::lock_guard<std::mutex> guard{owner_.mtx_};
    owner_.used_ -= size();
  }
  char* data() const noexcept {
    return static_cast<char*>(mem_);
  }

private:
  void* mem_;
  host_device& owner_;
};

namespace {

constexpr std::size_t alignment = 64;

} // namespace

result<std::unique_ptr<buffer>> host_device::allocate(std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("allocate"));
  if (bytes == 0)
    return fail(errc::invalid_argument, "allocate: size must be > 0");
  if (bytes > props_.max_allocation)
    return fail(errc::out_of_memory,
                "allocate: " + std::to_string(bytes)
                  + " bytes exceeds the device's largest allocation of "
                  + std::to_string(props_.max_allocation));
  EXO_TRY(reserve(bytes, used_));
  auto rounded = (bytes + alignment - 1) / alignment * alignment;
  void* mem = std::aligned_alloc(alignment, rounded);
  if (mem == nullptr)
    return fail(errc::out_of_memory, "allocate: the host refused "
                                       + std::to_string(bytes) + " bytes");
  used_ += bytes;
  ++submitted_;
  return std::unique_ptr<buffer>{new host_buffer(*this, bytes, mem)};
}

memory_info host_device::memory() {
  std::lock_guard<std::mutex> guard{mtx_};
  memory_info info;
  info.total = props_.total_memory;
  info.used_by_exo = used_;
  info.free = info.total > used_ ? info.total - used_ : 0;
  return info;
}

status host_device::write(buffer& dst, std::size_t offset, const void* src,
                          std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("write"));
  EXO_TRY(check_range(dst, offset, bytes, "write"));
  if (bytes > 0 && src == nullptr)
    return fail(errc::invalid_argument, "write: null host pointer");
  if (bytes > 0)
    std::memcpy(static_cast<host_buffer&>(dst).data() + offset, src, bytes);
  ++submitted_;
  account(static_cast<double>(bytes), 0);
  return {};
}

status host_device::read(const buffer& src, std::size_t offset, void* dst,
                         std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("read"));
  EXO_TRY(check_range(src, offset, bytes, "read"));
  if (bytes > 0 && dst == nullptr)
    return fail(errc::invalid_argument, "read: null host pointer");
  if (bytes > 0)
    std::memcpy(dst, static_cast<const host_buffer&>(src).data() + offset,
                bytes);
  ++submitted_;
  account(static_cast<double>(bytes), 0);
  return {};
}

status host_device::copy(const buffer& src, std::size_t src_offset,
                         buffer& dst, std::size_t dst_offset,
                         std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("copy"));
  EXO_TRY(check_range(src, src_offset, bytes, "copy source"));
  EXO_TRY(check_range(dst, dst_offset, bytes, "copy destination"));
  if (bytes > 0)
    std::memmove(static_cast<host_buffer&>(dst).data() + dst_offset,
                 static_cast<const host_buffer&>(src).data() + src_offset,
                 bytes);
  ++submitted_;
  account(2.0 * static_cast<double>(bytes), 0);
  return {};
}

void* host_device::host_pointer(buffer& buf) {
  if (&buf.owner() != this)
    return nullptr;
  return static_cast<host_buffer&>(buf).data();
}

status host_device::synchronize() {
  std::lock_guard<std::mutex> guard{mtx_};
  return admit("synchronize");
}

result<event> host_device::record() {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("record"));
  return event{uid(), ++submitted_};
}

status host_device::wait(const event& e) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(check_event(e, submitted_));
  return admit("wait");
}

result<bool> host_device::completed(const event& e) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(check_event(e, submitted_));
  EXO_TRY(admit("completed"));
  return true;
}

status host_device::elementwise(binary_op op, const_view a, const_view b,
                                mut_view out, std::size_t count) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("elementwise"));
  auto bytes = f32_bytes(count, 1);
  if (!bytes)
    return bytes.err();
  if (a.buf == nullptr || b.buf == nullptr || out.buf == nullptr)
    return fail(errc::invalid_argument, "elementwise: null buffer");
  EXO_TRY(check_range(*a.buf, a.offset, *bytes, "elementwise a"));
  EXO_TRY(check_range(*b.buf, b.offset, *bytes, "elementwise b"));
  EXO_TRY(check_range(*out.buf, out.offset, *bytes, "elementwise output"));
  auto ptr = [](const buffer* b, std::size_t off) {
    return reinterpret_cast<float*>(
      static_cast<const host_buffer*>(b)->data() + off);
  };
  host::elementwise(op, ptr(a.buf, a.offset), ptr(b.buf, b.offset),
                    ptr(out.buf, out.offset), count);
  ++submitted_;
  account(3.0 * static_cast<double>(*bytes), static_cast<double>(count));
  return {};
}

status host_device::matmul(const_view a, const_view b, mut_view c,
                           const matmul_dims& dims) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("matmul"));
  EXO_TRY(host::check_matmul_dims(dims));
  auto sz = host::bytes_of(dims);
  if (a.buf == nullptr || b.buf == nullptr || c.buf == nullptr)
    return fail(errc::invalid_argument, "matmul: null buffer");
  EXO_TRY(check_range(*a.buf, a.offset, sz.a, "matmul a"));
  EXO_TRY(check_range(*b.buf, b.offset, sz.b, "matmul b"));
  EXO_TRY(check_range(*c.buf, c.offset, sz.c, "matmul c"));
  auto ptr = [](const buffer* b, std::size_t off) {
    return reinterpret_cast<float*>(
      static_cast<const host_buffer*>(b)->data() + off);
  };
  host::matmul(ptr(a.buf, a.offset), ptr(b.buf, b.offset),
               ptr(c.buf, c.offset), dims);
  ++submitted_;
  account(static_cast<double>(sz.a + sz.b + sz.c),
          2.0 * static_cast<double>(dims.m) * dims.n * dims.k);
  return {};
}

status host_device::admit(const char*) {
  return {};
}

status host_device::reserve(std::size_t bytes, std::uint64_t used) {
  if (used + bytes > props_.total_memory)
    return fail(errc::out_of_memory,
                "allocate: " + std::to_string(bytes) + " bytes requested, "
                  + std::to_string(props_.total_memory - used) + " free");
  return {};
}

void host_device::account(double, double) {
}

} // namespace exo::backend
