#include "backends/backend.hpp"

#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_q4_k_x16.hpp"
#include "backends/quant_q6_k_x16.hpp"

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

const char* to_string(kv_type t) noexcept {
  switch (t) {
    case kv_type::f32: return "f32";
    case kv_type::f16: return "f16";
    case kv_type::q8_0: return "q8_0";
  }
  return "unknown";
}

std::optional<kv_type> parse_kv_type(const std::string& name) {
  for (auto t : {kv_type::f32, kv_type::f16, kv_type::q8_0})
    if (name == to_string(t))
      return t;
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

namespace {

/// A weight type's name, GGUF id and operation, in the enum's order.
struct weight_type_row {
  weight_type type;
  const char* name;
  quant::ggml_type ggml;
  op_kind op; ///< the matmul_<type> that multiplies by it
};

constexpr weight_type_row weight_types[] = {
  {weight_type::f32, "f32", quant::ggml_type::f32, op_kind::matmul_f32},
  {weight_type::f16, "f16", quant::ggml_type::f16, op_kind::matmul_f16},
  {weight_type::q8_0, "q8_0", quant::ggml_type::q8_0, op_kind::matmul_q8_0},
  {weight_type::bf16, "bf16", quant::ggml_type::bf16, op_kind::matmul_bf16},
  {weight_type::q4_0, "q4_0", quant::ggml_type::q4_0, op_kind::matmul_q4_0},
  {weight_type::q4_1, "q4_1", quant::ggml_type::q4_1, op_kind::matmul_q4_1},
  {weight_type::q5_0, "q5_0", quant::ggml_type::q5_0, op_kind::matmul_q5_0},
  {weight_type::q5_1, "q5_1", quant::ggml_type::q5_1, op_kind::matmul_q5_1},
  {weight_type::q2_k, "q2_k", quant::ggml_type::q2_k, op_kind::matmul_q2_k},
  {weight_type::q3_k, "q3_k", quant::ggml_type::q3_k, op_kind::matmul_q3_k},
  {weight_type::q4_k, "q4_k", quant::ggml_type::q4_k, op_kind::matmul_q4_k},
  {weight_type::q5_k, "q5_k", quant::ggml_type::q5_k, op_kind::matmul_q5_k},
  {weight_type::q6_k, "q6_k", quant::ggml_type::q6_k, op_kind::matmul_q6_k},
  // Q4_K's bytes packed (quant_q4_k_x16.hpp): its blocks' sizes.
  {weight_type::q4_k_x16, "q4_k_x16", quant::ggml_type::q4_k,
   op_kind::matmul_q4_k_x16},
  // Q6_K's bytes packed (quant_q6_k_x16.hpp): its blocks' sizes.
  {weight_type::q6_k_x16, "q6_k_x16", quant::ggml_type::q6_k,
   op_kind::matmul_q6_k_x16},
};

// The formats files store (all_weight_types), then the packed layouts.
constexpr bool weight_types_in_order() {
  if (std::size(weight_types) != std::size(all_weight_types) + 2)
    return false;
  for (std::size_t i = 0; i < std::size(weight_types); ++i)
    if (static_cast<std::size_t>(weight_types[i].type) != i
        || (i < std::size(all_weight_types)
            && all_weight_types[i] != weight_types[i].type))
      return false;
  return weight_types[std::size(all_weight_types)].type
           == weight_type::q4_k_x16
         && weight_types[std::size(all_weight_types) + 1].type
              == weight_type::q6_k_x16;
}
static_assert(weight_types_in_order(), "one row per weight type, in order");

const weight_type_row* row_of(weight_type t) noexcept {
  const auto i = static_cast<std::size_t>(t);
  return i < std::size(weight_types) ? &weight_types[i] : nullptr;
}

} // namespace

const char* to_string(weight_type t) noexcept {
  const auto* r = row_of(t);
  return r ? r->name : "unknown";
}

std::size_t weight_block_elements(weight_type t) noexcept {
  const auto* r = row_of(t);
  return r ? quant::info(r->ggml).block_size : 1;
}

std::uint32_t ggml_type_id(weight_type t) noexcept {
  const auto* r = row_of(t);
  return static_cast<std::uint32_t>(r ? r->ggml : quant::ggml_type::f32);
}

std::optional<weight_type> weight_type_of_ggml(std::uint32_t id) noexcept {
  for (const auto& r : weight_types)
    if (static_cast<std::uint32_t>(r.ggml) == id)
      return r.type;
  return std::nullopt;
}

result<std::size_t> weight_row_bytes(weight_type t, std::size_t cols) {
  const auto* r = row_of(t);
  if (!r)
    return fail(errc::invalid_argument, "unknown weight type");
  auto b = quant::row_bytes(r->ggml, cols);
  if (!b)
    return fail(errc::invalid_argument,
                std::string{"a "} + r->name + " row of " + std::to_string(cols)
                  + " elements: " + b.err().message);
  return *b;
}

status pack_weights(weight_type from, weight_type to, const void* src,
                    std::size_t rows, std::size_t cols, void* dst) {
  if (!src || !dst)
    return fail(errc::invalid_argument, "pack_weights: null operand");
  const bool q4 = from == weight_type::q4_k && to == weight_type::q4_k_x16;
  const bool q6 = from == weight_type::q6_k && to == weight_type::q6_k_x16;
  if (!q4 && !q6)
    return fail(errc::invalid_argument,
                std::string{"pack_weights: no packing of "} + to_string(from)
                  + " into " + to_string(to));
  if (!(q4 ? quant::q4_k_x16_packs(rows, cols)
           : quant::q6_k_x16_packs(rows, cols)))
    return fail(errc::invalid_argument,
                "pack_weights: a " + std::to_string(rows) + " x "
                  + std::to_string(cols) + " " + to_string(from)
                  + " matrix does not pack into " + to_string(to)
                  + (q4 ? " (rows a multiple of 16, columns of 256)"
                        : " (columns a multiple of 256)"));
  if (q4)
    quant::pack_q4_k_x16(src, rows, cols, dst);
  else
    quant::pack_q6_k_x16(src, rows, cols, dst);
  return {};
}

/// The operation that multiplies by weights of type t (its name in
/// messages, its number on the wire).
op_kind weights_op(weight_type t) noexcept {
  const auto* r = row_of(t);
  return r ? r->op : op_kind::matmul_f32;
}

/// The weight type op_kind k multiplies by, or none for another operation.
std::optional<weight_type> weights_of(op_kind k) noexcept {
  if (k == op_kind::matmul_rows_f32)
    return weight_type::f32;
  if (k == op_kind::matmul_rows_f16)
    return weight_type::f16;
  if (k == op_kind::matmul_rows_q4_k)
    return weight_type::q4_k;
  if (k == op_kind::matmul_rows_q4_k_x16)
    return weight_type::q4_k_x16;
  for (const auto& r : weight_types)
    if (r.op == k)
      return r.type;
  return std::nullopt;
}

op_kind rows_apart_op(op_kind k) noexcept {
  if (k == op_kind::matmul_f32)
    return op_kind::matmul_rows_f32;
  if (k == op_kind::matmul_f16)
    return op_kind::matmul_rows_f16;
  if (k == op_kind::matmul_q4_k)
    return op_kind::matmul_rows_q4_k;
  if (k == op_kind::matmul_q4_k_x16)
    return op_kind::matmul_rows_q4_k_x16;
  return k;
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

status device::resize(buffer&, std::size_t) {
  return fail(errc::unsupported, properties().id
                                   + " cannot resize a buffer in place");
}

bool device::resizes() const noexcept {
  return false;
}

void* device::host_pointer(buffer&) {
  return nullptr;
}

bool device::counts_adopted_memory() const noexcept {
  return true;
}

bool device::runs_weights(weight_type t) const noexcept {
  return t == weight_type::f32 || t == weight_type::f16
         || t == weight_type::q8_0;
}

weight_type device::preferred_weights(weight_type t, std::size_t,
                                      std::size_t) const noexcept {
  return t;
}

result<std::unique_ptr<buffer>>
device::adopt_host(const void*, std::size_t, std::shared_ptr<const void>) {
  return fail(errc::unsupported, properties().id
                                   + " cannot read host memory in place");
}

bool device::measure_rates_again() {
  return false;
}

result<std::string> device::inject_fault(const std::string& spec) {
  return fail(errc::unsupported,
              "fault \"" + spec + "\": " + properties().id
                + " is not a simulated device (only simulated devices take "
                  "injected faults)");
}

status device::check_writable(const buffer& buf, const char* what) {
  if (buf.read_only())
    return fail(errc::invalid_argument,
                std::string{what} + ": the buffer is read-only (host memory "
                                    "adopted in place)");
  return {};
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

status device::check_view(op_kind kind, const char* name,
                          const buffer* buf, std::size_t offset,
                          std::size_t limit, std::size_t bytes,
                          std::size_t align, bool output) const {
  auto what = [&] { return std::string{to_string(kind)} + " " + name; };
  if (buf == nullptr)
    return fail(errc::invalid_argument, what() + ": null buffer");
  if (&buf->owner() != this)
    return fail(errc::wrong_device,
                what() + ": buffer belongs to another device");
  auto size = buf->size();
  const bool limited = limit != 0 && limit < size;
  if (limited)
    size = limit;
  if (offset > size || bytes > size - offset)
    return fail(errc::out_of_range,
                what() + ": range [" + std::to_string(offset) + ", "
                  + std::to_string(offset) + "+" + std::to_string(bytes)
                  + ") exceeds " + (limited ? "allocation" : "buffer")
                  + " of " + std::to_string(size) + " bytes");
  if (align > 1 && offset % align != 0)
    return fail(errc::invalid_argument,
                what() + ": offset " + std::to_string(offset)
                  + " is not a multiple of " + std::to_string(align));
  if (output)
    return check_writable(*buf, what().c_str());
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

// -- compute: checks, once ---------------------------------------------------

namespace {

std::size_t weight_align(weight_type t) {
  return t == weight_type::f32 ? 4 : 2; // every block starts with a half
}

/// Prefixes a dims error with the operation's name when it lacks one.
error named(op_kind kind, error e) {
  std::string name = to_string(kind);
  if (e.message.compare(0, name.size(), name) != 0)
    e.message = name + ": " + e.message;
  return e;
}

/// Refuses an output overlapping an input except in place where allowed.
status disjoint(op_kind kind, const_view in, std::size_t in_bytes,
                mut_view out, std::size_t out_bytes) {
  return check_disjoint(in.buf, in.offset, in_bytes, out.buf, out.offset,
                        out_bytes, rule_of(kind).in_place, to_string(kind));
}

} // namespace

status device::elementwise(binary_op op, const_view a, const_view b,
                           mut_view out, std::size_t count) {
  if (op != binary_op::add && op != binary_op::mul)
    return fail(errc::invalid_argument, "elementwise: unknown operation "
                                          + std::to_string(static_cast<int>(
                                            op)));
  const auto kind = op == binary_op::add ? op_kind::add : op_kind::mul;
  auto bytes = f32_bytes(count, 1);
  if (!bytes)
    return named(kind, bytes.err());
  EXO_TRY(check_view(kind, "a", a.buf, a.offset, a.limit, *bytes, 4, false));
  EXO_TRY(check_view(kind, "b", b.buf, b.offset, b.limit, *bytes, 4, false));
  EXO_TRY(check_view(kind, "out", out.buf, out.offset, out.limit, *bytes, 4,
                     true));
  EXO_TRY(disjoint(kind, a, *bytes, out, *bytes));
  EXO_TRY(disjoint(kind, b, *bytes, out, *bytes));
  return do_elementwise(op, a, b, out, count);
}

status device::matmul(const_view a, const_view b, mut_view c,
                      const matmul_dims& dims) {
  const auto kind = dims.transpose_b ? op_kind::matmul_t : op_kind::matmul;
  if (auto st = host::check_matmul_dims(dims); !st)
    return named(kind, st.err());
  auto sz = host::bytes_of(dims);
  EXO_TRY(check_view(kind, "a", a.buf, a.offset, a.limit, sz.a, 4, false));
  EXO_TRY(check_view(kind, "b", b.buf, b.offset, b.limit, sz.b, 4, false));
  EXO_TRY(check_view(kind, "c", c.buf, c.offset, c.limit, sz.c, 4, true));
  EXO_TRY(disjoint(kind, a, sz.a, c, sz.c));
  EXO_TRY(disjoint(kind, b, sz.b, c, sz.c));
  return do_matmul(a, b, c, dims);
}

status device::matmul_weights(const_view a, const_view w, weight_type type,
                              mut_view c, const matmul_dims& dims) {
  if (!row_of(type))
    return fail(errc::invalid_argument,
                "matmul_weights: unknown weight type "
                  + std::to_string(static_cast<int>(type)));
  const auto kind = weights_op(type);
  if (!runs_weights(type))
    return fail(errc::unsupported,
                std::string{to_string(kind)} + ": " + properties().id
                  + " has no kernel for " + to_string(type) + " weights");
  auto sz = host::check_matmul_weights(type, dims);
  if (!sz)
    return named(kind, sz.err());
  EXO_TRY(check_view(kind, "a", a.buf, a.offset, a.limit, sz->a, 4, false));
  EXO_TRY(check_view(kind, "w", w.buf, w.offset, w.limit, sz->w,
                     weight_align(type), false));
  EXO_TRY(check_view(kind, "c", c.buf, c.offset, c.limit, sz->c, 4, true));
  EXO_TRY(disjoint(kind, a, sz->a, c, sz->c));
  EXO_TRY(disjoint(kind, w, sz->w, c, sz->c));
  matmul_dims d = dims;
  d.transpose_b = true;
  return do_matmul_weights(a, w, type, c, d);
}

status device::rms_norm(const_view x, const_view weight, mut_view out,
                        std::size_t rows, std::size_t dim, float eps) {
  constexpr auto kind = op_kind::rms_norm;
  auto bytes = host::check_rms_norm(rows, dim);
  if (!bytes)
    return bytes.err();
  const auto wbytes = dim * 4; // no overflow: rows * dim * 4 fits
  EXO_TRY(check_view(kind, "x", x.buf, x.offset, x.limit, *bytes, 4, false));
  EXO_TRY(check_view(kind, "weight", weight.buf, weight.offset, weight.limit,
                     wbytes, 4, false));
  EXO_TRY(check_view(kind, "out", out.buf, out.offset, out.limit, *bytes, 4,
                     true));
  EXO_TRY(disjoint(kind, x, *bytes, out, *bytes));
  // The weight is never the output, not even in place.
  EXO_TRY(check_disjoint(weight.buf, weight.offset, wbytes, out.buf,
                         out.offset, *bytes, false, "rms_norm"));
  return do_rms_norm(x, weight, out, rows, dim, eps);
}

status device::rope(mut_view x, const_view positions,
                    const_view freq_factors, const rope_dims& dims) {
  const auto kind = dims.neox ? op_kind::rope_neox : op_kind::rope;
  auto sz = host::check_rope(dims);
  if (!sz)
    return sz.err();
  EXO_TRY(check_view(kind, "x", x.buf, x.offset, x.limit, sz->x, 4, true));
  EXO_TRY(check_view(kind, "positions", positions.buf, positions.offset,
                     positions.limit, sz->positions, 4, false));
  EXO_TRY(disjoint(kind, positions, sz->positions, x, sz->x));
  if (freq_factors.buf != nullptr) {
    EXO_TRY(check_view(kind, "freq_factors", freq_factors.buf,
                       freq_factors.offset, freq_factors.limit,
                       sz->freq_factors, 4, false));
    EXO_TRY(disjoint(kind, freq_factors, sz->freq_factors, x, sz->x));
  }
  return do_rope(x, positions, freq_factors, dims);
}

status device::rope_cached(mut_view x, const_view cache,
                           const rope_dims& dims) {
  constexpr auto kind = op_kind::rope_cached;
  auto sz = host::check_rope(dims);
  if (!sz)
    return sz.err();
  EXO_TRY(check_view(kind, "x", x.buf, x.offset, x.limit, sz->x, 4, true));
  EXO_TRY(check_view(kind, "cache", cache.buf, cache.offset, cache.limit,
                     sz->cache, 4, false));
  EXO_TRY(disjoint(kind, cache, sz->cache, x, sz->x));
  return do_rope_cached(x, cache, dims);
}

status device::attention(const_view q, const_view k, const_view v,
                         mut_view out, const attention_dims& dims) {
  if (dims.kv != kv_type::f32 && dims.kv != kv_type::f16
      && dims.kv != kv_type::q8_0)
    return fail(errc::invalid_argument, "attention: unknown KV cache type");
  const auto kind = dims.kv == kv_type::f16    ? op_kind::attention_f16
                    : dims.kv == kv_type::q8_0 ? op_kind::attention_q8_0
                                               : op_kind::attention;
  auto sz = host::check_attention(dims);
  if (!sz)
    return sz.err();
  const auto kv_alignment = exo::backend::kv_align(dims.kv);
  EXO_TRY(check_view(kind, "q", q.buf, q.offset, q.limit, sz->q, 4, false));
  EXO_TRY(check_view(kind, "k", k.buf, k.offset, k.limit, sz->kv, kv_alignment,
                     false));
  EXO_TRY(check_view(kind, "v", v.buf, v.offset, v.limit, sz->kv, kv_alignment,
                     false));
  EXO_TRY(check_view(kind, "out", out.buf, out.offset, out.limit, sz->q, 4,
                     true));
  EXO_TRY(disjoint(kind, q, sz->q, out, sz->q));
  EXO_TRY(disjoint(kind, k, sz->kv, out, sz->q));
  EXO_TRY(disjoint(kind, v, sz->kv, out, sz->q));
  return do_attention(q, k, v, out, dims);
}


status device::attention_paged(const_view q, const_view k, const_view v,
                               const_view table, mut_view out,
                               const attention_dims& dims) {
  constexpr auto kind = op_kind::attention_paged;
  if (dims.kv != kv_type::f32 && dims.kv != kv_type::f16
      && dims.kv != kv_type::q8_0)
    return fail(errc::invalid_argument,
                "attention_paged: unknown KV cache type");
  auto sz = host::check_paged_attention(dims);
  if (!sz)
    return sz.err();
  const auto kv_alignment = exo::backend::kv_align(dims.kv);
  EXO_TRY(check_view(kind, "q", q.buf, q.offset, q.limit, sz->q, 4, false));
  EXO_TRY(check_view(kind, "k", k.buf, k.offset, k.limit, sz->block_rows,
                     kv_alignment, false));
  EXO_TRY(check_view(kind, "v", v.buf, v.offset, v.limit, sz->block_rows,
                     kv_alignment, false));
  EXO_TRY(check_view(kind, "table", table.buf, table.offset, table.limit,
                     sz->table, 4, false));
  EXO_TRY(check_view(kind, "out", out.buf, out.offset, out.limit, sz->q, 4,
                     true));
  // The blocks may lie anywhere in k's and v's buffers: out must not.
  EXO_TRY(disjoint(kind, q, sz->q, out, sz->q));
  EXO_TRY(disjoint(kind, table, sz->table, out, sz->q));
  EXO_TRY(disjoint(kind, k, host::view_extent(k), out, sz->q));
  EXO_TRY(disjoint(kind, v, host::view_extent(v), out, sz->q));
  auto d = dims;
  d.block_table = nullptr;
  return do_attention_paged(q, k, v, table, out, d);
}

bool device::reads_kv_blocks() const noexcept {
  return false;
}

status device::attention_paged_rows(const_view q, const_view k, const_view v,
                                    const_view tables, mut_view out,
                                    const attention_dims& dims,
                                    std::size_t table_len) {
  constexpr auto kind = op_kind::attention_paged_rows;
  if (dims.kv != kv_type::f32 && dims.kv != kv_type::f16
      && dims.kv != kv_type::q8_0)
    return fail(errc::invalid_argument,
                "attention_paged_rows: unknown KV cache type");
  constexpr std::size_t max_rows = std::size_t{1} << 16;
  if (dims.n_tokens == 0 || dims.n_tokens > max_rows || table_len == 0
      || dims.block_positions == 0
      || table_len > (std::size_t{1} << 31) / dims.block_positions)
    return fail(errc::invalid_argument,
                "attention_paged_rows: rows (" + std::to_string(dims.n_tokens)
                  + ") must be 1 to " + std::to_string(max_rows)
                  + " and table_len (" + std::to_string(table_len)
                  + ") blocks of block_positions ("
                  + std::to_string(dims.block_positions)
                  + ") must cover 1 to 2^31 positions");
  // One row at the last position a table covers: its sizes.
  auto one = dims;
  one.n_tokens = 1;
  one.pos0 = table_len * dims.block_positions - 1;
  auto sz = host::check_paged_attention(one);
  if (!sz)
    return sz.err();
  const std::size_t q_bytes = sz->q * dims.n_tokens;
  const std::size_t t_bytes = (1 + table_len) * 4 * dims.n_tokens;
  if (q_bytes / dims.n_tokens != sz->q
      || t_bytes / dims.n_tokens != (1 + table_len) * 4)
    return fail(errc::invalid_argument, "attention_paged_rows: too large");
  const auto kv_alignment = exo::backend::kv_align(dims.kv);
  EXO_TRY(check_view(kind, "q", q.buf, q.offset, q.limit, q_bytes, 4, false));
  EXO_TRY(check_view(kind, "k", k.buf, k.offset, k.limit, sz->block_rows,
                     kv_alignment, false));
  EXO_TRY(check_view(kind, "v", v.buf, v.offset, v.limit, sz->block_rows,
                     kv_alignment, false));
  EXO_TRY(check_view(kind, "tables", tables.buf, tables.offset, tables.limit,
                     t_bytes, 4, false));
  EXO_TRY(check_view(kind, "out", out.buf, out.offset, out.limit, q_bytes, 4,
                     true));
  EXO_TRY(disjoint(kind, q, q_bytes, out, q_bytes));
  EXO_TRY(disjoint(kind, tables, t_bytes, out, q_bytes));
  EXO_TRY(disjoint(kind, k, host::view_extent(k), out, q_bytes));
  EXO_TRY(disjoint(kind, v, host::view_extent(v), out, q_bytes));
  auto d = dims;
  d.block_table = nullptr;
  d.row_tables = nullptr;
  d.row_table_len = 0;
  return do_attention_paged_rows(q, k, v, tables, out, d, table_len);
}

bool device::runs_paged_rows() const noexcept {
  return false;
}

status device::store_kv_rows(const_view a, const_view tables, mut_view kv,
                             const kv_rows_dims& dims) {
  constexpr auto kind = op_kind::store_kv_rows;
  if (dims.kv != kv_type::f32 && dims.kv != kv_type::f16
      && dims.kv != kv_type::q8_0)
    return fail(errc::invalid_argument, "store_kv_rows: unknown KV cache type");
  constexpr std::size_t max_rows = std::size_t{1} << 16;
  if (dims.rows == 0 || dims.rows > max_rows || dims.table_len == 0
      || dims.block_positions == 0
      || dims.table_len > (std::size_t{1} << 31) / dims.block_positions)
    return fail(errc::invalid_argument,
                "store_kv_rows: rows (" + std::to_string(dims.rows)
                  + ") must be 1 to " + std::to_string(max_rows)
                  + " and table_len (" + std::to_string(dims.table_len)
                  + ") blocks of block_positions ("
                  + std::to_string(dims.block_positions)
                  + ") must cover 1 to 2^31 positions");
  const std::size_t per = kv_block_values(dims.kv);
  if (dims.width == 0 || dims.width > dims.kv_stride || dims.width % per != 0
      || dims.kv_stride % per != 0)
    return fail(errc::invalid_argument,
                "store_kv_rows: width (" + std::to_string(dims.width)
                  + ") must be 1 to kv_stride ("
                  + std::to_string(dims.kv_stride) + "), both multiples of "
                  + std::to_string(per) + " for a " + to_string(dims.kv)
                  + " cache");
  auto sz = host::check_paged_attention(kv_rows_attention(dims));
  if (!sz)
    return named(kind, sz.err());
  auto a_bytes = f32_bytes(dims.rows, dims.width);
  const std::size_t t_bytes = (1 + dims.table_len) * 4 * dims.rows;
  if (!a_bytes || t_bytes / dims.rows != (1 + dims.table_len) * 4)
    return fail(errc::invalid_argument, "store_kv_rows: too large");
  EXO_TRY(check_view(kind, "a", a.buf, a.offset, a.limit, *a_bytes, 4,
                     false));
  EXO_TRY(check_view(kind, "tables", tables.buf, tables.offset, tables.limit,
                     t_bytes, 4, false));
  EXO_TRY(check_view(kind, "kv", kv.buf, kv.offset, kv.limit, sz->block_rows,
                     exo::backend::kv_align(dims.kv), true));
  const std::size_t extent = host::view_extent({kv.buf, kv.offset, kv.limit});
  EXO_TRY(disjoint(kind, a, *a_bytes, kv, extent));
  EXO_TRY(disjoint(kind, tables, t_bytes, kv, extent));
  auto d = dims;
  d.max_block = 0;
  return do_store_kv_rows(a, tables, kv, d);
}

status device::do_attention_paged_rows(const_view q, const_view k,
                                       const_view v, const_view tables,
                                       mut_view out,
                                       const attention_dims& dims,
                                       std::size_t table_len) {
  // Row by row through attention_paged, after reading the tables back.
  const std::size_t stride = 1 + table_len;
  std::vector<std::int32_t> tab(dims.n_tokens * stride);
  EXO_TRY(read(*tables.buf, tables.offset, tab.data(), tab.size() * 4));
  const std::size_t row_bytes = dims.n_heads * dims.head_dim * 4;
  for (std::size_t r = 0; r < dims.n_tokens; ++r) {
    const std::int32_t p = tab[r * stride];
    EXO_TRY(host::check_row_position("attention_paged_rows", r, p, table_len,
                                     dims.block_positions));
    auto d = dims;
    d.n_tokens = 1;
    d.pos0 = static_cast<std::size_t>(p);
    const_view qr = q, tr = tables;
    mut_view outr = out;
    qr.offset += r * row_bytes;
    outr.offset += r * row_bytes;
    tr.offset += (r * stride + 1) * 4;
    EXO_TRY(attention_paged(qr, k, v, tr, outr, d));
  }
  return {};
}

status device::do_attention_paged(const_view q, const_view k, const_view v,
                                  const_view table, mut_view out,
                                  const attention_dims& dims) {
  // Through host memory: the table, then each block's rows gathered into
  // one run (the same rows, so the same bits), then attention over it.
  auto sz = host::check_paged_attention(dims); // sizes only: checked
  if (!sz)
    return sz.err();
  const std::size_t n_blocks = attention_blocks(dims);
  std::vector<std::int32_t> tab(n_blocks);
  EXO_TRY(read(*table.buf, table.offset, tab.data(), sz->table));
  EXO_TRY(host::check_block_table(tab.data(), n_blocks, *sz,
                                  host::view_extent(k),
                                  host::view_extent(v)));
  const std::size_t run_values = n_blocks * dims.block_positions
                                 * dims.kv_stride;
  const std::size_t run_bytes = kv_bytes_of(dims.kv, run_values);
  const std::size_t step = kv_bytes_of(dims.kv, dims.block_positions
                                                  * dims.kv_stride);
  std::vector<std::uint8_t> hk(run_bytes), hv(run_bytes);
  for (std::size_t b = 0; b < n_blocks; ++b) {
    const std::size_t from = static_cast<std::size_t>(tab[b]) * sz->block;
    EXO_TRY(read(*k.buf, k.offset + from, hk.data() + b * step,
                 sz->block_rows));
    EXO_TRY(read(*v.buf, v.offset + from, hv.data() + b * step,
                 sz->block_rows));
  }
  auto d = dims;
  d.block_positions = 0;
  d.block_stride = 0;
  std::vector<float> hq(sz->q / sizeof(float)), ho(sz->q / sizeof(float));
  EXO_TRY(read(*q.buf, q.offset, hq.data(), sz->q));
  if (dims.kv == kv_type::f16)
    host::attention(hq.data(),
                    reinterpret_cast<const std::uint16_t*>(hk.data()),
                    reinterpret_cast<const std::uint16_t*>(hv.data()),
                    ho.data(), d, 1);
  else if (dims.kv == kv_type::q8_0)
    host::attention(hq.data(),
                    reinterpret_cast<const host::block_q8_0*>(hk.data()),
                    reinterpret_cast<const host::block_q8_0*>(hv.data()),
                    ho.data(), d, 1);
  else
    host::attention(hq.data(), reinterpret_cast<const float*>(hk.data()),
                    reinterpret_cast<const float*>(hv.data()), ho.data(), d,
                    1);
  return write(*out.buf, out.offset, ho.data(), sz->q);
}

namespace {

/// Bytes of `count` f32 elements of an operation that needs at least one.
result<std::size_t> count_bytes(op_kind kind, std::size_t count) {
  if (count == 0)
    return fail(errc::invalid_argument,
                std::string{to_string(kind)} + ": count must be > 0");
  auto bytes = f32_bytes(count, 1);
  if (!bytes)
    return named(kind, bytes.err());
  return *bytes;
}

} // namespace

status device::silu_mul(const_view gate, const_view up, mut_view out,
                        std::size_t count) {
  constexpr auto kind = op_kind::silu_mul;
  auto bytes = count_bytes(kind, count);
  if (!bytes)
    return bytes.err();
  EXO_TRY(check_view(kind, "gate", gate.buf, gate.offset, gate.limit, *bytes,
                     4, false));
  EXO_TRY(check_view(kind, "up", up.buf, up.offset, up.limit, *bytes, 4,
                     false));
  EXO_TRY(check_view(kind, "out", out.buf, out.offset, out.limit, *bytes, 4,
                     true));
  EXO_TRY(disjoint(kind, gate, *bytes, out, *bytes));
  EXO_TRY(disjoint(kind, up, *bytes, out, *bytes));
  return do_silu_mul(gate, up, out, count);
}

status device::to_f16(const_view a, mut_view out, std::size_t count) {
  constexpr auto kind = op_kind::to_f16;
  auto bytes = count_bytes(kind, count);
  if (!bytes)
    return bytes.err();
  const auto half_bytes = *bytes / 2;
  EXO_TRY(check_view(kind, "a", a.buf, a.offset, a.limit, *bytes, 4, false));
  EXO_TRY(check_view(kind, "out", out.buf, out.offset, out.limit, half_bytes,
                     2, true));
  EXO_TRY(disjoint(kind, a, *bytes, out, half_bytes));
  return do_to_f16(a, out, count);
}

status device::to_q8_0(const_view a, mut_view out, std::size_t count) {
  constexpr auto kind = op_kind::to_q8_0;
  auto bytes = count_bytes(kind, count);
  if (!bytes)
    return bytes.err();
  if (count % 32 != 0)
    return fail(errc::invalid_argument,
                "to_q8_0: count " + std::to_string(count)
                  + " is not a multiple of 32 (whole Q8_0 blocks)");
  const auto q_bytes = kv_bytes_of(kv_type::q8_0, count);
  EXO_TRY(check_view(kind, "a", a.buf, a.offset, a.limit, *bytes, 4, false));
  EXO_TRY(check_view(kind, "out", out.buf, out.offset, out.limit, q_bytes,
                     2, true));
  EXO_TRY(disjoint(kind, a, *bytes, out, q_bytes));
  return do_to_q8_0(a, out, count);
}

status device::hadamard(const_view a, mut_view out, std::size_t count,
                        std::size_t n) {
  constexpr auto kind = op_kind::hadamard;
  auto bytes = count_bytes(kind, count);
  if (!bytes)
    return bytes.err();
  if (n < 2 || n > 4096 || (n & (n - 1)) != 0 || count % n != 0)
    return fail(errc::invalid_argument,
                "hadamard: n " + std::to_string(n)
                  + " must be a power of two in [2, 4096] dividing count "
                  + std::to_string(count));
  EXO_TRY(check_view(kind, "a", a.buf, a.offset, a.limit, *bytes, 4, false));
  EXO_TRY(check_view(kind, "out", out.buf, out.offset, out.limit, *bytes, 4,
                     true));
  if (!(a.buf == out.buf && a.offset == out.offset))
    EXO_TRY(disjoint(kind, a, *bytes, out, *bytes));
  return do_hadamard(out, a, count, n);
}

// -- compute: host fallbacks -------------------------------------------------

namespace {

/// Reads `bytes` at v into host floats.
status fetch(device& dev, const_view v, std::size_t bytes,
             std::vector<float>& out) {
  out.resize(bytes / sizeof(float));
  return dev.read(*v.buf, v.offset, out.data(), bytes);
}

/// Reads `bytes` raw bytes at v.
status fetch_bytes(device& dev, const_view v, std::size_t bytes,
                   std::vector<std::uint8_t>& out) {
  out.resize(bytes);
  return dev.read(*v.buf, v.offset, out.data(), bytes);
}

} // namespace

status device::do_elementwise(binary_op op, const_view a, const_view b,
                              mut_view out, std::size_t count) {
  const auto bytes = count * sizeof(float);
  std::vector<float> ha, hb, hc(count);
  EXO_TRY(fetch(*this, a, bytes, ha));
  EXO_TRY(fetch(*this, b, bytes, hb));
  host::elementwise(op, ha.data(), hb.data(), hc.data(), count);
  return write(*out.buf, out.offset, hc.data(), bytes);
}

status device::do_matmul(const_view a, const_view b, mut_view c,
                         const matmul_dims& dims) {
  auto sz = host::bytes_of(dims);
  std::vector<float> ha, hb, hc(sz.c / sizeof(float));
  EXO_TRY(fetch(*this, a, sz.a, ha));
  EXO_TRY(fetch(*this, b, sz.b, hb));
  host::matmul(ha.data(), hb.data(), hc.data(), dims);
  return write(*c.buf, c.offset, hc.data(), sz.c);
}

status device::do_matmul_weights(const_view a, const_view w,
                                 weight_type type, mut_view c,
                                 const matmul_dims& dims) {
  auto sz = host::check_matmul_weights(type, dims); // sizes only: checked
  if (!sz)
    return sz.err();
  std::vector<float> ha, hc(sz->c / sizeof(float));
  std::vector<std::uint8_t> hw;
  EXO_TRY(fetch(*this, a, sz->a, ha));
  EXO_TRY(fetch_bytes(*this, w, sz->w, hw));
  host::matmul_weights(ha.data(), hw.data(), type, hc.data(), dims, 1);
  return write(*c.buf, c.offset, hc.data(), sz->c);
}

status device::do_rms_norm(const_view x, const_view weight, mut_view out,
                           std::size_t rows, std::size_t dim, float eps) {
  const auto bytes = rows * dim * sizeof(float);
  std::vector<float> hx, hw;
  EXO_TRY(fetch(*this, x, bytes, hx));
  EXO_TRY(fetch(*this, weight, dim * 4, hw));
  host::rms_norm(hx.data(), hw.data(), hx.data(), rows, dim, eps);
  return write(*out.buf, out.offset, hx.data(), bytes);
}

status device::do_rope(mut_view x, const_view positions,
                       const_view freq_factors, const rope_dims& dims) {
  auto sz = host::check_rope(dims); // sizes only: checked
  if (!sz)
    return sz.err();
  const bool ff = freq_factors.buf != nullptr;
  std::vector<float> hx, hf;
  std::vector<std::int32_t> hp(dims.rows);
  EXO_TRY(fetch(*this, {x.buf, x.offset}, sz->x, hx));
  EXO_TRY(read(*positions.buf, positions.offset, hp.data(), sz->positions));
  if (ff)
    EXO_TRY(fetch(*this, freq_factors, sz->freq_factors, hf));
  host::rope(hx.data(), hp.data(), ff ? hf.data() : nullptr, dims);
  return write(*x.buf, x.offset, hx.data(), sz->x);
}

status device::do_rope_cached(mut_view x, const_view cache,
                              const rope_dims& dims) {
  auto sz = host::check_rope(dims); // sizes only: checked
  if (!sz)
    return sz.err();
  std::vector<float> hx, hc;
  EXO_TRY(fetch(*this, {x.buf, x.offset}, sz->x, hx));
  EXO_TRY(fetch(*this, cache, sz->cache, hc));
  host::rope_cached(hx.data(), hc.data(), dims);
  return write(*x.buf, x.offset, hx.data(), sz->x);
}

status device::do_attention(const_view q, const_view k, const_view v,
                            mut_view out, const attention_dims& dims) {
  auto sz = host::check_attention(dims); // sizes only: checked
  if (!sz)
    return sz.err();
  std::vector<float> hq, ho(sz->q / sizeof(float));
  EXO_TRY(fetch(*this, q, sz->q, hq));
  if (dims.kv == kv_type::f16) {
    std::vector<std::uint16_t> hk(sz->kv / 2), hv(sz->kv / 2);
    EXO_TRY(read(*k.buf, k.offset, hk.data(), sz->kv));
    EXO_TRY(read(*v.buf, v.offset, hv.data(), sz->kv));
    host::attention(hq.data(), hk.data(), hv.data(), ho.data(), dims, 1);
  } else if (dims.kv == kv_type::q8_0) {
    std::vector<host::block_q8_0> hk(sz->kv / 34), hv(sz->kv / 34);
    EXO_TRY(read(*k.buf, k.offset, hk.data(), sz->kv));
    EXO_TRY(read(*v.buf, v.offset, hv.data(), sz->kv));
    host::attention(hq.data(), hk.data(), hv.data(), ho.data(), dims, 1);
  } else {
    std::vector<float> hk, hv;
    EXO_TRY(fetch(*this, k, sz->kv, hk));
    EXO_TRY(fetch(*this, v, sz->kv, hv));
    host::attention(hq.data(), hk.data(), hv.data(), ho.data(), dims, 1);
  }
  return write(*out.buf, out.offset, ho.data(), sz->q);
}

status device::do_to_f16(const_view a, mut_view out, std::size_t count) {
  std::vector<float> ha;
  EXO_TRY(fetch(*this, a, count * sizeof(float), ha));
  std::vector<std::uint16_t> ho(count);
  host::to_f16(ha.data(), ho.data(), count);
  return write(*out.buf, out.offset, ho.data(), count * 2);
}

status device::do_to_q8_0(const_view a, mut_view out, std::size_t count) {
  std::vector<float> ha;
  EXO_TRY(fetch(*this, a, count * sizeof(float), ha));
  std::vector<host::block_q8_0> ho(count / 32);
  host::quantize_q8_0_activations(ha.data(), ho.data(), count);
  return write(*out.buf, out.offset, ho.data(), ho.size() * 34);
}

status device::do_store_kv_rows(const_view a, const_view tables, mut_view kv,
                                const kv_rows_dims& dims) {
  // Every row's slot checked before anything is written, then row by row
  // through host memory.
  const std::size_t stride = 1 + dims.table_len;
  std::vector<std::int32_t> tab(dims.rows * stride);
  EXO_TRY(read(*tables.buf, tables.offset, tab.data(), tab.size() * 4));
  auto sz = host::check_paged_attention(kv_rows_attention(dims));
  if (!sz)
    return sz.err();
  const std::size_t extent = host::view_extent({kv.buf, kv.offset, kv.limit});
  const std::size_t row_bytes = kv_bytes_of(dims.kv, dims.width);
  std::vector<std::size_t> at(dims.rows);
  for (std::size_t r = 0; r < dims.rows; ++r) {
    const std::int32_t p = tab[r * stride];
    EXO_TRY(host::check_row_position("store_kv_rows", r, p, dims.table_len,
                                     dims.block_positions));
    const auto pp = static_cast<std::size_t>(p);
    const std::int32_t b = tab[r * stride + 1 + pp / dims.block_positions];
    if (!host::check_block_table(&b, 1, *sz, extent, extent))
      return fail(errc::out_of_range,
                  "store_kv_rows: row " + std::to_string(r) + "'s block "
                    + std::to_string(b) + " (position " + std::to_string(p)
                    + ") lies outside the cache's " + std::to_string(extent)
                    + " bytes");
    at[r] = static_cast<std::size_t>(b) * sz->block
            + kv_bytes_of(dims.kv, (pp % dims.block_positions)
                                     * dims.kv_stride);
  }
  std::vector<float> ha;
  EXO_TRY(fetch(*this, a, dims.rows * dims.width * sizeof(float), ha));
  std::vector<std::uint8_t> row(row_bytes);
  for (std::size_t r = 0; r < dims.rows; ++r) {
    const float* src = ha.data() + r * dims.width;
    if (dims.kv == kv_type::f16)
      host::to_f16(src, reinterpret_cast<std::uint16_t*>(row.data()),
                   dims.width);
    else if (dims.kv == kv_type::q8_0)
      host::quantize_q8_0_activations(
        src, reinterpret_cast<host::block_q8_0*>(row.data()), dims.width);
    else
      std::memcpy(row.data(), src, row_bytes);
    EXO_TRY(write(*kv.buf, kv.offset + at[r], row.data(), row_bytes));
  }
  return {};
}

status device::do_hadamard(mut_view out, const_view a, std::size_t count,
                           std::size_t n) {
  std::vector<float> ha;
  EXO_TRY(fetch(*this, a, count * sizeof(float), ha));
  host::hadamard(ha.data(), ha.data(), count, n);
  return write(*out.buf, out.offset, ha.data(), count * sizeof(float));
}

status device::do_silu_mul(const_view gate, const_view up, mut_view out,
                           std::size_t count) {
  const auto bytes = count * sizeof(float);
  std::vector<float> hg, hu;
  EXO_TRY(fetch(*this, gate, bytes, hg));
  EXO_TRY(fetch(*this, up, bytes, hu));
  host::silu_mul(hg.data(), hu.data(), hg.data(), count);
  return write(*out.buf, out.offset, hg.data(), bytes);
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

status run(device& dev, const op_call& call) {
  EXO_TRY(check_counts(call.kind, call.n_inputs, call.n_dims,
                       call.n_scalars));
  const auto& in = call.inputs;
  const auto& d = call.dims;
  const float s0 = call.scalars[0];
  switch (call.kind) {
    case op_kind::add:
    case op_kind::mul:
      return dev.elementwise(call.kind == op_kind::add ? binary_op::add
                                                       : binary_op::mul,
                             in[0], in[1], call.output, d[0]);
    case op_kind::matmul:
    case op_kind::matmul_t:
      return dev.matmul(in[0], in[1], call.output,
                        {d[0], d[1], d[2], call.kind == op_kind::matmul_t});
    case op_kind::matmul_f32:
    case op_kind::matmul_f16:
    case op_kind::matmul_q8_0:
    case op_kind::matmul_bf16:
    case op_kind::matmul_q4_0:
    case op_kind::matmul_q4_1:
    case op_kind::matmul_q5_0:
    case op_kind::matmul_q5_1:
    case op_kind::matmul_q2_k:
    case op_kind::matmul_q3_k:
    case op_kind::matmul_q4_k:
    case op_kind::matmul_q5_k:
    case op_kind::matmul_q6_k:
    case op_kind::matmul_q4_k_x16:
    case op_kind::matmul_q6_k_x16:
      return dev.matmul_weights(in[0], in[1], *weights_of(call.kind),
                                call.output, {d[0], d[1], d[2], true});
    case op_kind::matmul_rows_f32:
    case op_kind::matmul_rows_f16:
    case op_kind::matmul_rows_q4_k:
    case op_kind::matmul_rows_q4_k_x16:
      return dev.matmul_weights(in[0], in[1], *weights_of(call.kind),
                                call.output, {d[0], d[1], d[2], true, true});
    case op_kind::rms_norm:
      return dev.rms_norm(in[0], in[1], call.output, d[0], d[1], s0);
    case op_kind::rope:
    case op_kind::rope_neox:
      return dev.rope(call.output, in[0],
                      call.n_inputs == 2 ? in[1] : const_view{},
                      {d[0], d[1], d[2], d[3], s0,
                       call.kind == op_kind::rope_neox});
    case op_kind::rope_cached:
      if (d[4] > 1)
        return fail(errc::invalid_argument,
                    "rope_cached: neox must be 0 or 1, got "
                      + std::to_string(d[4]));
      return dev.rope_cached(call.output, in[0],
                             {d[0], d[1], d[2], d[3], 10000.0f, d[4] == 1});
    case op_kind::attention:
    case op_kind::attention_f16:
    case op_kind::attention_q8_0:
      return dev.attention(in[0], in[1], in[2], call.output,
                           {d[0], d[1], d[2], d[3], d[4], d[5], s0,
                            call.kind == op_kind::attention_f16
                              ? kv_type::f16
                            : call.kind == op_kind::attention_q8_0
                              ? kv_type::q8_0
                              : kv_type::f32});
    case op_kind::attention_paged: {
      if (d[6] > static_cast<std::uint64_t>(kv_type::q8_0))
        return fail(errc::invalid_argument,
                    "attention_paged: unknown KV cache type "
                      + std::to_string(d[6]));
      attention_dims ad{d[0], d[1], d[2], d[3], d[4], d[5], s0,
                        static_cast<kv_type>(d[6])};
      ad.block_positions = d[7];
      ad.block_stride = d[8];
      return dev.attention_paged(in[0], in[1], in[2], in[3], call.output, ad);
    }
    case op_kind::attention_paged_rows: {
      if (d[5] > static_cast<std::uint64_t>(kv_type::q8_0))
        return fail(errc::invalid_argument,
                    "attention_paged_rows: unknown KV cache type "
                      + std::to_string(d[5]));
      attention_dims ad{d[0], 0, d[1], d[2], d[3], d[4], s0,
                        static_cast<kv_type>(d[5])};
      ad.block_positions = d[6];
      ad.block_stride = d[7];
      return dev.attention_paged_rows(in[0], in[1], in[2], in[3], call.output,
                                      ad, d[8]);
    }
    case op_kind::store_kv_rows: {
      if (d[3] > static_cast<std::uint64_t>(kv_type::q8_0))
        return fail(errc::invalid_argument,
                    "store_kv_rows: unknown KV cache type "
                      + std::to_string(d[3]));
      kv_rows_dims kd;
      kd.rows = d[0];
      kd.width = d[1];
      kd.kv_stride = d[2];
      kd.kv = static_cast<kv_type>(d[3]);
      kd.block_positions = d[4];
      kd.block_stride = d[5];
      kd.table_len = d[6];
      return dev.store_kv_rows(in[0], in[1], call.output, kd);
    }
    case op_kind::silu_mul:
      return dev.silu_mul(in[0], in[1], call.output, d[0]);
    case op_kind::to_f16:
      return dev.to_f16(in[0], call.output, d[0]);
    case op_kind::to_q8_0:
      return dev.to_q8_0(in[0], call.output, d[0]);
    case op_kind::hadamard:
      return dev.hadamard(in[0], call.output, d[0], d[1]);
  }
  return fail(errc::unsupported, "unknown operation "
                                   + std::to_string(to_wire(call.kind)));
}

} // namespace exo::backend
