// Scenario files: parsing, the errors bad files give (naming the key path),
// the expectation checks, and exo-scenario's exit status for a bad file.

#include "runtime/scenario/listen_port.hpp"
#include "runtime/scenario/scenario.hpp"
#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

using namespace exo::scenario;

namespace {

const char* minimal = R"({"name": "m", "nodes": [{"name": "a"}],
  "steps": [{"do": "sleep", "seconds": 0}]})";

} // namespace

TEST_CASE("timing and memory keys take a string with a unit") {
  auto sc = parse(R"({"name": "u",
    "timing": {"poll_ms": "250ms", "console_timeout_ms": "30s",
               "heartbeat_ms": "0.1s", "failure_timeout_ms": "1s"},
    "nodes": [{"name": "a", "devices": {"cpu_memory_limit_mib": "1GiB"}}],
    "steps": [{"do": "sleep", "seconds": 0}]})",
                  "t");
  CHECK(sc.timing.poll_ms == 250);
  CHECK(sc.timing.console_timeout_ms == 30000);
  CHECK(sc.timing.heartbeat_ms == 100);
  CHECK(sc.timing.failure_timeout_ms == 1000);
  REQUIRE(sc.nodes.size() == 1);
  CHECK(sc.nodes[0].cpu_memory_limit_mib == 1024);
}

TEST_CASE("a full scenario is read with every key") {
  auto sc = parse(R"({
    "name": "full", "description": "d", "topology": "chain",
    "timing": {"heartbeat_ms": 100, "failure_timeout_ms": 900,
               "connect_timeout_ms": 700, "start_timeout_s": 40,
               "stop_timeout_s": 20, "console_timeout_ms": 4000,
               "poll_ms": 100, "default_within_s": 12.5},
    "model": {"layers": 2, "dim": 32, "ff": 64, "heads": 4, "kv_heads": 2,
              "vocab": 400, "seed": 3},
    "nodes": [
      {"name": "a", "devices": {"backends": ["cpu", "vulkan"],
                                "simulated": [{"profile": "a100-40g", "count": 2},
                                              {"profile": "m2-max",
                                               "fault": "fail_allocations"}],
                                "cpu_memory_limit_mib": 512}},
      {"name": "b", "start": false},
      {"name": "c", "seeds": ["a", "b"]}
    ],
    "steps": [
      {"do": "converge", "alive": 2, "on": ["a"], "coordinator": "a",
       "within_s": 20, "name": "first"},
      {"do": "console", "node": "a", "command": "devices", "json": true,
       "poll": true, "within_s": 5,
       "expect": {"exit": 0, "contains": "cpu:0", "excludes": ["x", "y"],
                  "json": [{"node": "a"}]}},
      {"do": "kill", "node": "a", "within_s": 3, "coordinator": "c"},
      {"do": "stop", "node": "c"},
      {"do": "restart", "node": "a"},
      {"do": "start", "node": "b"},
      {"do": "plan", "node": "b", "args": "ctx=64", "expect": {"json": {}}},
      {"do": "run", "node": "b", "prompt": "hi there", "tokens": 4,
       "stages": 2, "seed": 9},
      {"do": "sleep", "seconds": 0.5}
    ]})",
                  "t");
  CHECK(sc.name == "full");
  CHECK(sc.topology == "chain");
  CHECK(sc.timing.heartbeat_ms == 100);
  CHECK(sc.timing.default_within_s == 12.5);
  REQUIRE(sc.model);
  CHECK(sc.model->kv_heads == 2);
  REQUIRE(sc.nodes.size() == 3);
  auto& a = sc.nodes[0];
  CHECK(a.backends == std::vector<std::string>{"cpu", "vulkan"});
  REQUIRE(a.simulated.size() == 2);
  CHECK(a.simulated[0].count == 2);
  CHECK(a.simulated[1].fault == "fail_allocations");
  CHECK(a.cpu_memory_limit_mib == 512);
  CHECK_FALSE(sc.nodes[1].start);
  // Topology: chain seeds the previous node; explicit seeds win.
  CHECK(sc.seeds_of(sc.nodes[0]).empty());
  CHECK(sc.seeds_of(sc.nodes[1]) == std::vector<std::string>{"a"});
  CHECK(sc.seeds_of(sc.nodes[2]) == std::vector<std::string>{"a", "b"});
  REQUIRE(sc.steps.size() == 9);
  CHECK(sc.steps[0].kind == step_kind::converge);
  CHECK(sc.steps[0].title == "first");
  CHECK(sc.steps[0].on == std::vector<std::string>{"a"});
  CHECK(sc.steps[1].expect.contains == std::vector<std::string>{"cpu:0"});
  CHECK(sc.steps[1].expect.json == R"([{"node":"a"}])");
  CHECK(sc.steps[1].poll);
  CHECK(sc.steps[2].kind == step_kind::kill);
  CHECK(sc.steps[2].within_s == 3);
  CHECK(sc.steps[4].kind == step_kind::start); // restart is start
  CHECK(sc.steps[4].verb == "restart");
  CHECK(sc.steps[6].json);                     // plan with expect.json
  CHECK(sc.steps[6].command == "ctx=64");
  CHECK(sc.steps[7].prompt == "hi there");
  CHECK(sc.steps[7].stages == 2);
  CHECK(sc.steps[8].path == "steps[8]");
}

TEST_CASE("defaults: star topology, cpu only, a model only when needed") {
  auto sc = parse(R"({"name": "d", "nodes": [{"name": "a"}, {"name": "b"},
    {"name": "c"}], "steps": [{"do": "converge"}]})",
                  "t");
  CHECK(sc.topology == "star");
  CHECK(sc.nodes[1].backends == std::vector<std::string>{"cpu"});
  CHECK(sc.seeds_of(sc.nodes[2]) == std::vector<std::string>{"a"});
  CHECK(sc.steps[0].alive == -1);
  CHECK_FALSE(sc.model);
  auto with_run = parse(R"({"name": "r", "nodes": [{"name": "a"}],
    "steps": [{"do": "run", "node": "a", "prompt": "x"}]})",
                        "t");
  REQUIRE(with_run.model);
  CHECK(with_run.model->layers == 4);
  CHECK(parse(minimal, "t").steps.size() == 1);
}

