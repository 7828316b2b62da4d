#include "core/model/ops.hpp"

#include <algorithm>

#include <cblas.h>

#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_repack.hpp"

// The arithmetic lives in backends/host_kernels.cpp, shared with the cpu and
// simulated devices: the engine and the device operations are one
// implementation.

namespace exo::model::ops {

namespace {

namespace host = exo::backend::host;

int n_threads_ = 1;
int n_llama_threads_ = 1;

/// The host kernel's weight type for F32, F16 and Q8_0 (their bit-exact
/// llama.cpp paths, batches included); false for every other format.
bool host_weight_type(tensor_type t, backend::weight_type& out) {
  switch (t) {
    case tensor_type::f32: out = backend::weight_type::f32; return true;
    case tensor_type::f16: out = backend::weight_type::f16; return true;
    case tensor_type::q8_0: out = backend::weight_type::q8_0; return true;
    default: return false;
  }
}

} // namespace

void set_threads(int n) {
  n_threads_ = std::max(1, n);
  openblas_set_num_threads(n_threads_);
}

int threads() {
  return n_threads_;
}

void set_llama_threads(int n) {
  n_llama_threads_ = std::max(1, n);
}

int llama_threads() {
  return n_llama_threads_;
}

void matmul(const matrix_view& w, const float* x, size_t n_tokens, float* y) {
  if (n_tokens == 0 || w.rows == 0)
    return;
  backend::weight_type wt{};
  if (host_weight_type(w.type, wt)) {
    backend::matmul_dims d{n_tokens, w.rows, w.cols, true};
    host::matmul_weights(x, w.data, wt, y, d, n_threads_);
    return;
  }
  // Every other ggml format: activations rounded to the format's vec_dot
  // type (Q8_K for the K-quants, Q8_0 or Q8_1 for the 32-element formats,
  // BF16 for BF16), then llama.cpp's integer dot products. Q4_K matrices
  // that llama.cpp repacks on x86 (rows a multiple of 8) sum their blocks
  // in the repacked kernels' order.
  auto r =
    w.type == tensor_type::q4_k && backend::quant::q4_k_repacked(w.rows)
      ? backend::quant::matmul_q4_k_repacked(w.data, w.rows, w.cols, x,
                                             n_tokens, y, n_threads_)
      : backend::quant::matmul_quant(
          w.data, static_cast<backend::quant::ggml_type>(w.type), w.rows,
          w.cols, x, n_tokens, y, n_threads_);
  if (!r)
    throw gguf_error(std::string("matrix of type ") + to_string(w.type) + " ["
                     + std::to_string(w.cols) + " x " + std::to_string(w.rows)
                     + "]: " + r.err().message);
}

void rmsnorm(const float* x, const float* w, float* y, size_t n, float eps) {
  host::rms_norm(x, w, y, 1, n, eps);
}

void rope(float* x, size_t n_heads, size_t head_dim, size_t n_rot, int64_t pos,
          float freq_base, const float* freq_factors) {
  host::rope_row(x, n_heads, head_dim, n_rot, pos, freq_base, freq_factors);
}

void rope_neox(float* x, size_t n_heads, size_t head_dim, size_t n_rot,
               int64_t pos, float freq_base, const float* freq_factors) {
  host::rope_row_neox(x, n_heads, head_dim, n_rot, pos, freq_base,
                      freq_factors);
}

void softmax(float* x, size_t n) {
  host::softmax(x, n);
}

void silu_gate(const float* gate, const float* up, float* out, size_t n) {
  host::silu_mul(gate, up, out, n);
}

void add(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    y[i] += x[i];
}

void add_bias(float* y, const float* b, size_t rows, size_t n) {
  for (size_t r = 0; r < rows; ++r)
    add(y + r * n, b, n);
}

void attention(const float* q, const float* k, const float* v,
               size_t n_tokens, size_t pos0, size_t n_head, size_t n_head_kv,
               size_t head_dim, size_t kv_stride, float scale, float* out) {
  backend::attention_dims d{n_tokens, pos0,      n_head, n_head_kv,
                            head_dim, kv_stride, scale};
  host::attention(q, k, v, out, d, n_threads_, n_llama_threads_);
}

} // namespace exo::model::ops
