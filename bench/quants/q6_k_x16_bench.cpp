// Q6_K products on the rows as stored (matmul_quant) against the same
// matrix packed 16 rows at a time (matmul_q6_k_x16), one thread, the bits
// compared every time: one matrix held in the caches, then COPIES copies
// of it read in turn (from DRAM once they outgrow the last level cache).
// Best of 5 timings (one for 64 tokens and more); ms per product.
//   q6_k_x16_bench [ROWS K COPIES]   (defaults 2048 8192 16: 220 MB)

#include "backends/quant_formats.hpp"
#include "backends/quant_q6_k_x16.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace exo::backend::quant;

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

} // namespace

int main(int argc, char** argv) {
  const std::size_t rows = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 2048;
  const std::size_t k = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 8192;
  const std::size_t copies =
      argc > 3 ? std::max<std::size_t>(1, std::strtoul(argv[3], nullptr, 10))
               : 16;
  if (rows == 0 || k == 0 || k % 256 != 0) {
    std::fprintf(stderr, "usage: q6_k_x16_bench [ROWS K COPIES] (K a "
                         "multiple of 256)\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.05f);
  const std::size_t rb = *row_bytes(ggml_type::q6_k, k);
  std::vector<float> wf(k);
  std::vector<std::uint8_t> w(rows * rb);
  for (std::size_t r = 0; r < rows; ++r) {
    for (auto& x : wf)
      x = d(rng);
    quantize_row(ggml_type::q6_k, wf.data(), w.data() + r * rb, k);
  }
  const std::size_t bytes = w.size();
  std::vector<std::uint8_t> stored(bytes * copies), packed(bytes * copies);
  const auto tp = clock_type::now();
  pack_q6_k_x16(w.data(), rows, k, packed.data());
  const double pack_s = seconds_since(tp);
  for (std::size_t c = 0; c < copies; ++c) {
    std::memcpy(stored.data() + c * bytes, w.data(), bytes);
    if (c > 0)
      std::memcpy(packed.data() + c * bytes, packed.data(), bytes);
  }
  std::printf("Q6_K %zu x %zu (%.1f MB), packing %.1f ms (%.2f GB/s); ms per "
              "product, stored rows / packed, one thread\n",
              rows, k, static_cast<double>(bytes) / 1e6, pack_s * 1e3,
              static_cast<double>(bytes) / pack_s / 1e9);
  bool same = true;
  for (const std::size_t n : {std::size_t{1}, copies}) {
    std::printf("%s (%zu cop%s):\n", n == 1 ? "in cache" : "from DRAM", n,
                n == 1 ? "y" : "ies");
    for (const std::size_t m : {1, 2, 4, 8, 16, 64, 512}) {
      if (n > 1 && m > 16)
        continue;
      std::normal_distribution<float> da(0.0f, 1.0f);
      std::vector<float> a(m * k);
      for (std::size_t i = 0; i < a.size(); ++i)
        a[i] = da(rng) * (i % 37 == 0 ? 40.0f : 1.0f);
      std::vector<float> o1(m * rows), o2(m * rows);
      double b1 = 1e30, b2 = 1e30;
      for (int it = 0; it < (m >= 64 ? 1 : 5); ++it) {
        auto t0 = clock_type::now();
        for (std::size_t c = 0; c < n; ++c)
          (void)matmul_quant(stored.data() + c * bytes, ggml_type::q6_k, rows,
                             k, a.data(), m, o1.data(), 1);
        b1 = std::min(b1, seconds_since(t0) / static_cast<double>(n));
        t0 = clock_type::now();
        for (std::size_t c = 0; c < n; ++c)
          (void)matmul_q6_k_x16(packed.data() + c * bytes, rows, k, a.data(), m,
                                o2.data(), 1);
        b2 = std::min(b2, seconds_since(t0) / static_cast<double>(n));
      }
      const bool eq = std::memcmp(o1.data(), o2.data(), o1.size() * 4) == 0;
      same = same && eq;
      std::printf("  %4zu tokens  %9.3f  %9.3f  %.2fx%s\n", m, b1 * 1e3,
                  b2 * 1e3, b1 / b2, eq ? "" : "  BITS DIFFER");
    }
  }
  return same ? 0 : 1;
}
