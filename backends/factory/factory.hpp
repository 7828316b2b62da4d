#pragma once

/// The backend factory and registry: picks backends in platform priority
/// (on Linux: CUDA, ROCm/HIP, Vulkan, CPU; then simulated devices), uses
/// every one that works, honours include/exclude lists and the EXO_BACKENDS
/// environment override, and always falls back to the CPU.

#include "backends/backend.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/gpu_common/gpu_options.hpp"
#include "backends/sim/sim_backend.hpp"

#include <memory>
#include <string>
#include <vector>

namespace exo::backend {

struct factory_options {
  /// Backends to try ("cuda", "hip"/"rocm", "vulkan", "cpu", "sim"); empty
  /// means all of them.
  std::vector<std::string> include;
  /// Backends never to try.
  std::vector<std::string> exclude;
  /// Read EXO_BACKENDS (a comma-separated include list) from the
  /// environment; it replaces `include` when set.
  bool use_environment = true;
  cpu_options cpu;
  sim_options sim;
  /// Vulkan devices measure their rates when opened
  /// (vulkan_options::measure_rates).
  bool vulkan_measure_rates = false;
  /// The CUDA and HIP backends' settings.
  gpu_options gpu;
};

/// What the factory did with one backend.
struct backend_report {
  backend_kind kind;
  bool built = false;   ///< compiled into this binary
  bool tried = false;   ///< selected by include/exclude
  bool active = false;  ///< initialized with at least one device
  std::size_t devices = 0;
  std::string reason;   ///< why not active, or a note ("fallback")
};

/// The live backends of a process, in priority order.
class registry {
public:
  registry() = default;
  registry(registry&&) = default;
  registry& operator=(registry&&) = default;
  ~registry();

  /// Creates and initializes backends. Errors only for a bad option (an
  /// unknown backend name); a backend without devices is a report, not an
  /// error.
  static result<registry> create(const factory_options& opts);

  const std::vector<backend_report>& reports() const noexcept {
    return reports_;
  }
  /// Every device of every active backend, in priority order.
  std::vector<device*> devices() const;
  /// The backends themselves (for tests and discovery).
  const std::vector<std::unique_ptr<backend>>& backends() const noexcept {
    return backends_;
  }

private:
  std::vector<std::unique_ptr<backend>> backends_;
  std::vector<backend_report> reports_;
};

/// The platform's priority order.
const std::vector<backend_kind>& platform_priority();

/// Creates one backend of a kind, or an error saying this build lacks it.
result<std::unique_ptr<backend>> make_backend(backend_kind kind,
                                              const factory_options& opts);

} // namespace exo::backend
