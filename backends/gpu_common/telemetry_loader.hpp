#pragma once

/// Telemetry of NVIDIA and AMD GPUs through their management libraries,
/// loaded at run time with dlopen so that exo's binaries run on machines
/// without them: NVML ("libnvidia-ml.so.1", shipped with the NVIDIA driver)
/// and rocm_smi ("librocm_smi64.so"). When a library is absent or fails to
/// initialize, loading returns an error value with the reason, and devices
/// report no readings (never invented ones).

#include "backends/backend.hpp"
#include "backends/result.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace exo::backend::gpu {

/// One reading of a GPU's sensors. Empty: the device cannot tell.
struct sensor_sample {
  std::optional<double> temperature_c;
  std::optional<double> power_w;
  std::optional<std::uint32_t> clock_mhz;
  std::optional<double> utilization; ///< 0..1
};

/// Unit conversions of the management libraries.
double millidegrees_to_celsius(std::int64_t millidegrees) noexcept;
double microwatts_to_watts(std::uint64_t microwatts) noexcept;
double milliwatts_to_watts(std::uint64_t milliwatts) noexcept;
double percent_to_fraction(std::uint32_t percent) noexcept;

/// The sensors of one GPU.
class telemetry_probe {
public:
  virtual ~telemetry_probe();

  /// Reads every sensor the device has; failed readings stay empty.
  virtual sensor_sample sample() = 0;

  /// cap_temperature | cap_power | cap_clock | cap_utilization, for the
  /// readings that worked when the probe was made.
  virtual std::uint32_t capabilities() const = 0;
};

/// A loaded and initialized management library.
class management_library {
public:
  virtual ~management_library();

  /// The sensors of the GPU at `pci_bus_id` ("0000:65:00.0"), or an error
  /// (no_device when the library does not know it).
  virtual result<std::unique_ptr<telemetry_probe>>
  probe(const std::string& pci_bus_id) = 0;
};

/// The names tried for each library, in order.
const std::vector<std::string>& nvml_library_names();
const std::vector<std::string>& rocm_smi_library_names();

/// Loads NVML from the first of `names` that dlopen finds and calls
/// nvmlInit_v2. Errors (errc::unsupported or the init call's code) say which
/// names were tried and why each failed.
result<std::shared_ptr<management_library>>
load_nvml(const std::vector<std::string>& names = nvml_library_names());

/// Loads rocm_smi and calls rsmi_init(0); the same contract as load_nvml.
result<std::shared_ptr<management_library>>
load_rocm_smi(const std::vector<std::string>& names
              = rocm_smi_library_names());

} // namespace exo::backend::gpu