TEST_CASE("bad scenario files are refused with a message naming the key") {
  struct row {
    const char* json;
    const char* message;
  };
  auto nodes = std::string{R"("nodes": [{"name": "a"}, {"name": "b"}])"};
  auto with_steps = [&](const std::string& steps) {
    return R"({"name": "s", )" + nodes + R"(, "steps": [)" + steps + "]}";
  };
  auto with_node = [](const std::string& node) {
    return R"({"name": "s", "nodes": [)" + node
           + R"(], "steps": [{"do": "sleep", "seconds": 1}]})";
  };
  std::vector<std::pair<std::string, std::string>> table{
    {"{", "t: not valid JSON"},
    {"[]", "<document>: must be an object"},
    {R"({"nodes": [{"name": "a"}], "steps": [{"do": "converge"}]})",
     "name: required"},
    {R"({"name": "s", "steps": [{"do": "converge"}]})", "nodes: required"},
    {R"({"name": "s", "nodes": [{"name": "a"}]})", "steps: required"},
    {R"({"name": "s", "nodes": [], "steps": []})",
     "nodes: must name at least one node"},
    {R"({"name": "s", "nodez": []})", "nodez: unknown key (expected one of"},
    {R"({"name": 5})", "name: must be a string"},
    {R"({"name": "s", "topology": "ring"})",
     "topology: must be one of star, chain, none"},
    {R"({"name": "s", "timing": {"heartbeat_ms": 5}})",
     "timing.heartbeat_ms: must be an integer in [10, 60000], got 5"},
    {R"({"name": "s", "timing": {"heartbeat_ms": 500, "failure_timeout_ms": 400}})",
     "timing.failure_timeout_ms: must be larger than heartbeat_ms"},
    {R"({"name": "s", "timing": {"poll_ms": "fast"}})",
     "timing.poll_ms: must be an integer in [10, 10000]"},
    {R"({"name": "s", "timing": {"poll_ms": "1m"}})",
     "timing.poll_ms: must be in [10ms, 10s], got \"1m\""},
    {R"({"name": "s", "timing": {"console_timeout_ms": "10G"}})",
     "timing.console_timeout_ms: must be an integer in [100, 600000] "
     "(milliseconds) or a string with a unit in [100ms, 10m]: '10G' has an "
     "unknown unit 'G'"},
    {R"({"name": "s", "timing": {"start_timeout_s": 0}})",
     "timing.start_timeout_s: must be a number in [1, 600], got 0"},
    {R"({"name": "s", "timing": {"jitter": 1}})", "timing.jitter: unknown key"},
    {R"({"name": "s", "model": {"dim": 30, "heads": 4}})",
     "model.heads: must divide dim (30)"},
    {R"({"name": "s", "model": {"heads": 4, "kv_heads": 3}})",
     "model.kv_heads: must divide heads (4)"},
    {R"({"name": "s", "model": {"layers": 0}})",
     "model.layers: must be an integer in [1, 64], got 0"},
    {with_node(R"({"devices": {}})"), "nodes[0].name: required"},
    {with_node(R"({"name": "a b"})"),
     "nodes[0].name: may contain only letters, digits"},
    {with_node(R"({"name": "-a"})"),
     "nodes[0].name: must not start with '.' or '-'"},
    {with_node(R"({"name": "a", "colour": "red"})"),
     "nodes[0].colour: unknown key"},
    {with_node(R"({"name": "a", "start": "yes"})"),
     "nodes[0].start: must be true or false"},
    {with_node(R"({"name": "a", "devices": {"backends": ["metal"]}})"),
     "nodes[0].devices.backends[0]: unknown backend \"metal\""},
    {with_node(R"({"name": "a", "devices": {"backends": ["sim"]}})"),
     "nodes[0].devices.backends[0]: list simulated devices under"},
    {with_node(R"({"name": "a", "devices": {"backends": []}})"),
     "nodes[0].devices: a node needs a backend or a simulated device"},
    {with_node(R"({"name": "a", "devices": {"simulated": [{"profile": "h9000"}]}})"),
     "nodes[0].devices.simulated[0].profile: unknown profile \"h9000\""},
    {with_node(R"({"name": "a", "devices": {"simulated": [{"count": 2}]}})"),
     "nodes[0].devices.simulated[0].profile: required"},
    {with_node(
       R"({"name": "a", "devices": {"simulated": [{"profile": "m2-max", "count": 65}]}})"),
     "nodes[0].devices.simulated[0].count: must be an integer in [1, 64], got 65"},
    {with_node(
       R"({"name": "a", "devices": {"simulated": [{"profile": "m2-max", "fault": "melt"}]}})"),
     "nodes[0].devices.simulated[0].fault: unknown fault \"melt\""},
    {with_node(R"({"name": "a", "devices": {"simulated": {"profile": "m2-max"}}})"),
     "nodes[0].devices.simulated: must be an array of objects"},
    {with_node(R"({"name": "a", "seeds": ["zz"]})"),
     "nodes[0].seeds[0]: no node named \"zz\""},
    {with_node(R"({"name": "a", "seeds": ["a"]})"),
     "nodes[0].seeds[0]: a node cannot seed itself"},
    {R"({"name": "s", "nodes": [{"name": "a"}, {"name": "a"}], "steps": [{"do": "converge"}]})",
     "nodes[1].name: duplicate node name \"a\""},
    {with_steps(R"({"node": "a"})"), "steps[0].do: required"},
    {with_steps(R"({"do": "explode"})"), "steps[0].do: unknown step \"explode\""},
    {with_steps(R"(3)"), "steps[0]: must be an object"},
    {with_steps(R"({"do": "kill"})"),
     "steps[0].node: required for a \"kill\" step"},
    {with_steps(R"({"do": "kill", "node": "c"})"),
     "steps[0].node: no node named \"c\""},
    {with_steps(R"({"do": "kill", "node": "a", "prompt": "x"})"),
     "steps[0].prompt: unknown key for a \"kill\" step"},
    {with_steps(R"({"do": "sleep", "seconds": 0}, {"do": "sleep"})"),
     "steps[1].seconds: required for a \"sleep\" step"},
    {with_steps(R"({"do": "sleep", "seconds": 601})"),
     "steps[0].seconds: must be a number in [0, 600], got 601"},
    {with_steps(R"({"do": "converge", "alive": 3})"),
     "steps[0].alive: the scenario has only 2 node(s)"},
    {with_steps(R"({"do": "converge", "on": ["a", "q"]})"),
     "steps[0].on[1]: no node named \"q\""},
    {with_steps(R"({"do": "kill", "node": "a", "coordinator": "q"})"),
     "steps[0].coordinator: no node named \"q\""},
    {with_steps(R"({"do": "kill", "node": "a", "within_s": 0})"),
     "steps[0].within_s: must be a number in [0.1, 600], got 0"},
    {with_steps(R"({"do": "console", "node": "a"})"),
     "steps[0].command: required for a \"console\" step"},
    {with_steps(R"({"do": "console", "node": "a", "command": ""})"),
     "steps[0].command: must not be empty"},
    {with_steps(
       R"({"do": "console", "node": "a", "command": "nodes", "expect": {"json": {}}})"),
     "steps[0].expect.json: needs \"json\": true"},
    {with_steps(
       R"({"do": "console", "node": "a", "command": "nodes", "poll": true})"),
     "steps[0].poll: needs within_s"},
    {with_steps(
       R"({"do": "console", "node": "a", "command": "nodes", "expect": {"exit": 256}})"),
     "steps[0].expect.exit: must be an integer in [0, 255], got 256"},
    {with_steps(
       R"({"do": "console", "node": "a", "command": "nodes", "expect": {"contains": [1]}})"),
     "steps[0].expect.contains[0]: must be a string"},
    {with_steps(
       R"({"do": "console", "node": "a", "command": "nodes", "expect": {"regex": "x"}})"),
     "steps[0].expect.regex: unknown key"},
    {with_steps(R"({"do": "run", "node": "a", "prompt": "say \"hi\""})"),
     "steps[0].prompt: must not contain '\"'"},
    {with_steps(R"({"do": "run", "node": "a", "prompt": "x", "tokens": 0})"),
     "steps[0].tokens: must be an integer in [1, 4096], got 0"},
    {with_steps(R"({"do": "run", "node": "a"})"),
     "steps[0].prompt: required for a \"run\" step"},
    {with_steps(R"({"do": "plan", "node": "a", "args": 3})"),
     "steps[0].args: must be a string"},
    // Networks: namespaces, links, partitions, shaping, measuring.
    {with_steps(R"({"do": "partition", "node": "a"})"),
     "steps[0].do: a \"partition\" step needs \"network\": {\"namespaces\": true}"},
    {with_node(R"({"name": "a", "link": {"bandwidth_mbit": 10}})"),
     "nodes[0].link: needs \"network\": {\"namespaces\": true}"},
    {R"({"name": "s", "network": {"namespaces": true}, "nodes": [{"name": "a", "link": {"bandwidth_mbit": 0}}], "steps": [{"do": "sleep", "seconds": 1}]})",
     "nodes[0].link.bandwidth_mbit: must be a number in [0.1, 100000]"},
    {R"({"name": "s", "network": {"namespaces": true}, "nodes": [{"name": "a", "link": {"delay_ms": 5}}], "steps": [{"do": "sleep", "seconds": 1}]})",
     "nodes[0].link.delay_ms: unknown key"},
    {R"({"name": "s", "network": {"namespaces": true}, "nodes": [{"name": "a", "link": {"latency_ms": 5, "jitter_ms": 6}}], "steps": [{"do": "sleep", "seconds": 1}]})",
     "nodes[0].link.jitter_ms: must not exceed latency_ms"},
    {R"({"name": "s", "network": {"namespaces": true}, "nodes": [{"name": "a", "link": {"loss_pct": 101}}], "steps": [{"do": "sleep", "seconds": 1}]})",
     "nodes[0].link.loss_pct: must be a number in [0, 100]"},
    {with_node(R"({"name": "a", "link": {"latency_ms": 10}})"),
     "nodes[0].link: needs \"network\": {\"namespaces\": true}"},
    {R"({"name": "s", "network": {"namespaces": "yes"}, "nodes": [{"name": "a"}], "steps": [{"do": "sleep", "seconds": 1}]})",
     "network.namespaces: must be true or false"},
    {R"({"name": "s", "network": {"bridges": 2}, "nodes": [{"name": "a"}], "steps": [{"do": "sleep", "seconds": 1}]})",
     "network.bridges: unknown key"},
    {R"({"name": "s", "network": {"namespaces": true}, "nodes": [{"name": "a"}], "steps": [{"do": "shape", "node": "a"}]})",
     "steps[0].bandwidth_mbit: required for a \"shape\" step"},
    {R"({"name": "s", "network": {"namespaces": true}, "nodes": [{"name": "a"}], "steps": [{"do": "shape", "node": "a", "bandwidth_mbit": 0.05}]})",
     "steps[0].bandwidth_mbit: 0 (unshaped) or 0.1..100000"},
    {R"({"name": "s", "network": {"namespaces": true}, "nodes": [{"name": "a"}], "steps": [{"do": "measure", "node": "a", "tolerance_pct": 0}]})",
     "steps[0].tolerance_pct: must be a number in [1, 100]"},
    {R"({"name": "s", "network": {"namespaces": true}, "nodes": [{"name": "a"}], "steps": [{"do": "heal", "node": "z"}]})",
     "steps[0].node: no node named \"z\""},
    {R"({"name": "s", "network": {"discovery": true}, "nodes": [{"name": "a"}], "steps": [{"do": "sleep", "seconds": 1}]})",
     "network.discovery: needs \"namespaces\": true"},
    {with_node(R"({"name": "a", "cluster": "../x"})"),
     "nodes[0].cluster: "},
  };
  for (auto& [json, message] : table) {
    INFO(json);
    try {
      parse(json, "t");
      FAIL("accepted");
    } catch (const scenario_error& e) {
      CHECK_THAT(e.what(), Catch::StartsWith(message));
    }
  }
}

