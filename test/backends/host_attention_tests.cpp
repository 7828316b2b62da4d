// The host attention and SwiGLU kernels against a plain scalar transcription
// of llama.cpp's CPU code (ggml-cpu/ops.cpp
// ggml_compute_forward_flash_attn_ext_f16_one_chunk and _tiled, vec.h/vec.cpp
// ggml_vec_dot_f16, ggml_vec_mad_f16, ggml_vec_scale_f16,
// ggml_vec_soft_max_f32, ggml_v_expf and ggml_vec_swiglu_f32 of the AVX-512
// build, simd-gemm.h): bit for bit, on every instruction set the CPU has and
// any thread count. The transcription keeps ggml's data layout (an F16 cache
// padded to 256 cells, 0 / -inf masks, 64 x 64 tiles), so it also checks
// that exo's row-by-row shortcuts (no padding, no mask, skipped cells) give
// ggml's bits.

#include "backends/backend.hpp"
#include "backends/host_kernels.hpp"
#include "test/support/all_work_split.hpp"
#include "test/support/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace exo::backend;

using exo::test::random_floats;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

using f16 = std::uint16_t;
f16 to_f16(float x) {
  return host::f32_to_f16(x);
}
float to_f32(f16 h) {
  return host::f16_to_f32(h);
}

// -- ggml, transcribed --------------------------------------------------------

/// _mm512_reduce_add_ps.
float reduce_add_16(const float* x) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i)
    t3[i] = x[i + 8] + x[i];
  for (int i = 0; i < 4; ++i)
    t6[i] = t3[i + 4] + t3[i];
  float t8[2] = {t6[0] + t6[2], t6[1] + t6[3]};
  return t8[0] + t8[1];
}

/// ggml_v_expf (__AVX512F__), one lane; _mm512_scalef_ps as ldexpf.
float v_expf(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const bool d = std::fabs(n) > 192.0f;
  const float u = b * b;
  const float j =
      std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                        std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
               u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (!d)
    return std::ldexp(j, static_cast<int>(n));
  return n <= 0.0f ? 0.0f : inf;
}

/// ggml_vec_swiglu_f32.
void vec_swiglu(int n, float* y, const float* x, const float* g) {
  int i = 0;
  for (; i + 15 < n; i += 16)
    for (int l = i; l < i + 16; ++l)
      y[l] = x[l] / (1.0f + v_expf(0.0f - x[l])) * g[l];
  for (; i < n; ++i)
    y[i] = x[i] / (1.0f + std::exp(-x[i])) * g[i];
}

/// ggml_vec_dot_f16 (GGML_F16_STEP 64, GGML_F16_EPR 16).
float vec_dot_f16(int n, const f16* x, const f16* y) {
  double sumf = 0.0;
  const int np = n & ~63;
  float sum[4][16] = {};
  for (int i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l)
        sum[j][l] = std::fma(to_f32(x[i + 16 * j + l]),
                             to_f32(y[i + 16 * j + l]), sum[j][l]);
  for (int l = 0; l < 16; ++l) {
    sum[0][l] = sum[0][l] + sum[2][l];
    sum[1][l] = sum[1][l] + sum[3][l];
    sum[0][l] = sum[0][l] + sum[1][l];
  }
  sumf = reduce_add_16(sum[0]);
  for (int i = np; i < n; ++i)
    sumf += static_cast<double>(to_f32(x[i]) * to_f32(y[i]));
  return static_cast<float>(sumf);
}

/// ggml_vec_mad_f16 (the SIMD part; the x86 build fuses the leftovers too).
void vec_mad_f16(int n, f16* y, const f16* x, float v) {
  for (int i = 0; i < n; ++i)
    y[i] = to_f16(std::fma(to_f32(x[i]), v, to_f32(y[i])));
}

/// ggml_vec_scale_f16.
void vec_scale_f16(int n, f16* y, float v) {
  for (int i = 0; i < n; ++i)
    y[i] = to_f16(to_f32(y[i]) * v);
}

/// ggml_vec_soft_max_f32 (16-lane groups; n is a multiple of 16 here).
double vec_soft_max(int n, float* y, const float* x, float max) {
  double sum = 0.0;
  for (int i = 0; i + 15 < n; i += 16) {
    float val[16];
    for (int l = 0; l < 16; ++l)
      val[l] = v_expf(x[i + l] - max);
    std::memcpy(y + i, val, sizeof val);
    sum += static_cast<double>(reduce_add_16(val));
  }
  return sum;
}

/// simd_gemm: C[M x N] += A[M x K] * B[K x N], each element a chain of
/// fused multiply-adds over K in order (N a multiple of 16).
void simd_gemm(float* c, const float* a, const float* b, int m, int k, int n) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float acc = c[i * n + j];
      for (int kk = 0; kk < k; ++kk)
        acc = std::fma(b[kk * n + j], a[i * k + kk], acc);
      c[i * n + j] = acc;
    }
}

/// llama.cpp's view of exo's cache: F16 K and V of n_kv cells (padded to a
/// multiple of 256 with zero cells, as its cleared cache), a 0 / -inf causal
/// mask, Q as [n_heads][n_tokens][DK] rows.
struct ggml_case {
  int dk = 0, n_tokens = 0, n_heads = 0, n_kv_heads = 0, n_kv = 0;
  float scale = 1.0f;
  std::vector<float> q;   // [n_heads][n_tokens][dk]
  std::vector<f16> k, v;  // [n_kv_heads][n_kv][dk]
  std::vector<f16> mask;  // [n_tokens][n_kv]
  std::vector<float> out; // [n_tokens][n_heads][dk]

