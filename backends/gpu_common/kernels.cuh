#pragma once

/// The GPU kernels of exo, one source for CUDA (nvcc), HIP (hipcc) and the
/// GPU emulator (g++, gpu_emulator.hpp: emu_kernels.cpp). Include from
/// exactly one .cu / .hip / .cpp file per backend after defining
/// EXO_GPU_KERNEL_NS. The arithmetic lives in kernel_math.hpp, shared with
/// the host tests; the geometry in launch_geometry.hpp, shared likewise.
/// Launches are written EXO_LAUNCH(kernel, grid, block, stream)(args...)
/// (gpu_compat.cuh), loops to unroll EXO_UNROLL.

#include "backends/gpu_common/gpu_compat.cuh"

#include "backends/gpu_common/kernel_api.hpp"
#include "backends/gpu_common/kernel_math.hpp"
#include "backends/gpu_common/kernel_quant.hpp"
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

/// The activations that F16 (bf16 false) or BF16 weights meet, rounded as
/// llama.cpp rounds them, once per product of several rows of A: the
/// product kernels read them for every row of W, and rounding there cost
/// a software rounding per weight and row of A. (One row of A rounds in
/// the product kernel: a launch costs more than its rounding.)
__global__ void round_act_kernel(const float* a, float* out, std::size_t n,
                                 bool bf16) {
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    out[i] = bf16 ? m::round_to_bf16(a[i]) : m::round_to_half(a[i]);
}

__global__ void to_f16_kernel(const float* a, std::uint16_t* out,
                              std::size_t n) {
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    out[i] = m::float_to_half(a[i]);
}

/// out[r * kk + i] = element i of row r of W (rows of row_bytes bytes in
/// blocks of be elements and bb bytes, ggml format `type`), as
/// math::dequant_element decodes it: a prompt's product multiplies the
/// decoded rows (gpu_backend_impl.hpp, prompt_product).
__global__ void dequant_rows_kernel(const std::uint8_t* w, float* out,
                                    std::size_t rows, std::size_t kk,
                                    std::size_t row_bytes, std::size_t be,
                                    std::size_t bb, std::uint32_t type) {
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t x = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       x < rows * kk; x += stride) {
    const std::size_t r = x / kk, i = x % kk;
    out[x] = m::dequant_element(type, w + r * row_bytes + i / be * bb,
                                static_cast<unsigned>(i % be));
  }
}

/// The host's silu_mul (ggml_vec_swiglu_f32): each whole group of 16 from
/// the start by ggml's expf (ggml::swiglu_lane, the host's bits), the
/// n % 16 left by the platform's expf (libm's on the host, so those few
/// may differ; none where the feed-forward width is a multiple of 16, as
/// every Llama model's is).
__global__ void silu_mul_kernel(const float* gate, const float* up,
                                float* out, std::size_t n) {
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  std::size_t groups = n - n % 16;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    out[i] = i < groups ? ggml::swiglu_lane(gate[i], up[i])
                        : m::silu_mul(gate[i], up[i]);
}

__device__ inline float larger(float a, float b) { return fmaxf(a, b); }
__device__ inline double larger(double a, double b) { return fmax(a, b); }

/// Tree reduction over a power-of-two block; returns the total to every
/// thread. `sum` selects addition, otherwise maximum.
template <class T>
__device__ T block_reduce(T v, T* shared, bool sum) {
  unsigned tid = threadIdx.x;
  shared[tid] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (tid < s)
      shared[tid] = sum ? shared[tid] + shared[tid + s]
                        : larger(shared[tid], shared[tid + s]);
    __syncthreads();
  }
  T total = shared[0];
  __syncthreads();
  return total;
}

__global__ void rmsnorm_kernel(const float* x, const float* w, float* out,
                               std::size_t rows, std::size_t cols,
                               float eps) {
  // The host's arithmetic (m::rms_scale): float squares summed in double.
  __shared__ double shared[max_row_threads];
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* in = x + r * cols;
    double part = 0;
    for (std::size_t i = threadIdx.x; i < cols; i += blockDim.x)
      part += static_cast<double>(m::mul_rn(in[i], in[i]));
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

/// rope_rows_kernel's pairs turned by the host's angles: cs[r * n_rot +
/// 2 pair] and the next float are the pair's cosine and sine for row r
/// (host::rope_cache), and the rotation is the host's (m::rope_rotate_cs),
/// so that every element gets the host's bits.
__global__ void rope_cached_kernel(float* x, const float* cs,
                                   std::size_t rows, std::size_t heads,
                                   std::size_t head_dim, std::size_t n_rot,
                                   bool neox) {
  std::size_t half = n_rot / 2;
  std::size_t n = rows * heads * half;
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    std::size_t pair = i % half;
    std::size_t rh = i / half; // row * heads + head
    const float* c = cs + (rh / heads) * n_rot + 2 * pair;
    float* v = x + rh * head_dim + (neox ? pair : 2 * pair);
    std::size_t o = neox ? half : 1;
    m::rope_rotate_cs(v[0], v[o], c[0], c[1], &v[0], &v[o]);
  }
}

/// What an attention block needs of its (query row, head) pair th: the
/// row t, its query head's values at q_off, its KV head's offset kvh, the
/// positions it sees (n_pos) and its block table (attention_paged_rows:
/// row t's own position, clamped into its table, and table).
struct attention_item {
  std::size_t t, q_off, kvh, n_pos;
  const std::int32_t* table;
  /// Where cache row r of the KV head's row starts, in values.
  __device__ std::size_t row_at(const attention_dims& d, std::size_t r) const {
    return m::kv_row_at(r, d.kv_stride, table, d.block_positions,
                        d.block_stride, d.max_block);
  }
};
__device__ inline attention_item attention_item_of(const attention_dims& d,
                                                   std::size_t th) {
  attention_item it;
  it.t = th / d.n_heads;
  const std::size_t h = th % d.n_heads;
  it.q_off = it.t * d.n_heads * d.head_dim + h * d.head_dim;
  it.kvh = h / (d.n_heads / d.n_kv_heads) * d.head_dim;
  it.n_pos = d.pos0 + it.t + 1;
  it.table = d.block_table;
  if (d.row_tables != nullptr) {
    const std::int32_t* rt = d.row_tables + it.t * (1 + d.row_table_len);
    it.n_pos =
      m::row_position(rt[0], d.row_table_len * d.block_positions - 1) + 1;
    it.table = rt + 1;
  }
  return it;
}

