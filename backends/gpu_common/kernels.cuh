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

__global__ void rope_rows_kernel(float* x, const std::int32_t* pos,
                                 const float* ff, std::size_t rows,
                                 std::size_t heads, std::size_t head_dim,
                                 std::size_t n_rot, float base, bool neox) {
  std::size_t half = n_rot / 2;
  std::size_t n = rows * heads * half;
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    std::size_t pair = i % half;
    std::size_t rh = i / half; // row * heads + head
    std::size_t r = rh / heads;
    float theta = m::rope_theta(pos[r], pair, n_rot, base,
                                ff != nullptr ? ff[pair] : 1.0f);
    // NORMAL: (x[2i], x[2i+1]); NEOX (qwen2/qwen3): (x[i], x[i + half]).
    float* v = x + rh * head_dim + (neox ? pair : 2 * pair);
    std::size_t o = neox ? half : 1;
    m::rope_rotate(v[0], v[o], theta, &v[0], &v[o]);
  }
}

/// One block of attention_threads per (query row, head) at a time; scores
/// of a chunk of positions in shared memory, online softmax across chunks.
/// K and V are rounded to half where read (the attention contract).
__global__ void attention_kernel(const float* q, const float* k,
                                 const float* v, float* out,
                                 attention_dims d) {
  constexpr unsigned threads = m::attention_threads;
  __shared__ float qs[2 * threads];
  __shared__ float sc[m::attention_chunk];
  __shared__ float red[threads];
  unsigned tid = threadIdx.x;
  std::size_t group = d.n_heads / d.n_kv_heads;
  std::size_t row = d.n_heads * d.head_dim;
  std::size_t d1 = tid + threads;
  for (std::size_t th = blockIdx.x; th < d.n_tokens * d.n_heads;
       th += gridDim.x) {
    std::size_t t = th / d.n_heads;
    std::size_t h = th % d.n_heads;
    std::size_t kvh = (h / group) * d.head_dim;
    std::size_t n_pos = d.pos0 + t + 1;
    const float* qh = q + t * row + h * d.head_dim;
    for (std::size_t i = tid; i < d.head_dim; i += threads)
      qs[i] = qh[i];
    __syncthreads();
    float mx = 0, l = 0, acc0 = 0, acc1 = 0;
    for (std::size_t c0 = 0; c0 < n_pos; c0 += m::attention_chunk) {
      std::size_t cn = n_pos - c0 < m::attention_chunk ? n_pos - c0
                                                       : m::attention_chunk;
      float lmax = -INFINITY;
      for (std::size_t j = tid; j < cn; j += threads) {
        const float* kr = k + (c0 + j) * d.kv_stride + kvh;
        float s = 0;
        for (std::size_t i = 0; i < d.head_dim; ++i)
          s += qs[i] * m::round_to_half(kr[i]);
        s *= d.scale;
        sc[j] = s;
        lmax = fmaxf(lmax, s);
      }
      float corr;
      float nm = m::online_max(c0 == 0, mx, block_reduce(lmax, red, false),
                               &corr);
      float lsum = 0;
      for (std::size_t j = tid; j < cn; j += threads) {
        float e = expf(sc[j] - nm);
        sc[j] = e;
        lsum += e;
      }
      l = l * corr + block_reduce(lsum, red, true);
      acc0 *= corr;
      acc1 *= corr;
      for (std::size_t j = 0; j < cn; ++j) {
        float e = sc[j];
        const float* vr = v + (c0 + j) * d.kv_stride + kvh;
        if (tid < d.head_dim)
          acc0 += e * m::round_to_half(vr[tid]);
        if (d1 < d.head_dim)
          acc1 += e * m::round_to_half(vr[d1]);
      }
      mx = nm;
      __syncthreads(); // sc is read by all before the next chunk
    }
    float* oh = out + t * row + h * d.head_dim;
    if (tid < d.head_dim)
      oh[tid] = acc0 / l;
    if (d1 < d.head_dim)
      oh[d1] = acc1 / l;
    __syncthreads(); // qs is read by all before the next (row, head)
  }
}

/// One block per row j of W (grid-stride), for every row of A in turn.
__global__ void matvec_f16_kernel(const float* a, const std::uint16_t* w,
                                  float* c, std::size_t mm, std::size_t nn,
                                  std::size_t kk) {
  __shared__ float red[max_row_threads];
  for (std::size_t j = blockIdx.x; j < nn; j += gridDim.x) {
    const std::uint16_t* wr = w + j * kk;
    for (std::size_t t = 0; t < mm; ++t) {
      const float* at = a + t * kk;
      float s = 0;
      for (std::size_t i = threadIdx.x; i < kk; i += blockDim.x)
        s += m::half_to_float(wr[i]) * m::round_to_half(at[i]);
      float total = block_reduce(s, red, true);
      if (threadIdx.x == 0)
        c[t * nn + j] = total;
    }
  }
}

