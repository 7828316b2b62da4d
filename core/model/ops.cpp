#include "core/model/ops.hpp"

#include <algorithm>

#include "backends/host_kernels.hpp"
#include "backends/host_parallel.hpp"

// The arithmetic lives in backends/host_kernels.cpp, shared with the cpu and
// simulated devices: the engine and the device operations are one
// implementation.

namespace exo::model::ops {

namespace {

namespace host = exo::backend::host;

int n_threads_ = 1;
int n_llama_threads_ = 1;

/// The host kernels' weight type of a tensor type (every weight format has
/// one: the same ggml ids).
backend::weight_type weight_type_of(tensor_type t) {
  auto w = backend::weight_type_of_ggml(static_cast<std::uint32_t>(t));
  if (!w)
    throw gguf_error(std::string("tensor type ") + to_string(t)
                     + " is not a weight format");
  return *w;
}

} // namespace

void set_threads(int n) {
  n_threads_ = std::max(1, n);
}

int bind_threads() {
  return host::bind_threads(n_threads_);
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
  // One implementation for the engine and the host devices: F32, F16 and
  // Q8_0 in their bit-exact llama.cpp paths, every other ggml format with
  // llama.cpp's integer dot products (host_kernels.hpp).
  const backend::weight_type wt = weight_type_of(w.type);
  backend::matmul_dims d{n_tokens, w.rows, w.cols, true};
  auto sz = host::check_matmul_weights(wt, d);
  if (!sz)
    throw gguf_error(std::string("matrix of type ") + to_string(w.type) + " ["
                     + std::to_string(w.cols) + " x " + std::to_string(w.rows)
                     + "]: " + sz.err().message);
  host::matmul_weights(x, w.data, wt, y, d, n_threads_);
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

void for_rows(size_t rows, size_t width,
              const std::function<void(size_t, size_t)>& body) {
  host::for_each_range(rows, n_threads_, 1,
                       host::split_elements / (width ? width : 1), body);
}

void silu_gate(const float* gate, const float* up, float* out, size_t n) {
  // Whole groups of 16 per range: silu_mul's groups start where ggml's do.
  host::for_each_range(n, n_threads_, 16, host::split_elements,
                       [&](size_t i, size_t e) {
                         host::silu_mul(gate + i, up + i, out + i, e - i);
                       });
}

void add(float* y, const float* x, size_t n) {
  host::for_each_range(n, n_threads_, 16, host::split_elements,
                       [&](size_t b, size_t e) {
                         for (size_t i = b; i < e; ++i)
                           y[i] += x[i];
                       });
}

void add_bias(float* y, const float* b, size_t rows, size_t n) {
  for (size_t r = 0; r < rows; ++r)
    add(y + r * n, b, n);
}

namespace {

template <class KV>
void attention_over(const float* q, const KV* k, const KV* v, size_t n_tokens,
                    size_t pos0, size_t n_head, size_t n_head_kv,
                    size_t head_dim, size_t kv_stride, float scale,
                    backend::kv_type kv, float* out) {
  backend::attention_dims d{n_tokens,  pos0,  n_head, n_head_kv, head_dim,
                            kv_stride, scale, kv};
  host::attention(q, k, v, out, d, n_threads_, n_llama_threads_);
}

} // namespace

void attention(const float* q, const float* k, const float* v,
               size_t n_tokens, size_t pos0, size_t n_head, size_t n_head_kv,
               size_t head_dim, size_t kv_stride, float scale, float* out) {
  attention_over(q, k, v, n_tokens, pos0, n_head, n_head_kv, head_dim,
                 kv_stride, scale, backend::kv_type::f32, out);
}

void attention(const float* q, const uint16_t* k, const uint16_t* v,
               size_t n_tokens, size_t pos0, size_t n_head, size_t n_head_kv,
               size_t head_dim, size_t kv_stride, float scale, float* out) {
  attention_over(q, k, v, n_tokens, pos0, n_head, n_head_kv, head_dim,
                 kv_stride, scale, backend::kv_type::f16, out);
}

void to_f16(const float* x, uint16_t* y, size_t n) {
  host::to_f16(x, y, n);
}

} // namespace exo::model::ops
