// The solvers: exact DP, Gecode model and brute force agree; plans never
// break a constraint; infeasibility is explained; search is anytime and
// cancellable.
#include <catch2/catch.hpp>

#include "core/placement/all.hpp"

#include <atomic>
#include <functional>
#include <limits>
#include <sstream>

using namespace exo::placement;

namespace {

/// The optimum by enumerating every device sequence and every split.
/// Returns nullopt when infeasible.
std::optional<std::int64_t> brute_force(const cost_model& m) {
  const int n = static_cast<int>(m.devices());
  const int L = static_cast<int>(m.layers());
  std::optional<std::int64_t> best;
  assignment cur;
  std::vector<char> used(n, 0);
  std::function<void(int)> go = [&](int at) {
    if (at == L) {
      for (int d = 0; d < n; ++d)
        if (m.must_use(d) && !used[d])
          return;
      auto v = m.evaluate(cur).objective;
      if (!best || v < *best)
        best = v;
      return;
    }
    if (cur.size() >= m.max_stages())
      return;
    for (int d = 0; d < n; ++d) {
      if (used[d])
        continue;
      used[d] = 1;
      for (int e = at + 1; e <= m.max_end(d, at); ++e) {
        cur.push_back({d, at, e});
        go(e);
        cur.pop_back();
      }
      used[d] = 0;
    }
  };
  go(0);
  return best;
}

problem small(std::uint64_t seed, objective_kind k, bool constraints,
              bool working_memory = false) {
  random_problem_options o;
  o.seed = seed;
  o.layers = 3 + seed % 5;
  o.devices = 2 + seed % 3;
  o.nodes = 1 + seed % 3;
  o.identical = seed % 4 == 0 ? 1 : 0;
  o.memory_slack = 1.1 + static_cast<double>(seed % 7) * 0.2;
  o.thermal_caps = seed % 2 == 0;
  o.operator_constraints = constraints;
  o.working_memory = working_memory;
  o.objective = k;
  return random_problem(o);
}

device make_device(const char* id, const char* node, std::uint64_t memory,
                   double flops) {
  device d;
  d.id = id;
  d.node = node;
  d.memory_bytes = memory;
  d.flops = flops;
  return d;
}

gecode_options long_search() {
  gecode_options g;
  g.time_limit = std::chrono::milliseconds(20000);
  return g;
}

} // namespace

TEST_CASE("the exact solver and Gecode both match brute force on small "
          "instances, and the relaxed bound stays below") {
  int feasible = 0;
  for (std::uint64_t seed = 1; seed <= 120; ++seed) {
    auto kind = seed % 3 == 0 ? objective_kind::throughput
                              : objective_kind::latency;
    auto p = small(seed, kind, seed % 2 == 1, seed % 3 == 1);
    p.constraints.prefer_fewer_nodes = seed % 5 == 0;
    cost_model m(p);
    auto bf = brute_force(m);
    auto ex = solve_exact(m);
    auto gc = solve_gecode(m, long_search());
    INFO("seed " << seed);
    REQUIRE(gc.complete);
    if (!bf) {
      CHECK(ex.status == exact_status::infeasible);
      CHECK_FALSE(gc.best.has_value());
      continue;
    }
    ++feasible;
    auto lb = relaxed_lower_bound(m);
    REQUIRE(lb.has_value());
    CHECK(*lb <= *bf);
    REQUIRE(ex.status == exact_status::solved);
    CHECK(ex.proven_optimal());
    CHECK(ex.objective == *bf);
    REQUIRE(gc.best.has_value());
    CHECK(gc.objective == *bf);
    CHECK(m.evaluate(*gc.best).objective == gc.objective);
  }
  CHECK(feasible > 60);
}

