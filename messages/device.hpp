#pragma once

/// The wire contract of a device actor: what it says about itself and the
/// typed interface every peer uses to talk to it.
///
///   client ---- allocate(bytes) ----> device   -> handle (opaque id)
///   client ---- adopt(host_region) -> device   -> handle (same node only)
///   client ---- write(h, off, chunk)-> device   -> unit   (bounds-checked)
///   client ---- read(h, off, len) ---> device   -> chunk  (len bounded)
///   client ---- compute(kernel_call) or compute([kernel_call...]) -> device
///   client ---- copy(h, off, peer, h2, off2, len) -> device
///                  device ---- write(h2, ...) ---> peer  (in bounded chunks)
///   thermal --- pause / resume ------> device   (in-flight work finishes)
///   shard ----- task(device_task) ---> device   (this process only: a
///                  closure run on the device's thread; answers itself)

#include "messages/atoms.hpp"
#include "messages/bounded_bytes.hpp"
#include "messages/wire_real.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/optional.hpp>

#include <caf/response_promise.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace exo {

/// The largest chunk of bytes one message may carry. CAF 0.17 serializes
/// whole messages in memory and trusts a peer's length: bulk data always
/// crosses in chunks no larger than this.
constexpr std::uint64_t max_chunk_bytes = 4u << 20;

/// Memory of the sender's process that a host device reads in place
/// (backend::device::adopt_host): a shard's weights where the model file is
/// mapped. It holds a pointer, so it never crosses the network: it has no
/// inspect (CAF cannot serialize it, and a peer cannot name it), and the
/// device actor takes it only from an actor of its own node.
struct host_region {
  const void* data = nullptr;
  std::uint64_t bytes = 0;
  /// Keeps the memory alive while the device reads it.
  std::shared_ptr<const void> keep;
};

namespace device {
class task_context; // actors/device/device_task.hpp
} // namespace device

/// Work an actor of this node runs on a device actor's own thread, with the
/// device in reach (device::task_context: device_ops over the actor's pool,
/// so the actor's handles): a shard's stage lives there and each of its
/// steps is one task, not a batch of kernel calls crossing the mailbox.
/// It holds a closure, so it never crosses the network: it has no inspect
/// and CAF cannot deserialize it.
///
/// `run` answers the request through the promise it is given (deliver, or
/// delegate onwards, now or later on the device actor's thread). While the
/// device is paused, compute tasks are held and run, in order, when it
/// resumes; ordered tasks (a stage's set-up, release, teardown) are held
/// too while any task is held, so they stay behind the steps sent before
/// them; immediate ones (inspect) run at once. Every kernel a task runs is
/// counted and audited as one compute batch.
enum class task_kind : std::uint8_t { compute, ordered, immediate };

struct device_task {
  task_kind kind = task_kind::ordered;
  std::function<void(device::task_context&, caf::response_promise&)> run;
  /// Called, on the device actor's thread, when the device refuses the
  /// task (it failed verification or is gone) before it runs; optional.
  std::function<void(const caf::error&)> refused;
};

/// Lifecycle of a device actor.
enum class device_state : std::uint8_t { ready, busy, paused, failed, gone };

const char* to_string(device_state s) noexcept;

/// Bytes in a message (std::vector<uint8_t> is not a built-in CAF type).
struct chunk {
  std::vector<std::uint8_t> bytes;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, chunk& x) {
  auto bytes = bounded<max_chunk_bytes>(x.bytes);
  return wire(f, caf::meta::type_name("exo.chunk"), bytes);
}

