#pragma once

/// Error mapping tables of the GPU runtimes and management libraries: CUDA
/// runtime (cudaError_t), HIP runtime (hipError_t), NVML (nvmlReturn_t) and
/// rocm_smi (rsmi_status_t) numeric codes to exo's errc plus a stable name.
/// Plain C++: the tables need no GPU headers and are tested without a GPU.

#include "backends/result.hpp"

#include <cstdint>
#include <string>

namespace exo::backend::gpu {

/// The library that returned a code.
enum class api : std::uint8_t { cuda, hip, nvml, rocm_smi };

/// "CUDA", "HIP", "NVML", "rocm_smi".
const char* to_string(api which) noexcept;

/// What one numeric code means to exo.
struct code_info {
  errc code;        ///< how callers should react
  const char* name; ///< "cudaErrorMemoryAllocation", or "unknown"
};

/// Looks a code up; codes the table does not know are driver errors named
/// "unknown".
code_info classify(api which, std::int64_t code) noexcept;

/// True for the codes that mean "the driver or the device is not there"
/// (no driver, stub library, driver too old, no device).
bool means_absent(api which, std::int64_t code) noexcept;

/// An error value for a failed call:
/// "cudaMalloc: error 2 (cudaErrorMemoryAllocation): out of memory".
/// `description` is the library's own text, or nullptr.
error api_error(api which, const char* call, std::int64_t code,
                const char* description);

/// The reason a backend gives when it finds no device, e.g. "CUDA driver not
/// found (cudaGetDeviceCount: error 35: CUDA driver version is insufficient
/// for CUDA runtime version)" or "no ROCm device (hipGetDeviceCount:
/// hipErrorNoDevice)". Always errc::no_device.
error absent_error(api which, const char* call, std::int64_t code,
                   const char* description);

} // namespace exo::backend::gpu