  ggml_case(const std::vector<float>& qx, const std::vector<float>& kx,
            const std::vector<float>& vx, const attention_dims& d)
      : dk(static_cast<int>(d.head_dim)),
        n_tokens(static_cast<int>(d.n_tokens)),
        n_heads(static_cast<int>(d.n_heads)),
        n_kv_heads(static_cast<int>(d.n_kv_heads)),
        scale(d.scale) {
    const int used = static_cast<int>(d.pos0 + d.n_tokens);
    n_kv = (used + 255) / 256 * 256;
    q.resize(static_cast<std::size_t>(n_heads * n_tokens * dk));
    for (int h = 0; h < n_heads; ++h)
      for (int t = 0; t < n_tokens; ++t)
        for (int i = 0; i < dk; ++i)
          q[(h * n_tokens + t) * dk + i] = qx[(t * n_heads + h) * dk + i];
    k.assign(static_cast<std::size_t>(n_kv_heads * n_kv * dk), 0);
    v.assign(k.size(), 0);
    for (int g = 0; g < n_kv_heads; ++g)
      for (int c = 0; c < used; ++c)
        for (int i = 0; i < dk; ++i) {
          std::size_t src = c * d.kv_stride + g * dk + i;
          k[(g * n_kv + c) * dk + i] = to_f16(kx[src]);
          v[(g * n_kv + c) * dk + i] = to_f16(vx[src]);
        }
    mask.resize(static_cast<std::size_t>(n_tokens * n_kv));
    for (int t = 0; t < n_tokens; ++t)
      for (int c = 0; c < n_kv; ++c)
        mask[t * n_kv + c] =
            to_f16(c <= static_cast<int>(d.pos0) + t ? 0.0f : -inf);
    out.resize(static_cast<std::size_t>(n_tokens * n_heads * dk));
  }

  const f16* k_row(int g, int c) const {
    return k.data() + (g * n_kv + c) * dk;
  }
  const f16* v_row(int g, int c) const {
    return v.data() + (g * n_kv + c) * dk;
  }
  float* out_row(int t, int h) { return out.data() + (t * n_heads + h) * dk; }

  /// ggml_compute_forward_flash_attn_ext_f16_one_chunk for query row t of
  /// head h (q16: the row rounded to half) over cells [ic_start, ic_end):
  /// its running maximum and sum, the V sum left in vkq16, unnormalized.
  std::pair<float, float> chunk_partial(int h, int t, const f16* q16,
                                        int ic_start, int ic_end,
                                        std::vector<f16>& vkq16) const {
    const int group = n_heads / n_kv_heads;
    float S = 0.0f, M = -inf;
    std::fill(vkq16.begin(), vkq16.end(), f16{0});
    const f16* mp = mask.data() + t * n_kv;
    for (int ic = ic_start; ic < ic_end; ++ic) {
      const float mv = 1.0f * to_f32(mp[ic]);
      if (mv == -inf)
        continue;
      float s = vec_dot_f16(dk, k_row(h / group, ic), q16);
      s = s * scale;
      s += mv;
      const float Mold = M;
      float ms = 1.0f, vs = 1.0f;
      if (s > M) {
        M = s;
        ms = std::exp(Mold - M);
        vec_scale_f16(dk, vkq16.data(), ms);
      } else {
        vs = std::exp(s - M);
      }
      vec_mad_f16(dk, vkq16.data(), v_row(h / group, ic), vs);
      S = S * ms + vs; // this file is compiled without contraction
    }
    return {M, S};
  }

  /// Query row t of head h rounded to half, as one_chunk converts it.
  void q_half(int h, int t, std::vector<f16>& q16) const {
    const float* pq = q.data() + (h * n_tokens + t) * dk;
    for (int i = 0; i < dk; ++i)
      q16[i] = to_f16(pq[i]);
  }

  /// ggml_compute_forward_flash_attn_ext_f16_one_chunk, all rows.
  void one_chunk() {
    std::vector<f16> q16(dk), vkq16(dk);
    for (int h = 0; h < n_heads; ++h)
      for (int t = 0; t < n_tokens; ++t) {
        q_half(h, t, q16);
        const float S = chunk_partial(h, t, q16.data(), 0, n_kv, vkq16).second;
        const float S_inv = S == 0.0f ? 0.0f : 1.0f / S;
        for (int d = 0; d < dk; ++d)
          out_row(t, h)[d] = to_f32(vkq16[d]) * S_inv;
      }
  }

  /// ggml_compute_forward_flash_attn_ext_f16's split-KV path with nth
  /// threads (one token): one_chunk over each thread's chunk of the padded
  /// cells, partials (M, S, VKQ widened to F32), then
  /// ggml_flash_attn_ext_reduce_partials. The merge's two products are
  /// contracted as GCC does in llama.cpp's build: the first one fused.
  void split(int nth) {
    REQUIRE(n_tokens == 1);
    const int chunk_size = (n_kv + nth - 1) / nth;
    std::vector<f16> q16(dk), vkq16(dk);
    std::vector<float> fin(dk);
    for (int h = 0; h < n_heads; ++h) {
      q_half(h, 0, q16);
      float M_final = -inf, S_final = 0.0f;
      std::fill(fin.begin(), fin.end(), 0.0f);
      for (int c = 0; c < nth; ++c) {
        const int ic_start = c * chunk_size;
        if (ic_start >= n_kv)
          continue; // M = -inf, S = 0
        const int ic_end = std::min(ic_start + chunk_size, n_kv);
        const auto [M, S] =
          chunk_partial(h, 0, q16.data(), ic_start, ic_end, vkq16);
        if (S == 0.0f)
          continue;
        const float M_new = std::fmax(M_final, M);
        const float scale_old = std::exp(M_final - M_new);
        const float scale_new = std::exp(M - M_new);
        for (int d = 0; d < dk; ++d)
          fin[d] = std::fma(fin[d], scale_old, to_f32(vkq16[d]) * scale_new);
        S_final = std::fma(S_final, scale_old, S * scale_new);
        M_final = M_new;
      }
      if (S_final != 0.0f) {
        const float S_inv = 1.0f / S_final;
        for (auto& x : fin)
          x *= S_inv;
      }
      std::copy(fin.begin(), fin.end(), out_row(0, h));
    }
  }