TEST_CASE("a blend: the exact solver's plan is the brute-force optimum "
          "and proven") {
  // The latency program under each bottleneck limit (exact_solver.cpp);
  // before, the better of the latency and the throughput optima, proven
  // only when the two agreed.
  int feasible = 0, proven = 0;
  for (std::uint64_t seed = 1; seed <= 120; ++seed) {
    auto p = small(seed, objective_kind::blend, seed % 2 == 1, seed % 3 == 1);
    p.constraints.prefer_fewer_nodes = seed % 5 == 0;
    cost_model m(p);
    auto bf = brute_force(m);
    auto ex = solve_exact(m);
    INFO("seed " << seed);
    if (!bf) {
      CHECK(ex.status == exact_status::infeasible);
      continue;
    }
    ++feasible;
    REQUIRE(ex.status == exact_status::solved);
    CHECK(ex.objective == *bf);
    CHECK(m.evaluate(ex.best).objective == ex.objective);
    CHECK(ex.lower_bound <= *bf);
    proven += ex.proven_optimal() ? 1 : 0;
  }
  CHECK(feasible > 60);
  CHECK(proven == feasible);
}

TEST_CASE("a blend's bisection stops at its deadline with a certified "
          "gap") {
  int cut_short = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    auto p = small(seed, objective_kind::blend, false, false);
    cost_model m(p);
    auto full = solve_exact(m);
    if (full.status != exact_status::solved)
      continue;
    INFO("seed " << seed);
    REQUIRE(full.proven_optimal());
    // A deadline already past: only the latency and throughput programs
    // and the two ends of the bisection run.
    auto early = solve_exact(m, nullptr, 16'000'000,
                             std::chrono::steady_clock::now());
    REQUIRE(early.status == exact_status::solved);
    CHECK(early.objective >= full.objective);
    CHECK(early.lower_bound <= full.objective);
    CHECK(early.lower_bound <= early.objective);
    CHECK(m.evaluate(early.best).objective == early.objective);
    cut_short += early.proven_optimal() ? 0 : 1;
  }
  CHECK(cut_short > 0);
}

TEST_CASE("the exact solver and Gecode agree on hundreds of random "
          "instances where both prove optimality") {
  int compared = 0;
  for (std::uint64_t seed = 1000; seed < 1300; ++seed) {
    random_problem_options o;
    o.seed = seed;
    o.layers = 6 + seed % 10;
    o.devices = 2 + seed % 5;
    o.nodes = 1 + seed % 4;
    o.identical = seed % 3;
    o.memory_slack = 1.2 + static_cast<double>(seed % 5) * 0.3;
    o.thermal_caps = seed % 4 == 0;
    o.operator_constraints = seed % 3 == 0;
    o.working_memory = seed % 2 == 0;
    o.objective = static_cast<objective_kind>(seed % 3);
    auto p = random_problem(o);
    cost_model m(p);
    auto ex = solve_exact(m);
    gecode_options g;
    g.time_limit = std::chrono::milliseconds(2000);
    auto gc = solve_gecode(m, g);
    INFO("seed " << seed);
    if (!gc.complete)
      continue;
    if (ex.status == exact_status::infeasible) {
      CHECK_FALSE(gc.best.has_value());
      ++compared;
      continue;
    }
    REQUIRE(ex.status == exact_status::solved);
    REQUIRE(gc.best.has_value());
    // For a blend the DP gives bounds around the optimum.
    if (ex.proven_optimal())
      CHECK(gc.objective == ex.objective);
    CHECK(gc.objective <= ex.objective);
    CHECK(gc.objective >= ex.lower_bound);
    ++compared;
  }
  CHECK(compared >= 250);
}

TEST_CASE("plans from every solver never break a constraint") {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    random_problem_options o;
    o.seed = seed;
    o.layers = 10 + seed % 20;
    o.devices = 3 + seed % 6;
    o.nodes = 1 + seed % 4;
    o.thermal_caps = true;
    o.operator_constraints = true;
    o.memory_slack = 1.5;
    o.working_memory = seed % 2 == 1;
    o.objective = static_cast<objective_kind>(seed % 3);
    auto p = random_problem(o);
    for (auto s : {solver_kind::exact, solver_kind::gecode}) {
      solve_options so;
      so.solver = s;
      so.time_limit = std::chrono::milliseconds(200);
      std::vector<plan> seen;
      auto r = solve(p, so, [&](const plan& x) { seen.push_back(x); });
      INFO("seed " << seed << " solver " << to_string(s));
      CHECK(r.notes.empty());
      if (r.best) {
        CHECK(check_plan(p, *r.best).empty());
        CHECK(r.best->objective_seconds >= r.best->lower_bound_seconds
                                             - 1e-12);
      }
      for (const auto& x : seen)
        CHECK(check_plan(p, x).empty());
    }
  }
}

