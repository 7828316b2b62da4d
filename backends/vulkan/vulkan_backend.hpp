#pragma once

/// The Vulkan backend: every physical device with a compute queue, driven by
/// compute shaders compiled to SPIR-V at build time. Runs for real on Mesa's
/// lavapipe (a CPU device), which it reports as experimental.

#include "backends/backend.hpp"

#include <cstddef>
#include <memory>

namespace exo::backend {

/// Settings of the Vulkan backend.
struct vulkan_options {
  /// Move data through staging buffers and vkCmdCopyBuffer even where the
  /// buffers' memory is host-visible (the path discrete GPUs take; tests use
  /// it to exercise that path on lavapipe). Such devices do not report
  /// cap_host_visible.
  bool force_staging = false;
  /// Bytes per staging chunk (two chunks per device, allocated on first use).
  std::size_t staging_chunk = std::size_t{8} << 20;
  /// Each device measures, when opened, what its own operations achieve
  /// (measure_device_rates: FLOP/s, weight bytes/s, an operation's own
  /// cost) and reports them (device_properties::peak_flops,
  /// memory_bandwidth, launch_seconds): the driver says none of them, and
  /// placement would assume 20 GFLOP/s and no cost per operation (lavapipe
  /// runs an operation in tens of microseconds). Off by default in the
  /// library; a node turns it on (devices.vulkan_measure_rates).
  bool measure_rates = false;
  /// Take the paths of a device without subgroup arithmetic (matvec and
  /// matvec_f32w instead of matvec_subgroup) even where the device has it:
  /// tests use it to run them on lavapipe.
  bool no_subgroup_arithmetic = false;
  /// Take the paths of a device without shaderFloat64 (the device's own
  /// fma in silu_mul and rope_cached, fused or not, instead of the exact
  /// fma through doubles; rms_norm's squares summed in float, not double:
  /// the doubles give the host's bits) even where the device has it: tests
  /// use it to run them on lavapipe.
  bool no_float64 = false;
};

std::unique_ptr<backend> make_vulkan_backend(vulkan_options opts = {});

} // namespace exo::backend
