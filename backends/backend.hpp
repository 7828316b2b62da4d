#pragma once

/// The device layer's one interface: backend -> device -> buffer, events.
///
/// Modelled on ggml's layering (registry -> device -> stream -> buffer), with
/// the fixes its maintainers asked for: every operation's ordering is written
/// down here, events are typed and belong to one device, and errors are
/// values (see result.hpp). Nothing here knows about CAF.
///
/// Ordering rules (apply to every device of every backend):
/// 1. Each device has one in-order queue. Operations on a device take effect
///    in the order they were called, whichever thread calls them.
/// 2. `write` returns once the host source may be reused (the data is on the
///    device or staged); later operations on the device see the data.
/// 3. `read` returns once the data is in host memory; it first waits for every
///    operation submitted before it on that device.
/// 4. `copy` and every compute operation (`elementwise`, `matmul`,
///    `matmul_weights`, `rms_norm`, `rope`, `attention`, `silu_mul`) may
///    return before they finish (asynchronous); their results are visible to
///    later operations on the same device, to `read`, and to anyone after
///    `synchronize` or after waiting on an event recorded after them. A
///    compute operation reads its inputs as they are after every operation
///    submitted before it on the device (a KV-cache row written by `copy` or
///    `write` is seen by a later `attention`).
/// 5. `record` returns an event that completes when everything submitted
///    before it on that device has completed. `wait(e)` blocks the host until
///    `e` completes; an event of another device is refused (wrong_device).
/// 6. `synchronize` blocks until everything submitted before it completed.
/// 7. A buffer belongs to the device that allocated it; passing it to another
///    device's operation is refused (wrong_device). Buffers must be destroyed
///    before their device; destroying one frees it (after pending work).
/// 8. Every offset and size is checked against the buffer: out_of_range.
/// 9. All device methods are thread-safe (serialized per device).
/// 10. Compute operands are views (buffer + byte offset) of this device's
///    buffers, every one checked against its buffer (rule 8). An output may
///    be the very same view as an element-wise input (in place: `rms_norm`,
///    `silu_mul`, `elementwise`); any other overlap of an output with an
///    input is refused (invalid_argument). f32 and int32 operands sit at
///    offsets that are multiples of 4, F16 and Q8_0 weights at multiples
///    of 2 (invalid_argument otherwise).

#include "backends/ops.hpp"
#include "backends/result.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace exo::backend {

// -- identification ----------------------------------------------------------

/// Which implementation drives a device.
enum class backend_kind : std::uint8_t { cuda, hip, vulkan, cpu, sim };

const char* to_string(backend_kind kind) noexcept;
std::optional<backend_kind> parse_backend_kind(const std::string& name);

/// How well exo supports a device (the seeds' classification).
enum class support_level : std::uint8_t {
  full,
  partial,
  experimental,
  unsupported
};

const char* to_string(support_level level) noexcept;

/// Capability flags: what a device can do natively. Optional operations a
/// device lacks fall back to generic code (through host memory).
enum capability : std::uint32_t {
  cap_host_visible = 1u << 0,  ///< buffers can be mapped into host memory
  cap_async = 1u << 1,         ///< operations may complete after they return
  cap_peer_copy = 1u << 2,     ///< direct device-to-device copies to peers
  cap_elementwise = 1u << 3,   ///< native element-wise kernels
  cap_matmul = 1u << 4,        ///< native matrix products
  cap_temperature = 1u << 5,   ///< can read its temperature
  cap_power = 1u << 6,         ///< can read its power draw
  cap_clock = 1u << 7,         ///< can read its current clock
  cap_utilization = 1u << 8,   ///< can read its utilization
  cap_fault_injection = 1u << 9, ///< simulated device: faults can be injected
  cap_model_ops = 1u << 10,    ///< native Llama operations (rms_norm, rope,
                               ///< attention, silu_mul, matmul_weights)
};

/// What a device is. Readings a backend cannot make are empty, never
/// invented.
struct device_properties {
  std::string id;           ///< stable across restarts ("vulkan:<uuid>")
  backend_kind kind = backend_kind::cpu;
  std::string name;         ///< "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string vendor;       ///< "NVIDIA", "AMD", "Intel", "Mesa", ...
  std::string architecture; ///< "sm_90", "gfx90a", "x86_64", ...
  std::string driver_version;
  std::string pci_bus_id;   ///< empty where not applicable
  std::uint64_t total_memory = 0;
  std::uint64_t max_allocation = 0; ///< largest single buffer
  std::uint32_t compute_units = 0;
  std::optional<std::uint32_t> clock_mhz;
  std::optional<std::uint32_t> memory_clock_mhz;
  std::optional<double> peak_flops;       ///< FP32 FLOP/s
  std::optional<double> memory_bandwidth; ///< bytes/s
  /// Seconds one operation costs beyond its bytes and FLOPs (dispatch,
  /// waking the device's threads): what a small model's many small
  /// operations add to a token. Devices that measure their rates give it.
  std::optional<double> launch_seconds;
  support_level support = support_level::full;
  bool simulated = false; ///< a simulated device, never a real one
  std::uint32_t capabilities = 0;

