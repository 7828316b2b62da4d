#include "backends/host_kernels.hpp"

#include "backends/cpu_features.hpp"

#include "backends/host_parallel.hpp"
#include "backends/host_reduce.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_q4_k_x16.hpp"
#include "backends/quant_q6_k_x16.hpp"
#include "backends/quant_repack.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(_OPENMP)
#  include <omp.h>
#endif
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

// OpenMP splits rows where the build has it; without it the loops run on
// the caller's thread (and no unknown-pragma warning appears).
#if defined(_OPENMP)
#  define EXO_OMP_PANELS                                             \
    _Pragma("omp parallel for num_threads(threads) schedule(dynamic) if (threads > 1 && panels > 1)")
#else
#  define EXO_OMP_PANELS
#endif

namespace exo::backend::host {

bool cpu_has_f16c() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
}

bool cpu_has_clflushopt() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0
         && (b & (1u << 23)) != 0;
}


namespace {
/// The widest instruction set the kernels may use (limit_isa).
std::atomic<int> isa_limit{static_cast<int>(isa::avx512)};
} // namespace

void limit_isa(isa widest) noexcept {
  isa_limit.store(static_cast<int>(widest), std::memory_order_relaxed);
}

void elementwise(binary_op op, const float* a, const float* b, float* out,
                 std::size_t count) noexcept {
  switch (op) {
    case binary_op::add:
      for (std::size_t i = 0; i < count; ++i)
        out[i] = a[i] + b[i];
      break;
    case binary_op::mul:
      for (std::size_t i = 0; i < count; ++i)
        out[i] = a[i] * b[i];
      break;
  }
}

void matmul(const float* a, const float* b, float* c, const matmul_dims& d,
            int threads) noexcept {
  if (d.transpose_b) {
    // B^T's rows are B's: each output is a row of A against a row of B,
    // the F32 weight product.
    matmul_weights(a, reinterpret_cast<const std::uint8_t*>(b),
                   weight_type::f32, c, d, threads);
    return;
  }
  // B is k x n: each row of C is the sum of B's rows weighted by a row of
  // A, in blocks of columns that stay in the cache while the rows pass.
  constexpr std::size_t cols = 256;
  const std::size_t m = d.m, n = d.n, k = d.k;
  const std::size_t blocks = (n + cols - 1) / cols;
  // A small product stays on the calling thread.
  const int team = m * n * k > (std::size_t{1} << 16) ? threads : 1;
  for_each_index(static_cast<long>(m * blocks), team, [&](long job) {
    const auto i = static_cast<std::size_t>(job) / blocks;
    const auto j0 = static_cast<std::size_t>(job) % blocks * cols;
    const auto j1 = std::min(n, j0 + cols);
    float* out = c + i * n;
    std::fill(out + j0, out + j1, 0.0f);
    const float* row = a + i * k;
    for (std::size_t p = 0; p < k; ++p) {
      const float x = row[p];
      const float* brow = b + p * n;
      for (std::size_t j = j0; j < j1; ++j)
        out[j] += x * brow[j];
    }
  });
}

void matmul_reference(const float* a, const float* b, float* c,
                      const matmul_dims& d) noexcept {
  for (std::size_t i = 0; i < d.m; ++i) {
    for (std::size_t j = 0; j < d.n; ++j) {
      double acc = 0;
      for (std::size_t p = 0; p < d.k; ++p) {
        const float bv = d.transpose_b ? b[j * d.k + p] : b[p * d.n + j];
        acc += static_cast<double>(a[i * d.k + p]) * bv;
      }
      c[i * d.n + j] = static_cast<float>(acc);
    }
  }
}

status check_matmul_dims(const matmul_dims& d) {
  if (d.m == 0 || d.n == 0 || d.k == 0)
    return fail(errc::invalid_argument, "matmul: every dimension must be > 0");
  constexpr auto limit
    = static_cast<std::size_t>(std::numeric_limits<int>::max());
  if (d.m > limit || d.n > limit || d.k > limit)
    return fail(errc::invalid_argument, "matmul: dimension exceeds 2^31-1");
  for (auto [r, c] : {std::pair{d.m, d.k}, std::pair{d.k, d.n},
                      std::pair{d.m, d.n}}) {
    if (!f32_bytes(r, c))
      return fail(errc::invalid_argument, "matmul: matrix size overflows");
  }
  return {};
}

matmul_bytes bytes_of(const matmul_dims& d) noexcept {
  return {d.m * d.k * sizeof(float), d.k * d.n * sizeof(float),
          d.m * d.n * sizeof(float)};
}

// -- half precision and Q8_0 ------------------------------------------------

float f16_to_f32(std::uint16_t h) noexcept {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  std::uint32_t exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ff;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::uint16_t f32_to_f16(float f) noexcept {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  std::uint32_t sign = (x >> 16) & 0x8000;
  std::uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) // inf or nan
    return static_cast<std::uint16_t>(sign | 0x7c00
                                      | (absx > 0x7f800000 ? 0x200 : 0));
  if (absx >= 0x477ff000) // rounds to >= 65520: overflow to inf
    return static_cast<std::uint16_t>(sign | 0x7c00);
  if (absx < 0x38800000) { // subnormal half or zero
    // value = absx as float; half subnormal unit is 2^-24.
    float a;
    std::memcpy(&a, &absx, 4);
    float scaled = a * 16777216.0f; // 2^24, exact
    auto m = static_cast<std::uint32_t>(std::nearbyint(scaled));
    return static_cast<std::uint16_t>(sign | m);
  }
  std::uint32_t exp = (absx >> 23) - 127 + 15;
  std::uint32_t mant = absx & 0x7fffff;
  std::uint32_t h = (exp << 10) | (mant >> 13);
  std::uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h; // may carry into the exponent, which is correct
  return static_cast<std::uint16_t>(sign | h);
}

namespace {

/// F16C rounds to nearest even like f32_to_f16 and widens exactly like
/// f16_to_f32 (NaNs stay NaNs; only their payload may differ).
__attribute__((target("avx2,f16c"))) std::size_t
round_to_f16_f16c(const float* x, float* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(
                              _mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  return i;
}

__attribute__((target("avx2,f16c"))) std::size_t
to_f16_f16c(const float* x, std::uint16_t* y, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                     _MM_FROUND_TO_NEAREST_INT));
  return i;
}

bool have_f16c() {
  static const bool yes = __builtin_cpu_supports("avx2")
                          && cpu_has_f16c();
  return yes && isa_limit.load(std::memory_order_relaxed)
                  >= static_cast<int>(isa::avx2);
}

} // namespace

void round_to_f16(const float* x, float* y, std::size_t n) noexcept {
  std::size_t i = have_f16c() ? round_to_f16_f16c(x, y, n) : 0;
  for (; i < n; ++i)
    y[i] = f16_to_f32(f32_to_f16(x[i]));
}

void to_f16(const float* x, std::uint16_t* y, std::size_t n) noexcept {
  std::size_t i = have_f16c() ? to_f16_f16c(x, y, n) : 0;
  for (; i < n; ++i)
    y[i] = f32_to_f16(x[i]);
}

void quantize_q8_0(const float* x, block_q8_0* y, std::size_t n) noexcept {
  for (std::size_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j)
      amax = std::fmax(amax, std::fabs(xb[j]));
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j)
      y[b].qs[j] = static_cast<std::int8_t>(std::roundf(xb[j] * id));
  }
}

static_assert(sizeof(block_q8_0) == sizeof(quant::block_q8_0)
                && offsetof(block_q8_0, qs) == offsetof(quant::block_q8_0, qs),
              "host and quant Q8_0 blocks are one layout");

void quantize_q8_0_activations(const float* x, block_q8_0* y,
                               std::size_t n) noexcept {
  // llama.cpp's x86 quantize_row_q8_0: quant's activation quantizer (its
  // AVX2 body where the instruction set has it).
  quant::quantize_activations(quant::ggml_type::q8_0, x, y, n);
}

void decode_row(weight_type t, const std::uint8_t* src, float* dst,
                std::size_t n) noexcept {
  switch (t) {
    case weight_type::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case weight_type::f16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case weight_type::q8_0:
      for (std::size_t b = 0; b < n / 32; ++b) {
        block_q8_0 blk;
        std::memcpy(&blk, src + b * 34, 34);
        float d = f16_to_f32(blk.d);
        for (int j = 0; j < 32; ++j)
          dst[b * 32 + j] = d * blk.qs[j];
      }
      return;
    default: // ggml's other formats: its to_float
      quant::dequantize_row(static_cast<quant::ggml_type>(ggml_type_id(t)),
                            src, dst, n);
      return;
  }
}

void encode_row(weight_type t, const float* src, std::uint8_t* dst,
                std::size_t n) noexcept {
  switch (t) {
    case weight_type::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case weight_type::f16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case weight_type::q8_0:
      for (std::size_t b = 0; b < n / 32; ++b) {
        block_q8_0 blk;
        quantize_q8_0(src + b * 32, &blk, 32);
        std::memcpy(dst + b * 34, &blk, 34);
      }
      return;
    default: // ggml's other formats: its reference quantizers
      quant::quantize_row(static_cast<quant::ggml_type>(ggml_type_id(t)), src,
                          dst, n);
      return;
  }
}

// -- dot kernels ------------------------------------------------------------

namespace {

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2")
                          && __builtin_cpu_supports("fma")
                          && cpu_has_f16c();
  return yes
         && isa_limit.load(std::memory_order_relaxed)
              >= static_cast<int>(isa::avx2);
}

bool have_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes && have_avx2()
         && isa_limit.load(std::memory_order_relaxed)
              >= static_cast<int>(isa::avx512);
}

