// The workload's side of placement (actors/workload/solver_placement): the plan
// request a `run` sends to the coordinator carries the model's layers, and
// the solver's plan becomes the stages the job starts, checked against the
// member view.

#include "actors/workload/solver_placement.hpp"
#include "actors/placement/cluster_snapshot.hpp"
#include "core/placement/model_spec.hpp"
#include "actors/placement/placement_actor.hpp"
#include "messages/registration.hpp"
#include "core/model/test_model.hpp"
#include "test/support/process.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>

using namespace exo;
using namespace std::chrono_literals;

namespace {

member_info member(const std::string& name,
                   const std::vector<std::string>& ids,
                   member_status s = member_status::alive) {
  member_info m;
  m.name = name;
  m.status = s;
  for (auto& id : ids) {
    device_info d;
    d.id = id;
    d.node = name;
    d.name = "Device " + id;
    m.devices.push_back(d);
  }
  return m;
}

plan_stage_info stage(const std::string& node, const std::string& id,
                      std::uint32_t first, std::uint32_t end) {
  plan_stage_info s;
  s.node = node;
  s.device = node + "/" + id;
  s.first_layer = first;
  s.end_layer = end;
  s.compute_seconds = 1e-3;
  s.transfer_seconds = 2e-4;
  return s;
}

} // namespace

TEST_CASE("a run's plan request carries the model's layers and its needs",
          "[placement][jobs]") {
  auto path = test::temp_dir("exo-run-placement") + "/m.gguf";
  model::test_model_options o;
  o.layers = 5;
  model::make_test_model(o, path);
  auto one = workload::run_plan_request(path, 40, 1, "b");
  CHECK(one.model_path == path);
  CHECK(one.context_length == 40);
  CHECK(one.objective == "latency");
  CHECK_FALSE(one.keep);
  CHECK(one.origin == "b");
  auto spec = placement::load_model_spec(path, 40);
  REQUIRE(one.layers.size() == 5);
  CHECK(one.layers[2].weight_bytes == spec.layers[2].weight_bytes);
  CHECK(one.model_name == "m.gguf");
  // Several sequences in flight: the slowest stage matters.
  CHECK(workload::run_plan_request(path, 40, 4, "b").objective == "throughput");
  // A stage's working memory travels with the layers.
  CHECK(one.stage_bytes == spec.extras.every_stage);
  CHECK(one.stage_bytes > 0);
  CHECK(one.last_stage_bytes == spec.extras.last_stage);
  CHECK(one.first_stage_bytes == spec.extras.first_stage);
  // A console run names itself: kept as a job while it runs, its
  // sequences' KV caches counted.
  auto run = workload::run_plan_request(path, 40, 3, "b", "b#7");
  CHECK(run.keep);
  CHECK(run.run == "b#7");
  CHECK(run.sequences == 3);
  CHECK_THROWS_AS(workload::run_plan_request(path + ".missing", 40, 1, "b"),
                  std::invalid_argument);
}

TEST_CASE("the solver's plan becomes the job's stages and a plan that does not "
          "fit the view is refused",
          "[placement][jobs]") {
  member_view v;
  v.members = {member("a", {"sim:tiny:0", "cpu0"}), member("b", {"sim:x:0"}),
               member("c", {"gpu0"}, member_status::dead)};
  plan_info p;
  p.status = "optimal";
  p.proven_optimal = true;
  p.solver = "exact";
  p.objective = "latency";
  p.planned_by = "a";
  p.stages = {stage("b", "sim:x:0", 0, 2), stage("a", "sim:tiny:0", 2, 6)};
  auto st = workload::stages_of(p, v, 6);
  REQUIRE(st.size() == 2);
  CHECK(st[0].node == "b");
  CHECK(st[0].device == "sim:x:0");
  CHECK(st[0].device_name == "Device sim:x:0");
  CHECK(st[0].first == 0);
  CHECK(st[0].last == 2);
  CHECK(st[1].node == "a");
  CHECK(st[1].device == "sim:tiny:0");
  CHECK(st[1].first == 2);
  CHECK(st[1].last == 6);
  auto text = workload::describe_plan(p);
  CHECK(text.find("b/sim:x:0") != std::string::npos);
  CHECK(text.find("proven optimal: yes") != std::string::npos);
  CHECK(text.find("planned by a") != std::string::npos);

  auto refused = [&](plan_info q, const std::string& why) {
    try {
      workload::stages_of(q, v, 6);
      FAIL("accepted: " << why);
    } catch (const std::invalid_argument& e) {
      INFO(e.what());
      CHECK(std::string{e.what()}.find(why) != std::string::npos);
    }
  };
  plan_info none;
  none.status = "infeasible";
  none.explanation = {"total free memory is 1.0 GiB short"};
  refused(none, "found no plan (infeasible); total free memory is 1.0 GiB "
                "short");
  auto dead = p;
  dead.stages[1] = stage("c", "gpu0", 2, 6);
  refused(dead, "no device c/gpu0 on an alive member");
  auto gap = p;
  gap.stages[1].first_layer = 3;
  refused(gap, "do not continue at layer 2");
  auto short_plan = p;
  short_plan.stages[1].end_layer = 5;
  refused(short_plan, "end at layer 5 of 6");
}

