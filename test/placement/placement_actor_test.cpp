// The placement actor and its pure shell: cluster view -> problem, change
// detection, console arguments, planning, re-planning with a reason, and
// debouncing. Snapshots are fed directly (snapshot_atom); no gate, no TLS.

#include "actors/placement/cluster_snapshot.hpp"
#include "actors/placement/placement_actor.hpp"
#include "core/audit/event.hpp"
#include "messages/audit.hpp"
#include "messages/placement.hpp"
#include "messages/registration.hpp"
#include "core/model/test_model.hpp"
#include "test/support/process.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include <algorithm>

#include <chrono>
#include <functional>
#include <thread>

using namespace exo;
using namespace exo::placement;
using namespace std::chrono_literals;

namespace {

device_info dev(const std::string& id, std::uint64_t free, double flops,
                double bandwidth, device_state s = device_state::ready) {
  device_info d;
  d.id = id;
  d.backend = "sim";
  d.simulated = true;
  d.total_memory = free;
  d.free_memory = free;
  d.peak_flops = flops;
  d.memory_bandwidth = bandwidth;
  d.state = s;
  return d;
}

member_info member(const std::string& name, std::vector<device_info> devs,
                   member_status s = member_status::alive) {
  member_info m;
  m.name = name;
  m.host = "127.0.0.1";
  m.status = s;
  for (auto& d : devs)
    d.node = name;
  m.devices = std::move(devs);
  return m;
}

link_info measured(const std::string& from, const std::string& to,
                   double rtt_us, double bps) {
  link_info l;
  l.from = from;
  l.to = to;
  l.rtt_p50_us = rtt_us;
  l.bandwidth_bps = bps;
  return l;
}

/// A small llama GGUF file and its layer costs.
struct small_model {
  std::string path;
  model_spec spec;
  std::uint64_t total = 0; ///< bytes for ctx 64
  small_model() {
    path = test::temp_dir("exo-placement") + "/small.gguf";
    model::test_model_options o;
    o.layers = 6;
    model::make_test_model(o, path);
    spec = load_model_spec(path, 64);
    for (auto& l : spec.layers)
      total += l.weight_bytes + l.kv_bytes_per_token * 64;
  }
  /// Free memory that holds about 60% of the model's layers and a stage's
  /// working memory (the last stage's too): two devices needed.
  std::uint64_t part() const {
    const auto& x = spec.extras;
    return static_cast<std::uint64_t>(
      (static_cast<double>(total) * 0.6
       + static_cast<double>(x.every_stage + x.first_stage + x.last_stage))
      / 0.95);
  }
};

struct actor_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<caf::scoped_actor> self;
  caf::actor placement;
  /// With `audited`, the scoped actor is the audit sink.
  explicit actor_fixture(std::chrono::milliseconds debounce,
                         bool audited = false) {
    register_messages(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    self = std::make_unique<caf::scoped_actor>(*sys);
    placement_actor_config c;
    c.node_name = "test";
    c.debounce = debounce;
    if (audited)
      c.audit = caf::actor_cast<caf::actor>(*self);
    placement = spawn_placement_actor(*sys, c);
  }
  /// The next audit event sent to the scoped actor.
  audit_entry next_audit() {
    audit_entry out;
    (*self)->receive(
      [&](audit_atom, audit_entry& e) { out = std::move(e); },
      caf::after(60s) >> [] { FAIL("no audit event within 60 s"); });
    return out;
  }
  ~actor_fixture() {
    (*self)->send_exit(placement, caf::exit_reason::user_shutdown);
    (*self)->wait_for(placement);
  }
  void feed(member_view v) {
    (*self)
      ->request(placement, 10s, snapshot_atom::value, std::move(v))
      .receive([](caf::atom_value) {},
               [](caf::error& e) { FAIL(caf::to_string(e)); });
  }
  plan_job_info plan(const std::string& path) {
    plan_request r;
    r.model_path = path;
    r.context_length = 64;
    plan_job_info out;
    (*self)
      ->request(placement, 60s, plan_atom::value, r)
      .receive([&](plan_job_info& j) { out = std::move(j); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    return out;
  }
  std::vector<plan_job_info> jobs() {
    std::vector<plan_job_info> out;
    (*self)
      ->request(placement, 60s, plans_atom::value)
      .receive([&](std::vector<plan_job_info>& xs) { out = std::move(xs); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    return out;
  }
  /// Polls the jobs until `pred` holds (no timing assertion: a generous
  /// deadline only turns a hang into a failure).
  std::vector<plan_job_info>
  wait_for(const std::function<bool(const std::vector<plan_job_info>&)>&
             pred) {
    auto deadline = std::chrono::steady_clock::now() + 120s;
    for (;;) {
      auto xs = jobs();
      if (pred(xs) || std::chrono::steady_clock::now() > deadline)
        return xs;
      std::this_thread::sleep_for(20ms);
    }
  }
};

bool uses(const plan_info& p, const std::string& device) {
  for (auto& s : p.stages)
    if (s.device == device)
      return true;
  return false;
}

} // namespace

TEST_CASE("a cluster view becomes a problem: usable devices, defaults and "
          "the worse link direction",
          "[placement][snapshot]") {
  member_view v;
  v.from = "a";
  auto a = member("a", {dev("sim0", 8ull << 30, 2e12, 67e9),
                        dev("sim1", 8ull << 30, 2e12, 67e9,
                            device_state::paused),
                        dev("cpu0", 4ull << 30, 0, 0, device_state::busy)});
  a.devices[1].state_reason = "too hot";
  a.devices[0].launch_seconds = 20e-6;
  a.links = {measured("a", "c", 400, 1e9)};
  auto b = member("b", {dev("sim0", 1ull << 30, 1e12, 1e10)},
                  member_status::dead);
  auto c = member("c", {dev("sim0", 16ull << 30, 4e12, 1e11)});
  c.links = {measured("c", "a", 200, 5e8)};
  v.members = {a, b, c};
  model_spec m;
  m.name = "m";
  m.layers = uniform_layers(4, layer{1 << 20, 1024, 1e9, 4096});
  objective obj;
  obj.kind = objective_kind::throughput;
  auto conv = to_problem(v, m, 128, obj);
  const auto& p = conv.p;
  REQUIRE(p.devices.size() == 3);
  CHECK(p.devices[0].id == "a/sim0");
  CHECK(p.devices[0].node == "a");
  CHECK(p.devices[0].memory_bytes == 8ull << 30);
  CHECK(p.devices[0].flops == 2e12);
  CHECK(p.devices[0].memory_bandwidth == 67e9);
  CHECK(p.devices[0].launch_seconds == 20e-6); // measured by the device
  CHECK(p.devices[1].launch_seconds == 0);     // not reported: not modelled
  // A busy device is usable; no peak reported: the conservative defaults.
  CHECK(p.devices[1].id == "a/cpu0");
  CHECK(p.devices[1].flops == conversion_options{}.default_flops);
  CHECK(p.devices[1].memory_bandwidth
        == conversion_options{}.default_memory_bandwidth);
  CHECK(p.devices[2].id == "c/sim0");
  REQUIRE(p.links.size() == 1);
  CHECK(p.links[0].a == "a");
  CHECK(p.links[0].b == "c");
  CHECK(p.links[0].spec.latency == Approx(200e-6)); // 400 us RTT, one way
  CHECK(p.links[0].spec.bandwidth == Approx(5e8));  // the slower direction
  REQUIRE(p.default_link);
  CHECK(p.request.context_length == 128);
  CHECK(p.objective.kind == objective_kind::throughput);
  CHECK(p.layers.size() == 4);
  auto has_note = [&](const std::string& s) {
    for (auto& n : conv.notes)
      if (n.find(s) != std::string::npos)
        return true;
    return false;
  };
  CHECK(has_note("a/sim1 left out: paused (too hot)"));
  CHECK(has_note("member b left out: dead"));
  CHECK(has_note("a/cpu0: no peak FLOP/s"));
  CHECK_NOTHROW(validate(p));
  // KV caches are counted in a paged stage's whole blocks: none over for
  // a context of whole blocks, the last block whole for any other.
  CHECK(p.request.kv_block_positions == stage_kv_block_positions);
  CHECK(p.request.kv_positions() == 128);
  CHECK(p.layer_memory(0) == (1u << 20) + 1024u * 128);
  CHECK_FALSE(has_note("whole blocks"));
  auto odd = to_problem(v, m, 100, obj);
  CHECK(odd.p.request.context_length == 100);
  CHECK(odd.p.request.kv_positions() == 128);
  CHECK(odd.p.layer_memory(0) == (1u << 20) + 1024u * 128);
  CHECK(std::find(odd.notes.begin(), odd.notes.end(),
                  "KV caches counted in whole blocks of 32 positions: 128 "
                  "per sequence for a 100-token context")
        != odd.notes.end());
}

TEST_CASE("changes of members and device states are described, nothing "
          "else",
          "[placement][snapshot]") {
  member_view before;
  before.members = {member("a", {dev("d0", 1 << 30, 1e12, 1e11),
                                 dev("d1", 1 << 30, 1e12, 1e11)}),
                    member("b", {dev("d0", 1 << 30, 1e12, 1e11)})};
  auto after = before;
  after.members[0].devices[0].state = device_state::paused;
  after.members[0].devices[1].free_memory = 12345; // not a change
  after.members[0].devices[1].state = device_state::busy; // still usable
  after.members[1].status = member_status::dead;
  after.members.push_back(member("c", {dev("d0", 1 << 30, 1e12, 1e11)}));
  after.members[0].devices.push_back(dev("d2", 1 << 30, 1e12, 1e11));
  CHECK(state_of(before) == state_of(before));
  auto changes = describe_changes(state_of(before), state_of(after));
  CHECK(changes
        == std::vector<std::string>{"member b: alive -> dead",
                                    "member c joined (alive)",
                                    "device a/d0: ready -> paused",
                                    "device a/d2 appeared (ready)"});
  auto removed = before;
  removed.members[0].devices.erase(removed.members[0].devices.begin());
  CHECK(describe_changes(state_of(before), state_of(removed))
        == std::vector<std::string>{"device a/d0 gone"});
}

TEST_CASE("the console's plan arguments are parsed and bad ones refused",
          "[placement][console]") {
  plan_arguments a;
  CHECK(parse_plan_arguments("m.gguf ctx=512 objective=throughput "
                             "time-limit=100 keep=no --json",
                             a)
          .empty());
  CHECK(a.request.model_path == "m.gguf");
  CHECK(a.request.context_length == 512);
  CHECK(a.request.objective == "throughput");
  CHECK(a.request.time_limit_ms == 100);
  CHECK_FALSE(a.request.keep);
  CHECK(a.json);
  plan_arguments b;
  CHECK(parse_plan_arguments("--problem p.json", b).empty());
  CHECK(b.problem_file == "p.json");
  CHECK(b.request.objective == "file");
  plan_arguments c;
  CHECK(parse_plan_arguments("", c).find("which model") != std::string::npos);
  plan_arguments d;
  CHECK(parse_plan_arguments("m.gguf objective=fast", d).find("objective")
        != std::string::npos);
  plan_arguments e;
  CHECK(parse_plan_arguments("m.gguf ctx=-3", e).find("ctx")
        != std::string::npos);
  plan_arguments f;
  CHECK(parse_plan_arguments("m.gguf other.gguf", f).find("unexpected")
        != std::string::npos);
}

TEST_CASE("the placement actor answers a plan for a small cluster",
          "[placement][actor]") {
  small_model model;
  actor_fixture fx{100ms};
  member_view v;
  v.members = {member("a", {dev("d0", model.part(), 2e12, 67e9)}),
               member("b", {dev("d0", model.part(), 1e12, 67e9)})};
  v.members[0].links = {measured("a", "b", 200, 1e9)};
  fx.feed(v);
  auto j = fx.plan(model.path);
  INFO(render_text(j));
  CHECK(j.id == "job-1");
  CHECK(j.plan.status == "optimal");
  CHECK(j.plan.proven_optimal);
  CHECK(j.plan.planned_by == "test");
  REQUIRE(j.plan.stages.size() == 2);
  CHECK(uses(j.plan, "a/d0"));
  CHECK(uses(j.plan, "b/d0"));
  CHECK(j.plan.stages[0].first_layer == 0);
  CHECK(j.plan.stages[0].end_layer == j.plan.stages[1].first_layer);
  CHECK(j.plan.stages[1].end_layer == model.spec.layers.size());
  for (auto& s : j.plan.stages) {
    CHECK(s.compute_seconds > 0);
    CHECK(s.memory_used_bytes > 0);
    CHECK(s.memory_left_bytes >= 0);
  }
  CHECK(j.plan.stages[0].transfer_seconds > 0);
  CHECK(j.plan.objective_seconds > 0);
  CHECK(j.plan.lower_bound_seconds <= j.plan.objective_seconds + 1e-9);
  CHECK(j.plan.solver == "exact");
  // Planning the same request again updates the job, not a second one.
  CHECK(fx.plan(model.path).id == "job-1");
  CHECK(fx.jobs().size() == 1);
  // The console renders it for people and scripts.
  auto text = render_text(j);
  CHECK(text.find("a/d0") != std::string::npos);
  CHECK(render_json(j).find("\"stages\":[") != std::string::npos);
}

TEST_CASE("every plan and re-plan is audited as placement_decided",
          "[placement][actor][audit]") {
  small_model model;
  actor_fixture fx{100ms, true};
  member_view v;
  v.members = {member("a", {dev("d0", model.part(), 2e12, 67e9),
                            dev("d1", model.part(), 1e12, 67e9)}),
               member("b", {dev("d0", model.part(), 1e12, 67e9)})};
  fx.feed(v);
  auto j = fx.plan(model.path);
  REQUIRE(j.plan.stages.size() == 2);
  auto e = fx.next_audit();
  CHECK(e.type
        == static_cast<std::uint8_t>(audit::event_type::placement_decided));
  CHECK(e.details["job"] == "job-1");
  CHECK(e.details["model"] == model.path);
  CHECK(e.details["status"] == "optimal");
  CHECK(e.details["why"] == "request");
  CHECK(e.details["stages"].find(j.plan.stages[0].device + "[0,")
        != std::string::npos);
  // A device of the plan goes away: the re-plan is audited with its reason.
  auto victim = j.plan.stages[0].device;
  for (auto& m : v.members)
    for (auto& d : m.devices)
      if (m.name + "/" + d.id == victim)
        d.state = device_state::gone;
  fx.feed(v);
  e = fx.next_audit();
  CHECK(e.details["job"] == "job-1");
  CHECK(e.details["why"].rfind("re-plan: device " + victim, 0) == 0);
  CHECK(e.details["stages"].find(victim) == std::string::npos);
}

TEST_CASE("a job is re-planned, with the reason, when a device it uses "
          "goes away",
          "[placement][actor]") {
  small_model model;
  actor_fixture fx{100ms};
  member_view v;
  v.members = {member("a", {dev("d0", model.part(), 2e12, 67e9),
                            dev("d1", model.part(), 1e12, 67e9)}),
               member("b", {dev("d0", model.part(), 1e12, 67e9)})};
  fx.feed(v);
  auto j = fx.plan(model.path);
  REQUIRE(j.plan.stages.size() == 2);
  auto victim = j.plan.stages[0].device;
  auto after = v;
  for (auto& m : after.members)
    for (auto& d : m.devices)
      if (m.name + "/" + d.id == victim) {
        d.state = device_state::gone;
        d.state_reason = "vanished";
      }
  fx.feed(after);
  auto xs = fx.wait_for([](const std::vector<plan_job_info>& xs) {
    return xs.size() == 1 && xs[0].replans >= 1;
  });
  REQUIRE(xs.size() == 1);
  INFO(render_text(xs[0]));
  CHECK(xs[0].replans == 1);
  CHECK(xs[0].last_reason == "device " + victim + ": ready -> gone");
  CHECK_FALSE(xs[0].stale);
  CHECK(xs[0].plan.stages.size() == 2);
  CHECK_FALSE(uses(xs[0].plan, victim));
  // No room left: the re-plan finds nothing and the old plan is kept.
  auto second = xs[0].plan.stages[0].device;
  auto worse = after;
  for (auto& m : worse.members)
    for (auto& d : m.devices)
      if (m.name + "/" + d.id == second)
        d.state = device_state::paused;
  fx.feed(worse);
  xs = fx.wait_for([](const std::vector<plan_job_info>& xs) {
    return xs[0].replans >= 2;
  });
  CHECK(xs[0].replans == 2);
  CHECK(xs[0].stale);
  CHECK(xs[0].last_reason == "device " + second + ": ready -> paused");
  CHECK(uses(xs[0].plan, second));
}

TEST_CASE("a burst of changes is collapsed into one re-plan",
          "[placement][actor]") {
  small_model model;
  // The quiet time is long against sending four messages in a row, so the
  // burst is in the mailbox before the first timer can fire.
  actor_fixture fx{1500ms};
  member_view v;
  v.members = {member("a", {dev("d0", model.part(), 2e12, 67e9),
                            dev("d1", model.part(), 1e12, 67e9)}),
               member("b", {dev("d0", model.part(), 1e12, 67e9)})};
  fx.feed(v);
  REQUIRE(fx.plan(model.path).plan.stages.size() == 2);
  auto s1 = v;
  s1.members[0].devices[0].state = device_state::paused;
  auto s2 = s1;
  s2.members[0].devices[1].state = device_state::paused;
  auto s3 = s2;
  s3.members[0].devices[0].state = device_state::ready;
  auto s4 = s3;
  s4.members.push_back(member("c", {dev("d0", model.part(), 3e12, 67e9)}));
  for (auto* s : {&s1, &s2, &s3, &s4})
    (*fx.self)->send(fx.placement, snapshot_atom::value, *s);
  auto xs = fx.wait_for([](const std::vector<plan_job_info>& xs) {
    return xs[0].replans >= 1;
  });
  INFO(render_text(xs[0]));
  CHECK(xs[0].replans == 1);
  CHECK(xs[0].last_reason
        == "device a/d0: ready -> paused; device a/d1: ready -> paused; "
           "device a/d0: paused -> ready; member c joined (alive)");
  CHECK_FALSE(uses(xs[0].plan, "a/d1"));
}

// -- thermal state as an input (issue 4: "thermal headroom or cap") --------

namespace {

thermal_status thermal(const std::string& node, const std::string& device,
                       const std::string& state, double temp = 70) {
  thermal_status t;
  t.node = node;
  t.device = device;
  t.has_temperature = true;
  t.temp_c = temp;
  t.predicted_c = temp + 5;
  t.limit_c = 90;
  t.state = state;
  return t;
}

} // namespace

TEST_CASE("the thermal service's JSON is read and malformed entries are "
          "skipped",
          "[placement][snapshot][thermal]") {
  // The form of the thermal service's console reply (status_json).
  auto th = parse_thermal_json(
    R"({"devices":[{"node":"a","device":"sim:x:0","has_temperature":true,)"
    R"("temp_c":71.5,"predicted_c":84,"limit_c":90,"time_to_limit_s":-1,)"
    R"("state":"warm"},{"node":"b","device":"cpu0","has_temperature":false,)"
    R"("temp_c":0,"predicted_c":0,"limit_c":90,"time_to_limit_s":-1,)"
    R"("state":"normal"},{"device":"nameless","state":"paused"},)"
    R"({"node":"c","device":"d","state":7}]})");
  REQUIRE(th);
  REQUIRE(th->size() == 2);
  auto& w = th->at("a/sim:x:0");
  CHECK(w.state == "warm");
  CHECK(w.has_temperature);
  CHECK(w.temp_c == Approx(71.5));
  CHECK(w.predicted_c == Approx(84));
  CHECK(w.limit_c == Approx(90));
  CHECK(th->at("b/cpu0").state == "normal");
  CHECK_FALSE(th->at("b/cpu0").has_temperature);
  CHECK_FALSE(parse_thermal_json("not json"));
  CHECK_FALSE(parse_thermal_json(R"({"nodes":[]})"));
  CHECK(parse_thermal_json(R"({"devices":[]})")->empty());
  auto idx = to_thermal_view({thermal("a", "d0", "paused")});
  CHECK(idx.at("a/d0").state == "paused");
}

TEST_CASE("a paused device is left out and a warm one slowed in the problem",
          "[placement][snapshot][thermal]") {
  member_view v;
  v.members = {member("a", {dev("d0", 8ull << 30, 2e12, 67e9),
                            dev("d1", 8ull << 30, 2e12, 67e9),
                            dev("d2", 8ull << 30, 2e12, 67e9)})};
  model_spec m;
  m.name = "m";
  m.layers = uniform_layers(4, layer{1 << 20, 1024, 1e9, 4096});
  auto th = to_thermal_view({thermal("a", "d0", "paused", 88),
                             thermal("a", "d1", "warm", 80),
                             thermal("a", "d2", "normal", 40)});
  conversion_options opts;
  opts.warm_speed_factor = 0.25;
  auto conv = to_problem(v, m, 128, objective{}, opts, th);
  REQUIRE(conv.p.devices.size() == 2);
  CHECK(conv.p.devices[0].id == "a/d1");
  CHECK(conv.p.devices[0].flops == Approx(0.5e12));
  CHECK(conv.p.devices[0].memory_bandwidth == Approx(67e9 * 0.25));
  CHECK(conv.p.devices[0].thermal_headroom == Approx(0.25));
  CHECK(conv.p.devices[1].id == "a/d2");
  CHECK(conv.p.devices[1].flops == 2e12);
  CHECK(conv.p.devices[1].thermal_headroom == 1.0);
  auto has_note = [&](const std::string& s) {
    for (auto& n : conv.notes)
      if (n.find(s) != std::string::npos)
        return true;
    return false;
  };
  CHECK(has_note("a/d0 left out: thermally paused (88.0 C, predicted "
                 "93.0 C, limit 90.0 C)"));
  CHECK(has_note("a/d1: thermally warm (80.0 C"));
  CHECK(has_note("speed taken at 25%"));
  // Without statuses nothing changes.
  CHECK(to_problem(v, m, 128, objective{}).p.devices.size() == 3);
  // The solver moves work off the warm device: alone it is slower.
  auto solved = solve(conv.p);
  REQUIRE(solved.best);
  for (auto& s : solved.best->stages)
    CHECK(s.device_id == "a/d2");
}

TEST_CASE("thermal transitions are changes, described with the device",
          "[placement][snapshot][thermal]") {
  member_view v;
  v.members = {member("a", {dev("d0", 1 << 30, 1e12, 1e11),
                            dev("d1", 1 << 30, 1e12, 1e11)}),
               member("b", {dev("d0", 1 << 30, 1e12, 1e11)})};
  auto cold = state_of(v);
  CHECK(cold == state_of(v, to_thermal_view({thermal("a", "d0", "normal")})));
  // Whatever else the thermal service says (a device without a sensor) is
  // normal for placement.
  CHECK(cold
        == state_of(v, to_thermal_view({thermal("a", "d1", "no temperature"),
                                        thermal("b", "d0", "")})));
  auto warm = state_of(v, to_thermal_view({thermal("a", "d0", "warm"),
                                           thermal("b", "d0", "paused")}));
  CHECK(warm != cold);
  CHECK(describe_changes(cold, warm)
        == std::vector<std::string>{"device a/d0 thermal: normal -> warm",
                                    "device b/d0 thermal: normal -> paused"});
  CHECK(describe_changes(warm, cold)
        == std::vector<std::string>{"device a/d0 thermal: warm -> normal",
                                    "device b/d0 thermal: paused -> normal"});
  // A member that changed status covers its devices' thermal state.
  auto dead = v;
  dead.members[1].status = member_status::dead;
  CHECK(describe_changes(warm, state_of(dead))
        == std::vector<std::string>{"member b: alive -> dead",
                                    "device a/d0 thermal: warm -> normal"});
}

TEST_CASE("a thermal transition re-plans a job with the reason named",
          "[placement][actor][thermal]") {
  small_model model;
  actor_fixture fx{100ms};
  member_view v;
  v.members = {member("a", {dev("d0", model.part(), 2e12, 67e9),
                            dev("d1", model.part(), 1e12, 67e9)}),
               member("b", {dev("d0", model.part(), 1e12, 67e9)})};
  auto feed = [&](std::vector<thermal_status> xs) {
    (*fx.self)
      ->request(fx.placement, 10s, snapshot_atom::value, v, std::move(xs))
      .receive([](caf::atom_value) {},
               [](caf::error& e) { FAIL(caf::to_string(e)); });
  };
  feed({});
  auto j = fx.plan(model.path);
  REQUIRE(j.plan.stages.size() == 2);
  auto victim = j.plan.stages[0].device;
  auto slash = victim.find('/');
  feed({thermal(victim.substr(0, slash), victim.substr(slash + 1),
                "paused", 89)});
  auto xs = fx.wait_for([](const std::vector<plan_job_info>& xs) {
    return xs.size() == 1 && xs[0].replans >= 1;
  });
  REQUIRE(xs.size() == 1);
  INFO(render_text(xs[0]));
  CHECK(xs[0].replans == 1);
  CHECK(xs[0].last_reason == "device " + victim + " thermal: normal -> paused");
  CHECK_FALSE(xs[0].stale);
  CHECK_FALSE(uses(xs[0].plan, victim));
  // Cooling down is a change too.
  feed({thermal(victim.substr(0, slash), victim.substr(slash + 1),
                "normal", 50)});
  xs = fx.wait_for([](const std::vector<plan_job_info>& xs) {
    return xs[0].replans >= 2;
  });
  CHECK(xs[0].last_reason == "device " + victim + " thermal: paused -> normal");
}

// -- requests forwarded to the coordinator ---------------------------------

TEST_CASE("a plan request carries the model's layers to a planner that "
          "lacks the file",
          "[placement][actor]") {
  small_model model;
  plan_request r;
  r.model_path = "/nowhere/on/this/node.gguf";
  r.context_length = 64;
  attach_model(r, model.spec);
  r.origin = "b";
  REQUIRE(r.layers.size() == model.spec.layers.size());
  auto back = model_of(r);
  CHECK(back.name == model.spec.name);
  CHECK(back.context_train == model.spec.context_train);
  REQUIRE(back.layers.size() == model.spec.layers.size());
  for (std::size_t i = 0; i < back.layers.size(); ++i) {
    CHECK(back.layers[i].weight_bytes == model.spec.layers[i].weight_bytes);
    CHECK(back.layers[i].kv_bytes_per_token
          == model.spec.layers[i].kv_bytes_per_token);
    CHECK(back.layers[i].flops_per_token
          == model.spec.layers[i].flops_per_token);
    CHECK(back.layers[i].activation_bytes
          == model.spec.layers[i].activation_bytes);
    CHECK(back.layers[i].operations == model.spec.layers[i].operations);
  }
  CHECK(back.layers.front().operations == 17); // a llama layer's decode step
  CHECK(back.layers.back().operations == 19);  // and the norm and the head
  auto huge = r;
  huge.layers.resize(max_plan_layers + 1);
  CHECK_THROWS_AS(model_of(huge), problem_error);

  actor_fixture fx{100ms};
  member_view v;
  v.members = {member("a", {dev("d0", model.part(), 2e12, 67e9)}),
               member("b", {dev("d0", model.part(), 1e12, 67e9)})};
  fx.feed(v);
  plan_job_info j;
  (*fx.self)
    ->request(fx.placement, 60s, plan_atom::value, r)
    .receive([&](plan_job_info& x) { j = std::move(x); },
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  INFO(render_text(j));
  CHECK(j.plan.status == "optimal");
  CHECK(j.plan.stages.size() == 2);
  CHECK(j.request.origin == "b");
  CHECK(render_text(j).find("asked-on=b") != std::string::npos);
  // Without layers the file must be there.
  r.layers.clear();
  (*fx.self)
    ->request(fx.placement, 60s, plan_atom::value, r)
    .receive([](plan_job_info&) { FAIL("planned a missing file"); },
             [](caf::error&) {});
}

TEST_CASE("a plan uses the free memory the devices report now, not the "
          "member view's older figures", "[placement][actor]") {
  // The member view refreshes a device's figures about once a second and
  // gossips them: right after a job ended it may still show the job's
  // memory held. A gate whose "nodes" view says both devices are nearly
  // full while the devices themselves ("devices") report them free.
  small_model model;
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys{cfg};
  for (bool answers_devices : {true, false}) {
    INFO("the gate answers \"devices\": " << answers_devices);
    // CAF 0.17: a spawned function takes an argument after self (without
    // one its empty argument tuple is read through a null pointer).
    auto gate = sys.spawn(
      [&model](caf::event_based_actor*, bool answers_devices)
        -> caf::behavior {
      return {
        [&model, answers_devices](console_atom, std::string& cmd,
                                  std::string&) -> caf::result<console_reply> {
          console_reply r;
          r.command = cmd;
          if (cmd == "nodes") {
            r.text = "test"; // this node coordinates
            r.nodes.members = {member("a", {dev("d0", model.part() / 8, 2e12,
                                                67e9)}),
                               member("b", {dev("d0", model.part() / 8, 1e12,
                                                67e9)})};
            r.nodes.members[0].links = {measured("a", "b", 200, 1e9)};
          } else if (cmd == "devices") {
            if (!answers_devices)
              return caf::make_error(caf::sec::request_timeout);
            for (auto node : {"a", "b"}) {
              auto d = dev("d0", model.part(), 1e12, 67e9);
              d.node = node;
              r.devices.push_back(d);
            }
            auto gone = dev("?", 0, 0, 0, device_state::gone);
            gone.node = "a";
            r.devices.push_back(gone);
          } else {
            return caf::make_error(caf::sec::unexpected_message);
          }
          return r;
        }};
      },
      answers_devices);
    placement_actor_config c;
    c.node_name = "test";
    c.gate = gate;
    c.poll_interval = 1h; // only the plan asks
    auto placement = spawn_placement_actor(sys, c);
    caf::scoped_actor self{sys};
    plan_request r;
    r.model_path = model.path;
    r.context_length = 64;
    r.keep = false;
    plan_job_info j;
    self->request(placement, 60s, plan_atom::value, r)
      .receive([&](plan_job_info& x) { j = std::move(x); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    INFO(render_text(j));
    if (answers_devices) {
      CHECK(j.plan.status == "optimal");
      CHECK(j.plan.stages.size() == 2);
    } else {
      // Without the devices' answer the view's figures stand.
      CHECK(j.plan.status == "infeasible");
    }
    self->send_exit(placement, caf::exit_reason::user_shutdown);
    self->wait_for(placement);
    self->send_exit(gate, caf::exit_reason::user_shutdown);
  }
}

TEST_CASE("a plan keeps a draft model's memory free on a device of the "
          "node that asked, or says that none has the room",
          "[placement][actor]") {
  small_model model;
  actor_fixture fx{100ms};
  member_view v;
  v.members = {member("a", {dev("d0", model.part(), 2e12, 67e9),
                            dev("d1", model.part() / 2, 2e12, 67e9)}),
               member("b", {dev("d0", model.part(), 1e12, 67e9)}),
               member("c", {dev("d0", model.part(), 1e12, 67e9)})};
  fx.feed(v);
  auto plan_with = [&](std::uint64_t reserve) {
    plan_request r;
    r.model_path = model.path;
    r.context_length = 64;
    r.keep = false;
    r.reserve_node = "a";
    r.reserve_bytes = reserve;
    plan_job_info out;
    (*fx.self)
      ->request(fx.placement, 60s, plan_atom::value, r)
      .receive([&](plan_job_info& j) { out = std::move(j); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    return out.plan;
  };
  auto has_note = [](const plan_info& p, const std::string& what) {
    for (auto& n : p.notes)
      if (n.find(what) != std::string::npos)
        return true;
    return false;
  };
  // Most of a/d0 (the device of a with the most memory) for the draft: the
  // solver may give it only what is left.
  const std::uint64_t draft = model.part() * 9 / 10;
  auto p = plan_with(draft);
  INFO(render_text(p));
  REQUIRE_FALSE(p.stages.empty());
  CHECK(p.reserved_device == "a/d0");
  CHECK(has_note(p, "device a/d0 keeps"));
  for (auto& s : p.stages)
    if (s.device == "a/d0")
      CHECK(s.memory_used_bytes <= model.part() - draft);
  // More than any device of a has: nothing kept, and said.
  auto q = plan_with(model.part() * 2);
  INFO(render_text(q));
  CHECK(q.reserved_device.empty());
  CHECK(has_note(q, "no device of a has"));
  // Without a draft nothing is kept.
  auto none = plan_with(0);
  CHECK(none.reserved_device.empty());
  CHECK_FALSE(has_note(none, "draft"));
}
