#pragma once

/// The HIP backend: AMD GPUs through the HIP runtime (Debian's
/// libamdhip64), kernels compiled by hipcc from the same source as CUDA's
/// (backends/gpu_common/kernels.cuh), matrix products by the shared tiled
/// kernel (hipBLAS is not packaged here), rocm_smi loaded at run time for
/// telemetry. Without a device, initialize() returns errc::no_device: "no
/// ROCm device (hipGetDeviceCount: hipErrorNoDevice)".

#include "backends/backend.hpp"
#include "backends/gpu_common/gpu_options.hpp"

#include <memory>

namespace exo::backend {

std::unique_ptr<backend> make_hip_backend(gpu_options opts = {});

} // namespace exo::backend