// F32 and F16 products follow llama.cpp's CPU backend as built for AVX-512
// (the zen4/icelake/... variants) bit for bit, on every path:
//
// - One token, and batches llamafile_sgemm declines (k not a multiple of 16
//   or a row count not a multiple of 4): ggml_vec_dot_f32 / _f16 for each
//   output. Four accumulators of 16 float lanes over k in steps of 64
//   (accumulator j, lane L takes the fused multiply-adds of elements
//   64i + 16j + L), then (acc0 + acc2) + (acc1 + acc3) lane by lane, then
//   _mm512_reduce_add_ps (reduce16, host_reduce.hpp). The last n % 64
//   elements are added one by one: F32 as GCC compiled ggml's leftover
//   loop (vectorised epilogues of 16 and then 8 elements add the rounded
//   products in order, the final < 8 elements are fused multiply-adds; see
//   the disassembly of ggml_vec_dot_f32 in libggml-cpu-zen4.so), F16 in
//   double (sumf is ggml_float there; the products of two halves are exact
//   in float).
// - Batches of 2 tokens and more otherwise: tinyBLAS (llamafile's sgemm,
//   KN = 16): per output one 16-lane accumulator of fused multiply-adds over
//   k in steps of 16, then reduce16.
//
// F16 activations are rounded to half first in both (ggml converts src1 to
// F16, the vec_dot_type of F16 weights). AVX2 emulates each 16-lane vector
// with two 8-lane ones, scalar code with std::fma per lane; the reduction is
// the same tree everywhere, so every ISA, token count split and thread count
// gives the same bits.

/// a * b rounded to float, never contracted into a following addition.
inline float mul_rounded(float a, float b) {
  float p = a * b;
  __asm__("" : "+x"(p));
  return p;
}

/// The elements ggml_vec_dot_f32 leaves after its 64-element steps.
inline float leftover_f32(const float* w, const float* x, std::size_t r,
                          float s) {
  std::size_t plain = r >= 16 ? r & ~std::size_t{15} : 0;
  if (r - plain >= 8)
    plain += 8;
  std::size_t i = 0;
  for (; i < plain; ++i)
    s += mul_rounded(w[i], x[i]);
  for (; i < r; ++i)
    s = std::fma(w[i], x[i], s);
  return s;
}

inline float leftover_f16(const std::uint16_t* w, const float* x,
                          std::size_t r, float s) {
  double d = s;
  for (std::size_t i = 0; i < r; ++i)
    d += static_cast<double>(f16_to_f32(w[i]) * x[i]); // exact in float
  return static_cast<float>(d);
}

template <bool F16>
float vec_dot_scalar(const void* wv, const float* x, std::size_t n) {
  const auto* wf = static_cast<const float*>(wv);
  const auto* wh = static_cast<const std::uint16_t*>(wv);
  float acc[4][16] = {};
  const std::size_t np = n & ~std::size_t{63};
  for (std::size_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l) {
        const std::size_t e = i + 16 * j + l;
        acc[j][l] = std::fma(F16 ? f16_to_f32(wh[e]) : wf[e], x[e], acc[j][l]);
      }
  float v[16];
  for (int l = 0; l < 16; ++l)
    v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  const float s = reduce16(v);
  return F16 ? leftover_f16(wh + np, x + np, n - np, s)
             : leftover_f32(wf + np, x + np, n - np, s);
}

/// Eight floats of F32 or F16 weights from element i.
template <bool F16>
__attribute__((target("avx2,fma,f16c"))) inline __m256
load8(const void* w, std::size_t i) {
  if constexpr (F16)
    return _mm256_cvtph_ps(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(w) + i)));
  else
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
}

template <bool F16>
__attribute__((target("avx512f"))) inline __m512 load16(const void* w,
                                                        std::size_t i) {
  if constexpr (F16)
    return _mm512_maskz_cvtph_ps(
      0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                static_cast<const std::uint16_t*>(w) + i)));
  else
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
}

template <bool F16>
__attribute__((target("avx2,fma,f16c"))) float
vec_dot_avx2(const void* w, const float* x, std::size_t n) {
  __m256 lo[4], hi[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
    lo[j] = hi[j] = _mm256_setzero_ps();
  const std::size_t np = n & ~std::size_t{63};
  for (std::size_t i = 0; i < np; i += 64)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const std::size_t e = i + 16 * j;
      lo[j] = _mm256_fmadd_ps(load8<F16>(w, e), _mm256_loadu_ps(x + e), lo[j]);
      hi[j] = _mm256_fmadd_ps(load8<F16>(w, e + 8), _mm256_loadu_ps(x + e + 8),
                              hi[j]);
    }
  const __m256 l = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]),
                                 _mm256_add_ps(lo[1], lo[3]));
  const __m256 h = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]),
                                 _mm256_add_ps(hi[1], hi[3]));
  const float s = reduce16_avx2(l, h);
  if constexpr (F16)
    return leftover_f16(static_cast<const std::uint16_t*>(w) + np, x + np,
                        n - np, s);
  else
    return leftover_f32(static_cast<const float*>(w) + np, x + np, n - np, s);
}

template <bool F16>
__attribute__((target("avx512f,avx2,fma,f16c"))) float
vec_dot_avx512(const void* w, const float* x, std::size_t n) {
  __m512 acc[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)
    acc[j] = _mm512_setzero_ps();
  const std::size_t np = n & ~std::size_t{63};
  for (std::size_t i = 0; i < np; i += 64)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      acc[j] = _mm512_fmadd_ps(load16<F16>(w, i + 16 * j),
                               _mm512_loadu_ps(x + i + 16 * j), acc[j]);
  const float s = reduce16_avx512(_mm512_add_ps(
    _mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3])));
  if constexpr (F16)
    return leftover_f16(static_cast<const std::uint16_t*>(w) + np, x + np,
                        n - np, s);
  else
    return leftover_f32(static_cast<const float*>(w) + np, x + np, n - np, s);
}

using dot_fn = float (*)(const void*, const float*, std::size_t);

/// ggml_vec_dot_f32 (F16 false) or ggml_vec_dot_f16 on the fastest ISA.
/// F32 rows take the AVX2 kernel even with AVX-512 (the same bits): weight
/// rows are rarely 64-byte aligned, and 512-bit loads that split cache lines
/// streamed F32 weights at 18-23 GB/s here against 29-42 for 256-bit ones
/// (F16 rows load 256 bits of halves per zmm and gain from AVX-512).
dot_fn vec_dot_for(bool f16) {
  if (f16 && have_avx512())
    return &vec_dot_avx512<true>;
  if (have_avx2())
    return f16 ? &vec_dot_avx2<true> : &vec_dot_avx2<false>;
  return f16 ? &vec_dot_scalar<true> : &vec_dot_scalar<false>;
}

// Q8_0 x Q8_0 dot products follow llama.cpp's x86 CPU kernels exactly
// (ggml_vec_dot_q8_0_q8_0 for one token, tinyBLAS_Q0_AVX for batches; both
// compute the same): eight float lanes, lane L takes the exact integer sum of
// the products 4L..4L+3 of each 32-block, times float(d_w) * float(d_a)
// (rounded to float), fused-added to the lane in block order; at the end
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). Every path below
// (scalar, AVX2, AVX-512 VNNI; one token or a batch; any thread count)
// computes exactly this, so all agree bit for bit.

