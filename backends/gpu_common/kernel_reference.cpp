#include "backends/gpu_common/kernel_reference.hpp"

#include "backends/gpu_common/kernel_math.hpp"
#include "backends/gpu_common/kernel_quant.hpp"
#include "backends/gpu_common/launch_geometry.hpp"
#include "backends/quant_repack.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace exo::backend::gpu::reference {

void binary(binary_op op, const float* a, const float* b, float* out,
            std::size_t count) {
  auto code = op == binary_op::add ? math::binary_code::add
                                   : math::binary_code::mul;
  for (std::size_t i = 0; i < count; ++i)
    out[i] = math::binary(code, a[i], b[i]);
}

void tiled_matmul(const float* a, const float* b, float* c,
                  const matmul_dims& d) {
  constexpr unsigned t = math::matmul_tile;
  auto g = matmul_launch(d);
  float as[t * t];
  float bs[t * t];
  for (std::size_t by = 0; by < g.tiles_y; ++by) {
    for (std::size_t bx = 0; bx < g.tiles_x; ++bx) {
      float acc[t * t] = {};
      for (std::size_t kt = 0; kt < g.tiles_k; ++kt) {
        // Every thread (ty, tx) of the block loads one element of each tile.
        for (unsigned ty = 0; ty < t; ++ty)
          for (unsigned tx = 0; tx < t; ++tx) {
            as[ty * t + tx] = math::matmul_load_a(a, d.m, d.k, by * t + ty,
                                                  kt * t + tx);
            bs[ty * t + tx] = math::matmul_load_b(
              b, d.k, d.n, d.transpose_b, kt * t + ty, bx * t + tx);
          }
        for (unsigned ty = 0; ty < t; ++ty)
          for (unsigned tx = 0; tx < t; ++tx)
            acc[ty * t + tx]
              = math::matmul_tile_step(as, bs, ty, tx, acc[ty * t + tx]);
      }
      for (unsigned ty = 0; ty < t; ++ty)
        for (unsigned tx = 0; tx < t; ++tx) {
          auto row = by * t + ty;
          auto col = bx * t + tx;
          if (row < d.m && col < d.n)
            c[row * d.n + col] = acc[ty * t + tx];
        }
    }
  }
}

void rmsnorm(const float* x, const float* weight, float* out,
             std::size_t rows, std::size_t cols, float eps) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    double sum = 0;
    for (std::size_t i = 0; i < cols; ++i)
      sum += static_cast<double>(math::mul_rn(in[i], in[i]));
    float scale = math::rms_scale(sum, cols, eps);
    for (std::size_t i = 0; i < cols; ++i)
      out[r * cols + i] = math::rmsnorm_apply(in[i], scale, weight[i]);
  }
}

void silu_mul(const float* gate, const float* up, float* out,
              std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    out[i] = math::silu_mul(gate[i], up[i]);
}

void softmax_rows(const float* x, float* out, std::size_t rows,
                  std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    float mx = -INFINITY;
    for (std::size_t i = 0; i < cols; ++i)
      mx = std::max(mx, in[i]);
    float sum = 0;
    for (std::size_t i = 0; i < cols; ++i)
      sum += std::exp(in[i] - mx);
    for (std::size_t i = 0; i < cols; ++i)
      out[r * cols + i] = math::softmax_apply(in[i], mx, sum);
  }
}

void rope(float* x, std::size_t tokens, std::size_t heads,
          std::size_t head_dim, std::size_t pos0, float base) {
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (std::size_t p = 0; p < head_dim / 2; ++p) {
        float angle = math::rope_angle(pos0 + t, p, head_dim, base);
        math::rope_rotate(v[2 * p], v[2 * p + 1], angle, &v[2 * p],
                          &v[2 * p + 1]);
      }
    }
}

void rope_rows(float* x, const std::int32_t* positions,
               const float* freq_factors, const rope_dims& d) {
  for (std::size_t r = 0; r < d.rows; ++r)
    for (std::size_t h = 0; h < d.heads; ++h) {
      float* v = x + (r * d.heads + h) * d.head_dim;
      const std::size_t half = d.n_rot / 2;
      for (std::size_t p = 0; p < half; ++p) {
        float theta = math::rope_theta(
          positions[r], p, d.n_rot, d.freq_base,
          freq_factors != nullptr ? freq_factors[p] : 1.0f);
        // NORMAL pairs (2p, 2p+1); NEOX pairs (p, p + half).
        const std::size_t i0 = d.neox ? p : 2 * p;
        const std::size_t i1 = d.neox ? p + half : 2 * p + 1;
        math::rope_rotate(v[i0], v[i1], theta, &v[i0], &v[i1]);
      }
    }
}

