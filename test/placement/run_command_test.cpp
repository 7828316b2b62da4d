// `exo-node run` on one node places the model with the solver by default
// and counts each stage's working memory: a fast simulated device too small
// for the whole model with its scratch buffers (but large enough for its
// layers alone, so a plan without working memory would put everything on
// it and fail to allocate) gets three layers, the CPU the fourth, and the
// job runs. --stages K still splits evenly.

#include "core/placement/model_spec.hpp"
#include "core/placement/problem.hpp"
#include "core/model/test_model.hpp"
#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <regex>

using namespace exo;
using namespace exo::test;
using namespace std::chrono_literals;

namespace {

std::string exo_node() {
  return build_path("runtime/node/exo-node");
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

} // namespace

TEST_CASE("exo-node run places stages with the solver, working memory "
          "counted, and splits evenly with --stages",
          "[placement][process]") {
  auto dir = temp_dir("exo-run-solver");
  auto model = dir + "/m.gguf";
  model::test_model_options o;
  o.layers = 4;
  o.vocab = 512;
  model::make_test_model(o, model);
  const std::uint32_t ctx = 64;
  // The problem the node will build for its devices.
  auto spec = placement::load_model_spec(model, ctx);
  placement::problem p;
  p.layers = spec.layers;
  p.stage_memory_extra = spec.extras;
  p.request.context_length = ctx;
  auto without = p;
  without.stage_memory_extra = {};
  const double margin = 0.95; // the placement service's 5% safety margin
  // Memory for the tiny device: three layers and a stage's working memory
  // fit in its usable memory; the whole model with its working memory
  // exceeds even its total memory.
  const double lo = static_cast<double>(p.stage_memory(0, 3)) / margin;
  const double hi = static_cast<double>(p.stage_memory(0, 4));
  REQUIRE(lo < hi);
  const double memory = (lo + hi) / 2;
  // Without working memory the whole model fits it: the old plan.
  REQUIRE(static_cast<double>(without.stage_memory(0, 4)) <= memory * margin);
  REQUIRE(static_cast<double>(p.stage_memory(1, 4)) > memory * margin);
  char gib[64];
  std::snprintf(gib, sizeof gib, "%.12g", memory / (1024.0 * 1024 * 1024));
  write_file(dir + "/profiles.json", std::string{R"({"profiles": [{
    "name": "tiny-fast", "display_name": "Simulated tiny fast device",
    "vendor": "test", "architecture": "test", "memory_gib": )"}
                                       + gib + R"(,
    "compute_units": 8, "tflops": 50, "bandwidth_gbs": 2000,
    "idle_power_w": 5, "peak_power_w": 50,
    "thermal_resistance_c_per_w": 0.5, "thermal_capacitance_j_per_c": 100,
    "ambient_c": 25, "throttle_c": 90}]})");
  write_file(dir + "/node.json", R"({"node": {"name": "solo",
    "state_dir": ")" + dir + R"(/state"},
    "devices": {"include": ["cpu", "sim"],
                "simulated": [{"profile": "tiny-fast"}],
                "sim_profiles_file": ")" + dir + R"(/profiles.json",
                "rescan_interval_s": 0}})");
  auto go = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv{exo_node(), "run", "--model", model,
                                  "--prompt", "the quick brown fox", "-n",
                                  "8", "--ctx", std::to_string(ctx),
                                  "--config", dir + "/node.json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, 180s);
  };

  auto r = go({});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // The solver's table, not the even split.
  CHECK(contains(r.out, "placement (solver):"));
  CHECK(contains(r.out, "proven optimal: yes"));
  CHECK(contains(r.out, "planned by solo"));
  CHECK_FALSE(contains(r.out, "even split"));
  // Three layers on the tiny device (its table row: "solo/sim:...  0-2"),
  // the last on the CPU.
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m,
                            std::regex{R"(solo/(sim:[^ ]+) +solo +0-2 )"}));
  CHECK(std::regex_search(r.out, std::regex{R"(solo/cpu[^ ]* +solo +3-3 )"}));
  CHECK(contains(r.out, "stage 0: layers [0, 3)"));
  CHECK(contains(r.out, "stage 1: layers [3, 4)"));
  CHECK(contains(r.out, "tokens/s"));
  CHECK(contains(r.out, "2 stage(s)"));

  // --stages keeps the even split.
  auto even = go({"--stages", "2"});
  INFO(even.out << even.err);
  REQUIRE(even.code == 0);
  CHECK(contains(even.out, "placement: even split into 2 stage(s)"));
  CHECK_FALSE(contains(even.out, "placement (solver)"));
  CHECK(contains(even.out, "stage 1: layers [2, 4)"));
}
