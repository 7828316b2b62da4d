#include "backends/quant_repack.hpp"

#include "backends/host_kernels.hpp"
#include "backends/host_parallel.hpp"
#include "backends/quant_formats.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace exo::backend::quant {

namespace {

/// The 6-bit scale and minimum of sub-block j of a Q4_K block (ggml's
/// get_scale_min_k4).
void scale_min(int j, const std::uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/// One row of Q4_K against one row of Q8_K, in the repacked kernels' order.
float dot_row(const block_q4_k* x, const block_q8_k* y, std::size_t nb) {
  float acc = 0.0f, accm = 0.0f;
  for (std::size_t b = 0; b < nb; ++b) {
    const block_q4_k& w = x[b];
    const block_q8_k& a = y[b];
    std::int32_t isum = 0, imin = 0;
    for (int c = 0; c < 4; ++c) { // 64 elements: sub-blocks 2c and 2c+1
      const std::uint8_t* qs = w.qs + 32 * c;
      const std::int8_t* q8 = a.qs + 64 * c;
      std::int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += (qs[l] & 0xF) * q8[l];
        hi += (qs[l] >> 4) * q8[32 + l];
      }
      int sc0, m0, sc1, m1;
      scale_min(2 * c, w.scales, sc0, m0);
      scale_min(2 * c + 1, w.scales, sc1, m1);
      isum += sc0 * lo + sc1 * hi;
      imin += m0 * (a.bsums[4 * c] + a.bsums[4 * c + 1])
              + m1 * (a.bsums[4 * c + 2] + a.bsums[4 * c + 3]);
    }
    const float d = host::f16_to_f32(w.d) * a.d;
    const float dm = host::f16_to_f32(w.dmin) * a.d;
    acc = std::fma(static_cast<float>(isum), d, acc);
    accm = std::fma(static_cast<float>(imin), dm, accm);
  }
  return acc - accm;
}

} // namespace

bool q4_k_repacked(std::size_t rows) noexcept {
  return rows % 8 == 0;
}

result<bool> matmul_q4_k_repacked(const void* w, std::size_t rows,
                                  std::size_t k, const float* a,
                                  std::size_t m, float* out, int threads) {
  if (!w || !a || !out)
    return fail(errc::invalid_argument, "matmul_q4_k_repacked: null operand");
  if (k % qk_k != 0)
    return fail(errc::invalid_argument,
                "matmul_q4_k_repacked: row length " + std::to_string(k)
                  + " is not a multiple of 256");
  if (rows == 0 || k == 0 || m == 0)
    return true;
  const std::size_t nb = k / qk_k;
  std::vector<block_q8_k> q(nb * m);
  for (std::size_t t = 0; t < m; ++t)
    quantize_activations(ggml_type::q8_k, a + t * k, q.data() + t * nb, k);
  const auto* blocks = static_cast<const block_q4_k*>(w);
  host::for_each_index(static_cast<long>(rows), threads, [&](long r) {
    const block_q4_k* row = blocks + static_cast<std::size_t>(r) * nb;
    for (std::size_t t = 0; t < m; ++t)
      out[t * rows + static_cast<std::size_t>(r)] =
        dot_row(row, q.data() + t * nb, nb);
  });
  return true;
}

} // namespace exo::backend::quant