  bool has(capability c) const noexcept {
    return (capabilities & c) != 0;
  }
};

/// Memory of one device, as the device sees it now.
struct memory_info {
  std::uint64_t total = 0;
  std::uint64_t free = 0;
  std::uint64_t used_by_exo = 0; ///< bytes in buffers allocated through us
};

/// One telemetry sample. An empty optional means "this device cannot tell".
struct telemetry {
  std::optional<double> temperature_c;
  std::optional<double> power_w;
  std::optional<std::uint32_t> clock_mhz;
  std::optional<double> utilization; ///< 0..1
  memory_info memory;
};

// -- buffers and events ------------------------------------------------------

class device;

/// Device memory. Owned through std::unique_ptr; destroying it frees it.
class buffer {
public:
  /// `read_only`: memory the device may only read (device::adopt_host);
  /// every write into it is refused.
  buffer(device& owner, std::size_t size, bool read_only = false) noexcept;
  virtual ~buffer();
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

  std::size_t size() const noexcept {
    return size_;
  }
  device& owner() const noexcept {
    return *owner_;
  }
  bool read_only() const noexcept {
    return read_only_;
  }

protected:
  /// The size after device::resize (the device's own buffer type).
  void set_size(std::size_t size) noexcept {
    size_ = size;
  }

private:
  device* owner_;
  std::size_t size_;
  bool read_only_;
};

/// A point in one device's queue. Cheap to copy; tied to its device.
struct event {
  std::uint64_t device_uid = 0; ///< the device instance it belongs to
  std::uint64_t sequence = 0;   ///< position in that device's queue
};

/// Read-only and writable places in device memory: a buffer plus an offset.
/// `limit`, when not 0, is where the caller's part of the buffer ends (a
/// pooled buffer may be larger than the handle that names it): an operand
/// must then lie below it as well as inside the buffer.
struct const_view {
  const buffer* buf = nullptr;
  std::size_t offset = 0;
  std::size_t limit = 0;
};
struct mut_view {
  buffer* buf = nullptr;
  std::size_t offset = 0;
  std::size_t limit = 0;
};

/// Element-wise operations on f32 vectors: out[i] = a[i] (op) b[i].
enum class binary_op : std::uint8_t { add, mul };

/// Dimensions of C[m x n] = A[m x k] * B, all f32 row-major. With
/// transpose_b, B is stored as [n x k] (the weight layout of a linear layer).
struct matmul_dims {
  std::size_t m = 0;
  std::size_t n = 0;
  std::size_t k = 0;
  bool transpose_b = false;
  /// matmul_weights: every row of A is a product of its own, its result
  /// what m = 1 gives (op_kind::matmul_rows_f32/f16/q4_k). Devices whose
  /// arithmetic does not depend on m ignore it.
  bool rows_apart = false;
};

/// How a weight matrix is encoded (GGUF's encodings; the numbers are not
/// GGUF's type ids).
///   f32:  4 bytes per element.
///   f16:  IEEE half, 2 bytes per element.
///   q8_0: blocks of 32 elements, each 34 bytes: an IEEE half scale d, then
///         32 int8 q; element = d * q. A row's length is a multiple of 32.
///   bf16, q4_0, q4_1, q5_0, q5_1 (blocks of 32) and the K-quants q2_k ...
///         q6_k (super-blocks of 256): ggml's layouts, byte for byte
///         (backends/quant_formats.hpp), as GGUF files store them. The host
///         kernels run them with llama.cpp's CPU arithmetic; a device whose
///         kernels lack one says so (device::runs_weights).
///   q4_k_x16: Q4_K matrices of a multiple of 16 rows, packed 16 rows at a
///         time for the CPU's int8 dot products (quant_q4_k_x16.hpp): the
///         same bytes' worth and the same results as q4_k. Not a format
///         files store: a device that wants it says so
///         (device::preferred_weights) and is handed packed copies.
///   q6_k_x16: Q6_K matrices packed the same way (quant_q6_k_x16.hpp).
enum class weight_type : std::uint8_t {
  f32,
  f16,
  q8_0,
  bf16,
  q4_0,
  q4_1,
  q5_0,
  q5_1,
  q2_k,
  q3_k,
  q4_k,
  q5_k,
  q6_k,
  q4_k_x16,
  q6_k_x16,
};

