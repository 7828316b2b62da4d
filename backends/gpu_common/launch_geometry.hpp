#pragma once

/// Launch geometry of the GPU kernels, as plain host functions: grid and
/// block sizes, tiling, the staging chunks of transfers, and the arguments
/// of a row-major product through a column-major BLAS. Tested without a GPU.

#include "backends/backend.hpp"

#include <cstddef>
#include <cstdint>

namespace exo::backend::gpu {

/// Largest grid extent used in y and z (the CUDA/HIP limit is 65535); x is
/// also capped there: kernels loop with a grid stride over the rest.
constexpr std::uint32_t max_grid_extent = 65535;

/// A one-dimensional launch: `grid` blocks of `block` threads. grid == 0
/// means "nothing to launch".
struct launch_1d {
  std::uint32_t grid = 0;
  std::uint32_t block = 0;
};

/// Element-wise kernels: block threads each, enough blocks to cover count
/// once (capped at max_grid_extent; the kernel strides over the rest).
launch_1d elementwise_launch(std::size_t count, std::uint32_t block = 256);

/// Row kernels (rmsnorm, softmax): one block per row (capped; the kernel
/// strides), threads = the next power of two >= cols, clamped to [32, 1024]
/// so the shared-memory tree reduction stays a power of two.
launch_1d row_launch(std::size_t rows, std::size_t cols);

/// The tiled product's grid: x covers n, y covers m in tiles of
/// math::matmul_tile (capped; the kernel strides over extra tiles).
struct launch_2d {
  std::uint32_t grid_x = 0;
  std::uint32_t grid_y = 0;
  std::uint32_t block_x = 0;
  std::uint32_t block_y = 0;
  std::size_t tiles_x = 0; ///< tiles needed along n
  std::size_t tiles_y = 0; ///< tiles needed along m
  std::size_t tiles_k = 0; ///< tile steps along k
};
launch_2d matmul_launch(const matmul_dims& dims);

/// The attention kernel: one block of math::attention_threads per (query
/// row, head), capped (the kernel strides).
launch_1d attention_launch(const attention_dims& dims);

/// A row-per-block geometry for weight products: one block per row of W
/// (n), capped; threads a power of two, at most weights_max_threads, that
/// covers the row's elements where it can (grid 0: an empty product,
/// which launch_matmul_weights launches nothing for).
constexpr std::uint32_t weights_max_threads = 256;
launch_1d weights_launch(weight_type type, const matmul_dims& dims);

/// Warps per block of the warp kernels (warps_launch).
constexpr std::uint32_t warp_rows_per_block = 8;
/// Rows of W per warp of matvec_vecdot_kernel (8 lanes each).
constexpr std::uint32_t vecdot_rows_per_warp = 4;
/// matvec_vecdot_kernel (F16 and F32 weights): vecdot_rows_per_warp rows
/// of W per warp, warp_rows_per_block warps a block, capped (the kernel
/// strides); grid 0 for an empty product.
launch_1d warp_rows_launch(const matmul_dims& dims);

/// Kernels with a warp (32 threads) per item (quantize_q8k_warps_kernel:
/// an item is a super-block of activations): warp_rows_per_block warps a
/// block, capped (the kernel strides); grid 0 for no items.
launch_1d warps_launch(std::size_t items);

/// The quantized matrix-vector kernel (kernel_quant.hpp): rows_per_block
/// rows of W per block, math::dot_lanes threads each (capped; the kernel
/// strides over the rest).
constexpr std::uint32_t lanes_rows_per_block = 16;
launch_1d lanes_launch(const matmul_dims& dims);

/// Bytes of the quantized activations that weights of `type` meet in a
/// product of these dims (m rows of k; F16 and BF16: the m x k
/// activations rounded, as floats), or 0 for F32 weights.
std::size_t act_scratch_bytes(weight_type type, const matmul_dims& dims);

/// What launch_matmul_weights leaves in its scratch: A in the form the
/// product reads it (Q8_0, Q8_1 or Q8_K blocks; a batch's floats rounded
/// to F16 or BF16), or none where it leaves nothing there (F32 weights,
/// one row of F16/BF16, which the kernel rounds as it reads, an empty
/// product). Two products of the same A whose forms are equal and not none
/// can share one conversion (launch_matmul_weights' act_ready).
enum class act_form : std::uint8_t {
  none,
  q8_0,
  q8_1,
  q8_k,
  f16_rounded,
  bf16_rounded
};
act_form scratch_act_form(weight_type type, const matmul_dims& dims);

/// Splits `total` bytes into chunks of at most `chunk` bytes.
struct chunk_plan {
  std::size_t total = 0;
  std::size_t chunk = 0;

  std::size_t count() const noexcept {
    return chunk == 0 ? 0 : (total + chunk - 1) / chunk;
  }
  std::size_t offset(std::size_t i) const noexcept {
    return i * chunk;
  }
  std::size_t size(std::size_t i) const noexcept {
    auto off = offset(i);
    return off >= total ? 0 : (total - off < chunk ? total - off : chunk);
  }
};

/// Operand order of one column-major GEMM that computes the row-major
/// product C[m x n] = A * op(B): column-major C^T = op(B)^T * A^T, so the
/// BLAS's first operand is B and its second is A.
struct column_major_gemm {
  bool transpose_first = false; ///< op of the first operand (B's storage)
  int rows = 0;                 ///< rows of C^T (= n)
  int cols = 0;                 ///< columns of C^T (= m)
  int inner = 0;                ///< k
  int ld_first = 0;             ///< leading dimension of B's storage
  int ld_second = 0;            ///< leading dimension of A (= k)
  int ld_result = 0;            ///< leading dimension of C (= n)
};
column_major_gemm row_major_as_column_major(const matmul_dims& dims);

} // namespace exo::backend::gpu