float hsum_lanes(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

float dot_q8_scalar(const std::uint8_t* w, const block_q8_0* x,
                    const float* xd, std::size_t nb) {
  float lane[8] = {};
  for (std::size_t b = 0; b < nb; ++b) {
    block_q8_0 wb;
    std::memcpy(&wb, w + b * 34, 34);
    const float s = f16_to_f32(wb.d) * xd[b];
    for (int l = 0; l < 8; ++l) {
      std::int32_t acc = 0;
      for (int j = 4 * l; j < 4 * l + 4; ++j)
        acc += std::int32_t{wb.qs[j]} * std::int32_t{x[b].qs[j]};
      lane[l] = std::fma(s, static_cast<float>(acc), lane[l]);
    }
  }
  return hsum_lanes(lane);
}

/// The horizontal sum of hsum_lanes on eight lanes (ggml's hsum_float_8).
__attribute__((target("avx2,fma"))) inline float hsum_q8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

__attribute__((target("avx2,fma,f16c"))) float
dot_q8_avx2(const std::uint8_t* w, const block_q8_0* x, const float* xd,
            std::size_t nb) {
  __m256 acc = _mm256_setzero_ps();
  for (std::size_t b = 0; b < nb; ++b) {
    const std::uint8_t* wb = w + b * 34;
    std::uint16_t wd;
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
  return hsum_q8(acc);
}

/// Activations prepared for the weight type: rounded to half for F16,
/// quantized (and dequantized, for sgemm) for Q8_0.
struct prepared_input {
  std::vector<float> xf;       // activations rounded to half (F16)
  std::vector<block_q8_0> xq;  // Q8_0 activations
  std::vector<float> xd;       // their scales as floats
};

/// Prepares `rows` rows of `cols` activations; Q8_0 rows are quantized on
/// `threads` threads (the result does not depend on how they split).
void prepare(weight_type t, const float* x, std::size_t rows,
             std::size_t cols, prepared_input& p, int threads) {
  const std::size_t n = rows * cols;
  if (t == weight_type::f16) {
    p.xf.resize(n);
    round_to_f16(x, p.xf.data(), n);
  } else if (t == weight_type::q8_0) {
    const std::size_t nb = cols / 32;
    p.xq.resize(rows * nb);
    p.xd.resize(rows * nb);
    const long nrows = static_cast<long>(rows);
#if defined(_OPENMP)
#  pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && nrows > 1)
#endif
    for (long r = 0; r < nrows; ++r) {
      const std::size_t b0 = static_cast<std::size_t>(r) * nb;
      quantize_q8_0_activations(x + b0 * 32, p.xq.data() + b0, cols);
      for (std::size_t b = b0; b < b0 + nb; ++b)
        p.xd[b] = f16_to_f32(p.xq[b].d);
    }
  }
}

std::size_t row_bytes_of(weight_type t, std::size_t cols) {
  switch (t) {
    case weight_type::f32: return cols * 4;
    case weight_type::f16: return cols * 2;
    case weight_type::q8_0: return cols / 32 * 34;
    default: break;
  }
  auto b = weight_row_bytes(t, cols);
  return b ? *b : 0;
}

/// y[t][r] = W[r] . x[t] for every row r of W and t < n_tokens: ggml's
/// vec_dot order for F32/F16 (one token, or batches tinyBLAS declines).
void gemv_rows(const std::uint8_t* wdata, weight_type type, std::size_t rows,
               std::size_t cols, const float* x, const prepared_input& p,
               std::size_t n_tokens, float* y, int threads) {
  const bool simd = have_avx2();
  const dot_fn dot = vec_dot_for(type == weight_type::f16);
  const float* xs = type == weight_type::f16 ? p.xf.data() : x;
  const std::size_t rb = row_bytes_of(type, cols);
  const long nrows = static_cast<long>(rows);
  for_each_index(nrows, threads, [&](long r) {
    const std::uint8_t* row = wdata + static_cast<std::size_t>(r) * rb;
    for (std::size_t t = 0; t < n_tokens; ++t) {
      float s = 0.0f;
      if (type == weight_type::q8_0) {
        std::size_t nb = cols / 32;
        const block_q8_0* xt = p.xq.data() + t * nb;
        s = simd ? dot_q8_avx2(row, xt, p.xd.data() + t * nb, nb)
                 : dot_q8_scalar(row, xt, p.xd.data() + t * nb, nb);
      } else {
        s = dot(row, xs + t * cols, cols);
      }
      y[t * rows + static_cast<std::size_t>(r)] = s;
    }
  });
}

// -- batched F32/F16 products in vec_dot's order -----------------------------
//
// Rows of a batch that must each get the bits of a product alone
// (matmul_rows_f32/f16: the sequences of a batched decode step), and
// batches tinyBLAS declines: ggml_vec_dot_f32/_f16's order per output
// (four 16-lane accumulators over k in steps of 64, then (a0 + a2) +
// (a1 + a3), reduce16, then the leftover elements), computed for one
// weight row x up to 6 tokens at once: each weight load serves every
// token, and the four chains of every output run side by side in one pass
// (4 x 6 accumulators in 24 of the 32 zmm registers), so each row is read
// once, in order. The earlier tiles of 4 rows computed the chains in four
// passes over the rows, every fourth cache line each: four strided
// streams the hardware prefetcher does not follow, 2.6x slower than one
// token's product for 2 tokens on this VM (docs/benchmarks.md).

/// Sixteen weights from element i as two 256-bit loads: F32 rows of a
/// GGUF file are 32-byte aligned, and a 512-bit load that splits a cache
/// line streams them far slower (see vec_dot_for). F16: one 256-bit load.
template <bool F16>
__attribute__((target("avx512f"))) inline __m512
load16_halves(const void* w, std::size_t i) {
  if constexpr (F16) {
    return load16<true>(w, i);
  } else {
    const float* p = static_cast<const float*>(w) + i;
    const __m512d z = _mm512_setzero_pd();
    const __m512d lo = _mm512_mask_insertf64x4(
      z, 0xff, z, _mm256_castps_pd(_mm256_loadu_ps(p)), 0);
    return _mm512_castpd_ps(_mm512_mask_insertf64x4(
      lo, 0xff, lo, _mm256_castps_pd(_mm256_loadu_ps(p + 8)), 1));
  }
}

/// How far ahead of its loads vec_dot_row_tile_avx512 asks for the
/// weight stream in L2, in bytes. Several tokens' activations are read
/// beside the weights; once they no longer fit L1 (4 tokens of a 1536-long
/// row: 24 KiB) the hardware prefetchers keep too few weight lines in
/// flight. 200 matrices of 512 x 1536 F32 from DRAM, one core: 4 tokens
/// 64-74 ms -> 25-28 ms (one token: 25-33 ms); 1536 x 512: 35-52 -> 26-28.
constexpr std::size_t row_tile_ahead = 8192;

/// C[j] for one row (w) and RN tokens j (stride k): the four chains of
/// every output in one pass over the row (4 x RN accumulators), so the
/// row is read once, in order, as a stream. The weights row_tile_ahead
/// bytes on (the rest of this row, then the next rows: a matrix's rows
/// lie one after another) are asked for in L2 as it goes; the address is
/// an integer's (no pointer leaves its array) and prefetches never fault.
template <int RN, bool F16>
__attribute__((target("avx512f,avx2,fma,f16c"))) void
vec_dot_row_tile_avx512(const std::uint8_t* w, const float* x, std::size_t k,
                        float* c, std::size_t ldc) {
  constexpr std::size_t step_bytes = F16 ? 128 : 256; // 64 weights
  __m512 acc[4][RN];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q)
#pragma GCC unroll 6
    for (int j = 0; j < RN; ++j)
      acc[q][j] = _mm512_setzero_ps();
  const std::size_t np = k & ~std::size_t{63};
  for (std::size_t l = 0; l < np; l += 64) {
    const char* ahead = reinterpret_cast<const char*>(
      reinterpret_cast<std::uintptr_t>(w) + l / 64 * step_bytes
      + row_tile_ahead);
#pragma GCC unroll 4
    for (std::size_t b = 0; b < step_bytes; b += 64)
      _mm_prefetch(ahead + b, _MM_HINT_T1);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const std::size_t e = l + 16 * static_cast<std::size_t>(q);
      const __m512 a = load16_halves<F16>(w, e);
#pragma GCC unroll 6
      for (int j = 0; j < RN; ++j)
        acc[q][j] = _mm512_fmadd_ps(
          a, _mm512_loadu_ps(x + static_cast<std::size_t>(j) * k + e),
          acc[q][j]);
    }
  }
  for (int j = 0; j < RN; ++j) {
    const float sum = reduce16_avx512(
      _mm512_add_ps(_mm512_add_ps(acc[0][j], acc[2][j]),
                    _mm512_add_ps(acc[1][j], acc[3][j])));
    const float* xj = x + static_cast<std::size_t>(j) * k;
    float out;
    if constexpr (F16)
      out = leftover_f16(reinterpret_cast<const std::uint16_t*>(w) + np,
                         xj + np, k - np, sum);
    else
      out = leftover_f32(reinterpret_cast<const float*>(w) + np, xj + np,
                         k - np, sum);
    c[static_cast<std::size_t>(j) * ldc] = out;
  }
}

using row_tile_fn = void (*)(const std::uint8_t*, const float*, std::size_t,
                             float*, std::size_t);

template <bool F16>
constexpr row_tile_fn vec_dot_row_tiles[6] = {
  &vec_dot_row_tile_avx512<1, F16>, &vec_dot_row_tile_avx512<2, F16>,
  &vec_dot_row_tile_avx512<3, F16>, &vec_dot_row_tile_avx512<4, F16>,
  &vec_dot_row_tile_avx512<5, F16>, &vec_dot_row_tile_avx512<6, F16>};

/// Rows of a panel of the batched F32/F16 products: about 256 KiB of
/// weights (rows of rb bytes), whole groups of 4 rows, and at least two
/// panels per thread where the rows allow.
std::size_t panel_rows(std::size_t rb, std::size_t rows, int threads) {
  const std::size_t panel
    = std::max<std::size_t>(4, (std::size_t{256} << 10) / rb / 4 * 4);
  const auto per = static_cast<std::size_t>(2 * threads);
  return std::min(panel, std::max<std::size_t>(4, (rows / per + 3) / 4 * 4));
}

/// C[m x rows] = X[m x k] * W^T in vec_dot's order per output, AVX-512
/// (the same bits as gemv_rows), m >= 2. x: F32 activations, or rounded
/// to half for F16 weights.
void gemv_tiled(const float* x, std::size_t m, const std::uint8_t* w,
                weight_type t, std::size_t rows, std::size_t k, float* c,
                int threads) {
  const bool f16 = t == weight_type::f16;
  const std::size_t rb = row_bytes_of(t, k);
  // Every token tile (its activations in L1) passes over a panel while
  // it is in L2.
  const std::size_t panel = panel_rows(rb, rows, threads);
  const long panels = static_cast<long>((rows + panel - 1) / panel);
  // Tokens a tile: as many as keep their activations in 24 KiB of L1
  // beside the weight stream (up to 6), or 6 where not even two fit (they
  // come from L2 either way; each weight load then serves the most), in
  // tiles of equal size. 200 matrices of 512 x 1536 F32 from DRAM, one
  // core (docs/benchmarks.md): 8 tokens as 6 + 2, 80-86 ms -> as 4 + 4,
  // 45-57; 16 as 6 + 6 + 4, 124-137 -> 4 x 4, 79-87. 2048 x 2048: 4 tokens
  // as 2 + 2, 53-61 -> 43-44; 8 as 3 + 3 + 2, 86-88 -> 57-59.
  const std::size_t fit = (std::size_t{24} << 10) / (k * sizeof(float));
  const std::size_t most = fit >= 2 ? std::min<std::size_t>(6, fit) : 6;
  const std::size_t tiles = (m + most - 1) / most;
  const std::size_t per = (m + tiles - 1) / tiles;
  EXO_OMP_PANELS
  for (long pi = 0; pi < panels; ++pi) {
    const std::size_t r0 = static_cast<std::size_t>(pi) * panel;
    const std::size_t r1 = std::min(rows, r0 + panel);
    for (std::size_t t0 = 0; t0 < m; t0 += per) {
      const std::size_t tn = std::min(per, m - t0);
      const row_tile_fn fn = f16 ? vec_dot_row_tiles<true>[tn - 1]
                                 : vec_dot_row_tiles<false>[tn - 1];
      for (std::size_t r = r0; r < r1; ++r)
        fn(w + r * rb, x + t0 * k, k, c + t0 * rows + r, rows);
    }
  }
}

// -- batched F32/F16 products: tinyBLAS's order ------------------------------
//
// llamafile_sgemm's tinyBLAS<16> order per output (see the comment above
// have_avx512): the kernels compute tiles of weight rows x tokens, each
// output in its own 16-lane accumulator (AVX-512: one zmm; AVX2: two ymm;
// scalar: 16 floats), so that a tile's weight and activation loads are
// shared while every output keeps exactly tinyBLAS's chain of fused
// multiply-adds. Rows go in panels of about 256 KiB of weights (split over
// threads) that stay in L2 while every block of tokens passes over them.
// F16 weights are widened with F16C/AVX-512F as they are loaded.

