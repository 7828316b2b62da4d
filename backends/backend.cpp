#include "backends/backend.hpp"

#include "backends/host_kernels.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace exo::backend {

// -- names -------------------------------------------------------------------

const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::unsupported: return "unsupported";
    case errc::invalid_argument: return "invalid_argument";
    case errc::out_of_range: return "out_of_range";
    case errc::out_of_memory: return "out_of_memory";
    case errc::quota_exceeded: return "quota_exceeded";
    case errc::no_device: return "no_device";
    case errc::device_lost: return "device_lost";
    case errc::timeout: return "timeout";
    case errc::driver_error: return "driver_error";
    case errc::paused: return "paused";
    case errc::wrong_device: return "wrong_device";
  }
  return "unknown";
}

std::string error::to_string() const {
  return std::string{exo::backend::to_string(code)} + ": " + message;
}

const char* to_string(backend_kind kind) noexcept {
  switch (kind) {
    case backend_kind::cuda: return "cuda";
    case backend_kind::hip: return "hip";
    case backend_kind::vulkan: return "vulkan";
    case backend_kind::cpu: return "cpu";
    case backend_kind::sim: return "sim";
  }
  return "unknown";
}

std::optional<backend_kind> parse_backend_kind(const std::string& name) {
  for (auto k : {backend_kind::cuda, backend_kind::hip, backend_kind::vulkan,
                 backend_kind::cpu, backend_kind::sim})
    if (name == to_string(k))
      return k;
  if (name == "rocm")
    return backend_kind::hip;
  return std::nullopt;
}

const char* to_string(support_level level) noexcept {
  switch (level) {
    case support_level::full: return "full";
    case support_level::partial: return "partial";
    case support_level::experimental: return "experimental";
    case support_level::unsupported: return "unsupported";
  }
  return "unknown";
}

// -- buffer ------------------------------------------------------------------

buffer::buffer(device& owner, std::size_t size) noexcept
  : owner_(&owner), size_(size) {
}

buffer::~buffer() = default;

// -- device ------------------------------------------------------------------

namespace {

std::atomic<std::uint64_t> next_device_uid{1};

} // namespace

device::device() : uid_(next_device_uid.fetch_add(1)) {
}

device::~device() = default;

status device::copy_to_peer(const buffer&, std::size_t, buffer&, std::size_t,
                            std::size_t) {
  return fail(errc::unsupported, "no direct peer copy on this device");
}

void* device::host_pointer(buffer&) {
  return nullptr;
}

status device::check_range(const buffer& buf, std::size_t offset,
                           std::size_t bytes, const char* what) const {
  if (&buf.owner() != this)
    return fail(errc::wrong_device,
                std::string{what} + ": buffer belongs to another device");
  if (offset > buf.size() || bytes > buf.size() - offset)
    return fail(errc::out_of_range,
                std::string{what} + ": range [" + std::to_string(offset)
                  + ", " + std::to_string(offset) + "+" + std::to_string(bytes)
                  + ") exceeds buffer of " + std::to_string(buf.size())
                  + " bytes");
  return {};
}

status device::check_event(const event& e, std::uint64_t submitted) const {
  if (e.device_uid != uid_)
    return fail(errc::wrong_device, "event belongs to another device");
  if (e.sequence > submitted)
    return fail(errc::invalid_argument, "event was never recorded");
  return {};
}

namespace {

/// Reads `bytes` at v into host floats.
status fetch(device& dev, const_view v, std::size_t bytes,
             std::vector<float>& out) {
  out.resize(bytes / sizeof(float));
  if (v.buf == nullptr)
    return fail(errc::invalid_argument, "null buffer");
  return dev.read(*v.buf, v.offset, out.data(), bytes);
}

} // namespace

status device::elementwise(binary_op op, const_view a, const_view b,
                           mut_view out, std::size_t count) {
  auto bytes = f32_bytes(count, 1);
  if (!bytes)
    return bytes.err();
  if (out.buf == nullptr)
    return fail(errc::invalid_argument, "elementwise: null output buffer");
  EXO_TRY(check_range(*out.buf, out.offset, *bytes, "elementwise output"));
  std::vector<float> ha, hb, hc(count);
  EXO_TRY(fetch(*this, a, *bytes, ha));
  EXO_TRY(fetch(*this, b, *bytes, hb));
  host::elementwise(op, ha.data(), hb.data(), hc.data(), count);
  return write(*out.buf, out.offset, hc.data(), *bytes);
}

