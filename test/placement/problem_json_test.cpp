// JSON problem files: a valid file parses; every kind of bad input is an
// error that names the key path.
#include <catch2/catch.hpp>

#include "core/placement/problem_json.hpp"

#include <algorithm>
#include <string>

using namespace exo::placement;

namespace {

const std::string valid = R"({
  "devices": [
    {"id": "a/gpu", "node": "a", "memory": "8GiB", "flops": 1e13},
    {"id": "b/gpu", "node": "b", "memory": 4294967296, "flops": 5e12,
     "memory_bandwidth": 4e11, "launch_seconds": 2e-5,
     "thermal_headroom": 0.5,
     "max_flops_per_token": 1e10, "pinned": false, "excluded": false,
     "drained": false}
  ],
  "links": [{"a": "a", "b": "b", "latency": 0.001, "bandwidth": 1e9}],
  "intra_node_link": {"latency": 1e-5, "bandwidth": 2e10},
  "model": {"name": "m", "stage_bytes": "2MiB", "last_stage_bytes": 4096,
            "layers": [
    {"weight_bytes": "100MiB", "flops_per_token": 1e8},
    {"count": 4, "weight_bytes": 1000000, "kv_bytes_per_token": 1024,
     "flops_per_token": 2e8, "activation_bytes": 8192, "operations": 15}
  ]},
  "request": {"context_length": 2048, "sequences": 2, "safety_margin": 0.1},
  "constraints": {"max_stages": 2, "prefer_fewer_nodes": true,
                  "node_penalty": 0.001,
                  "pins": [{"device": "a/gpu", "first_layer": 0}]},
  "objective": {"kind": "blend", "blend_weight": 0.25},
  "resident": [{"device": "b/gpu", "first_layer": 1, "last_layer": 3}]
})";

/// `valid` with the first occurrence of `from` replaced by `to`.
std::string with(const std::string& from, const std::string& to) {
  auto s = valid;
  auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  s.replace(at, from.size(), to);
  return s;
}

} // namespace

TEST_CASE("a valid problem file is read completely") {
  auto p = parse_problem_json(valid);
  REQUIRE(p.devices.size() == 2);
  CHECK(p.devices[0].memory_bytes == 8ull << 30);
  CHECK(p.devices[1].memory_bandwidth == 4e11);
  CHECK(p.devices[1].max_flops_per_token == 1e10);
  REQUIRE(p.layers.size() == 5);
  CHECK(p.layers[0].weight_bytes == 100ull << 20);
  CHECK(p.layers[4].activation_bytes == 8192);
  CHECK(p.layers[4].operations == 15);
  CHECK(p.layers[0].operations == 0); // the default: not modelled
  CHECK(p.devices[1].launch_seconds == 2e-5);
  // A layer's time: its roofline, plus its operations' own cost.
  CHECK(p.layer_seconds(1, 4) == Approx(std::max(2e8 / 5e12, 1e6 / 4e11)
                                        + 15 * 2e-5));
  CHECK(p.layer_seconds(0, 4) == Approx(2e8 / 1e13)); // no launch cost
  CHECK(p.request.context_length == 2048);
  CHECK(p.request.sequences == 2);
  CHECK(p.stage_memory_extra.every_stage == 2ull << 20);
  CHECK(p.stage_memory_extra.first_stage == 0); // the default
  CHECK(p.stage_memory_extra.last_stage == 4096);
  REQUIRE(p.resident.size() == 1);
  CHECK(p.resident[0].device == "b/gpu");
  CHECK(p.resident[0].first_layer == 1);
  CHECK(p.resident[0].last_layer == 3);
  // A stage's memory: its layers (KV for 2 sequences) and working memory.
  CHECK(p.layer_memory(1) == 1000000 + 1024 * 2048 * 2);
  CHECK(p.stage_memory(0, 1) == (100ull << 20) + (2ull << 20));
  CHECK(p.stage_memory(1, 5) == 4 * p.layer_memory(1) + (2ull << 20) + 4096);
  CHECK(p.constraints.max_stages == 2);
  REQUIRE(p.constraints.pins.size() == 1);
  CHECK(p.constraints.pins[0].last_layer == 0);
  CHECK(p.objective.kind == objective_kind::blend);
  CHECK(p.objective.blend_weight == 0.25);
  CHECK(p.link_between("a", "b").latency == 0.001);
  // Counted position by position unless the request says blocks.
  CHECK(p.request.kv_block_positions == 0);
  CHECK(p.request.kv_positions() == 2048);
}

TEST_CASE("a request may count its KV caches in whole blocks") {
  auto p = parse_problem_json(with(
    "\"context_length\": 2048",
    "\"context_length\": 2000, \"kv_block_positions\": 32"));
  CHECK(p.request.context_length == 2000);
  CHECK(p.request.kv_block_positions == 32);
  CHECK(p.request.kv_positions() == 2016);
  CHECK(p.layer_memory(1) == 1000000 + 1024 * 2016 * 2);
  p.request.context_length = 2016;
  CHECK(p.request.kv_positions() == 2016);
  p.request.context_length = 0;
  CHECK(p.request.kv_positions() == 0);
}

