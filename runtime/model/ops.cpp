#include "runtime/model/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <cblas.h>
#include <immintrin.h>

#include "runtime/model/quant.hpp"

namespace exo::model::ops {

namespace {

int n_threads_ = 1;

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2")
                          && __builtin_cpu_supports("fma")
                          && __builtin_cpu_supports("f16c");
  return yes;
}

// -- dot kernels --------------------------------------------------------------

float dot_f32_scalar(const float* w, const float* x, size_t n) {
  float s = 0.0f;
  for (size_t i = 0; i < n; ++i)
    s += w[i] * x[i];
  return s;
}

__attribute__((target("avx2,fma"))) float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma"))) float dot_f32_avx2(const float* w,
                                                       const float* x,
                                                       size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8),
                         _mm256_loadu_ps(x + i + 8), a1);
  }
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i)
    s += w[i] * x[i];
  return s;
}

float dot_f16_scalar(const uint16_t* w, const float* x, size_t n) {
  float s = 0.0f;
  for (size_t i = 0; i < n; ++i)
    s += f16_to_f32(w[i]) * x[i];
  return s;
}

__attribute__((target("avx2,fma,f16c"))) float
dot_f16_avx2(const uint16_t* w, const float* x, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 w0 = _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
    __m256 w1 = _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i + 8)));
    a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), a1);
  }
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i)
    s += f16_to_f32(w[i]) * x[i];
  return s;
}

float dot_q8_scalar(const uint8_t* w, const block_q8_0* x, size_t nb) {
  float s = 0.0f;
  for (size_t b = 0; b < nb; ++b) {
    block_q8_0 wb;
    std::memcpy(&wb, w + b * 34, 34);
    int32_t acc = 0;
    for (int j = 0; j < 32; ++j)
      acc += int32_t{wb.qs[j]} * int32_t{x[b].qs[j]};
    s += static_cast<float>(acc) * f16_to_f32(wb.d) * f16_to_f32(x[b].d);
  }
  return s;
}

__attribute__((target("avx2,fma,f16c"))) float
dot_q8_avx2(const uint8_t* w, const block_q8_0* x, const float* xd,
            size_t nb) {
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * 34;
    uint16_t wd;
    std::memcpy(&wd, wb, 2);
    __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2));
    __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    // sign trick: |w| * sign(x, w) with maddubs, as ggml does.
    __m256i ax = _mm256_sign_epi8(qw, qw);
    __m256i sy = _mm256_sign_epi8(qx, qw);
    __m256i p16 = _mm256_maddubs_epi16(ax, sy);
    __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    __m256 d = _mm256_set1_ps(_cvtsh_ss(wd) * xd[b]);
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p32), acc);
  }
  return hsum(acc);
}

// -- helpers ------------------------------------------------------------------

/// Activations prepared for the weight type: rounded to half for F16,
/// quantised (and dequantised, for sgemm) for Q8_0.
struct prepared_input {
  std::vector<float> xf;       // rounded/dequantised activations
  std::vector<block_q8_0> xq;  // Q8_0 activations (gemv path)
  std::vector<float> xd;       // their scales as floats
};

void prepare(const matrix_view& w, const float* x, size_t n_tokens,
             bool for_gemm, prepared_input& p) {
  size_t n = w.cols * n_tokens;
  if (w.type == tensor_type::f16) {
    p.xf.resize(n);
    round_to_f16(x, p.xf.data(), n);
  } else if (w.type == tensor_type::q8_0) {
    p.xq.resize(n / 32);
    quantize_q8_0(x, p.xq.data(), n);
    if (for_gemm) {
      p.xf.resize(n);
      dequantize(tensor_type::q8_0,
                 reinterpret_cast<const uint8_t*>(p.xq.data()), p.xf.data(),
                 n);
    } else {
      p.xd.resize(n / 32);
      for (size_t b = 0; b < n / 32; ++b)
        p.xd[b] = f16_to_f32(p.xq[b].d);
    }
  }
}

