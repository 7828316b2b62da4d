#pragma once

// The suites that run on every device add the GPU emulator's device
// (backends/gpu_common/gpu_emulator_backend.hpp): the CUDA/HIP device code
// and kernels, on the host. One emulated device for the whole test
// process, created on first use.

#include "backends/backend.hpp"
#include "backends/factory/factory.hpp"
#include "backends/gpu_common/gpu_emulator.hpp"
#include "backends/gpu_common/gpu_emulator_backend.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

namespace exo::test {

inline backend::device& emulated_gpu() {
  static std::unique_ptr<backend::backend> be = [] {
    backend::gpu::emu::configure({1, std::size_t{2} << 30});
    auto b = backend::make_gpu_emulator_backend();
    auto st = b->initialize();
    REQUIRE(st.ok());
    return b;
  }();
  return *be->device_at(0);
}

/// reg's devices, then the emulated GPU.
inline std::vector<backend::device*>
with_emulated_gpu(const backend::registry& reg) {
  auto v = reg.devices();
  v.push_back(&emulated_gpu());
  return v;
}

} // namespace exo::test
