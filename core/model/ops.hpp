#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/gguf/gguf.hpp"

/// The numeric building blocks of the Llama forward pass, with plain pointer
/// and size signatures so that device backends can reuse or replace them.
/// Every function follows llama.cpp's CPU arithmetic for the same operation.
namespace exo::model::ops {

/// A weight matrix stored in GGUF layout: `rows` rows (outputs) of `cols`
/// contiguous elements (inputs) each, in element type `type`.
struct matrix_view {
  const uint8_t* data = nullptr;
  tensor_type type = tensor_type::f32;
  size_t cols = 0;
  size_t rows = 0;
};

/// Sets the threads used by the matrix kernels.
void set_threads(int n);

/// Returns the thread count last set with set_threads (1 by default).
int threads();

/// Binds the kernels' threads (set_threads) each to its own CPU, the
/// caller's thread included (backend::host::bind_threads): for a process
/// that runs the engine alone (exo-model). Returns how many were bound.
int bind_threads();

/// The thread count of the llama.cpp whose attention bits to give (1 by
/// default; host::attention): decode steps from position 256 on merge
/// per-thread partial sums in llama.cpp when it runs on more than one
/// thread, and then differ from one thread's in the last bits.
void set_llama_threads(int n);
int llama_threads();

/// y[t*rows + r] = sum_c W[r, c] * x[t*cols + c] for t < n_tokens.
/// F16 weights see activations rounded to half, Q8_0 weights see activations
/// quantised to Q8_0 (as in llama.cpp; sgemm for F32 batches). Every other
/// format (Q4_0 ... Q6_K, BF16) goes the host devices' way (host_kernels):
/// activations rounded to Q8_K for the K-quants, Q8_0/Q8_1 for the others,
/// then ggml's dot products. Throws gguf_error for a row length that is not
/// a whole number of blocks.
void matmul(const matrix_view& w, const float* x, size_t n_tokens, float* y);

/// y = x / sqrt(mean(x^2) + eps) * w over one row of n elements.
void rmsnorm(const float* x, const float* w, float* y, size_t n, float eps);

/// Rotary embedding, llama.cpp's "normal" mode: rotates adjacent pairs
/// (x[2i], x[2i+1]) of each of `n_heads` heads by theta = pos *
/// base^(-2i/n_rot) (divided by freq_factors[i] when given); elements from
/// n_rot on are left as they are.
void rope(float* x, size_t n_heads, size_t head_dim, size_t n_rot, int64_t pos,
          float freq_base, const float* freq_factors);

/// Rotary embedding, llama.cpp's NEOX mode (qwen2, qwen3): rotates the pairs
/// (x[i], x[i + n_rot/2]), i < n_rot/2, of each head by the same theta_i as
/// rope; elements from n_rot on are left as they are.
void rope_neox(float* x, size_t n_heads, size_t head_dim, size_t n_rot,
               int64_t pos, float freq_base, const float* freq_factors);

/// In-place softmax of n elements (max-subtracted, double-precision sum).
void softmax(float* x, size_t n);

/// out[i] = silu(gate[i]) * up[i].
void silu_gate(const float* gate, const float* up, float* out, size_t n);

/// y[i] += x[i].
void add(float* y, const float* x, size_t n);

/// y[r*n + i] += b[i] for each of `rows` rows (a bias, as ggml_add
/// broadcasts it).
void add_bias(float* y, const float* b, size_t rows, size_t n);

/// Causal grouped-query attention of n_tokens query rows at positions
/// pos0 .. pos0 + n_tokens - 1 over a KV cache (backend::attention_dims),
/// as llama.cpp's CPU flash attention over an F16 cache computes it. q, out:
/// n_tokens rows of n_head*head_dim; k and v: cache rows 0 .. pos0 +
/// n_tokens - 1 of kv_stride floats (n_head_kv heads of head_dim each).
/// The whole batch goes in one call: llama.cpp's arithmetic depends on the
/// batch size (from 64 tokens on it tiles). Rows split over the threads.
void attention(const float* q, const float* k, const float* v,
               size_t n_tokens, size_t pos0, size_t n_head, size_t n_head_kv,
               size_t head_dim, size_t kv_stride, float scale, float* out);
/// The same over a cache stored as IEEE half (the same bits: the F32 form
/// rounds K and V to half as it reads them).
void attention(const float* q, const uint16_t* k, const uint16_t* v,
               size_t n_tokens, size_t pos0, size_t n_head, size_t n_head_kv,
               size_t head_dim, size_t kv_stride, float scale, float* out);

/// y[i] = x[i] rounded to the nearest half (ties to even), as bits.
void to_f16(const float* x, uint16_t* y, size_t n);

/// body(r0, r1) over the rows [0, rows) of `width` floats each, split over
/// the engine's threads (set_threads) when there are enough of them (a
/// prompt's), on the calling thread otherwise (a decode step's). For row
/// operations that compute each row as they would alone.
void for_rows(size_t rows, size_t width,
              const std::function<void(size_t, size_t)>& body);

} // namespace exo::model::ops