TEST_CASE("background runs, await, freeze and thaw are read") {
  auto sc = parse(R"({"name": "bg",
    "model": {"layers": 3, "ctx": 4200},
    "nodes": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
    "steps": [
      {"do": "run", "node": "a", "prompt": "once upon a time", "tokens": 4096,
       "stages": 3, "temperature": 0, "reference": true, "background": "long",
       "within_s": 30},
      {"do": "freeze", "node": "c", "within_s": 5, "coordinator": "a"},
      {"do": "await", "run": "long", "expect_recoveries": 1, "within_s": 90,
       "max_refed": 0, "expect": {"contains": "tokens"}},
      {"do": "thaw", "node": "c"},
      {"do": "run", "node": "b", "prompt": "x", "temperature": 0.7,
       "reference": true, "expect_recoveries": 0},
      {"do": "run", "node": "b", "prompt": "y"}
    ]})",
                  "t");
  REQUIRE(sc.model);
  CHECK(sc.model->ctx == 4200);
  REQUIRE(sc.steps.size() == 6);
  auto& run = sc.steps[0];
  CHECK(run.kind == step_kind::run);
  CHECK(run.label == "long");
  CHECK(run.reference);
  CHECK(run.temperature == 0);
  CHECK(run.tokens == 4096);
  CHECK(run.json); // a background run's reply is read as JSON
  CHECK(sc.steps[1].kind == step_kind::freeze);
  CHECK(sc.steps[1].node == "c");
  CHECK(sc.steps[1].coordinator == "a");
  auto& await = sc.steps[2];
  CHECK(await.kind == step_kind::await);
  CHECK(await.label == "long");
  CHECK(await.expect_recoveries == 1);
  CHECK(await.max_refed == 0);
  CHECK(await.within_s == 90);
  CHECK(await.expect.contains == std::vector<std::string>{"tokens"});
  CHECK(sc.steps[3].kind == step_kind::thaw);
  // A foreground run with a reference or expected recoveries reads JSON;
  // a plain one keeps the text reply; the temperature defaults to the
  // console's (-1: not passed).
  CHECK(sc.steps[4].json);
  CHECK(sc.steps[4].temperature == 0.7);
  CHECK(sc.steps[4].expect_recoveries == 0);
  CHECK(sc.steps[4].label.empty());
  CHECK_FALSE(sc.steps[5].json);
  CHECK(sc.steps[5].temperature == -1);
  CHECK(sc.steps[5].expect_recoveries == -1);
  CHECK(sc.steps[5].max_refed == -1);
  CHECK_FALSE(sc.steps[5].reference);
  // The model's context length defaults to make-test's 256.
  auto plain = parse(R"({"name": "p", "nodes": [{"name": "a"}],
    "steps": [{"do": "run", "node": "a", "prompt": "x"}]})",
                     "t");
  REQUIRE(plain.model);
  CHECK(plain.model->ctx == 256);
}

