// exo-scenario against real small clusters: a failed expectation is
// reported as FAIL with the reason, the later steps are skipped, the exit
// status is 1, and the nodes (frozen ones too), background runs and the
// temp dir are gone afterwards. As root: a namespaced run interrupted with
// Ctrl-C removes its network; one killed outright leaves it, and
// `exo-scenario clean-network` removes it.

#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <signal.h>
#include <unistd.h>

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
  auto report = dir + "/report.json";
  auto r = run({build_path("runtime/scenario/exo-scenario"), "run", file,
                "--report", report},
               240s);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  // The report: the result and the timeline of the steps.
  auto rep = read_file(report);
  CHECK_THAT(rep, Catch::Contains(R"("scenario": "fails")"));
  CHECK_THAT(rep, Catch::Contains(R"("result": "fail")"));
  CHECK_THAT(rep, Catch::Contains(R"("exit_status": 1)"));
  CHECK_THAT(rep, Catch::Contains(R"("step": "converge to 1 alive")"));
  CHECK_THAT(rep, Catch::Contains(R"("result": "pass")"));
  CHECK_THAT(rep, Catch::Contains(R"("reason": "steps[1]: output lacks \"nobody\")"));
  CHECK_THAT(rep, Catch::Contains(R"("result": "skipped")"));
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

TEST_CASE("a device that crossed its thermal limit fails the thermal step, "
          "named with its peak") {
  auto dir = temp_dir("exo-scenario-hot");
  auto file = dir + "/hot.json";
  // A spike of 80 C on a simulated RTX 4090 (30.5 C idle): 110.5 C, over
  // the 90 C limit at once; the monitor keeps that peak when it cools.
  write_file(file, R"({"name": "hot",
    "nodes": [{"name": "solo", "devices": {"backends": ["cpu"],
               "simulated": [{"profile": "rtx-4090"}]}}],
    "steps": [
      {"do": "converge", "alive": 1, "within_s": 60},
      {"do": "thermal"},
      {"do": "fault", "node": "solo", "device": "sim:rtx-4090:0",
       "fault": "heat:80"},
      {"do": "console", "node": "solo", "command": "thermal", "poll": true,
       "within_s": 20, "expect": {"contains": "paused: solo/sim:rtx-4090:0"}},
      {"do": "fault", "node": "solo", "device": "sim:rtx-4090:0",
       "fault": "heat:-80"},
      {"do": "thermal"}]})");
  auto r = run({build_path("runtime/scenario/exo-scenario"), "run", file},
               240s);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("[2/6] thermal (every running node) ... "
                                    "PASS"));
  CHECK_THAT(r.out, Catch::Contains("no thermal limit crossed: "
                                    "solo/sim:rtx-4090:0 peak 30.5 C < limit "
                                    "90.0 C (normal)"));
  CHECK_THAT(r.out, Catch::Contains("[6/6] thermal (every running node) ... "
                                    "FAIL"));
  CHECK_THAT(r.out, Catch::Contains("solo/sim:rtx-4090:0 crossed its thermal "
                                    "limit: peak 110.5 C, limit 90.0 C (now "));
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

TEST_CASE("an await that fails names the step by whose end its run was "
          "over") {
  auto dir = temp_dir("exo-scenario-over");
  auto file = dir + "/over.json";
  // A run meant to be hit mid-run by a later step, over by then (as on a
  // machine faster than the scenario's author's): the await's failure
  // says by which step's end. Its second stage is on a simulated device
  // paced to the wall (sim_time_scale 1000), so the run is seen running
  // on any machine and over well before the await.
  write_file(file, R"({"name": "over",
    "model": {"layers": 2},
    "nodes": [{"name": "a", "devices": {"backends": [],
                 "simulated": [{"profile": "adreno-740"}],
                 "sim_time_scale": 1000}}],
    "steps": [
      {"do": "converge", "alive": 1, "within_s": 60},
      {"do": "run", "node": "a", "prompt": "hi", "tokens": 200,
       "stages": 2, "background": "short", "within_s": 60},
      {"do": "sleep", "seconds": 8},
      {"do": "await", "run": "short", "expect_recoveries": 1,
       "within_s": 60}]})");
  auto r = run({build_path("runtime/scenario/exo-scenario"), "run", file},
               240s);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("[4/4] await short ... FAIL"));
  CHECK_THAT(r.out, Catch::Contains("0 recoveries, expected 1"));
  CHECK_THAT(r.out, Catch::Contains("(run \"short\" had ended by the end of "
                                    "step [3/4] sleep 8.00 s: a step after "
                                    "that one found it over)"));
  std::filesystem::remove_all(dir);
}

