#include "backends/cpu/cpu_backend.hpp"

#include "backends/cpu_features.hpp"
#include "backends/host_device.hpp"
#include "backends/host_info.hpp"
#include "backends/host_kernels.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <vector>

#include <sched.h>
#include <sys/mman.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace exo::backend {

namespace {

/// Threads for the device's kernels: the CPUs this process may run on (a
/// node pinned with taskset to one core gets one: two OpenMP threads on one
/// core spin in each other's barriers), at most OMP_NUM_THREADS when set.
int usable_threads(std::uint32_t logical_cores) {
  int n = static_cast<int>(std::max<std::uint32_t>(1, logical_cores));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
    n = std::min(n, CPU_COUNT(&set));
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end != env && v > 0)
      n = std::min<long>(n, v);
  }
  return std::max(1, n);
}

/// The host CPU as a device.
class cpu_device final : public host_device {
public:
  explicit cpu_device(cpu_options opts) : opts_(opts) {
    auto id = host_info::read_cpu_identity();
    props_.id = "cpu:0";
    props_.kind = backend_kind::cpu;
    props_.name = id.model_name;
    props_.vendor = id.vendor;
    props_.architecture = id.architecture;
    // The kernels are exo's own: the widest instructions they use here.
    switch (host::widest_isa()) {
      case host::isa::avx512:
        props_.driver_version = "exo host kernels, AVX-512";
        break;
      case host::isa::avx2:
        props_.driver_version = "exo host kernels, AVX2";
        break;
      case host::isa::scalar:
        props_.driver_version = "exo host kernels, scalar";
        break;
    }
    props_.total_memory = opts.memory_limit != 0 ? opts.memory_limit
                                                 : host_info::total_memory();
    props_.max_allocation = props_.total_memory;
    props_.compute_units = id.logical_cores;
    props_.clock_mhz = host_info::cpu_clock_mhz();
    props_.support = support_level::full;
    props_.capabilities = cap_host_visible | cap_elementwise | cap_matmul
                          | cap_model_ops | cap_clock | cap_utilization;
    threads_ = opts.threads > 0 ? opts.threads
                                : usable_threads(id.logical_cores);
    adopts_host_memory_ = opts.weights_in_place;
    packs_weights_ = opts.pack_weights;
    packs_q6_k_ = opts.pack_weights && opts.pack_q6_k;
    llama_threads_ = std::max(1, opts.llama_threads);
    if (host_info::cpu_temperature_c())
      props_.capabilities |= cap_temperature;
    device_rates measured;
    if (opts.measure_rates)
      measured = measure_cpu_rates(threads_);
    take_rates(measured);
  }

  bool measure_rates_again() override {
    if (!opts_.measure_rates)
      return false;
    take_rates(measure_cpu_rates(threads_));
    return true;
  }

  /// The figures given in the options, else those measured.
  void take_rates(const device_rates& measured) {
    auto pick = [](double given, double got) -> std::optional<double> {
      if (given > 0)
        return given;
      if (got > 0)
        return got;
      return std::nullopt;
    };
    props_.peak_flops = pick(opts_.peak_flops, measured.flops);
    props_.memory_bandwidth = pick(opts_.memory_bandwidth,
                                   measured.bytes_per_second);
    props_.launch_seconds = pick(0, measured.launch_seconds);
  }

  /// Without a limit, free memory is the host's available memory: a
  /// mapped model file's pages count there already.
  bool counts_adopted_memory() const noexcept override {
    return opts_.memory_limit != 0;
  }

  memory_info memory() override {
    auto info = host_device::memory();
    if (opts_.memory_limit == 0)
      info.free = host_info::available_memory();
    return info;
  }

  telemetry read_telemetry() override {
    telemetry t;
    t.memory = memory();
    t.temperature_c = host_info::cpu_temperature_c();
    t.clock_mhz = host_info::cpu_clock_mhz();
    t.utilization = host_info::cpu_utilization();
    return t;
  }

protected:
  /// Binds the kernels' threads on the first computing operation of each
  /// thread (a node's shard host or device actor), never on allocations:
  /// the node's main thread allocates while it verifies the device, and
  /// the threads it starts afterwards inherit its mask, so binding it put
  /// the whole process on one CPU (prompts ran at 0.65x).
  void on_compute() override {
    if (!opts_.bind_threads || threads_ < 2)
      return;
    thread_local bool bound = false;
    if (!bound) {
      bound = true;
      host::bind_threads(threads_);
    }
  }