/// Every weight type files store, in the enum's order (not the packed
/// layouts).
constexpr weight_type all_weight_types[] = {
  weight_type::f32,  weight_type::f16,  weight_type::q8_0, weight_type::bf16,
  weight_type::q4_0, weight_type::q4_1, weight_type::q5_0, weight_type::q5_1,
  weight_type::q2_k, weight_type::q3_k, weight_type::q4_k, weight_type::q5_k,
  weight_type::q6_k};

const char* to_string(weight_type t) noexcept;

/// Elements per block of t (1 for f32, f16 and bf16).
std::size_t weight_block_elements(weight_type t) noexcept;

/// GGUF's (ggml's) type id of t.
std::uint32_t ggml_type_id(weight_type t) noexcept;

/// The weight type of GGUF type id `id`, or none (q8_1, q8_k and ids
/// without a weight type).
std::optional<weight_type> weight_type_of_ggml(std::uint32_t id) noexcept;

/// Re-encodes a rows x cols matrix stored as `from` at src into `to` at dst
/// (weight_row_bytes(to, cols) * rows bytes; not overlapping): only Q4_K
/// into q4_k_x16 and Q6_K into q6_k_x16 (rows a multiple of 16), the
/// layouts a device asks for with device::preferred_weights; any other
/// pair is refused.
status pack_weights(weight_type from, weight_type to, const void* src,
                    std::size_t rows, std::size_t cols, void* dst);

/// The operation that multiplies by weights of type t (matmul_f16 ...).
op_kind weights_op(weight_type t) noexcept;

/// The weight type operation k multiplies by, or none for an operation
/// that is not a matmul_<type> (or matmul_rows_<type>).
std::optional<weight_type> weights_of(op_kind k) noexcept;

/// The operation that multiplies by weights of kind k (a matmul_<type>)
/// with each row of A on its own: matmul_rows_f32/f16/q4_k for F32, F16
/// and Q4_K, whose host products depend on the row count; k itself for
/// the other formats, whose products are the same per row whatever the
/// count.
op_kind rows_apart_op(op_kind k) noexcept;

/// Bytes of one row of `cols` elements of type t; an error when cols is not
/// a whole number of blocks or the size overflows.
result<std::size_t> weight_row_bytes(weight_type t, std::size_t cols);

/// Rotary position embedding (llama.cpp's "normal" mode, the llama
/// architecture's) over x[rows][heads][head_dim] (f32, rows contiguous,
/// heads contiguous within a row). Row r is at position positions[r] (int32,
/// one per row). Pairs (x[2i], x[2i+1]) with 2i < n_rot are rotated by
/// theta = pos * freq_base^(-2i / n_rot), divided by freq_factors[i] when
/// freq_factors are given (n_rot / 2 f32 values, Llama 3's rope_freqs);
/// elements from n_rot on are left as they are. With `neox` (llama.cpp's
/// NEOX mode, the qwen2/qwen3 architectures', op_kind::rope_neox) pair i is
/// (x[i], x[i + n_rot/2]) instead, with the same theta_i.
struct rope_dims {
  std::size_t rows = 0;
  std::size_t heads = 0;
  std::size_t head_dim = 0;
  std::size_t n_rot = 0;  ///< even, 2 <= n_rot <= head_dim
  float freq_base = 10000.0f;
  bool neox = false;
};

/// How a KV cache stores its keys and values.
///   f16:  IEEE half, 2 bytes per value (llama.cpp's default cache type, and
///         exo's: device_stage_options::kv);
///   f32:  4 bytes per value, rounded to half where attention reads it, so
///         both types give the same bits (f16 holds exactly those halves);
///   q8_0: ggml's Q8_0 blocks (32 values in 34 bytes: a half scale and 32
///         signed bytes), llama.cpp's `--cache-type-k/-v q8_0`: rows
///         quantized as llama.cpp's x86 CPU backend quantizes them (to_q8_0),
///         attention as its flash attention computes over such a cache.
///         Rows must be whole blocks: head_dim a multiple of 32.
enum class kv_type : std::uint8_t { f32, f16, q8_0 };

const char* to_string(kv_type t) noexcept;
std::optional<kv_type> parse_kv_type(const std::string& name);