/// C[j * ldc + i] for RM = 4 rows i (stride rb) and RN tokens j (stride k).
template <int RN, bool F16>
__attribute__((target("avx512f,avx2,fma,f16c"))) void
tiny_tile_avx512(const std::uint8_t* w, std::size_t rb, const float* x,
                 std::size_t k, float* c, std::size_t ldc) {
  constexpr int RM = 4;
  __m512 acc[RN][RM];
#pragma GCC unroll 8
  for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
    for (int i = 0; i < RM; ++i)
      acc[j][i] = _mm512_setzero_ps();
  for (std::size_t l = 0; l < k; l += 16) {
    __m512 a[RM];
#pragma GCC unroll 4
    for (int i = 0; i < RM; ++i)
      a[i] = load16<F16>(w + static_cast<std::size_t>(i) * rb, l);
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) {
      const __m512 b = _mm512_loadu_ps(x + static_cast<std::size_t>(j) * k + l);
#pragma GCC unroll 4
      for (int i = 0; i < RM; ++i)
        acc[j][i] = _mm512_fmadd_ps(a[i], b, acc[j][i]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
    for (int i = 0; i < RM; ++i)
      c[static_cast<std::size_t>(j) * ldc + static_cast<std::size_t>(i)]
        = reduce16_avx512(acc[j][i]);
}

/// The same for RM = 2 rows, each 16-lane accumulator as two ymm.
template <int RN, bool F16>
__attribute__((target("avx2,fma,f16c"))) void
tiny_tile_avx2(const std::uint8_t* w, std::size_t rb, const float* x,
               std::size_t k, float* c, std::size_t ldc) {
  constexpr int RM = 2;
  __m256 lo[RN][RM], hi[RN][RM];
#pragma GCC unroll 4
  for (int j = 0; j < RN; ++j)
#pragma GCC unroll 2
    for (int i = 0; i < RM; ++i)
      lo[j][i] = hi[j][i] = _mm256_setzero_ps();
  for (std::size_t l = 0; l < k; l += 16) {
    __m256 al[RM], ah[RM];
#pragma GCC unroll 2
    for (int i = 0; i < RM; ++i) {
      al[i] = load8<F16>(w + static_cast<std::size_t>(i) * rb, l);
      ah[i] = load8<F16>(w + static_cast<std::size_t>(i) * rb, l + 8);
    }
#pragma GCC unroll 4
    for (int j = 0; j < RN; ++j) {
      const float* xj = x + static_cast<std::size_t>(j) * k + l;
      const __m256 bl = _mm256_loadu_ps(xj), bh = _mm256_loadu_ps(xj + 8);
#pragma GCC unroll 2
      for (int i = 0; i < RM; ++i) {
        lo[j][i] = _mm256_fmadd_ps(al[i], bl, lo[j][i]);
        hi[j][i] = _mm256_fmadd_ps(ah[i], bh, hi[j][i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < RN; ++j)
#pragma GCC unroll 2
    for (int i = 0; i < RM; ++i)
      c[static_cast<std::size_t>(j) * ldc + static_cast<std::size_t>(i)]
        = reduce16_avx2(lo[j][i], hi[j][i]);
}

/// The same for one row and one token, in scalar code.
template <int RN, bool F16>
void tiny_tile_scalar(const std::uint8_t* w, std::size_t, const float* x,
                      std::size_t k, float* c, std::size_t) {
  static_assert(RN == 1, "one token at a time");
  const auto* wf = reinterpret_cast<const float*>(w);
  const auto* wh = reinterpret_cast<const std::uint16_t*>(w);
  float acc[16] = {};
  for (std::size_t l = 0; l < k; l += 16)
    for (std::size_t e = 0; e < 16; ++e)
      acc[e] = std::fma(F16 ? f16_to_f32(wh[l + e]) : wf[l + e], x[l + e],
                        acc[e]);
  *c = reduce16(acc);
}

using tiny_fn = void (*)(const std::uint8_t*, std::size_t, const float*,
                         std::size_t, float*, std::size_t);

struct tiny_kernels {
  std::size_t rm, tn; // rows and tokens per tile
  tiny_fn fn[6];      // by tokens - 1
};

template <bool F16>
tiny_kernels tiny_kernels_for() {
  if (have_avx512())
    return {4, 6,
            {&tiny_tile_avx512<1, F16>, &tiny_tile_avx512<2, F16>,
             &tiny_tile_avx512<3, F16>, &tiny_tile_avx512<4, F16>,
             &tiny_tile_avx512<5, F16>, &tiny_tile_avx512<6, F16>}};
  if (have_avx2())
    return {2, 2, {&tiny_tile_avx2<1, F16>, &tiny_tile_avx2<2, F16>}};
  return {1, 1, {&tiny_tile_scalar<1, F16>}};
}

/// Whether llamafile_sgemm takes C[m x rows] = X[m x k] * W^T (F32 or F16
/// weights, AVX-512 build): from 2 tokens, k a multiple of 16, rows of 4.
bool tinyblas_takes(std::size_t m, std::size_t rows, std::size_t k) {
  return m >= 2 && k % 16 == 0 && rows % 4 == 0;
}

/// C[m x rows] = X[m x k] * W^T in tinyBLAS's order (tinyblas_takes).
void gemm_tiny(const float* x, std::size_t m, const std::uint8_t* w,
               weight_type t, std::size_t rows, std::size_t k, float* c,
               int threads) {
  const tiny_kernels kern = t == weight_type::f16 ? tiny_kernels_for<true>()
                                                  : tiny_kernels_for<false>();
  const std::size_t rb = row_bytes_of(t, k);
  const std::size_t panel = panel_rows(rb, rows, threads);
  const long panels = static_cast<long>((rows + panel - 1) / panel);
  EXO_OMP_PANELS
  for (long pi = 0; pi < panels; ++pi) {
    const std::size_t r0 = static_cast<std::size_t>(pi) * panel;
    const std::size_t r1 = std::min(rows, r0 + panel);
    for (std::size_t t0 = 0; t0 < m; t0 += kern.tn) {
      const tiny_fn fn = kern.fn[std::min(kern.tn, m - t0) - 1];
      for (std::size_t r = r0; r < r1; r += kern.rm)
        fn(w + r * rb, rb, x + t0 * k, k, c + t0 * rows + r, rows);
    }
  }
}

// -- batched Q8_0 products: int8 block dot products ---------------------------
//
// The numerics of dot_q8_scalar (see there), computed for a tile of weight
// rows x tokens at once. AVX-512 VNNI: each zmm holds two tokens' eight
// lanes for one weight row; activations are stored offset to unsigned
// (a + 128) so that vpdpbusd multiplies them with the signed weights
// directly, and its accumulator starts at -128 * (sum of the weights of the
// lane), which makes every lane the exact signed sum. AVX2: ggml's sign trick
// (|w| times a with w's sign) with maddubs, one token per ymm. Weight rows
// go in groups of 4 (split over threads); for prompts the group's scales
// and VNNI corrections are computed once and stay in L1 while all tokens
// pass; for decode batches (up to q8_inline_pairs pairs) the tiles compute
// them as they read the weights, in one pass over the matrix.

#if defined(_OPENMP)
#  define EXO_OMP_GROUPS                                                   \
    _Pragma("omp parallel for num_threads(threads) schedule(dynamic, 4) if (threads > 1 && groups > 1)")
#else
#  define EXO_OMP_GROUPS
#endif


constexpr std::size_t q8_group = 4; // weight rows per group
/// How far past a tile's rows its inline form asks for the weights. The
/// 12 x 512 Q8_0 model's steps on the Zen 4 VM, ms for 2 / 4 / 8
/// sequences (one sequence 2.3): the next rows only 4.4-4.6 / 5.4-5.6 /
/// 7.9-8.1; 2 KiB on 3.1-3.3 / 4.2-4.3 / 7.4-7.6; 8 KiB 2.7-2.8 / 4.1 /
/// 7.4-7.5; 16 KiB about as 8; 32 KiB 3.1-3.3 / 4.7 / 8.2-9.1.
constexpr std::size_t q8_ahead = 8192;
/// Token pairs up to which a product takes the inline tiles (decode
/// steps); larger batches (prompts) precompute each group's corrections
/// once for all their tiles.
constexpr std::size_t q8_inline_pairs = 16;
constexpr std::size_t q8_pairs = 4; // token pairs per VNNI tile
constexpr std::size_t q8_tokens = 4; // tokens per AVX2 tile

/// Activations of m tokens laid out for the VNNI kernel: per pair of tokens
/// and block, 64 bytes (a + 128 of both tokens) and 16 scales (8 copies of
/// each token's d). A missing second token is a zero block with scale 0.
struct q8_pairs_buf {
  std::vector<std::uint8_t> u;
  std::vector<float> d;
};

void pack_pairs(const prepared_input& p, std::size_t m, std::size_t nb,
                q8_pairs_buf& out) {
  const std::size_t pairs = (m + 1) / 2;
  out.u.resize(pairs * nb * 64);
  out.d.resize(pairs * nb * 16);
  for (std::size_t pr = 0; pr < pairs; ++pr) {
    for (std::size_t b = 0; b < nb; ++b) {
      std::uint8_t* u = out.u.data() + (pr * nb + b) * 64;
      float* d = out.d.data() + (pr * nb + b) * 16;
      for (std::size_t h = 0; h < 2; ++h) {
        const std::size_t t = 2 * pr + h;
        const bool real = t < m;
        const block_q8_0* blk = real ? &p.xq[t * nb + b] : nullptr;
        for (int j = 0; j < 32; ++j)
          u[h * 32 + j] = static_cast<std::uint8_t>(
            (real ? static_cast<std::uint8_t>(blk->qs[j]) : 0) ^ 0x80u);
        std::fill(d + h * 8, d + h * 8 + 8, real ? p.xd[t * nb + b] : 0.0f);
      }
    }
  }
}

/// Per weight row of a group and block: the scale as float and, for VNNI,
/// -128 times each lane's sum of weights.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void
group_corrections(const std::uint8_t* w, std::size_t rb, std::size_t nr,
                  std::size_t nb, std::int32_t* corr) {
  const __m256i c128 = _mm256_set1_epi8(static_cast<char>(0x80));
  for (std::size_t r = 0; r < nr; ++r) {
    for (std::size_t b = 0; b < nb; ++b) {
      const __m256i q = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(w + r * rb + b * 34 + 2));
      const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), c128, q);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(corr + (r * nb + b) * 8),
                          _mm256_sub_epi32(_mm256_setzero_si256(), s));
    }
  }
}

/// The scales of a group's rows as floats (F16C: exact, like f16_to_f32).
__attribute__((target("avx2,f16c"))) void
group_scales_f16c(const std::uint8_t* w, std::size_t rb, std::size_t nr,
                  std::size_t nb, float* dw) {
  for (std::size_t r = 0; r < nr; ++r) {
    for (std::size_t b = 0; b < nb; ++b) {
      std::uint16_t h;
      std::memcpy(&h, w + r * rb + b * 34, 2);
      dw[r * nb + b] = _cvtsh_ss(h);
    }
  }
}

void group_scales(const std::uint8_t* w, std::size_t rb, std::size_t nr,
                  std::size_t nb, float* dw) {
  if (have_avx2()) {
    group_scales_f16c(w, rb, nr, nb, dw);
    return;
  }
  for (std::size_t r = 0; r < nr; ++r) {
    for (std::size_t b = 0; b < nb; ++b) {
      std::uint16_t h;
      std::memcpy(&h, w + r * rb + b * 34, 2);
      dw[r * nb + b] = f16_to_f32(h);
    }
  }
}

/// C rows r0.. (R of them) for TP token pairs from pair p0, AVX-512 VNNI.
/// Inline: the corrections and scales of each row's blocks are computed
/// here from the weights as they are read (corr and dw unused), for
/// decode batches (up to q8_inline_pairs pairs: a group's rows meet 4
/// tiles at most), where the group's precomputed ones would serve little:
/// a pass over the weights and a store and a load of 32 bytes per block
/// saved. The same sums.
template <int R, int TP, bool Inline = false>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))) void
q8_tile_vnni(const std::uint8_t* w, std::size_t rb, const std::int32_t* corr,
             const float* dw, const std::uint8_t* u, const float* ud,
             std::size_t nb, float* c, std::size_t ldc, std::size_t t0,
             std::size_t m) {
  // The masked forms with every lane set: GCC 12 warns about the
  // undefined pass-through operand of the plain intrinsics.
  constexpr __mmask8 all8 = 0xff;
  constexpr __mmask16 all16 = 0xffff;
  const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[R][TP];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < TP; ++i)
      acc[r][i] = _mm512_setzero_ps();
  // Inline: the tile reads its R rows side by side (R streams, which the
  // hardware prefetchers follow poorly from DRAM); the region q8_ahead
  // bytes past these R rows is asked for in L2 in order, R blocks' worth
  // per block (prefetches never fault; the address is an integer's).
  const std::uintptr_t next = reinterpret_cast<std::uintptr_t>(w)
                             + static_cast<std::size_t>(R) * rb + q8_ahead;
  for (std::size_t b = 0; b < nb; ++b) {
    if constexpr (Inline) {
#pragma GCC unroll 4
      for (int l = 0; l < (R * 34 + 63) / 64 + 1; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(next + b * R * 34 + 64 * l),
                     _MM_HINT_T1);
    }
    __m512i av[TP];
    __m512 ad[TP];
#pragma GCC unroll 4
    for (int i = 0; i < TP; ++i) {
      av[i] = _mm512_loadu_si512(u + (static_cast<std::size_t>(i) * nb + b) * 64);
      ad[i] = _mm512_loadu_ps(ud + (static_cast<std::size_t>(i) * nb + b) * 16);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::size_t rbk = static_cast<std::size_t>(r) * nb + b;
      const std::uint8_t* blk = w + static_cast<std::size_t>(r) * rb + b * 34;
      const __m512i wq = _mm512_maskz_broadcast_i64x4(all8, _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(blk + 2)));
      __m512i cr;
      __m512 d;
      if constexpr (Inline) {
        // group_corrections' -128 x each lane's weights, in both halves.
        cr = _mm512_sub_epi32(
          _mm512_setzero_si512(),
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, wq));
        std::uint16_t h;
        std::memcpy(&h, blk, 2);
        d = _mm512_set1_ps(_cvtsh_ss(h));
      } else {
        cr = _mm512_maskz_broadcast_i64x4(all8, _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(corr + rbk * 8)));
        d = _mm512_set1_ps(dw[rbk]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < TP; ++i) {
        const __m512i s = _mm512_dpbusd_epi32(cr, av[i], wq);
        acc[r][i] = _mm512_fmadd_ps(_mm512_mul_ps(d, ad[i]),
                                    _mm512_maskz_cvtepi32_ps(all16, s),
                                    acc[r][i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int i = 0; i < TP; ++i) {
      const std::size_t t = t0 + 2 * static_cast<std::size_t>(i);
      const __m256 lo = _mm256_castpd_ps(
        _mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(acc[r][i]), 0));
      const __m256 hi = _mm256_castpd_ps(
        _mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(acc[r][i]), 1));
      c[t * ldc + static_cast<std::size_t>(r)] = hsum_q8(lo);
      if (t + 1 < m)
        c[(t + 1) * ldc + static_cast<std::size_t>(r)] = hsum_q8(hi);
    }
  }
}