TEST_CASE("bad problem files are refused with the key path named") {
  struct bad {
    std::string from, to, error;
  };
  const bad cases[] = {
    {"\"memory\": \"8GiB\"", "\"memory\": 0",
     "devices[0].memory: must be > 0"},
    {"\"memory\": \"8GiB\"", "\"memory\": \"8 potatoes\"",
     "devices[0].memory: \"8 potatoes\" is not a byte count"},
    // 1e19 bytes fit no int64: llround wrapped it (to 2^63, then refused as
    // >= 1 EiB); now the text is refused for what it is.
    {"\"memory\": \"8GiB\"", "\"memory\": \"10000000000GB\"",
     "devices[0].memory: \"10000000000GB\" is not a byte count"},
    {"\"memory\": \"8GiB\"", "\"memory\": \"16777216TiB\"",
     "devices[0].memory: \"16777216TiB\" is not a byte count"},
    {"\"memory\": \"8GiB\"", "\"memory\": true",
     "devices[0].memory: expected a byte count"},
    {"\"memory\": \"8GiB\"", "\"memroy\": 1",
     "devices[0].memroy: unknown key"},
    {"\"flops\": 1e13", "\"flops\": -1", "devices[0].flops: must be in [0, 1e18]"},
    {"\"flops\": 1e13", "\"flops\": 0", "devices[0].flops: must be > 0"},
    {"\"flops\": 1e13", "\"flops\": \"fast\"",
     "devices[0].flops: expected a number"},
    {"\"launch_seconds\": 2e-5", "\"launch_seconds\": -1",
     "devices[1].launch_seconds: must be in [0, 1] seconds"},
    {"\"launch_seconds\": 2e-5", "\"launch_seconds\": 5",
     "devices[1].launch_seconds: must be in [0, 1] seconds"},
    {"\"operations\": 15", "\"operations\": -2",
     "model.layers[1].operations: must be in [0, 1e6]"},
    {"\"operations\": 15", "\"operations\": \"many\"",
     "model.layers[1].operations: expected a number"},
    {"\"thermal_headroom\": 0.5", "\"thermal_headroom\": 2",
     "devices[1].thermal_headroom: must be in [0, 1]"},
    {"\"pinned\": false", "\"pinned\": 1",
     "devices[1].pinned: expected true or false"},
    {"\"id\": \"b/gpu\"", "\"id\": \"a/gpu\"",
     "devices[1].id: duplicate device id \"a/gpu\""},
    {"{\"id\": \"a/gpu\", ", "{", "devices[0].id: missing"},
    {"\"latency\": 0.001", "\"latency\": -1",
     "links[0].latency: must be >= 0 seconds"},
    {"\"bandwidth\": 1e9", "\"bandwidth\": 0",
     "links[0].bandwidth: must be > 0 bytes/s"},
    {"\"latency\": 0.001", "\"latency\": 1e308",
     "links[0].latency: must be at most 60 seconds"},
    {"\"bandwidth\": 1e9", "\"bandwidth\": 1e-300",
     "links[0].bandwidth: must be in [1e3, 1e14] bytes/s"},
    {"\"bandwidth\": 1e9", "\"bandwidth\": 1e300",
     "links[0].bandwidth: must be in [1e3, 1e14] bytes/s"},
    {"\"b\": \"b\", \"latency\"", "\"b\": \"z\", \"latency\"",
     "links[0].b: unknown node \"z\""},
    {"\"links\": [{\"a\": \"a\", \"b\": \"b\", \"latency\": 0.001, "
     "\"bandwidth\": 1e9}],",
     "", "links: no link between nodes \"a\" and \"b\""},
    {"\"count\": 4", "\"count\": 0", "model.layers[1].count: must be >= 1"},
    {"\"count\": 4", "\"count\": -4",
     "model.layers[1].count: must be >= 0"},
    {"\"flops_per_token\": 1e8", "\"flops_per_token\": -1e8",
     "model.layers[0].flops_per_token: must be in [0, 1e18]"},
    {"{\"weight_bytes\": \"100MiB\", \"flops_per_token\": 1e8}",
     "{\"flops_per_token\": 1e8}", "model.layers[0].weight_bytes: missing"},
    {"\"safety_margin\": 0.1", "\"safety_margin\": 1",
     "request.safety_margin: must be in [0, 1)"},
    {"\"context_length\": 2048", "\"context_length\": 1.5",
     "request.context_length: expected a non-negative integer"},
    {"\"context_length\": 2048",
     "\"context_length\": 2048, \"kv_block_positions\": 24",
     "request.kv_block_positions: must be 0 or a power of two up to 4096"},
    {"\"context_length\": 2048",
     "\"context_length\": 2048, \"kv_block_positions\": 8192",
     "request.kv_block_positions: must be at most 4096"},
    {"\"first_layer\": 0", "\"first_layer\": 3, \"last_layer\": 1",
     "constraints.pins[0].first_layer: must be <= last_layer"},
    {"\"first_layer\": 0", "\"first_layer\": 0, \"last_layer\": 5",
     "constraints.pins[0].last_layer: must be < 5"},
    {"\"device\": \"a/gpu\"", "\"device\": \"nope\"",
     "constraints.pins[0].device: unknown device \"nope\""},
    {"\"kind\": \"blend\"", "\"kind\": \"fastest\"",
     "objective.kind: must be latency, throughput or blend"},
    {"\"blend_weight\": 0.25", "\"blend_weight\": 1.5",
     "objective.blend_weight: must be in [0, 1]"},
    {"\"request\"", "\"requests\"", "requests: unknown key"},
    {"\"sequences\": 2", "\"sequences\": 0",
     "request.sequences: must be in [1, 65536]"},
    {"\"stage_bytes\": \"2MiB\"", "\"stage_bytes\": -1",
     "model.stage_bytes: must be >= 0"},
    {"\"stage_bytes\": \"2MiB\"", "\"stage_bytes\": \"lots\"",
     "model.stage_bytes: \"lots\" is not a byte count"},
    {"\"last_stage_bytes\": 4096", "\"last_stage_bytes\": \"2EiB\"",
     "model.last_stage_bytes: \"2EiB\" is not a byte count"},
    {"\"last_stage_bytes\": 4096", "\"first_stage_bytes\": \"2000000TiB\"",
     "model.first_stage_bytes: must be < 1 EiB"},
    {"\"pins\": [{\"device\": \"a/gpu\", \"first_layer\": 0}]",
     "\"pins\": {\"device\": \"a/gpu\"}",
     "constraints.pins: expected an array"},
    {"\"intra_node_link\": {\"latency\": 1e-5, \"bandwidth\": 2e10}",
     "\"intra_node_link\": [1]", "intra_node_link: expected an object"},
    {"\"layers\": [", "\"layers\": [], \"x\": [", "model.x: unknown key"},
    {"\"device\": \"b/gpu\", \"first_layer\": 1",
     "\"device\": \"c/gpu\", \"first_layer\": 1",
     "resident[0].device: unknown device \"c/gpu\""},
    {"\"last_layer\": 3}]", "\"last_layer\": 5}]",
     "resident[0].last_layer: must be < 5 (the number of layers)"},
    {"\"first_layer\": 1, \"last_layer\": 3",
     "\"first_layer\": 4, \"last_layer\": 3",
     "resident[0].first_layer: must be <= last_layer"},
  };
  for (const auto& c : cases) {
    INFO(c.to);
    auto text = with(c.from, c.to);
    try {
      parse_problem_json(text);
      FAIL("accepted: " << c.error);
    } catch (const problem_error& e) {
      CHECK_THAT(e.what(), Catch::Contains(c.error));
    }
  }
}