TEST_CASE("requests in flight, fault and audit steps are read") {
  auto sc = parse(R"({"name": "timeline",
    "nodes": [{"name": "a"},
              {"name": "b", "devices": {"simulated": [
                 {"profile": "a100-40g", "count": 2}, {"profile": "m2-max"}]}}],
    "steps": [
      {"do": "run", "node": "a", "prompt": "x", "tokens": 100,
       "requests": 4, "reference": true, "background": "load"},
      {"do": "fault", "node": "b", "device": "sim:a100-40g:1",
       "fault": "vanish_after:3"},
      {"do": "fault", "node": "b", "device": "sim:m2-max:0",
       "fault": "heat:-20", "expect": {"contains": "now at"}},
      {"do": "await", "run": "load", "expect_recoveries": 1},
      {"do": "run", "node": "a", "prompt": "y", "requests": 3},
      {"do": "audit"},
      {"do": "audit", "on": ["b"], "within_s": 5},
      {"do": "fault", "node": "b", "device": "sim:m2-max:0",
       "fault": "cooling:2.5"},
      {"do": "thermal"},
      {"do": "thermal", "on": ["a", "b"]}
    ]})",
                  "t");
  REQUIRE(sc.steps.size() == 10);
  CHECK(sc.steps[7].fault == "cooling:2.5");
  CHECK(sc.steps[8].kind == step_kind::thermal);
  CHECK(sc.steps[8].on.empty());
  CHECK(sc.steps[9].on == std::vector<std::string>{"a", "b"});
  CHECK(sc.steps[0].requests == 4);
  CHECK(sc.steps[1].kind == step_kind::fault);
  CHECK(sc.steps[1].device == "sim:a100-40g:1");
  CHECK(sc.steps[1].fault == "vanish_after:3");
  CHECK(sc.steps[2].expect.contains == std::vector<std::string>{"now at"});
  CHECK(sc.steps[4].requests == 3);
  CHECK(sc.steps[4].json); // several requests: every reply read as JSON
  CHECK(sc.steps[5].kind == step_kind::audit);
  CHECK(sc.steps[5].on.empty());
  CHECK(sc.steps[6].on == std::vector<std::string>{"b"});

  auto refused = [](const std::string& step) {
    try {
      parse(R"({"name": "s", "nodes": [{"name": "a"}, {"name": "b",
                 "devices": {"simulated": [{"profile": "a100-40g"}]}}],
                 "steps": [)" + step + "]}",
            "t");
    } catch (const scenario_error& e) {
      return std::string{e.what()};
    }
    return std::string{"accepted"};
  };
  CHECK_THAT(refused(R"({"do": "fault", "node": "b", "device": "sim:a100-40g:1", "fault": "vanished"})"),
             Catch::StartsWith("steps[0].device: node b has no simulated "
                               "device \"sim:a100-40g:1\"")
               && Catch::Contains("it has sim:a100-40g:0"));
  CHECK_THAT(refused(R"({"do": "fault", "node": "a", "device": "cpu:0", "fault": "vanished"})"),
             Catch::StartsWith("steps[0].device: node a has no simulated "
                               "device \"cpu:0\"")
               && Catch::Contains("it has none"));
  CHECK_THAT(refused(R"({"do": "fault", "node": "b", "device": "sim:a100-40g:0", "fault": "melt"})"),
             Catch::StartsWith("steps[0].fault: unknown fault \"melt\""));
  CHECK_THAT(refused(R"({"do": "fault", "node": "b", "device": "sim:a100-40g:0"})"),
             Catch::StartsWith("steps[0].fault: required for a \"fault\" "
                               "step"));
  CHECK_THAT(refused(R"({"do": "fault", "node": "b", "device": "a b", "fault": "vanished"})"),
             Catch::StartsWith("steps[0].device: a device id without spaces"));
  CHECK_THAT(refused(R"({"do": "run", "node": "a", "prompt": "x", "requests": 33})"),
             Catch::StartsWith("steps[0].requests: must be an integer in "
                               "[1, 32]"));
  CHECK_THAT(refused(R"({"do": "audit", "on": ["q"]})"),
             Catch::StartsWith("steps[0].on[0]: no node named \"q\""));
  CHECK_THAT(refused(R"({"do": "thermal", "on": ["q"]})"),
             Catch::StartsWith("steps[0].on[0]: no node named \"q\""));
  CHECK_THAT(refused(R"({"do": "thermal", "node": "a"})"),
             Catch::StartsWith("steps[0].node: unknown key for a "
                               "\"thermal\" step (expected one of: do, name, "
                               "on, within_s)"));
  CHECK_THAT(refused(R"({"do": "fault", "node": "b", "device": "sim:a100-40g:0", "fault": "cooling:30"})"),
             Catch::StartsWith("steps[0].fault: unknown fault \"cooling:30\""));
  CHECK_THAT(refused(R"({"do": "audit", "node": "a"})"),
             Catch::StartsWith("steps[0].node: unknown key for an \"audit\" "
                               "step"));
}

