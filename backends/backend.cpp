#include "backends/backend.hpp"

#include "backends/host_kernels.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>

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

const char* to_string(weight_type t) noexcept {
  switch (t) {
    case weight_type::f32: return "f32";
    case weight_type::f16: return "f16";
    case weight_type::q8_0: return "q8_0";
  }
  return "unknown";
}

result<std::size_t> weight_row_bytes(weight_type t, std::size_t cols) {
  constexpr auto max = std::numeric_limits<std::size_t>::max();
  switch (t) {
    case weight_type::f32:
    case weight_type::f16: {
      std::size_t width = t == weight_type::f32 ? 4 : 2;
      if (cols > max / width)
        return fail(errc::invalid_argument, "weight row size overflows");
      return cols * width;
    }
    case weight_type::q8_0:
      if (cols % 32 != 0)
        return fail(errc::invalid_argument,
                    "a q8_0 row of " + std::to_string(cols)
                      + " elements is not a whole number of 32-element "
                        "blocks");
      if (cols / 32 > max / 34)
        return fail(errc::invalid_argument, "weight row size overflows");
      return cols / 32 * 34;
  }
  return fail(errc::invalid_argument, "unknown weight type");
}

// -- buffer ------------------------------------------------------------------

buffer::buffer(device& owner, std::size_t size, bool read_only) noexcept
  : owner_(&owner), size_(size), read_only_(read_only) {
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

result<std::unique_ptr<buffer>>
device::adopt_host(const void*, std::size_t, std::shared_ptr<const void>) {
  return fail(errc::unsupported, properties().id
                                   + " cannot read host memory in place");
}

status device::check_writable(const buffer& buf, const char* what) {
  if (buf.read_only())
    return fail(errc::invalid_argument,
                std::string{what} + ": the buffer is read-only (host memory "
                                    "adopted in place)");
  return {};
}

status device::check_output(const buffer* buf, std::size_t offset,
                            std::size_t bytes, std::size_t align,
                            const char* what) const {
  EXO_TRY(check_operand(buf, offset, bytes, align, what));
  return check_writable(*buf, what);
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

status device::check_operand(const buffer* buf, std::size_t offset,
                             std::size_t bytes, std::size_t align,
                             const char* what) const {
  if (buf == nullptr)
    return fail(errc::invalid_argument, std::string{what} + ": null buffer");
  EXO_TRY(check_range(*buf, offset, bytes, what));
  if (align > 1 && offset % align != 0)
    return fail(errc::invalid_argument,
                std::string{what} + ": offset " + std::to_string(offset)
                  + " is not a multiple of " + std::to_string(align));
  return {};
}

status check_disjoint(const buffer* in, std::size_t in_offset,
                      std::size_t in_bytes, const buffer* out,
                      std::size_t out_offset, std::size_t out_bytes,
                      bool same_ok, const char* what) {
  if (in == nullptr || out == nullptr || in != out || in_bytes == 0
      || out_bytes == 0)
    return {};
  if (same_ok && in_offset == out_offset && in_bytes == out_bytes)
    return {};
  if (in_offset < out_offset + out_bytes && out_offset < in_offset + in_bytes)
    return fail(errc::invalid_argument,
                std::string{what} + ": output overlaps an input");
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

// -- fallbacks of the Llama operations ---------------------------------------

namespace {

/// Reads `bytes` raw bytes at v.
status fetch_bytes(device& dev, const_view v, std::size_t bytes,
                   std::vector<std::uint8_t>& out) {
  out.resize(bytes);
  if (v.buf == nullptr)
    return fail(errc::invalid_argument, "null buffer");
  return dev.read(*v.buf, v.offset, out.data(), bytes);
}

std::size_t weight_align(weight_type t) {
  return t == weight_type::f32 ? 4 : 2;
}

} // namespace

status device::matmul_weights(const_view a, const_view w, weight_type type,
                              mut_view c, const matmul_dims& dims) {
  auto sz = host::check_matmul_weights(type, dims);
  if (!sz)
    return sz.err();
  EXO_TRY(check_operand(a.buf, a.offset, sz->a, 4, "matmul_weights a"));
  EXO_TRY(check_operand(w.buf, w.offset, sz->w, weight_align(type),
                        "matmul_weights w"));
  EXO_TRY(check_operand(c.buf, c.offset, sz->c, 4, "matmul_weights c"));
  EXO_TRY(check_disjoint(a.buf, a.offset, sz->a, c.buf, c.offset, sz->c,
                         false, "matmul_weights"));
  EXO_TRY(check_disjoint(w.buf, w.offset, sz->w, c.buf, c.offset, sz->c,
                         false, "matmul_weights"));
  std::vector<float> ha, hc(sz->c / sizeof(float));
  std::vector<std::uint8_t> hw;
  EXO_TRY(fetch(*this, a, sz->a, ha));
  EXO_TRY(fetch_bytes(*this, w, sz->w, hw));
  host::matmul_weights(ha.data(), hw.data(), type, hc.data(), dims, 1);
  return write(*c.buf, c.offset, hc.data(), sz->c);
}

status device::rms_norm(const_view x, const_view weight, mut_view out,
                        std::size_t rows, std::size_t dim, float eps) {
  auto bytes = host::check_rms_norm(rows, dim);
  if (!bytes)
    return bytes.err();
  EXO_TRY(check_operand(x.buf, x.offset, *bytes, 4, "rms_norm x"));
  EXO_TRY(check_operand(weight.buf, weight.offset, dim * 4, 4,
                        "rms_norm weight"));
  EXO_TRY(check_operand(out.buf, out.offset, *bytes, 4, "rms_norm out"));
  EXO_TRY(check_disjoint(x.buf, x.offset, *bytes, out.buf, out.offset,
                         *bytes, true, "rms_norm"));
  EXO_TRY(check_disjoint(weight.buf, weight.offset, dim * 4, out.buf,
                         out.offset, *bytes, false, "rms_norm"));
  std::vector<float> hx, hw;
  EXO_TRY(fetch(*this, x, *bytes, hx));
  EXO_TRY(fetch(*this, weight, dim * 4, hw));
  host::rms_norm(hx.data(), hw.data(), hx.data(), rows, dim, eps);
  return write(*out.buf, out.offset, hx.data(), *bytes);
}

status device::rope(mut_view x, const_view positions,
                    const_view freq_factors, const rope_dims& dims) {
  auto sz = host::check_rope(dims);
  if (!sz)
    return sz.err();
  EXO_TRY(check_operand(x.buf, x.offset, sz->x, 4, "rope x"));
  EXO_TRY(check_operand(positions.buf, positions.offset, sz->positions, 4,
                        "rope positions"));
  EXO_TRY(check_disjoint(positions.buf, positions.offset, sz->positions,
                         x.buf, x.offset, sz->x, false, "rope"));
  const bool ff = freq_factors.buf != nullptr;
  if (ff) {
    EXO_TRY(check_operand(freq_factors.buf, freq_factors.offset,
                          sz->freq_factors, 4, "rope freq_factors"));
    EXO_TRY(check_disjoint(freq_factors.buf, freq_factors.offset,
                           sz->freq_factors, x.buf, x.offset, sz->x, false,
                           "rope"));
  }
  std::vector<float> hx, hf;
  std::vector<std::int32_t> hp(dims.rows);
  EXO_TRY(fetch(*this, {x.buf, x.offset}, sz->x, hx));
  EXO_TRY(read(*positions.buf, positions.offset, hp.data(), sz->positions));
  if (ff)
    EXO_TRY(fetch(*this, freq_factors, sz->freq_factors, hf));
  host::rope(hx.data(), hp.data(), ff ? hf.data() : nullptr, dims);
  return write(*x.buf, x.offset, hx.data(), sz->x);
}

status device::attention(const_view q, const_view k, const_view v,
                         mut_view out, const attention_dims& dims) {
  auto sz = host::check_attention(dims);
  if (!sz)
    return sz.err();
  EXO_TRY(check_operand(q.buf, q.offset, sz->q, 4, "attention q"));
  EXO_TRY(check_operand(k.buf, k.offset, sz->kv, 4, "attention k"));
  EXO_TRY(check_operand(v.buf, v.offset, sz->kv, 4, "attention v"));
  EXO_TRY(check_operand(out.buf, out.offset, sz->q, 4, "attention out"));
  for (auto [in, off, bytes] : {std::tuple{q.buf, q.offset, sz->q},
                                std::tuple{k.buf, k.offset, sz->kv},
                                std::tuple{v.buf, v.offset, sz->kv}})
    EXO_TRY(check_disjoint(in, off, bytes, out.buf, out.offset, sz->q, false,
                           "attention"));
  std::vector<float> hq, hk, hv, ho(sz->q / sizeof(float));
  EXO_TRY(fetch(*this, q, sz->q, hq));
  EXO_TRY(fetch(*this, k, sz->kv, hk));
  EXO_TRY(fetch(*this, v, sz->kv, hv));
  host::attention(hq.data(), hk.data(), hv.data(), ho.data(), dims, 1);
  return write(*out.buf, out.offset, ho.data(), sz->q);
}

status device::silu_mul(const_view gate, const_view up, mut_view out,
                        std::size_t count) {
  auto bytes = f32_bytes(count, 1);
  if (!bytes)
    return bytes.err();
  if (count == 0)
    return fail(errc::invalid_argument, "silu_mul: count must be > 0");
  EXO_TRY(check_operand(gate.buf, gate.offset, *bytes, 4, "silu_mul gate"));
  EXO_TRY(check_operand(up.buf, up.offset, *bytes, 4, "silu_mul up"));
  EXO_TRY(check_operand(out.buf, out.offset, *bytes, 4, "silu_mul out"));
  EXO_TRY(check_disjoint(gate.buf, gate.offset, *bytes, out.buf, out.offset,
                         *bytes, true, "silu_mul"));
  EXO_TRY(check_disjoint(up.buf, up.offset, *bytes, out.buf, out.offset,
                         *bytes, true, "silu_mul"));
  std::vector<float> hg, hu;
  EXO_TRY(fetch(*this, gate, *bytes, hg));
  EXO_TRY(fetch(*this, up, *bytes, hu));
  host::silu_mul(hg.data(), hu.data(), hg.data(), count);
  return write(*out.buf, out.offset, hg.data(), *bytes);
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
