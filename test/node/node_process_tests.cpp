// exo-node run as a user would: its command line, its exit codes, its
// lifecycle from start to SIGTERM, and its registry on disk.

#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <csignal>

#include <sys/stat.h>

using namespace exo::test;
using namespace std::chrono_literals;

namespace {

std::string exo_node() {
  return build_path("runtime/node/exo-node");
}

std::string config_with(const std::string& dir, const std::string& devices) {
  auto path = dir + "/node.json";
  write_file(path, R"({"node": {"name": "t1", "state_dir": ")" + dir
                     + R"(/state"}, "network": {"port": 0}, "devices": )"
                     + devices + "}");
  return path;
}

} // namespace

TEST_CASE("exo-node --version and --help answer and exit 0") {
  auto v = run({exo_node(), "--version"});
  CHECK(v.code == 0);
  CHECK_THAT(v.out, Catch::StartsWith("exo-node "));
  auto h = run({exo_node(), "--help"});
  CHECK(h.code == 0);
  CHECK_THAT(h.out, Catch::Contains("--check-config"));
  CHECK_THAT(h.out, Catch::Contains("--devices"));
}

TEST_CASE("exo-node refuses unknown arguments with exit 2") {
  auto r = run({exo_node(), "--frobnicate"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("unknown option \"--frobnicate\""));
  r = run({exo_node(), "--config"});
  CHECK(r.code == 2);
}

TEST_CASE("checking a config exits 0 for a valid file and 2 with the reason") {
  auto dir = temp_dir("exo-node-test");
  auto good = config_with(dir, R"({"include": ["cpu"]})");
  auto r = run({exo_node(), "--check-config", good});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("valid"));
  auto bad = dir + "/bad.json";
  write_file(bad, R"({"network": {"seeds": ["localhost"]}})");
  r = run({exo_node(), "--check-config", bad});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("network.seeds[0]: must be \"host:port\""));
  r = run({exo_node(), "--check-config", dir + "/missing.json"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("cannot open"));
  r = run({exo_node(), "--config", bad});
  CHECK(r.code == 2);
}

TEST_CASE("listing devices shows verified devices, simulated ones marked") {
  auto dir = temp_dir("exo-node-test");
  auto cfg = config_with(
    dir, R"({"include": ["cpu", "sim"], "simulated": [{"profile": "mi300x"}]})");
  auto r = run({exo_node(), "--devices", "--config", cfg});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("cpu:0"));
  CHECK_THAT(r.out, Catch::Contains("sim:mi300x:0"));
  CHECK_THAT(r.out, Catch::Contains("Simulated MI300X-like"));
  CHECK_THAT(r.out, Catch::Contains("verified"));
  auto j = run({exo_node(), "--devices", "--json", "--config", cfg});
  REQUIRE(j.code == 0);
  CHECK_THAT(j.out, Catch::Contains("\"id\": \"sim:mi300x:0\""));
  CHECK_THAT(j.out, Catch::Contains("\"simulated\": true"));
  CHECK_THAT(j.out, Catch::Contains("\"name\": \"cuda\""));
}

TEST_CASE("exo-node starts, reports ready, and stops cleanly on SIGTERM") {
  auto dir = temp_dir("exo-node-test");
  auto cfg = config_with(
    dir, R"({"include": ["cpu", "sim"], "simulated": [{"profile": "m2-max"}]})");
  {
    process node{{exo_node(), "--config", cfg}};
    REQUIRE(node.wait_for_output("ready in", 30s));
    CHECK_THAT(node.out(), Catch::Contains("sim:m2-max:0"));
    node.signal(SIGTERM);
    CHECK(node.wait(30s) == 0);
    CHECK_THAT(node.out(), Catch::Contains("stopped"));
    CHECK(node.err().find("unexpected message") == std::string::npos);
  }
  // The registry was saved and a restart uses it.
  auto registry = read_file(dir + "/state/devices.json");
  CHECK_THAT(registry, Catch::Contains("sim:m2-max:0"));
  auto cfg2 = config_with(dir, R"({"include": ["cpu"]})");
  process again{{exo_node(), "--config", cfg2}};
  REQUIRE(again.wait_for_output("ready in", 30s));
  CHECK_THAT(again.out(), Catch::Contains("warm registry"));
  CHECK_THAT(again.out(), Catch::Contains("gone since last start: sim:m2-max:0"));
  again.signal(SIGINT);
  CHECK(again.wait(30s) == 0);
}

TEST_CASE("exo-node refuses a state directory other users may change, and "
          "config paths that are not regular files") {
  auto dir = temp_dir("exo-node-test");
  auto cfg = config_with(dir, R"({"include": ["cpu"]})");
  auto state = dir + "/state";
  REQUIRE(::mkdir(state.c_str(), 0700) == 0);
  ::chmod(state.c_str(), 0777);
  auto r = run({exo_node(), "--config", cfg}, 60s);
  INFO(r.out << r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("state directory " + state
                                    + ": mode 0777 lets other users change "
                                      "it; fix with: chmod 700 " + state));
  // A FIFO or /dev/zero as the config: refused at once, never read or
  // waited on.
  auto fifo = dir + "/fifo.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  r = run({exo_node(), "--check-config", fifo}, 60s);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("is a FIFO, not a regular file"));
  r = run({exo_node(), "--check-config", "/dev/zero"}, 60s);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("is a character device"));
}
