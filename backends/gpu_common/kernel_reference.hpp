#pragma once

/// The GPU kernels' algorithms run on the host, step for step, through the
/// same math functions (kernel_math.hpp): the tiled product walks the same
/// tiles with the same zero padding, the row kernels reduce the same way.
/// Tests hold these to exo::backend::host and to double-precision formulas;
/// the kernels then differ from them only in summation order.

#include "backends/backend.hpp"

#include <cstddef>
#include <cstdint>

namespace exo::backend::gpu::reference {

void binary(binary_op op, const float* a, const float* b, float* out,
            std::size_t count);

/// The tiled matrix product of kernels.cuh, tile by tile.
void tiled_matmul(const float* a, const float* b, float* c,
                  const matmul_dims& dims);

/// out[r][i] = x[r][i] / rms(x[r]) * weight[i].
void rmsnorm(const float* x, const float* weight, float* out,
             std::size_t rows, std::size_t cols, float eps);

/// out[i] = silu(gate[i]) * up[i].
void silu_mul(const float* gate, const float* up, float* out,
              std::size_t count);

/// Softmax of every row.
void softmax_rows(const float* x, float* out, std::size_t rows,
                  std::size_t cols);

/// Rotates x[tokens][heads][head_dim] in place; token t is at position
/// pos0 + t.
void rope(float* x, std::size_t tokens, std::size_t heads,
          std::size_t head_dim, std::size_t pos0, float base);

/// rope_rows_kernel: x[rows][heads][head_dim] in place, row r at
/// positions[r], freq_factors may be null.
void rope_rows(float* x, const std::int32_t* positions,
               const float* freq_factors, const rope_dims& dims);

/// to_f16_kernel: out[i] = math::float_to_half(a[i]).
void to_f16(const float* a, std::uint16_t* out, std::size_t count);

/// The weight kernels: F16 and BF16 per element, summed sequentially (a
/// reference within rounding: matvec_vecdot_kernel sums in the host's
/// order, which gpu_emulator_tests checks against host::matmul_weights);
/// Q4_0 ... Q8_0 and the
/// K-quants as quantize_act_kernel + matvec_lanes_kernel, lane by lane
/// (these give the CPU engine's bits exactly).
void matmul_weights(const float* a, const void* w, weight_type type,
                    float* c, const matmul_dims& dims);

} // namespace exo::backend::gpu::reference
