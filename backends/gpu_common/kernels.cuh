#pragma once

/// The GPU kernels of exo, one source for CUDA (nvcc) and HIP (hipcc).
/// Include from exactly one .cu / .hip file per backend after defining
/// EXO_GPU_KERNEL_NS. The arithmetic lives in kernel_math.hpp, shared with
/// the host tests; the geometry in launch_geometry.hpp, shared likewise.

#include "backends/gpu_common/gpu_compat.cuh"

#include "backends/gpu_common/kernel_api.hpp"
#include "backends/gpu_common/kernel_math.hpp"
#include "backends/gpu_common/launch_geometry.hpp"

namespace exo::backend::EXO_GPU_KERNEL_NS {

namespace {

namespace m = exo::backend::gpu::math;

constexpr unsigned max_row_threads = 1024;

__global__ void binary_kernel(m::binary_code op, const float* a,
                              const float* b, float* out, std::size_t n) {
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    out[i] = m::binary(op, a[i], b[i]);
}

__global__ void silu_mul_kernel(const float* gate, const float* up,
                                float* out, std::size_t n) {
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    out[i] = m::silu_mul(gate[i], up[i]);
}

/// Tree reduction over a power-of-two block; returns the total to every
/// thread. `sum` selects addition, otherwise maximum.
__device__ float block_reduce(float v, float* shared, bool sum) {
  unsigned tid = threadIdx.x;
  shared[tid] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (tid < s)
      shared[tid] = sum ? shared[tid] + shared[tid + s]
                        : fmaxf(shared[tid], shared[tid + s]);
    __syncthreads();
  }
  float total = shared[0];
  __syncthreads();
  return total;
}

__global__ void rmsnorm_kernel(const float* x, const float* w, float* out,
                               std::size_t rows, std::size_t cols,
                               float eps) {
  __shared__ float shared[max_row_threads];
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* in = x + r * cols;
    float part = 0;
    for (std::size_t i = threadIdx.x; i < cols; i += blockDim.x)
      part += in[i] * in[i];
    float scale = m::rms_scale(block_reduce(part, shared, true), cols, eps);
    for (std::size_t i = threadIdx.x; i < cols; i += blockDim.x)
      out[r * cols + i] = m::rmsnorm_apply(in[i], scale, w[i]);
  }
}

__global__ void softmax_rows_kernel(const float* x, float* out,
                                    std::size_t rows, std::size_t cols) {
  __shared__ float shared[max_row_threads];
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* in = x + r * cols;
    float mx = -INFINITY;
    for (std::size_t i = threadIdx.x; i < cols; i += blockDim.x)
      mx = fmaxf(mx, in[i]);
    mx = block_reduce(mx, shared, false);
    float part = 0;
    for (std::size_t i = threadIdx.x; i < cols; i += blockDim.x)
      part += expf(in[i] - mx);
    float total = block_reduce(part, shared, true);
    for (std::size_t i = threadIdx.x; i < cols; i += blockDim.x)
      out[r * cols + i] = m::softmax_apply(in[i], mx, total);
  }
}

__global__ void rope_kernel(float* x, std::size_t tokens, std::size_t heads,
                            std::size_t head_dim, std::size_t pos0,
                            float base) {
  std::size_t half = head_dim / 2;
  std::size_t n = tokens * heads * half;
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    std::size_t token = i / (heads * half);
    std::size_t pair = i % half;
    float* v = x + (i / half) * head_dim + 2 * pair;
    float angle = m::rope_angle(pos0 + token, pair, head_dim, base);
    m::rope_rotate(v[0], v[1], angle, &v[0], &v[1]);
  }
}