status device::matmul(const_view a, const_view b, mut_view c,
                      const matmul_dims& dims) {
  EXO_TRY(host::check_matmul_dims(dims));
  auto sz = host::bytes_of(dims);
  if (c.buf == nullptr)
    return fail(errc::invalid_argument, "matmul: null output buffer");
  EXO_TRY(check_range(*c.buf, c.offset, sz.c, "matmul output"));
  std::vector<float> ha, hb, hc(sz.c / sizeof(float));
  EXO_TRY(fetch(*this, a, sz.a, ha));
  EXO_TRY(fetch(*this, b, sz.b, hb));
  host::matmul(ha.data(), hb.data(), hc.data(), dims);
  return write(*c.buf, c.offset, hc.data(), sz.c);
}

backend::~backend() = default;

// -- generic operations ------------------------------------------------------

status copy_between(device& src_dev, const buffer& src, std::size_t src_offset,
                    device& dst_dev, buffer& dst, std::size_t dst_offset,
                    std::size_t bytes) {
  if (&src.owner() != &src_dev || &dst.owner() != &dst_dev)
    return fail(errc::wrong_device, "copy_between: buffer/device mismatch");
  if (src_offset > src.size() || bytes > src.size() - src_offset)
    return fail(errc::out_of_range, "copy_between: source range exceeds "
                                    "buffer of "
                                      + std::to_string(src.size()) + " bytes");
  if (dst_offset > dst.size() || bytes > dst.size() - dst_offset)
    return fail(errc::out_of_range,
                "copy_between: destination range exceeds buffer of "
                  + std::to_string(dst.size()) + " bytes");
  if (&src_dev == &dst_dev) {
    EXO_TRY(src_dev.copy(src, src_offset, dst, dst_offset, bytes));
    return src_dev.synchronize();
  }
  if (bytes == 0)
    return {};
  // 1. A direct peer path.
  if (src_dev.properties().has(cap_peer_copy)) {
    auto st = src_dev.copy_to_peer(src, src_offset, dst, dst_offset, bytes);
    if (st.ok() || st.err().code != errc::unsupported) {
      EXO_TRY(st);
      EXO_TRY(src_dev.synchronize());
      return dst_dev.synchronize();
    }
  }
  // 2. Both mapped into host memory: one memcpy.
  auto* sp = src_dev.host_pointer(const_cast<buffer&>(src));
  if (sp != nullptr) {
    EXO_TRY(src_dev.synchronize());
    return dst_dev.write(dst, dst_offset, static_cast<char*>(sp) + src_offset,
                         bytes);
  }
  auto* dp = dst_dev.host_pointer(dst);
  if (dp != nullptr) {
    EXO_TRY(dst_dev.synchronize());
    return src_dev.read(src, src_offset, static_cast<char*>(dp) + dst_offset,
                        bytes);
  }
  // 3. Bounded chunks through host memory.
  constexpr std::size_t chunk = std::size_t{8} << 20;
  std::vector<char> staging(std::min(bytes, chunk));
  for (std::size_t done = 0; done < bytes;) {
    auto n = std::min(chunk, bytes - done);
    EXO_TRY(src_dev.read(src, src_offset + done, staging.data(), n));
    EXO_TRY(dst_dev.write(dst, dst_offset + done, staging.data(), n));
    done += n;
  }
  return dst_dev.synchronize();
}

result<std::size_t> f32_bytes(std::size_t rows, std::size_t cols) {
  constexpr auto max = std::numeric_limits<std::size_t>::max();
  if (cols != 0 && rows > max / cols)
    return fail(errc::invalid_argument, "tensor size overflows");
  auto n = rows * cols;
  if (n > max / sizeof(float))
    return fail(errc::invalid_argument, "tensor size overflows");
  return n * sizeof(float);
}

} // namespace exo::backend
