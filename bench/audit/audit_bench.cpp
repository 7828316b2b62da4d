// Audit sink benchmark: sustained append rate on one core under each fsync
// policy, the latency one append adds to a device operation, and the rate of
// `verify`. Run: bench_audit (or build/bench/audit/audit_bench [DIR]).

#include "core/audit/audit_log.hpp"
#include "core/audit/verify.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

using namespace exo::audit;
using bench_clock = std::chrono::steady_clock;

namespace {

event sample_event(std::size_t i) {
  event ev;
  ev.type = event_type::device_allocate;
  ev.principal = "alice";
  ev.details = {{"device", "gpu0"},
                {"bytes", std::to_string(4096 + i % 1000)},
                {"handle", std::to_string(i)}};
  return ev;
}

struct run_result {
  std::size_t events = 0;
  double seconds = 0;
  double p50_ns = 0, p99_ns = 0, max_ns = 0;
  std::uint64_t bytes = 0;
};

run_result run(const std::string& base, const char* name, fsync_policy sync,
               std::size_t buffer, std::size_t events) {
  auto dir = base + "/" + name;
  std::filesystem::remove_all(dir);
  audit_log_options opts;
  opts.directory = dir;
  opts.node = "bench-node";
  opts.sync = sync;
  opts.buffer_records = buffer;
  run_result res;
  std::vector<double> lat(events);
  {
    audit_log log{opts};
    auto start = bench_clock::now();
    for (std::size_t i = 0; i < events; ++i) {
      auto ev = sample_event(i);
      auto t0 = bench_clock::now();
      log.append(ev);
      lat[i] = std::chrono::duration<double, std::nano>(bench_clock::now()
                                                        - t0)
                 .count();
    }
    log.flush();
    res.seconds =
      std::chrono::duration<double>(bench_clock::now() - start).count();
  }
  std::sort(lat.begin(), lat.end());
  res.events = events;
  res.p50_ns = lat[events / 2];
  res.p99_ns = lat[events * 99 / 100];
  res.max_ns = lat.back();
  for (auto& f : list_log_files(dir, "audit"))
    res.bytes += std::filesystem::file_size(f.path);
  return res;
}

} // namespace

int main(int argc, char** argv) {
  std::string base = argc > 1 ? argv[1] : "/tmp/exo-audit-bench";
  std::filesystem::create_directories(base);
  std::printf("audit append, one thread (%s)\n", base.c_str());
  std::printf("%-28s %9s %12s %10s %10s %12s %9s\n", "fsync policy", "events",
              "events/s", "p50 ns", "p99 ns", "max ns", "B/record");
  struct config {
    const char* name;
    fsync_policy sync;
    std::size_t buffer;
    std::size_t events;
  };
  const config configs[] = {
    {"every_flush (1000)", fsync_policy::every_flush, 1000, 300000},
    {"never (buffer 1000)", fsync_policy::never, 1000, 300000},
    {"every_record", fsync_policy::every_record, 1, 2000},
  };
  for (auto& c : configs) {
    auto r = run(base, c.name[0] == 'e' && c.buffer == 1 ? "rec"
                       : c.sync == fsync_policy::never  ? "never"
                                                        : "flush",
                 c.sync, c.buffer, c.events);
    std::printf("%-28s %9zu %12.0f %10.0f %10.0f %12.0f %9.0f\n", c.name,
                r.events, r.events / r.seconds, r.p50_ns, r.p99_ns, r.max_ns,
                static_cast<double>(r.bytes) / r.events);
  }
  // Verify the every_flush log (the largest) end to end.
  std::vector<std::string> files;
  for (auto& f : list_log_files(base + "/flush", "audit"))
    files.push_back(f.path);
  verify_options genesis;
  genesis.require_genesis = true;
  auto t0 = bench_clock::now();
  auto res = verify(files, genesis);
  auto secs = std::chrono::duration<double>(bench_clock::now() - t0).count();
  std::printf("\nverify: %llu records in %.3f s = %.0f records/s (%s)\n",
              static_cast<unsigned long long>(res.records), secs,
              res.records / secs, res.ok ? "ok" : "FAILED");
  std::filesystem::remove_all(base);
  return res.ok ? 0 : 1;
}