using q8_vnni_fn = void (*)(const std::uint8_t*, std::size_t,
                            const std::int32_t*, const float*,
                            const std::uint8_t*, const float*, std::size_t,
                            float*, std::size_t, std::size_t, std::size_t);

template <int R, bool Inline>
q8_vnni_fn q8_vnni_for(std::size_t tp) {
  switch (tp) {
    case 1: return &q8_tile_vnni<R, 1, Inline>;
    case 2: return &q8_tile_vnni<R, 2, Inline>;
    case 3: return &q8_tile_vnni<R, 3, Inline>;
    default: return &q8_tile_vnni<R, 4, Inline>;
  }
}

template <bool Inline>
q8_vnni_fn q8_vnni_for(std::size_t r, std::size_t tp) {
  switch (r) {
    case 1: return q8_vnni_for<1, Inline>(tp);
    case 2: return q8_vnni_for<2, Inline>(tp);
    case 3: return q8_vnni_for<3, Inline>(tp);
    default: return q8_vnni_for<4, Inline>(tp);
  }
}

void gemm_q8_vnni(const prepared_input& p, std::size_t m,
                  const std::uint8_t* w, std::size_t rows, std::size_t k,
                  float* c, int threads) {
  const std::size_t nb = k / 32, rb = nb * 34;
  const std::size_t pairs = (m + 1) / 2;
  thread_local q8_pairs_buf packed;
  pack_pairs(p, m, nb, packed);
  const q8_pairs_buf& act = packed;
  // Blocks of rows (a thread's work) times blocks of token pairs, so that
  // both stay in the core's L2 while the 4 x 8 tiles sweep them: a block
  // of 64 rows is 64 * k * 34 / 32 bytes (140 KB at k = 2048), 32 pairs
  // of activations 32 * k * 2.5 bytes (160 KB). Each output's sums run
  // as before (the tile's order), so the bits do not depend on the
  // blocking.
  const std::size_t block_rows = 16 * q8_group, block_pairs = 8 * q8_pairs;
  const long groups = static_cast<long>((rows + block_rows - 1) / block_rows);
  if (pairs <= q8_inline_pairs) {
    // Decode steps: a group's corrections would serve a tile or a few;
    // the tiles compute them as they read the weights, which stream from
    // memory once, in order (the group's later tiles find its rows in
    // L1).
    const long rgroups = static_cast<long>((rows + q8_group - 1) / q8_group);
    for_each_index(rgroups, threads, [&](long g) {
      const std::size_t r0 = static_cast<std::size_t>(g) * q8_group;
      const std::size_t nr = std::min(q8_group, rows - r0);
      for (std::size_t p0 = 0; p0 < pairs; p0 += q8_pairs) {
        const std::size_t tp = std::min(q8_pairs, pairs - p0);
        q8_vnni_for<true>(nr, tp)(w + r0 * rb, rb, nullptr, nullptr,
                                  act.u.data() + p0 * nb * 64,
                                  act.d.data() + p0 * nb * 16, nb, c + r0,
                                  rows, 2 * p0, m);
      }
    });
    return;
  }
  EXO_OMP_GROUPS
  for (long g = 0; g < groups; ++g) {
    const std::size_t rb0 = static_cast<std::size_t>(g) * block_rows;
    const std::size_t nrb = std::min(block_rows, rows - rb0);
    thread_local std::vector<std::int32_t> corr;
    thread_local std::vector<float> dw;
    corr.resize(block_rows * nb * 8);
    dw.resize(block_rows * nb);
    group_corrections(w + rb0 * rb, rb, nrb, nb, corr.data());
    group_scales(w + rb0 * rb, rb, nrb, nb, dw.data());
    for (std::size_t pb = 0; pb < pairs; pb += block_pairs) {
      const std::size_t pe = std::min(pairs, pb + block_pairs);
      for (std::size_t r = 0; r < nrb; r += q8_group) {
        const std::size_t nr = std::min(q8_group, nrb - r);
        for (std::size_t p0 = pb; p0 < pe; p0 += q8_pairs) {
          const std::size_t tp = std::min(q8_pairs, pe - p0);
          q8_vnni_for<false>(nr, tp)(w + (rb0 + r) * rb, rb,
                              corr.data() + r * nb * 8, dw.data() + r * nb,
                              act.u.data() + p0 * nb * 64,
                              act.d.data() + p0 * nb * 16, nb,
                              c + rb0 + r, rows, 2 * p0, m);
        }
      }
    }
  }
}

