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
  /// A prompt's product with weights other than F32 (matmul_weights with
  /// rows not apart) of at least this many rows decodes the weights to F32
  /// and multiplies them as matmul does (vendor BLAS or the tiled kernel)
  /// instead of the matrix-vector kernels, whose cost grows with the rows;
  /// the activations are then not rounded as llama.cpp's CPU rounds them,
  /// so such a product is within F32 rounding of the exact one rather than
  /// the CPU engine's bits. 0: never (every product the CPU engine's
  /// arithmetic).
  std::size_t prompt_gemm_rows = 32;
  /// The decoded weights of such a product are held in pieces of at most
  /// this many bytes (whole rows; one row at least), and so are the
  /// results of a piece when the weights take more than one.
  std::size_t prompt_gemm_chunk_bytes = std::size_t{64} << 20;
};

} // namespace exo::backend
