// Device layer benchmark: host<->device and device<->device copy bandwidth
// per device for 1..256 MiB beside plain memcpy measured in the same run;
// allocation and synchronize latency; growing a buffer (a KV pool's arena)
// to twice its size by a new buffer and a copy beside resizing it where it
// is (devices that resize); discovery cold and warm; exo-node
// start to ready (when given the path of exo-node).
//
//   device_bench [path/to/exo-node]

#include "backends/factory/factory.hpp"
#include "core/discovery/discovery.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace exo;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Best of `reps` runs of f, in seconds.
template <class F>
double best_of(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = clock_type::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

double gbs(std::size_t bytes, double s) {
  return double(bytes) / s / 1e9;
}

void copies(backend::device& dev) {
  std::printf("\n%s (%s)\n", dev.properties().id.c_str(),
              dev.properties().name.c_str());
  std::printf("  %8s %10s %10s %10s %10s %8s %8s\n", "size", "memcpy",
              "h->d", "d->h", "d->d", "h->d %", "d->h %");
  for (std::size_t mib : {1, 16, 64, 256}) {
    std::size_t n = mib << 20;
    std::vector<char> src(n, 1), dst(n, 0);
    int reps = mib >= 64 ? 3 : 10;
    auto a = dev.allocate(n);
    auto b = dev.allocate(n);
    if (!a || !b) {
      std::printf("  %5zu MiB: allocation failed\n", mib);
      continue;
    }
    double t_mem = best_of(reps, [&] { std::memcpy(dst.data(), src.data(), n); });
    double t_h2d = best_of(reps, [&] { (void) dev.write(**a, 0, src.data(), n); });
    double t_d2h = best_of(reps, [&] { (void) dev.read(**a, 0, dst.data(), n); });
    double t_d2d = best_of(reps, [&] {
      (void) dev.copy(**a, 0, **b, 0, n);
      (void) dev.synchronize();
    });
    std::printf("  %4zu MiB %7.2f GB/s %6.2f GB/s %6.2f GB/s %6.2f GB/s "
                "%7.0f%% %7.0f%%\n",
                mib, gbs(n, t_mem), gbs(n, t_h2d), gbs(n, t_d2h), gbs(n, t_d2d),
                100 * t_mem / t_h2d, 100 * t_mem / t_d2h);
  }
  // Latencies.
  constexpr int iters = 2000;
  auto t0 = clock_type::now();
  for (int i = 0; i < iters; ++i) {
    auto buf = dev.allocate(4096);
    (void) buf;
  }
  double alloc_us = seconds_since(t0) / iters * 1e6;
  t0 = clock_type::now();
  for (int i = 0; i < iters; ++i)
    (void) dev.synchronize();
  double sync_us = seconds_since(t0) / iters * 1e6;
  std::printf("  allocate+free 4 KiB: %.2f us   synchronize: %.2f us\n",
              alloc_us, sync_us);
}

/// A written buffer of n grown to 2n: a new buffer, a copy and a free (what
/// a KV pool's growth does on a device that cannot resize), beside
/// device::resize; and the peak memory of each.
void growth(backend::device& dev) {
  if (!dev.resizes())
    return;
  std::printf("\n%s: a written buffer grown to twice its size\n",
              dev.properties().id.c_str());
  std::printf("  %8s %16s %12s %14s %10s\n", "size", "allocate+copy",
              "resize", "peak (copy)", "(resize)");
  for (std::size_t mib : {16, 256, 1024}) {
    const std::size_t n = mib << 20;
    std::vector<char> fill(n, 3);
    double t_copy = 1e30, t_resize = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      auto a = dev.allocate(n);
      if (!a) {
        std::printf("  %5zu MiB: allocation failed\n", mib);
        return;
      }
      (void) dev.write(**a, 0, fill.data(), n);
      auto t0 = clock_type::now();
      auto b = dev.allocate(2 * n);
      if (!b) {
        std::printf("  %5zu MiB: no room for a copy\n", mib);
        return;
      }
      (void) dev.copy(**a, 0, **b, 0, n);
      (void) dev.synchronize();
      a->reset();
      t_copy = std::min(t_copy, seconds_since(t0));
      b->reset();
      auto c = dev.allocate(n);
      if (!c)
        return;
      (void) dev.write(**c, 0, fill.data(), n);
      t0 = clock_type::now();
      if (!dev.resize(**c, 2 * n))
        return;
      (void) dev.synchronize();
      t_resize = std::min(t_resize, seconds_since(t0));
      char last = 0;
      (void) dev.read(**c, n - 1, &last, 1);
      if (last != 3)
        std::printf("  resize lost the bytes!\n");
    }
    std::printf("  %4zu MiB %13.2f ms %9.3f ms %10zu MiB %6zu MiB\n", mib,
                t_copy * 1e3, t_resize * 1e3, 3 * mib, 2 * mib);
  }
}