/// The end of an exact attention block's (row, head): thread 0's running
/// sum S shared through `sum`, each thread's two output elements (tid and
/// tid + attention_threads) times 1 / S as the host writes them (0 where
/// the sum is 0), then a barrier before the next item reuses the block's
/// shared memory.
__device__ inline void attention_write(float* oh, std::size_t head_dim,
                                       float S, float acc0, float acc1,
                                       float* sum) {
  const unsigned tid = threadIdx.x;
  const std::size_t d1 = tid + m::attention_threads;
  if (tid == 0)
    sum[0] = S;
  __syncthreads();
  const float total = sum[0];
  const float s_inv = total == 0.0f ? 0.0f : m::div_rn(1.0f, total);
  if (tid < head_dim)
    oh[tid] = m::mul_rn(acc0, s_inv);
  if (d1 < head_dim)
    oh[d1] = m::mul_rn(acc1, s_inv);
  __syncthreads(); // the query and sum are read by all before the next
}

/// A prompt's attention with the host's bits (host::attention's tiled
/// path, ggml_compute_forward_flash_attn_ext_tiled: 64 query rows and more
/// over an f32 or f16 cache, head sizes of multiples of 16). Each row of
/// each head is computed alone there (rows do not interact, masked cells
/// weigh exactly 0), so one block of attention_threads per (query row,
/// head) at a time walks the cells in tiles of attention_tile as the host
/// does:
/// - the first attention_tile threads score a cell each: a chain of fused
///   multiply-adds over head_dim from 0 (Q as it is, K rounded to half),
///   times the scale, plus the mask's 0; cells past the row's position
///   are -inf;
/// - thread 0 takes the tile's maximum in order, the new running maximum,
///   and where it grew libm's expf of the difference, which rescales the
///   sum and every accumulator;
/// - each scoring thread takes ggml's expf of its score less the maximum
///   (ggml_vec_soft_max_f32), thread 0 adds the tile's four 16-lane trees
///   in double to the running sum;
/// - each thread carries its two output elements' chains of fused
///   multiply-adds over the tile's visible cells in order.
/// Checked on the GPU emulator against host::attention, contiguous and
/// paged. KV is const float* (an f32 cache) or const std::uint16_t* (an
/// f16 cache's halves).
template <class KV>
__global__ void attention_tiled_kernel(const float* q, KV k, KV v,
                                       float* out, attention_dims d) {
  constexpr unsigned threads = m::attention_threads;
  constexpr unsigned tile = m::attention_tile;
  static_assert(tile <= threads && tile % 16 == 0, "a thread per cell");
  __shared__ float qs[2 * threads];
  __shared__ float kq[tile]; // the tile's scores, then their weights
  __shared__ float shift[2]; // the running maximum, and the rescale
  __shared__ int grew[1];    // -1: no visible cell, 0: kept, 1: grew
  __shared__ float sum[1];
  unsigned tid = threadIdx.x;
  std::size_t d1 = tid + threads;
  for (std::size_t th = blockIdx.x; th < d.n_tokens * d.n_heads;
       th += gridDim.x) {
    const attention_item it = attention_item_of(d, th);
    const std::size_t kvh = it.kvh, n_pos = it.n_pos;
    auto row_at = [&d, &it](std::size_t r) { return it.row_at(d, r); };
    const float* qh = q + it.q_off;
    for (std::size_t i = tid; i < d.head_dim; i += threads)
      qs[i] = qh[i];
    __syncthreads();
    float M = -INFINITY, S = 0.0f; // thread 0's
    float acc0 = 0.0f, acc1 = 0.0f;
    for (std::size_t c0 = 0; c0 < n_pos; c0 += tile) {
      const std::size_t visible = n_pos - c0 < tile ? n_pos - c0 : tile;
      if (tid < tile) {
        float s = -INFINITY;
        if (tid < visible) {
          const auto kr = k + row_at(c0 + tid) + kvh;
          float a = 0.0f;
          for (std::size_t i = 0; i < d.head_dim; ++i)
            a = fmaf(m::kv_value(kr[i]), qs[i], a);
          s = m::add_rn(m::mul_rn(a, d.scale), 0.0f);
        }
        kq[tid] = s;
      }
      __syncthreads();
      if (tid == 0) {
        float tmax = -INFINITY;
        for (unsigned j = 0; j < tile; ++j)
          tmax = tmax > kq[j] ? tmax : kq[j]; // ggml_vec_max_f32's MAX
        int g = -1;
        float ms = 1.0f;
        if (tmax != -INFINITY) {
          const float mn = fmaxf(M, tmax);
          g = mn > M ? 1 : 0;
          if (g != 0) {
            ms = m::expf_libm(m::add_rn(M, -mn));
            S = m::mul_rn(S, ms);
          }
          M = mn;
        }
        grew[0] = g;
        shift[0] = M;
        shift[1] = ms;
      }
      __syncthreads();
      const int g = grew[0];
      if (g >= 0) { // the same for every thread
        if (tid < tile)
          kq[tid] = ggml::expf_lane(m::add_rn(kq[tid], -shift[0]));
        if (g != 0) {
          acc0 = m::mul_rn(acc0, shift[1]);
          acc1 = m::mul_rn(acc1, shift[1]);
        }
        __syncthreads();
        if (tid == 0) {
          double t = 0.0;
          for (unsigned j = 0; j < tile; j += 16)
            t = m::dadd_rn(t, static_cast<double>(m::reduce16(kq + j)));
          S = static_cast<float>(m::dadd_rn(static_cast<double>(S), t));
        }
        for (std::size_t j = 0; j < visible; ++j) {
          const auto vr = v + row_at(c0 + j) + kvh;
          if (tid < d.head_dim)
            acc0 = fmaf(m::kv_value(vr[tid]), kq[j], acc0);
          if (d1 < d.head_dim)
            acc1 = fmaf(m::kv_value(vr[d1]), kq[j], acc1);
        }
      }
      __syncthreads(); // kq is read by all before the next tile
    }
    attention_write(out + it.q_off, d.head_dim, S, acc0, acc1, sum);
  }
}

/// What attention_exact_kernel keeps of a query head: its values rounded
/// to half (f32 and f16 caches: ggml_vec_dot_f16's Q) and its Q8_0 blocks
/// (q8_0 caches: the vec_dot_type of Q8_0).
struct exact_query {
  float* qs;   ///< head_dim values
  m::act_q8* qq; ///< head_dim / 32 blocks
};

/// Prepares the query head qh for the cache type of KV (thread tid of
/// `threads`).
__device__ inline void exact_prepare(const float* qh, std::size_t hd,
                                     unsigned tid, unsigned threads,
                                     exact_query q, const float*) {
  for (std::size_t i = tid; i < hd; i += threads)
    q.qs[i] = m::round_to_half(qh[i]);
}
__device__ inline void exact_prepare(const float* qh, std::size_t hd,
                                     unsigned tid, unsigned threads,
                                     exact_query q, const std::uint16_t*) {
  exact_prepare(qh, hd, tid, threads, q, static_cast<const float*>(nullptr));
}
__device__ inline void exact_prepare(const float* qh, std::size_t hd,
                                     unsigned tid, unsigned threads,
                                     exact_query q, m::q8_kv_ptr) {
  for (std::size_t b = tid; b < hd / 32; b += threads)
    m::quantize_act_q8(qh + 32 * b, false, q.qq[b]);
}