namespace {

/// The namespaces and links named with `tag` (`ip`), as "namespace NAME" /
/// "link NAME".
std::vector<std::string> network_objects(const std::string& tag) {
  std::vector<std::string> out;
  auto ns = run({"/bin/sh", "-c", "ip netns list"}, 10s);
  auto links = run({"/bin/sh", "-c", "ip -o link show"}, 10s);
  std::regex ns_re{"^(" + tag + "[^ ]*)"};
  std::regex link_re{"^\\d+: (" + tag + "[^:@ ]*)"};
  std::istringstream a{ns.out}, b{links.out};
  std::string line;
  std::smatch m;
  while (std::getline(a, line))
    if (std::regex_search(line, m, ns_re))
      out.push_back("namespace " + std::string{m[1]});
  while (std::getline(b, line))
    if (std::regex_search(line, m, link_re))
      out.push_back("link " + std::string{m[1]});
  return out;
}

/// A scenario of two namespaced nodes, n2's link shaped, that sleeps.
std::string sleeping_network_scenario(const std::string& dir) {
  auto file = dir + "/net.json";
  write_file(file, R"({"name": "net-sleeps",
    "network": {"namespaces": true},
    "nodes": [{"name": "n1"},
              {"name": "n2", "link": {"bandwidth_mbit": 50}}],
    "steps": [
      {"do": "converge", "alive": 2, "within_s": 60},
      {"do": "sleep", "seconds": 120}]})");
  return file;
}

/// Starts the scenario; returns its network's tag once its nodes converged,
/// or "" when namespaces are unavailable here (the runner said SKIPPED).
std::string start_network_run(process& p) {
  REQUIRE(p.wait_for_output("[2/2] sleep", 120s));
  std::smatch m;
  std::string out = p.out();
  REQUIRE(std::regex_search(out, m, std::regex{"network (exo[0-9a-f]{4}):"}));
  return m[1];
}

bool namespaces_here() {
  if (geteuid() != 0)
    return false;
  return run({"/bin/sh", "-c", "ip netns add exoprobe-rt && ip netns del "
                               "exoprobe-rt"},
             10s)
           .code
         == 0;
}

} // namespace

TEST_CASE("an interrupted namespaced run removes its network and its nodes") {
  if (!namespaces_here()) {
    WARN("SKIPPED: no network namespaces here (not root, or no iproute2)");
    return;
  }
  auto dir = temp_dir("exo-scenario-netint");
  auto file = sleeping_network_scenario(dir);
  process p{{build_path("runtime/scenario/exo-scenario"), "run", file}};
  auto tag = start_network_run(p);
  INFO(p.out());
  CHECK(network_objects(tag).size() == 5); // 2 namespaces, bridge, 2 veths
  CHECK(processes_with("exo-scenario-").size() >= 2); // the nodes
  p.signal(SIGINT);
  CHECK(p.wait(30s) == 130);
  CHECK_THAT(p.out(), Catch::Contains("network " + tag + " removed"));
  auto left = network_objects(tag);
  INFO("left: " << (left.empty() ? std::string{"nothing"} : left.front()));
  CHECK(left.empty());
  std::smatch m;
  std::string out = p.out();
  REQUIRE(std::regex_search(out, m, std::regex{"work dir (\\S+)"}));
  CHECK(processes_with(m[1]).empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a killed namespaced run leaves a network that clean-network removes") {
  if (!namespaces_here()) {
    WARN("SKIPPED: no network namespaces here (not root, or no iproute2)");
    return;
  }
  auto dir = temp_dir("exo-scenario-netkill");
  auto file = sleeping_network_scenario(dir);
  process p{{build_path("runtime/scenario/exo-scenario"), "run", file}};
  auto tag = start_network_run(p);
  std::smatch m;
  std::string out = p.out();
  REQUIRE(std::regex_search(out, m, std::regex{"work dir (\\S+)"}));
  std::string work = m[1];
  p.signal(SIGKILL);
  CHECK(p.wait(30s) == 128 + SIGKILL);
  // The nodes die with the runner; its network cannot clean itself up.
  for (int i = 0; i < 100 && !processes_with(work).empty(); ++i)
    std::this_thread::sleep_for(50ms);
  CHECK(processes_with(work).empty());
  CHECK_FALSE(network_objects(tag).empty());
  // This run's only: other tests may have networks up now.
  auto r = run({build_path("runtime/scenario/exo-scenario"), "clean-network",
                "--tag", tag},
               60s);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("removed namespace " + tag + "-n1"));
  for (int i = 0; i < 100 && !network_objects(tag).empty(); ++i)
    std::this_thread::sleep_for(50ms);
  CHECK(network_objects(tag).empty());
  std::filesystem::remove_all(work);
  std::filesystem::remove_all(dir);
}