  status reserve(std::size_t bytes, std::uint64_t used) override {
    if (opts_.memory_limit != 0)
      return host_device::reserve(bytes, used);
    auto avail = host_info::available_memory();
    if (bytes > avail)
      return fail(errc::out_of_memory,
                  "allocate: " + std::to_string(bytes)
                    + " bytes requested, the host has "
                    + std::to_string(avail) + " available");
    return {};
  }

private:
  cpu_options opts_;
};

class cpu_backend final : public backend {
public:
  explicit cpu_backend(cpu_options opts) : opts_(opts) {
  }

  backend_kind kind() const override {
    return backend_kind::cpu;
  }

  status initialize() override {
    if (!dev_)
      dev_ = std::make_unique<cpu_device>(opts_);
    return {};
  }

  void shutdown() override {
    dev_.reset();
  }

  std::size_t device_count() const override {
    return dev_ ? 1 : 0;
  }

  device* device_at(std::size_t index) override {
    return index == 0 ? dev_.get() : nullptr;
  }

private:
  cpu_options opts_;
  std::unique_ptr<cpu_device> dev_;
};

/// Products of m rows with F32 weights [n x k] at `w` (host::matmul_weights,
/// the kernel of a stage's products), on `threads` threads.
struct f32_product {
  const float* w;
  std::size_t m, n, k;
  int threads;
  std::vector<float> a = std::vector<float>(m * k, 0.5f);
  std::vector<float> c = std::vector<float>(m * n);

  void operator()() {
    matmul_dims d;
    d.m = m;
    d.n = n;
    d.k = k;
    host::matmul_weights(a.data(), reinterpret_cast<const std::uint8_t*>(w),
                         weight_type::f32, c.data(), d, threads);
  }
};

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("clflushopt"))) void
flush_lines_opt(const char* p, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; i += 64)
    _mm_clflushopt(const_cast<char*>(p + i));
}

/// Every cache line of [p, p + bytes) written back and evicted: with
/// CLFLUSHOPT where the CPU has it (the 8 flushes of measure_cpu_rates
/// took 1.2 s of a node's start with CLFLUSH, 0.03 s with it), then a
/// fence, after which the lines are read from memory.
void flush_lines(const char* p, std::size_t bytes) {
  static const bool opt = host::cpu_has_clflushopt();
  if (opt) {
    flush_lines_opt(p, bytes);
  } else {
    for (std::size_t i = 0; i < bytes; i += 64)
      _mm_clflush(p + i);
  }
  _mm_mfence();
}
#endif

} // namespace

device_rates measure_cpu_rates(int threads) {
  threads = std::max(1, threads);
  auto nothing = [] {};
  device_rates r;
  // A generated token: each weight read once (matrix-vector), from memory:
  // 64 MiB of F32 weights in small pages, as a model file's mapping gives
  // them (weights read in place; huge pages would make the figure a TLB's
  // better case), flushed from every cache before each run (a cache may
  // hold 64 MiB, a model's weights it does not). The median: a token runs
  // at the typical rate, not at the luckiest.
  {
    const std::size_t n = 4096;
    const std::size_t k = 4096;
    const std::size_t bytes = n * k * sizeof(float);
    void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
      return r;
    struct unmap {
      void* p;
      std::size_t n;
      ~unmap() { munmap(p, n); }
    } guard{map, bytes};
    madvise(map, bytes, MADV_NOHUGEPAGE);
    auto* w = static_cast<float*>(map);
    for (std::size_t i = 0; i < n * k; ++i)
      w[i] = static_cast<float>(static_cast<int>(i % 17) - 8) * 0.01f;
    auto flush = [&] {
#if defined(__x86_64__) || defined(__i386__)
      flush_lines(static_cast<const char*>(map), bytes);
#endif
    };
    f32_product op{w, 1, n, k, threads};
    if (double s = median_seconds(7, op, flush); s > 0)
      r.bytes_per_second = static_cast<double>(bytes) / s;
  }
  // An operation's own cost: a product too small to take time of its own,
  // back to back as a decode step runs them.
  {
    std::vector<float> w(64 * 64, 0.01f);
    f32_product op{w.data(), 1, 64, 64, threads};
    r.launch_seconds = median_seconds(201, op, nothing);
  }
  // A prompt: 64 rows through a 1024 x 1024 matrix that stays in cache.
  {
    std::vector<float> w(1024 * 1024);
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.01f;
    f32_product op{w.data(), 64, 1024, 1024, threads};
    if (double s = median_seconds(5, op, nothing); s > 0)
      r.flops = 2.0 * 64 * 1024 * 1024 / s;
  }
  return r;
}

std::unique_ptr<backend> make_cpu_backend(cpu_options opts) {
  return std::make_unique<cpu_backend>(opts);
}

} // namespace exo::backend