/// A cell's score before the scale: ggml_vec_dot_f16 (f32 and f16 caches)
/// or ggml_vec_dot_q8_0_q8_0 (q8_0: 8 lanes of 4 values a block, each a
/// fused chain over the blocks, summed as hsum_float_8).
template <class KV>
__device__ inline float exact_score(KV k, exact_query q, std::size_t hd) {
  return m::dot_f16_host(k, q.qs, hd);
}
__device__ inline float exact_score(m::q8_kv_ptr k, exact_query q,
                                    std::size_t hd) {
  constexpr auto q8 = static_cast<std::uint32_t>(quant::ggml_type::q8_0);
  float acc[m::dot_lanes], extra[m::dot_lanes];
  for (unsigned lane = 0; lane < m::dot_lanes; ++lane)
    m::lane_dot(q8, k.base + k.at / 32 * 34, q.qq, hd / 32, lane, &acc[lane],
                &extra[lane]);
  return m::combine_lanes(q8, acc, extra);
}

/// An output element's accumulator after a cell: a half accumulator
/// (online_acc: ggml_vec_scale_f16 / ggml_vec_mad_f16) for f32 and f16
/// caches; for q8_0 an f32 one (ggml_vec_scale_f32 by a plain product,
/// ggml_vec_mad_f32 by a fused multiply-add of the decoded value).
template <class KV>
__device__ inline float exact_v_step(KV, float acc, bool grew, float ms,
                                     float v, float vs) {
  return m::online_acc(acc, grew, ms, v, vs);
}
__device__ inline float exact_v_step(m::q8_kv_ptr, float acc, bool grew,
                                     float ms, float v, float vs) {
  if (grew)
    acc = m::mul_rn(acc, ms);
  return fmaf(v, vs, acc);
}

/// Decode attention with the host's bits (host::attention's one_chunk path:
/// kernel_math.hpp, "decode attention with the host's bits"). One block of
/// attention_threads per (query row, head) at a time, the cells in tiles of
/// one a thread: each thread scores its cell (exact_score, then the scale
/// and the visible cell's mask of 0), thread 0 walks the tile's cells in
/// order for the running maximum (online_arg), each thread takes its
/// cell's expf (expf_libm), thread 0 carries the running sum while every
/// thread adds the tile's V values into the accumulators of its output
/// elements, cell by cell in order (exact_v_step). The cells' order is the
/// host's wherever it matters, so the bits are the host's (checked on the
/// GPU emulator against host::attention, contiguous, paged and rows
/// apart). KV as attention_tiled_kernel's, or a q8_0 cache (m::q8_kv_ptr).
template <class KV>
__global__ void attention_exact_kernel(const float* q, KV k, KV v, float* out,
                                       attention_dims d) {
  constexpr unsigned threads = m::attention_threads;
  __shared__ float qs[2 * threads];
  __shared__ m::act_q8 qq[2 * threads / 32];
  __shared__ float arg[threads]; // a cell's score, then its expf argument
  __shared__ float ms[threads];
  __shared__ float vs[threads];
  __shared__ unsigned char grew[threads];
  __shared__ float sum[1];
  const exact_query query{qs, qq};
  unsigned tid = threadIdx.x;
  std::size_t d1 = tid + threads;
  for (std::size_t th = blockIdx.x; th < d.n_tokens * d.n_heads;
       th += gridDim.x) {
    const attention_item it = attention_item_of(d, th);
    const std::size_t kvh = it.kvh, n_pos = it.n_pos;
    auto row_at = [&d, &it](std::size_t r) { return it.row_at(d, r); };
    exact_prepare(q + it.q_off, d.head_dim, tid, threads, query, k);
    __syncthreads();
    float mx = -INFINITY, S = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (std::size_t c0 = 0; c0 < n_pos; c0 += threads) {
      const std::size_t cn = n_pos - c0 < threads ? n_pos - c0 : threads;
      if (tid < cn) {
        const float s =
          exact_score(k + row_at(c0 + tid) + kvh, query, d.head_dim);
        arg[tid] = m::add_rn(m::mul_rn(s, d.scale), 0.0f);
      }
      __syncthreads();
      if (tid == 0)
        for (std::size_t j = 0; j < cn; ++j) {
          bool g;
          arg[j] = m::online_arg(arg[j], mx, g);
          grew[j] = g ? 1 : 0;
        }
      __syncthreads();
      if (tid < cn) {
        const float e = m::expf_libm(arg[tid]);
        ms[tid] = grew[tid] != 0 ? e : 1.0f;
        vs[tid] = grew[tid] != 0 ? 1.0f : e;
      }
      __syncthreads();
      if (tid == 0)
        for (std::size_t j = 0; j < cn; ++j)
          S = m::online_sum(S, ms[j], vs[j]);
      for (std::size_t j = 0; j < cn; ++j) {
        const auto vr = v + row_at(c0 + j) + kvh;
        const bool gj = grew[j] != 0;
        if (tid < d.head_dim)
          acc0 = exact_v_step(k, acc0, gj, ms[j], m::kv_value(vr[tid]), vs[j]);
        if (d1 < d.head_dim)
          acc1 = exact_v_step(k, acc1, gj, ms[j], m::kv_value(vr[d1]), vs[j]);
      }
      __syncthreads(); // the tile's weights are read by all before the next
    }
    attention_write(out + it.q_off, d.head_dim, S, acc0, acc1, sum);
  }
}

/// matvec_vecdot_kernel's modes (bits of its template argument).
constexpr int vecdot_f16 = 1;       ///< F16 weights (else F32)
constexpr int vecdot_round_act = 2; ///< A rounded to half in the kernel
constexpr int vecdot_tiny = 4;      ///< tinyBLAS's order (else vec_dot's)
constexpr int vecdot_bf16 = 8;      ///< BF16 weights: ggml_vec_dot_bf16