/// Values per block of a KV cache type (32 for q8_0, else 1) and bytes of
/// one block.
constexpr std::size_t kv_block_values(kv_type t) noexcept {
  return t == kv_type::q8_0 ? 32 : 1;
}
constexpr std::size_t kv_block_bytes(kv_type t) noexcept {
  return t == kv_type::q8_0 ? 34 : t == kv_type::f16 ? 2 : 4;
}

/// Bytes of `values` stored K or V values (a multiple of
/// kv_block_values(t)).
constexpr std::uint64_t kv_bytes_of(kv_type t, std::uint64_t values) noexcept {
  return values / kv_block_values(t) * kv_block_bytes(t);
}

/// Whether heads of head_dim values are whole blocks of type t (a q8_0
/// cache needs a multiple of 32; f16 and f32 hold any width).
constexpr bool kv_holds_heads(kv_type t, std::size_t head_dim) noexcept {
  return head_dim % kv_block_values(t) == 0;
}

/// The alignment a view of a cache of type t needs (its scalars' size).
constexpr std::size_t kv_align(kv_type t) noexcept {
  return t == kv_type::f32 ? 4 : 2;
}

/// Causal grouped-query attention of `n_tokens` query rows at positions
/// pos0 .. pos0 + n_tokens - 1 over a KV cache.
///   q, out: [n_tokens][n_heads * head_dim] f32.
///   k, v:   cache rows 0 .. pos0 + n_tokens - 1, each row `kv_stride`
///           values apart (kv_stride >= n_kv_heads * head_dim), holding
///           n_kv_heads heads of head_dim, stored as `kv` says (f32 at
///           offsets that are multiples of 4, f16 and q8_0 of 2; a q8_0
///           cache's kv_stride and head_dim are multiples of 32). The
///           caller has written the rows of the new tokens before
///           (ordering rule 4): an f16 cache's with to_f16, a q8_0 cache's
///           with to_q8_0.
/// Query row t, head h attends to cache rows 0 .. pos0 + t of KV head
/// h / (n_heads / n_kv_heads): out = softmax(scale * q.k) . v, where every
/// K and V value is the nearest half (ties to even) of what was written,
/// as llama.cpp's F16 KV cache holds it: an f16 cache holds those halves,
/// an f32 cache is rounded where read, so both give the same results and
/// every backend sees the same keys and values. A q8_0 cache holds Q8_0
/// blocks, and its attention is llama.cpp's flash attention over them: each
/// query head quantized to Q8_0, scores by ggml_vec_dot_q8_0_q8_0, V rows
/// decoded to f32 and summed with fused multiply-adds in an f32 accumulator.
/// The cpu and sim devices compute llama.cpp's CPU flash attention bit for
/// bit (host::attention); GPU kernels sum in F32 (their q8_0 attention
/// decodes the blocks and keeps Q in f32).
struct attention_dims {
  std::size_t n_tokens = 0;
  std::size_t pos0 = 0;
  std::size_t n_heads = 0;
  std::size_t n_kv_heads = 0; ///< divides n_heads
  std::size_t head_dim = 0;
  std::size_t kv_stride = 0;  ///< values between cache rows
  float scale = 1.0f;         ///< usually 1 / sqrt(head_dim)
  kv_type kv = kv_type::f32;  ///< how k and v are stored
  /// A paged cache (device::attention_paged; 0: one run of rows): rows in
  /// blocks of `block_positions` (a power of two), blocks `block_stride`
  /// values apart from k and v; cache row i is row i % block_positions of
  /// block table[i / block_positions]. The bits are those of the same rows
  /// in one run.
  std::size_t block_positions = 0;
  std::size_t block_stride = 0;
  /// The kernels' copy of the block table (set by the device from the
  /// table operand: host memory for the host kernels, which the device
  /// checked against the buffers; device memory for a GPU kernel).
  const std::int32_t* block_table = nullptr;
  /// A GPU kernel's clamp: an entry past it reads this block (the last
  /// inside the views; a kernel cannot refuse a table).
  std::size_t max_block = 0;
  /// A GPU kernel's copy of attention_paged_rows' tables (device memory;
  /// null otherwise): query row t is one token at position
  /// row_tables[t * (1 + row_table_len)] (clamped into the table) over
  /// the row_table_len block indices after it; pos0 is not used.
  const std::int32_t* row_tables = nullptr;
  std::size_t row_table_len = 0;
};