/// C rows r0.. (R of them) for T tokens from t0, AVX2 (sign trick).
template <int R, int T>
__attribute__((target("avx2,fma,f16c"))) void
q8_tile_avx2(const std::uint8_t* w, std::size_t rb, const float* dw,
             const block_q8_0* x, const float* xd, std::size_t nb, float* c,
             std::size_t ldc) {
  __m256 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < T; ++i)
      acc[r][i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::size_t b = 0; b < nb; ++b) {
    __m256i av[T];
#pragma GCC unroll 4
    for (int i = 0; i < T; ++i)
      av[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
        x[static_cast<std::size_t>(i) * nb + b].qs));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
        w + static_cast<std::size_t>(r) * rb + b * 34 + 2));
      const __m256i aw = _mm256_sign_epi8(wq, wq);
      const __m256 d = _mm256_set1_ps(dw[static_cast<std::size_t>(r) * nb + b]);
#pragma GCC unroll 4
      for (int i = 0; i < T; ++i) {
        const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(av[i], wq));
        const __m256 q = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        const __m256 s = _mm256_mul_ps(
          d, _mm256_set1_ps(xd[static_cast<std::size_t>(i) * nb + b]));
        acc[r][i] = _mm256_fmadd_ps(s, q, acc[r][i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < T; ++i)
      c[static_cast<std::size_t>(i) * ldc + static_cast<std::size_t>(r)] =
        hsum_q8(acc[r][i]);
}

using q8_avx2_fn = void (*)(const std::uint8_t*, std::size_t, const float*,
                            const block_q8_0*, const float*, std::size_t,
                            float*, std::size_t);

template <int R>
q8_avx2_fn q8_avx2_for(std::size_t t) {
  switch (t) {
    case 1: return &q8_tile_avx2<R, 1>;
    case 2: return &q8_tile_avx2<R, 2>;
    case 3: return &q8_tile_avx2<R, 3>;
    default: return &q8_tile_avx2<R, 4>;
  }
}

q8_avx2_fn q8_avx2_for(std::size_t r, std::size_t t) {
  switch (r) {
    case 1: return q8_avx2_for<1>(t);
    default: return q8_avx2_for<2>(t);
  }
}

void gemm_q8_avx2(const prepared_input& p, std::size_t m,
                  const std::uint8_t* w, std::size_t rows, std::size_t k,
                  float* c, int threads) {
  const std::size_t nb = k / 32, rb = nb * 34;
  const long groups = static_cast<long>((rows + q8_group - 1) / q8_group);
  EXO_OMP_GROUPS
  for (long g = 0; g < groups; ++g) {
    const std::size_t r0 = static_cast<std::size_t>(g) * q8_group;
    const std::size_t nr = std::min(q8_group, rows - r0);
    thread_local std::vector<float> dw;
    dw.resize(q8_group * nb);
    group_scales(w + r0 * rb, rb, nr, nb, dw.data());
    for (std::size_t t0 = 0; t0 < m; t0 += q8_tokens) {
      const std::size_t nt = std::min(q8_tokens, m - t0);
      for (std::size_t r = 0; r < nr; r += 2) {
        const std::size_t rr = std::min<std::size_t>(2, nr - r);
        q8_avx2_for(rr, nt)(w + (r0 + r) * rb, rb, dw.data() + r * nb,
                            p.xq.data() + t0 * nb, p.xd.data() + t0 * nb, nb,
                            c + t0 * rows + r0 + r, rows);
      }
    }
  }
}

void gemm_q8_scalar(const prepared_input& p, std::size_t m,
                    const std::uint8_t* w, std::size_t rows, std::size_t k,
                    float* c, int threads) {
  const std::size_t nb = k / 32, rb = nb * 34;
  const long nrows = static_cast<long>(rows);
  for_each_index(nrows, threads, [&](long r) {
    const auto ur = static_cast<std::size_t>(r);
    for (std::size_t t = 0; t < m; ++t)
      c[t * rows + ur] = dot_q8_scalar(w + ur * rb, p.xq.data() + t * nb,
                                       p.xd.data() + t * nb, nb);
  });
}

/// C[m x rows] = Q8_0(X) * W^T for Q8_0 weights, any m >= 1.
void gemm_q8(const prepared_input& p, std::size_t m, const std::uint8_t* w,
             std::size_t rows, std::size_t k, float* c, int threads) {
  if (have_vnni())
    gemm_q8_vnni(p, m, w, rows, k, c, threads);
  else if (have_avx2())
    gemm_q8_avx2(p, m, w, rows, k, c, threads);
  else
    gemm_q8_scalar(p, m, w, rows, k, c, threads);
}
} // namespace

// -- the operations of a Llama layer ----------------------------------------

namespace {
std::atomic<bool> all_work_split{false};
} // namespace

void split_all_work(bool all) noexcept {
  all_work_split.store(all, std::memory_order_relaxed);
}

bool all_work_splits() noexcept {
  return all_work_split.load(std::memory_order_relaxed);
}

bool product_splits(weight_type t, std::size_t tokens, std::size_t rows,
                    std::size_t cols) noexcept {
  if (all_work_splits())
    return true;
  const double bytes = static_cast<double>(rows)
                       * static_cast<double>(row_bytes_of(t, cols));
  const double macs = static_cast<double>(tokens)
                      * static_cast<double>(rows) * static_cast<double>(cols);
  const bool plain = t == weight_type::f32 || t == weight_type::f16
                     || t == weight_type::bf16;
  const std::size_t limit = plain ? product_split_bytes
                                  : product_split_quant_bytes;
  return bytes >= static_cast<double>(limit)
         || macs >= static_cast<double>(product_split_macs);
}

void matmul_weights(const float* a, const std::uint8_t* w, weight_type t,
                    float* c, const matmul_dims& dims, int threads) noexcept {
  const std::size_t n_tokens = dims.m, rows = dims.n, cols = dims.k;
  if (n_tokens == 0 || rows == 0)
    return;
  threads = product_splits(t, n_tokens, rows, cols) ? std::max(1, threads)
                                                     : 1;
  if (t != weight_type::f32 && t != weight_type::f16
      && t != weight_type::q8_0) {
    // ggml's other formats: activations rounded to the format's vec_dot
    // type (Q8_K for the K-quants, Q8_0 or Q8_1 for the 32-element
    // formats, BF16 for BF16), then llama.cpp's integer dot products. Q4_K
    // matrices that llama.cpp repacks on x86 (rows a multiple of 8) sum
    // their blocks in the repacked kernels' order, as do the same matrices
    // packed 16 rows at a time (q4_k_x16); Q6_K packed so (q6_k_x16) gives
    // matmul_quant's bits. Sizes were checked
    // (check_matmul_weights), so neither can refuse.
    const auto g = static_cast<quant::ggml_type>(ggml_type_id(t));
    if (t == weight_type::q4_k_x16)
      (void)quant::matmul_q4_k_x16(w, rows, cols, a, n_tokens, c, threads,
                                   dims.rows_apart);
    else if (t == weight_type::q6_k_x16)
      (void)quant::matmul_q6_k_x16(w, rows, cols, a, n_tokens, c, threads);
    else if (t == weight_type::q4_k && quant::q4_k_repacked(rows))
      (void)quant::matmul_q4_k_repacked(w, rows, cols, a, n_tokens, c,
                                        threads, dims.rows_apart);
    else
      (void)quant::matmul_quant(w, g, rows, cols, a, n_tokens, c, threads);
    return;
  }
  prepared_input p;
  prepare(t, a, n_tokens, cols, p, threads);
  if (t == weight_type::q8_0 && n_tokens > 1) {
    gemm_q8(p, n_tokens, w, rows, cols, c, threads);
    return;
  }
  if (t != weight_type::q8_0 && !dims.rows_apart
      && tinyblas_takes(n_tokens, rows, cols)) {
    gemm_tiny(t == weight_type::f32 ? a : p.xf.data(), n_tokens, w, t, rows,
              cols, c, threads);
    return;
  }
  if (t != weight_type::q8_0 && n_tokens > 1 && have_avx512()) {
    gemv_tiled(t == weight_type::f32 ? a : p.xf.data(), n_tokens, w, t, rows,
               cols, c, threads);
    return;
  }
  gemv_rows(w, t, rows, cols, a, p, n_tokens, c, threads);
}

void rms_norm(const float* x, const float* weight, float* out,
              std::size_t rows, std::size_t dim, float eps) noexcept {
  // ggml's sum of float squares in double, element after element: one
  // chain of additions a row, bound by the addition's latency. Four rows'
  // chains run side by side (each row's order its own: the same bits),
  // so that a batch's rows (a step's sequences) overlap.
  auto finish = [&](std::size_t r, double sum) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    const float mean = static_cast<float>(sum / static_cast<double>(dim));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (std::size_t i = 0; i < dim; ++i)
      yr[i] = xr[i] * scale * weight[i];
  };
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* x0 = x + r * dim;
    const float* x1 = x0 + dim;
    const float* x2 = x1 + dim;
    const float* x3 = x2 + dim;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (std::size_t i = 0; i < dim; ++i) {
      s0 += static_cast<double>(x0[i] * x0[i]); // float squares, as ggml
      s1 += static_cast<double>(x1[i] * x1[i]);
      s2 += static_cast<double>(x2[i] * x2[i]);
      s3 += static_cast<double>(x3[i] * x3[i]);
    }
    // (out may be x: each row's sum is taken before any row is written.)
    finish(r, s0);
    finish(r + 1, s1);
    finish(r + 2, s2);
    finish(r + 3, s3);
  }
  for (; r < rows; ++r) {
    const float* xr = x + r * dim;
    double sum = 0.0;
    for (std::size_t i = 0; i < dim; ++i)
      sum += static_cast<double>(xr[i] * xr[i]);
    finish(r, sum);
  }
}

