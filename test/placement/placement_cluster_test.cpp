// Placement on a live cluster of real exo-node processes on 127.0.0.1: two
// nodes with one small simulated device each, a model that fits on neither
// alone, `exo-console --exec "plan MODEL.gguf"`, and a re-plan when a node
// is killed; `plan` on a node that is not the coordinator answered by the
// coordinator, `run` on the solver's stages, and a new coordinator after
// the old one dies.

#include "core/placement/model_spec.hpp"
#include "core/model/test_model.hpp"
#include "test/support/cluster.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <memory>
#include <regex>
#include <thread>

using namespace exo::test;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

/// A CA, a client certificate, node certificates, a model (about 4 MiB) and
/// a profile of a simulated device that holds `share` (60%) of its layers
/// and a stage's working memory. Each node
/// has one such device and (as the CPU fallback) a CPU limited to 1 MiB: no
/// node holds the model alone.
struct cluster_files {
  pki p{"exo-placement-cluster"};
  std::string dir = p.dir;
  std::string model = dir + "/small.gguf";
  explicit cluster_files(double share = 0.6, std::uint32_t dim = 128) {
    exo::model::test_model_options o;
    o.layers = 6;
    o.dim = dim;
    o.ff = 2 * dim;
    exo::model::make_test_model(o, model);
    auto spec = exo::placement::load_model_spec(model, 64);
    double total = 0;
    for (auto& l : spec.layers)
      total += static_cast<double>(l.weight_bytes + l.kv_bytes_per_token * 64);
    // A stage's working memory (scratch for a batch, the last stage's
    // logits) comes on top of its share of the layers.
    const auto& x = spec.extras;
    auto gib = (total * share
                + static_cast<double>(x.every_stage + x.first_stage
                                      + x.last_stage))
               / 0.95 / 1073741824.0;
    write_file(dir + "/profiles.json",
               R"({"profiles": [{"name": "tiny", "memory_gib": )"
                 + std::to_string(gib) + R"(, "compute_units": 4,
      "tflops": 1.0, "bandwidth_gbs": 50, "idle_power_w": 0.5,
      "peak_power_w": 8, "thermal_resistance_c_per_w": 6.0,
      "thermal_capacitance_j_per_c": 6, "ambient_c": 25,
      "throttle_c": 70}]})");
  }
  void node_cert(const std::string& name) {
    p.node(name);
  }
};

/// A node with one "tiny" simulated device and a CPU limited to 1 MiB.
node_proc start(const cluster_files& f, const std::string& name,
                const std::vector<std::uint16_t>& seeds) {
  node_options o{name};
  o.seeds = seeds;
  o.state_dir = f.dir + "/" + name + "/state";
  o.devices = R"({"include": ["sim"], "sim_profiles_file": ")" + f.dir
              + R"(/profiles.json",
                "simulated": [{"profile": "tiny"}],
                "cpu_memory_limit_mib": 1,
                "rescan_interval_s": 0})";
  return start_node(f.p, o);
}

} // namespace

TEST_CASE("plan in the console places a model on both nodes' devices and "
          "re-plans when a node dies",
          "[placement][cluster]") {
  cluster_files f;
  f.node_cert("a");
  f.node_cert("b");
  auto a = start(f, "a", {});
  auto b = start(f, "b", {a.port});
  auto plan = "plan " + f.model + " ctx=64";
  // Once both nodes see each other's device, the plan needs both.
  CHECK(eventually(
    f.p, b.port, plan,
    [](const std::string& out) {
      return contains(out, "\"status\":\"optimal\"")
             && contains(out, "\"node\":\"a\"")
             && contains(out, "\"node\":\"b\"");
    },
    60s));
  auto text = console(f.p, a.port, {plan});
  INFO(text.out << text.err);
  REQUIRE(text.code == 0);
  CHECK(contains(text.out, "a/sim:tiny:0"));
  CHECK(contains(text.out, "b/sim:tiny:0"));
  CHECK(contains(text.out, "proven optimal: yes"));
  CHECK(contains(text.out, "planned by a"));
  auto plans = console(f.p, a.port, {"plans"});
  CHECK(contains(plans.out, "job-1: " + f.model));

  // Kill b: a's job is re-planned, finds no room on a alone, keeps the old
  // plan and says why.
  b.proc->signal(SIGKILL);
  CHECK(b.proc->wait(10s) == 128 + SIGKILL);
  CHECK(eventually(
    f.p, a.port, "plans",
    [](const std::string& out) {
      return contains(out, "member b")
             && contains(out, "\"stale\":true");
    },
    60s));
  auto after = console(f.p, a.port, {"plans"});
  INFO("plans on a: " << after.out << after.err << "\nnode a's log:\n"
                      << a.proc->out());
  // The reason lists every change since the last re-plan: changes seen
  // before the job was kept (b's devices appearing) may come first.
  CHECK(std::regex_search(after.out,
                          std::regex{"last re-plan: [^\n]*member b"}));
  CHECK(contains(after.out, "STALE"));
}

