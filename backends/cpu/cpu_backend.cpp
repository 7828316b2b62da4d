#include "backends/cpu/cpu_backend.hpp"

#include "backends/host_device.hpp"
#include "backends/host_info.hpp"
#include "backends/host_kernels.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>

#include <sched.h>

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
    props_.driver_version = openblas_get_config();
    props_.total_memory = opts.memory_limit != 0 ? opts.memory_limit
                                                 : host_info::total_memory();
    props_.max_allocation = props_.total_memory;
    props_.compute_units = id.logical_cores;
    props_.clock_mhz = host_info::cpu_clock_mhz();
    props_.support = support_level::full;
    props_.capabilities = cap_host_visible | cap_elementwise | cap_matmul
                          | cap_model_ops | cap_clock | cap_utilization;
    threads_ = usable_threads(id.logical_cores);
    adopts_host_memory_ = opts.weights_in_place;
    llama_threads_ = std::max(1, opts.llama_threads);
    if (host_info::cpu_temperature_c())
      props_.capabilities |= cap_temperature;
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

} // namespace

std::unique_ptr<backend> make_cpu_backend(cpu_options opts) {
  return std::make_unique<cpu_backend>(opts);
}

} // namespace exo::backend
