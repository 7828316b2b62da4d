#pragma once

/// Host entry points of the shared GPU kernels (kernels.cuh), callable from
/// host code compiled by g++. The including file defines EXO_GPU_KERNEL_NS
/// (cuda_kernels or hip_kernels) so that both backends can live in one
/// binary. Streams are passed as void* (cudaStream_t / hipStream_t).
/// Every function returns 0 or the runtime's error code of the launch;
/// a call with nothing to do launches nothing and returns 0.

#include "backends/backend.hpp"

#include <cstddef>
#include <cstdint>

#ifndef EXO_GPU_KERNEL_NS
#  error "define EXO_GPU_KERNEL_NS before including kernel_api.hpp"
#endif

namespace exo::backend::EXO_GPU_KERNEL_NS {

/// out[i] = a[i] (op) b[i].
int launch_binary(binary_op op, const float* a, const float* b, float* out,
                  std::size_t count, void* stream);

/// out[i] = silu(gate[i]) * up[i].
int launch_silu_mul(const float* gate, const float* up, float* out,
                    std::size_t count, void* stream);

/// out[r][i] = x[r][i] / rms(x[r]) * weight[i].
int launch_rmsnorm(const float* x, const float* weight, float* out,
                   std::size_t rows, std::size_t cols, float eps,
                   void* stream);

/// Softmax of each row of x[rows][cols].
int launch_softmax_rows(const float* x, float* out, std::size_t rows,
                        std::size_t cols, void* stream);

/// Rotary position embedding of x[tokens][heads][head_dim], in place.
int launch_rope(float* x, std::size_t tokens, std::size_t heads,
                std::size_t head_dim, std::size_t pos0, float base,
                void* stream);

/// C = A * op(B), f32 row-major, shared-memory tiles (no BLAS needed).
int launch_matmul_tiled(const float* a, const float* b, float* c,
                        const matmul_dims& dims, void* stream);

/// Rope of x[rows][heads][head_dim] in place (see rope_dims): row r at
/// positions[r]; freq_factors (n_rot / 2) may be null.
int launch_rope_rows(float* x, const std::int32_t* positions,
                     const float* freq_factors, const rope_dims& dims,
                     void* stream);

/// Rope of x[rows][heads][head_dim] in place by angles computed ahead
/// (device::rope_cached): cs holds rows x n_rot f32, each pair's cosine
/// and sine (host::rope_cache); dims.freq_base is unused.
int launch_rope_cached(float* x, const float* cs, const rope_dims& dims,
                       void* stream);

/// Causal grouped-query attention (see attention_dims); needs head_dim <=
/// 2 * gpu::math::attention_threads (callers fall back beyond).
/// k and v are floats, IEEE halves or Q8_0 blocks as dims.kv says. Where
/// the host takes ggml's one_chunk path (over f32 and f16 caches fewer
/// than 64 tokens, and every row of a decode batch:
/// math::attention_one_chunk; over q8_0 caches always) the result has
/// host::attention's bits (attention_exact_kernel); a prompt's tiles are
/// within F32 rounding of exact.
int launch_attention(const float* q, const void* k, const void* v,
                     float* out, const attention_dims& dims, void* stream);

/// out = a (count f32, a multiple of 32) as Q8_0 blocks (to_q8_0).
int launch_to_q8_0(const float* a, std::uint8_t* out, std::size_t count,
                   void* stream);
/// Every run of n values of a rotated into out (hadamard; out may be a).
int launch_hadamard(const float* a, float* out, std::size_t count,
                    std::size_t n, void* stream);
/// out[i] = the half nearest a[i] (ties to even), as IEEE half bits.
int launch_to_f16(const float* a, std::uint16_t* out, std::size_t count,
                  void* stream);
/// A decode batch's new K or V rows into their paged cache slots (see
/// kv_rows_dims; dims.max_block set: positions and blocks are clamped).
int launch_store_kv_rows(const float* a, const std::int32_t* tables,
                         void* kv, const kv_rows_dims& dims, void* stream);

/// out[r * k + i] = element i of row r of W ([rows x k] in ggml format
/// `type` other than f32, at an even address), decoded to float
/// (math::dequant_element).
int launch_dequant_rows(const void* w, weight_type type, float* out,
                        std::size_t rows, std::size_t k, void* stream);

/// C[m x n] = A[m x k] * W^T with W [n x k] in any ggml format at an even
/// address; activations rounded / quantized as llama.cpp does, once, into
/// `scratch` (at least gpu::act_scratch_bytes(type, dims) bytes of device
/// memory, 4-byte aligned; unused for F32 weights). Q4_0 ... Q8_0 and the
/// K-quants then give the CPU engine's bits (kernel_quant.hpp). act_ready:
/// scratch already holds A in gpu::scratch_act_form(type, dims), an earlier
/// product's conversion of the same A, so none is launched.
int launch_matmul_weights(const float* a, const void* w, weight_type type,
                          float* c, const matmul_dims& dims, void* scratch,
                          std::size_t q4_k_pair_tokens, void* stream,
                          bool act_ready = false);

/// The launches gpu_backend_impl.hpp calls, as static members: a platform
/// type P derives from this (its stream, a pointer, converts to void*), so
/// that one list serves CUDA, HIP and the emulator.
struct launches {
  static constexpr auto launch_binary = &EXO_GPU_KERNEL_NS::launch_binary;
  static constexpr auto launch_matmul_tiled = &EXO_GPU_KERNEL_NS::launch_matmul_tiled;
  static constexpr auto launch_rmsnorm = &EXO_GPU_KERNEL_NS::launch_rmsnorm;
  static constexpr auto launch_silu_mul = &EXO_GPU_KERNEL_NS::launch_silu_mul;
  static constexpr auto launch_rope_rows = &EXO_GPU_KERNEL_NS::launch_rope_rows;
  static constexpr auto launch_rope_cached = &EXO_GPU_KERNEL_NS::launch_rope_cached;
  static constexpr auto launch_attention = &EXO_GPU_KERNEL_NS::launch_attention;
  static constexpr auto launch_to_f16 = &EXO_GPU_KERNEL_NS::launch_to_f16;
  static constexpr auto launch_to_q8_0 = &EXO_GPU_KERNEL_NS::launch_to_q8_0;
  static constexpr auto launch_hadamard = &EXO_GPU_KERNEL_NS::launch_hadamard;
  static constexpr auto launch_store_kv_rows = &EXO_GPU_KERNEL_NS::launch_store_kv_rows;
  static constexpr auto launch_dequant_rows = &EXO_GPU_KERNEL_NS::launch_dequant_rows;
  static constexpr auto launch_matmul_weights = &EXO_GPU_KERNEL_NS::launch_matmul_weights;
};

} // namespace exo::backend::EXO_GPU_KERNEL_NS
