// The workload's side of placement (actors/jobs/solver_placement): the plan
// request a `run` sends to the coordinator carries the model's layers, and
// the solver's plan becomes the stages the job starts, checked against the
// member view.

#include "actors/jobs/solver_placement.hpp"
#include "actors/placement/cluster_snapshot.hpp"
#include "actors/placement/model_spec.hpp"
#include "runtime/model/test_model.hpp"
#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <stdexcept>

using namespace exo;

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
  auto one = jobs::run_plan_request(path, 40, 1, "b");
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
  CHECK(jobs::run_plan_request(path, 40, 4, "b").objective == "throughput");
  CHECK_THROWS_AS(jobs::run_plan_request(path + ".missing", 40, 1, "b"),
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
  auto st = jobs::stages_of(p, v, 6);
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
  auto text = jobs::describe_plan(p);
  CHECK(text.find("b/sim:x:0") != std::string::npos);
  CHECK(text.find("proven optimal: yes") != std::string::npos);
  CHECK(text.find("planned by a") != std::string::npos);

  auto refused = [&](plan_info q, const std::string& why) {
    try {
      jobs::stages_of(q, v, 6);
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
