#include "backends/gpu_common/kernel_reference.hpp"

#include "backends/gpu_common/kernel_math.hpp"
#include "backends/gpu_common/launch_geometry.hpp"

#include <algorithm>
#include <cmath>

namespace exo::backend::gpu::reference {

void binary(binary_op op, const float* a, const float* b, float* out,
            std::size_t count) {
  auto code = op == binary_op::add ? math::binary_code::add
                                   : math::binary_code::mul;
  for (std::size_t i = 0; i < count; ++i)
    out[i] = math::binary(code, a[i], b[i]);
}

void tiled_matmul(const float* a, const float* b, float* c,
                  const matmul_dims& d) {
  constexpr unsigned t = math::matmul_tile;
  auto g = matmul_launch(d);
  float as[t * t];
  float bs[t * t];
  for (std::size_t by = 0; by < g.tiles_y; ++by) {
    for (std::size_t bx = 0; bx < g.tiles_x; ++bx) {
      float acc[t * t] = {};
      for (std::size_t kt = 0; kt < g.tiles_k; ++kt) {
        // Every thread (ty, tx) of the block loads one element of each tile.
        for (unsigned ty = 0; ty < t; ++ty)
          for (unsigned tx = 0; tx < t; ++tx) {
            as[ty * t + tx] = math::matmul_load_a(a, d.m, d.k, by * t + ty,
                                                  kt * t + tx);
            bs[ty * t + tx] = math::matmul_load_b(
              b, d.k, d.n, d.transpose_b, kt * t + ty, bx * t + tx);
          }
        for (unsigned ty = 0; ty < t; ++ty)
          for (unsigned tx = 0; tx < t; ++tx)
            acc[ty * t + tx]
              = math::matmul_tile_step(as, bs, ty, tx, acc[ty * t + tx]);
      }
      for (unsigned ty = 0; ty < t; ++ty)
        for (unsigned tx = 0; tx < t; ++tx) {
          auto row = by * t + ty;
          auto col = bx * t + tx;
          if (row < d.m && col < d.n)
            c[row * d.n + col] = acc[ty * t + tx];
        }
    }
  }
}

void rmsnorm(const float* x, const float* weight, float* out,
             std::size_t rows, std::size_t cols, float eps) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    float sum = 0;
    for (std::size_t i = 0; i < cols; ++i)
      sum += in[i] * in[i];
    float scale = math::rms_scale(sum, cols, eps);
    for (std::size_t i = 0; i < cols; ++i)
      out[r * cols + i] = math::rmsnorm_apply(in[i], scale, weight[i]);
  }
}

void silu_mul(const float* gate, const float* up, float* out,
              std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    out[i] = math::silu_mul(gate[i], up[i]);
}

void softmax_rows(const float* x, float* out, std::size_t rows,
                  std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    float mx = -INFINITY;
    for (std::size_t i = 0; i < cols; ++i)
      mx = std::max(mx, in[i]);
    float sum = 0;
    for (std::size_t i = 0; i < cols; ++i)
      sum += std::exp(in[i] - mx);
    for (std::size_t i = 0; i < cols; ++i)
      out[r * cols + i] = math::softmax_apply(in[i], mx, sum);
  }
}

void rope(float* x, std::size_t tokens, std::size_t heads,
          std::size_t head_dim, std::size_t pos0, float base) {
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (std::size_t p = 0; p < head_dim / 2; ++p) {
        float angle = math::rope_angle(pos0 + t, p, head_dim, base);
        math::rope_rotate(v[2 * p], v[2 * p + 1], angle, &v[2 * p],
                          &v[2 * p + 1]);
      }
    }
}

} // namespace exo::backend::gpu::reference