/// Block indices a paged attention's table holds: one per block its
/// queries see (ceil((pos0 + n_tokens) / block_positions)).
inline std::size_t attention_blocks(const attention_dims& d) noexcept {
  return d.block_positions == 0
           ? 0
           : (d.pos0 + d.n_tokens + d.block_positions - 1) / d.block_positions;
}

/// A decode batch's new K (or V) rows into a paged cache
/// (device::store_kv_rows): row r of `a` (width f32 values) goes to cache
/// row p % block_positions of block table[p / block_positions], where p
/// and table are row r's entry of attention_paged_rows' tables (its
/// position, then table_len block indices). It is stored as the cache
/// holds it: an f16 cache's as to_f16 rounds it, a q8_0 cache's as
/// to_q8_0 quantizes it (width a multiple of 32), an f32 cache's as is.
struct kv_rows_dims {
  std::size_t rows = 0;            ///< rows of a, one per sequence
  std::size_t width = 0;           ///< values of a row (<= kv_stride)
  std::size_t kv_stride = 0;       ///< values between cache rows
  kv_type kv = kv_type::f16;       ///< how the cache stores them
  std::size_t block_positions = 0; ///< a power of two
  std::size_t block_stride = 0;    ///< values between blocks
  std::size_t table_len = 0;       ///< block indices per row
  /// A GPU kernel's clamp (set by the device): positions are clamped into
  /// the table, block indices to this block (the last inside the view).
  std::size_t max_block = 0;
};

/// store_kv_rows' cache seen as attention of one head of `width` values at
/// the last position its tables cover: host::check_paged_attention of it
/// gives a block's bytes and what kv must hold.
inline attention_dims kv_rows_attention(const kv_rows_dims& d) noexcept {
  attention_dims a{1, d.table_len * d.block_positions - 1, 1, 1, d.width,
                   d.kv_stride, 1.0f, d.kv};
  a.block_positions = d.block_positions;
  a.block_stride = d.block_stride;
  return a;
}

// -- device ------------------------------------------------------------------

/// One device: the only way to its memory and its queue.
class device {
public:
  device();
  virtual ~device();
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  /// A process-unique number for this device instance (events carry it).
  std::uint64_t uid() const noexcept {
    return uid_;
  }

  virtual const device_properties& properties() const = 0;

  // memory
  virtual result<std::unique_ptr<buffer>> allocate(std::size_t bytes) = 0;
  virtual memory_info memory() = 0;

  /// Optional: `buf` (of this device, writable) as a buffer of `bytes`,
  /// its first min(old, new) bytes kept, without a second buffer's worth
  /// of memory at any time: growing needs room for the difference only.
  /// Ordered like `copy` (rule 4: operations before it see the old
  /// buffer, after it the new one). Its memory may move (host pointers
  /// taken before are stale). On failure the buffer is as it was. The
  /// default says unsupported; callers then allocate a new buffer and
  /// copy. A host device moves pages, not bytes (huge_page_arena).
  virtual status resize(buffer& buf, std::size_t bytes);
  /// Whether resize is supported (the default: no).
  virtual bool resizes() const noexcept;

  /// Whether this device's matmul_weights runs weights encoded as t. The
  /// default: f32, f16 and q8_0 (every backend's kernels); host devices run
  /// every type. matmul_weights refuses the others with errc::unsupported.
  virtual bool runs_weights(weight_type t) const noexcept;

  /// The encoding this device would rather hold a rows x cols matrix of
  /// type t in (a layout of its own kernels, with the same results), or t
  /// itself (the default). The cpu device packs Q4_K as q4_k_x16 where
  /// its CPU has AVX-512 VNNI and no AMX tiles, and Q6_K as q6_k_x16
  /// where it has AVX-512 VNNI (cpu_options::pack_q6_k); its matrices are
  /// then copies, not read in place.
  virtual weight_type preferred_weights(weight_type t, std::size_t rows,
                                        std::size_t cols) const noexcept;

  /// Optional: `bytes` of host memory at `data`, read in place as a
  /// read-only buffer (no copy) while `keep` holds that memory alive: a
  /// host device's weights straight from the mapped model file. It counts
  /// against the device's memory like an allocation of `bytes`. The default
  /// says unsupported; callers then allocate and write.
  virtual result<std::unique_ptr<buffer>>
  adopt_host(const void* data, std::size_t bytes,
             std::shared_ptr<const void> keep);
  /// Whether memory().free counts host memory read in place (adopt_host)
  /// as used, so that releasing such a buffer gives its bytes back. The
  /// default: yes. Not the cpu device without a memory limit, whose free
  /// memory is the host's available memory, which counts a mapped file's
  /// pages as available already.
  virtual bool counts_adopted_memory() const noexcept;