  /// ggml_compute_forward_flash_attn_ext_tiled, all rows.
  void tiled() {
    constexpr int QT = 64, KT = 64;
    const int group = n_heads / n_kv_heads;
    std::vector<float> Q(QT * dk), KQ(QT * KT), mask32(QT * KT), VKQ(QT * dk),
        V32(KT * dk), K32(KT * dk);
    const int nr = n_heads * n_tokens;
    int ir = 0;
    while (ir < nr) {
      const int iq2 = ir / n_tokens, iq1 = ir % n_tokens;
      const int rows = std::min(QT, std::min(nr - ir, n_tokens - iq1));
      float S[QT], M[QT];
      for (int i = 0; i < QT; ++i) {
        S[i] = 0.0f;
        M[i] = -inf;
      }
      std::fill(VKQ.begin(), VKQ.end(), 0.0f);
      std::fill(mask32.begin(), mask32.end(), 0.0f);
      const int ik2 = iq2 / group;
      for (int tq = 0; tq < QT; ++tq)
        for (int i = 0; i < dk; ++i)
          Q[tq * dk + i] =
              tq < rows ? q[(iq2 * n_tokens + iq1 + tq) * dk + i] : 0.0f;
      std::fill(K32.begin(), K32.end(), 0.0f);
      std::fill(V32.begin(), V32.end(), 0.0f);
      for (int ic = 0; ic < n_kv; ic += KT) {
        const int kv_tile = std::min(KT, n_kv - ic);
        bool can_skip = true;
        for (int tq = 0; tq < rows; ++tq) {
          const f16* mp = mask.data() + (iq1 + tq) * n_kv;
          for (int tk = 0; tk < kv_tile; ++tk) {
            mask32[tq * KT + tk] = 1.0f * to_f32(mp[ic + tk]);
            if (mask32[tq * KT + tk] != -inf)
              can_skip = false;
          }
          for (int tk = kv_tile; tk < KT; ++tk)
            mask32[tq * KT + tk] = -inf;
        }
        if (can_skip)
          continue;
        for (int tk = 0; tk < kv_tile; ++tk)
          for (int d = 0; d < dk; ++d)
            K32[d * KT + tk] = to_f32(k_row(ik2, ic + tk)[d]);
        std::fill(KQ.begin(), KQ.end(), 0.0f);
        simd_gemm(KQ.data(), Q.data(), K32.data(), QT, dk, KT);
        for (auto& x : KQ)
          x *= scale;
        for (int tq = 0; tq < QT; ++tq)
          for (int tk = kv_tile; tk < KT; ++tk)
            KQ[tq * KT + tk] = -inf;
        for (int i = 0; i < rows * KT; ++i)
          KQ[i] = KQ[i] + mask32[i];
        bool skip[QT] = {};
        for (int tq = 0; tq < QT; ++tq) {
          float* row = KQ.data() + tq * KT;
          float tile_max = -inf;
          for (int i = 0; i < KT; ++i)
            tile_max = tile_max > row[i] ? tile_max : row[i];
          if (tile_max == -inf) {
            skip[tq] = true;
            continue;
          }
          const float Mold = M[tq];
          const float Mnew = std::fmax(Mold, tile_max);
          if (Mnew > Mold) {
            const float ms = std::exp(Mold - Mnew);
            for (int d = 0; d < dk; ++d)
              VKQ[tq * dk + d] *= ms;
            S[tq] *= ms;
          }
          M[tq] = Mnew;
          S[tq] += vec_soft_max(KT, row, row, Mnew);
        }
        for (int tk = 0; tk < kv_tile; ++tk)
          for (int d = 0; d < dk; ++d)
            V32[tk * dk + d] = to_f32(v_row(ik2, ic + tk)[d]);
        for (int tq = 0; tq < QT; ++tq)
          if (skip[tq])
            std::fill(KQ.begin() + tq * KT, KQ.begin() + (tq + 1) * KT, 0.0f);
        simd_gemm(VKQ.data(), KQ.data(), V32.data(), QT, KT, dk);
      }
      for (int tq = 0; tq < rows; ++tq) {
        const float S_inv = S[tq] == 0.0f ? 0.0f : 1.0f / S[tq];
        for (int d = 0; d < dk; ++d)
          out_row(iq1 + tq, iq2)[d] = VKQ[tq * dk + d] * S_inv;
      }
      ir += rows;
    }
  }
};

/// ggml's choice with nth threads: tiled from 64 tokens when DV % 16 == 0;
/// the split-KV path for one token over >= 512 padded cells (one_chunk on
/// one thread).
std::vector<float> ggml_attention(const std::vector<float>& q,
                                  const std::vector<float>& k,
                                  const std::vector<float>& v,
                                  const attention_dims& d, int nth = 1) {
  ggml_case c(q, k, v, d);
  if (d.n_tokens >= 64 && d.head_dim % 16 == 0)
    c.tiled();
  else if (d.n_tokens == 1 && c.n_kv >= 512 && nth > 1)
    c.split(nth);
  else
    c.one_chunk();
  return c.out;
}

std::vector<host::isa> isas() {
  // limit_isa caps at what the CPU has, so every cap is safe to try.
  return {host::isa::avx512, host::isa::avx2, host::isa::scalar};
}

void require_same_bits(const std::vector<float>& got,
                       const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(bits_of(got[i]) == bits_of(want[i]));
  }
}

} // namespace

TEST_CASE("an attention runs on several threads only when its work pays "
          "for them") {
  struct shape {
    std::size_t n_tokens, pos0, n_heads;
    bool splits;
  };
  // Heads of 64. A small model's decode over a short context stays on one
  // thread; a 1B model's (32 heads) splits from 512 visible positions (1
  // Mi multiply-adds); a prompt of 8 heads from 0 from 64 rows (32.5
  // visible positions a row).
  const shape shapes[] = {{1, 50, 8, false},  {1, 511, 32, true},
                          {1, 510, 32, false}, {64, 0, 8, true},
                          {63, 0, 8, false}};
  for (const auto& s : shapes) {
    attention_dims d;
    d.n_tokens = s.n_tokens;
    d.pos0 = s.pos0;
    d.n_heads = s.n_heads;
    d.n_kv_heads = 4;
    d.head_dim = 64;
    INFO(s.n_tokens << " rows from " << s.pos0 << ", " << s.n_heads
                    << " heads");
    CHECK(host::attention_splits(d) == s.splits);
    exo::test::all_work_split all;
    CHECK(host::attention_splits(d));
  }
}

