#pragma once

/// Host implementations of the compute operations, shared by the cpu and sim
/// backends, by the generic fallbacks of device, and by tests that check GPU
/// kernels against them. Plain pointers in, plain pointers out.

#include "backends/backend.hpp"

#include <cstddef>

namespace exo::backend::host {

/// out[i] = a[i] (op) b[i] for i < count.
void elementwise(binary_op op, const float* a, const float* b, float* out,
                 std::size_t count) noexcept;

/// C = A * B (or A * B^T) through BLAS (OpenBLAS sgemm).
void matmul(const float* a, const float* b, float* c,
            const matmul_dims& dims) noexcept;

/// The same product with plain loops in double precision: the reference the
/// tests hold every backend to.
void matmul_reference(const float* a, const float* b, float* c,
                      const matmul_dims& dims) noexcept;

/// Checks dims describe a non-empty product whose byte sizes fit size_t.
status check_matmul_dims(const matmul_dims& dims);

/// Byte sizes of A, B and C for dims (call check_matmul_dims first).
struct matmul_bytes {
  std::size_t a;
  std::size_t b;
  std::size_t c;
};
matmul_bytes bytes_of(const matmul_dims& dims) noexcept;

} // namespace exo::backend::host
