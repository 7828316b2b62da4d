// The host kernels' fast paths (F16C conversions, the packed batched
// product) against their scalar definitions.

#include "backends/backend.hpp"
#include "backends/host_kernels.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace exo::backend;

namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float lo,
                                 float hi) {
  std::uniform_real_distribution<float> d{lo, hi};
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

} // namespace

TEST_CASE("rounding arrays to half matches the scalar rounding bit for bit") {
  std::mt19937 rng{7};
  std::vector<float> xs{0.0f,     -0.0f,   1.0f,    65504.0f, 65519.0f,
                        65520.0f, 1e-8f,   2.98e-8f, 6.0e-8f, 1.0f + 1.0f / 2048,
                        1.0f + 3.0f / 2048, -3.14159f, 1e5f,  6.1e-5f,
                        INFINITY, -INFINITY};
  for (auto x : random_floats(rng, 20000, -70000.0f, 70000.0f))
    xs.push_back(x);
  for (auto x : random_floats(rng, 20000, -1e-3f, 1e-3f))
    xs.push_back(x);
  for (auto x : random_floats(rng, 20000, -1e-6f, 1e-6f))
    xs.push_back(x);
  xs.push_back(1.5f); // an odd length leaves a scalar tail
  std::vector<float> got(xs.size()), want(xs.size());
  host::limit_isa(host::isa::scalar);
  host::round_to_f16(xs.data(), want.data(), xs.size());
  host::limit_isa(host::isa::avx512);
  host::round_to_f16(xs.data(), got.data(), xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    INFO("x = " << xs[i]);
    REQUIRE(bits_of(got[i]) == bits_of(want[i]));
    REQUIRE(bits_of(want[i])
            == bits_of(host::f16_to_f32(host::f32_to_f16(xs[i]))));
  }
  float nan = std::nanf(""), out = 0.0f;
  std::vector<float> nans(9, nan), nan_out(9);
  host::round_to_f16(nans.data(), nan_out.data(), nans.size());
  for (auto v : nan_out)
    CHECK(std::isnan(v));
  host::round_to_f16(&nan, &out, 1);
  CHECK(std::isnan(out));
}

TEST_CASE("batched products equal the matrix-vector products within bounds "
          "at every tile remainder") {
  // Batches of 4 tokens and more take the packed kernels; below 4 the
  // matrix-vector ones. Rows cross tile (16/32) and panel boundaries, token
  // counts leave every remainder of the 6/8-token register tiles.
  std::mt19937 rng{11};
  struct shape {
    std::size_t m, n, k;
  };
  std::vector<shape> shapes{{4, 1, 32},    {9, 17, 96},   {13, 33, 64},
                            {16, 48, 160}, {6, 300, 512}, {23, 70, 2048}};
  for (std::size_t m = 4; m <= 20; ++m)
    shapes.push_back({m, 37, 64});
  for (auto widest : {host::isa::avx512, host::isa::avx2, host::isa::scalar})
  for (auto t : {weight_type::f32, weight_type::f16, weight_type::q8_0}) {
    host::limit_isa(widest);
    for (auto s : shapes) {
      auto a = random_floats(rng, s.m * s.k, -1.0f, 1.0f);
      auto w = random_floats(rng, s.n * s.k, -1.0f, 1.0f);
      const std::size_t rb = *weight_row_bytes(t, s.k);
      std::vector<std::uint8_t> enc(s.n * rb);
      for (std::size_t r = 0; r < s.n; ++r)
        host::encode_row(t, w.data() + r * s.k, enc.data() + r * rb, s.k);
      matmul_dims d{s.m, s.n, s.k, true};
      std::vector<float> batched(s.m * s.n), single(s.m * s.n);
      for (int threads : {1, 2}) {
        host::matmul_weights(a.data(), enc.data(), t, batched.data(), d,
                             threads);
        for (std::size_t i = 0; i < s.m; ++i) {
          matmul_dims d1{1, s.n, s.k, true};
          host::matmul_weights(a.data() + i * s.k, enc.data(), t,
                               single.data() + i * s.n, d1, 1);
        }
        for (std::size_t i = 0; i < s.m * s.n; ++i) {
          // Same products, another summation order; Q8_0 differs more: the
          // matrix-vector path multiplies quantized activations exactly in
          // integers, the batched one their dequantized floats.
          const double tol = t == weight_type::q8_0 ? 1e-3 * s.k : 1e-5 * s.k;
          INFO("isa " << int(widest) << " type " << int(t) << " m=" << s.m << " n=" << s.n << " k=" << s.k
                      << " threads=" << threads << " at " << i);
          REQUIRE(std::fabs(double{batched[i]} - single[i]) <= tol);
        }
      }
    }
  }
  host::limit_isa(host::isa::avx512);
}