TEST_CASE("attention computes llama.cpp's CPU flash attention bit for bit") {
  exo::test::all_work_split all; // threads 3 split every attention
  std::mt19937 rng{21};
  struct shape {
    std::size_t n_tokens, pos0, n_heads, n_kv_heads, head_dim, stride;
    float qk_range;
  };
  // one_chunk: single tokens (from position 256, 512 padded cells, ggml's
  // split-KV path with more than one llama.cpp thread: 3 threads over 512
  // cells leave a chunk with no visible cell, over 1280 every chunk has
  // some),
  // 63 tokens, a head of 80 (leftovers after 64), a head of 24; tiled: 64
  // and 130 tokens (a partial Q tile) with GQA and heads of 64 and 128; a
  // 70-token batch with heads of 24 stays one_chunk; GQA groups of 7, 6,
  // 5 and 3 heads of 64 and 128 (the AVX-512 kernel's blocks of 4 and 2
  // heads with a rest); heads of 16, 32 and 48 (all of the row in ggml's
  // double rest) and 80 and 96 (a block of 64 and a rest) in GQA groups
  // of 1-5, over cells that fill the kernel's steps of 16 and not; 3 and
  // 4 heads of 80, 96 and 128 (the accumulators in slices). Large
  // score ranges make the online softmax rescale often.
  for (auto s :
       {shape{1, 0, 2, 2, 64, 128, 1.0f}, shape{1, 37, 4, 2, 128, 256, 3.0f},
        shape{1, 600, 8, 2, 64, 128, 2.0f}, shape{1, 256, 4, 2, 64, 128, 3.0f},
        shape{1, 255, 4, 2, 64, 128, 3.0f}, shape{1, 1100, 2, 1, 80, 80, 2.0f},
        shape{63, 5, 4, 1, 64, 64, 2.0f},
        shape{5, 9, 2, 1, 80, 80, 2.0f}, shape{3, 2, 2, 2, 24, 48, 1.0f},
        shape{64, 0, 4, 4, 64, 256, 2.0f}, shape{130, 20, 4, 2, 128, 256, 1.5f},
        shape{65, 530, 2, 1, 64, 64, 4.0f}, shape{70, 0, 2, 1, 24, 24, 1.0f},
        shape{1, 300, 7, 1, 64, 64, 3.0f}, shape{1, 700, 12, 2, 128, 256, 3.0f},
        shape{3, 40, 10, 2, 64, 128, 2.0f}, shape{2, 600, 3, 1, 128, 128, 3.0f},
        shape{1, 700, 8, 4, 32, 128, 3.0f}, shape{1, 33, 4, 1, 32, 32, 2.0f},
        shape{2, 17, 6, 1, 16, 16, 4.0f}, shape{1, 530, 6, 2, 48, 96, 2.0f},
        shape{1, 300, 4, 2, 96, 192, 3.0f}, shape{1, 1100, 6, 2, 80, 160, 2.0f},
        shape{4, 90, 10, 2, 32, 64, 8.0f}, shape{1, 400, 8, 2, 96, 192, 3.0f},
        shape{2, 70, 4, 1, 80, 80, 2.0f}}) {
    attention_dims d{s.n_tokens,
                     s.pos0,
                     s.n_heads,
                     s.n_kv_heads,
                     s.head_dim,
                     s.stride,
                     1.0f / std::sqrt(static_cast<float>(s.head_dim))};
    const std::size_t n_ctx = s.pos0 + s.n_tokens;
    auto q = random_floats(rng, s.n_tokens * s.n_heads * s.head_dim,
                           -s.qk_range, s.qk_range);
    auto k = random_floats(rng, n_ctx * s.stride, -s.qk_range, s.qk_range);
    auto v = random_floats(rng, n_ctx * s.stride, -1.0f, 1.0f);
    INFO("n_tokens " << s.n_tokens << " pos0 " << s.pos0 << " heads "
                     << s.n_heads << "/" << s.n_kv_heads << " head_dim "
                     << s.head_dim);
    CHECK(host::attention_tiled_path(d) ==
          (s.n_tokens >= 64 && s.head_dim % 16 == 0));
    // The same cache stored as halves (an f16 cache, written by to_f16).
    std::vector<std::uint16_t> k16(k.size()), v16(v.size());
    host::to_f16(k.data(), k16.data(), k.size());
    host::to_f16(v.data(), v16.data(), v.size());
    // llama.cpp's bits with 1, 2 and 3 threads (they differ only on the
    // split-KV path); exo's own thread count and the cache's type change
    // nothing.
    for (int llama_threads : {1, 2, 3}) {
      const auto want = ggml_attention(q, k, v, d, llama_threads);
      CHECK(host::attention_split_kv(d, llama_threads)
            == (s.n_tokens == 1 && s.pos0 >= 256 && llama_threads > 1));
      for (auto widest : isas())
        for (int threads : {1, 3}) {
          INFO("isa " << static_cast<int>(widest) << " threads " << threads
                      << " llama.cpp threads " << llama_threads);
          host::limit_isa(widest);
          std::vector<float> got(q.size());
          host::attention(q.data(), k.data(), v.data(), got.data(), d,
                          threads, llama_threads);
          require_same_bits(got, want);
          std::vector<float> got16(q.size());
          auto d16 = d;
          d16.kv = kv_type::f16;
          host::attention(q.data(), k16.data(), v16.data(), got16.data(),
                          d16, threads, llama_threads);
          require_same_bits(got16, want);
        }
    }
    host::limit_isa(host::isa::avx512);
  }
}