void to_f16(const float* a, std::uint16_t* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    out[i] = math::float_to_half(a[i]);
}

void matmul_weights(const float* a, const void* w, weight_type type,
                    float* c, const matmul_dims& d) {
  if (type == weight_type::f32) {
    tiled_matmul(a, static_cast<const float*>(w), c, {d.m, d.n, d.k, true});
    return;
  }
  const auto* wb = static_cast<const std::uint8_t*>(w);
  const std::uint32_t id = ggml_type_id(type);
  const auto format = math::act_format_of(id);
  if (format != math::act_format::none) {
    // quantize_act_kernel (quantize_q8k_warps_kernel: the same bytes),
    // then matvec_lanes_kernel's lanes one by one.
    const std::size_t be = math::act_block_elements(format);
    const std::size_t blocks = d.m * (d.k / be);
    std::vector<std::uint8_t> act(blocks * math::act_block_bytes(format));
    for (std::size_t b = 0; b < blocks; ++b)
      math::quantize_act_block(format, a, b, act.data());
    const std::size_t act_row = d.k / be * math::act_block_bytes(format);
    const std::size_t row_bytes = *weight_row_bytes(type, d.k);
    const std::size_t nb = d.k / weight_block_elements(type);
    if (type == weight_type::q4_k && math::q4_k_repacked(d.n)) {
      // matvec_q4_k_repacked_kernel: the first pair_tokens tokens step by
      // pair of sub-blocks, the others by super-block.
      const std::size_t pair_tokens =
        quant::q4_k_pair_tokens(d.m, d.rows_apart);
      for (std::size_t j = 0; j < d.n; ++j)
        for (std::size_t t = 0; t < d.m; ++t) {
          const auto* y = reinterpret_cast<const math::act_q8k*>(
            act.data() + t * act_row);
          const unsigned parts = t < pair_tokens ? 4 : 1;
          float acc = 0.0f, accm = 0.0f;
          for (std::size_t i = 0; i < nb; ++i) {
            const std::uint8_t* b = wb + j * row_bytes + i * 144;
            for (unsigned p = 0; p < parts; ++p) {
              const unsigned c0 = 256 / parts * p, c1 = c0 + 256 / parts;
              int isum = 0;
              for (unsigned l = 0; l < math::dot_lanes; ++l)
                isum += math::q4_k_lane_isum(b, y[i], l, c0, c1);
              const int imin = parts == 1 ? math::q4_k_imin(b, y[i])
                                          : math::q4_k_imin_pair(b, y[i], p);
              math::q4_k_repacked_step(b, y[i], isum, imin, acc, accm);
            }
          }
          c[t * d.n + j] = acc - accm;
        }
      return;
    }
    for (std::size_t j = 0; j < d.n; ++j)
      for (std::size_t t = 0; t < d.m; ++t) {
        float acc[math::dot_lanes], extra[math::dot_lanes];
        for (unsigned l = 0; l < math::dot_lanes; ++l)
          math::lane_dot(id, wb + j * row_bytes, act.data() + t * act_row,
                         nb, l, &acc[l], &extra[l]);
        c[t * d.n + j] = math::combine_lanes(id, acc, extra);
      }
    return;
  }
  for (std::size_t j = 0; j < d.n; ++j)
    for (std::size_t t = 0; t < d.m; ++t) {
      const float* at = a + t * d.k;
      float s = 0;
      if (type == weight_type::f16) {
        for (std::size_t i = 0; i < d.k; ++i) {
          std::uint16_t h;
          std::memcpy(&h, wb + (j * d.k + i) * 2, 2);
          s += math::half_to_float(h) * math::round_to_half(at[i]);
        }
      } else {
        // BF16: decoded weights, activations rounded to BF16.
        const std::size_t be = weight_block_elements(type);
        const std::size_t bb = *weight_row_bytes(type, be);
        const std::uint8_t* wr = wb + j * (d.k / be * bb);
        for (std::size_t i = 0; i < d.k; ++i)
          s += math::dequant_element(id, wr + i / be * bb,
                                     static_cast<unsigned>(i % be))
               * math::round_to_bf16(at[i]);
      }
      c[t * d.n + j] = s;
    }
}

} // namespace exo::backend::gpu::reference
