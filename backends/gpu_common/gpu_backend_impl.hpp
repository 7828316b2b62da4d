#pragma once

/// The device and backend of the CUDA and HIP backends, written once against
/// the CUDA runtime's names. cuda_backend.cpp includes it after
/// <cuda_runtime_api.h>; hip_backend.cpp after hip_runtime_compat.hpp, which
/// maps those names to HIP's. Each instantiates it in its own
/// namespace and supplies a platform type P:
///
///   struct P {
///     static constexpr backend_kind kind;
///     static constexpr gpu::api api;          // for error tables
///     static constexpr const char* id_prefix; // "cuda"
///     static constexpr const char* vendor;    // "NVIDIA"
///     static constexpr const char* no_device_text; // "no CUDA device"
///     static constexpr bool has_blas;         // else the tiled kernel
///     static std::string driver_version(int v);
///     static void describe(int ordinal, const cudaDeviceProp&,
///                          device_properties&); // arch, uuid, FLOP/s
///     static bool has_kernels(const device_properties&); // else host
///     // the kernels: launch_binary, launch_attention, ... (the platform
///     // derives from its kernel namespace's `launches`, kernel_api.hpp)
///     static result<std::shared_ptr<gpu::management_library>>
///     load_telemetry();
///     struct blas;  // per device: status init(cudaStream_t),
///                   // void destroy(), status matmul(a, b, c, dims)
///   };
///
/// How the ordering rules of backend.hpp hold:
/// - Each device owns one non-blocking stream; every operation is enqueued on
///   it under the device's mutex, so operations take effect in call order.
/// - write: bounded chunks go through two pinned staging buffers; a chunk is
///   copied into a staging buffer once the event of that buffer's previous
///   transfer has completed, then enqueued. The source may be reused on
///   return; later work on the stream sees the data.
/// - read: chunks are enqueued into the staging buffers (double-buffered) and
///   copied out after their event completes, after all earlier work.
/// - copy and every compute operation are enqueued and return.
/// - record enqueues a cudaEvent_t and numbers it; wait/completed use it.
///   Events known complete are retired (in order: the stream is in order).
/// - buffers come from the device's stream-ordered memory pool
///   (cudaMallocAsync) and go back with cudaFreeAsync on the same stream,
///   i.e. after pending work that uses them.
/// - copy_to_peer orders itself with events in both directions: the copy
///   waits for the destination's earlier work, and the destination's later
///   work waits for the copy.

#include "backends/backend.hpp"
#include "backends/gpu_common/gpu_errors.hpp"
#include "backends/gpu_common/gpu_options.hpp"
#include "backends/gpu_common/gpu_properties.hpp"
#include "backends/gpu_common/kernel_math.hpp"
#include "backends/gpu_common/launch_geometry.hpp"
#include "backends/gpu_common/telemetry_loader.hpp"
#include "backends/host_kernels.hpp"
#include "backends/quant_repack.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#ifndef EXO_GPU_IMPL_NS
#  error "define EXO_GPU_IMPL_NS before including gpu_backend_impl.hpp"
#endif

/// The name of a runtime call as the runtime spells it: "cudaMallocAsync"
/// here is "hipMallocAsync" under hip_runtime_compat.hpp.
#define EXO_GPU_NAME(call) EXO_GPU_NAME_(call)
#define EXO_GPU_NAME_(call) #call

namespace exo::backend::EXO_GPU_IMPL_NS {

template <class P>
class gpu_device final : public device {
public:
  gpu_device(int ordinal, gpu_options opts) : ordinal_(ordinal), opts_(opts) {
  }

  ~gpu_device() override {
    if (cudaSetDevice(ordinal_) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (act_scratch_ != nullptr && stream_ != nullptr)
      (void)cudaFreeAsync(act_scratch_, stream_);
    if (stream_ != nullptr)
      (void)cudaStreamSynchronize(stream_);
    for (auto& [seq, ev] : pending_)
      (void)cudaEventDestroy(ev);
    for (auto ev : free_events_)
      (void)cudaEventDestroy(ev);
    for (int i = 0; i < 2; ++i) {
      if (staging_[i] != nullptr)
        (void)cudaFreeHost(staging_[i]);
      if (staging_done_[i] != nullptr)
        (void)cudaEventDestroy(staging_done_[i]);
    }
    if (order_event_ != nullptr)
      (void)cudaEventDestroy(order_event_);
    blas_.destroy();
    if (stream_ != nullptr)
      (void)cudaStreamDestroy(stream_);
    (void)cudaGetLastError();
  }

  /// Creates the stream, events and pool settings and reads the properties.
  status open(std::shared_ptr<gpu::management_library> mgmt) {
    EXO_TRY(check(cudaSetDevice(ordinal_), EXO_GPU_NAME(cudaSetDevice)));
    EXO_TRY(check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                  EXO_GPU_NAME(cudaStreamCreateWithFlags)));
    for (auto& ev : staging_done_)
      EXO_TRY(check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                    EXO_GPU_NAME(cudaEventCreateWithFlags)));
    EXO_TRY(check(cudaEventCreateWithFlags(&order_event_,
                                           cudaEventDisableTiming),
                  EXO_GPU_NAME(cudaEventCreateWithFlags)));
    // Keep freed blocks in the pool instead of returning them to the driver
    // at every synchronization: allocation then costs no driver call.
    cudaMemPool_t pool;
    EXO_TRY(check(cudaDeviceGetDefaultMemPool(&pool, ordinal_),
                  EXO_GPU_NAME(cudaDeviceGetDefaultMemPool)));
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    EXO_TRY(check(cudaMemPoolSetAttribute(
                    pool, cudaMemPoolAttrReleaseThreshold, &keep),
                  EXO_GPU_NAME(cudaMemPoolSetAttribute)));
    EXO_TRY(blas_.init(stream_));
    EXO_TRY(describe());
    if (mgmt) {
      auto probe = mgmt->probe(props_.pci_bus_id);
      if (probe) {
        probe_ = std::move(*probe);
        props_.capabilities |= probe_->capabilities();
      } else {
        telemetry_reason_ = probe.err().message;
      }
    }
    return {};
  }