namespace {

device_info sim_device(const std::string& node, const std::string& id,
                       double flops, device_state s = device_state::ready) {
  device_info d;
  d.id = id;
  d.node = node;
  d.backend = "sim";
  d.simulated = true;
  d.total_memory = d.free_memory = 1ull << 30;
  d.peak_flops = flops;
  d.memory_bandwidth = 100e9;
  d.state = s;
  return d;
}

member_info node(const std::string& name, std::vector<device_info> devs,
                 member_status s = member_status::alive) {
  member_info m;
  m.name = name;
  m.host = "127.0.0.1";
  m.status = s;
  m.devices = std::move(devs);
  return m;
}

} // namespace

// What the console's `run` does with its plan (actors/workload/job_coordinator):
// asks with run_plan_request(..., run id), keeps the job id, and sends
// (unplan_atom, id) when the run ends.
TEST_CASE("a running job's plan is re-planned with the reason when a node "
          "dies or a device pauses, and dropped when the run ends",
          "[placement][jobs]") {
  auto path = test::temp_dir("exo-run-replan") + "/m.gguf";
  model::test_model_options o;
  o.layers = 4;
  model::make_test_model(o, path);
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  placement::placement_actor_config pc;
  pc.node_name = "a";
  pc.debounce = 100ms;
  auto placement = placement::spawn_placement_actor(sys, pc);
  auto feed = [&](member_view v) {
    self->request(placement, 10s, snapshot_atom::value, std::move(v))
      .receive([](caf::atom_value) {},
               [](caf::error& e) { FAIL(caf::to_string(e)); });
  };
  auto plan = [&](const plan_request& r) {
    plan_job_info out;
    self->request(placement, 60s, plan_atom::value, r)
      .receive([&](plan_job_info& j) { out = std::move(j); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    return out;
  };
  auto jobs_now = [&] {
    std::vector<plan_job_info> out;
    self->request(placement, 60s, plans_atom::value)
      .receive([&](std::vector<plan_job_info>& xs) { out = std::move(xs); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    return out;
  };
  // Polls until `pred` holds; the deadline only turns a hang into a
  // failure (no timing is asserted).
  auto wait_for = [&](const std::function<bool(
                        const std::vector<plan_job_info>&)>& pred) {
    auto deadline = std::chrono::steady_clock::now() + 120s;
    for (;;) {
      auto xs = jobs_now();
      if (pred(xs) || std::chrono::steady_clock::now() > deadline)
        return xs;
      std::this_thread::sleep_for(20ms);
    }
  };
  auto unplan = [&](const std::string& id) {
    bool out = false;
    self->request(placement, 10s, unplan_atom::value, id)
      .receive([&](bool x) { out = x; },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    return out;
  };
  member_view v;
  v.members = {node("a", {sim_device("a", "sim:fast:0", 4e12),
                          sim_device("a", "sim:slow:0", 1e12)}),
               node("b", {sim_device("b", "sim:mid:0", 2e12)})};
  feed(v);
  auto j = plan(workload::run_plan_request(path, 40, 1, "a", "a#1"));
  REQUIRE_FALSE(j.id.empty());
  REQUIRE_FALSE(j.plan.stages.empty());
  // A second run of the same model is a job of its own.
  auto k = plan(workload::run_plan_request(path, 40, 1, "a", "a#2"));
  CHECK(k.id != j.id);
  CHECK(unplan(k.id));
  auto xs = jobs_now();
  REQUIRE(xs.size() == 1);
  CHECK(xs[0].id == j.id);
  CHECK(xs[0].request.run == "a#1");
  CHECK(placement::render_text(xs[0]).find("run=a#1") != std::string::npos);

  // Node b dies.
  auto dead = v;
  dead.members[1].status = member_status::dead;
  feed(dead);
  xs = wait_for([](const std::vector<plan_job_info>& ys) {
    return ys.size() == 1 && ys[0].replans >= 1;
  });
  REQUIRE(xs.size() == 1);
  INFO(placement::render_text(xs[0]));
  CHECK(xs[0].replans == 1);
  CHECK(xs[0].last_reason == "member b: alive -> dead");
  CHECK_FALSE(xs[0].stale);
  for (auto& s : xs[0].plan.stages)
    CHECK(s.node == "a");
  CHECK(placement::render_text(xs[0]).find(
          "last re-plan: member b: alive -> dead")
        != std::string::npos);

  // The device it runs on pauses: the plan moves off it.
  auto used = xs[0].plan.stages[0].device;
  auto paused = dead;
  for (auto& d : paused.members[0].devices)
    if ("a/" + d.id == used)
      d.state = device_state::paused;
  feed(paused);
  xs = wait_for([](const std::vector<plan_job_info>& ys) {
    return ys.size() == 1 && ys[0].replans >= 2;
  });
  REQUIRE(xs.size() == 1);
  CHECK(xs[0].replans == 2);
  CHECK(xs[0].last_reason == "device " + used + ": ready -> paused");
  CHECK_FALSE(xs[0].stale);
  for (auto& s : xs[0].plan.stages)
    CHECK(s.device != used);

  // The run ends: its job is gone, and a second release finds nothing.
  CHECK(unplan(j.id));
  CHECK(jobs_now().empty());
  CHECK_FALSE(unplan(j.id));
  self->send_exit(placement, caf::exit_reason::user_shutdown);
  self->wait_for(placement);
}

TEST_CASE("a job fits beside a running one when each of its stages' devices "
          "has room for its KV cache and what the jobs there may still claim",
          "[placement][jobs]") {
  member_view v;
  v.members = {member("a", {"gpu:0", "gpu:1"}), member("b", {"gpu:0"})};
  auto set_free = [&](const std::string& node, const std::string& id,
                      std::uint64_t free) {
    for (auto& m : v.members)
      for (auto& d : m.devices)
        if (m.name == node && d.id == id)
          d.free_memory = free;
  };
  set_free("a", "gpu:0", 1000);
  set_free("a", "gpu:1", 1000);
  set_free("b", "gpu:0", 1000);
  auto at = [](std::uint32_t first, std::uint32_t last, const char* node,
               const char* dev) {
    workload::stage_place s;
    s.first = first;
    s.last = last;
    s.node = node;
    s.device = dev;
    return s;
  };
  std::vector<workload::stage_place> plan{at(0, 2, "a", "gpu:0"),
                                          at(2, 4, "b", "gpu:0")};
  std::map<std::string, std::uint64_t> promised{{"a/gpu:0", 400}};
  // 500 + 400 claimed, with 5%: 945 of 1000.
  CHECK(workload::fits_beside(plan, {500, 500}, v, promised, {}));
  // 550 + 400: 997.5 of 1000, 952 + 0 on b: 999.6.
  CHECK(workload::fits_beside(plan, {550, 952}, v, promised, {}));
  CHECK_FALSE(workload::fits_beside(plan, {553, 500}, v, promised, {}));
  CHECK_FALSE(workload::fits_beside(plan, {500, 953}, v, promised, {}));
  // Two stages on one device add up.
  std::vector<workload::stage_place> twice{at(0, 2, "a", "gpu:1"),
                                           at(2, 4, "a", "gpu:1")};
  CHECK(workload::fits_beside(twice, {450, 450}, v, {}, {}));
  CHECK_FALSE(workload::fits_beside(twice, {500, 500}, v, {}, {}));
  // A device left out, a dead member, a failed device, a missing one, or
  // sizes that do not match the plan: no.
  CHECK_FALSE(workload::fits_beside(plan, {1, 1}, v, {}, {"b/gpu:0"}));
  v.members[1].status = member_status::dead;
  CHECK_FALSE(workload::fits_beside(plan, {1, 1}, v, {}, {}));
  v.members[1].status = member_status::alive;
  v.members[1].devices[0].state = device_state::failed;
  CHECK_FALSE(workload::fits_beside(plan, {1, 1}, v, {}, {}));
  v.members[1].devices[0].state = device_state::ready;
  CHECK(workload::fits_beside(plan, {1, 1}, v, {}, {}));
  CHECK_FALSE(workload::fits_beside({at(0, 4, "a", "gpu:9")}, {1}, v, {}, {}));
  CHECK_FALSE(workload::fits_beside(plan, {1}, v, {}, {}));
  CHECK_FALSE(workload::fits_beside({}, {}, v, {}, {}));
}

TEST_CASE("a running job's KV caches claim the positions its sequences do "
          "not hold yet", "[placement][jobs]") {
  // 3 sequences of 100 positions at 10 bytes each: 3000 bytes in all.
  CHECK(workload::kv_claim(10, 100, 3, {}, 0) == 3000);
  // Holding 40, 100 and 250 (more than the context: nothing left).
  CHECK(workload::kv_claim(10, 100, 3, {40, 100, 250}, 0) == 600);
  // A sequence missing from `held` holds nothing yet.
  CHECK(workload::kv_claim(10, 100, 3, {40}, 0) == 2600);
  CHECK(workload::kv_claim(0, 100, 3, {}, 0) == 0);
  CHECK(workload::kv_claim(10, 100, 0, {}, 0) == 0);
  // A paged stage's caches in blocks of 32: a 100-token context takes 4
  // blocks (128 positions) at its fullest; holding 40 positions is holding
  // 2 blocks (64), 1 position a block.
  CHECK(workload::kv_claim(10, 100, 3, {}, 32) == 3 * 1280);
  CHECK(workload::kv_claim(10, 100, 3, {40, 100, 250}, 32) == 640);
  CHECK(workload::kv_claim(10, 100, 2, {1, 0}, 32) == 960 + 1280);
  CHECK(workload::kv_claim(10, 128, 1, {128}, 32) == 0);
}

TEST_CASE("a plan keeps the KV claims of running jobs out of the devices' "
          "free memory", "[placement][jobs]") {
  auto path = test::temp_dir("exo-run-claims") + "/m.gguf";
  model::test_model_options o;
  o.layers = 4;
  model::make_test_model(o, path);
  member_view v;
  v.from = "a";
  v.members = {node("a", {sim_device("a", "fast", 1e13),
                          sim_device("a", "slow", 1e11)})};
  auto r = workload::run_plan_request(path, 64, 1, "a");
  auto free_plan = workload::plan_locally(r, v, "a");
  INFO(placement::render_text(free_plan));
  REQUIRE(free_plan.stages.size() == 1);
  CHECK(free_plan.stages[0].device == "a/fast");
  // What a running job there may still claim leaves the fast device a MiB:
  // too little for the model, so the plan takes the slow one.
  r.kv_claims = {{"a/fast", (1ull << 30) - (1ull << 20)}, {"b/gone", 1}};
  auto claimed = workload::plan_locally(r, v, "a");
  INFO(placement::render_text(claimed));
  REQUIRE(claimed.stages.size() == 1);
  CHECK(claimed.stages[0].device == "a/slow");
  bool noted = false;
  for (auto& n : claimed.notes)
    noted |= n.find("device a/fast keeps 1023") != std::string::npos
             && n.find("for the KV caches of running jobs")
                  != std::string::npos;
  CHECK(noted);
  // Claims on both devices: no room anywhere.
  r.kv_claims["a/slow"] = 1ull << 30;
  auto none = workload::plan_locally(r, v, "a");
  CHECK(none.stages.empty());
  // A request may name at most max_plan_claims devices.
  r.kv_claims.clear();
  for (std::size_t i = 0; i <= max_plan_claims; ++i)
    r.kv_claims["n/" + std::to_string(i)] = 1;
  auto refused = workload::plan_locally(r, v, "a");
  CHECK(refused.status == "error");
  REQUIRE_FALSE(refused.explanation.empty());
  CHECK(refused.explanation[0].find("more than 4096") != std::string::npos);
}