TEST_CASE("text that is not JSON is refused clearly") {
  CHECK_THROWS_WITH(parse_problem_json("{\"devices\": ["),
                    Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_problem_json("[1, 2]"),
                    Catch::Contains("expected an object"));
  CHECK_THROWS_WITH(parse_problem_json(""),
                    Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(read_problem_file("/nonexistent/problem.json"),
                    Catch::Contains("problem file /nonexistent/problem.json: "
                                    "cannot open"));
  // /dev/zero is never read without bound.
  CHECK_THROWS_WITH(read_problem_file("/dev/zero"),
                    Catch::Contains("not a regular file"));
}

TEST_CASE("byte counts accept SI and binary units") {
  CHECK(parse_byte_string("24GiB", "x") == 24ull << 30);
  CHECK(parse_byte_string("1.5 GB", "x") == 1500000000ull);
  CHECK(parse_byte_string("512 MiB", "x") == 512ull << 20);
  CHECK(parse_byte_string("4096", "x") == 4096);
  CHECK_THROWS_WITH(parse_byte_string("GiB", "dev.memory"),
                    Catch::StartsWith("dev.memory: "));
  CHECK_THROWS_AS(parse_byte_string("1..2GiB", "x"), problem_error);
  CHECK_THROWS_AS(parse_byte_string("1e400GiB", "x"), problem_error);
}

TEST_CASE("layer lists can be built from plain numbers") {
  auto layers = make_layers({1, 2}, {3, 4}, {5, 6}, {7, 8});
  REQUIRE(layers.size() == 2);
  CHECK(layers[1].weight_bytes == 2);
  CHECK(layers[1].kv_bytes_per_token == 4);
  CHECK(layers[1].flops_per_token == 6);
  CHECK(layers[1].activation_bytes == 8);
  CHECK_THROWS_AS(make_layers({1}, {}, {1}, {1}), problem_error);
}