  int ordinal() const noexcept {
    return ordinal_;
  }

  /// Why the device has no telemetry, or empty.
  void set_telemetry_reason(std::string why) {
    telemetry_reason_ = std::move(why);
  }

  /// Marks that a peer path exists to another device of this backend.
  void enable_peer_copy() {
    props_.capabilities |= cap_peer_copy;
  }

  const device_properties& properties() const override {
    return props_;
  }

  // -- memory ----------------------------------------------------------------

  result<std::unique_ptr<buffer>> allocate(std::size_t bytes) override {
    auto guard = enter();
    if (bytes == 0)
      return fail(errc::invalid_argument, "allocate: size must be > 0");
    if (bytes > props_.total_memory)
      return fail(errc::out_of_memory,
                  "allocate: " + std::to_string(bytes)
                    + " bytes requested, the device has "
                    + std::to_string(props_.total_memory));
    EXO_TRY(select());
    void* ptr = nullptr;
    EXO_TRY(check(cudaMallocAsync(&ptr, bytes, stream_), EXO_GPU_NAME(cudaMallocAsync)));
    used_ += bytes;
    return std::unique_ptr<buffer>{
      std::make_unique<gpu_buffer>(*this, ptr, bytes)};
  }

  memory_info memory() override {
    auto guard = lock_reading();
    return memory_locked();
  }

  // -- transfers -------------------------------------------------------------

  status write(buffer& dst, std::size_t offset, const void* src,
               std::size_t bytes) override {
    auto guard = enter();
    EXO_TRY(check_range(dst, offset, bytes, "write"));
    if (bytes == 0)
      return {};
    if (src == nullptr)
      return fail(errc::invalid_argument, "write: null host pointer");
    EXO_TRY(select());
    EXO_TRY(ensure_staging());
    auto* out = ptr_of(dst) + offset;
    auto* in = static_cast<const char*>(src);
    gpu::chunk_plan plan{bytes, opts_.staging_bytes};
    for (std::size_t i = 0; i < plan.count(); ++i) {
      int slot = next_slot();
      EXO_TRY(check(cudaEventSynchronize(staging_done_[slot]),
                    EXO_GPU_NAME(cudaEventSynchronize)));
      std::memcpy(staging_[slot], in + plan.offset(i), plan.size(i));
      EXO_TRY(check(cudaMemcpyAsync(out + plan.offset(i), staging_[slot],
                                    plan.size(i), cudaMemcpyHostToDevice,
                                    stream_),
                    EXO_GPU_NAME(cudaMemcpyAsync)));
      EXO_TRY(check(cudaEventRecord(staging_done_[slot], stream_),
                    EXO_GPU_NAME(cudaEventRecord)));
    }
    return {};
  }

  status read(const buffer& src, std::size_t offset, void* dst,
              std::size_t bytes) override {
    auto guard = enter();
    EXO_TRY(check_range(src, offset, bytes, "read"));
    if (bytes == 0)
      return {};
    if (dst == nullptr)
      return fail(errc::invalid_argument, "read: null host pointer");
    EXO_TRY(select());
    EXO_TRY(ensure_staging());
    auto* in = ptr_of(src) + offset;
    auto* out = static_cast<char*>(dst);
    gpu::chunk_plan plan{bytes, opts_.staging_bytes};
    // Enqueue chunk i + 1 before copying chunk i out: the DMA engine and the
    // host memcpy overlap.
    int slots[2] = {-1, -1};
    auto enqueue = [&](std::size_t i) -> status {
      int slot = next_slot();
      slots[i % 2] = slot;
      EXO_TRY(check(cudaEventSynchronize(staging_done_[slot]),
                    EXO_GPU_NAME(cudaEventSynchronize)));
      EXO_TRY(check(cudaMemcpyAsync(staging_[slot], in + plan.offset(i),
                                    plan.size(i), cudaMemcpyDeviceToHost,
                                    stream_),
                    EXO_GPU_NAME(cudaMemcpyAsync)));
      return check(cudaEventRecord(staging_done_[slot], stream_),
                   EXO_GPU_NAME(cudaEventRecord));
    };
    EXO_TRY(enqueue(0));
    for (std::size_t i = 0; i < plan.count(); ++i) {
      if (i + 1 < plan.count())
        EXO_TRY(enqueue(i + 1));
      int slot = slots[i % 2];
      EXO_TRY(check(cudaEventSynchronize(staging_done_[slot]),
                    EXO_GPU_NAME(cudaEventSynchronize)));
      std::memcpy(out + plan.offset(i), staging_[slot], plan.size(i));
    }
    return {};
  }

