// The Llama operations of the device interface, one line per operation and
// shape, on every non-simulated device the factory finds (cpu, Vulkan, and
// CUDA/HIP where present). Shapes are TinyLlama 1.1B's (width 2048, 32
// query / 4 KV heads of 64, feed-forward 5632): "decode" is one token,
// "prefill" 32 tokens. Each figure is the best of several runs of
// (operation + synchronize), so it includes one submission on asynchronous
// devices. GB/s counts the bytes an operation must read and write once;
// GFLOP/s its multiply-adds x 2.
//
//   model_ops_bench [--quick]

#include "backends/factory/factory.hpp"
#include "backends/host_kernels.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace exo::backend;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr std::size_t embd = 2048, heads = 32, kv_heads = 4, head_dim = 64,
                      ff = 5632, ctx = 512;

std::unique_ptr<buffer> filled(device& dev, std::size_t bytes,
                               std::mt19937& rng) {
  auto b = dev.allocate(bytes);
  if (!b)
    return nullptr;
  std::vector<float> v((bytes + 3) / 4);
  std::uniform_real_distribution<float> d{-1.0f, 1.0f};
  for (auto& x : v)
    x = d(rng);
  (void) dev.write(**b, 0, v.data(), bytes);
  return std::move(*b);
}

/// Best time of `reps` runs of op + synchronize, in seconds, or a negative
/// value when the operation fails (its error is printed).
double best(device& dev, int reps, const std::function<status()>& op) {
  double t = 1e30;
  for (int i = 0; i < reps + 1; ++i) { // the first run warms up
    auto t0 = clock_type::now();
    auto st = op();
    if (st.ok())
      st = dev.synchronize();
    if (!st.ok()) {
      std::printf("    error: %s\n", st.err().to_string().c_str());
      return -1;
    }
    double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (i > 0)
      t = std::min(t, s);
  }
  return t;
}

void line(const device& dev, const char* op, const std::string& shape,
          double s, double bytes, double flops) {
  if (s < 0)
    return;
  std::printf("%-8s %-16s %-28s %10.1f us %8.2f GB/s %8.2f GFLOP/s\n",
              to_string(dev.properties().kind), op, shape.c_str(), s * 1e6,
              bytes / s / 1e9, flops / s / 1e9);
}