/// F16 or F32 weights, each output with the host's bits
/// (host::matmul_weights): in tinyBLAS's order where llamafile_sgemm takes
/// the product (Tiny: math::tinyblas_takes; one 16-lane chain of fused
/// multiply-adds over k in steps of 16, then _mm512_reduce_add_ps's tree),
/// else in ggml_vec_dot_f16/_f32's (one row of A, rows apart, and the
/// batches tinyBLAS declines: four 16-lane chains over blocks of 64, met
/// as GGML_F16_VEC_REDUCE meets them, the tree, then the rest of the row:
/// math::vecdot_rest_*; math::dot_f16_host is the same order). Eight
/// lanes per row of W, each holding 8 of vec_dot's 64 chains (elements
/// 64 b + 8 i + e) or 2 of tinyBLAS's 16 (16 b + 2 i + e); the chains meet
/// by shuffles within the 8 lanes (a + b == b + a, so which lane holds
/// which operand does not matter) and the first lane finishes the row.
/// Activations rounded to half here (RoundAct: F16 with one row of A) or
/// before (round_act_kernel); rows of A 4 at a time. Every lane of a warp
/// makes the same trips and shuffles; lanes past the last row of W compute
/// nothing and write nothing.
template <int Mode> // vecdot_f16 | vecdot_round_act | vecdot_tiny
__global__ void matvec_vecdot_kernel(const float* a, const void* w, float* c,
                                     std::size_t mm, std::size_t nn,
                                     std::size_t kk) {
  constexpr bool F16 = (Mode & vecdot_f16) != 0;
  constexpr bool RoundAct = (Mode & vecdot_round_act) != 0;
  constexpr bool Tiny = (Mode & vecdot_tiny) != 0;
  constexpr bool BF = (Mode & vecdot_bf16) != 0;
  constexpr unsigned R = 4, G = 8;
  // Chains a lane holds, and elements a step of the 8 lanes: vec_dot's 64
  // chains over 64, tinyBLAS's 16 over 16, BF16's two accumulators of 16
  // over 32 (lanes 0-3 the first, 4-7 the second).
  constexpr unsigned E = Tiny ? 2 : BF ? 4 : 8;
  constexpr std::size_t B = Tiny ? 16 : BF ? 32 : 64;
  static_assert(32 / G == gpu::vecdot_rows_per_warp, "8 lanes a row");
  const unsigned gl = threadIdx.x % G;
  const std::size_t groups = blockDim.x / G;
  const std::size_t np = kk / B * B;
  const auto* wh = static_cast<const std::uint16_t*>(w);
  const auto* wf = static_cast<const float*>(w);
  for (std::size_t j0 = blockIdx.x * groups; j0 < nn;
       j0 += static_cast<std::size_t>(gridDim.x) * groups) {
    const std::size_t j = j0 + threadIdx.x / G;
    const bool live = j < nn;
    for (std::size_t t0 = 0; t0 < mm; t0 += R) {
      const unsigned rows = mm - t0 < R ? static_cast<unsigned>(mm - t0) : R;
      float acc[R][E];
EXO_UNROLL
      for (unsigned u = 0; u < R; ++u)
EXO_UNROLL
        for (unsigned e = 0; e < E; ++e)
          acc[u][e] = 0.0f;
      if (live)
        for (std::size_t b = 0; b < np; b += B) {
          const std::size_t at = j * kk + b + E * gl;
          float wv[E];
EXO_UNROLL
          for (unsigned e = 0; e < E; ++e)
            wv[e] = BF    ? m::bf16_to_float(wh[at + e])
                    : F16 ? m::half_to_float(wh[at + e])
                          : wf[at + e];
EXO_UNROLL
          for (unsigned u = 0; u < R; ++u)
            if (u < rows) {
              const float* ap = a + (t0 + u) * kk + b + E * gl;
EXO_UNROLL
              for (unsigned e = 0; e < E; ++e) {
                const float x = !RoundAct ? ap[e]
                                : BF      ? m::round_to_bf16(ap[e])
                                          : m::round_to_half(ap[e]);
                // BF16: a product, then a sum (exact products: the same
                // as fused).
                acc[u][e] = BF ? m::add_rn(m::mul_rn(wv[e], x), acc[u][e])
                               : fmaf(wv[e], x, acc[u][e]);
              }
            }
        }
      for (unsigned u = 0; u < rows; ++u) {
        float p[E];
EXO_UNROLL
        for (unsigned e = 0; e < E; ++e)
          p[e] = acc[u][e];
        if (BF) {
          // Each accumulator's tree: c[l] + c[l + 8] (lanes 0-1 and 4-5),
          // then + the quarter 4 on (lanes 0 and 4), then the pairs; the
          // two trees added in double, then the rest.
EXO_UNROLL
          for (unsigned e = 0; e < E; ++e)
            p[e] = m::add_rn(p[e], EXO_SHFL_XOR(p[e], 2));
EXO_UNROLL
          for (unsigned e = 0; e < E; ++e)
            p[e] = m::add_rn(p[e], EXO_SHFL_XOR(p[e], 1));
          const float r = m::add_rn(m::add_rn(p[0], p[2]),
                                    m::add_rn(p[1], p[3]));
          const float r2 = EXO_SHFL_XOR(r, 4);
          if (gl == 0 && live)
            c[(t0 + u) * nn + j] = m::vecdot_rest_bf16(
              wh + j * kk, a + (t0 + u) * kk, np, kk,
              m::dadd_rn(static_cast<double>(r), static_cast<double>(r2)),
              RoundAct);
          continue;
        }
        if (!Tiny) {
          // Lanes 0-1, e: l[8 i + e] = (chain m + chain m + 32) + (chain
          // m + 16 + chain m + 48), m = 8 i + e.
EXO_UNROLL
          for (unsigned e = 0; e < E; ++e)
            p[e] = m::add_rn(p[e], EXO_SHFL_XOR(p[e], 4));
EXO_UNROLL
          for (unsigned e = 0; e < E; ++e)
            p[e] = m::add_rn(p[e], EXO_SHFL_XOR(p[e], 2));
        }
        // The tree's halves: vec_dot's l[e] + l[e + 8] (lane 0, e < 8);
        // tinyBLAS's lanes 2 i + e and 2 i + e + 8 (lanes 0-3), then its
        // quarters (lanes 0-1) and pairs (lane 0).
EXO_UNROLL
        for (unsigned e = 0; e < E; ++e)
          p[e] = m::add_rn(p[e], EXO_SHFL_XOR(p[e], Tiny ? 4 : 1));
        float s;
        if (Tiny) {
EXO_UNROLL
          for (unsigned e = 0; e < E; ++e)
            p[e] = m::add_rn(p[e], EXO_SHFL_XOR(p[e], 2));
          s = m::add_rn(m::add_rn(p[0], EXO_SHFL_XOR(p[0], 1)),
                        m::add_rn(p[1], EXO_SHFL_XOR(p[1], 1)));
        } else {
          float t6[4];
EXO_UNROLL
          for (unsigned i = 0; i < 4; ++i)
            t6[i] = m::add_rn(p[i + 4], p[i]);
          s = m::add_rn(m::add_rn(t6[0], t6[2]), m::add_rn(t6[1], t6[3]));
        }
        if (gl == 0 && live) {
          const float* ar = a + (t0 + u) * kk;
          c[(t0 + u) * nn + j] =
            F16 ? m::vecdot_rest_f16(wh + j * kk, ar, np, kk, s, RoundAct)
                : m::vecdot_rest_f32(wf + j * kk, ar, np, kk, s);
        }
      }
    }
  }
}