void device_to_device(std::vector<backend::device*>& devs) {
  if (devs.size() < 2)
    return;
  std::printf("\nacross devices (copy_between, 64 MiB)\n");
  std::size_t n = 64u << 20;
  for (auto* s : devs)
    for (auto* d : devs) {
      if (s == d)
        continue;
      auto a = s->allocate(n);
      auto b = d->allocate(n);
      if (!a || !b)
        continue;
      double t = best_of(3, [&] {
        (void) backend::copy_between(*s, **a, 0, *d, **b, 0, n);
      });
      std::printf("  %-22s -> %-22s %6.2f GB/s\n", s->properties().id.c_str(),
                  d->properties().id.c_str(), gbs(n, t));
    }
}

void discovery_times() {
  backend::factory_options o;
  o.sim.devices = {{"a100-40g", ""}, {"adreno-740", ""}};
  auto dir = std::string{"/tmp/exo-bench-discovery"};
  std::string cmd = "rm -rf " + dir + " && mkdir -p " + dir;
  if (std::system(cmd.c_str()) != 0)
    return;
  auto path = dir + "/devices.json";
  for (int round = 0; round < 2; ++round) {
    auto t0 = clock_type::now();
    auto reg = backend::registry::create(o);
    std::string note;
    auto known = discovery::device_registry::load(path, note);
    auto r = discovery::discover(*reg, known, true);
    std::string err;
    known.save(path, err);
    double ms = seconds_since(t0) * 1e3;
    std::printf("  discovery (%s registry, %zu devices, backends included): "
                "%.1f ms\n",
                r.warm ? "warm" : "cold", r.devices.size(), ms);
  }
}

void start_to_ready(const char* exo_node) {
  auto dir = std::string{"/tmp/exo-bench-node"};
  std::string cmd = "rm -rf " + dir + " && mkdir -p " + dir;
  if (std::system(cmd.c_str()) != 0)
    return;
  auto cfg = dir + "/node.json";
  FILE* f = std::fopen(cfg.c_str(), "w");
  std::fprintf(f, "{\"node\": {\"name\": \"bench\", \"state_dir\": \"%s\"},"
                  " \"network\": {\"port\": 0},"
                  " \"devices\": {\"simulated\": [{\"profile\": \"m2-max\"}]}}",
               dir.c_str());
  std::fclose(f);
  for (int round = 0; round < 3; ++round) {
    int fds[2];
    if (pipe(fds) != 0)
      return;
    auto t0 = clock_type::now();
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      execl(exo_node, exo_node, "--config", cfg.c_str(), (char*) nullptr);
      _exit(127);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    while (out.find("ready in") == std::string::npos) {
      auto n = read(fds[0], buf, sizeof(buf));
      if (n <= 0)
        break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    double ms = seconds_since(t0) * 1e3;
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    auto pos = out.find("ready in");
    std::printf("  exo-node start to ready: %.1f ms wall (process start "
                "included); node says %s",
                ms,
                pos == std::string::npos
                  ? "nothing\n"
                  : out.substr(pos, out.find('\n', pos) - pos + 1).c_str());
  }
}

} // namespace

int main(int argc, char** argv) {
  // A line at a time: a run cut short by a time limit keeps what it said.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  backend::factory_options o;
  o.use_environment = false;
  o.include = {"cpu", "sim", "vulkan", "cuda", "hip"};
  o.sim.devices = {{"a100-40g", ""}};
  auto reg = backend::registry::create(o);
  if (!reg) {
    std::fprintf(stderr, "%s\n", reg.err().message.c_str());
    return 1;
  }
  auto devs = reg->devices();
  std::printf("== device layer: copy bandwidth (best of runs) ==\n");
  for (auto* d : devs)
    copies(*d);
  device_to_device(devs);
  for (auto* d : devs)
    growth(*d);
  std::printf("\n== discovery ==\n");
  discovery_times();
  if (argc > 1) {
    std::printf("\n== node ==\n");
    start_to_ready(argv[1]);
  }
  return 0;
}
