#pragma once

/// Readings of the host machine from /proc and /sys, for the cpu backend and
/// for node information. Each reading is empty where the machine cannot tell.

#include <cstdint>
#include <optional>
#include <string>

namespace exo::backend::host_info {

struct cpu_identity {
  std::string model_name; ///< "AMD EPYC 7B13"
  std::string vendor;     ///< "AuthenticAMD" -> "AMD"
  std::string architecture; ///< uname machine
  unsigned logical_cores = 0;
};

cpu_identity read_cpu_identity();
std::uint64_t total_memory();
std::uint64_t available_memory();
std::optional<std::uint32_t> cpu_clock_mhz();
/// Highest temperature among the package/CPU thermal zones.
std::optional<double> cpu_temperature_c();
/// Busy fraction since the previous call (first call: since boot).
std::optional<double> cpu_utilization();
std::string kernel_release();

} // namespace exo::backend::host_info
