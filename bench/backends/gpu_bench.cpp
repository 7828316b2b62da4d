// gpu_bench: figures of the CUDA and HIP backends on their first device.
//
//   ./gpu_bench [--quick]
//
// Prints host->device and device->host bandwidth through the pinned staging
// buffers for 1, 16, 64 and 256 MiB beside plain memcpy, device->device
// copy bandwidth, and f32 matmul GFLOP/s (vendor BLAS and the shared tiled
// kernel). Each figure is the best of several repetitions. Without a device
// it prints the backend's reason and exits 0.

#include "backends/backend.hpp"

#ifdef EXO_BENCH_CUDA
#  include "backends/cuda/cuda_backend.hpp"
#endif
#ifdef EXO_BENCH_HIP
#  include "backends/hip/hip_backend.hpp"
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace exo::backend;

namespace {

using clock_type = std::chrono::steady_clock;

double best_of(int reps, const std::function<bool()>& fn) {
  if (!fn())
    return -1;
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = clock_type::now();
    if (!fn())
      return -1;
    best = std::min(
      best, std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return best;
}

double gb_per_s(std::size_t bytes, double s) {
  return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0;
}

void run(const char* name, device& dev, bool quick) {
  auto& p = dev.properties();
  std::printf("%s: %s (%s, %s, PCI %s)\n", name, p.name.c_str(),
              p.architecture.c_str(), p.driver_version.c_str(),
              p.pci_bus_id.c_str());
  int reps = quick ? 3 : 10;
  std::printf("%8s %10s %10s %10s %10s  (GB/s)\n", "MiB", "memcpy", "h2d",
              "d2h", "d2d");
  std::vector<std::size_t> sizes{1, 16, 64, 256};
  if (quick)
    sizes.resize(2);
  for (auto mib : sizes) {
    std::size_t n = mib << 20;
    std::vector<char> src(n, 1), dst(n, 2);
    auto a = dev.allocate(n);
    auto b = dev.allocate(n);
    if (!a || !b) {
      std::printf("allocate %zu MiB failed\n", mib);
      break;
    }
    double mc = best_of(reps, [&] {
      std::memcpy(dst.data(), src.data(), n);
      return dst[n / 2] == 1;
    });
    double h2d = best_of(reps, [&] {
      return dev.write(**a, 0, src.data(), n).ok() && dev.synchronize().ok();
    });
    double d2h = best_of(reps, [&] {
      return dev.read(**a, 0, dst.data(), n).ok();
    });
    double d2d = best_of(reps, [&] {
      return dev.copy(**a, 0, **b, 0, n).ok() && dev.synchronize().ok();
    });
    std::printf("%8zu %10.2f %10.2f %10.2f %10.2f\n", mib, gb_per_s(n, mc),
                gb_per_s(n, h2d), gb_per_s(n, d2h), gb_per_s(2 * n, d2d));
  }
  for (std::size_t s : {std::size_t{1024}, std::size_t{4096}}) {
    if (quick && s > 1024)
      break;
    matmul_dims d{s, s, s, true};
    auto a = dev.allocate(s * s * 4);
    auto b = dev.allocate(s * s * 4);
    auto c = dev.allocate(s * s * 4);
    if (!a || !b || !c)
      break;
    std::vector<float> ones(s * s, 0.5f);
    if (!dev.write(**a, 0, ones.data(), s * s * 4).ok()
        || !dev.write(**b, 0, ones.data(), s * s * 4).ok())
      break;
    double t = best_of(reps, [&] {
      return dev.matmul({a->get(), 0}, {b->get(), 0}, {c->get(), 0}, d).ok()
             && dev.synchronize().ok();
    });
    std::printf("matmul %zux%zux%zu: %.1f GFLOP/s\n", s, s, s,
                t > 0 ? 2.0 * s * s * s / t / 1e9 : 0.0);
  }
}

} // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string{argv[1]} == "--quick";
  struct entry {
    const char* name;
    std::function<std::unique_ptr<backend>(gpu_options)> make;
  };
  std::vector<entry> backends;
#ifdef EXO_BENCH_CUDA
  backends.push_back({"cuda", [](gpu_options o) { return make_cuda_backend(o); }});
#endif
#ifdef EXO_BENCH_HIP
  backends.push_back({"hip", [](gpu_options o) { return make_hip_backend(o); }});
#endif
  for (auto& b : backends)
    for (bool tiled : {false, true}) {
      gpu_options opts;
      opts.tiled_matmul = tiled;
      auto be = b.make(opts);
      auto st = be->initialize();
      if (!st.ok()) {
        std::printf("%s: %s\n", b.name, st.err().message.c_str());
        break;
      }
      std::printf("-- %s, matmul through %s\n", b.name,
                  tiled ? "the tiled kernel" : "the vendor BLAS / default");
      run(b.name, *be->device_at(0), quick || tiled);
    }
  return 0;
}
