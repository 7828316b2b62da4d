// vulkan_bench: figures of the Vulkan backend on the first Vulkan device.
//
//   XDG_RUNTIME_DIR=/tmp ./vulkan_bench [--quick]
//
// Prints copy bandwidth (host->device, device->host, device->device) for 1,
// 16, 64 and 256 MiB beside plain memcpy measured in the same run, the same
// through staging buffers, allocation and synchronize latency, and matmul
// GFLOP/s. Each figure is the best of several repetitions (the machine may
// be shared); --quick stops at 16 MiB and repeats less.

#include "backends/vulkan/vulkan_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace exo::backend;

namespace {

using clock_type = std::chrono::steady_clock;

/// Best wall time in seconds of `reps` runs of `fn` after one warm-up.
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

bool ok(const status& st, const char* what) {
  if (!st.ok())
    std::fprintf(stderr, "%s: %s\n", what, st.err().to_string().c_str());
  return st.ok();
}

double gib_per_s(std::size_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / (1u << 30) : 0;
}

struct bandwidth_row {
  std::size_t mib;
  double memcpy_s, h2d_s, d2h_s, d2d_s;
};

std::vector<bandwidth_row>
bandwidth(device& dev, const std::vector<std::size_t>& sizes, int reps) {
  std::vector<bandwidth_row> rows;
  for (auto mib : sizes) {
    std::size_t n = mib << 20;
    std::vector<char> src(n, 1), dst(n, 2);
    auto a = dev.allocate(n);
    auto b = dev.allocate(n);
    if (!a || !b) {
      std::fprintf(stderr, "allocate %zu MiB failed\n", mib);
      break;
    }
    bandwidth_row r{mib, 0, 0, 0, 0};
    r.memcpy_s = best_of(reps, [&] {
      std::memcpy(dst.data(), src.data(), n);
      return dst[n / 2] == 1;
    });
    r.h2d_s = best_of(
        reps, [&] { return ok(dev.write(**a, 0, src.data(), n), "write"); });
    r.d2h_s = best_of(
        reps, [&] { return ok(dev.read(**a, 0, dst.data(), n), "read"); });
    r.d2d_s = best_of(reps, [&] {
      return ok(dev.copy(**a, 0, **b, 0, n), "copy") &&
             ok(dev.synchronize(), "synchronize");
    });
    rows.push_back(r);
  }
  return rows;
}

void print_bandwidth(const char* title, const std::vector<bandwidth_row>& rs) {
  std::printf("\n%s\n", title);
  std::printf("| size | memcpy GiB/s | host->device GiB/s | device->host GiB/s "
              "| device->device GiB/s |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (auto& r : rs) {
    auto n = r.mib << 20;
    auto m = gib_per_s(n, r.memcpy_s);
    auto pct = [&](double s) {
      return m > 0 ? 100.0 * gib_per_s(n, s) / m : 0;
    };
    std::printf("| %zu MiB | %.2f | %.2f (%.0f%%) | %.2f (%.0f%%) | %.2f "
                "(%.0f%%) |\n",
                r.mib, m, gib_per_s(n, r.h2d_s), pct(r.h2d_s),
                gib_per_s(n, r.d2h_s), pct(r.d2h_s), gib_per_s(n, r.d2d_s),
                pct(r.d2d_s));
  }
}

double matmul_gflops(device& dev, matmul_dims d, int reps) {
  std::mt19937 rng{1};
  std::uniform_real_distribution<float> dist{-1, 1};
  std::vector<float> ha(d.m * d.k), hb(d.k * d.n);
  for (auto& x : ha)
    x = dist(rng);
  for (auto& x : hb)
    x = dist(rng);
  auto a = dev.allocate(ha.size() * 4);
  auto b = dev.allocate(hb.size() * 4);
  auto c = dev.allocate(d.m * d.n * 4);
  if (!a || !b || !c)
    return 0;
  if (!ok(dev.write(**a, 0, ha.data(), ha.size() * 4), "write") ||
      !ok(dev.write(**b, 0, hb.data(), hb.size() * 4), "write"))
    return 0;
  auto s = best_of(reps, [&] {
    return ok(dev.matmul({a->get(), 0}, {b->get(), 0}, {c->get(), 0}, d),
              "matmul") &&
           ok(dev.synchronize(), "synchronize");
  });
  return s > 0 ? 2.0 * d.m * d.n * d.k / s / 1e9 : 0;
}

} // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string{argv[1]} == "--quick";
  auto be = make_vulkan_backend();
  if (auto st = be->initialize(); !st.ok()) {
    std::fprintf(stderr, "vulkan: %s\n", st.err().to_string().c_str());
    return 1;
  }
  auto& dev = *be->device_at(0);
  const auto& p = dev.properties();
  std::printf("device: %s (%s, %s, %s)\n", p.name.c_str(), p.vendor.c_str(),
              p.architecture.c_str(), p.driver_version.c_str());
  std::vector<std::size_t> sizes{1, 16};
  if (!quick) {
    sizes.push_back(64);
    sizes.push_back(256);
  }
  int reps = quick ? 2 : 5;
  print_bandwidth("Copy bandwidth, mapped memory (best of runs):",
                  bandwidth(dev, sizes, reps));
  {
    vulkan_options o;
    o.force_staging = true;
    auto sbe = make_vulkan_backend(o);
    if (sbe->initialize().ok())
      print_bandwidth("Copy bandwidth, through 8 MiB staging buffers:",
                      bandwidth(*sbe->device_at(0), sizes, reps));
  }

  std::printf("\n| latency | microseconds |\n|---|---:|\n");
  for (std::size_t mib : {1u, 64u}) {
    int n = quick ? 20 : 100;
    auto t0 = clock_type::now();
    for (int i = 0; i < n; ++i) {
      auto buf = dev.allocate(mib << 20);
      if (!buf) {
        std::fprintf(stderr, "allocate failed\n");
        return 1;
      }
    }
    auto s = std::chrono::duration<double>(clock_type::now() - t0).count();
    std::printf("| allocate + free %zu MiB | %.1f |\n", mib, s / n * 1e6);
  }
  {
    int n = quick ? 100 : 1000;
    auto t0 = clock_type::now();
    for (int i = 0; i < n; ++i)
      if (!ok(dev.synchronize(), "synchronize"))
        return 1;
    auto s = std::chrono::duration<double>(clock_type::now() - t0).count();
    std::printf("| synchronize, idle queue | %.2f |\n", s / n * 1e6);
    auto x = dev.allocate(64);
    auto y = dev.allocate(64);
    if (!x || !y)
      return 1;
    t0 = clock_type::now();
    for (int i = 0; i < n; ++i)
      if (!ok(dev.copy(**x, 0, **y, 0, 64), "copy") ||
          !ok(dev.synchronize(), "synchronize"))
        return 1;
    s = std::chrono::duration<double>(clock_type::now() - t0).count();
    std::printf("| 64-byte copy + synchronize (one submit) | %.1f |\n",
                s / n * 1e6);
  }

  std::printf("\n| matmul | GFLOP/s |\n|---|---:|\n");
  int mreps = quick ? 1 : 3;
  std::printf("| 1024 x 1024 x 1024 | %.2f |\n",
              matmul_gflops(dev, {1024, 1024, 1024, false}, mreps));
  std::printf("| 1024 x 1024 x 1024, transpose_b | %.2f |\n",
              matmul_gflops(dev, {1024, 1024, 1024, true}, mreps));
  std::printf("| 1 x 4096 x 4096 (matvec), transpose_b | %.2f |\n",
              matmul_gflops(dev, {1, 4096, 4096, true}, mreps));
  std::printf("| 1 x 4096 x 4096 (matvec) | %.2f |\n",
              matmul_gflops(dev, {1, 4096, 4096, false}, mreps));
  return 0;
}
