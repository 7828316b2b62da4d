#pragma once

/// The cpu backend: host memory, exo's own kernels (backends/host_kernels)
/// for every operation. Always present; the fallback of every machine.

#include "backends/backend.hpp"
#include "backends/device_rates.hpp"

#include <memory>

namespace exo::backend {

/// Settings of the cpu backend.
struct cpu_options {
  /// Most bytes the cpu device may hand out; 0 means "what the OS reports
  /// available at allocation time".
  std::uint64_t memory_limit = 0;
  /// Stages read weights where the model file is mapped instead of copying
  /// them (device::adopt_host); false: the device says unsupported and
  /// stages copy (for file systems whose mappings get only 4 KiB pages).
  bool weights_in_place = true;
  /// Hold Q4_K matrices packed 16 rows at a time (weight_type::q4_k_x16,
  /// device::preferred_weights) where the CPU has AVX-512 VNNI and no AMX
  /// tiles: the same results, decode batches 1.3-1.5x and small prompt
  /// batches up to 4x faster in the kernels (docs/benchmarks.md), at the
  /// cost of a copy of those matrices instead of reading them in place.
  bool pack_weights = true;
  /// With pack_weights, hold Q6_K matrices of 16 rows or more packed too
  /// (weight_type::q6_k_x16) where the CPU has AVX-512 VNNI: the same
  /// results, decode batches of 4-16 sequences 1.4-1.5x faster in those
  /// products (one token 0.85-0.9x in cache, 0.97-1.1x from DRAM); a
  /// 1B-shaped Q4_K_M node +16% at 4 sequences and +19% at 16, even at
  /// one (docs/benchmarks.md). false: Q6_K as stored.
  bool pack_q6_k = true;
  /// The thread count of the llama.cpp whose attention bits the device
  /// gives (host::attention): 1, the default, whatever threads it runs.
  int llama_threads = 1;
  /// Threads of the device's kernels; 0: one per CPU the process may run
  /// on (OMP_NUM_THREADS caps it).
  int threads = 0;
  /// Bind the kernels' threads one CPU each (host::bind_threads), on each
  /// thread that first runs an operation on the device, the caller
  /// included. Unbound, the OpenMP team's second thread may start on its
  /// creator's CPU and a batch run at half speed until the kernel
  /// scheduler moves it (docs/benchmarks.md). For a process that owns the
  /// machine's cores (one exo-node per machine); several processes sharing
  /// the cores would all bind to the same first CPUs. Off by default in the
  /// library: it changes the calling thread's affinity.
  bool bind_threads = false;
  /// Measure at discovery what the device's own kernels achieve here and
  /// report it (device_properties::peak_flops, memory_bandwidth,
  /// launch_seconds): FLOP/s of an F32 matrix product that stays in cache
  /// (a prompt's operation), weight bytes/s of an F32 matrix-vector
  /// product over 64 MiB flushed from the caches (a generated token's) and
  /// an operation's own cost, with the device's threads (measure_cpu_rates).
  /// About 0.2 s on an idle machine; figures taken on a loaded one are the
  /// load's. Off by default in the library (a node turns it on: its
  /// placement then works from figures, not from assumptions).
  bool measure_rates = false;
  /// Figures given instead of measured (a machine whose rates are known,
  /// tests that want fixed plans); 0: measure (or report none).
  double peak_flops = 0;
  double memory_bandwidth = 0;
};

/// What the cpu kernels achieve on this host with `threads` threads (see
/// cpu_options::measure_rates): the host kernels timed directly, the
/// weights flushed from the caches for the bytes/s, the small product
/// timed alone (the median of 201) with the threads woken as the
/// process's OpenMP wait policy has them.
device_rates measure_cpu_rates(int threads);

std::unique_ptr<backend> make_cpu_backend(cpu_options opts = {});

} // namespace exo::backend
