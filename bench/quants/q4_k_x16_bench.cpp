// Q4_K products on the rows as stored (matmul_q4_k_repacked) against the
// same matrix packed 16 rows at a time (matmul_q4_k_x16), one thread, the
// bits compared every time: one matrix held in the caches, then COPIES
// copies of it read in turn (from DRAM once they outgrow the last level
// cache), decode batches (rows apart) and prompt batches (the gemm's
// steps). Best of 5 timings; G MAC/s count rows * k * tokens.
//   q4_k_x16_bench [ROWS K COPIES]   (defaults 8192 2048 24: 226 MB)

#include "backends/quant_formats.hpp"
#include "backends/quant_q4_k_x16.hpp"
#include "backends/quant_repack.hpp"

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

/// Best seconds of `run` over 5 timings.
template <class F>
double best_of(F&& run) {
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = clock_type::now();
    run();
    best = std::min(
      best, std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return best;
}

} // namespace

int main(int argc, char** argv) {
  const std::size_t rows = argc > 1 ? std::strtoul(argv[1], nullptr, 10)
                                    : 8192;
  const std::size_t k = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 2048;
  const std::size_t copies = argc > 3 ? std::strtoul(argv[3], nullptr, 10)
                                      : 24;
  if (!q4_k_x16_packs(rows, k) || copies == 0) {
    std::fprintf(stderr, "rows must be a multiple of 16, k of 256\n");
    return 2;
  }
  const std::size_t bytes = rows * (k / qk_k) * sizeof(block_q4_k);
  std::mt19937 rng{1};
  std::normal_distribution<float> g{0.0f, 0.02f};
  std::vector<float> wf(rows * k);
  for (auto& v : wf)
    v = g(rng);
  std::vector<std::uint8_t> stored(bytes * copies), packed(bytes * copies);
  for (std::size_t r = 0; r < rows; ++r)
    quantize_row(ggml_type::q4_k, wf.data() + r * k,
                 stored.data() + r * (bytes / rows), k);
  for (std::size_t c = 1; c < copies; ++c)
    std::memcpy(stored.data() + c * bytes, stored.data(), bytes);
  for (std::size_t c = 0; c < copies; ++c)
    pack_q4_k_x16(stored.data() + c * bytes, rows, k,
                  packed.data() + c * bytes);
  std::printf("# Q4_K %zu x %zu (%.1f MB), one thread; stored rows against "
              "packed 16 rows at a time\n",
              rows, k, static_cast<double>(bytes) * 1e-6);
  std::printf("%-28s %6s %14s %14s %7s %5s\n", "where", "tokens",
              "stored GMAC/s", "packed GMAC/s", "ratio", "bits");
  int failures = 0;
  for (const std::size_t n : {std::size_t{1}, copies}) {
    for (const bool apart : {true, false}) {
      for (const std::size_t m : {1, 4, 8, 16, 64, 512}) {
        if (!apart && m == 1)
          continue; // one token steps as a decode step does
        if (n > 1 && m > 16)
          continue; // prompts from DRAM: not what packing is for
        std::vector<float> a(m * k);
        for (auto& v : a)
          v = 50 * g(rng);
        std::vector<float> o1(m * rows), o2(m * rows);
        const double t1 = best_of([&] {
          for (std::size_t c = 0; c < n; ++c)
            (void)matmul_q4_k_repacked(stored.data() + c * bytes, rows, k,
                                       a.data(), m, o1.data(), 1, apart);
        });
        const double t2 = best_of([&] {
          for (std::size_t c = 0; c < n; ++c)
            (void)matmul_q4_k_x16(packed.data() + c * bytes, rows, k,
                                  a.data(), m, o2.data(), 1, apart);
        });
        const bool same = o1 == o2;
        failures += !same;
        const double macs = static_cast<double>(rows) * k * m * n;
        char where[64];
        std::snprintf(where, sizeof where, "%s, %s",
                      n == 1 ? "one matrix (cache)" : "copies (DRAM)",
                      apart ? "decode" : "prompt");
        std::printf("%-28s %6zu %14.1f %14.1f %6.2fx %5s\n", where, m,
                    macs / t1 * 1e-9, macs / t2 * 1e-9, t1 / t2,
                    same ? "same" : "DIFF");
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
