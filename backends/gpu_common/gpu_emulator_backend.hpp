#pragma once

/// The GPU emulator as a backend (gpu_emulator.hpp): gpu_backend_impl.hpp's
/// devices over the emulated runtime, running the shared kernels
/// (kernels.cuh) on the host. For tests only: the CUDA and HIP code paths
/// (stages on paged caches, batched products, staging, events) run here on
/// a machine without a GPU. Its devices report kind cuda, vendor "exo
/// (emulated)" and ids "cuda-emu:...". gpu::emu::configure sets how many
/// devices it finds and their memory.

#include "backends/backend.hpp"
#include "backends/gpu_common/gpu_options.hpp"

#include <memory>

namespace exo::backend {

std::unique_ptr<backend> make_gpu_emulator_backend(gpu_options opts = {});

} // namespace exo::backend