TEST_CASE("attention through a block table gives the bits of the same rows "
          "in one run on every instruction set") {
  // The grouped-head kernels (AVX-512's steps of 16 cells, AVX2's of 8)
  // read every row through the table: blocks of 16 rows in a shuffled
  // order with unused blocks between, against the same rows in one run.
  std::mt19937 rng{27};
  struct shape {
    std::size_t pos0, n_heads, n_kv_heads, head_dim;
  };
  for (auto s : {shape{100, 8, 4, 32}, shape{300, 4, 1, 64},
                 shape{77, 6, 2, 128}, shape{600, 3, 1, 80},
                 shape{40, 14, 2, 16}}) {
    const std::size_t B = 16, stride = s.n_kv_heads * s.head_dim;
    const std::size_t n_pos = s.pos0 + 1;
    attention_dims d{1,
                     s.pos0,
                     s.n_heads,
                     s.n_kv_heads,
                     s.head_dim,
                     stride,
                     1.0f / std::sqrt(static_cast<float>(s.head_dim))};
    d.kv = kv_type::f16;
    auto q = random_floats(rng, s.n_heads * s.head_dim, -3.0f, 3.0f);
    std::vector<std::uint16_t> k(n_pos * stride), v(n_pos * stride);
    {
      auto kf = random_floats(rng, k.size(), -3.0f, 3.0f);
      auto vf = random_floats(rng, v.size(), -1.0f, 1.0f);
      host::to_f16(kf.data(), k.data(), k.size());
      host::to_f16(vf.data(), v.data(), v.size());
    }
    const std::size_t n_blocks = (n_pos + B - 1) / B;
    std::vector<std::int32_t> table(n_blocks);
    for (std::size_t i = 0; i < n_blocks; ++i)
      table[i] = static_cast<std::int32_t>(2 * i + 1);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<std::uint16_t> pk((2 * n_blocks + 2) * B * stride, 0x7e00),
      pv(pk);
    for (std::size_t p = 0; p < n_pos; ++p) {
      const std::size_t at =
        (static_cast<std::size_t>(table[p / B]) * B + p % B) * stride;
      std::copy_n(k.begin() + p * stride, stride, pk.begin() + at);
      std::copy_n(v.begin() + p * stride, stride, pv.begin() + at);
    }
    auto dp = d;
    dp.block_positions = B;
    dp.block_stride = B * stride;
    dp.block_table = table.data();
    for (auto widest : isas()) {
      INFO("pos0 " << s.pos0 << " heads " << s.n_heads << "/"
                   << s.n_kv_heads << " head_dim " << s.head_dim << " isa "
                   << static_cast<int>(widest));
      host::limit_isa(widest);
      std::vector<float> want(q.size()), got(q.size());
      host::attention(q.data(), k.data(), v.data(), want.data(), d, 1);
      host::attention(q.data(), pk.data(), pv.data(), got.data(), dp, 2);
      require_same_bits(got, want);
    }
    host::limit_isa(host::isa::avx512);
  }
}

TEST_CASE("attention reads K and V as halves: pre-rounded caches change "
          "nothing") {
  std::mt19937 rng{22};
  for (std::size_t n_tokens : {std::size_t{4}, std::size_t{64}}) {
    attention_dims d{n_tokens, 7, 4, 2, 64, 128, 0.125f};
    auto q = random_floats(rng, n_tokens * 4 * 64, -2.0f, 2.0f);
    auto k = random_floats(rng, (7 + n_tokens) * 128, -2.0f, 2.0f);
    auto v = random_floats(rng, k.size(), -1.0f, 1.0f);
    std::vector<float> kr(k.size()), vr(v.size());
    host::round_to_f16(k.data(), kr.data(), k.size());
    host::round_to_f16(v.data(), vr.data(), v.size());
    std::vector<float> a(q.size()), b(q.size());
    host::attention(q.data(), k.data(), v.data(), a.data(), d, 1);
    host::attention(q.data(), kr.data(), vr.data(), b.data(), d, 1);
    require_same_bits(a, b);
  }
}

TEST_CASE("to_f16 rounds to the nearest half, ties to even, on every "
          "instruction set") {
  // Ties (1 + 2^-11 sits halfway between 1 and 1 + 2^-10), overflow past
  // 65520, subnormal halves, signed zeros, infinities; then random values
  // over a wide range, against the scalar conversion.
  std::vector<float> x{0.0f, -0.0f, 1.0f, 1.0f + 0x1p-11f,
                       1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f,
                       -70000.0f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-26f,
                       std::numeric_limits<float>::infinity(), -1e-3f};
  const std::vector<std::uint16_t> want_first{
    0x0000, 0x8000, 0x3c00, 0x3c00, 0x3c02, 0x7bff, 0x7bff, 0x7c00,
    0xfc00, 0x0001, 0x0000, 0x0001, 0x7c00};
  std::mt19937 rng{29};
  auto more = random_floats(rng, 1000, -70000.0f, 70000.0f);
  auto small = random_floats(rng, 1000, -1e-4f, 1e-4f);
  x.insert(x.end(), more.begin(), more.end());
  x.insert(x.end(), small.begin(), small.end());
  for (auto widest : isas()) {
    INFO("isa " << static_cast<int>(widest));
    host::limit_isa(widest);
    std::vector<std::uint16_t> y(x.size());
    host::to_f16(x.data(), y.data(), x.size());
    for (std::size_t i = 0; i < want_first.size(); ++i) {
      INFO("value " << x[i]);
      CHECK(y[i] == want_first[i]);
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("value " << x[i]);
      REQUIRE(y[i] == host::f32_to_f16(x[i]));
      float rounded = 0.0f; // what attention reads from an f32 cache
      host::round_to_f16(&x[i], &rounded, 1);
      REQUIRE(bits_of(host::f16_to_f32(y[i])) == bits_of(rounded));
    }
  }
  host::limit_isa(host::isa::avx512);
}

TEST_CASE("silu_mul computes ggml_vec_swiglu_f32 bit for bit") {
  std::mt19937 rng{23};
  std::vector<float> special{0.0f,    -0.0f,  1.0f,    -1.0f,   88.0f,   88.5f,
                             89.0f,   -88.0f, -103.0f, -104.0f, -110.0f, 200.0f,
                             -200.0f, 1e-30f, -1e-30f, 20.0f};
  for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{16},
                        std::size_t{33}, std::size_t{1543}}) {
    auto g = random_floats(rng, n, -12.0f, 12.0f);
    for (std::size_t i = 0; i < special.size() && i < n; ++i)
      g[i] = special[i];
    auto u = random_floats(rng, n, -2.0f, 2.0f);
    std::vector<float> want(n);
    vec_swiglu(static_cast<int>(n), want.data(), g.data(), u.data());
    for (auto widest : isas()) {
      INFO("n " << n << " isa " << static_cast<int>(widest));
      host::limit_isa(widest);
      std::vector<float> got(n);
      host::silu_mul(g.data(), u.data(), got.data(), n);
      require_same_bits(got, want);
      std::vector<float> in_place = g; // out == gate
      host::silu_mul(in_place.data(), u.data(), in_place.data(), n);
      require_same_bits(in_place, want);
    }
    host::limit_isa(host::isa::avx512);
  }
}