TEST_CASE("measured rates, pinned cpus and a step time check are read") {
  auto sc = parse(R"({"name": "rates",
    "nodes": [{"name": "a", "cpus": [0],
               "devices": {"measure_rates": true}},
              {"name": "b", "devices": {"sim_time_scale": 0.5}}],
    "steps": [
      {"do": "run", "node": "a", "prompt": "x", "tokens": 64,
       "expect_step_within_pct": 25},
      {"do": "run", "node": "a", "prompt": "y"}
    ]})",
                  "t");
  REQUIRE(sc.nodes.size() == 2);
  CHECK(sc.nodes[0].measure_rates);
  CHECK(sc.nodes[0].cpus == std::vector<int>{0});
  CHECK_FALSE(sc.nodes[1].measure_rates); // nodes share the machine's cores
  CHECK(sc.nodes[1].cpus.empty());
  CHECK(sc.nodes[0].sim_time_scale == 0); // a simulated clock only
  CHECK(sc.nodes[1].sim_time_scale == 0.5);
  CHECK(sc.steps[0].step_within_pct == 25);
  CHECK_FALSE(sc.steps[0].json); // the reply's text carries both figures
  CHECK(sc.steps[1].step_within_pct < 0);

  auto refused = [](const std::string& node, const std::string& step) {
    try {
      parse(R"({"name": "s", "nodes": [)" + node + R"(],
                 "steps": [)" + step + "]}",
            "t");
    } catch (const scenario_error& e) {
      return std::string{e.what()};
    }
    return std::string{"accepted"};
  };
  auto a = std::string{R"({"name": "a"})"};
  auto sleep = std::string{R"({"do": "sleep", "seconds": 1})"};
  CHECK_THAT(refused(R"({"name": "a", "cpus": [0, 0]})", sleep),
             Catch::StartsWith("nodes[0].cpus[1]: cpu 0 is listed twice"));
  CHECK_THAT(refused(R"({"name": "a", "cpus": [4000]})", sleep),
             Catch::StartsWith("nodes[0].cpus[0]: must be an integer in"));
  CHECK_THAT(refused(R"({"name": "a", "cpus": [1000]})", sleep),
             Catch::StartsWith("nodes[0].cpus[0]: cpu 1000 is not one this "
                               "runner may use"));
  CHECK_THAT(refused(R"({"name": "a", "cpus": []})", sleep),
             Catch::StartsWith("nodes[0].cpus: must list at least one cpu"));
  CHECK_THAT(refused(R"({"name": "a", "devices": {"sim_time_scale": -1}})",
                     sleep),
             Catch::StartsWith("nodes[0].devices.sim_time_scale: must be a "
                               "number in [0, 1000]"));
  CHECK_THAT(refused(R"({"name": "a", "devices": {"measure_rates": 1}})",
                     sleep),
             Catch::StartsWith("nodes[0].devices.measure_rates: must be"));
  CHECK_THAT(refused(a, R"({"do": "run", "node": "a", "prompt": "x", "expect_step_within_pct": 0})"),
             Catch::StartsWith("steps[0].expect_step_within_pct: must be a "
                               "number in"));
  CHECK_THAT(refused(a, R"({"do": "run", "node": "a", "prompt": "x", "expect_step_within_pct": 25, "reference": true})"),
             Catch::StartsWith("steps[0].expect_step_within_pct: compares one "
                               "foreground run's text reply")
               && Catch::Contains("\"reference\""));
  CHECK_THAT(refused(a, R"({"do": "run", "node": "a", "prompt": "x", "expect_step_within_pct": 25, "requests": 2})"),
             Catch::Contains("\"requests\""));
}

TEST_CASE("a run's predicted and measured step times are read and compared") {
  // What a run's text reply shows (the placement, then the timings).
  auto reply = std::string{
    "job 1\nplacement (solver):\n"
    "objective (latency): 12.64 ms   latency: 12.64 ms   bottleneck: 12.64 "
    "ms   nodes: 1\n"
    "text: once upon a time\n"
    "prompt: 5 tokens in 0.020 s (250.0 tokens/s)\n"
    "generation: 64 tokens in 1.024 s (62.5 tokens/s), 1 sequence(s) in "
    "flight\n"};
  step_times t;
  std::string why;
  REQUIRE(parse_step_times(reply, t, why));
  CHECK(t.predicted_s == Approx(12.64e-3));
  CHECK(t.measured_s == Approx(16e-3));
  bool ok = false;
  auto line = compare_step_times(t, 25, ok);
  CHECK(ok); // 21% off
  CHECK(line == "predicted 12.6 ms a token, measured 16 ms (+21% of the "
                "measured, within 25%)");
  compare_step_times(t, 20, ok);
  CHECK_FALSE(ok);
  // A re-placement prints another plan: its prediction counts.
  REQUIRE(parse_step_times("latency: 900.0 us\n" + reply
                             + "latency: 1.250 s\n",
                           t, why));
  CHECK(t.predicted_s == Approx(1.25));
  CHECK_FALSE(parse_step_times("generation: 4 tokens in 1.0 s", t, why));
  CHECK(why.find("no predicted step time") != std::string::npos);
  CHECK_FALSE(parse_step_times("latency: 3.00 ms\n", t, why));
  CHECK(why.find("no generation time") != std::string::npos);
  CHECK_FALSE(parse_step_times(
    "latency: 3.00 ms\ngeneration: 0 tokens in 0.000 s", t, why));
  CHECK(why.find("not a positive figure") != std::string::npos);
}