namespace {

/// ggml's rope cache of one row: cos and sin of theta_i = pos *
/// base^(-2i/n_rot) / ff[i] for each pair i, theta built by repeated
/// multiplication as in ggml_rope_cache_init. cs holds n_rot floats (cos,
/// sin per pair).
void rope_cache_row(float* cs, std::size_t n_rot, std::int64_t pos,
                    float freq_base, const float* freq_factors) noexcept {
  const float theta_scale
    = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  float theta = static_cast<float>(pos);
  for (std::size_t i0 = 0; i0 + 1 < n_rot; i0 += 2) {
    float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
    float t = theta / ff;
    cs[i0] = std::cos(t);
    cs[i0 + 1] = std::sin(t);
    theta *= theta_scale;
  }
}

/// Rotates pairs `from` .. n_rot/2 - 1 of one head xh by the cache `cs`
/// (cos, sin per pair); pair i is (xh[i * step], xh[i * step + offset])
/// with step 2, offset 1 (NORMAL) or step 1, offset n_rot / 2 (NEOX).
__attribute__((always_inline)) inline void
rotate_pairs(float* xh, const float* cs, std::size_t from, std::size_t n_rot,
             bool neox) noexcept {
  const std::size_t half = n_rot / 2;
  const std::size_t step = neox ? 1 : 2, offset = neox ? half : 1;
  for (std::size_t i = from; i < half; ++i) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    float* p = xh + i * step;
    const float x0 = p[0], x1 = p[offset];
    // ggml's rotate_pairs as GCC contracts it in llama.cpp's x86 builds
    // (checked against node-llama-cpp's zen4 library): one fused
    // multiply-add each, x1 s and x1 c rounded first.
    p[0] = std::fma(x0, c, -(x1 * s));
    p[offset] = std::fma(x0, s, x1 * c);
  }
}

/// Rotates the pairs of `heads` heads of one row by the cache `cs`
/// (rotate_pairs, every pair).
__attribute__((always_inline)) inline void
rotate_heads(float* x, const float* cs, std::size_t heads,
             std::size_t head_dim, std::size_t n_rot, bool neox) noexcept {
  for (std::size_t h = 0; h < heads; ++h)
    rotate_pairs(x + h * head_dim, cs, 0, n_rot, neox);
}

// rotate_heads in vector lanes, the same bits: x0 c - x1 s as fmsub(x0, c,
// x1 s) (one rounding of x0 c less the rounded x1 s, which is fma(x0, c,
// -(x1 s))) and x0 s + x1 c as fmadd(x0, s, x1 c). NORMAL pairs sit side
// by side in x and in cs: a vector holds whole pairs, its odd lanes swapped
// with the even (permute) give each lane its partner, cosines and sines
// duplicated (moveldup, movehdup) match them, and the even lanes take the
// first result, the odd the second. NEOX: x0 and x1 are two vectors
// n_rot / 2 apart, and cs's pairs are split into cosines and sines. The
// pairs past the last whole vector go through rotate_pairs.

__attribute__((target("avx512f,fma"))) void
rotate_heads_avx512(float* x, const float* cs, std::size_t heads,
                    std::size_t head_dim, std::size_t n_rot,
                    bool neox) noexcept {
  const std::size_t half = n_rot / 2;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18,
                                         20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19,
                                        21, 23, 25, 27, 29, 31);
  for (std::size_t h = 0; h < heads; ++h) {
    float* xh = x + h * head_dim;
    std::size_t done = 0; // pairs
    if (!neox) {
      for (; 2 * done + 16 <= n_rot; done += 8) {
        const __m512 v = _mm512_loadu_ps(xh + 2 * done);
        const __m512 p = _mm512_loadu_ps(cs + 2 * done);
        // (The maskz forms: GCC 12's plain ones start from an uninitialized
        // register and warn.)
        const __m512 c = _mm512_maskz_moveldup_ps(0xffff, p);
        const __m512 s = _mm512_maskz_movehdup_ps(0xffff, p);
        const __m512 w = _mm512_maskz_permute_ps(0xffff, v, 0xb1); // partners
        const __m512 first = _mm512_fmsub_ps(v, c, _mm512_mul_ps(w, s));
        const __m512 second = _mm512_fmadd_ps(w, s, _mm512_mul_ps(v, c));
        _mm512_storeu_ps(xh + 2 * done,
                         _mm512_mask_blend_ps(0xaaaa, first, second));
      }
    } else {
      for (; done + 16 <= half; done += 16) {
        const __m512 lo = _mm512_loadu_ps(cs + 2 * done);
        const __m512 hi = _mm512_loadu_ps(cs + 2 * done + 16);
        const __m512 c = _mm512_permutex2var_ps(lo, even, hi);
        const __m512 s = _mm512_permutex2var_ps(lo, odd, hi);
        const __m512 x0 = _mm512_loadu_ps(xh + done);
        const __m512 x1 = _mm512_loadu_ps(xh + done + half);
        _mm512_storeu_ps(xh + done,
                         _mm512_fmsub_ps(x0, c, _mm512_mul_ps(x1, s)));
        _mm512_storeu_ps(xh + done + half,
                         _mm512_fmadd_ps(x0, s, _mm512_mul_ps(x1, c)));
      }
    }
    rotate_pairs(xh, cs, done, n_rot, neox); // the pairs left over
  }
}

__attribute__((target("avx2,fma"))) void
rotate_heads_avx2(float* x, const float* cs, std::size_t heads,
                  std::size_t head_dim, std::size_t n_rot,
                  bool neox) noexcept {
  const std::size_t half = n_rot / 2;
  for (std::size_t h = 0; h < heads; ++h) {
    float* xh = x + h * head_dim;
    std::size_t done = 0; // pairs
    if (!neox) {
      for (; 2 * done + 8 <= n_rot; done += 4) {
        const __m256 v = _mm256_loadu_ps(xh + 2 * done);
        const __m256 p = _mm256_loadu_ps(cs + 2 * done);
        const __m256 c = _mm256_moveldup_ps(p), s = _mm256_movehdup_ps(p);
        const __m256 w = _mm256_permute_ps(v, 0xb1); // partners
        const __m256 first = _mm256_fmsub_ps(v, c, _mm256_mul_ps(w, s));
        const __m256 second = _mm256_fmadd_ps(w, s, _mm256_mul_ps(v, c));
        _mm256_storeu_ps(xh + 2 * done, _mm256_blend_ps(first, second, 0xaa));
      }
    } else {
      for (; done + 8 <= half; done += 8) {
        const __m256 lo = _mm256_loadu_ps(cs + 2 * done);
        const __m256 hi = _mm256_loadu_ps(cs + 2 * done + 8);
        // Within 128-bit halves, then the 64-bit quarters into order.
        const __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(
          _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xd8));
        const __m256 s = _mm256_castpd_ps(_mm256_permute4x64_pd(
          _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xdd)), 0xd8));
        const __m256 x0 = _mm256_loadu_ps(xh + done);
        const __m256 x1 = _mm256_loadu_ps(xh + done + half);
        _mm256_storeu_ps(xh + done,
                         _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
        _mm256_storeu_ps(xh + done + half,
                         _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
      }
    }
    rotate_pairs(xh, cs, done, n_rot, neox); // the pairs left over
  }
}

/// Rotates the heads of one row by cs (rotate_heads: in vector lanes where
/// the CPU has AVX-512 or AVX2 and FMA, libm's fmaf elsewhere).
void rotate_row(float* x, const float* cs, std::size_t heads,
                std::size_t head_dim, std::size_t n_rot, bool neox) noexcept {
  if (have_avx512())
    rotate_heads_avx512(x, cs, heads, head_dim, n_rot, neox);
  else if (have_avx2())
    rotate_heads_avx2(x, cs, heads, head_dim, n_rot, neox);
  else
    rotate_heads(x, cs, heads, head_dim, n_rot, neox); // libm's fmaf
}

/// Rotates heads of one row at `pos` (see rotate_heads).
void rope_heads(float* x, std::size_t heads, std::size_t head_dim,
                std::size_t n_rot, std::int64_t pos, float freq_base,
                const float* freq_factors, bool neox) noexcept {
  thread_local std::vector<float> cs; // the row's cache, reused
  if (cs.size() < n_rot)
    cs.resize(n_rot);
  rope_cache_row(cs.data(), n_rot, pos, freq_base, freq_factors);
  rotate_row(x, cs.data(), heads, head_dim, n_rot, neox);
}

} // namespace

void rope_row(float* x, std::size_t heads, std::size_t head_dim,
              std::size_t n_rot, std::int64_t pos, float freq_base,
              const float* freq_factors) noexcept {
  rope_heads(x, heads, head_dim, n_rot, pos, freq_base, freq_factors, false);
}

void rope_row_neox(float* x, std::size_t heads, std::size_t head_dim,
                   std::size_t n_rot, std::int64_t pos, float freq_base,
                   const float* freq_factors) noexcept {
  rope_heads(x, heads, head_dim, n_rot, pos, freq_base, freq_factors, true);
}

void rope(float* x, const std::int32_t* positions, const float* freq_factors,
          const rope_dims& d) noexcept {
  const std::size_t row = d.heads * d.head_dim;
  for (std::size_t r = 0; r < d.rows; ++r)
    rope_heads(x + r * row, d.heads, d.head_dim, d.n_rot, positions[r],
               d.freq_base, freq_factors, d.neox);
}

void rope_cache(float* cs, const std::int32_t* positions,
                const float* freq_factors, const rope_dims& d) noexcept {
  for (std::size_t r = 0; r < d.rows; ++r)
    rope_cache_row(cs + r * d.n_rot, d.n_rot, positions[r], d.freq_base,
                   freq_factors);
}

void rope_cached(float* x, const float* cs, const rope_dims& d) noexcept {
  const std::size_t row = d.heads * d.head_dim;
  for (std::size_t r = 0; r < d.rows; ++r)
    rotate_row(x + r * row, cs + r * d.n_rot, d.heads, d.head_dim, d.n_rot,
               d.neox);
}

void softmax(float* x, std::size_t n) noexcept {
  float mx = -INFINITY;
  for (std::size_t i = 0; i < n; ++i)
    mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    float e = std::exp(x[i] - mx);
    sum += e;
    x[i] = e;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (std::size_t i = 0; i < n; ++i)
    x[i] *= inv;
}

