#pragma once

/// The CUDA backend: NVIDIA GPUs through the CUDA runtime and cuBLAS, with
/// NVML loaded at run time for telemetry. Shares its device logic and kernels
/// with the HIP backend (backends/gpu_common). On a machine without the
/// driver, initialize() returns errc::no_device with the reason ("CUDA driver
/// not found (...)").

#include "backends/backend.hpp"
#include "backends/gpu_common/gpu_options.hpp"

#include <memory>

namespace exo::backend {

std::unique_ptr<backend> make_cuda_backend(gpu_options opts = {});

} // namespace exo::backend
