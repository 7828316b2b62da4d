// Matrix-vector speed of each weight format, one thread: exo's dot products
// (quant_formats) beside llama.cpp's own vec_dot on the same bytes (ggml
// from node-llama-cpp's CPU binaries, loaded with dlopen, when the test-only
// tools are installed). GFLOP/s count 2 * rows * k per product; the
// activations are quantized once per product in both columns' timings.

#include "backends/quant_formats.hpp"
#include "test/support/ggml_oracle.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace exo::backend::quant;
namespace gg = exo::test::ggml;

namespace {

std::string tools_dir() {
  if (const char* d = std::getenv("EXO_TEST_TOOLS"))
    return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"))
    return std::string(x) + "/exo-test-tools";
  if (const char* h = std::getenv("HOME"))
    return std::string(h) + "/.cache/exo-test-tools";
  return "";
}

/// Best GFLOP/s of `run` (one matrix-vector product) over repeated timings.
template<class F>
double gflops(std::size_t rows, std::size_t k, F&& run) {
  using clock = std::chrono::steady_clock;
  double best = 0;
  const auto start = clock::now();
  int reps = 0;
  while (reps < 5 ||
         std::chrono::duration<double>(clock::now() - start).count() < 0.4) {
    const auto t0 = clock::now();
    run();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    const double g = 2.0 * double(rows) * double(k) / s * 1e-9;
    best = g > best ? g : best;
    ++reps;
  }
  return best;
}

volatile float sink;

} // namespace

int main(int argc, char** argv) {
  const std::size_t rows = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 2048;
  const std::size_t k = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 4096;
  gg::oracle* o = nullptr;
  const std::string tools = tools_dir();
  if (!tools.empty()) {
    auto& loaded = gg::load(tools);
    if (loaded.ok())
      o = &loaded;
    else
      std::printf("# ggml not loaded: %s\n", loaded.error.c_str());
  }
  std::printf("# matvec %zu x %zu, 1 thread; ggml: %s\n", rows, k,
              o ? (o->variant).c_str() : "not available");
  std::printf("%-6s %10s %10s %10s %8s\n", "format", "MB", "exo GF/s",
              "ggml GF/s", "exo/ggml");
  std::mt19937 rng{1};
  std::normal_distribution<float> g{0.0f, 0.02f};
  std::vector<float> w(rows * k), a(k);
  for (auto& v : w)
    v = g(rng);
  for (auto& v : a)
    v = 50 * g(rng);
  const ggml_type formats[] = {
      ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1,
      ggml_type::q8_0, ggml_type::q2_k, ggml_type::q3_k, ggml_type::q4_k,
      ggml_type::q5_k, ggml_type::q6_k};
  for (ggml_type t : formats) {
    const std::size_t rb = *row_bytes(t, k);
    const ggml_type at = info(t).dot_type;
    std::vector<std::uint8_t> wq(rows * rb), aq(*row_bytes(at, k));
    for (std::size_t r = 0; r < rows; ++r)
      quantize_row(t, w.data() + r * k, wq.data() + r * rb, k);
    std::vector<float> out(rows);
    const double mine = gflops(rows, k, [&] {
      quantize_activations(at, a.data(), aq.data(), k);
      for (std::size_t r = 0; r < rows; ++r)
        out[r] = vec_dot(t, k, wq.data() + r * rb, aq.data());
      sink = out[rows / 2];
    });
    double theirs = 0;
    if (o) {
      const auto* c = o->get_type_traits_cpu(static_cast<int>(t));
      const auto* ca = o->get_type_traits_cpu(static_cast<int>(at));
      theirs = gflops(rows, k, [&] {
        ca->from_float(a.data(), aq.data(), static_cast<std::int64_t>(k));
        for (std::size_t r = 0; r < rows; ++r)
          c->vec_dot(static_cast<int>(k), &out[r], 0, wq.data() + r * rb, 0,
                     aq.data(), 0, 1);
        sink = out[rows / 2];
      });
    }
    std::printf("%-6s %10.1f %10.1f %10.1f %8.2f\n", name(t),
                double(rows * rb) / 1e6, mine, theirs,
                theirs > 0 ? mine / theirs : 0.0);
  }
  return 0;
}