TEST_CASE("expf_ggml is ggml's vector expf, within 3 ulp of exp") {
  std::mt19937 rng{24};
  auto xs = random_floats(rng, 20000, -100.0f, 88.0f);
  for (float x :
       {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 88.3f, -87.0f, -100.0f, -103.9f})
    xs.push_back(x);
  for (float x : xs) {
    INFO("x = " << x);
    const float got = host::expf_ggml(x);
    REQUIRE(bits_of(got) == bits_of(v_expf(x)));
    const double want = std::exp(static_cast<double>(x));
    // ggml states 1.45 ulp plus rounding; counted in units of the exact
    // value's binade it reaches 2.1 here. Beneath about -87.3 the result is
    // subnormal: absolute steps of 2^-149.
    const double ulp =
        std::max(std::ldexp(1.0, std::ilogb(want) - 23), std::ldexp(1.0, -149));
    REQUIRE(std::fabs(got - want) <= 3 * ulp);
  }
  CHECK(host::expf_ggml(-inf) == 0.0f);
  CHECK(host::expf_ggml(-200.0f) == 0.0f);
  CHECK(host::expf_ggml(200.0f) == inf);
  CHECK(std::isnan(host::expf_ggml(std::nanf(""))));
}

TEST_CASE("expf_libm16 gives std::exp's bits for every kind of float") {
  // Every 61st bit pattern: both signs, subnormals, |x| >= 88 (libm's
  // own calls), infinities and NaNs, 16 lanes a call.
  std::vector<float> x;
  for (std::uint64_t b = 0; b <= 0xffffffffu; b += 61) {
    const auto u = static_cast<std::uint32_t>(b);
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  for (float f : {0.0f, -0.0f, 88.0f, -88.0f, 0x1.5fffffp6f, -0x1.5fffffp6f,
                  88.72283f, 88.72284f, -103.27893f, -103.97208f, -104.0f,
                  inf, -inf, std::nanf("")})
    x.push_back(f);
  while (x.size() % 16 != 0)
    x.push_back(1.0f);
  // Every instruction set: AVX-512's 16 lanes, AVX2's 8, libm's calls.
  for (auto widest : isas()) {
    CAPTURE(static_cast<int>(widest));
    host::limit_isa(widest);
#if defined(__GLIBC__)
    // glibc's expf: the vector lanes reproduce its steps, so where the CPU
    // has the ISA they must be in use (a false here is a lost speed-up,
    // not a wrong bit: the kernels would call expf for every cell).
    if (widest == host::isa::avx512 && __builtin_cpu_supports("avx512f"))
      CHECK(host::expf_libm_lanes());
    if (widest == host::isa::avx2 && __builtin_cpu_supports("avx2")
        && __builtin_cpu_supports("fma"))
      CHECK(host::expf_libm_lanes());
#endif
    std::vector<float> got(x.size());
    for (std::size_t i = 0; i < x.size(); i += 16)
      host::expf_libm16(x.data() + i, got.data() + i);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = std::exp(x[i]);
      if (bits_of(got[i]) != bits_of(want) && wrong++ < 5)
        FAIL_CHECK("expf(" << x[i] << "): " << got[i] << ", libm " << want);
    }
    CHECK(wrong == 0);
  }
  host::limit_isa(host::isa::avx512);
}

TEST_CASE("rms_norm sums each row's float squares in double, one after "
          "another, as ggml does, for any number of rows, in place too") {
  std::mt19937 rng{26};
  const std::size_t dim = 200;
  for (std::size_t rows : {1, 3, 4, 5, 9}) {
    CAPTURE(rows);
    auto x = random_floats(rng, rows * dim, -4.0f, 4.0f);
    x[0] = 3.0e-20f; // magnitudes far apart: the order matters
    auto w = random_floats(rng, dim, 0.5f, 1.5f);
    std::vector<float> want(rows * dim);
    for (std::size_t r = 0; r < rows; ++r) {
      double sum = 0.0;
      for (std::size_t i = 0; i < dim; ++i)
        sum += static_cast<double>(x[r * dim + i] * x[r * dim + i]);
      const float mean = static_cast<float>(sum / static_cast<double>(dim));
      const float scale = 1.0f / std::sqrt(mean + 1e-5f);
      for (std::size_t i = 0; i < dim; ++i)
        want[r * dim + i] = x[r * dim + i] * scale * w[i];
    }
    std::vector<float> got(rows * dim);
    host::rms_norm(x.data(), w.data(), got.data(), rows, dim, 1e-5f);
    require_same_bits(got, want);
    host::rms_norm(x.data(), w.data(), x.data(), rows, dim, 1e-5f);
    require_same_bits(x, want);
  }
  // A row whose sum depends on the order: 32 + 2^-19 and then twelve
  // squares of 2^-25, each lost beside it (the mean 2 + 2^-23, a tie that
  // rounds to 2 as a float); summed first they would add 2^-47 (the mean
  // 2 + 2^-22, and 4 / sqrt of it a float lower).
  std::vector<float> crafted(5 * 16), w(16, 1.0f);
  for (std::size_t r = 0; r < 5; ++r) {
    crafted[r * 16] = crafted[r * 16 + 1] = 4.0f;
    crafted[r * 16 + 2] = crafted[r * 16 + 3] = std::ldexp(1.0f, -10);
    for (std::size_t i = 4; i < 16; ++i)
      crafted[r * 16 + i] = std::ldexp(1.0f, -25);
  }
  std::vector<float> got(5 * 16);
  host::rms_norm(crafted.data(), w.data(), got.data(), 5, 16, 0.0f);
  const float scale = 1.0f / std::sqrt(2.0f);
  for (std::size_t r = 0; r < 5; ++r)
    CHECK(got[r * 16] == 4.0f * scale);
}