  status copy(const buffer& src, std::size_t src_offset, buffer& dst,
              std::size_t dst_offset, std::size_t bytes) override {
    auto guard = enter();
    EXO_TRY(check_range(src, src_offset, bytes, "copy source"));
    EXO_TRY(check_range(dst, dst_offset, bytes, "copy destination"));
    if (bytes == 0)
      return {};
    EXO_TRY(select());
    auto* from = ptr_of(src) + src_offset;
    auto* to = ptr_of(dst) + dst_offset;
    bool overlap = &src == &dst && from < to + bytes && to < from + bytes;
    if (!overlap)
      return check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice,
                                   stream_),
                   EXO_GPU_NAME(cudaMemcpyAsync));
    // Overlapping ranges: through a stream-ordered temporary, as memmove.
    void* tmp = nullptr;
    EXO_TRY(check(cudaMallocAsync(&tmp, bytes, stream_), EXO_GPU_NAME(cudaMallocAsync)));
    auto st = check(cudaMemcpyAsync(tmp, from, bytes,
                                    cudaMemcpyDeviceToDevice, stream_),
                    EXO_GPU_NAME(cudaMemcpyAsync));
    if (st)
      st = check(cudaMemcpyAsync(to, tmp, bytes, cudaMemcpyDeviceToDevice,
                                 stream_),
                 EXO_GPU_NAME(cudaMemcpyAsync));
    (void)cudaFreeAsync(tmp, stream_);
    return st;
  }

  status copy_to_peer(const buffer& src, std::size_t src_offset, buffer& dst,
                      std::size_t dst_offset, std::size_t bytes) override {
    auto* peer = dynamic_cast<gpu_device*>(&dst.owner());
    if (peer == nullptr)
      return fail(errc::unsupported,
                  "copy_to_peer: the destination is not a "
                    + std::string{P::id_prefix} + " device");
    if (peer == this)
      return copy(src, src_offset, dst, dst_offset, bytes);
    std::scoped_lock guard{mtx_, peer->mtx_};
    ++entries_;
    ++peer->entries_; // its memory is written
    EXO_TRY(check_range(src, src_offset, bytes, "copy_to_peer source"));
    EXO_TRY(peer->check_range(dst, dst_offset, bytes,
                              "copy_to_peer destination"));
    if (bytes == 0)
      return {};
    // The copy runs on our stream after the peer's earlier work ...
    EXO_TRY(peer->select());
    EXO_TRY(check(cudaEventRecord(peer->order_event_, peer->stream_),
                  EXO_GPU_NAME(cudaEventRecord)));
    EXO_TRY(select());
    EXO_TRY(check(cudaStreamWaitEvent(stream_, peer->order_event_, 0),
                  EXO_GPU_NAME(cudaStreamWaitEvent)));
    EXO_TRY(check(cudaMemcpyPeerAsync(ptr_of(dst) + dst_offset,
                                      peer->ordinal_,
                                      ptr_of(src) + src_offset, ordinal_,
                                      bytes, stream_),
                  EXO_GPU_NAME(cudaMemcpyPeerAsync)));
    // ... and the peer's later work runs after the copy.
    EXO_TRY(check(cudaEventRecord(order_event_, stream_), EXO_GPU_NAME(cudaEventRecord)));
    EXO_TRY(peer->select());
    return check(cudaStreamWaitEvent(peer->stream_, order_event_, 0),
                 EXO_GPU_NAME(cudaStreamWaitEvent));
  }

  // -- synchronization -------------------------------------------------------

  status synchronize() override {
    auto guard = enter();
    EXO_TRY(select());
    EXO_TRY(check(cudaStreamSynchronize(stream_), EXO_GPU_NAME(cudaStreamSynchronize)));
    retire_through(submitted_);
    return {};
  }

  result<event> record() override {
    auto guard = enter();
    EXO_TRY(select());
    cudaEvent_t ev = nullptr;
    if (!free_events_.empty()) {
      ev = free_events_.back();
      free_events_.pop_back();
    } else {
      EXO_TRY(check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                    EXO_GPU_NAME(cudaEventCreateWithFlags)));
    }
    if (auto rc = cudaEventRecord(ev, stream_); rc != cudaSuccess) {
      free_events_.push_back(ev);
      return failure(EXO_GPU_NAME(cudaEventRecord), rc);
    }
    auto seq = ++submitted_;
    pending_.emplace(seq, ev);
    if (pending_.size() > max_pending_events)
      prune();
    return event{uid(), seq};
  }

  status wait(const event& e) override {
    auto guard = enter();
    EXO_TRY(check_event(e, submitted_));
    auto it = pending_.find(e.sequence);
    if (it == pending_.end())
      return {}; // retired: known complete
    EXO_TRY(select());
    EXO_TRY(check(cudaEventSynchronize(it->second), EXO_GPU_NAME(cudaEventSynchronize)));
    retire_through(e.sequence);
    return {};
  }

  result<bool> completed(const event& e) override {
    auto guard = enter();
    EXO_TRY(check_event(e, submitted_));
    auto it = pending_.find(e.sequence);
    if (it == pending_.end())
      return true;
    EXO_TRY(select());
    auto rc = cudaEventQuery(it->second);
    if (rc == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    EXO_TRY(check(rc, EXO_GPU_NAME(cudaEventQuery)));
    retire_through(e.sequence);
    return true;
  }

  // -- compute ---------------------------------------------------------------
  // Operands arrive checked (device's public methods); host fallbacks are
  // device's do_* methods.

protected:
  status do_elementwise(binary_op op, const_view a, const_view b,
                        mut_view out, std::size_t count) override {
    if (!P::has_kernels(props_))
      return device::do_elementwise(op, a, b, out, count);
    if (count == 0)
      return {};
    auto guard = enter();
    EXO_TRY(select());
    int rc = P::launch_binary(op, f32_of(a), f32_of(b), f32_of(out), count,
                              stream_);
    return launch_status("elementwise kernel", rc);
  }

  status do_matmul(const_view a, const_view b, mut_view c,
                   const matmul_dims& dims) override {
    if ((opts_.tiled_matmul || !P::has_blas) && !P::has_kernels(props_))
      return device::do_matmul(a, b, c, dims);
    auto guard = enter();
    EXO_TRY(select());
    return product(f32_of(a), f32_of(b), f32_of(c), dims);
  }

  /// C = A op(B) in F32: the vendor BLAS, or the tiled kernel where there
  /// is none or the options ask for it. mtx_ held.
  status product(const float* a, const float* b, float* c,
                 const matmul_dims& dims) {
    if (opts_.tiled_matmul || !P::has_blas)
      return launch_status("matmul kernel",
                           P::launch_matmul_tiled(a, b, c, dims, stream_));
    return blas_.matmul(a, b, c, dims);
  }

  /// Whether matmul_weights takes prompt_product (gpu_options::
  /// prompt_gemm_rows): a prompt's rows, enough of them, weights to decode.
  bool prompt_gemm(weight_type type, const matmul_dims& dims) const {
    return type != weight_type::f32 && prompt_rows(dims);
  }

  /// Whether a product is a prompt's (gpu_options::prompt_gemm_rows rows
  /// or more, not apart): a GEMM's work rather than the row kernels'.
  bool prompt_rows(const matmul_dims& dims) const {
    return !dims.rows_apart && opts_.prompt_gemm_rows != 0
           && dims.m >= opts_.prompt_gemm_rows;
  }

  /// A prompt's product through decoded weights: W's rows decoded to F32 a
  /// piece at a time (at most prompt_gemm_chunk_bytes, whole rows), each
  /// piece multiplied by product(); with more than one piece its results
  /// go through a second temporary into their columns of C. nullopt: the
  /// temporaries could not be had (the caller takes the matrix-vector
  /// kernels instead, which need none). mtx_ held.
  std::optional<status> prompt_product(const float* a, const char* w,
                                       weight_type type, float* c,
                                       const matmul_dims& dims) {
    const std::size_t m = dims.m, n = dims.n, k = dims.k;
    const std::size_t row_bytes = *weight_row_bytes(type, k);
    const std::size_t cap = opts_.prompt_gemm_chunk_bytes;
    std::size_t rows = std::max<std::size_t>(1, cap / (k * 4));
    if (rows < n) // the piece's results are held too
      rows = std::max<std::size_t>(1, std::min(rows, cap / (m * 4)));
    rows = std::min(rows, n);
    const bool whole = rows == n;
    void* wf = nullptr;
    void* cf = nullptr;
    if (cudaMallocAsync(&wf, rows * k * 4, stream_) != cudaSuccess
        || (!whole
            && cudaMallocAsync(&cf, m * rows * 4, stream_) != cudaSuccess)) {
      (void)cudaGetLastError(); // not the next launch's error
      if (wf != nullptr)
        (void)cudaFreeAsync(wf, stream_);
      return std::nullopt;
    }
    auto* decoded = static_cast<float*>(wf);
    status st;
    for (std::size_t j0 = 0; j0 < n && st.ok(); j0 += rows) {
      const std::size_t nr = std::min(rows, n - j0);
      st = launch_status("dequant_rows kernel",
                         P::launch_dequant_rows(w + j0 * row_bytes, type,
                                                decoded, nr, k, stream_));
      if (st.ok())
        st = product(a, decoded, whole ? c : static_cast<float*>(cf),
                     {m, nr, k, true});
      if (st.ok() && !whole)
        st = check(cudaMemcpy2DAsync(c + j0, n * 4, cf, nr * 4, nr * 4, m,
                                     cudaMemcpyDeviceToDevice, stream_),
                   EXO_GPU_NAME(cudaMemcpy2DAsync));
    }
    (void)cudaFreeAsync(wf, stream_);
    if (cf != nullptr)
      (void)cudaFreeAsync(cf, stream_);
    return st;
  }

  // -- the operations of a Llama layer --------------------------------------
  // Kernels of gpu_common/kernels.cuh where the device has them, the host
  // fallbacks of device otherwise. F32 weights go through do_matmul (cuBLAS
  // or the tiled kernel).

  status do_matmul_weights(const_view a, const_view w, weight_type type,
                           mut_view c, const matmul_dims& dims) override {
    if (!P::has_kernels(props_))
      return device::do_matmul_weights(a, w, type, c, dims);
    // A prompt's F32 product: cuBLAS or the tiles; others, the row
    // kernels (matvec_vecdot_kernel: the host's bits).
    if (type == weight_type::f32 && prompt_rows(dims))
      return do_matmul(a, w, c, {dims.m, dims.n, dims.k, true});
    auto guard = enter();
    const std::uint64_t entry = entries_;
    EXO_TRY(select());
    if (prompt_gemm(type, dims))
      if (auto st = prompt_product(f32_of(a), ptr_of(*w.buf) + w.offset, type,
                                   f32_of(c), dims))
        return *st;
    // The quantized activations: the device's kept scratch (one stream, so
    // the next product's writes follow this one's reads), or a
    // stream-ordered temporary beyond act_scratch_keep.
    void* scratch = nullptr;
    bool temporary = false;
    const std::size_t scratch_bytes = gpu::act_scratch_bytes(type, dims);
    if (scratch_bytes != 0) {
      EXO_TRY(act_scratch(scratch_bytes, scratch));
      temporary = scratch == nullptr;
      if (temporary)
        EXO_TRY(check(cudaMallocAsync(&scratch, scratch_bytes, stream_),
                      EXO_GPU_NAME(cudaMallocAsync)));
    }
    // A in the scratch already: the last call to this device was a product
    // of the same A in the same form (a layer's Q, K and V; gate and up).
    // Whatever happens below, the scratch holds nothing known after it
    // unless this product's conversion succeeds.
    const held_act last_act = std::exchange(held_act_, {});
    const held_act now{a.buf, a.offset, dims.m, dims.k,
                       gpu::scratch_act_form(type, dims), scratch, entry};
    const bool ready = !temporary && now.form != gpu::act_form::none
                       && last_act.follows(now);
    // Q4_K batches step as this machine's llama.cpp build steps them.
    auto st = launch_status("matmul_weights kernel",
                            P::launch_matmul_weights(
                              f32_of(a), ptr_of(*w.buf) + w.offset, type,
                              f32_of(c), dims, scratch,
                              quant::q4_k_pair_tokens(dims.m, dims.rows_apart),
                              stream_, ready));
    if (temporary)
      (void)cudaFreeAsync(scratch, stream_);
    else if (st.ok() && now.form != gpu::act_form::none
             && !(c.buf == a.buf && c.offset < a.offset + dims.m * dims.k * 4
                  && a.offset < c.offset + dims.m * dims.n * 4))
      held_act_ = now; // (C written over A would change A after the fact)
    return st;
  }

  /// The largest quantized-activation scratch a device keeps between
  /// products (a decode batch's is tens of KiB; a prompt's beyond this
  /// takes a temporary).
  static constexpr std::size_t act_scratch_keep = std::size_t{16} << 20;

  /// Sets out to the kept scratch, grown to at least `bytes` (doubling, from
  /// 256 KiB), or to nullptr when bytes is beyond act_scratch_keep. Every
  /// decode step's products then allocate nothing. Under mtx_.
  status act_scratch(std::size_t bytes, void*& out) {
    out = nullptr;
    if (bytes > act_scratch_keep)
      return {};
    if (bytes > act_scratch_size_) {
      std::size_t size = std::max<std::size_t>(
        {bytes, 2 * act_scratch_size_, std::size_t{256} << 10});
      size = std::min(size, act_scratch_keep);
      if (act_scratch_ != nullptr)
        (void)cudaFreeAsync(act_scratch_, stream_); // after its readers
      act_scratch_ = nullptr;
      held_act_ = {};
      act_scratch_size_ = 0;
      EXO_TRY(check(cudaMallocAsync(&act_scratch_, size, stream_),
                    EXO_GPU_NAME(cudaMallocAsync)));
      act_scratch_size_ = size;
    }
    out = act_scratch_;
    return {};
  }

  status do_rms_norm(const_view x, const_view weight, mut_view out,
                     std::size_t rows, std::size_t dim, float eps) override {
    if (!P::has_kernels(props_))
      return device::do_rms_norm(x, weight, out, rows, dim, eps);
    auto guard = enter();
    EXO_TRY(select());
    return launch_status("rms_norm kernel",
                         P::launch_rmsnorm(f32_of(x), f32_of(weight),
                                           f32_of(out), rows, dim, eps,
                                           stream_));
  }

  status do_rope(mut_view x, const_view positions, const_view freq_factors,
                 const rope_dims& dims) override {
    if (!P::has_kernels(props_))
      return device::do_rope(x, positions, freq_factors, dims);
    const float* ff
      = freq_factors.buf != nullptr ? f32_of(freq_factors) : nullptr;
    auto guard = enter();
    EXO_TRY(select());
    return launch_status(
      "rope kernel",
      P::launch_rope_rows(f32_of(x),
                          reinterpret_cast<const std::int32_t*>(
                            ptr_of(*positions.buf) + positions.offset),
                          ff, dims, stream_));
  }

  status do_rope_cached(mut_view x, const_view cache,
                        const rope_dims& dims) override {
    if (!P::has_kernels(props_))
      return device::do_rope_cached(x, cache, dims);
    auto guard = enter();
    EXO_TRY(select());
    return launch_status("rope kernel",
                         P::launch_rope_cached(f32_of(x), f32_of(cache), dims,
                                               stream_));
  }

  status do_attention(const_view q, const_view k, const_view v, mut_view out,
                      const attention_dims& dims) override {
    if (!P::has_kernels(props_)
        || dims.head_dim > 2 * gpu::math::attention_threads)
      return device::do_attention(q, k, v, out, dims);
    return attention_kernel(q, k, v, out, dims);
  }

  /// The attention kernel over k and v as dims says (contiguous or
  /// paged).
  status attention_kernel(const_view q, const_view k, const_view v,
                          mut_view out, const attention_dims& dims) {
    auto guard = enter();
    EXO_TRY(select());
    return launch_status("attention kernel",
                         P::launch_attention(f32_of(q),
                                             ptr_of(*k.buf) + k.offset,
                                             ptr_of(*v.buf) + v.offset,
                                             f32_of(out), dims, stream_));
  }

  /// Stages keep paged caches where the kernels run. Checked on the GPU
  /// emulator (backend_conformance's and device_stage_tests' paged cases
  /// run on its device: the kernel's bits are the contiguous attention's,
  /// every sequence of a batch gets its bits alone); on a GPU only the
  /// kernel itself ran so far (the H200 run of 2026-12-04).
  bool reads_kv_blocks() const noexcept override {
    return P::has_kernels(props_);
  }

  /// A decode batch's attention in one launch where the kernels run.
  bool runs_paged_rows() const noexcept override {
    return P::has_kernels(props_);
  }

  /// Every row's position and table are read by the kernel from `tables`
  /// (positions clamped into the table, entries into the cache, as
  /// do_attention_paged's: never a read outside).
  status do_attention_paged_rows(const_view q, const_view k, const_view v,
                                 const_view tables, mut_view out,
                                 const attention_dims& dims,
                                 std::size_t table_len) override {
    auto widest = dims; // a row at the last position a table covers
    widest.n_tokens = 1;
    widest.pos0 = table_len * dims.block_positions - 1;
    auto max_block = kernel_max_block(widest, k, v);
    if (!max_block)
      return max_block.err();
    if (!*max_block)
      return device::do_attention_paged_rows(q, k, v, tables, out, dims,
                                             table_len);
    auto d = dims;
    d.row_tables = reinterpret_cast<const std::int32_t*>(
      ptr_of(*tables.buf) + tables.offset);
    d.row_table_len = table_len;
    d.max_block = **max_block;
    return attention_kernel(q, k, v, out, d);
  }

  /// Every row's slot is found by the kernel from `tables` (positions
  /// clamped into the table, blocks into kv: never a write outside).
  status do_store_kv_rows(const_view a, const_view tables, mut_view kv,
                          const kv_rows_dims& dims) override {
    auto sz = host::check_paged_attention(kv_rows_attention(dims)); // checked
    if (!sz)
      return sz.err();
    const std::size_t e = host::view_extent({kv.buf, kv.offset, kv.limit});
    if (!P::has_kernels(props_) || e < sz->block_rows)
      return device::do_store_kv_rows(a, tables, kv, dims);
    auto d = dims;
    d.max_block = (e - sz->block_rows) / sz->block;
    auto guard = enter();
    EXO_TRY(select());
    return launch_status(
      "store_kv_rows kernel",
      P::launch_store_kv_rows(
        f32_of(a),
        reinterpret_cast<const std::int32_t*>(ptr_of(*tables.buf)
                                              + tables.offset),
        ptr_of(*kv.buf) + kv.offset, d, stream_));
  }

  /// The attention kernel over a paged cache: the table's entries are
  /// clamped to the cache (m::kv_row_at), never checked on the host (that
  /// would wait for the stream).
  status do_attention_paged(const_view q, const_view k, const_view v,
                            const_view table, mut_view out,
                            const attention_dims& dims) override {
    auto max_block = kernel_max_block(dims, k, v);
    if (!max_block)
      return max_block.err();
    if (!*max_block)
      return device::do_attention_paged(q, k, v, table, out, dims);
    auto d = dims;
    d.block_table = reinterpret_cast<const std::int32_t*>(
      ptr_of(*table.buf) + table.offset);
    d.max_block = **max_block;
    return attention_kernel(q, k, v, out, d);
  }

  /// The last block of k and v a paged kernel may read (its clamp) for
  /// attention sized as `dims`, or none where the kernel cannot run it
  /// (no kernels, heads too wide, views shorter than a block): the path
  /// through host memory.
  result<std::optional<std::size_t>> kernel_max_block(
    const attention_dims& dims, const_view k, const_view v) const {
    auto sz = host::check_paged_attention(dims); // sizes only: checked
    if (!sz)
      return sz.err();
    const std::size_t e =
      std::min(host::view_extent(k), host::view_extent(v));
    if (!P::has_kernels(props_)
        || dims.head_dim > 2 * gpu::math::attention_threads
        || e < sz->block_rows)
      return std::optional<std::size_t>{};
    return std::optional<std::size_t>{(e - sz->block_rows) / sz->block};
  }

  status do_to_q8_0(const_view a, mut_view out, std::size_t count) override {
    if (!P::has_kernels(props_))
      return device::do_to_q8_0(a, out, count);
    auto guard = enter();
    EXO_TRY(select());
    return launch_status("to_q8_0 kernel",
                         P::launch_to_q8_0(f32_of(a),
                                           reinterpret_cast<std::uint8_t*>(
                                             ptr_of(*out.buf) + out.offset),
                                           count, stream_));
  }

  status do_hadamard(mut_view out, const_view a, std::size_t count,
                     std::size_t n) override {
    if (!P::has_kernels(props_))
      return device::do_hadamard(out, a, count, n);
    auto guard = enter();
    EXO_TRY(select());
    return launch_status("hadamard kernel",
                         P::launch_hadamard(f32_of(a), f32_of(out), count, n,
                                            stream_));
  }

  status do_to_f16(const_view a, mut_view out, std::size_t count) override {
    if (!P::has_kernels(props_))
      return device::do_to_f16(a, out, count);
    auto guard = enter();
    EXO_TRY(select());
    return launch_status("to_f16 kernel",
                         P::launch_to_f16(f32_of(a),
                                          reinterpret_cast<std::uint16_t*>(
                                            ptr_of(*out.buf) + out.offset),
                                          count, stream_));
  }

  status do_silu_mul(const_view gate, const_view up, mut_view out,
                     std::size_t count) override {
    if (!P::has_kernels(props_))
      return device::do_silu_mul(gate, up, out, count);
    auto guard = enter();
    EXO_TRY(select());
    return launch_status("silu_mul kernel",
                         P::launch_silu_mul(f32_of(gate), f32_of(up),
                                            f32_of(out), count, stream_));
  }

public:
  /// Every weight type: F32, F16 and BF16 through matvec_vecdot_kernel,
  /// the quantized formats through the lane kernels (the host's bits);
  /// without kernels the generic host fallback runs them all.
  /// Every format files store; not the cpu device's packed layouts.
  bool runs_weights(weight_type t) const noexcept override {
    return t != weight_type::q4_k_x16 && t != weight_type::q6_k_x16;
  }

  // -- telemetry -------------------------------------------------------------

  telemetry read_telemetry() override {
    telemetry t;
    {
      auto guard = lock_reading();
      t.memory = memory_locked();
    }
    if (probe_) {
      auto s = probe_->sample();
      t.temperature_c = s.temperature_c;
      t.power_w = s.power_w;
      t.clock_mhz = s.clock_mhz;
      t.utilization = s.utilization;
    }
    return t;
  }

private:
  /// Device memory from the stream-ordered pool.
  class gpu_buffer final : public buffer {
  public:
    gpu_buffer(gpu_device& owner, void* ptr, std::size_t size)
      : buffer(owner, size), ptr_(ptr) {
    }
    ~gpu_buffer() override {
      static_cast<gpu_device&>(owner()).release(ptr_, size());
    }
    char* ptr() const noexcept {
      return static_cast<char*>(ptr_);
    }

  private:
    void* ptr_;
  };

  static constexpr std::size_t max_pending_events = 256;

  /// Locks the device for a call that may write its memory, and counts the
  /// call (entries_): what the kept scratch holds stays valid only from a
  /// product to the very next call.
  std::unique_lock<std::mutex> enter() {
    std::unique_lock<std::mutex> guard{mtx_};
    ++entries_;
    return guard;
  }

  /// Locks the device for a call that writes no device memory and is not
  /// counted (memory(), read_telemetry(): other threads poll them, and a
  /// poll between two products must not make the second convert again).
  std::unique_lock<std::mutex> lock_reading() {
    return std::unique_lock<std::mutex>{mtx_};
  }

  /// What a product left in the kept scratch: A (buffer, offset, m x k) in
  /// `form`, converted by the call numbered `entry`.
  struct held_act {
    const buffer* buf = nullptr;
    std::size_t offset = 0;
    std::size_t m = 0;
    std::size_t k = 0;
    gpu::act_form form = gpu::act_form::none;
    const void* scratch = nullptr;
    std::uint64_t entry = 0;

    /// Whether `next` (the product of call next.entry) finds its A in the
    /// scratch: the same A, form and scratch, and no call between.
    bool follows(const held_act& next) const {
      return form != gpu::act_form::none && form == next.form
             && buf == next.buf && offset == next.offset && m == next.m
             && k == next.k && scratch == next.scratch
             && entry + 1 == next.entry;
    }
  };

  static char* ptr_of(const buffer& buf) {
    return static_cast<const gpu_buffer&>(buf).ptr();
  }
  static const float* f32_of(const_view v) {
    return reinterpret_cast<const float*>(ptr_of(*v.buf) + v.offset);
  }
  static float* f32_of(mut_view v) {
    return reinterpret_cast<float*>(ptr_of(*v.buf) + v.offset);
  }

  static exo::backend::error failure(const char* call, cudaError_t rc) {
    (void)cudaGetLastError(); // clear a non-sticky error
    return gpu::api_error(P::api, call, static_cast<int>(rc),
                          cudaGetErrorString(rc));
  }

  static status check(cudaError_t rc, const char* call) {
    if (rc == cudaSuccess)
      return {};
    return failure(call, rc);
  }

  static status launch_status(const char* what, int rc) {
    if (rc == 0)
      return {};
    return failure(what, static_cast<cudaError_t>(rc));
  }

  /// Makes this device current for the calling thread.
  status select() {
    return check(cudaSetDevice(ordinal_), EXO_GPU_NAME(cudaSetDevice));
  }

  status ensure_staging() {
    for (auto& s : staging_)
      if (s == nullptr)
        EXO_TRY(check(cudaMallocHost(&s, opts_.staging_bytes),
                      EXO_GPU_NAME(cudaMallocHost)));
    return {};
  }

  int next_slot() {
    int s = slot_;
    slot_ ^= 1;
    return s;
  }

  memory_info memory_locked() {
    memory_info info;
    info.total = props_.total_memory;
    info.used_by_exo = used_;
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (select() && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      info.total = total_bytes;
      info.free = free_bytes;
    } else {
      (void)cudaGetLastError();
      info.free = info.total > used_ ? info.total - used_ : 0;
    }
    return info;
  }

  void release(void* ptr, std::size_t size) {
    auto guard = enter();
    if (select())
      (void)cudaFreeAsync(ptr, stream_);
    (void)cudaGetLastError();
    used_ -= std::min<std::uint64_t>(used_, size);
  }

  /// Returns the events up to `seq` to the free list (they completed).
  void retire_through(std::uint64_t seq) {
    auto end = pending_.upper_bound(seq);
    for (auto it = pending_.begin(); it != end; ++it)
      free_events_.push_back(it->second);
    pending_.erase(pending_.begin(), end);
  }

  /// Retires the completed prefix of the pending events.
  void prune() {
    std::uint64_t done = 0;
    for (auto& [seq, ev] : pending_) {
      if (cudaEventQuery(ev) != cudaSuccess)
        break;
      done = seq;
    }
    (void)cudaGetLastError();
    if (done != 0)
      retire_through(done);
  }

  status describe() {
    cudaDeviceProp prop;
    EXO_TRY(check(cudaGetDeviceProperties(&prop, ordinal_),
                  EXO_GPU_NAME(cudaGetDeviceProperties)));
    props_.kind = P::kind;
    props_.name = prop.name;
    props_.vendor = P::vendor;
    props_.total_memory = prop.totalGlobalMem;
    props_.max_allocation = prop.totalGlobalMem;
    props_.compute_units = static_cast<std::uint32_t>(prop.multiProcessorCount);
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, ordinal_)
          == cudaSuccess
        && khz > 0)
      props_.clock_mhz = static_cast<std::uint32_t>(khz / 1000);
    int mem_khz = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, ordinal_)
          == cudaSuccess
        && mem_khz > 0) {
      props_.memory_clock_mhz = static_cast<std::uint32_t>(mem_khz / 1000);
      props_.memory_bandwidth = gpu::memory_bandwidth(
        *props_.memory_clock_mhz,
        static_cast<std::uint32_t>(prop.memoryBusWidth));
    }
    (void)cudaGetLastError();
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), ordinal_) == cudaSuccess)
      props_.pci_bus_id = gpu::normalize_pci_bus_id(bus).value_or(bus);
    (void)cudaGetLastError();
    int version = 0;
    if (cudaDriverGetVersion(&version) == cudaSuccess)
      props_.driver_version = P::driver_version(version);
    (void)cudaGetLastError();
    props_.capabilities |= cap_async | cap_matmul | cap_elementwise
                           | cap_model_ops;
    P::describe(ordinal_, prop, props_); // may clear the kernel flags
    if (props_.id.empty()) {
      props_.id = std::string{P::id_prefix} + ":";
      props_.id += !props_.pci_bus_id.empty() ? props_.pci_bus_id
                                              : std::to_string(ordinal_);
    }
    return {};
  }

  int ordinal_;
  gpu_options opts_;
  device_properties props_;
  /// Taken only through enter() or lock_reading() (copy_to_peer takes both
  /// devices' and counts both): a call that writes device memory without
  /// enter() would let a product read a stale conversion (held_act_).
  std::mutex mtx_;
  cudaStream_t stream_ = nullptr;
  typename P::blas blas_;
  void* staging_[2] = {nullptr, nullptr};
  cudaEvent_t staging_done_[2] = {nullptr, nullptr};
  int slot_ = 0;
  cudaEvent_t order_event_ = nullptr;
  std::map<std::uint64_t, cudaEvent_t> pending_;
  std::vector<cudaEvent_t> free_events_;
  std::uint64_t submitted_ = 0;
  std::uint64_t used_ = 0;
  void* act_scratch_ = nullptr; ///< act_scratch: kept between products
  std::size_t act_scratch_size_ = 0;
  /// Calls that may write device memory so far (enter(); a peer's copy
  /// into this device counts here too).
  std::uint64_t entries_ = 0;
  held_act held_act_; ///< what the kept scratch holds, if anything
  std::unique_ptr<gpu::telemetry_probe> probe_;
  std::string telemetry_reason_;
};

