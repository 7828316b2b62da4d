#pragma once

/// The GPU emulator: kernels.cuh and gpu_backend_impl.hpp compiled by g++
/// and run on the host, so that the CUDA/HIP code paths (kernels, streams,
/// events, staging, paged caches) are tested on a machine without a GPU.
/// Test-only: the product never builds a device from it.
///
/// Kernels: every block runs its threads as fibers on one host thread. A
/// fiber runs until it reaches __syncthreads or ends; once every thread of
/// the block has, the next phase starts. Threads that end while others wait
/// at a barrier (divergent __syncthreads) fail the launch as a launch
/// failure. __shared__ arrays are function statics (one block runs at a
/// time in the whole process). Within a phase the threads run in the order
/// set_thread_order says: a kernel whose result depends on that order has
/// a race a GPU would show sooner or later. Device memory is host memory:
/// an out-of-bounds access is one AddressSanitizer reports.
///
/// Runtime: the CUDA runtime calls gpu_backend_impl.hpp makes, with their
/// CUDA error codes (gpu_errors' tables name them). Each stream is a worker
/// thread that runs its operations in order, after the call that enqueued
/// them has returned: what a real stream does to a host buffer that goes
/// away too early, this one does too.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace exo::backend::gpu::emu {

// -- kernels ---------------------------------------------------------------

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
    : x(x_), y(y_), z(z_) {
  }
};

/// The order the threads of a block run in within each phase.
enum class thread_order { forward, reverse };
void set_thread_order(thread_order order) noexcept;

/// Indices of the calling emulated thread (kernels read them through the
/// threadIdx ... gridDim names of emu_compat.hpp).
const dim3& thread_idx() noexcept;
const dim3& block_idx() noexcept;
const dim3& block_dim() noexcept;
const dim3& grid_dim() noexcept;

/// __syncthreads.
void syncthreads();

/// Threads a warp shuffle spans here, on every vendor: NVIDIA's warp, and
/// half of a 64-wide AMD wavefront (xor masks below 32 stay inside it).
constexpr unsigned warp_lanes = 32;

/// __shfl_xor_sync(full mask, v, mask): the v of the thread whose lane
/// (index within its 32) is this one's xor mask. Every thread of the block
/// must make the same shuffles (the kernels here shuffle uniformly); the
/// emulator checks that, like its barriers, and a thread that shuffles
/// while another waits at __syncthreads fails the launch.
float shfl_xor(float v, unsigned mask);
int shfl_xor(int v, unsigned mask);

/// Runs body as every thread of every block of the grid, on the calling
/// host thread. 0, or a CUDA error code: 9 (invalid configuration: a
/// dimension of zero or beyond the hardware's limits) before anything
/// runs, 719 (launch failure) for a divergent barrier.
/// phases, when given, gains the block's barrier phases (runtime_stats).
int run_grid(dim3 grid, dim3 block, const std::function<void()>& body,
             std::uint64_t* phases = nullptr);

/// What EXO_LAUNCH(kernel, grid, block, stream)(args...) builds: the
/// launch of the kernel called `name` records its error for
/// get_last_error and, like an asynchronous fault on a GPU, on the stream.
void launch_on_stream(const char* name, void* stream, dim3 grid, dim3 block,
                      std::function<void()> body);

template <class F>
struct launch_call {
  const char* name;
  void* stream;
  dim3 grid, block;
  F kernel;
  template <class... A>
  void operator()(A... args) const {
    auto k = kernel;
    launch_on_stream(name, stream, grid, block, [k, args...] { k(args...); });
  }
};

struct launch_config {
  const char* name;
  void* stream;
  dim3 grid, block;
};

template <class F>
launch_call<F> operator*(launch_config c, F kernel) {
  return {c.name, c.stream, c.grid, c.block, kernel};
}