__global__ void matvec_q8_0_kernel(const float* a, const std::uint8_t* w,
                                   float* c, std::size_t mm, std::size_t nn,
                                   std::size_t kk) {
  __shared__ float red[max_row_threads];
  std::size_t nb = kk / 32;
  for (std::size_t j = blockIdx.x; j < nn; j += gridDim.x) {
    const std::uint8_t* wr = w + j * nb * 34;
    for (std::size_t t = 0; t < mm; ++t) {
      float s = 0;
      for (std::size_t b = threadIdx.x; b < nb; b += blockDim.x) {
        float dx;
        std::int8_t qx[32];
        m::quantize_q8_block(a + t * kk + b * 32, &dx, qx);
        s += m::q8_block_dot(wr + b * 34, dx, qx);
      }
      float total = block_reduce(s, red, true);
      if (threadIdx.x == 0)
        c[t * nn + j] = total;
    }
  }
}

/// ggml's other formats (BF16, Q4_0 ... Q6_K; `type` a GGUF id, blocks of
/// `be` elements and `bb` bytes): every weight dequantized as it is read
/// (math::dequant_element) and multiplied with F32 activations. One block
/// per row of W (grid-stride), for every row of A in turn.
__global__ void matvec_quant_kernel(const float* a, const std::uint8_t* w,
                                    float* c, std::size_t mm, std::size_t nn,
                                    std::size_t kk, std::uint32_t type,
                                    std::size_t be, std::size_t bb) {
  __shared__ float red[max_row_threads];
  const std::size_t row_bytes = kk / be * bb;
  for (std::size_t j = blockIdx.x; j < nn; j += gridDim.x) {
    const std::uint8_t* wr = w + j * row_bytes;
    for (std::size_t t = 0; t < mm; ++t) {
      const float* at = a + t * kk;
      float s = 0;
      for (std::size_t i = threadIdx.x; i < kk; i += blockDim.x)
        s += m::dequant_element(type, wr + i / be * bb,
                                static_cast<unsigned>(i % be))
             * at[i];
      float total = block_reduce(s, red, true);
      if (threadIdx.x == 0)
        c[t * nn + j] = total;
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

int launch_rope_rows(float* x, const std::int32_t* positions,
                     const float* freq_factors, const rope_dims& d,
                     void* stream) {
  auto g = gpu::elementwise_launch(d.rows * d.heads * (d.n_rot / 2));
  if (g.grid == 0)
    return 0;
  rope_rows_kernel<<<g.grid, g.block, 0, as_stream(stream)>>>(
    x, positions, freq_factors, d.rows, d.heads, d.head_dim, d.n_rot,
    d.freq_base, d.neox);
  return last_error();
}

int launch_attention(const float* q, const float* k, const float* v,
                     float* out, const attention_dims& d, void* stream) {
  auto g = gpu::attention_launch(d);
  if (g.grid == 0)
    return 0;
  attention_kernel<<<g.grid, g.block, 0, as_stream(stream)>>>(q, k, v, out,
                                                              d);
  return last_error();
}

int launch_matmul_weights(const float* a, const void* w, weight_type type,
                          float* c, const matmul_dims& d, void* stream) {
  auto g = gpu::weights_launch(type, d);
  if (g.grid == 0)
    return 0;
  if (type == weight_type::f16)
    matvec_f16_kernel<<<g.grid, g.block, 0, as_stream(stream)>>>(
      a, static_cast<const std::uint16_t*>(w), c, d.m, d.n, d.k);
  else if (type == weight_type::q8_0)
    matvec_q8_0_kernel<<<g.grid, g.block, 0, as_stream(stream)>>>(
      a, static_cast<const std::uint8_t*>(w), c, d.m, d.n, d.k);
  else if (type != weight_type::f32) {
    const std::size_t be = weight_block_elements(type);
    matvec_quant_kernel<<<g.grid, g.block, 0, as_stream(stream)>>>(
      a, static_cast<const std::uint8_t*>(w), c, d.m, d.n, d.k,
      ggml_type_id(type), be, *weight_row_bytes(type, be));
  } else
    return launch_matmul_tiled(a, static_cast<const float*>(w), c,
                               {d.m, d.n, d.k, true}, stream);
  return last_error();
}

} // namespace exo::backend::EXO_GPU_KERNEL_NS