template <class P>
class gpu_backend final : public backend {
public:
  explicit gpu_backend(gpu_options opts) : opts_(opts) {
  }

  ~gpu_backend() override {
    shutdown();
  }

  backend_kind kind() const override {
    return P::kind;
  }

  status initialize() override {
    if (!devices_.empty())
      return {};
    int count = 0;
    auto rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      auto code = static_cast<int>(rc);
      if (gpu::means_absent(P::api, code))
        return gpu::absent_error(P::api, EXO_GPU_NAME(cudaGetDeviceCount), code,
                                 cudaGetErrorString(rc));
      return gpu::api_error(P::api, EXO_GPU_NAME(cudaGetDeviceCount), code,
                            cudaGetErrorString(rc));
    }
    if (count <= 0)
      return fail(errc::no_device, std::string{P::no_device_text}
                                     + " (cudaGetDeviceCount: 0 devices)");
    std::shared_ptr<gpu::management_library> mgmt;
    std::string why;
    if (auto lib = P::load_telemetry())
      mgmt = *lib;
    else
      why = lib.err().message;
    std::string first_error;
    for (int i = 0; i < count; ++i) {
      auto dev = std::make_unique<gpu_device<P>>(i, opts_);
      auto st = dev->open(mgmt);
      if (!st) {
        if (first_error.empty())
          first_error = "device " + std::to_string(i) + ": "
                        + st.err().message;
        continue;
      }
      if (!mgmt)
        dev->set_telemetry_reason(why);
      devices_.push_back(std::move(dev));
    }
    if (devices_.empty())
      return fail(errc::driver_error, first_error);
    enable_peers();
    return {};
  }

  void shutdown() override {
    devices_.clear();
  }

  std::size_t device_count() const override {
    return devices_.size();
  }

  device* device_at(std::size_t index) override {
    return index < devices_.size() ? devices_[index].get() : nullptr;
  }

private:
  /// Turns on direct access between every pair that supports it.
  void enable_peers() {
    for (auto& a : devices_)
      for (auto& b : devices_) {
        if (a == b)
          continue;
        int can = 0;
        if (cudaDeviceCanAccessPeer(&can, a->ordinal(), b->ordinal())
              != cudaSuccess
            || can == 0) {
          (void)cudaGetLastError();
          continue;
        }
        if (cudaSetDevice(a->ordinal()) != cudaSuccess) {
          (void)cudaGetLastError();
          continue;
        }
        auto rc = cudaDeviceEnablePeerAccess(b->ordinal(), 0);
        if (rc == cudaSuccess || rc == cudaErrorPeerAccessAlreadyEnabled)
          a->enable_peer_copy();
        (void)cudaGetLastError();
      }
  }

  gpu_options opts_;
  std::vector<std::unique_ptr<gpu_device<P>>> devices_;
};

} // namespace exo::backend::EXO_GPU_IMPL_NS