TEST_CASE("rope rotates pairs with ggml's fused multiply-adds") {
  // ggml_rope_cache_init (theta by repeated multiplication, cosf / sinf)
  // and rotate_pairs as GCC contracts it in llama.cpp's x86 builds:
  // x0 c - x1 s and x0 s + x1 c, each one fused multiply-add with the x1
  // product rounded first.
  // Pairs adjacent (NORMAL) or half a rotation apart (NEOX), in 16 and 8
  // vector lanes (AVX-512, AVX2) and as libm's fmaf (portable); rotations
  // of whole vectors, with pairs left over, and of part of a head.
  std::mt19937 rng{25};
  struct shape {
    std::size_t head_dim, n_rot;
  };
  for (auto sh : {shape{64, 64}, shape{80, 80}, shape{64, 40}, shape{128, 6}})
  for (bool neox : {false, true})
  for (auto widest : {host::isa::avx512, host::isa::avx2, host::isa::scalar}) {
    CAPTURE(sh.head_dim, sh.n_rot, neox, static_cast<int>(widest));
    const std::size_t hd = sh.head_dim, nr = sh.n_rot;
    rope_dims d{3, 4, hd, nr, 10000.0f, neox};
    auto x = random_floats(rng, 3 * 4 * hd, -3.0f, 3.0f);
    std::vector<std::int32_t> pos{0, 17, 900};
    auto want = x;
    const std::size_t step = neox ? 1 : 2, offset = neox ? nr / 2 : 1;
    for (std::size_t r = 0; r < 3; ++r) {
      const float theta_scale
        = std::pow(d.freq_base, -2.0f / static_cast<float>(nr));
      float theta = static_cast<float>(pos[r]);
      for (std::size_t i0 = 0; i0 < nr; i0 += 2) {
        const float c = std::cos(theta), s = std::sin(theta);
        for (std::size_t h = 0; h < 4; ++h) {
          float* p = want.data() + (r * 4 + h) * hd + i0 / 2 * step;
          const float x0 = p[0], x1 = p[offset];
          p[0] = std::fma(x0, c, -(x1 * s));
          p[offset] = std::fma(x0, s, x1 * c);
        }
        theta *= theta_scale;
      }
    }
    host::limit_isa(widest);
    host::rope(x.data(), pos.data(), nullptr, d);
    host::limit_isa(host::isa::avx512);
    require_same_bits(x, want);
  }
}

// -- a Q8_0 cache (llama.cpp's --cache-type-k/-v q8_0) ------------------------

namespace {

/// block_q8_0 of ggml-common.h.
struct ggml_q8 {
  f16 d;
  std::int8_t qs[32];
};
static_assert(sizeof(ggml_q8) == 34, "Q8_0 blocks are 34 bytes");

/// quantize_row_q8_0 of ggml-cpu/arch/x86/quants.c (AVX2 path): the
/// largest magnitude, d = amax / 127 stored as half, x * (127 / amax)
/// rounded to nearest even.
void ggml_quantize_row_q8_0(const float* x, ggml_q8* y, std::size_t k) {
  for (std::size_t i = 0; i < k / 32; ++i) {
    float amax = 0.0f;
    for (std::size_t j = 0; j < 32; ++j)
      amax = std::max(amax, std::fabs(x[i * 32 + j]));
    const float d = amax / 127.f;
    y[i].d = to_f16(d);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (std::size_t j = 0; j < 32; ++j)
      y[i].qs[j] =
        static_cast<std::int8_t>(std::nearbyint(x[i * 32 + j] * id));
  }
}

/// ggml_vec_dot_q8_0_q8_0 (AVX2 path, which the AVX-512 build runs): eight
/// lanes, lane j summing the products of bytes 4j .. 4j+3 of a block
/// (maddubs + madd), each block's lanes added by fused multiply-adds with
/// d = dx * dy, then hsum_float_8.
float ggml_vec_dot_q8_0_q8_0(std::size_t n, const ggml_q8* x,
                             const ggml_q8* y) {
  float acc[8] = {};
  for (std::size_t b = 0; b < n / 32; ++b) {
    const float d = to_f32(x[b].d) * to_f32(y[b].d);
    for (int j = 0; j < 8; ++j) {
      int s = 0;
      for (int m = 0; m < 4; ++m)
        s += x[b].qs[4 * j + m] * y[b].qs[4 * j + m];
      acc[j] = std::fma(d, static_cast<float>(s), acc[j]);
    }
  }
  float s4[4];
  for (int i = 0; i < 4; ++i)
    s4[i] = acc[4 + i] + acc[i];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/// ggml_compute_forward_flash_attn_ext_f16_one_chunk with Q8_0 K and V over
/// llama.cpp's padded cache (cells past the sequence masked with -inf).
std::vector<float> ggml_attention_q8_0(const std::vector<float>& q,
                                       const std::vector<ggml_q8>& k,
                                       const std::vector<ggml_q8>& v,
                                       const attention_dims& d) {
  const std::size_t hd = d.head_dim, stride = d.kv_stride / 32;
  const std::size_t n_kv = (d.pos0 + d.n_tokens + 255) / 256 * 256;
  std::vector<float> out(q.size());
  std::vector<ggml_q8> qq(hd / 32);
  std::vector<float> acc(hd), v32(hd);
  for (std::size_t t = 0; t < d.n_tokens; ++t)
    for (std::size_t h = 0; h < d.n_heads; ++h) {
      const std::size_t g = h / (d.n_heads / d.n_kv_heads);
      const float* pq = q.data() + (t * d.n_heads + h) * hd;
      ggml_quantize_row_q8_0(pq, qq.data(), hd);
      std::fill(acc.begin(), acc.end(), 0.0f);
      float S = 0.0f, M = -inf;
      for (std::size_t ic = 0; ic < n_kv; ++ic) {
        const float mv = ic <= d.pos0 + t ? 0.0f : -inf;
        if (mv == -inf)
          continue;
        const ggml_q8* kr = k.data() + ic * stride + g * hd / 32;
        float s = ggml_vec_dot_q8_0_q8_0(hd, kr, qq.data());
        s = s * d.scale;
        s += mv;
        const float Mold = M;
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
          M = s;
          ms = std::exp(Mold - M);
          for (auto& a : acc)
            a *= ms; // ggml_vec_scale_f32
        } else {
          vs = std::exp(s - M);
        }
        const ggml_q8* vr = v.data() + ic * stride + g * hd / 32;
        for (std::size_t b = 0; b < hd / 32; ++b) // dequantize_row_q8_0
          for (std::size_t j = 0; j < 32; ++j)
            v32[b * 32 + j] = vr[b].qs[j] * to_f32(vr[b].d);
        for (std::size_t i = 0; i < hd; ++i) // ggml_vec_mad_f32
          acc[i] = std::fma(v32[i], vs, acc[i]);
        const float Sms = S * ms;
        S = Sms + vs;
      }
      const float S_inv = S == 0.0f ? 0.0f : 1.0f / S;
      for (std::size_t i = 0; i < hd; ++i)
        out[(t * d.n_heads + h) * hd + i] = acc[i] * S_inv;
    }
  return out;
}

} // namespace

