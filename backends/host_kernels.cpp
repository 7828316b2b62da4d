#include "backends/host_kernels.hpp"

#include <cblas.h>

#include <limits>

namespace exo::backend::host {

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

void matmul(const float* a, const float* b, float* c,
            const matmul_dims& d) noexcept {
  const auto m = static_cast<blasint>(d.m);
  const auto n = static_cast<blasint>(d.n);
  const auto k = static_cast<blasint>(d.k);
  if (d.m == 1 && d.transpose_b) {
    // A single row times a weight matrix: a matrix-vector product.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, b, k, a, 1, 0.0f, c,
                1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans,
              d.transpose_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, k,
              b, d.transpose_b ? k : n, 0.0f, c, n);
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

} // namespace exo::backend::host