isa widest_isa() noexcept {
  return have_avx512() ? isa::avx512 : have_avx2() ? isa::avx2 : isa::scalar;
}

bool have_vnni() noexcept {
  static const bool yes = __builtin_cpu_supports("avx512vnni")
                          && __builtin_cpu_supports("avx512bw")
                          && __builtin_cpu_supports("avx512vl");
  return yes && have_avx512();
}

namespace {

std::atomic<bool> amx_allowed{true};

/// CPUID.(7,0): EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), ECX bit 1
/// (AVX-512 VBMI); XCR0 bits 17 and 18 (the OS saves the tile state); then
/// the kernel's permission for this process's tile data (Linux 5.16+:
/// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)), which it refuses
/// where a thread's alternate signal stack is too small for the state.
bool cpu_grants_amx() noexcept {
#if defined(__linux__) && defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0)
    return false;
  if ((d & (1u << 24)) == 0 || (d & (1u << 25)) == 0 || (c & (1u << 1)) == 0)
    return false;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & (1u << 27)) == 0)
    return false; // no OSXSAVE: xgetbv would fault
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17))
    return false;
  constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata)
         == 0;
#else
  return false;
#endif
}

} // namespace

bool have_amx() noexcept {
  static const bool granted = cpu_grants_amx();
  return granted && amx_allowed.load(std::memory_order_relaxed)
         && have_vnni();
}

void allow_amx(bool allowed) noexcept {
  amx_allowed.store(allowed, std::memory_order_relaxed);
}

// -- checks and sizes -------------------------------------------------------

namespace {

/// a * b, or nothing on overflow.
bool mul_ok(std::size_t a, std::size_t b, std::size_t& out) {
  if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b)
    return false;
  out = a * b;
  return true;
}

error overflow(const char* what) {
  return {errc::invalid_argument, std::string{what} + ": size overflows"};
}

} // namespace

result<weights_bytes> check_matmul_weights(weight_type t,
                                           const matmul_dims& dims) {
  matmul_dims d = dims;
  d.transpose_b = true;
  EXO_TRY(check_matmul_dims(d));
  auto rb = weight_row_bytes(t, d.k);
  if (!rb)
    return error{rb.err().code, "matmul_weights: " + rb.err().message};
  if (t == weight_type::q4_k_x16 && d.n % quant::q4_k_x16_rows != 0)
    return fail(errc::invalid_argument,
                "matmul_weights: q4_k_x16 weights hold whole groups of 16 "
                "rows, got " + std::to_string(d.n));
  weights_bytes out{};
  if (!mul_ok(*rb, d.n, out.w))
    return overflow("matmul_weights");
  auto sz = bytes_of(d);
  out.a = sz.a;
  out.c = sz.c;
  return out;
}

result<std::size_t> check_rms_norm(std::size_t rows, std::size_t dim) {
  if (rows == 0 || dim == 0)
    return fail(errc::invalid_argument, "rms_norm: rows and dim must be > 0");
  auto b = f32_bytes(rows, dim);
  if (!b)
    return overflow("rms_norm");
  return *b;
}

result<rope_bytes> check_rope(const rope_dims& d) {
  if (d.rows == 0 || d.heads == 0 || d.head_dim == 0)
    return fail(errc::invalid_argument,
                "rope: rows, heads and head_dim must be > 0");
  if (d.n_rot < 2 || d.n_rot % 2 != 0 || d.n_rot > d.head_dim)
    return fail(errc::invalid_argument,
                "rope: n_rot must be even and in [2, head_dim], got "
                  + std::to_string(d.n_rot));
  if (!(d.freq_base > 0.0f) || !std::isfinite(d.freq_base))
    return fail(errc::invalid_argument, "rope: freq_base must be > 0");
  std::size_t row = 0;
  if (!mul_ok(d.heads, d.head_dim, row))
    return overflow("rope");
  auto x = f32_bytes(d.rows, row);
  if (!x || d.rows > static_cast<std::size_t>(
                       std::numeric_limits<std::int32_t>::max()))
    return overflow("rope");
  std::size_t cache = 0;
  if (!mul_ok(d.rows, d.n_rot, cache) || !mul_ok(cache, 4, cache))
    return overflow("rope");
  return rope_bytes{*x, d.rows * 4, d.n_rot / 2 * 4, cache};
}

result<attention_bytes> check_attention(const attention_dims& d) {
  if (d.n_tokens == 0 || d.n_heads == 0 || d.n_kv_heads == 0
      || d.head_dim == 0)
    return fail(errc::invalid_argument, "attention: n_tokens, n_heads, "
                                        "n_kv_heads and head_dim must be > 0");
  if (d.n_heads % d.n_kv_heads != 0)
    return fail(errc::invalid_argument,
                "attention: n_kv_heads (" + std::to_string(d.n_kv_heads)
                  + ") must divide n_heads (" + std::to_string(d.n_heads)
                  + ")");
  if (!std::isfinite(d.scale))
    return fail(errc::invalid_argument, "attention: scale must be finite");
  std::size_t kv_row = 0, q_row = 0;
  if (!mul_ok(d.n_kv_heads, d.head_dim, kv_row)
      || !mul_ok(d.n_heads, d.head_dim, q_row))
    return overflow("attention");
  if (d.kv_stride < kv_row)
    return fail(errc::invalid_argument,
                "attention: kv_stride " + std::to_string(d.kv_stride)
                  + " is less than n_kv_heads * head_dim = "
                  + std::to_string(kv_row));
  const std::size_t block = kv_block_values(d.kv);
  if (d.head_dim % block != 0 || d.kv_stride % block != 0)
    return fail(errc::invalid_argument,
                std::string{"attention: a "} + to_string(d.kv)
                  + " cache needs head_dim (" + std::to_string(d.head_dim)
                  + ") and kv_stride (" + std::to_string(d.kv_stride)
                  + ") to be multiples of " + std::to_string(block));
  constexpr auto limit
    = static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max());
  if (d.pos0 > limit || d.n_tokens > limit - d.pos0)
    return overflow("attention");
  auto q = f32_bytes(d.n_tokens, q_row);
  std::size_t last = 0, kv = 0;
  if (!q || !mul_ok(d.pos0 + d.n_tokens - 1, d.kv_stride, last)
      || last > std::numeric_limits<std::size_t>::max() - kv_row
      || !mul_ok((last + kv_row) / block, kv_block_bytes(d.kv), kv))
    return overflow("attention");
  return attention_bytes{*q, kv};
}

result<paged_attention_bytes> check_paged_attention(const attention_dims& d) {
  auto base = d;
  base.block_positions = 0;
  base.pos0 = 0;
  base.n_tokens = 1;
  auto one = check_attention(base); // the shape, and one row's bytes
  if (!one)
    return one.err();
  auto all = check_attention(d); // positions in range (no bytes used)
  if (!all)
    return all.err();
  const std::size_t B = d.block_positions;
  if (B == 0 || (B & (B - 1)) != 0 || B > (std::size_t{1} << 20))
    return fail(errc::invalid_argument,
                "attention_paged: block_positions "
                  + std::to_string(B)
                  + " must be a power of two up to 1048576");
  std::size_t span = 0;
  if (!mul_ok(B, d.kv_stride, span))
    return overflow("attention_paged");
  const std::size_t per = kv_block_values(d.kv);
  if (d.block_stride < span || d.block_stride % per != 0)
    return fail(errc::invalid_argument,
                "attention_paged: block_stride " + std::to_string(d.block_stride)
                  + " must hold block_positions * kv_stride = "
                  + std::to_string(span) + " values and be a multiple of "
                  + std::to_string(per));
  const std::size_t rows_values = (B - 1) * d.kv_stride
                                  + d.n_kv_heads * d.head_dim;
  std::size_t block = 0;
  if (!mul_ok(d.block_stride / per, kv_block_bytes(d.kv), block))
    return overflow("attention_paged");
  return paged_attention_bytes{all->q, attention_blocks(d) * 4,
                               rows_values / per * kv_block_bytes(d.kv),
                               block};
}

std::size_t view_extent(const_view v) noexcept {
  std::size_t size = v.buf->size();
  if (v.limit != 0 && v.limit < size)
    size = v.limit;
  return v.offset <= size ? size - v.offset : 0;
}

status check_row_position(const char* op, std::size_t row, std::int32_t pos,
                          std::size_t table_len,
                          std::size_t block_positions) {
  if (pos >= 0
      && static_cast<std::size_t>(pos) < table_len * block_positions)
    return {};
  return fail(errc::out_of_range,
              std::string{op} + ": row " + std::to_string(row)
                + "'s position " + std::to_string(pos)
                + " is outside its table of " + std::to_string(table_len)
                + " blocks of " + std::to_string(block_positions));
}

status check_block_table(const std::int32_t* table, std::size_t n,
                         const paged_attention_bytes& sz,
                         std::size_t k_extent, std::size_t v_extent) {
  const std::size_t extent = std::min(k_extent, v_extent);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t b = table[i];
    std::size_t start = 0;
    if (b < 0 || !mul_ok(static_cast<std::size_t>(b), sz.block, start)
        || start > extent || sz.block_rows > extent - start)
      return fail(errc::out_of_range,
                  "attention_paged: block table entry " + std::to_string(i)
                    + " (" + std::to_string(b)
                    + ") names a block outside the cache's "
                    + std::to_string(extent) + " bytes");
  }
  return {};
}

int bind_threads(int threads) noexcept {
#if defined(_OPENMP)
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (threads < 2
      || pthread_getaffinity_np(pthread_self(), sizeof mask, &mask) != 0)
    return 0;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask))
      cpus.push_back(c);
  if (static_cast<std::size_t>(threads) > cpus.size())
    return 0;
  std::atomic<int> bound{0};
#  pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    if (t < threads) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[static_cast<std::size_t>(t)], &one);
      if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0)
        bound.fetch_add(1);
    }
  }
  return bound.load();
#else
  (void)threads;
  return 0;
#endif
}

} // namespace exo::backend::host