  // transfers (see the ordering rules at the top of this file)
  virtual status write(buffer& dst, std::size_t offset, const void* src,
                       std::size_t bytes)
    = 0;
  virtual status read(const buffer& src, std::size_t offset, void* dst,
                      std::size_t bytes)
    = 0;
  virtual status copy(const buffer& src, std::size_t src_offset, buffer& dst,
                      std::size_t dst_offset, std::size_t bytes)
    = 0;

  /// Optional: copy straight into a buffer of another device. The default
  /// says unsupported; copy_between() then goes through host memory.
  virtual status copy_to_peer(const buffer& src, std::size_t src_offset,
                              buffer& dst, std::size_t dst_offset,
                              std::size_t bytes);

  /// Optional: a host pointer to the buffer's memory, valid while the buffer
  /// lives, or nullptr. Callers must synchronize before touching it.
  virtual void* host_pointer(buffer& buf);

  // synchronization
  virtual status synchronize() = 0;
  virtual result<event> record() = 0;
  virtual status wait(const event& e) = 0;
  virtual result<bool> completed(const event& e) = 0;

  // compute. Each public method checks every operand once against the op
  // table's rules (ops.hpp) and rule 10 (ownership, range, alignment,
  // overlap, dims, read-only outputs), then calls its do_* method, which
  // may assume checked input. Failures name the operation and operand.

  /// out[i] = a[i] (op) b[i], f32, i < count. out may equal a or b.
  status elementwise(binary_op op, const_view a, const_view b, mut_view out,
                     std::size_t count);
  /// C[m x n] = A[m x k] * B (B^T with transpose_b), all f32.
  status matmul(const_view a, const_view b, mut_view c,
                const matmul_dims& dims);

  // compute: the operations of a Llama layer. Numerics follow llama.cpp's
  // CPU backend: F16 weights meet activations rounded to half, Q8_0 weights
  // meet activations quantized to Q8_0 blocks.

  /// C[m x n] = A[m x k] * W^T: A f32 row-major, W stored [n x k] (a linear
  /// layer's weight: n rows of k elements) encoded as `type`. dims.k must be
  /// a whole number of the type's blocks (32 for q8_0, 256 for the
  /// K-quants); dims.transpose_b is ignored (always [n x k]). A type the
  /// device does not run (runs_weights) is refused with errc::unsupported.
  status matmul_weights(const_view a, const_view w, weight_type type,
                        mut_view c, const matmul_dims& dims);

  /// out[r][i] = x[r][i] / sqrt(mean_i(x[r][i]^2) + eps) * weight[i] for
  /// x, out [rows][dim] f32 and weight [dim] f32. out may equal x.
  status rms_norm(const_view x, const_view weight, mut_view out,
                  std::size_t rows, std::size_t dim, float eps);

  /// Rotates x in place (see rope_dims). positions: rows int32 values.
  /// freq_factors: n_rot / 2 f32, or a view with a null buffer for none.
  status rope(mut_view x, const_view positions, const_view freq_factors,
              const rope_dims& dims);
  /// Rotates x in place by angles computed ahead: cache holds dims.rows x
  /// dims.n_rot f32, row r's cosine and sine of each pair's angle
  /// (host::rope_cache; dims.freq_base is unused). Given host::rope_cache's
  /// angles for positions, every device gives rope's bits: the host's
  /// rotation, one fused multiply-add per element.
  status rope_cached(mut_view x, const_view cache, const rope_dims& dims);

