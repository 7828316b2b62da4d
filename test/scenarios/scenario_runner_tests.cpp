// exo-scenario against real small clusters: a failed expectation is
// reported as FAIL with the reason, the later steps are skipped, the exit
// status is 1, and the nodes (frozen ones too), background runs and the
// temp dir are gone afterwards.

#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

using namespace exo::test;
using namespace std::chrono_literals;

TEST_CASE("a failed expectation fails the run with status 1 and cleans up") {
  auto dir = temp_dir("exo-scenario-fail");
  auto file = dir + "/fail.json";
  write_file(file, R"({"name": "fails",
    "nodes": [{"name": "solo", "devices": {"backends": ["cpu"]}}],
    "steps": [
      {"do": "converge", "alive": 1, "within_s": 60},
      {"do": "console", "node": "solo", "command": "coordinator",
       "expect": {"contains": "nobody"}},
      {"do": "sleep", "seconds": 1}]})");
  auto r = run({build_path("runtime/scenario/exo-scenario"), "run", file},
               240s);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("[1/3] converge to 1 alive ... PASS"));
  CHECK_THAT(r.out, Catch::Contains("[2/3] console solo: coordinator ... FAIL"));
  CHECK_THAT(r.out, Catch::Contains("steps[1]: output lacks \"nobody\""));
  CHECK_THAT(r.out, Catch::Contains("[3/3] sleep 1.00 s ... SKIPPED"));
  CHECK_THAT(r.out, Catch::Contains("scenario fails: FAIL (1/3 steps passed"));
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex{"work dir (\\S+)"}));
  CHECK_FALSE(std::filesystem::exists(std::string{m[1]}));
  std::filesystem::remove_all(dir);
}

namespace {

/// The processes whose command line mentions `needle` (/proc/*/cmdline).
std::vector<std::string> processes_with(const std::string& needle) {
  std::vector<std::string> out;
  for (auto& e : std::filesystem::directory_iterator("/proc")) {
    auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::ifstream in{e.path() / "cmdline", std::ios::binary};
    std::string cmd{std::istreambuf_iterator<char>(in), {}};
    for (auto& c : cmd)
      if (c == '\0')
        c = ' ';
    if (cmd.find(needle) != std::string::npos)
      out.push_back(name + ": " + cmd);
  }
  return out;
}

} // namespace

TEST_CASE("a failure mid-run stops the background run and the frozen node") {
  auto dir = temp_dir("exo-scenario-bg");
  auto file = dir + "/bg.json";
  // A long one-stage run on a, b frozen beside it; then an expectation
  // that fails, so the run is never awaited and b never thawed.
  write_file(file, R"({"name": "bg",
    "timing": {"heartbeat_ms": 100, "failure_timeout_ms": 800,
               "poll_ms": 100},
    "model": {"layers": 2, "ctx": 4096},
    "nodes": [{"name": "a"}, {"name": "b"}],
    "steps": [
      {"do": "converge", "alive": 2, "within_s": 60},
      {"do": "run", "node": "a", "prompt": "hi", "tokens": 4000,
       "stages": 1, "background": "long", "within_s": 60},
      {"do": "freeze", "node": "b", "within_s": 20},
      {"do": "console", "node": "a", "command": "nodes",
       "expect": {"contains": "nobody"}},
      {"do": "await", "run": "long", "within_s": 120}]})");
  auto r = run({build_path("runtime/scenario/exo-scenario"), "run", file},
               240s);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("[2/5] run on a in the background as "
                                    "long: \"hi\" ... PASS"));
  CHECK_THAT(r.out, Catch::Contains("[3/5] freeze b ... PASS"));
  CHECK_THAT(r.out, Catch::Contains("dead on a after"));
  CHECK_THAT(r.out, Catch::Contains("[4/5] console a: nodes ... FAIL"));
  CHECK_THAT(r.out, Catch::Contains("output of the background run long "
                                    "(running)"));
  CHECK_THAT(r.out, Catch::Contains("[5/5] await long ... SKIPPED"));
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex{"work dir (\\S+)"}));
  std::string work = m[1];
  CHECK_FALSE(std::filesystem::exists(work));
  // Neither the nodes (b was stopped with SIGSTOP) nor the background
  // console outlive the runner.
  CHECK(processes_with(work).empty());
  std::filesystem::remove_all(dir);
}