__global__ void matmul_tiled_kernel(const float* a, const float* b, float* c,
                                    std::size_t mm, std::size_t nn,
                                    std::size_t kk, bool transpose_b,
                                    std::size_t tiles_x, std::size_t tiles_y,
                                    std::size_t tiles_k) {
  constexpr unsigned t = m::matmul_tile;
  __shared__ float as[t * t];
  __shared__ float bs[t * t];
  unsigned tx = threadIdx.x;
  unsigned ty = threadIdx.y;
  for (std::size_t by = blockIdx.y; by < tiles_y; by += gridDim.y) {
    for (std::size_t bx = blockIdx.x; bx < tiles_x; bx += gridDim.x) {
      float acc = 0;
      for (std::size_t kt = 0; kt < tiles_k; ++kt) {
        as[ty * t + tx] = m::matmul_load_a(a, mm, kk, by * t + ty,
                                           kt * t + tx);
        bs[ty * t + tx] = m::matmul_load_b(b, kk, nn, transpose_b,
                                           kt * t + ty, bx * t + tx);
        __syncthreads();
        acc = m::matmul_tile_step(as, bs, ty, tx, acc);
        __syncthreads();
      }
      std::size_t row = by * t + ty;
      std::size_t col = bx * t + tx;
      if (row < mm && col < nn)
        c[row * nn + col] = acc;
    }
  }
}

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

int last_error() {
  return static_cast<int>(cudaGetLastError());
}

} // namespace

int launch_binary(binary_op op, const float* a, const float* b, float* out,
                  std::size_t count, void* stream) {
  auto g = gpu::elementwise_launch(count);
  if (g.grid == 0)
    return 0;
  auto code = op == binary_op::add ? m::binary_code::add
                                   : m::binary_code::mul;
  binary_kernel<<<g.grid, g.block, 0, as_stream(stream)>>>(code, a, b, out,
                                                           count);
  return last_error();
}

int launch_silu_mul(const float* gate, const float* up, float* out,
                    std::size_t count, void* stream) {
  auto g = gpu::elementwise_launch(count);
  if (g.grid == 0)
    return 0;
  silu_mul_kernel<<<g.grid, g.block, 0, as_stream(stream)>>>(gate, up, out,
                                                             count);
  return last_error();
}

int launch_rmsnorm(const float* x, const float* weight, float* out,
                   std::size_t rows, std::size_t cols, float eps,
                   void* stream) {
  auto g = gpu::row_launch(rows, cols);
  if (g.grid == 0)
    return 0;
  rmsnorm_kernel<<<g.grid, g.block, 0, as_stream(stream)>>>(x, weight, out,
                                                            rows, cols, eps);
  return last_error();
}

int launch_softmax_rows(const float* x, float* out, std::size_t rows,
                        std::size_t cols, void* stream) {
  auto g = gpu::row_launch(rows, cols);
  if (g.grid == 0)
    return 0;
  softmax_rows_kernel<<<g.grid, g.block, 0, as_stream(stream)>>>(x, out, rows,
                                                                 cols);
  return last_error();
}

int launch_rope(float* x, std::size_t tokens, std::size_t heads,
                std::size_t head_dim, std::size_t pos0, float base,
                void* stream) {
  auto g = gpu::elementwise_launch(tokens * heads * (head_dim / 2));
  if (g.grid == 0)
    return 0;
  rope_kernel<<<g.grid, g.block, 0, as_stream(stream)>>>(x, tokens, heads,
                                                         head_dim, pos0, base);
  return last_error();
}

int launch_matmul_tiled(const float* a, const float* b, float* c,
                        const matmul_dims& d, void* stream) {
  auto g = gpu::matmul_launch(d);
  if (g.grid_x == 0)
    return 0;
  dim3 grid{g.grid_x, g.grid_y, 1};
  dim3 block{g.block_x, g.block_y, 1};
  matmul_tiled_kernel<<<grid, block, 0, as_stream(stream)>>>(
    a, b, c, d.m, d.n, d.k, d.transpose_b, g.tiles_x, g.tiles_y, g.tiles_k);
  return last_error();
}

} // namespace exo::backend::EXO_GPU_KERNEL_NS