/// What a device actor reports about its device.
struct device_info {
  std::string id;
  std::string node;
  std::string backend;
  std::string name;
  std::string vendor;
  std::string architecture;
  std::string driver_version;
  std::string pci_bus_id;
  std::string support;
  bool simulated = false;
  std::uint64_t total_memory = 0;
  std::uint64_t free_memory = 0;
  std::uint64_t max_allocation = 0;
  std::uint32_t compute_units = 0;
  std::uint32_t clock_mhz = 0; ///< 0: unknown
  double peak_flops = 0;       ///< 0: unknown
  double memory_bandwidth = 0; ///< 0: unknown
  double launch_seconds = 0;   ///< an operation's own cost; 0: unknown
  std::uint32_t capabilities = 0;
  device_state state = device_state::ready;
  std::string state_reason; ///< why failed / paused / gone
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_info& x) {
  return wire(f, caf::meta::type_name("exo.device_info"), x.id, x.node,
              x.backend, x.name, x.vendor, x.architecture, x.driver_version,
              x.pci_bus_id, x.support, x.simulated, x.total_memory,
              x.free_memory, x.max_allocation, x.compute_units, x.clock_mhz,
              x.peak_flops, x.memory_bandwidth, x.launch_seconds,
              x.capabilities, x.state,
              x.state_reason);
}

/// One telemetry sample. Readings the device cannot make are absent.
struct telemetry_sample {
  std::string device;
  std::int64_t time_ns = 0; ///< system clock
  caf::optional<double> temperature_c;
  caf::optional<double> power_w;
  caf::optional<std::uint32_t> clock_mhz;
  caf::optional<double> utilization;
  std::uint64_t memory_total = 0;
  std::uint64_t memory_free = 0;
  std::uint64_t memory_used_by_exo = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, telemetry_sample& x) {
  return wire(f, caf::meta::type_name("exo.telemetry_sample"), x.device,
              x.time_ns, x.temperature_c, x.power_w, x.clock_mhz, x.utilization,
              x.memory_total, x.memory_free, x.memory_used_by_exo);
}

/// A structured snapshot of an actor's state, for the inspection console.
struct actor_snapshot {
  std::string name;
  std::string kind;
  std::string node;
  std::string summary;
  std::map<std::string, std::string> fields;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_snapshot& x) {
  return wire(f, caf::meta::type_name("exo.actor_snapshot"), x.name, x.kind,
              x.node, x.summary, x.fields);
}

/// Opaque buffer handles: ids, never addresses.
using handle_id = std::uint64_t;

/// A compute request on buffers of one device. `op` is the operation's
/// number, backend::to_wire(backend::op_kind) (backends/ops.hpp, whose
/// table gives each operation's inputs, dims and scalars, in the order these
/// vectors hold them, and its name for messages). Every operand is a handle
/// plus a byte offset; the device checks each against the handle's size.
/// All tensors are f32 row-major unless said otherwise; offsets are
/// multiples of 4 (of 2 for F16 and Q8_0 weights). Shapes and numerics are
/// those of backends/backend.hpp, which runs each call (backend::run). A
/// peer is never trusted: an unknown number, or counts of inputs, offsets,
/// dims or scalars that do not match the table, are refused with an error
/// naming the problem. In short:
///   add, mul:    out[i] = a[i] (op) b[i], inputs {a, b}, dims {count}
///   matmul:      C[m x n] = A[m x k] * B[k x n], inputs {A, B},
///                dims {m, n, k}
///   matmul_t:    C[m x n] = A[m x k] * B^T, B stored [n x k]
///   matmul_f32, matmul_f16, matmul_q8_0:
///                C[m x n] = A[m x k] * W^T, W stored [n x k] in GGUF's
///                encoding (Q8_0: k/32 blocks of 34 bytes per row),
///                inputs {A, W}, dims {m, n, k}
///   rms_norm:    out[rows][dim] = x / rms(x) * weight[dim],
///                inputs {x, weight}, dims {rows, dim}, scalars {eps};
///                output may be x
///   rope:        output x[rows][heads][head_dim] rotated in place,
///                inputs {positions (int32 [rows])} or {positions,
///                freq_factors (f32 [n_rot/2])}, dims {rows, heads,
///                head_dim, n_rot}, scalars {freq_base}
///   attention:   out[n_tokens][n_heads*head_dim] = causal GQA of q rows
///                at positions pos0.. over K/V cache rows 0..pos0+t,
///                inputs {q, k_cache, v_cache}, dims {n_tokens, pos0,
///                n_heads, n_kv_heads, head_dim, kv_stride (floats)},
///                scalars {scale}
///   silu_mul:    out[i] = silu(gate[i]) * up[i], inputs {gate, up},
///                dims {count}; output may be gate or up
struct kernel_call {
  std::uint8_t op = 0; ///< backend::op_kind's wire number; 0 is none
  std::vector<handle_id> inputs;
  std::vector<std::uint64_t> input_offsets;
  handle_id output = 0;
  std::uint64_t output_offset = 0;
  std::vector<std::uint64_t> dims;
  std::vector<float> scalars; ///< f32 parameters (eps, freq_base, scale)
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kernel_call& x) {
  return wire(f, caf::meta::type_name("exo.kernel_call"), x.op, x.inputs,
              x.input_offsets, x.output, x.output_offset, x.dims, x.scalars);
}