TEST_CASE("bad background runs, awaits and freezes are refused") {
  auto with_steps = [](const std::string& steps) {
    return R"({"name": "s", "nodes": [{"name": "a"}, {"name": "b"}],
               "steps": [)"
           + steps + "]}";
  };
  auto bg = [](const std::string& label, const std::string& extra = "") {
    return R"({"do": "run", "node": "a", "prompt": "x", "background": ")"
           + label + "\"" + extra + "}";
  };
  auto await = [](const std::string& label, const std::string& extra = "") {
    return R"({"do": "await", "run": ")" + label + "\"" + extra + "}";
  };
  std::vector<std::pair<std::string, std::string>> table{
    {with_steps(await("r")),
     "steps[0].run: no background run \"r\" before this step"},
    {with_steps(await("r") + ", " + bg("r")),
     "steps[0].run: no background run \"r\" before this step"},
    {with_steps(bg("r") + ", " + await("q")),
     "steps[1].run: no background run \"q\" before this step"},
    {with_steps(bg("r") + ", " + bg("r") + ", " + await("r")),
     "steps[1].background: label \"r\" is already used by steps[0]"},
    {with_steps(bg("r") + ", " + await("r") + ", " + await("r")),
     "steps[2].run: \"r\" is already awaited by steps[1]"},
    {with_steps(bg("r")),
     "steps[0].background: background run \"r\" is never awaited"},
    {with_steps(bg("r", R"(, "expect": {"contains": "x"})") + ", "
                + await("r")),
     "steps[0].expect: goes on the \"await\" step of a background run "
     "(\"r\")"},
    {with_steps(bg("r", R"(, "expect_recoveries": 1)") + ", " + await("r")),
     "steps[0].expect_recoveries: goes on the \"await\" step"},
    {with_steps(bg("a b") + ", " + await("a b")),
     "steps[0].background: may contain only letters, digits"},
    {with_steps(bg("") + ", " + await("")),
     "steps[0].background: must not be empty"},
    {with_steps(R"({"do": "run", "node": "a", "prompt": "x", "background": 1})"),
     "steps[0].background: must be a string"},
    {with_steps(R"({"do": "await"})"),
     "steps[0].run: required for an \"await\" step"},
    {with_steps(bg("r") + ", " + await("r", R"(, "node": "a")")),
     "steps[1].node: unknown key for an \"await\" step"},
    {with_steps(bg("r") + ", " + await("r", R"(, "expect_recoveries": -1)")),
     "steps[1].expect_recoveries: must be an integer in [0, 1000], got -1"},
    {with_steps(bg("r", R"(, "max_refed": 0)") + ", " + await("r")),
     "steps[0].max_refed: goes on the \"await\" step"},
    {with_steps(bg("r") + ", " + await("r", R"(, "max_refed": 1.5)")),
     "steps[1].max_refed: must be an integer in [0, 1000000]"},
    {with_steps(bg("r") + ", " + await("r", R"(, "within_s": 0)")),
     "steps[1].within_s: must be a number in [0.1, 600], got 0"},
    {with_steps(bg("r", R"(, "reference": "yes")") + ", " + await("r")),
     "steps[0].reference: must be true or false"},
    {with_steps(
       R"({"do": "run", "node": "a", "prompt": "x", "temperature": 2.5})"),
     "steps[0].temperature: must be a number in [0, 2], got 2.5"},
    {with_steps(
       R"({"do": "run", "node": "a", "prompt": "x", "temperature": "hot"})"),
     "steps[0].temperature: must be a number"},
    {with_steps(R"({"do": "run", "node": "a", "prompt": "x", "tokens": 4097})"),
     "steps[0].tokens: must be an integer in [1, 4096], got 4097"},
    {with_steps(R"({"do": "run", "node": "a", "prompt": "abc", "tokens": 300})"),
     "steps[0].tokens: 300 tokens after a 3-byte prompt need model.ctx >= 305 "
     "(it is 256)"},
    {with_steps(R"({"do": "freeze", "node": "c"})"),
     "steps[0].node: no node named \"c\""},
    {with_steps(R"({"do": "freeze"})"),
     "steps[0].node: required for a \"freeze\" step"},
    {with_steps(R"({"do": "freeze", "node": "a", "seconds": 1})"),
     "steps[0].seconds: unknown key for a \"freeze\" step"},
    {with_steps(R"({"do": "freeze", "node": "a", "coordinator": "z"})"),
     "steps[0].coordinator: no node named \"z\""},
    {with_steps(R"({"do": "thaw", "node": "q"})"),
     "steps[0].node: no node named \"q\""},
    {with_steps(R"({"do": "thaw", "node": "a", "within_s": 5})"),
     "steps[0].within_s: unknown key for a \"thaw\" step"},
    {with_steps(R"({"do": "kill", "node": "a", "run": "r"})"),
     "steps[0].run: unknown key for a \"kill\" step"},
    {R"({"name": "s", "model": {"ctx": 8}})",
     "model.ctx: must be an integer in [16, 65536], got 8"},
  };
  for (auto& [json, message] : table) {
    INFO(json);
    try {
      parse(json, "t");
      FAIL("accepted");
    } catch (const scenario_error& e) {
      CHECK_THAT(e.what(), Catch::StartsWith(message));
    }
  }
}

TEST_CASE("the replies of run --json and jobs --json are read") {
  run_reply r;
  std::string why;
  REQUIRE(parse_run_reply(R"({"tokens": [5, 17, 3], "bytes_sent": 0,
    "prompt_tps": 10.5, "generation_tps": 100, "job": 7, "cancelled": false,
    "recoveries": [{"reason": "node n3 is dead", "replayed": 40,
                    "recovery_s": 0.25, "gap_s": 1.5},
                   {"reason": "stage 1 is gone", "replayed": 0,
                    "recovery_s": 1, "gap_s": 2}]})",
                          r, why));
  CHECK(r.job == 7);
  CHECK_FALSE(r.cancelled);
  CHECK(r.tokens == std::vector<std::int64_t>{5, 17, 3});
  REQUIRE(r.recoveries.size() == 2);
  CHECK(r.recoveries[0].reason == "node n3 is dead");
  CHECK(r.recoveries[0].replayed == 40);
  CHECK(r.recoveries[0].recovery_s == 0.25);
  CHECK(r.recoveries[0].gap_s == 1.5);
  CHECK(r.recoveries[1].recovery_s == 1);
  REQUIRE(parse_run_reply(
    R"({"tokens": [], "job": 1, "cancelled": true, "recoveries": []})", r,
    why));
  CHECK(r.tokens.empty());
  CHECK(r.cancelled);
  CHECK_FALSE(parse_run_reply("job 3\ntext: hi", r, why));
  CHECK_THAT(why, Catch::StartsWith("not JSON"));
  CHECK_FALSE(parse_run_reply(R"({"tokens": [1], "job": 1})", r, why));
  CHECK_THAT(why, Catch::StartsWith("not the output of run --json"));
  CHECK_FALSE(parse_run_reply(
    R"({"tokens": ["a"], "job": 1, "cancelled": false, "recoveries": []})", r,
    why));
  CHECK_THAT(why, Catch::StartsWith("a token that is not an integer"));
  CHECK_FALSE(parse_run_reply(R"({"tokens": [], "job": 1, "cancelled": false,
    "recoveries": [{"reason": "x", "replayed": 1}]})",
                              r, why));
  CHECK_THAT(why, Catch::StartsWith("a recovery without"));

  std::vector<job_status> jobs;
  REQUIRE(parse_jobs(R"({"node": "n1", "jobs": [
    {"job": 4, "model": "abc", "state": "running", "tokens": 12,
     "sequences": 1, "n_gen": 800, "seconds": 1.5, "cancelling": false,
     "stages": []}],
    "recent": [{"job": 3, "state": "finished", "tokens": 8}]})",
                     jobs, why));
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].job == 4);
  CHECK(jobs[0].state == "running");
  CHECK(jobs[0].tokens == 12);
  REQUIRE(parse_jobs(R"({"node": "n1", "jobs": [], "recent": []})", jobs, why));
  CHECK(jobs.empty());
  CHECK_FALSE(parse_jobs(R"({"node": "n1"})", jobs, why));
  CHECK(why == "not the output of jobs --json");
  CHECK_FALSE(parse_jobs(R"({"jobs": [{"job": 1}]})", jobs, why));
  CHECK_THAT(why, Catch::StartsWith("a job without job, state or tokens"));
}

