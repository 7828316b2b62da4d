#pragma once

/// The per-element and per-tile math of the GPU kernels, as inline
/// functions that compile for the host (g++) and the device (nvcc, hipcc).
/// kernels.cuh calls them on the GPU; the unit tests call the very same
/// functions on the host and compare with exo::backend::host.

#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#  define EXO_HD __host__ __device__
#else
#  define EXO_HD
#endif

namespace exo::backend::gpu::math {

/// Edge length of the square tiles of the tiled matrix product (threads per
/// block: tile x tile).
constexpr unsigned matmul_tile = 16;

/// Element-wise operation codes, as the kernels receive them.
enum class binary_code : int { add = 0, mul = 1 };

EXO_HD inline float binary(binary_code op, float a, float b) {
  return op == binary_code::add ? a + b : a * b;
}

/// SiLU(gate) * up: the gated activation of a Llama feed-forward block.
EXO_HD inline float silu_mul(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

/// 1 / sqrt(mean of squares + eps) for a row whose squares sum to sum_sq.
EXO_HD inline float rms_scale(float sum_sq, std::size_t cols, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(cols) + eps);
}

/// One normalized element: x * scale * weight.
EXO_HD inline float rmsnorm_apply(float x, float scale, float weight) {
  return x * scale * weight;
}

/// One softmax element given the row's maximum and sum of exponentials.
EXO_HD inline float softmax_apply(float x, float row_max, float row_sum) {
  return expf(x - row_max) / row_sum;
}

/// The rotation angle of pair `pair` (0 .. head_dim/2-1) at position pos:
/// pos * base^(-2 pair / head_dim).
EXO_HD inline float rope_angle(std::size_t pos, std::size_t pair,
                               std::size_t head_dim, float base) {
  float exponent = -2.0f * static_cast<float>(pair)
                   / static_cast<float>(head_dim);
  return static_cast<float>(pos) * powf(base, exponent);
}

/// Rotates the adjacent pair (x0, x1) by angle (Llama's "normal" rope).
EXO_HD inline void rope_rotate(float x0, float x1, float angle, float* y0,
                               float* y1) {
  float c = cosf(angle);
  float s = sinf(angle);
  *y0 = x0 * c - x1 * s;
  *y1 = x0 * s + x1 * c;
}

/// A[row][col] of a row-major [m x k] matrix, or 0 outside it (tile
/// padding).
EXO_HD inline float matmul_load_a(const float* a, std::size_t m,
                                  std::size_t k, std::size_t row,
                                  std::size_t col) {
  return row < m && col < k ? a[row * k + col] : 0.0f;
}

/// B[row][col] of the logical [k x n] right operand, or 0 outside it. With
/// transpose_b the storage is [n x k].
EXO_HD inline float matmul_load_b(const float* b, std::size_t k,
                                  std::size_t n, bool transpose_b,
                                  std::size_t row, std::size_t col) {
  if (row >= k || col >= n)
    return 0.0f;
  return transpose_b ? b[col * k + row] : b[row * n + col];
}

/// One thread's step through a pair of tiles: acc += sum_p As[ty][p] *
/// Bs[p][tx] over a tile's width. The tiles are row-major tile x tile.
EXO_HD inline float matmul_tile_step(const float* as, const float* bs,
                                     unsigned ty, unsigned tx, float acc) {
  for (unsigned p = 0; p < matmul_tile; ++p)
    acc += as[ty * matmul_tile + p] * bs[p * matmul_tile + tx];
  return acc;
}

} // namespace exo::backend::gpu::math