TEST_CASE("a stage's working memory keeps a tight device from being "
          "overfilled") {
  // Four 100 MB layers; a fast device with 450 MB and a slow one with
  // plenty. Without working memory all four fit on the fast device; with
  // 50 MB per stage and 80 MB more on the last they do not (530 MB).
  problem p;
  p.devices = {make_device("fast", "a", 450'000'000, 1e13),
               make_device("slow", "a", 10'000'000'000, 1e11)};
  layer y;
  y.weight_bytes = 100'000'000;
  y.flops_per_token = 1e9;
  y.activation_bytes = 4096;
  p.layers = uniform_layers(4, y);
  p.request.safety_margin = 0;
  auto without = p;
  p.stage_memory_extra.every_stage = 50'000'000;
  p.stage_memory_extra.last_stage = 80'000'000;
  for (auto s : {solver_kind::exact, solver_kind::gecode}) {
    INFO("solver " << to_string(s));
    solve_options so;
    so.solver = s;
    auto naive = solve(without, so);
    REQUIRE(naive.best);
    REQUIRE(naive.best->stages.size() == 1);
    CHECK(naive.best->stages[0].device_id == "fast");
    // That plan overflows the fast device once working memory counts.
    auto broken = check_plan(p, *naive.best);
    REQUIRE(broken.size() == 1);
    CHECK(broken[0] == "stage 0 on fast needs "
                         + format_bytes(530e6) + " ("
                         + format_bytes(130e6)
                         + " of it working memory) but only "
                         + format_bytes(450e6) + " is usable");
    auto r = solve(p, so);
    REQUIRE(r.best);
    CHECK(r.status == solve_status::optimal);
    CHECK(check_plan(p, *r.best).empty());
    REQUIRE(r.best->stages.size() == 2);
    std::size_t fast_layers = 0;
    for (const auto& st : r.best->stages) {
      CHECK(st.memory_used_bytes
            == p.stage_memory(st.first_layer, st.end_layer));
      CHECK(st.memory_left_bytes >= 0);
      if (st.device_id == "fast")
        fast_layers = st.end_layer - st.first_layer;
    }
    CHECK(fast_layers == 3); // 300 MB + 50 (+ 80 if last) <= 450 MB
    CHECK(r.best->stages.back().memory_used_bytes
          >= 80'000'000 + 50'000'000 + 100'000'000);
  }
  SECTION("working memory alone can make a problem infeasible") {
    p.devices.pop_back();
    p.stage_memory_extra.every_stage = 400'000'000;
    auto r = solve(p);
    CHECK(r.status == solve_status::infeasible);
    bool found = false;
    for (const auto& e : r.explanation)
      found = found
              || e.find("layer 1 alone needs " + format_bytes(500e6) + " ("
                        + format_bytes(400e6)
                        + " of it the stage's working memory)")
                   == 0;
    CHECK(found);
    found = false;
    for (const auto& e : r.explanation)
      found = found
              || (e.find("total free memory is ") == 0
                  && e.find("with " + format_bytes(400e6)
                            + " of working memory per stage + "
                            + format_bytes(80e6) + " on the last")
                       != std::string::npos
                  && e.find("and the one usable device has "
                            + format_bytes(450e6))
                       != std::string::npos);
    CHECK(found);
  }
}

TEST_CASE("the plan checker reports each broken constraint") {
  auto p = small(7, objective_kind::latency, false);
  cost_model m(p);
  auto r = solve_exact(m);
  REQUIRE(r.status == exact_status::solved);
  auto x = make_plan(m, r.best);
  REQUIRE(check_plan(p, x).empty());
  auto gap = x;
  gap.stages.back().end_layer -= 1;
  CHECK_FALSE(check_plan(p, gap).empty());
  auto tight = p;
  tight.devices[x.stages[0].device_index].memory_bytes = 1;
  auto bad = check_plan(tight, x);
  REQUIRE_FALSE(bad.empty());
  CHECK(bad[0].find("usable") != std::string::npos);
  auto twice = x;
  twice.stages.push_back(x.stages[0]);
  CHECK_FALSE(check_plan(p, twice).empty());
  auto excluded = p;
  excluded.devices[x.stages[0].device_index].excluded = true;
  bad = check_plan(excluded, x);
  REQUIRE_FALSE(bad.empty());
  CHECK(bad[0].find("excluded") != std::string::npos);
}

TEST_CASE("sixteen devices in six classes are solved exactly") {
  random_problem_options o;
  o.layers = 80;
  o.devices = 16;
  o.nodes = 4;
  o.seed = 3;
  auto p = random_problem(o);
  // Make 16 devices out of 6 kinds (same node, speed and memory).
  for (std::size_t d = 6; d < 16; ++d) {
    auto id = p.devices[d].id;
    p.devices[d] = p.devices[d % 6];
    p.devices[d].id = id;
  }
  cost_model m(p);
  CHECK(m.classes() == 6);
  auto r = solve_exact(m);
  REQUIRE(r.status == exact_status::solved);
  CHECK(r.proven_optimal());
  CHECK(check_plan(p, make_plan(m, r.best)).empty());
}

TEST_CASE("devices on different nodes never share a class") {
  auto p = small(2, objective_kind::latency, false);
  p.devices.resize(2);
  p.devices[1] = p.devices[0];
  p.devices[1].id = "twin";
  p.devices[1].node = p.devices[0].node == "n0" ? "n1" : "n0";
  p.links = {{"n0", "n1", {1e-3, 1e9}}};
  validate(p);
  cost_model m(p);
  CHECK(m.classes() == 2);
  p.devices[1].node = p.devices[0].node;
  cost_model same(p);
  CHECK(same.classes() == 1);
}

TEST_CASE("a large node penalty keeps the plan on one node") {
  random_problem_options o;
  o.layers = 20;
  o.devices = 4;
  o.nodes = 2;
  o.seed = 11;
  o.memory_slack = 3.0;
  auto p = random_problem(o);
  for (auto& d : p.devices)
    d.memory_bytes *= 4; // any one node can hold the model
  p.constraints.prefer_fewer_nodes = true;
  p.constraints.node_penalty = 100;
  auto r = solve(p);
  REQUIRE(r.status == solve_status::optimal);
  CHECK(r.best->nodes_used == 1);
}

TEST_CASE("an infeasible problem gets explanations a person can act on") {
  auto p = small(5, objective_kind::latency, false);
  SECTION("every device is excluded") {
    for (auto& d : p.devices)
      d.excluded = true;
    auto r = solve(p);
    CHECK(r.status == solve_status::infeasible);
    REQUIRE_FALSE(r.explanation.empty());
    CHECK(r.explanation[0].find("every device is excluded")
          != std::string::npos);
  }
  SECTION("a layer larger than every device") {
    p.layers[0].weight_bytes = std::uint64_t{1} << 45;
    auto r = solve(p);
    CHECK(r.status == solve_status::infeasible);
    bool found = false;
    for (const auto& e : r.explanation)
      found = found || e.find("layer 0 alone needs 32.0 TiB and no device "
                              "has it") != std::string::npos;
    CHECK(found);
  }
  SECTION("too little memory in total") {
    for (auto& d : p.devices)
      d.memory_bytes /= 4;
    auto r = solve(p);
    CHECK(r.status == solve_status::infeasible);
    bool found = false;
    for (const auto& e : r.explanation)
      found = found || (e.find("total free memory is ") == 0
                        && e.find(" short") != std::string::npos);
    CHECK(found);
  }
  SECTION("layers pinned to an excluded device") {
    p.devices[0].excluded = true;
    p.constraints.pins.push_back({p.devices[0].id, 0, 1});
    auto r = solve(p);
    CHECK(r.status == solve_status::infeasible);
    REQUIRE_FALSE(r.explanation.empty());
    CHECK(r.explanation[0]
          == "layers 0-1 are pinned to " + p.devices[0].id
               + ", which is excluded");
  }
  SECTION("more pinned devices than stages") {
    for (auto& d : p.devices)
      d.pinned = true;
    p.constraints.max_stages = 1;
    auto r = solve(p);
    CHECK(r.status == solve_status::infeasible);
    bool found = false;
    for (const auto& e : r.explanation)
      found = found || e.find("must be used (pinned) but max_stages is 1")
                         != std::string::npos;
    CHECK(found);
  }
}

namespace {

problem medium() {
  random_problem_options o;
  o.layers = 40;
  o.devices = 9;
  o.nodes = 4;
  o.seed = 42;
  o.memory_slack = 2.0;
  return random_problem(o);
}

} // namespace

TEST_CASE("the anytime callback receives strictly improving plans") {
  auto p = medium();
  cost_model m(p);
  gecode_options g;
  g.time_limit = std::chrono::milliseconds(1500);
  std::vector<std::int64_t> seen;
  auto r = solve_gecode(m, g, [&](const assignment& a, std::int64_t v) {
    CHECK(m.evaluate(a).objective == v);
    seen.push_back(v);
  });
  REQUIRE(seen.size() >= 2);
  for (std::size_t i = 1; i < seen.size(); ++i)
    CHECK(seen[i] < seen[i - 1]);
  CHECK(r.objective == seen.back());
  // Through solve(): the exact plan first, then only better ones.
  solve_options so;
  so.solver = solver_kind::gecode;
  so.time_limit = std::chrono::milliseconds(500);
  std::vector<double> plans;
  solve(p, so, [&](const plan& x) { plans.push_back(x.objective_seconds); });
  for (std::size_t i = 1; i < plans.size(); ++i)
    CHECK(plans[i] < plans[i - 1]);
}

TEST_CASE("raising the cancel flag stops the search") {
  auto p = medium();
  cost_model m(p);
  std::atomic<bool> cancel{false};
  gecode_options g;
  g.time_limit = std::chrono::milliseconds(600000);
  g.cancel = &cancel;
  // Cancel from the first solution: the search must stop there.
  auto r = solve_gecode(m, g, [&](const assignment&, std::int64_t) {
    cancel = true;
  });
  CHECK(r.cancelled);
  CHECK_FALSE(r.complete);
  CHECK(r.solutions == 1);
  REQUIRE(r.best.has_value());
  // A raised flag stops the exact solver and solve() too.
  CHECK(solve_exact(m, &cancel).status == exact_status::cancelled);
  solve_options so;
  so.time_limit = std::chrono::milliseconds(600000);
  auto s = solve(p, so, {}, &cancel);
  CHECK(s.cancelled);
  CHECK(s.status == solve_status::no_plan);
}

TEST_CASE("a plan that meets the lower bound is proven optimal, even when "
          "its search was stopped") {
  // One device: its only plan costs exactly the static bound (every layer
  // on its fastest device, no transfer). Gecode is cancelled at its first
  // plan, so it proves nothing itself.
  auto p = small(2, objective_kind::latency, false);
  p.devices.resize(1);
  p.devices[0].memory_bytes = 1ull << 40;
  p.links.clear();
  validate(p);
  std::atomic<bool> cancel{false};
  solve_options so;
  so.solver = solver_kind::gecode;
  so.time_limit = std::chrono::milliseconds(600000);
  auto r = solve(p, so, [&](const plan&) { cancel = true; }, &cancel);
  REQUIRE(r.best.has_value());
  CHECK(r.status == solve_status::optimal);
  CHECK(r.best->proven_optimal);
  CHECK(r.best->lower_bound_seconds == r.best->objective_seconds);
}

TEST_CASE("Gecode search is deterministic") {
  auto p = small(9, objective_kind::throughput, true);
  cost_model m(p);
  auto run = [&] {
    std::vector<std::int64_t> v;
    solve_gecode(m, long_search(),
                 [&](const assignment&, std::int64_t x) { v.push_back(x); });
    return v;
  };
  auto a = run();
  CHECK(a == run());
}

TEST_CASE("a seeded Gecode search that finds nothing better proves the "
          "seed optimal") {
  auto p = small(13, objective_kind::latency, false);
  cost_model m(p);
  auto ex = solve_exact(m);
  REQUIRE(ex.status == exact_status::solved);
  auto g = long_search();
  g.upper_bound = ex.objective;
  auto r = solve_gecode(m, g);
  CHECK(r.complete);
  CHECK_FALSE(r.best.has_value());
}

TEST_CASE("the baseline splits layers in proportion to memory, largest "
          "first") {
  problem p;
  p.devices = {make_device("small", "n0", 1000, 1e12),
               make_device("big", "n0", 3000, 1e12)};
  p.layers = uniform_layers(8, layer{10, 0, 1e9, 100});
  validate(p);
  cost_model m(p);
  auto a = baseline_assignment(m);
  REQUIRE(a.size() == 2);
  CHECK(p.devices[m.problem_device(a[0].device)].id == "big");
  CHECK(a[0].end - a[0].first == 6);
  CHECK(a[1].end - a[1].first == 2);
}

TEST_CASE("the exact solver is never worse than the baseline when the "
          "baseline fits") {
  int compared = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    random_problem_options o;
    o.seed = seed;
    o.layers = 32;
    o.devices = 2 + seed % 6;
    o.nodes = 1 + seed % 3;
    o.memory_slack = 2.5;
    auto p = random_problem(o);
    solve_options so;
    so.solver = solver_kind::exact;
    auto r = solve(p, so);
    REQUIRE(r.best.has_value());
    if (!r.baseline_violations.empty())
      continue;
    ++compared;
    CHECK(r.best->objective_units <= r.baseline->objective_units);
  }
  CHECK(compared > 10);
}

TEST_CASE("device scores weigh compute, memory, network, thermal and "
          "bandwidth") {
  problem p;
  p.devices = {make_device("fast", "n0", 2000, 2e12),
               make_device("slow", "n0", 1000, 1e12)};
  p.devices[0].memory_bandwidth = 1e11;
  p.devices[0].thermal_headroom = 1.0;
  p.devices[1].memory_bandwidth = 5e10;
  p.devices[1].thermal_headroom = 0.5;
  p.layers = uniform_layers(2, layer{10, 0, 1e9, 100});
  auto s = score_devices(p);
  REQUIRE(s.size() == 2);
  CHECK(s[0].total == Approx(1.0));
  CHECK(s[1].compute == Approx(0.5));
  CHECK(s[1].total == Approx(0.4 * 0.5 + 0.3 * 0.5 + 0.15 + 0.1 * 0.5
                             + 0.05 * 0.5));
}

TEST_CASE("the capacity and window bounds never exceed the optimum, with memory, "
          "thermal caps, pins, working memory and every objective") {
  int checked = 0;
  for (std::uint64_t seed = 1; seed <= 120; ++seed) {
    auto kind = static_cast<objective_kind>(seed % 3);
    auto p = small(seed, kind, seed % 2 == 1, seed % 3 == 1);
    p.constraints.prefer_fewer_nodes = seed % 5 == 0;
    cost_model m(p);
    auto bf = brute_force(m);
    auto cb = capacity_lower_bound(m);
    INFO("seed " << seed);
    if (!bf)
      continue;
    REQUIRE(cb.has_value());
    CHECK(cb->objective <= *bf);
    auto wb = window_lower_bound(m);
    REQUIRE(wb.has_value());
    CHECK(*wb <= *bf);
    CHECK(cb->min_devices >= 1);
    CHECK(cb->min_nodes >= 1);
    ++checked;
  }
  CHECK(checked > 60);
  // Larger instances against the exact solver's proven optima.
  int larger = 0;
  for (std::uint64_t seed = 2000; seed < 2080; ++seed) {
    random_problem_options o;
    o.seed = seed;
    o.layers = 16 + seed % 48;
    o.devices = 3 + seed % 6;
    o.nodes = 1 + seed % 4;
    o.identical = seed % 3;
    o.memory_slack = 1.05 + static_cast<double>(seed % 5) * 0.2;
    o.thermal_caps = seed % 4 == 0;
    o.working_memory = seed % 2 == 0;
    o.objective = static_cast<objective_kind>(seed % 3);
    auto p = random_problem(o);
    cost_model m(p);
    auto ex = solve_exact(m);
    INFO("seed " << seed);
    if (ex.status != exact_status::solved)
      continue;
    auto cb = capacity_lower_bound(m);
    REQUIRE(cb.has_value());
    CHECK(cb->objective <= ex.objective);
    auto wb = window_lower_bound(m);
    REQUIRE(wb.has_value());
    CHECK(*wb <= ex.objective);
    ++larger;
  }
  CHECK(larger > 50);
}

TEST_CASE("sixteen all-different devices: a certified gap, far tighter "
          "than the relaxed program's bound, and plans from subsets") {
  random_problem_options o;
  o.seed = 16;
  o.layers = 80;
  o.devices = 16;
  o.nodes = 8;
  o.memory_slack = 1.3;
  auto p = random_problem(o);
  cost_model m(p);
  auto cb = capacity_lower_bound(m);
  REQUIRE(cb.has_value());
  auto relaxed = relaxed_lower_bound(m);
  REQUIRE(relaxed.has_value());
  // The relaxed program lets the fastest device take everything.
  CHECK(cb->objective > 5 * *relaxed);
  CHECK(cb->min_devices > 1);
  // The heuristics, given all the time they want (the budget only limits
  // how many subsets they try): every subset solved, deterministic.
  auto h = search_subsets(m, 16'000'000, std::chrono::minutes(5), nullptr);
  REQUIRE(h.has_value());
  CHECK(h->method == "exact-subset");
  CHECK(h->objective == m.evaluate(h->plan).objective);
  auto x = make_plan(m, h->plan);
  CHECK(check_plan(p, x).empty());
  const double gap = static_cast<double>(h->objective) / cb->objective - 1;
  INFO("plan " << m.to_seconds(h->objective) << " s, bound "
               << m.to_seconds(cb->objective) << " s");
  CHECK(gap > 0);
  CHECK(gap < 0.6);
  // solve() states the bound with its plan, never "proven" above it.
  solve_options opts;
  opts.time_limit = std::chrono::milliseconds(300);
  auto r = solve(p, opts);
  REQUIRE(r.best.has_value());
  CHECK(r.best->lower_bound_seconds >= m.to_seconds(cb->objective) * 0.999);
  CHECK(r.best->proven_optimal
        == (r.best->objective_seconds <= r.best->lower_bound_seconds));
  CHECK(check_plan(p, *r.best).empty());
  // And says so: the table and the JSON carry the certified gap.
  REQUIRE_FALSE(r.best->proven_optimal);
  auto g = certified_gap(*r.best);
  REQUIRE(g.has_value());
  CHECK(*g > 0);
  std::ostringstream table;
  print_plan_table(table, *r.best);
  CHECK(table.str().find("proven optimal: no (certified gap ")
        != std::string::npos);
  CHECK(plan_to_json(*r.best).at("gap").get<double>() == Approx(*g));
}

TEST_CASE("a problem whose transfer table would be too large is refused "
          "before anything is allocated") {
  problem p;
  p.default_link = link_spec{0.001, 1e9};
  for (int i = 0; i < 250; ++i)
    p.devices.push_back(make_device(("d" + std::to_string(i)).c_str(),
                                    ("n" + std::to_string(i)).c_str(),
                                    1ull << 40, 1e12));
  layer x;
  x.weight_bytes = 1 << 20;
  x.flops_per_token = 1e6;
  p.layers.assign(100000, x);
  CHECK_THROWS_WITH(validate(p),
                    Catch::Contains("devices: 250 nodes and 100000 layers are "
                                    "too many to plan together"));
  p.layers.resize(256); // 62500 x 257 < 2^24
  CHECK_NOTHROW(validate(p));
}
