#pragma once

/// Settings of the CUDA and HIP backends.

#include <cstddef>

namespace exo::backend {

struct gpu_options {
  /// Size of each of a device's two pinned staging buffers: host<->device
  /// transfers move in chunks of at most this size, double-buffered.
  std::size_t staging_bytes = std::size_t{8} << 20;
  /// Use the shared tiled kernel instead of the vendor BLAS for matmul (the
  /// HIP backend always does: hipBLAS is not packaged here).
  bool tiled_matmul = false;
};

} // namespace exo::backend