  /// out = causal grouped-query attention (see attention_dims).
  status attention(const_view q, const_view k, const_view v, mut_view out,
                   const attention_dims& dims);
  /// The same over a paged cache: `table` holds attention_blocks(dims)
  /// int32 block indices; k and v are the first block's rows of the KV
  /// head 0 (a layer's part of block 0 of the cache's pool), and every
  /// block a table names must lie inside their views (checked, on the
  /// host devices against the table's values; an index outside is an
  /// error naming it, never a read outside).
  status attention_paged(const_view q, const_view k, const_view v,
                         const_view table, mut_view out,
                         const attention_dims& dims);
  /// Whether attention_paged runs natively (reading rows through the
  /// table); false: the default, correct but through host memory, so a
  /// stage keeps contiguous caches there.
  virtual bool reads_kv_blocks() const noexcept;
  /// A decode batch's attention in one operation: row r of q (dims.n_tokens
  /// rows) is one token of its own sequence. `tables` holds, per row,
  /// 1 + table_len int32: the row's position p, then the block indices of
  /// its cache (as attention_paged's table; those past its last block are
  /// not read). Row r gives the bits of attention_paged of that row alone
  /// at pos0 = p with n_tokens = 1 (dims.pos0 is not used). A position
  /// outside [0, table_len * block_positions) is an error naming the row
  /// on the host devices; a GPU kernel clamps it into the table.
  status attention_paged_rows(const_view q, const_view k, const_view v,
                              const_view tables, mut_view out,
                              const attention_dims& dims,
                              std::size_t table_len);
  /// Writes a decode batch's new K (or V) rows, each to its own
  /// sequence's slot of a paged cache (kv_rows_dims): the bytes to_f16,
  /// to_q8_0 or a copy of that row alone would write there; nothing else
  /// of kv changes. `tables` is attention_paged_rows' (the same step's),
  /// kv the cache view attention_paged_rows reads (block 0 of its layer).
  /// A position outside its table, or a block whose rows do not lie in
  /// kv, is an error naming the row on the host devices, and nothing is
  /// written; a GPU kernel clamps both (never a write outside kv). Two
  /// rows naming one slot: one of them lands there.
  status store_kv_rows(const_view a, const_view tables, mut_view kv,
                       const kv_rows_dims& dims);
  /// Whether attention_paged_rows and store_kv_rows run as one operation
  /// each (else: the default, correct, but row by row after reading the
  /// tables back, which waits for the device's queue; a stage then sends
  /// a sequence at a time). The host devices do (their attention's rows
  /// over the kernels' threads, each row's bits its own), and so do the
  /// GPU devices' kernels.
  virtual bool runs_paged_rows() const noexcept;

  /// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i],
  /// f32, i < count > 0. out may equal gate or up.
  status silu_mul(const_view gate, const_view up, mut_view out,
                  std::size_t count);

  /// out[i] = a[i] rounded to the nearest half (ties to even), stored as
  /// IEEE half, i < count > 0: the rows of an f16 KV cache. a is f32 at a
  /// multiple of 4, out at a multiple of 2; they do not overlap.
  status to_f16(const_view a, mut_view out, std::size_t count);
  /// out = a (count f32, a multiple of 32) as Q8_0 blocks, quantized as
  /// llama.cpp's x86 CPU backend quantizes rows into a q8_0 KV cache
  /// (host::quantize_q8_0_activations): count / 32 blocks of 34 bytes.
  status to_q8_0(const_view a, mut_view out, std::size_t count);
  /// out = a with every run of n values (n a power of two, 2 <= n <=
  /// 4096, count a multiple of n) rotated by the orthonormal
  /// Walsh-Hadamard matrix of order n, as ggml's CPU backend computes a
  /// product with such a matrix (host::hadamard). out may be a.
  status hadamard(const_view a, mut_view out, std::size_t count,
                  std::size_t n);

  // telemetry
  virtual telemetry read_telemetry() = 0;

  /// Optional, for test clusters: applies an injected fault named by `spec`
  /// now (a simulated device's faults: sim_fault_error() in
  /// backends/sim/sim_backend.hpp names them) and returns what it did. The
  /// default refuses with errc::unsupported: a real device takes no faults.
  virtual result<std::string> inject_fault(const std::string& spec);