/// Rounds the activations to the format the weights meet (kernel_quant.hpp):
/// one thread per block (launched for Q8_0 and Q8_1's blocks of 32; Q8_K's
/// super-blocks go to quantize_q8k_warps_kernel).
__global__ void quantize_act_kernel(const float* a, void* out,
                                    std::size_t blocks, int format) {
  const auto f = static_cast<m::act_format>(format);
  for (std::size_t b = blockIdx.x * blockDim.x + threadIdx.x; b < blocks;
       b += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    m::quantize_act_block(f, a, b, out);
}

/// Q8_K activations (the K-quants' products): a warp per super-block of 256,
/// each lane 8 consecutive elements, so that a decode step's few blocks
/// (8 for k = 2048) are not each one thread's 256 serial steps. The same
/// bytes as quantize_act_q8k (ggml's quantize_row_q8_K): the element of
/// largest magnitude is the first one (strict >, NaN never taken), found
/// as (magnitude, index) pairs met in a butterfly, the larger magnitude or
/// at equal ones the smaller index (a total order, so every lane ends with
/// the same pair); the scale and each quant are the replica's expressions;
/// a bsum is the integer sum of two lanes' 8 quants. Every warp of a block
/// makes the same trips and shuffles (a warp past the last block computes
/// on block 0 and writes nothing), and a block whose magnitudes are all 0
/// (or NaN) shuffles as the others do and writes zeros.
__global__ void quantize_q8k_warps_kernel(const float* a, m::act_q8k* out,
                                          std::size_t blocks) {
  constexpr unsigned L = 32, E = 256 / L;
  const unsigned lane = threadIdx.x % L, warp = threadIdx.x / L;
  const std::size_t warps = blockDim.x / L;
  for (std::size_t b0 = blockIdx.x * warps; b0 < blocks;
       b0 += static_cast<std::size_t>(gridDim.x) * warps) {
    const std::size_t b = b0 + warp;
    const bool live = b < blocks;
    const float* blk = a + (live ? b : 0) * 256;
    const float* x = blk + lane * E;
    float amax = 0, at = 256; // the index, as a float (exact below 2^24)
EXO_UNROLL
    for (unsigned e = 0; e < E; ++e) {
      const float ax = fabsf(x[e]);
      if (ax > amax) {
        amax = ax;
        at = static_cast<float>(lane * E + e);
      }
    }
    for (unsigned mask = L / 2; mask > 0; mask /= 2) {
      const float oa = EXO_SHFL_XOR(amax, mask);
      const float oi = EXO_SHFL_XOR(at, mask);
      if (oa > amax || (oa == amax && oi < at)) {
        amax = oa;
        at = oi;
      }
    }
    const bool zero = amax == 0.0f;
    const float max = zero ? 1.0f : blk[static_cast<unsigned>(at)];
    const float iscale = -127.f / max;
    std::int8_t q[E];
    float sum = 0; // at most 8 x 127 here, 16 x 127 after the shuffle: exact
EXO_UNROLL
    for (unsigned e = 0; e < E; ++e) {
      const int v = zero ? 0 : m::nearest_int(m::mul_rn(iscale, x[e]));
      q[e] = static_cast<std::int8_t>(v < 127 ? v : 127);
      sum += static_cast<float>(q[e]);
    }
    sum += EXO_SHFL_XOR(sum, 1u);
    if (live) {
      auto& y = out[b];
EXO_UNROLL
      for (unsigned e = 0; e < E; ++e)
        y.qs[lane * E + e] = q[e];
      if (lane % 2 == 0)
        y.bsums[lane / 2] = static_cast<std::int16_t>(sum);
      if (lane == 0)
        y.d = zero ? 0.0f : 1 / iscale;
    }
  }
}

/// Rows of A that matvec_lanes_kernel takes at once.
constexpr unsigned lanes_rows_at_once = 8;

/// math::combine_lanes over the 8 lanes of a row, by shuffles: lane 0 gets
/// the row's result with the same additions in the same order
/// (hsum_float_8's pairs l and l + 4, then 0 + 2 and 1 + 3, then the two;
/// Q4_K's minimum terms of lanes 0-3 likewise; the other formats with one
/// minimum term add lane 0's). Every lane must call it.
__device__ inline float combine_lanes_warp(std::uint32_t type, float acc,
                                           float extra) {
  const float r = acc + EXO_SHFL_XOR(acc, 4u);
  const float r2 = r + EXO_SHFL_XOR(r, 2u);
  const float sum = r2 + EXO_SHFL_XOR(r2, 1u);
  switch (static_cast<quant::ggml_type>(type)) {
  case quant::ggml_type::q4_1:
  case quant::ggml_type::q5_1:
  case quant::ggml_type::q5_k:
    return sum + extra;
  case quant::ggml_type::q4_k: {
    const float e2 = extra + EXO_SHFL_XOR(extra, 2u);
    return sum + (e2 + EXO_SHFL_XOR(e2, 1u));
  }
  default:
    return sum;
  }
}

/// Q4_0 ... Q8_0 and the K-quants against quantized activations, with the
/// CPU engine's lanes: math::dot_lanes threads per row of W, rows_per_block
/// rows per block (grid-stride), the rows of A in groups of
/// lanes_rows_at_once, block by block (each block of W read and decoded
/// once for the group: decode_lane_weights; every row of A steps through
/// the blocks in order, so it gets the bits it gets alone), the lanes met
/// by shuffles (combine_lanes_warp).
/// act holds m rows of act_row bytes.
__global__ void matvec_lanes_kernel(const std::uint8_t* w, const void* act,
                                    float* c, std::size_t mm, std::size_t nn,
                                    std::size_t nb, std::size_t row_bytes,
                                    std::size_t act_row, std::uint32_t type) {
  constexpr unsigned rows = gpu::lanes_rows_per_block;
  constexpr unsigned R = lanes_rows_at_once;
  const unsigned lane = threadIdx.x % m::dot_lanes;
  const unsigned slot = threadIdx.x / m::dot_lanes;
  const std::size_t block_bytes = m::lane_block_bytes(type);
  const auto* ab = static_cast<const std::uint8_t*>(act);
  for (std::size_t j0 = static_cast<std::size_t>(blockIdx.x) * rows; j0 < nn;
       j0 += static_cast<std::size_t>(gridDim.x) * rows) {
    const std::size_t j = j0 + slot;
    for (std::size_t t0 = 0; t0 < mm; t0 += R) {
      const unsigned group = mm - t0 < R ? static_cast<unsigned>(mm - t0) : R;
      float acc[R], extra[R];
EXO_UNROLL
      for (unsigned u = 0; u < R; ++u)
        acc[u] = extra[u] = 0.0f;
      if (j < nn)
        for (std::size_t i = 0; i < nb; ++i) {
          // The lane's weights of the block, decoded once for the group.
          const std::uint8_t* b = w + j * row_bytes + i * block_bytes;
          m::lane_weights lw;
          m::decode_lane_weights(type, b, lane, lw);
EXO_UNROLL
          for (unsigned u = 0; u < R; ++u)
            if (u < group)
              m::lane_block_step(type, b, lw, ab + (t0 + u) * act_row, i,
                                 lane, acc[u], extra[u]);
        }
EXO_UNROLL
      for (unsigned u = 0; u < R; ++u) {
        if (u >= group)
          continue; // (uniform: the group is the block's)
        const float r = combine_lanes_warp(type, acc[u], extra[u]);
        if (lane == 0 && j < nn)
          c[(t0 + u) * nn + j] = r;
      }
    }
  }
}

/// v[u] of every lane of an aligned group of 8 summed: lane u gets the sum
/// of the 8 lanes' v[u]. A butterfly that halves the values at each step
/// (7 shuffles where one sum after another takes 24); integers, so the
/// order of the sums changes nothing.
__device__ inline int transpose_sum8(const int (&v)[8], unsigned lane) {
  int w[4];
EXO_UNROLL
  for (unsigned k = 0; k < 4; ++k) {
    const bool up = (lane & 4u) != 0;
    w[k] = (up ? v[k + 4] : v[k]) + EXO_SHFL_XOR(up ? v[k] : v[k + 4], 4u);
  }
  int x[2];
EXO_UNROLL
  for (unsigned k = 0; k < 2; ++k) {
    const bool up = (lane & 2u) != 0;
    x[k] = (up ? w[k + 2] : w[k]) + EXO_SHFL_XOR(up ? w[k] : w[k + 2], 2u);
  }
  const bool up = (lane & 1u) != 0;
  return (up ? x[1] : x[0]) + EXO_SHFL_XOR(up ? x[0] : x[1], 1u);
}

/// transpose_sum8 for the first `group` values (uniform across the 8
/// lanes); one value (a lone sequence's step) takes 3 shuffles.
__device__ inline int group_sum8(const int (&v)[8], unsigned lane,
                                 unsigned group) {
  if (group > 1)
    return transpose_sum8(v, lane);
  int s = v[0];
  s += EXO_SHFL_XOR(s, 1u);
  s += EXO_SHFL_XOR(s, 2u);
  return s + EXO_SHFL_XOR(s, 4u);
}

/// Q4_K matrices of a multiple of 8 rows, summed as llama.cpp's repacked
/// kernels sum them (math::q4_k_repacked_step): the rows of A go in
/// groups of 8, one per lane of the row's 8. Each lane unpacks its share
/// of every pair of sub-blocks once for the group (bytes 4l .. 4l+3 of the
/// pair's 32: their low nibbles in the first sub-block, high in the
/// second) and sums it against all 8 rows of A; transpose_sum8 gives lane
/// u row u's whole integer sum, and lane u runs row u's float steps in
/// order, one per super-block, or one per pair of sub-blocks for the
/// first pair_tokens tokens (quant::q4_k_pair_tokens). So every weight is
/// read once for 8 rows of A, and every row of A steps through the blocks
/// in order: the bits it gets alone.
__global__ void matvec_q4_k_repacked_kernel(const std::uint8_t* w,
                                            const void* act, float* c,
                                            std::size_t mm, std::size_t nn,
                                            std::size_t nb,
                                            std::size_t act_row,
                                            std::size_t pair_tokens) {
  constexpr unsigned rows = gpu::lanes_rows_per_block;
  constexpr unsigned R = m::dot_lanes; // rows of A at once: one per lane
  static_assert(R == 8, "transpose_sum8 meets 8 lanes");
  constexpr std::size_t bb = 144; // bytes of a Q4_K block
  const unsigned lane = threadIdx.x % m::dot_lanes;
  const auto* ab = static_cast<const std::uint8_t*>(act);
  for (std::size_t j0 = static_cast<std::size_t>(blockIdx.x) * rows; j0 < nn;
       j0 += static_cast<std::size_t>(gridDim.x) * rows) {
    const std::size_t j = j0 + threadIdx.x / m::dot_lanes;
    // Lanes past the last row read it and write nothing: every lane takes
    // part in the shuffles.
    const bool live = j < nn;
    const std::uint8_t* wr = w + (live ? j : nn - 1) * nb * bb;
    for (std::size_t t0 = 0; t0 < mm; t0 += R) {
      const unsigned group = mm - t0 < R ? static_cast<unsigned>(mm - t0) : R;
      // This lane's row of A (the group's last where the group is short:
      // its steps run and are dropped).
      const std::size_t t = t0 + (lane < group ? lane : group - 1);
      const auto* y = reinterpret_cast<const m::act_q8k*>(ab + t * act_row);
      // Whether any of the group's rows steps by pair (uniform: the
      // group is the block's); this lane's row does where t < pair_tokens.
      const bool pairs = t0 < pair_tokens;
      float acc = 0.0f, accm = 0.0f;
      for (std::size_t i = 0; i < nb; ++i) {
        const std::uint8_t* b = wr + i * bb;
        const std::int16_t* bs = y[i].bsums;
        int whole[R];
EXO_UNROLL
        for (unsigned u = 0; u < R; ++u)
          whole[u] = 0;
        int isum = 0, imin = 0;
        for (unsigned p = 0; p < 4; ++p) {
          int sc0, mn0, sc1, mn1;
          m::scale_min_k4(2 * p, b + 4, sc0, mn0);
          m::scale_min_k4(2 * p + 1, b + 4, sc1, mn1);
          // q4_k_imin_pair's sum, for this lane's row.
          const int pmin = mn0 * (bs[4 * p] + bs[4 * p + 1])
                           + mn1 * (bs[4 * p + 2] + bs[4 * p + 3]);
          std::uint8_t q[4];
          memcpy(q, b + 16 + 32 * p + 4 * lane, 4);
          int part[R];
EXO_UNROLL
          for (unsigned u = 0; u < R; ++u) {
            part[u] = 0;
            if (u >= group)
              continue; // (uniform)
            const std::int8_t* a =
              reinterpret_cast<const m::act_q8k*>(ab + (t0 + u) * act_row)[i]
                .qs
              + 64 * p + 4 * lane;
            int lo = 0, hi = 0;
EXO_UNROLL
            for (unsigned e = 0; e < 4; ++e) {
              lo += (q[e] & 0xF) * a[e];
              hi += (q[e] >> 4) * a[32 + e];
            }
            part[u] = sc0 * lo + sc1 * hi;
          }
          if (pairs) {
            const int s = group_sum8(part, lane, group);
            if (t < pair_tokens)
              m::q4_k_repacked_step(b, y[i], s, pmin, acc, accm);
            isum += s;
          } else {
EXO_UNROLL
            for (unsigned u = 0; u < R; ++u)
              whole[u] += part[u];
          }
          imin += pmin;
        }
        if (!pairs)
          isum = group_sum8(whole, lane, group);
        if (t >= pair_tokens)
          m::q4_k_repacked_step(b, y[i], isum, imin, acc, accm);
      }
      if (live && lane < group)
        c[t * nn + j] = acc - accm;
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
  EXO_LAUNCH(binary_kernel, g.grid, g.block, stream)(code, a, b, out,
                                                           count);
  return last_error();
}

int launch_silu_mul(const float* gate, const float* up, float* out,
                    std::size_t count, void* stream) {
  auto g = gpu::elementwise_launch(count);
  if (g.grid == 0)
    return 0;
  EXO_LAUNCH(silu_mul_kernel, g.grid, g.block, stream)(gate, up, out,
                                                             count);
  return last_error();
}

int launch_rmsnorm(const float* x, const float* weight, float* out,
                   std::size_t rows, std::size_t cols, float eps,
                   void* stream) {
  auto g = gpu::row_launch(rows, cols);
  if (g.grid == 0)
    return 0;
  EXO_LAUNCH(rmsnorm_kernel, g.grid, g.block, stream)(x, weight, out,
                                                            rows, cols, eps);
  return last_error();
}

int launch_softmax_rows(const float* x, float* out, std::size_t rows,
                        std::size_t cols, void* stream) {
  auto g = gpu::row_launch(rows, cols);
  if (g.grid == 0)
    return 0;
  EXO_LAUNCH(softmax_rows_kernel, g.grid, g.block, stream)(x, out, rows,
                                                                 cols);
  return last_error();
}

int launch_rope(float* x, std::size_t tokens, std::size_t heads,
                std::size_t head_dim, std::size_t pos0, float base,
                void* stream) {
  auto g = gpu::elementwise_launch(tokens * heads * (head_dim / 2));
  if (g.grid == 0)
    return 0;
  EXO_LAUNCH(rope_kernel, g.grid, g.block, stream)(x, tokens, heads,
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
  EXO_LAUNCH(matmul_tiled_kernel, grid, block, stream)(
    a, b, c, d.m, d.n, d.k, d.transpose_b, g.tiles_x, g.tiles_y, g.tiles_k);
  return last_error();
}

int launch_rope_rows(float* x, const std::int32_t* positions,
                     const float* freq_factors, const rope_dims& d,
                     void* stream) {
  auto g = gpu::elementwise_launch(d.rows * d.heads * (d.n_rot / 2));
  if (g.grid == 0)
    return 0;
  EXO_LAUNCH(rope_rows_kernel, g.grid, g.block, stream)(
    x, positions, freq_factors, d.rows, d.heads, d.head_dim, d.n_rot,
    d.freq_base, d.neox);
  return last_error();
}

int launch_rope_cached(float* x, const float* cs, const rope_dims& d,
                       void* stream) {
  auto g = gpu::elementwise_launch(d.rows * d.heads * (d.n_rot / 2));
  if (g.grid == 0)
    return 0;
  EXO_LAUNCH(rope_cached_kernel, g.grid, g.block, stream)(
    x, cs, d.rows, d.heads, d.head_dim, d.n_rot, d.neox);
  return last_error();
}

/// A prompt's attention (64 rows and more over an f32 or f16 cache: ggml's
/// tiled path on the host).
static int launch_attention_tiles(const float* q, const void* k, const void* v,
                           float* out, const attention_dims& d,
                           gpu::launch_1d g, void* stream) {
  if (d.kv == kv_type::f16)
    EXO_LAUNCH(attention_tiled_kernel, g.grid, g.block, stream)(
      q, static_cast<const std::uint16_t*>(k),
      static_cast<const std::uint16_t*>(v), out, d);
  else
    EXO_LAUNCH(attention_tiled_kernel, g.grid, g.block, stream)(
      q, static_cast<const float*>(k), static_cast<const float*>(v), out, d);
  return last_error();
}

int launch_attention(const float* q, const void* k, const void* v,
                     float* out, const attention_dims& d, void* stream) {
  auto g = gpu::attention_launch(d);
  if (g.grid == 0)
    return 0;
  // A q8_0 cache always takes ggml's one_chunk path on the host.
  if (d.kv == kv_type::q8_0)
    EXO_LAUNCH(attention_exact_kernel, g.grid, g.block, stream)(
      q, m::q8_kv_ptr{static_cast<const std::uint8_t*>(k), 0},
      m::q8_kv_ptr{static_cast<const std::uint8_t*>(v), 0}, out, d);
  else if (!m::attention_one_chunk(d.n_tokens, d.head_dim,
                                   d.row_tables != nullptr))
    return launch_attention_tiles(q, k, v, out, d, g, stream);
  else if (d.kv == kv_type::f16)
    EXO_LAUNCH(attention_exact_kernel, g.grid, g.block, stream)(
      q, static_cast<const std::uint16_t*>(k),
      static_cast<const std::uint16_t*>(v), out, d);
  else
    EXO_LAUNCH(attention_exact_kernel, g.grid, g.block, stream)(
      q, static_cast<const float*>(k), static_cast<const float*>(v), out, d);
  return last_error();
}

/// One thread per 34-byte block (bytes, so any block offset).
__global__ void to_q8_0_kernel(const float* a, std::uint8_t* out,
                               std::size_t blocks) {
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t b = static_cast<std::size_t>(blockIdx.x) * blockDim.x
                       + threadIdx.x;
       b < blocks; b += stride)
    m::quantize_kv_q8_0(a + 32 * b, out + 34 * b);
}

/// store_kv_rows: one thread per unit (a value; a 32-value block of a
/// q8_0 cache) of a row of a, stored where its row's position lies in its
/// block table (the position clamped into the table, the block to
/// d.max_block by m::kv_row_at: never a write outside the cache).
__global__ void store_kv_rows_kernel(const float* a,
                                     const std::int32_t* tables,
                                     std::uint8_t* kv, kv_rows_dims d) {
  const std::size_t per = d.kv == kv_type::q8_0 ? 32 : 1;
  const std::size_t units = d.width / per;
  const std::size_t last = d.table_len * d.block_positions - 1;
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x
                       + threadIdx.x;
       i < d.rows * units; i += stride) {
    const std::size_t r = i / units, u = i % units;
    const std::int32_t* rt = tables + r * (1 + d.table_len);
    const std::size_t pos = m::row_position(rt[0], last);
    const std::size_t at =
      m::kv_row_at(pos, d.kv_stride, rt + 1, d.block_positions,
                   d.block_stride, d.max_block)
      + u * per; // values from kv
    const float* x = a + r * d.width + u * per;
    if (d.kv == kv_type::q8_0)
      m::quantize_kv_q8_0(x, kv + at / 32 * 34);
    else if (d.kv == kv_type::f16)
      reinterpret_cast<std::uint16_t*>(kv)[at] = m::float_to_half(*x);
    else
      reinterpret_cast<float*>(kv)[at] = *x;
  }
}

/// One thread per run of n values: copied to out, rotated there (each
/// thread reads only its own run, so out may be a).
__global__ void hadamard_kernel(const float* a, float* out, std::size_t runs,
                                std::size_t n, float scale) {
  std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t r = static_cast<std::size_t>(blockIdx.x) * blockDim.x
                       + threadIdx.x;
       r < runs; r += stride) {
    if (a != out)
      for (std::size_t j = 0; j < n; ++j)
        out[r * n + j] = a[r * n + j];
    m::hadamard_run(out + r * n, n, scale);
  }
}

int launch_to_q8_0(const float* a, std::uint8_t* out, std::size_t count,
                   void* stream) {
  auto g = gpu::elementwise_launch(count / 32);
  if (g.grid == 0)
    return 0;
  EXO_LAUNCH(to_q8_0_kernel, g.grid, g.block, stream)(a, out,
                                                            count / 32);
  return last_error();
}

int launch_hadamard(const float* a, float* out, std::size_t count,
                    std::size_t n, void* stream) {
  auto g = gpu::elementwise_launch(count / n);
  if (g.grid == 0)
    return 0;
  EXO_LAUNCH(hadamard_kernel, g.grid, g.block, stream)(
    a, out, count / n, n, 1.0f / sqrtf(static_cast<float>(n)));
  return last_error();
}

int launch_to_f16(const float* a, std::uint16_t* out, std::size_t count,
                  void* stream) {
  auto g = gpu::elementwise_launch(count);
  if (g.grid == 0)
    return 0;
  EXO_LAUNCH(to_f16_kernel, g.grid, g.block, stream)(a, out, count);
  return last_error();
}

int launch_store_kv_rows(const float* a, const std::int32_t* tables,
                         void* kv, const kv_rows_dims& dims, void* stream) {
  const std::size_t per = dims.kv == kv_type::q8_0 ? 32 : 1;
  auto g = gpu::elementwise_launch(dims.rows * (dims.width / per));
  if (g.grid == 0)
    return 0;
  EXO_LAUNCH(store_kv_rows_kernel, g.grid, g.block, stream)(
    a, tables, static_cast<std::uint8_t*>(kv), dims);
  return last_error();
}

int launch_dequant_rows(const void* w, weight_type type, float* out,
                        std::size_t rows, std::size_t k, void* stream) {
  auto g = gpu::elementwise_launch(rows * k);
  if (g.grid == 0 || type == weight_type::f32)
    return 0;
  const std::size_t be = weight_block_elements(type);
  EXO_LAUNCH(dequant_rows_kernel, g.grid, g.block, stream)(
    static_cast<const std::uint8_t*>(w), out, rows, k,
    *weight_row_bytes(type, k), be, *weight_row_bytes(type, be),
    ggml_type_id(type));
  return last_error();
}

int launch_matmul_weights(const float* a, const void* w, weight_type type,
                          float* c, const matmul_dims& d, void* scratch,
                          std::size_t q4_k_pair_tokens, void* stream,
                          bool act_ready) {
  const auto format = m::act_format_of(ggml_type_id(type));
  if (format != m::act_format::none) {
    auto g = gpu::lanes_launch(d);
    if (g.grid == 0)
      return 0;
    const std::size_t be = m::act_block_elements(format);
    const std::size_t blocks = d.m * (d.k / be);
    if (act_ready) {
      // scratch holds A in this format: an earlier product's conversion.
    } else if (format == m::act_format::q8_k) {
      auto q = gpu::warps_launch(blocks);
      EXO_LAUNCH(quantize_q8k_warps_kernel, q.grid, q.block, stream)(
        a, static_cast<m::act_q8k*>(scratch), blocks);
    } else {
      auto q = gpu::elementwise_launch(blocks, 64);
      EXO_LAUNCH(quantize_act_kernel, q.grid, q.block, stream)(
        a, scratch, blocks, static_cast<int>(format));
    }
    const std::size_t wb = weight_block_elements(type);
    if (type == weight_type::q4_k && m::q4_k_repacked(d.n)) {
      EXO_LAUNCH(matvec_q4_k_repacked_kernel, g.grid, g.block, stream)(
        static_cast<const std::uint8_t*>(w), scratch, c, d.m, d.n, d.k / wb,
        d.k / be * m::act_block_bytes(format), q4_k_pair_tokens);
      return last_error();
    }
    EXO_LAUNCH(matvec_lanes_kernel, g.grid, g.block, stream)(
      static_cast<const std::uint8_t*>(w), scratch, c, d.m, d.n, d.k / wb,
      *weight_row_bytes(type, d.k), d.k / be * m::act_block_bytes(format),
      ggml_type_id(type));
    return last_error();
  }
  auto g = gpu::weights_launch(type, d);
  if (g.grid == 0)
    return 0;
  // F16 and BF16 batches: the activations rounded once into scratch.
  const bool round_here = d.m == 1;
  if (type != weight_type::f32 && !round_here) {
    if (!act_ready) {
      auto r = gpu::elementwise_launch(d.m * d.k);
      EXO_LAUNCH(round_act_kernel, r.grid, r.block, stream)(
        a, static_cast<float*>(scratch), d.m * d.k, type != weight_type::f16);
    }
    a = static_cast<const float*>(scratch);
  }
  if (type == weight_type::f16 || type == weight_type::f32
      || type == weight_type::bf16) {
    // The host's bits, in the order llama.cpp's CPU backend takes.
    auto gv = gpu::warp_rows_launch(d);
    const bool tiny = m::tinyblas_takes(d.m, d.n, d.k, d.rows_apart);
    constexpr int f16 = vecdot_f16, rnd = vecdot_round_act, ti = vecdot_tiny;
    if (type == weight_type::bf16 && round_here) // ggml_vec_dot_bf16
      EXO_LAUNCH(matvec_vecdot_kernel<vecdot_bf16 | rnd>, gv.grid, gv.block,
                 stream)(a, w, c, d.m, d.n, d.k);
    else if (type == weight_type::bf16)
      EXO_LAUNCH(matvec_vecdot_kernel<vecdot_bf16>, gv.grid, gv.block,
                 stream)(a, w, c, d.m, d.n, d.k);
    else if (type == weight_type::f32 && tiny)
      EXO_LAUNCH(matvec_vecdot_kernel<ti>, gv.grid, gv.block, stream)(
        a, w, c, d.m, d.n, d.k);
    else if (type == weight_type::f32)
      EXO_LAUNCH(matvec_vecdot_kernel<0>, gv.grid, gv.block, stream)(
        a, w, c, d.m, d.n, d.k);
    else if (round_here) // one row of A: never tinyBLAS
      EXO_LAUNCH(matvec_vecdot_kernel<f16 | rnd>, gv.grid, gv.block, stream)(
        a, w, c, d.m, d.n, d.k);
    else if (tiny)
      EXO_LAUNCH(matvec_vecdot_kernel<f16 | ti>, gv.grid, gv.block, stream)(
        a, w, c, d.m, d.n, d.k);
    else
      EXO_LAUNCH(matvec_vecdot_kernel<f16>, gv.grid, gv.block, stream)(
        a, w, c, d.m, d.n, d.k);
    return last_error();
  }
  return 0; // (every format is one of the above)
}

} // namespace exo::backend::EXO_GPU_KERNEL_NS