void bench_device(device& dev, bool quick) {
  std::mt19937 rng{1};
  const int reps = quick ? 2 : 5;
  std::printf("\n%s (%s)\n", dev.properties().id.c_str(),
              dev.properties().name.c_str());
  for (std::size_t rows : {std::size_t{1}, std::size_t{32}}) {
    std::string tag = rows == 1 ? "decode" : "prefill";
    // rms_norm, in place.
    {
      auto x = filled(dev, rows * embd * 4, rng), w = filled(dev, embd * 4, rng);
      if (!x || !w)
        return;
      double s = best(dev, reps, [&] {
        return dev.rms_norm({x.get(), 0}, {w.get(), 0}, {x.get(), 0}, rows,
                            embd, 1e-5f);
      });
      line(dev, "rms_norm", tag + " " + std::to_string(rows) + "x2048", s,
           (2.0 * rows + 1) * embd * 4, 3.0 * rows * embd);
    }
    // rope of the query rows.
    {
      auto x = filled(dev, rows * heads * head_dim * 4, rng);
      auto pos = dev.allocate(rows * 4);
      if (!x || !pos)
        return;
      std::vector<std::int32_t> p(rows);
      for (std::size_t r = 0; r < rows; ++r)
        p[r] = static_cast<std::int32_t>(100 + r);
      (void) dev.write(**pos, 0, p.data(), rows * 4);
      rope_dims d{rows, heads, head_dim, head_dim, 10000.0f};
      double s = best(dev, reps, [&] {
        return dev.rope({x.get(), 0}, {pos->get(), 0}, {}, d);
      });
      line(dev, "rope", tag + " " + std::to_string(rows) + "x32x64", s,
           2.0 * rows * heads * head_dim * 4, 3.0 * rows * heads * head_dim);
    }
    // attention over a 512-position cache (decode) or the first 32 rows.
    {
      std::size_t pos0 = rows == 1 ? ctx - 1 : 0;
      std::size_t n_ctx = pos0 + rows;
      auto q = filled(dev, rows * heads * head_dim * 4, rng);
      auto k = filled(dev, n_ctx * kv_heads * head_dim * 4, rng);
      auto v = filled(dev, n_ctx * kv_heads * head_dim * 4, rng);
      auto o = dev.allocate(rows * heads * head_dim * 4);
      if (!q || !k || !v || !o)
        return;
      attention_dims d{rows,     pos0, heads, kv_heads, head_dim,
                       kv_heads * head_dim, 0.125f};
      double s = best(dev, reps, [&] {
        return dev.attention({q.get(), 0}, {k.get(), 0}, {v.get(), 0},
                             {o->get(), 0}, d);
      });
      double avg_ctx = pos0 + (rows + 1) / 2.0;
      line(dev, "attention",
           tag + " " + std::to_string(rows) + "@" + std::to_string(pos0)
             + " 32/4x64",
           s, 2.0 * n_ctx * kv_heads * head_dim * 4
                + 2.0 * rows * heads * head_dim * 4,
           4.0 * rows * heads * head_dim * avg_ctx);
    }
    // silu_mul of the feed-forward activations, in place.
    {
      auto g = filled(dev, rows * ff * 4, rng), u = filled(dev, rows * ff * 4, rng);
      if (!g || !u)
        return;
      double s = best(dev, reps, [&] {
        return dev.silu_mul({g.get(), 0}, {u.get(), 0}, {g.get(), 0},
                            rows * ff);
      });
      line(dev, "silu_mul", tag + " " + std::to_string(rows) + "x5632", s,
           3.0 * rows * ff * 4, 5.0 * rows * ff);
    }
    // The feed-forward up projection: W [5632 x 2048].
    for (auto t : {weight_type::f32, weight_type::f16, weight_type::q8_0,
                   weight_type::q4_k, weight_type::q6_k}) {
      auto rb = weight_row_bytes(t, embd);
      std::vector<float> row(embd);
      std::vector<std::uint8_t> enc(*rb * ff);
      std::uniform_real_distribution<float> d{-1.0f, 1.0f};
      for (std::size_t j = 0; j < ff; ++j) {
        for (auto& x : row)
          x = d(rng);
        host::encode_row(t, row.data(), enc.data() + j * *rb, embd);
      }
      auto w = dev.allocate(enc.size());
      auto a = filled(dev, rows * embd * 4, rng);
      auto c = dev.allocate(rows * ff * 4);
      if (!w || !a || !c)
        return;
      (void) dev.write(**w, 0, enc.data(), enc.size());
      matmul_dims md{rows, ff, embd, true};
      double s = best(dev, reps, [&] {
        return dev.matmul_weights({a.get(), 0}, {w->get(), 0}, t,
                                  {c->get(), 0}, md);
      });
      std::string op = std::string{"matmul_"} + to_string(t);
      line(dev, op.c_str(),
           tag + " " + std::to_string(rows) + "x2048 * 5632x2048", s,
           double(enc.size()) + 4.0 * rows * (embd + ff),
           2.0 * rows * ff * embd);
    }
  }
}

} // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  factory_options opts;
  opts.use_environment = false;
  auto reg = registry::create(opts);
  if (!reg) {
    std::fprintf(stderr, "no devices: %s\n", reg.err().to_string().c_str());
    return 1;
  }
  std::printf("%-8s %-16s %-28s %13s %13s %16s\n", "backend", "op", "shape",
              "time", "traffic", "compute");
  for (auto* dev : reg->devices())
    if (!dev->properties().simulated)
      bench_device(*dev, quick);
  return 0;
}