TEST_CASE("the coordinator plans for the cluster: plan on another node is "
          "forwarded, run uses the solver's stages, a new coordinator plans",
          "[placement][cluster][workload]") {
  // Devices that hold 80% of the model's layers and a stage's working
  // memory (which the solver counts: scratch for a shard's batch, logits):
  // still none alone, and no stage fits the 1 MiB CPUs.
  cluster_files f{0.8, 512};
  f.node_cert("a");
  f.node_cert("b");
  // "a" sorts first: it is the coordinator while alive.
  auto a = start(f, "a", {});
  auto b = start(f, "b", {a.port});
  auto plan = "plan " + f.model + " ctx=64";
  // Asked on b, planned by a, on both nodes' devices.
  CHECK(eventually(
    f.p, b.port, plan,
    [](const std::string& out) {
      return contains(out, "\"status\":\"optimal\"")
             && contains(out, "\"planned_by\":\"a\"")
             && contains(out, "\"node\":\"a\"")
             && contains(out, "\"node\":\"b\"");
    },
    60s));
  auto text = console(f.p, b.port, {plan});
  INFO(text.out << text.err);
  REQUIRE(text.code == 0);
  CHECK(contains(text.out, "planned by a"));
  CHECK(contains(text.out, "asked on b, planned by the coordinator a"));
  // The job is kept on the coordinator: both nodes list the same job.
  auto on_a = console(f.p, a.port, {"plans"});
  auto on_b = console(f.p, b.port, {"plans"});
  INFO(on_a.out << on_b.out << on_b.err);
  CHECK(contains(on_a.out, "job-1: " + f.model));
  CHECK(contains(on_a.out, "asked-on=b"));
  CHECK(contains(on_b.out, "job-1: " + f.model));
  CHECK(contains(on_b.out, "jobs kept by the coordinator a"));

  // A run on b asks a's solver: no node holds the model alone, so the
  // stages span both simulated devices, and the plan is printed.
  auto run_cmd = "run --model " + f.model
                 + " --prompt \"hello world\" -n 6 --seed 3";
  auto ran = console(f.p, b.port, {run_cmd}, {false, 240s});
  INFO(ran.out << ran.err);
  REQUIRE(ran.code == 0);
  CHECK(contains(ran.out, "placement (solver):"));
  CHECK(contains(ran.out, "proven optimal: yes"));
  CHECK(contains(ran.out, "planned by a"));
  CHECK(contains(ran.out, "on a sim:tiny:0"));
  CHECK(contains(ran.out, "on b sim:tiny:0"));
  CHECK(contains(ran.out, "text: hello world"));
  // The run's plan was a job of the coordinator while it ran (re-planned on
  // changes like any job) and is dropped now that the run has ended.
  CHECK(contains(ran.out, "kept as job-2 by a"));
  CHECK(eventually(
    f.p, a.port, "plans",
    [](const std::string& out) {
      return contains(out, "\"id\":\"job-1\"")
             && !contains(out, "\"id\":\"job-2\"");
    },
    60s));

  // The coordinator dies: b becomes the coordinator and plans itself (the
  // model does not fit on b alone, so it says why).
  a.proc->signal(SIGKILL);
  CHECK(a.proc->wait(10s) == 128 + SIGKILL);
  CHECK(eventually(
    f.p, b.port, plan,
    [](const std::string& out) {
      return contains(out, "\"planned_by\":\"b\"")
             && contains(out, "\"status\":\"infeasible\"");
    },
    60s));
  // a's jobs died with it; b keeps its own from now on.
  auto after = console(f.p, b.port, {"plans"});
  INFO(after.out << after.err);
  CHECK(contains(after.out, "job-1: " + f.model));
  CHECK(contains(after.out, "planned by b"));
  b.proc->signal(SIGTERM);
  CHECK(b.proc->wait(30s) == 0);
}
