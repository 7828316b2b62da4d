// The `plan` command: exit codes, table and JSON output, bad arguments.
#include <catch2/catch.hpp>

#include "core/placement/plan_command.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace exo::placement;

namespace {

struct run_result {
  int rc;
  std::string out, err;
};

run_result run(std::vector<std::string> args) {
  args.insert(args.begin(), "exo-plan");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  std::ostringstream out, err;
  int rc = run_plan_command(static_cast<int>(argv.size()), argv.data(), out,
                            err);
  return {rc, out.str(), err.str()};
}

std::string write_temp(const std::string& text) {
  static int counter = 0;
  auto path = "/tmp/exo_placement_test_" + std::to_string(getpid()) + "_"
              + std::to_string(counter++) + ".json";
  std::ofstream(path) << text;
  return path;
}

std::string problem_text(const std::string& memory) {
  return R"({"devices": [
    {"id": "g0", "node": "a", "memory": ")" + memory + R"(", "flops": 1e13},
    {"id": "g1", "node": "b", "memory": ")" + memory + R"(", "flops": 2e13}],
   "links": [{"a": "a", "b": "b", "latency": 0.0005, "bandwidth": 1e9}],
   "model": {"layers": [{"count": 16, "weight_bytes": "500MiB",
                         "flops_per_token": 1e9,
                         "activation_bytes": 8192}]}})";
}

} // namespace

TEST_CASE("plan prints a proven optimal plan and exits 0") {
  auto path = write_temp(problem_text("8GiB"));
  auto r = run({"plan", "--problem", path});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("proven optimal: yes"));
  CHECK_THAT(r.out, Catch::Contains("g1"));
  auto j = run({"--problem", path, "--json", "--objective", "throughput",
                "--solver", "gecode", "--time-limit", "5000"});
  CHECK(j.rc == 0);
  CHECK_THAT(j.out, Catch::StartsWith("{\"status\":\"optimal\""));
  CHECK_THAT(j.out, Catch::Contains("\"objective\":\"throughput\""));
  CHECK_THAT(j.out, Catch::Contains("\"solver\":\"gecode\""));
  std::remove(path.c_str());
}

TEST_CASE("plan exits 1 with the explanation when infeasible") {
  auto path = write_temp(problem_text("1GiB"));
  auto r = run({"--problem", path});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Catch::Contains("infeasible: total free memory is"));
  auto j = run({"--problem", path, "--json"});
  CHECK(j.rc == 1);
  CHECK_THAT(j.out, Catch::Contains("\"status\":\"infeasible\""));
  std::remove(path.c_str());
}

TEST_CASE("plan exits 2 with the reason on bad input") {
  auto path = write_temp(problem_text("lots"));
  auto r = run({"--problem", path});
  CHECK(r.rc == 2);
  CHECK_THAT(r.err, Catch::Contains("devices[0].memory"));
  std::remove(path.c_str());
  CHECK(run({}).rc == 2);
  CHECK(run({"--problem"}).rc == 2);
  CHECK_THAT(run({"--problem", "x.json", "--objective", "speed"}).err,
             Catch::Contains("--objective must be"));
  CHECK_THAT(run({"--problem", "x.json", "--time-limit", "-3"}).err,
             Catch::Contains("--time-limit must be"));
  // strtod and strtol took a hex float and a '+'.
  CHECK_THAT(run({"--problem", "x.json", "--blend-weight", "0x1p-1"}).err,
             Catch::Contains("--blend-weight must be a number in [0, 1]: "
                             "'0x1p-1' is not a number"));
  CHECK_THAT(run({"--problem", "x.json", "--time-limit", "+5"}).err,
             Catch::Contains("--time-limit must be"));
  CHECK_THAT(run({"--problem", "x.json", "--time-limit", "0"}).err,
             Catch::Contains("'0' must be > 0"));
  CHECK_THAT(run({"--problem", "x.json", "--time-limit", "2d"}).err,
             Catch::Contains("'2d' is larger than 86400000ms"));
  CHECK_THAT(run({"--problem", "x.json", "--solver", "magic"}).err,
             Catch::Contains("--solver must be"));
  CHECK_THAT(run({"--problem", "x.json", "--frobnicate"}).err,
             Catch::Contains("unknown option \"--frobnicate\""));
  CHECK_THAT(run({"--problem", "/nonexistent.json"}).err,
             Catch::Contains("cannot open"));
}

namespace {

/// A job of `gib` GiB in 4 layers on a cluster of two 8 GiB devices.
std::string job_file(int gib) {
  const auto layer = std::to_string((std::uint64_t{1} << 30) * gib / 4);
  return write_temp(R"({
  "devices": [
    {"id": "a/gpu", "node": "a", "memory": "8GiB", "flops": 1e13},
    {"id": "b/gpu", "node": "b", "memory": "8GiB", "flops": 5e12}
  ],
  "links": [{"a": "a", "b": "b", "latency": 0.001, "bandwidth": 1e9}],
  "model": {"name": "m)" + std::to_string(gib) + R"(", "layers": [
    {"count": 4, "weight_bytes": )" + layer + R"(, "flops_per_token": 1e9,
     "activation_bytes": 8192}]},
  "request": {"safety_margin": 0}
})");
}

} // namespace

TEST_CASE("several problems are packed on one cluster in order, and a job "
          "that does not fit is refused with the reason") {
  auto a = job_file(6), b = job_file(6), c = job_file(6), d = job_file(1);
  auto r = run({"--problem", a, "--problem", b, "--problem", c, "--problem",
                d});
  INFO(r.out << r.err);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, Catch::Contains("job 1 (" + a + "): placed"));
  CHECK_THAT(r.out, Catch::Contains("job 2 (" + b + "): placed"));
  CHECK_THAT(r.out, Catch::Contains("job 3 (" + c + "): refused"));
  CHECK_THAT(r.out, Catch::Contains("the jobs placed before it (1 (m6), "
                                    "2 (m6)) hold 12.0 GiB on 2 device(s)"));
  CHECK_THAT(r.out, Catch::Contains("job 4 (" + d + "): placed"));
  CHECK_THAT(r.out, Catch::Contains("packed: 3 of 4 jobs placed"));
  CHECK_THAT(r.err, Catch::Contains("refused: 1 of 4 jobs do not fit"));
  // Two that fit: exit 0; JSON lists both.
  auto ok = run({"--problem", a, "--problem", d, "--json"});
  CHECK(ok.rc == 0);
  CHECK_THAT(ok.out, Catch::StartsWith("{\"jobs\":[{\"file\":"));
  CHECK_THAT(ok.out, Catch::Contains("\"refused\":[]"));
  for (const auto& f : {a, b, c, d})
    std::remove(f.c_str());
}