void gemv_rows(const matrix_view& w, const float* x, const prepared_input& p,
               size_t n_tokens, float* y) {
  const bool simd = have_avx2();
  const size_t rb = row_bytes(w.type, w.cols);
  const long rows = static_cast<long>(w.rows);
#pragma omp parallel for num_threads(n_threads_) schedule(static) \
  if (n_threads_ > 1)
  for (long r = 0; r < rows; ++r) {
    const uint8_t* row = w.data + static_cast<size_t>(r) * rb;
    for (size_t t = 0; t < n_tokens; ++t) {
      float s = 0.0f;
      switch (w.type) {
        case tensor_type::f32: {
          auto* wr = reinterpret_cast<const float*>(row);
          const float* xt = x + t * w.cols;
          s = simd ? dot_f32_avx2(wr, xt, w.cols)
                   : dot_f32_scalar(wr, xt, w.cols);
          break;
        }
        case tensor_type::f16: {
          auto* wr = reinterpret_cast<const uint16_t*>(row);
          const float* xt = p.xf.data() + t * w.cols;
          s = simd ? dot_f16_avx2(wr, xt, w.cols)
                   : dot_f16_scalar(wr, xt, w.cols);
          break;
        }
        case tensor_type::q8_0: {
          size_t nb = w.cols / 32;
          const block_q8_0* xt = p.xq.data() + t * nb;
          s = simd ? dot_q8_avx2(row, xt, p.xd.data() + t * nb, nb)
                   : dot_q8_scalar(row, xt, nb);
          break;
        }
      }
      y[t * w.rows + static_cast<size_t>(r)] = s;
    }
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

void matmul(const matrix_view& w, const float* x, size_t n_tokens, float* y) {
  if (n_tokens == 0 || w.rows == 0)
    return;
  const bool gemm = n_tokens >= 4;
  prepared_input p;
  prepare(w, x, n_tokens, gemm, p);
  if (!gemm) {
    gemv_rows(w, x, p, n_tokens, y);
    return;
  }
  const int m = static_cast<int>(n_tokens);
  const int k = static_cast<int>(w.cols);
  if (w.type == tensor_type::f32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m,
                static_cast<int>(w.rows), k, 1.0f, x, k,
                reinterpret_cast<const float*>(w.data), k, 0.0f, y,
                static_cast<int>(w.rows));
    return;
  }
  // Dequantise blocks of rows and multiply each block with sgemm.
  const size_t chunk = std::max<size_t>(16, (1u << 20) / w.cols);
  const size_t rb = row_bytes(w.type, w.cols);
  std::vector<float> tile(std::min(chunk, w.rows) * w.cols);
  for (size_t r0 = 0; r0 < w.rows; r0 += chunk) {
    size_t nr = std::min(chunk, w.rows - r0);
    const long nrl = static_cast<long>(nr);
#pragma omp parallel for num_threads(n_threads_) schedule(static) \
  if (n_threads_ > 1)
    for (long r = 0; r < nrl; ++r)
      dequantize(w.type, w.data + (r0 + static_cast<size_t>(r)) * rb,
                 tile.data() + static_cast<size_t>(r) * w.cols, w.cols);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m,
                static_cast<int>(nr), k, 1.0f, p.xf.data(), k, tile.data(), k,
                0.0f, y + r0, static_cast<int>(w.rows));
  }
}

void rmsnorm(const float* x, const float* w, float* y, size_t n, float eps) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i)
    sum += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (size_t i = 0; i < n; ++i)
    y[i] = x[i] * scale * w[i];
}

void rope(float* x, size_t n_heads, size_t head_dim, size_t n_rot, int64_t pos,
          float freq_base, const float* freq_factors) {
  const float theta_scale =
    std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  // The cos/sin table is built by repeated multiplication, as in ggml.
  std::vector<float> cs(n_rot);
  float theta = static_cast<float>(pos);
  for (size_t i0 = 0; i0 + 1 < n_rot; i0 += 2) {
    float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
    float t = theta / ff;
    cs[i0] = std::cos(t);
    cs[i0 + 1] = std::sin(t);
    theta *= theta_scale;
  }
  for (size_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
    for (size_t i0 = 0; i0 + 1 < n_rot; i0 += 2) {
      const float c = cs[i0], s = cs[i0 + 1];
      const float x0 = xh[i0], x1 = xh[i0 + 1];
      xh[i0] = x0 * c - x1 * s;
      xh[i0 + 1] = x0 * s + x1 * c;
    }
  }
}

void softmax(float* x, size_t n) {
  float mx = -INFINITY;
  for (size_t i = 0; i < n; ++i)
    mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    float e = std::exp(x[i] - mx);
    sum += e;
    x[i] = e;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (size_t i = 0; i < n; ++i)
    x[i] *= inv;
}

void silu_gate(const float* gate, const float* up, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    y[i] += x[i];
}

void attention(const float* q, const float* k, const float* v, size_t n_pos,
               size_t n_head, size_t n_head_kv, size_t head_dim,
               size_t kv_stride, float scale, float* out) {
  const size_t group = n_head / n_head_kv;
  const bool simd = have_avx2();
  std::vector<float> scores(n_pos);
  for (size_t h = 0; h < n_head; ++h) {
    const float* qh = q + h * head_dim;
    const size_t kvh = (h / group) * head_dim;
    for (size_t p = 0; p < n_pos; ++p) {
      const float* kp = k + p * kv_stride + kvh;
      float s = simd ? dot_f32_avx2(kp, qh, head_dim)
                     : dot_f32_scalar(kp, qh, head_dim);
      scores[p] = s * scale;
    }
    softmax(scores.data(), n_pos);
    float* oh = out + h * head_dim;
    std::fill(oh, oh + head_dim, 0.0f);
    for (size_t p = 0; p < n_pos; ++p) {
      const float* vp = v + p * kv_stride + kvh;
      const float a = scores[p];
      for (size_t d = 0; d < head_dim; ++d)
        oh[d] += a * vp[d];
    }
  }
}

} // namespace exo::model::ops