/// The most kernel_calls one batched compute request may carry.
constexpr std::size_t max_kernel_batch = 4096;

/// The typed interface of a device actor. (compute_atom,
/// std::vector<kernel_call>) runs up to max_kernel_batch calls in order with
/// one reply (a shard's forward step): each call is checked like a single
/// one, and the first failure stops the batch with an error naming its
/// index. Like the other token-less requests it is for actors of this node.
///
/// (compute_atom, in, in_offset, chunk, calls, out, out_offset, out_len)
/// -> (chunk, calls) is a whole step in one request: the chunk written at
/// (in, in_offset) (none when empty), the calls run, then out_len bytes
/// (at most max_chunk_bytes) read from (out, out_offset). A paused device
/// refuses it before writing anything. One request instead of three saves
/// two round trips between the caller's thread and the device actor's. The
/// calls come back with the reply, so that a shard refills the same
/// vectors for its next step instead of allocating ~700 and freeing them
/// on the device actor's thread.
using device_actor = caf::typed_actor<
    caf::replies_to<compute_atom, handle_id, std::uint64_t, chunk,
                    std::vector<kernel_call>, handle_id, std::uint64_t,
                    std::uint64_t>::with<chunk, std::vector<kernel_call>>,
    caf::replies_to<info_atom>::with<device_info>,
    caf::replies_to<allocate_atom, std::uint64_t>::with<handle_id>,
    caf::replies_to<adopt_atom, host_region>::with<handle_id>,
    caf::replies_to<free_atom, handle_id>::with<caf::atom_value>,
    caf::replies_to<write_atom, handle_id, std::uint64_t,
                    chunk>::with<caf::atom_value>,
    caf::replies_to<read_atom, handle_id, std::uint64_t,
                    std::uint64_t>::with<chunk>,
    caf::replies_to<copy_atom, handle_id, std::uint64_t, caf::actor, handle_id,
                    std::uint64_t, std::uint64_t>::with<caf::atom_value>,
    caf::replies_to<compute_atom, kernel_call>::with<caf::atom_value>,
    caf::replies_to<compute_atom,
                    std::vector<kernel_call>>::with<caf::atom_value>,
    caf::replies_to<sync_atom>::with<caf::atom_value>,
    caf::reacts_to<tick_atom>,              // sends held-back audit events
    caf::reacts_to<tick_atom, measure_atom>, // measures its rates if idle
    caf::reacts_to<task_atom, device_task>, // answered by the task itself
    caf::replies_to<telemetry_atom>::with<telemetry_sample>,
    caf::replies_to<pause_atom, std::string>::with<caf::atom_value>,
    caf::replies_to<resume_atom>::with<caf::atom_value>,
    caf::replies_to<inspect_atom>::with<actor_snapshot>,
    // Client-originated variants: the last element is a bearer token checked
    // against the node's access policy (messages/access.hpp).
    caf::replies_to<info_atom, std::string>::with<device_info>,
    caf::replies_to<allocate_atom, std::uint64_t, std::string>::with<handle_id>,
    caf::replies_to<free_atom, handle_id, std::string>::with<caf::atom_value>,
    caf::replies_to<compute_atom, kernel_call,
                    std::string>::with<caf::atom_value>,
    caf::replies_to<sync_atom, std::string>::with<caf::atom_value>,
    caf::replies_to<fault_atom, std::string, std::string>::with<std::string>>;

} // namespace exo

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(exo::host_region)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(exo::device_task)
