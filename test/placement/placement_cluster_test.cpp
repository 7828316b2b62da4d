// Placement on a live cluster of real exo-node processes on 127.0.0.1: two
// nodes with one small simulated device each, a model that fits on neither
// alone, `exo-console --exec "plan MODEL.gguf"`, and a re-plan when a node
// is killed; `plan` on a node that is not the coordinator answered by the
// coordinator, `run` on the solver's stages, and a new coordinator after
// the old one dies.

#include "core/placement/model_spec.hpp"
#include "core/model/test_model.hpp"
#include "test/support/pki.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <memory>
#include <regex>
#include <thread>

using namespace exo::test;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

/// A CA, a client certificate, node certificates, a model (about 4 MiB) and
/// a profile of a simulated device that holds `share` (60%) of its layers
/// and a stage's working memory. Each node
/// has one such device and (as the CPU fallback) a CPU limited to 1 MiB: no
/// node holds the model alone.
struct cluster_files {
  std::string dir = temp_dir("exo-placement-cluster");
  std::string model = dir + "/small.gguf";
  explicit cluster_files(double share = 0.6, std::uint32_t dim = 128) {
    make_ca(dir);
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
    issue_node(dir, name);
  }
};

struct node_proc {
  std::uint16_t port = 0;
  std::unique_ptr<process> proc;
};

node_proc start(const cluster_files& f, const std::string& name,
                const std::vector<std::uint16_t>& seeds) {
  std::string s = "[";
  for (std::size_t i = 0; i < seeds.size(); ++i)
    s += (i ? ", " : "") + std::string{"\"127.0.0.1:"}
         + std::to_string(seeds[i]) + "\"";
  s += "]";
  auto dir = f.dir + "/" + name;
  auto cfg = dir + "/node.json";
  write_file(cfg, R"({"node": {"name": ")" + name + R"(", "state_dir": ")"
                    + dir + R"(/state"},
    "network": {"port": 0, "seeds": )" + s + R"(, "heartbeat_ms": 200,
                "failure_timeout_ms": 1500, "connect_timeout_ms": 1000},
    "tls": {"certificate": ")" + dir + "/" + name + R"(.crt", "key": ")"
                    + dir + "/" + name + R"(.key", "ca": ")" + dir
                    + R"(/ca.crt"},
    "devices": {"include": ["sim"], "sim_profiles_file": ")"
                    + f.dir + R"(/profiles.json",
                "simulated": [{"profile": "tiny"}],
                "cpu_memory_limit_mib": 1,
                "rescan_interval_s": 0}})");
  node_proc n;
  n.proc = std::make_unique<process>(
    std::vector<std::string>{exo_node(), "--config", cfg});
  REQUIRE(n.proc->wait_for_output("ready in", 30s));
  std::smatch m;
  auto out = n.proc->out();
  REQUIRE(std::regex_search(out, m, std::regex{"listening on [^:]+:(\\d+)"}));
  n.port = static_cast<std::uint16_t>(std::stoi(m[1]));
  return n;
}

run_result console(const cluster_files& f, std::uint16_t port,
                   const std::string& cmd, bool json,
                   std::chrono::seconds timeout = 10s) {
  std::vector<std::string> argv{exo_console(),
                                "--connect",
                                "127.0.0.1:" + std::to_string(port),
                                "--cert",
                                f.dir + "/ops/ops.crt",
                                "--key",
                                f.dir + "/ops/ops.key",
                                "--ca",
                                f.dir + "/ca/ca.crt",
                                "--timeout-ms",
                                std::to_string(timeout.count() * 1000),
                                "--exec",
                                cmd};
  if (json)
    argv.push_back("--json");
  return run(argv, timeout + 60s);
}

/// Polls the console until `pred(out)` holds or `timeout` passes.
template <class Pred>
bool eventually(const cluster_files& f, std::uint16_t port,
                const std::string& cmd, Pred pred,
                std::chrono::milliseconds timeout) {
  auto deadline = clock_type::now() + timeout;
  for (;;) {
    auto r = console(f, port, cmd, true);
    if (r.code == 0 && pred(r.out))
      return true;
    if (clock_type::now() >= deadline) {
      UNSCOPED_INFO("last output: " << r.out << r.err);
      return false;
    }
    std::this_thread::sleep_for(250ms);
  }
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
    f, b.port, plan,
    [](const std::string& out) {
      return contains(out, "\"status\":\"optimal\"")
             && contains(out, "\"node\":\"a\"")
             && contains(out, "\"node\":\"b\"");
    },
    60s));
  auto text = console(f, a.port, plan, false);
  INFO(text.out << text.err);
  REQUIRE(text.code == 0);
  CHECK(contains(text.out, "a/sim:tiny:0"));
  CHECK(contains(text.out, "b/sim:tiny:0"));
  CHECK(contains(text.out, "proven optimal: yes"));
  CHECK(contains(text.out, "planned by a"));
  auto plans = console(f, a.port, "plans", false);
  CHECK(contains(plans.out, "job-1: " + f.model));

  // Kill b: a's job is re-planned, finds no room on a alone, keeps the old
  // plan and says why.
  b.proc->signal(SIGKILL);
  CHECK(b.proc->wait(10s) == 128 + SIGKILL);
  CHECK(eventually(
    f, a.port, "plans",
    [](const std::string& out) {
      return contains(out, "member b")
             && contains(out, "\"stale\":true");
    },
    60s));
  auto after = console(f, a.port, "plans", false);
  INFO("plans on a: " << after.out << after.err << "\nnode a's log:\n"
                      << a.proc->out());
  CHECK(contains(after.out, "last re-plan: member b"));
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
    f, b.port, plan,
    [](const std::string& out) {
      return contains(out, "\"status\":\"optimal\"")
             && contains(out, "\"planned_by\":\"a\"")
             && contains(out, "\"node\":\"a\"")
             && contains(out, "\"node\":\"b\"");
    },
    60s));
  auto text = console(f, b.port, plan, false);
  INFO(text.out << text.err);
  REQUIRE(text.code == 0);
  CHECK(contains(text.out, "planned by a"));
  CHECK(contains(text.out, "asked on b, planned by the coordinator a"));
  // The job is kept on the coordinator: both nodes list the same job.
  auto on_a = console(f, a.port, "plans", false);
  auto on_b = console(f, b.port, "plans", false);
  INFO(on_a.out << on_b.out << on_b.err);
  CHECK(contains(on_a.out, "job-1: " + f.model));
  CHECK(contains(on_a.out, "asked-on=b"));
  CHECK(contains(on_b.out, "job-1: " + f.model));
  CHECK(contains(on_b.out, "jobs kept by the coordinator a"));

  // A run on b asks a's solver: no node holds the model alone, so the
  // stages span both simulated devices, and the plan is printed.
  auto run_cmd = "run --model " + f.model
                 + " --prompt \"hello world\" -n 6 --seed 3";
  auto ran = console(f, b.port, run_cmd, false, 240s);
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
    f, a.port, "plans",
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
    f, b.port, plan,
    [](const std::string& out) {
      return contains(out, "\"planned_by\":\"b\"")
             && contains(out, "\"status\":\"infeasible\"");
    },
    60s));
  // a's jobs died with it; b keeps its own from now on.
  auto after = console(f, b.port, "plans", false);
  INFO(after.out << after.err);
  CHECK(contains(after.out, "job-1: " + f.model));
  CHECK(contains(after.out, "planned by b"));
  b.proc->signal(SIGTERM);
  CHECK(b.proc->wait(30s) == 0);
}