TEST_CASE("a network, links, partitions, shaping and measuring are read") {
  auto sc = parse(R"({"name": "net", "network": {"namespaces": true},
    "nodes": [{"name": "a"}, {"name": "b", "link": {"bandwidth_mbit": 20,
      "latency_ms": 20, "jitter_ms": 2, "loss_pct": 0.5}}],
    "steps": [{"do": "partition", "node": "b"}, {"do": "heal", "node": "b"},
              {"do": "shape", "node": "b", "bandwidth_mbit": 0},
              {"do": "measure", "node": "a", "within_s": 30}]})",
                  "t");
  CHECK(sc.network.namespaces);
  CHECK_FALSE(sc.network.discovery);
  CHECK(sc.nodes[0].cluster.empty());
  CHECK(sc.nodes[0].bandwidth_mbit == 0);
  CHECK(sc.nodes[1].bandwidth_mbit == 20);
  CHECK(sc.nodes[1].latency_ms == 20);
  CHECK(sc.nodes[1].jitter_ms == 2);
  CHECK(sc.nodes[1].loss_pct == 0.5);
  REQUIRE(sc.steps.size() == 4);
  CHECK(sc.steps[0].kind == step_kind::partition);
  CHECK(sc.steps[1].kind == step_kind::heal);
  CHECK(sc.steps[2].kind == step_kind::shape);
  CHECK(sc.steps[2].bandwidth_mbit == 0);
  CHECK(sc.steps[3].kind == step_kind::measure);
  CHECK(sc.steps[3].tolerance_pct == 20);
  CHECK_FALSE(parse(R"({"name": "x", "nodes": [{"name": "a"}],
    "steps": [{"do": "sleep", "seconds": 0}]})", "t").network.namespaces);
  auto d = parse(R"({"name": "x", "network": {"namespaces": true,
    "discovery": true}, "nodes": [{"name": "a", "cluster": "blue"}],
    "steps": [{"do": "sleep", "seconds": 0}]})", "t");
  CHECK(d.network.discovery);
  CHECK(d.nodes[0].cluster == "blue");
}

TEST_CASE("measured links are held to the shaped rates") {
  std::vector<measured_link> links;
  std::string why;
  REQUIRE(parse_links(R"([{"from": "a", "to": "b", "rtt_p50_us": 120.5,
    "rtt_p99_us": 300, "jitter_us": 10, "loss": 0, "bandwidth_bps": 2400000},
    {"from": "a", "to": "c", "rtt_p50_us": 100, "rtt_p99_us": 200,
     "jitter_us": 1, "loss": 0, "bandwidth_bps": 500000000}])",
                      links, why));
  REQUIRE(links.size() == 2);
  CHECK(links[0].to == "b");
  CHECK(links[0].bandwidth_bps == 2400000);
  CHECK(links[0].rtt_p50_us == 120.5);
  CHECK_FALSE(parse_links(R"({"links": []})", links, why));
  CHECK_FALSE(parse_links(R"([{"from": "a"}])", links, why));
  CHECK_THAT(why, Catch::Contains("without from, to, bandwidth_bps"));
  REQUIRE(parse_links(R"([{"from": "a", "to": "b", "rtt_p50_us": 1,
    "bandwidth_bps": 2400000}, {"from": "a", "to": "c", "rtt_p50_us": 1,
    "bandwidth_bps": 500000000}])", links, why));
  std::string summary;
  using shaping = std::map<std::string, link_shaping>;
  // b at 20 Mbit/s: 19.2 measured is within 20%; c is unshaped (skipped).
  CHECK(check_link_rates(links, shaping{{"b", {20, 0}}}, 20, summary).empty());
  CHECK(summary == "a->b 19.2 of 20 Mbit/s");
  // The slower end bounds the link: a at 10, b at 20 -> 10 expected.
  CHECK_THAT(check_link_rates(links, shaping{{"a", {10, 0}}, {"b", {20, 0}}},
                              20, summary),
             Catch::Contains("a->b 19.2 of 10 Mbit/s: the rate is more than "
                             "20% off"));
  CHECK_THAT(check_link_rates(links, shaping{{"b", {30, 0}}}, 20, summary),
             Catch::Contains("more than 20% off"));
  CHECK(check_link_rates(links, shaping{{"b", {0, 0}}}, 20, summary)
        == "no measured link has a shaped end (2 link(s) measured)");
  // A floor instead of the tolerance: 10 Gbit/s shaped, 19.2 Mbit/s
  // measured passes a floor of 10 and fails one of 100.
  CHECK(check_link_rates(links, shaping{{"b", {10000, 0}}}, 20, summary, 10)
          .empty());
  CHECK(summary == "a->b 19.2 of 10000 Mbit/s (at least 10)");
  CHECK_THAT(check_link_rates(links, shaping{{"b", {10000, 0}}}, 20, summary,
                              100),
             Catch::Contains("(at least 100): the rate is below the "
                             "floor"));
  // Latencies add up over a round trip: a 25 ms + b 5 ms = 30 ms, within
  // 20% + 1 ms; both links are checked (c only by a's latency).
  REQUIRE(parse_links(R"([{"from": "a", "to": "b", "rtt_p50_us": 31200,
    "bandwidth_bps": 1}, {"from": "a", "to": "c", "rtt_p50_us": 25500,
    "bandwidth_bps": 1}])", links, why));
  CHECK(check_link_rates(links, shaping{{"a", {0, 25}}, {"b", {0, 5}}}, 20,
                         summary)
          .empty());
  CHECK(summary == "a->b rtt 31.2 of 30 ms, a->c rtt 25.5 of 25 ms");
  CHECK_THAT(check_link_rates(links, shaping{{"a", {0, 10}}}, 20, summary),
             Catch::Contains("a->b rtt 31.2 of 10 ms: the round trip is more "
                             "than 20% off"));
}

