// exo-scenario against a real one-node cluster: a failed expectation is
// reported as FAIL with the reason, the later steps are skipped, the exit
// status is 1, and the node and the temp dir are gone afterwards.

#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
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
