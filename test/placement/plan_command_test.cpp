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