  /// Measures again the rates the device measured itself (peak_flops,
  /// memory_bandwidth, launch_seconds: the cpu device with
  /// cpu_options::measure_rates, a Vulkan device with
  /// vulkan_options::measure_rates): properties() takes the new figures.
  /// Call it only while no work runs on the device, from the thread that
  /// runs its operations (its device actor), which alone reads the rates.
  /// False (the default): the device measures nothing of its own.
  virtual bool measure_rates_again();

protected:
  // compute, called by the public methods above with checked operands
  // (every view of this device, inside its buffer and limit, aligned, not
  // overlapping the output except in place where allowed; dims valid; a
  // known binary_op). The defaults run on the host through read and write:
  // a device without native kernels still computes correctly, only slower.
  // An override may call them as its fallback.
  virtual status do_elementwise(binary_op op, const_view a, const_view b,
                                mut_view out, std::size_t count);
  virtual status do_matmul(const_view a, const_view b, mut_view c,
                           const matmul_dims& dims);
  virtual status do_matmul_weights(const_view a, const_view w,
                                   weight_type type, mut_view c,
                                   const matmul_dims& dims);
  virtual status do_rms_norm(const_view x, const_view weight, mut_view out,
                             std::size_t rows, std::size_t dim, float eps);
  virtual status do_rope(mut_view x, const_view positions,
                         const_view freq_factors, const rope_dims& dims);
  virtual status do_rope_cached(mut_view x, const_view cache,
                                const rope_dims& dims);
  virtual status do_attention(const_view q, const_view k, const_view v,
                              mut_view out, const attention_dims& dims);
  /// dims.block_table is null here: the table is in `table`.
  virtual status do_attention_paged(const_view q, const_view k,
                                    const_view v, const_view table,
                                    mut_view out, const attention_dims& dims);
  /// Checked: the views hold dims.n_tokens rows and their tables.
  virtual status do_attention_paged_rows(const_view q, const_view k,
                                         const_view v, const_view tables,
                                         mut_view out,
                                         const attention_dims& dims,
                                         std::size_t table_len);
  /// Checked: the views hold dims.rows rows, their tables and one block.
  virtual status do_store_kv_rows(const_view a, const_view tables,
                                  mut_view kv, const kv_rows_dims& dims);
  virtual status do_silu_mul(const_view gate, const_view up, mut_view out,
                             std::size_t count);
  virtual status do_to_f16(const_view a, mut_view out, std::size_t count);
  virtual status do_to_q8_0(const_view a, mut_view out, std::size_t count);
  virtual status do_hadamard(mut_view out, const_view a, std::size_t count,
                             std::size_t n);

  /// Checks that `buf` belongs to this device and [offset, offset + bytes)
  /// lies inside it.
  status check_range(const buffer& buf, std::size_t offset,
                     std::size_t bytes, const char* what) const;

  /// Refuses a read-only buffer as the target of a write.
  static status check_writable(const buffer& buf, const char* what);

  /// Checks an event belongs to this device and is not from the future.
  status check_event(const event& e, std::uint64_t submitted) const;

private:
  /// Checks operand `name` of an operation of `kind`: a non-null buffer
  /// of this device, [offset, offset + bytes) inside it and below the
  /// view's limit, offset a multiple of align; for an output, a writable
  /// buffer.
  status check_view(op_kind kind, const char* name, const buffer* buf,
                    std::size_t offset, std::size_t limit, std::size_t bytes,
                    std::size_t align, bool output) const;

  std::uint64_t uid_;
};

// -- backend -----------------------------------------------------------------

/// One implementation (cpu, vulkan, cuda, hip, sim) and its devices.
class backend {
public:
  virtual ~backend();

  virtual backend_kind kind() const = 0;

  /// Finds the devices. An error says why there are none ("CUDA driver not
  /// found"); the factory reports it and goes on to the next backend.
  virtual status initialize() = 0;

  /// Releases every device. Buffers must have been destroyed already.
  virtual void shutdown() = 0;

  virtual std::size_t device_count() const = 0;
  virtual device* device_at(std::size_t index) = 0;
};

// -- generic operations ------------------------------------------------------

/// Copies between any two devices: the same device uses copy(); a peer path
/// if the source has one; mapped host pointers when both are host-visible;
/// otherwise bounded chunks through host memory (never one huge staging
/// buffer). Synchronous: returns when the data is in `dst`.
status copy_between(device& src_dev, const buffer& src, std::size_t src_offset,
                    device& dst_dev, buffer& dst, std::size_t dst_offset,
                    std::size_t bytes);

/// Refuses an output range that overlaps an input range of the same buffer
/// (invalid_argument), except the very same range when same_ok (in place).
status check_disjoint(const buffer* in, std::size_t in_offset,
                      std::size_t in_bytes, const buffer* out,
                      std::size_t out_offset, std::size_t out_bytes,
                      bool same_ok, const char* what);

/// Bytes of f32 data in a matrix, with overflow checks.
result<std::size_t> f32_bytes(std::size_t rows, std::size_t cols);

/// One compute operation as data: an op kind, its operand views, dims and
/// scalars, in the order of the op table (ops.hpp). Fixed capacity: making
/// one allocates nothing.
struct op_call {
  op_kind kind = op_kind::add;
  std::array<const_view, max_op_inputs> inputs{};
  std::size_t n_inputs = 0;
  mut_view output;
  std::array<std::uint64_t, max_op_dims> dims{};
  std::size_t n_dims = 0;
  std::array<float, max_op_scalars> scalars{};
  std::size_t n_scalars = 0;
};

/// Runs `call` on `dev`: checks its counts against the op table
/// (check_counts), then calls the device's method for its kind, which
/// checks the operands. The one generic entry of the device actor and the
/// stage executor.
status run(device& dev, const op_call& call);

} // namespace exo::backend