TEST_CASE("tokens are compared with the reference's") {
  CHECK(compare_tokens({1, 2, 3}, {1, 2, 3}).empty());
  CHECK(compare_tokens({1, 9, 3}, {1, 2, 3})
        == "token 1 is 9, the reference's 2 (of 3 and 3 tokens)");
  CHECK(compare_tokens({1, 2}, {1, 2, 3})
        == "2 tokens, the reference has 3 (the first 2 are equal)");
  CHECK(compare_tokens({}, {1}) == "0 tokens, the reference has 1 (the first "
                                   "0 are equal)");
}

TEST_CASE("every example scenario in scenarios/ is valid") {
  int n = 0;
  for (auto& f : std::filesystem::directory_iterator(EXO_SCENARIOS_DIR)) {
    if (f.path().extension() != ".json")
      continue;
    INFO(f.path());
    auto sc = load(f.path().string());
    CHECK(!sc.steps.empty());
    ++n;
  }
  CHECK(n >= 5);
  CHECK_THROWS_WITH(load("/nonexistent/s.json"),
                    "scenario file /nonexistent/s.json: cannot open: No such "
                    "file or directory");
  CHECK_THROWS_WITH(load("/dev/zero"),
                    "scenario file /dev/zero: is a character device, not a "
                    "regular file");
}

TEST_CASE("JSON containment: objects by keys, arrays by any element") {
  std::string why;
  auto actual = R"({"coordinator": "n1", "nodes": [
    {"name": "n1", "status": "alive", "port": 7},
    {"name": "n2", "status": "dead", "port": 8}]})";
  CHECK(json_contains(actual, R"({"coordinator": "n1"})", why));
  CHECK(json_contains(actual, R"({"nodes": [{"name": "n2", "status": "dead"},
                                            {"name": "n1"}]})",
                      why));
  CHECK(json_contains(actual, R"({"nodes": [{"port": 8.0}]})", why));
  CHECK(json_contains(actual, R"({})", why));
  CHECK_FALSE(json_contains(actual, R"({"coordinator": "n2"})", why));
  CHECK(why == R"(coordinator: expected "n2", got "n1")");
  CHECK_FALSE(json_contains(actual, R"({"leader": "n1"})", why));
  CHECK(why == "leader: missing");
  CHECK_FALSE(
    json_contains(actual, R"({"nodes": [{"name": "n2", "status": "alive"}]})",
                  why));
  CHECK_THAT(why, Catch::StartsWith("nodes: no element matches"));
  CHECK_FALSE(json_contains(actual, R"({"nodes": {"name": "n1"}})", why));
  CHECK_FALSE(json_contains("not json", "{}", why));
  CHECK_THAT(why, Catch::StartsWith("the output is not JSON"));
  CHECK(json_contains("[1, true, null, \"x\"]", "[null, \"x\", 1]", why));
  CHECK_FALSE(json_contains("[1, 2]", "[3]", why));
}

TEST_CASE("expectations: exit status, substrings, JSON") {
  expectation e;
  CHECK(check(e, 0, "anything", "").empty());
  CHECK(check(e, 1, "", "boom") == "exit status 1, expected 0");
  e.exit_code = 1;
  e.contains = {"unknown command"};
  CHECK(check(e, 1, "", "error: unknown command \"x\"").empty());
  CHECK(check(e, 1, "", "error: other") == "output lacks \"unknown command\"");
  e = {};
  e.excludes = {"dead"};
  CHECK(check(e, 0, "n1 dead", "") == "output has \"dead\"");
  e = {};
  e.json = R"({"a":1})";
  CHECK(check(e, 0, R"({"a": 1, "b": 2})", "").empty());
  CHECK_THAT(check(e, 0, R"({"a": 2})", ""),
             Catch::StartsWith("JSON does not match: a: expected 1, got 2"));
}

TEST_CASE("the output of nodes --json is read") {
  std::vector<member_status> m;
  std::string co, why;
  REQUIRE(parse_nodes(R"({"coordinator": "n2", "nodes": [
    {"name": "n1", "host": "127.0.0.1", "port": 1, "status": "dead"},
    {"name": "n2", "host": "127.0.0.1", "port": 2, "status": "alive"}]})",
                      m, co, why));
  CHECK(co == "n2");
  REQUIRE(m.size() == 2);
  CHECK(status_of(m, "n1") == "dead");
  CHECK(status_of(m, "n2") == "alive");
  CHECK(status_of(m, "n3").empty());
  CHECK_FALSE(parse_nodes("[]", m, co, why));
  CHECK(why == "not the output of nodes --json");
}

TEST_CASE("exo-scenario exits 2 with the reason for a bad file") {
  auto dir = exo::test::temp_dir("exo-scenario-bad");
  auto file = dir + "/bad.json";
  exo::test::write_file(file, R"({"name": "s", "nodes": [{"name": "a"}],
    "steps": [{"do": "kill", "node": "b"}]})");
  auto exe = exo::test::build_path("runtime/scenario/exo-scenario");
  auto r = exo::test::run({exe, "run", file});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("invalid scenario: steps[0].node: no node "
                                    "named \"b\""));
  r = exo::test::run({exe, "check", file});
  CHECK(r.code == 2);
  r = exo::test::run({exe, "check", std::string{EXO_SCENARIOS_DIR}
                                      + "/failover.json"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("ok"));
  r = exo::test::run({exe, "run"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("run needs a scenario FILE.json"));
  r = exo::test::run({exe, "frob", file});
  CHECK(r.code == 2);
  r = exo::test::run({exe, "run", file, "--step-within-pct", "0"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--step-within-pct"));
  std::filesystem::remove_all(dir);
}

// -- ports that survive a restart (runtime/scenario/listen_port.hpp) --------

TEST_CASE("the ephemeral range is read from the kernel's two numbers") {
  using range = std::pair<std::uint16_t, std::uint16_t>;
  CHECK(parse_ephemeral_range("32768\t60999\n") == range{32768, 60999});
  CHECK(parse_ephemeral_range("1024 65535") == range{1024, 65535});
  // Anything else: Linux's default.
  CHECK(parse_ephemeral_range("") == range{32768, 60999});
  CHECK(parse_ephemeral_range("40000 30000") == range{32768, 60999});
  CHECK(parse_ephemeral_range("0 70000") == range{32768, 60999});
  CHECK(parse_ephemeral_range("x y") == range{32768, 60999});
}

TEST_CASE("a stable port lies outside the ephemeral range and binds") {
  auto [low, high] = ephemeral_range();
  for (int i = 0; i < 20; ++i) {
    auto port = stable_listen_port("127.0.0.1");
    INFO("port " << port << ", ephemeral " << low << "-" << high);
    CHECK(port >= 10000);
    CHECK((port < low || port > high));
  }
  CHECK_THROWS_WITH(stable_listen_port("localhost"),
                    Catch::Contains("not an IPv4 address"));
}