TEST_CASE("attention over a q8_0 cache computes llama.cpp's flash attention "
          "bit for bit") {
  exo::test::all_work_split all; // threads 3 split every attention
  std::mt19937 rng{31};
  struct shape {
    std::size_t n_tokens, pos0, n_heads, n_kv_heads, head_dim, stride;
    float qk_range;
  };
  // ggml takes one_chunk over a Q8_0 cache for every batch (its tiled and
  // split-KV paths are for F32/F16 caches): single tokens short and past
  // 512 cells, batches of 63, 64 and 130 tokens, GQA, heads of 32, 64, 96
  // and 128, a row stride wider than the heads.
  for (auto s :
       {shape{1, 0, 2, 2, 64, 128, 1.0f}, shape{1, 600, 8, 2, 64, 128, 3.0f},
        shape{63, 5, 4, 1, 64, 64, 2.0f}, shape{64, 0, 4, 4, 32, 160, 2.0f},
        shape{130, 20, 4, 2, 128, 256, 1.5f}, shape{3, 40, 6, 2, 96, 192, 4.0f},
        shape{2, 300, 7, 1, 64, 96, 3.0f}}) {
    attention_dims d{s.n_tokens,
                     s.pos0,
                     s.n_heads,
                     s.n_kv_heads,
                     s.head_dim,
                     s.stride,
                     1.0f / std::sqrt(static_cast<float>(s.head_dim)),
                     kv_type::q8_0};
    const std::size_t n_ctx = s.pos0 + s.n_tokens;
    auto q = random_floats(rng, s.n_tokens * s.n_heads * s.head_dim,
                           -s.qk_range, s.qk_range);
    auto kf = random_floats(rng, n_ctx * s.stride, -s.qk_range, s.qk_range);
    auto vf = random_floats(rng, n_ctx * s.stride, -1.0f, 1.0f);
    // The cache as llama.cpp's set_rows writes it, and as to_q8_0 does.
    std::vector<ggml_q8> k(kf.size() / 32), v(vf.size() / 32);
    ggml_quantize_row_q8_0(kf.data(), k.data(), kf.size());
    ggml_quantize_row_q8_0(vf.data(), v.data(), vf.size());
    std::vector<host::block_q8_0> hk(k.size()), hv(v.size());
    host::quantize_q8_0_activations(kf.data(), hk.data(), kf.size());
    host::quantize_q8_0_activations(vf.data(), hv.data(), vf.size());
    REQUIRE(std::memcmp(hk.data(), k.data(), k.size() * 34) == 0);
    REQUIRE(std::memcmp(hv.data(), v.data(), v.size() * 34) == 0);
    INFO("n_tokens " << s.n_tokens << " pos0 " << s.pos0 << " heads "
                     << s.n_heads << "/" << s.n_kv_heads << " head_dim "
                     << s.head_dim);
    const auto want = ggml_attention_q8_0(q, k, v, d);
    for (auto widest : isas())
      for (int threads : {1, 3}) {
        INFO("isa " << static_cast<int>(widest) << " threads " << threads);
        host::limit_isa(widest);
        std::vector<float> got(q.size());
        host::attention(q.data(), hk.data(), hv.data(), got.data(), d,
                        threads);
        require_same_bits(got, want);
      }
    host::limit_isa(host::isa::avx512);
    // And it is attention: close to the exact softmax over the unquantized
    // keys and values (8-bit blocks: about 1% of a block's largest value).
    std::vector<float> exact(q.size());
    auto d32 = d;
    d32.kv = kv_type::f32;
    host::attention(q.data(), kf.data(), vf.data(), exact.data(), d32, 1);
    double worst = 0;
    for (std::size_t i = 0; i < q.size(); ++i)
      worst = std::max(worst, std::fabs(double{want[i]} - exact[i]));
    CHECK(worst < 0.05 * s.qk_range);
  }
}

TEST_CASE("hadamard is the orthonormal Walsh-Hadamard rotation, in ggml's "
          "butterfly order") {
  std::mt19937 rng{37};
  for (std::size_t n : {2u, 64u, 128u, 256u}) {
    INFO("n " << n);
    const std::size_t count = 3 * n;
    auto x = random_floats(rng, count, -4.0f, 4.0f);
    // ggml_compute_forward_fwht, transcribed.
    std::vector<float> want(x);
    const float scale = 1.0f / std::sqrt(static_cast<float>(n));
    for (std::size_t r = 0; r < count; r += n) {
      float* row = want.data() + r;
      for (std::size_t j = 0; j < n; ++j)
        row[j] = row[j] * scale;
      for (std::size_t len = 1; len < n; len <<= 1)
        for (std::size_t i = 0; i < n; i += 2 * len)
          for (std::size_t j = 0; j < len; ++j) {
            const float u = row[i + j], w = row[i + len + j];
            row[i + j] = u + w;
            row[i + len + j] = u - w;
          }
    }
    std::vector<float> got(count);
    host::hadamard(x.data(), got.data(), count, n);
    require_same_bits(got, want);
    // In place too.
    std::vector<float> in_place(x);
    host::hadamard(in_place.data(), in_place.data(), count, n);
    require_same_bits(in_place, want);
    // The matrix llama.cpp builds (ggml_gen_hadamard: H[i][j] =
    // (-1)^popcount(i & j) / sqrt(n)) times each run, in double; and the
    // rotation is its own inverse.
    for (std::size_t r = 0; r < count; r += n)
      for (std::size_t i = 0; i < n; ++i) {
        double s = 0;
        for (std::size_t j = 0; j < n; ++j)
          s += (__builtin_popcountll(i & j) % 2 ? -1.0 : 1.0) * x[r + j];
        s /= std::sqrt(static_cast<double>(n));
        REQUIRE(std::fabs(got[r + i] - s) < 1e-5 * (1 + std::fabs(s)));
      }
    std::vector<float> back(count);
    host::hadamard(got.data(), back.data(), count, n);
    for (std::size_t i = 0; i < count; ++i)
      REQUIRE(std::fabs(back[i] - x[i]) < 1e-5f);
  }
}