/// What the emulated devices did since reset_stats: per kernel, launches,
/// blocks, threads and barrier phases (a phase: every thread of a block
/// from one barrier to the next; the work a GPU spreads over its cores),
/// and the runtime's copies and host waits. A measure of what a step asks
/// of a GPU, which the emulator's own speed is not.
struct kernel_stats {
  std::uint64_t launches = 0, blocks = 0, threads = 0, phases = 0;
};
struct runtime_stats {
  std::map<std::string, kernel_stats> kernels;
  std::uint64_t to_device = 0, to_device_bytes = 0;
  std::uint64_t to_host = 0, to_host_bytes = 0;
  std::uint64_t on_device = 0, on_device_bytes = 0;
  std::uint64_t allocations = 0;
  std::uint64_t host_waits = 0; ///< stream and event synchronizations
};
runtime_stats stats();
void reset_stats();

// -- runtime -----------------------------------------------------------------

/// The CUDA runtime's codes for the errors the emulator gives.
enum error_t : int {
  success = 0,
  error_invalid_value = 1,
  error_memory_allocation = 2,
  error_invalid_configuration = 9,
  error_no_device = 100,
  error_invalid_device = 101,
  error_invalid_handle = 400,
  error_not_ready = 600,
  error_peer_access_already_enabled = 704,
  error_launch_failure = 719,
};

enum memcpy_kind { host_to_device, device_to_host, device_to_device };
enum device_attr { attr_clock_rate, attr_memory_clock_rate };
enum mem_pool_attr { pool_release_threshold };
constexpr unsigned stream_non_blocking = 1;
constexpr unsigned event_disable_timing = 2;

struct stream_state;
struct event_state;
struct pool_state;
using stream_t = stream_state*;
using event_t = event_state*;
using mem_pool_t = pool_state*;

struct device_prop {
  char name[256];
  std::size_t totalGlobalMem;
  int multiProcessorCount;
  int memoryBusWidth;
  int major, minor;
};

/// The emulated machine: how many devices and how much memory each has.
/// Set before a backend initializes, while no emulated device is in use
/// (it starts the devices' books afresh); devices == 0 reports no device.
struct machine {
  int devices = 1;
  std::size_t memory_per_device = std::size_t{2} << 30;
};
void configure(const machine& m);

/// Bytes allocated on emulated device `ordinal` and not freed yet (the
/// tests' leak check).
std::size_t bytes_in_use(int ordinal);

error_t get_device_count(int* count);
error_t set_device(int ordinal);
error_t get_device_properties(device_prop* prop, int ordinal);
error_t device_get_attribute(int* value, device_attr attr, int ordinal);
error_t device_get_pci_bus_id(char* bus, int len, int ordinal);
error_t driver_get_version(int* version);
error_t device_get_default_mem_pool(mem_pool_t* pool, int ordinal);
error_t mem_pool_set_attribute(mem_pool_t pool, mem_pool_attr attr,
                               void* value);
error_t device_can_access_peer(int* can, int device, int peer);
error_t device_enable_peer_access(int peer, unsigned flags);
error_t mem_get_info(std::size_t* free_bytes, std::size_t* total_bytes);

error_t stream_create_with_flags(stream_t* stream, unsigned flags);
error_t stream_destroy(stream_t stream);
error_t stream_synchronize(stream_t stream);
error_t stream_wait_event(stream_t stream, event_t event, unsigned flags);

error_t event_create_with_flags(event_t* event, unsigned flags);
error_t event_destroy(event_t event);
error_t event_record(event_t event, stream_t stream);
error_t event_synchronize(event_t event);
error_t event_query(event_t event);

error_t malloc_async(void** ptr, std::size_t bytes, stream_t stream);
error_t free_async(void* ptr, stream_t stream);
error_t malloc_host(void** ptr, std::size_t bytes);
error_t free_host(void* ptr);
error_t memcpy_async(void* dst, const void* src, std::size_t bytes,
                     memcpy_kind kind, stream_t stream);
/// height rows of width bytes, row r from src + r * spitch to dst + r *
/// dpitch (cudaMemcpy2DAsync): each whole span must lie in one allocation
/// on the device side, width must not exceed either pitch.
error_t memcpy_2d_async(void* dst, std::size_t dpitch, const void* src,
                        std::size_t spitch, std::size_t width,
                        std::size_t height, memcpy_kind kind,
                        stream_t stream);
error_t memcpy_peer_async(void* dst, int dst_device, const void* src,
                          int src_device, std::size_t bytes,
                          stream_t stream);

error_t get_last_error();
const char* get_error_string(error_t e);

} // namespace exo::backend::gpu::emu
