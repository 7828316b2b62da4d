// Placement at cluster scale: interchangeable nodes, the node-block program
// and the window bound that proves its plans. Every claim of "proven" is
// checked against the exact program where it can run, and the proven
// objective must not depend on how the cluster is listed.
#include <catch2/catch.hpp>

#include "core/placement/all.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

using namespace exo::placement;

namespace {

/// A cluster small enough for the exact program (at most 8 devices in
/// classes keyed on their nodes).
problem small_cluster(std::uint64_t seed, objective_kind k) {
  random_cluster_options o;
  o.layers = 12 + seed % 20;
  o.nodes = 3 + seed % 3;
  o.devices_per_node = 1 + seed % 2;
  o.node_kinds = 1 + seed % 3;
  o.two_device_kinds = seed % 4 == 1;
  o.mixed_nics = seed % 3 == 2;
  o.memory_slack = 1.2 + static_cast<double>(seed % 5) * 0.4;
  o.objective = k;
  o.seed = seed;
  return random_cluster(o);
}

/// Calls f(seed, kind, problem, model, exact result) for the small
/// clusters of seeds 1..seeds (objectives in turn, or `only`) the exact
/// program solves.
template <typename F>
void for_each_solved_small(std::uint64_t seeds, F&& f,
                           std::optional<objective_kind> only = {}) {
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    auto kind = only ? *only : static_cast<objective_kind>(seed % 3);
    auto p = small_cluster(seed, kind);
    INFO("seed " << seed);
    cost_model m(p);
    auto ex = solve_exact(m);
    if (ex.status == exact_status::solved)
      f(seed, kind, p, m, ex);
  }
}

/// 64 devices on 16 nodes of 4 node kinds (8 device kinds with `two`)
/// behind one switch, or with a network card per node kind (`nics`).
problem rack(std::size_t layers, bool two, objective_kind kind,
             std::uint64_t seed, bool nics = false) {
  random_cluster_options o;
  o.layers = layers;
  o.nodes = 16;
  o.devices_per_node = 4;
  o.node_kinds = 4;
  o.two_device_kinds = two;
  o.mixed_nics = nics;
  o.objective = kind;
  o.seed = seed;
  return random_cluster(o);
}

/// rack() after the node of its plan's middle stage is lost: the
/// surviving stages' layers are resident where they ran.
problem rack_after_loss(std::size_t layers, bool two, objective_kind kind,
                        std::uint64_t seed, std::string* lost_node = nullptr) {
  auto p = rack(layers, two, kind, seed);
  auto first = solve(p);
  REQUIRE(first.best);
  const auto& stages = first.best->stages;
  const auto lost = stages[stages.size() / 2].node;
  for (auto& d : p.devices)
    if (d.node == lost)
      d.excluded = true;
  for (const auto& s : stages)
    if (s.node != lost)
      p.resident.push_back({s.device_id, s.first_layer, s.end_layer - 1});
  if (lost_node)
    *lost_node = lost;
  return p;
}

/// 250 devices (the most a problem may have) on `nodes` nodes of 8 kinds,
/// a network card per kind, 128 layers, throughput.
problem widest(std::size_t nodes, std::size_t devices_per_node) {
  random_cluster_options o;
  o.layers = 128;
  o.nodes = nodes;
  o.devices_per_node = devices_per_node;
  o.node_kinds = 8;
  o.two_device_kinds = true;
  o.mixed_nics = true;
  o.objective = objective_kind::throughput;
  o.seed = 7;
  return random_cluster(o);
}

/// Checks that `r` has a plan of `p`, proven (its bound meets it), by
/// `solver` unless empty, that passes every check.
void check_proven(const problem& p, const solve_result& r,
                  const std::string& solver = {}) {
  REQUIRE(r.best);
  if (!solver.empty())
    CHECK(r.best->solver == solver);
  CHECK(r.best->proven_optimal);
  CHECK(r.status == solve_status::optimal);
  CHECK(r.best->lower_bound_seconds == r.best->objective_seconds);
  CHECK(check_plan(p, *r.best).empty());
}

/// solve() with the exact program kept out (its table "too large"), so
/// that the node-block program and the bounds do the work.
solve_result solve_at_scale(const problem& p) {
  solve_options o;
  o.exact_max_entries = 1;
  o.time_limit = std::chrono::milliseconds(2000);
  return solve(p, o);
}

} // namespace

TEST_CASE("nodes of one hardware behind one switch are interchangeable, "
          "and a node whose link differs stands alone") {
  random_cluster_options o;
  o.nodes = 12;
  o.node_kinds = 3;
  o.layers = 40;
  auto p = random_cluster(o);
  {
    cost_model m(p);
    auto nc = interchangeable_nodes(m);
    REQUIRE(nc.members.size() == 3);
    for (const auto& c : nc.members)
      CHECK(c.size() == 4);
    // Node i has kind i % 3: one class per kind.
    for (int a = 0; a < 12; ++a)
      CHECK(nc.class_of[a] == nc.class_of[a % 3]);
  }
  // A network card per kind: classes survive (links depend on kinds).
  o.mixed_nics = true;
  auto q = random_cluster(o);
  {
    cost_model m(q);
    CHECK(interchangeable_nodes(m).members.size() == 3);
  }
  // One slower link, n0 - n3 (both of kind 0): its two ends may still be
  // swapped for each other, not for n6 or n9.
  for (auto& l : p.links)
    if (l.a == "n0" && l.b == "n3")
      l.spec.latency *= 3;
  cost_model m(p);
  auto nc = interchangeable_nodes(m);
  CHECK(nc.members.size() == 4);
  CHECK(nc.members[nc.class_of[0]] == std::vector<int>{0, 3});
  CHECK(nc.members[nc.class_of[6]] == std::vector<int>{6, 9});
  CHECK(nc.members[nc.class_of[1]].size() == 4);
  // Slower links from n1 to n2 and to n4: n1, n2 and n4 stand alone; the
  // other two nodes of n1's kind (n7, n10) stay a class.
  for (auto& l : p.links)
    if (l.a == "n1" && (l.b == "n2" || l.b == "n4"))
      l.spec.bandwidth /= 2;
  cost_model m2(p);
  auto nc2 = interchangeable_nodes(m2);
  CHECK(nc2.members[nc2.class_of[1]].size() == 1);
  CHECK(nc2.members[nc2.class_of[7]] == std::vector<int>{7, 10});
}

TEST_CASE("the window bound never exceeds the exact optimum and a "
          "node-block plan proven by it is the exact optimum") {
  int proven = 0, checked = 0;
  for_each_solved_small(90, [&](std::uint64_t seed, objective_kind kind,
                                const problem& p, const cost_model& m,
                                const exact_result& ex) {
    ++checked;
    auto wb = window_lower_bound(m);
    REQUIRE(wb.has_value());
    CHECK(*wb <= ex.objective);
    auto nb = solve_node_blocks(m);
    REQUIRE(nb.found);
    CHECK(check_plan(p, make_plan(m, nb.best)).empty());
    // Never better than the optimum (for a blend: than the lower bound).
    CHECK(nb.objective >= ex.lower_bound);
    auto r = solve_at_scale(p);
    REQUIRE(r.best);
    CHECK(check_plan(p, *r.best).empty());
    if (r.best->proven_optimal) {
      ++proven;
      if (kind != objective_kind::blend) {
        CHECK(r.best->objective_units == ex.objective);
      } else {
        // The exact program proves a blend only when its two optima agree.
        CHECK(r.best->objective_units <= ex.objective);
      }
    }
    // Listed in another order and renamed: a proven objective is the same
    // (whether Gecode finishes within its time limit may differ under load).
    auto q = p;
    std::rotate(q.devices.begin(), q.devices.begin() + seed % q.devices.size(),
                q.devices.end());
    for (auto& d : q.devices)
      d.node = "x-" + d.node;
    for (auto& l : q.links) {
      l.a = "x-" + l.a;
      l.b = "x-" + l.b;
    }
    std::reverse(q.links.begin(), q.links.end());
    auto rq = solve_at_scale(q);
    REQUIRE(rq.best);
    if (r.best->proven_optimal && rq.best->proven_optimal)
      CHECK(rq.best->objective_units == r.best->objective_units);
    if (r.best->proven_optimal)
      CHECK(rq.best->objective_units >= r.best->objective_units);
    if (rq.best->proven_optimal)
      CHECK(r.best->objective_units >= rq.best->objective_units);
  });
  CHECK(checked > 70);
  CHECK(proven > checked / 2);
}

TEST_CASE("64 devices on 16 nodes in 8 kinds: proven optimal, latency and "
          "throughput") {
  for (auto kind : {objective_kind::latency, objective_kind::throughput})
    for (std::uint64_t seed : {11, 12}) {
      auto p = rack(128, true, kind, seed);
      INFO(to_string(kind) << " seed " << seed);
      cost_model m(p);
      CHECK(m.kinds() == 8);
      check_proven(p, solve(p), "node-blocks");
    }
}

TEST_CASE("an unproven plan states its bound and gap, never proven") {
  // 16 all-different devices (layers differing by 20%, links all
  // different): no proof, a certified gap.
  random_problem_options o;
  o.layers = 32;
  o.devices = 16;
  o.nodes = 8;
  o.memory_slack = 1.3;
  o.seed = 108;
  auto p = random_problem(o);
  solve_options so;
  so.time_limit = std::chrono::milliseconds(300);
  auto r = solve(p, so);
  REQUIRE(r.best);
  CHECK_FALSE(r.best->proven_optimal);
  CHECK(r.status == solve_status::feasible);
  CHECK(r.best->lower_bound_seconds > 0);
  CHECK(r.best->lower_bound_seconds < r.best->objective_seconds);
  CHECK(check_plan(p, *r.best).empty());
}

TEST_CASE("throughput with a network card per node kind: walks through "
          "bridge nodes meet the bound") {
  // The best block plan's bottleneck was 4.3% (seed 1000) and 19.3%
  // (seed 1035) above the bound: nodes with slow cards meet only through
  // a node with a fast one, which a plan entering each node once can
  // pass once. A walk passes it once per device.
  for (std::uint64_t seed : {1000, 1035}) {
    INFO("seed " << seed);
    auto p = rack(128, true, objective_kind::throughput, seed, true);
    auto r = solve(p);
    check_proven(p, r, "walk");
    cost_model m(p);
    auto nb = solve_node_blocks(m);
    REQUIRE(nb.found);
    CHECK(nb.objective > r.best->objective_units);
    // Some node is entered more than once.
    std::vector<std::string> visits;
    for (const auto& s : r.best->stages)
      if (visits.empty() || visits.back() != s.node)
        visits.push_back(s.node);
    std::sort(visits.begin(), visits.end());
    CHECK(std::adjacent_find(visits.begin(), visits.end()) != visits.end());
  }
}

TEST_CASE("walk plans are valid, within their limit and never below the "
          "exact optimum") {
  int found = 0, checked = 0;
  for_each_solved_small(
    120,
    [&](std::uint64_t, objective_kind, const problem& p, const cost_model& m,
        const exact_result& ex) {
      ++checked;
      for (std::int64_t limit :
           {ex.objective, ex.objective + ex.objective / 10,
            ex.objective * 2}) {
        auto w = walk_plan(m, limit);
        if (!w)
          continue;
        ++found;
        CHECK(check_plan(p, make_plan(m, *w)).empty());
        const auto e = m.evaluate(*w);
        CHECK(e.bottleneck <= limit);
        CHECK(e.objective >= ex.objective);
      }
      // Below the optimum there is none.
      CHECK_FALSE(walk_plan(m, ex.objective - 1).has_value());
      auto least =
        least_walk_plan(m, 0, ex.objective * 2,
                        std::chrono::steady_clock::time_point::max());
      if (least)
        CHECK(m.evaluate(*least).objective >= ex.objective);
    },
    objective_kind::throughput);
  INFO("checked " << checked << ", found " << found);
  CHECK(checked > 100);
  CHECK(found > checked);
}

TEST_CASE("latency: where block plans suffice, the best block plan is the "
          "optimum unless a plan that comes back to its first node is "
          "better") {
  // Small clusters the exact program solves: wherever the check holds,
  // min(best block plan, bound of the returning plans) never exceeds the
  // exact optimum, and where the block plan is below that bound it is the
  // optimum.
  int held = 0, proven = 0;
  for_each_solved_small(
    240,
    [&](std::uint64_t, objective_kind, const problem&, const cost_model& m,
        const exact_result& ex) {
      if (!block_plans_suffice(m))
        return;
      ++held;
      auto nb = solve_node_blocks(m);
      REQUIRE(nb.found);
      const auto back = returning_lower_bound(m);
      const auto proof = back ? std::min(nb.objective, *back) : nb.objective;
      CHECK(proof <= ex.objective);
      if (!back || *back >= nb.objective) {
        ++proven;
        CHECK(nb.objective == ex.objective);
      }
    },
    objective_kind::latency);
  INFO("held " << held << ", proven " << proven);
  CHECK(held > 200); // 239 of 240
  CHECK(proven > 200); // 238
}

TEST_CASE("block plans are not claimed to suffice where coming back pays: "
          "a slow link inside a node, middle layers that differ") {
  // Nodes b, a, d, c: layer 0 (heavy) fits only b's device, the last
  // layer (heavy) only c's, every device holds exactly 3 of 15 layers.
  // Node a has two devices and a slow link between them (1 ms), the links
  // between nodes are fast (10 us): b a d a c (4 fast cuts) beats every
  // plan that enters a once (a slow cut between a's devices).
  problem p;
  p.model_name = "revisit";
  layer mid;
  mid.weight_bytes = 100 << 20;
  mid.flops_per_token = 1e9;
  mid.activation_bytes = 8192;
  p.layers = uniform_layers(15, mid);
  p.layers.front().weight_bytes = 400 << 20;
  p.layers.back().weight_bytes = 400 << 20;
  p.request.context_length = 0;
  p.request.safety_margin = 0;
  auto dev = [&](const std::string& id, const std::string& node,
                 std::uint64_t mib) {
    device d;
    d.id = id;
    d.node = node;
    d.memory_bytes = mib << 20;
    d.flops = 1e12;
    p.devices.push_back(d);
  };
  dev("b/0", "b", 600 + 50);
  dev("a/0", "a", 300 + 50);
  dev("a/1", "a", 300 + 50);
  dev("d/0", "d", 300 + 50);
  dev("c/0", "c", 600 + 50);
  p.intra_node = {1e-3, 50e9};
  p.default_link = link_spec{10e-6, 10e9};
  validate(p);
  cost_model m(p);
  CHECK_FALSE(block_plans_suffice(m));
  auto ex = solve_exact(m);
  REQUIRE(ex.status == exact_status::solved);
  auto nb = solve_node_blocks(m);
  REQUIRE(nb.found);
  CHECK(ex.objective < nb.objective); // coming back pays here
  // solve() keeps the plan's gap honest: exact, with a proof of its own.
  auto r = solve(p);
  REQUIRE(r.best);
  CHECK(r.best->objective_units == ex.objective);
  // The same cluster with the usual fast link inside nodes: block plans
  // suffice, and one is optimal.
  p.intra_node = {5e-6, 50e9};
  cost_model fast(p);
  CHECK(block_plans_suffice(fast));
  auto ex2 = solve_exact(fast);
  auto nb2 = solve_node_blocks(fast);
  REQUIRE(nb2.found);
  CHECK(nb2.objective == ex2.objective);
  // A middle layer that costs more than the others: the check fails.
  p.layers[7].flops_per_token *= 2;
  cost_model odd(p);
  CHECK_FALSE(block_plans_suffice(odd));
  // Throughput: never claimed.
  p.layers[7].flops_per_token /= 2;
  p.objective.kind = objective_kind::throughput;
  cost_model thr(p);
  CHECK_FALSE(block_plans_suffice(thr));
}

TEST_CASE("latency with a network card per node kind: 64-device plans are "
          "proven by block plans sufficing") {
  // Seeds whose window bound stayed 1 to 46 ticks below the plan (the
  // cuts rounded to ticks one by one; 0.32% on 1002).
  for (std::uint64_t seed : {1002, 1003, 1017, 1018}) {
    INFO("seed " << seed);
    auto p = rack(128, true, objective_kind::latency, seed, true);
    cost_model m(p);
    CHECK(block_plans_suffice(m));
    auto r = solve(p);
    check_proven(p, r);
    CHECK(std::find_if(r.notes.begin(), r.notes.end(), [](const auto& n) {
            return n.find("block plans suffice") != std::string::npos;
          }) != r.notes.end());
  }
}

TEST_CASE("cuts of network cards that differ by node kind: charged by "
          "what each card adds and by the slower card, the plan is proven") {
  // A link as slow as its slower card costs lat(a) + lat(b) + bytes /
  // min(bw): potentials leaning to the fastest card leave a residual a
  // tree charges exactly. The gap on this seed was 0.37% (potentials or
  // hops), 0.10% (fitted potentials), 0.02% (leaning, in whole ticks).
  for (std::uint64_t seed : {1000, 1001, 1005}) {
    INFO("seed " << seed);
    auto p = rack(128, true, objective_kind::latency, seed, true);
    check_proven(p, solve(p));
  }
}

TEST_CASE("a blend of latency and bottleneck is bounded as one and "
          "proven at 64 devices") {
  // The two parts' bounds added let one plan have the best latency and
  // another the best bottleneck (a 1.07% gap on seed 1); bounding the
  // latency of the plans of each bottleneck proves the plan. On seeds 3,
  // 5 and 7 the program's plan was the better of the latency and the
  // throughput plans (gaps of 2.77%, 0.95%, 2.32%); it now also runs the
  // latency program under bottleneck limits between the two.
  for (std::uint64_t seed : {1, 3, 5, 7}) {
    INFO("seed " << seed);
    auto p = rack(128, true, objective_kind::blend, seed);
    check_proven(p, solve(p), "node-blocks");
  }
}

TEST_CASE("the proven objective does not change when devices and nodes are "
          "listed in another order or renamed") {
  // Behind one switch (seeds 3, 4), and with a card per node kind (1002,
  // 1035: proven by block plans sufficing and by walks).
  for (auto kind : {objective_kind::latency, objective_kind::throughput})
    for (std::uint64_t seed : {3, 4, 1002, 1035}) {
      const bool nics = seed > 1000;
      auto p = nics ? rack(128, true, kind, seed, true)
                    : rack(80, false, kind, seed);
      auto a = solve(p);
      REQUIRE(a.best);
      REQUIRE(a.best->proven_optimal);
      // Reverse the devices, rename every node (n<i> -> host-<15-i>) and
      // list the links backwards.
      auto q = p;
      std::reverse(q.devices.begin(), q.devices.end());
      auto rename = [](const std::string& n) {
        return "host-" + std::to_string(15 - std::stoi(n.substr(1)));
      };
      for (auto& d : q.devices) {
        d.node = rename(d.node);
        d.id = "dev-" + d.id;
      }
      for (auto& l : q.links) {
        l.a = rename(l.a);
        l.b = rename(l.b);
        std::swap(l.a, l.b);
      }
      std::reverse(q.links.begin(), q.links.end());
      auto b = solve(q);
      INFO(to_string(kind) << " seed " << seed);
      REQUIRE(b.best);
      CHECK(b.best->proven_optimal);
      CHECK(b.best->objective_units == a.best->objective_units);
    }
}

TEST_CASE("losing a node of a 64-device cluster: the survivors of its kind "
          "stay interchangeable and the new plan is proven") {
  auto p = rack(128, true, objective_kind::latency, 21);
  auto before = solve(p);
  REQUIRE(before.best);
  REQUIRE(before.best->proven_optimal);
  // The node of the plan's first stage is lost.
  const auto lost = before.best->stages.front().node;
  for (auto& d : p.devices)
    if (d.node == lost)
      d.excluded = true;
  cost_model m(p);
  auto nc = interchangeable_nodes(m);
  CHECK(nc.members.size() == 4);
  auto after = solve(p);
  REQUIRE(after.best);
  CHECK(after.best->proven_optimal);
  CHECK(after.best->objective_seconds >= before.best->objective_seconds);
  for (const auto& s : after.best->stages)
    CHECK(s.node != lost);
}

namespace {

/// Weight bytes `x` puts on devices that do not hold them in `p.resident`.
std::int64_t bytes_moved(const problem& p, const plan& x) {
  std::int64_t out = 0;
  for (const auto& s : x.stages)
    for (auto l = s.first_layer; l < s.end_layer; ++l) {
      bool held = false;
      for (const auto& r : p.resident)
        held = held
               || (r.device == s.device_id && r.first_layer <= l
                   && l <= r.last_layer);
      if (!held)
        out += static_cast<std::int64_t>(p.layers[l].weight_bytes);
    }
  return out;
}

} // namespace

TEST_CASE("between plans of equal objective the one that keeps weights "
          "where they are wins") {
  // Two identical devices on one node, either can run the whole model:
  // with nothing resident the first is taken, with the model resident on
  // the second, the second.
  problem p;
  p.model_name = "m";
  for (const char* id : {"n0/a", "n0/b"}) {
    device d;
    d.id = id;
    d.node = "n0";
    d.memory_bytes = 8ull << 30;
    d.flops = 1e13;
    p.devices.push_back(d);
  }
  layer y;
  y.weight_bytes = 100 << 20;
  y.flops_per_token = 1e8;
  y.activation_bytes = 8192;
  p.layers = uniform_layers(8, y);
  auto a = solve(p);
  REQUIRE(a.best);
  REQUIRE(a.best->stages.size() == 1);
  CHECK(a.best->stages[0].device_id == "n0/a");
  CHECK(a.best->moved_bytes == 8 * (100 << 20));
  p.resident.push_back({"n0/b", 0, 7});
  for (auto s : {solver_kind::exact, solver_kind::both}) {
    solve_options o;
    o.solver = s;
    auto b = solve(p, o);
    REQUIRE(b.best);
    CHECK(b.best->objective_units == a.best->objective_units);
    REQUIRE(b.best->stages.size() == 1);
    CHECK(b.best->stages[0].device_id == "n0/b");
    CHECK(b.best->moved_bytes == 0);
    CHECK(b.best->proven_optimal);
  }
}

TEST_CASE("between plans of equal objective and equal bytes moved the one "
          "whose weights come over the faster link wins") {
  // The model sits on a drained device of node "old"; two identical
  // devices on nodes "near" (10 GB/s from old) and "far" (100 MB/s) can
  // each run it alone: the same objective, the same bytes to move, but the
  // weights reach "near" a hundred times sooner. Either order of the
  // devices, either solver.
  for (bool near_first : {true, false}) {
    problem p;
    p.model_name = "m";
    auto add = [&](const char* id, const char* node, bool drained) {
      device d;
      d.id = id;
      d.node = node;
      d.memory_bytes = 8ull << 30;
      d.flops = 1e13;
      d.drained = drained;
      p.devices.push_back(d);
    };
    add("old/gpu", "old", true);
    if (near_first)
      add("near/gpu", "near", false);
    add("far/gpu", "far", false);
    if (!near_first)
      add("near/gpu", "near", false);
    p.links.push_back({"old", "near", {1e-4, 1e10}});
    p.links.push_back({"old", "far", {1e-4, 1e8}});
    p.links.push_back({"near", "far", {1e-4, 1e9}});
    layer y;
    y.weight_bytes = 100 << 20;
    y.flops_per_token = 1e8;
    y.activation_bytes = 8192;
    p.layers = uniform_layers(8, y);
    p.resident.push_back({"old/gpu", 0, 7});
    for (auto s : {solver_kind::exact, solver_kind::both}) {
      INFO("near first " << near_first << ", solver "
                         << (s == solver_kind::exact ? "exact" : "both"));
      solve_options o;
      o.solver = s;
      auto r = solve(p, o);
      REQUIRE(r.best);
      REQUIRE(r.best->stages.size() == 1);
      CHECK(r.best->stages[0].device_id == "near/gpu");
      CHECK(r.best->moved_bytes == 8 * (100 << 20));
      // 800 MiB at 10 GB/s plus the latency of 8 layers' transfers.
      CHECK(r.best->moving_seconds
            == Approx(8 * (1e-4 + (100 << 20) / 1e10)).epsilon(1e-3));
      CHECK(r.best->proven_optimal);
    }
  }
}

TEST_CASE("re-placing a 64-device cluster after a loss keeps the surviving "
          "stages' weights where the objective allows") {
  for (auto kind : {objective_kind::latency, objective_kind::throughput}) {
    // The node of the middle stage is lost; the rest hold their layers.
    auto p = rack_after_loss(96, false, kind, 31);
    auto bare = p;
    bare.resident.clear();
    auto blind = solve(bare);
    auto keep = solve(p);
    INFO(to_string(kind));
    REQUIRE(blind.best);
    REQUIRE(keep.best);
    // The same objective, proven; fewer bytes moved than a plan that does
    // not know where the weights are.
    CHECK(keep.best->proven_optimal);
    CHECK(keep.best->objective_units == blind.best->objective_units);
    CHECK(keep.best->moved_bytes == bytes_moved(p, *keep.best));
    CHECK(keep.best->moved_bytes < bytes_moved(p, *blind.best));
    std::int64_t model = 0;
    for (const auto& y : p.layers)
      model += static_cast<std::int64_t>(y.weight_bytes);
    CHECK(keep.best->moved_bytes < model / 2);
  }
}

TEST_CASE("jobs packed on one cluster never share more memory than a "
          "device has") {
  // Eight jobs of a third to two thirds of a 16-node cluster's need, in
  // turn: every plan fits beside the ones before it, and the jobs refused
  // say why.
  random_cluster_options o;
  o.layers = 40;
  o.nodes = 8;
  o.devices_per_node = 2;
  o.node_kinds = 2;
  o.memory_slack = 3;
  std::vector<problem> jobs;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    o.seed = 7; // one cluster
    auto p = random_cluster(o);
    // Jobs of different sizes on it.
    for (auto& y : p.layers)
      y.weight_bytes = y.weight_bytes * (3 + seed % 4) / 6;
    p.model_name = "job" + std::to_string(seed);
    jobs.push_back(p);
  }
  auto packed = pack_jobs(jobs);
  REQUIRE(packed.size() == 8);
  std::map<std::string, std::uint64_t> used;
  int placed = 0, refused = 0;
  for (const auto& pj : packed) {
    if (!pj.refused.empty()) {
      ++refused;
      CHECK_THAT(pj.refused.back(),
                 Catch::Contains("the jobs placed before it"));
      continue;
    }
    ++placed;
    REQUIRE(pj.result.best);
    CHECK(check_plan(pj.placed_on, *pj.result.best).empty());
    for (const auto& s : pj.result.best->stages)
      used[s.device_id] += s.memory_used_bytes;
  }
  CHECK(placed >= 2);
  CHECK(refused >= 1);
  for (const auto& d : jobs[0].devices)
    CHECK(used[d.id] <= d.memory_bytes);
}

TEST_CASE("local moves keep plans valid, never worse, never below the "
          "exact optimum") {
  int improved = 0, checked = 0;
  for_each_solved_small(60, [&](std::uint64_t, objective_kind kind,
                                const problem& p, const cost_model& m,
                                const exact_result& ex) {
    // From the baseline's plan (often far from the optimum) and from the
    // node-block program's.
    auto base = baseline_assignment(m);
    if (!check_plan(p, make_plan(m, base)).empty())
      return;
    ++checked;
    for (const auto& start : {base, solve_node_blocks(m).best}) {
      if (start.empty())
        continue;
      const auto before = m.evaluate(start).objective;
      auto r = improve_by_moves(
        m, start, std::chrono::steady_clock::now() + std::chrono::seconds(5));
      CHECK(r.objective == m.evaluate(r.best).objective);
      CHECK(r.objective <= before);
      CHECK(check_plan(p, make_plan(m, r.best)).empty());
      if (kind != objective_kind::blend)
        CHECK(r.objective >= ex.objective);
      else
        CHECK(r.objective >= ex.lower_bound);
      improved += r.objective < before ? 1 : 0;
      CHECK((r.moves == 0) == (r.best.size() == start.size()
                               && r.objective == before
                               && std::equal(r.best.begin(), r.best.end(),
                                             start.begin(),
                                             [](const auto& x, const auto& y) {
                                               return x.device == y.device
                                                      && x.first == y.first
                                                      && x.end == y.end;
                                             })));
    }
  });
  CHECK(checked > 40);
  CHECK(improved > 10);
}

TEST_CASE("with a network card per node kind, moves the node-block program "
          "cannot make lower the bottleneck") {
  // Throughput, 64 devices: the block program enters each node once; the
  // best such plan has three 76 us cuts between slow-card nodes (seed
  // 1035). Moving whole stages elsewhere in the pipeline lowers it to
  // 70 us; on seed 1009 the moved plan meets the bound. (solve() now
  // tries walks through bridge nodes first, which meet the bound on both.)
  const auto soon = [] {
    return std::chrono::steady_clock::now() + std::chrono::seconds(1);
  };
  auto p = rack(128, true, objective_kind::throughput, 1035, true);
  cost_model m(p);
  auto nb = solve_node_blocks(m);
  REQUIRE(nb.found);
  auto r = improve_by_moves(m, nb.best, soon());
  CHECK(r.moves > 0);
  CHECK(check_plan(p, make_plan(m, r.best)).empty());
  CHECK(r.objective < nb.objective);
  auto q = rack(128, true, objective_kind::throughput, 1009, true);
  cost_model mq(q);
  auto nbq = solve_node_blocks(mq);
  REQUIRE(nbq.found);
  auto rq = improve_by_moves(mq, nbq.best, soon());
  CHECK(rq.moves > 0);
  auto wb = window_lower_bound(mq);
  REQUIRE(wb.has_value());
  CHECK(rq.objective == *wb);
}


TEST_CASE("the previous plan made whole keeps every surviving stage and "
          "fills the lost node's layers") {
  for (std::uint64_t seed : {1005, 1011}) {
    INFO("seed " << seed);
    std::string lost;
    auto p = rack_after_loss(128, true, objective_kind::latency, seed, &lost);
    cost_model m(p);
    auto a = previous_plan(m, p);
    REQUIRE_FALSE(a.empty());
    auto x = make_plan(m, a);
    CHECK(check_plan(p, x).empty());
    // Every resident range starts a stage on its device, which holds at
    // least those layers (the one before a gap may hold more).
    for (const auto& r : p.resident) {
      bool found = false;
      for (const auto& s : x.stages)
        if (s.device_id == r.device && s.first_layer == r.first_layer
            && s.end_layer >= r.last_layer + 1)
          found = true;
      CHECK(found);
    }
    for (const auto& s : x.stages)
      CHECK(s.node != lost);
    // Nothing resident: nothing to start from.
    auto q = p;
    q.resident.clear();
    cost_model mq(q);
    CHECK(previous_plan(mq, q).empty());
  }
}

TEST_CASE("re-placement: the proven objective comes from the cluster "
          "without its resident weights, then the plan that moves least") {
  // Resident weights make devices of one kind differ (12 node classes
  // instead of 4 here), which makes the node-block program 7-40x slower;
  // the objective does not depend on them.
  auto p = rack_after_loss(128, true, objective_kind::latency, 1005);
  auto bare = p;
  bare.resident.clear();
  auto without = solve(bare);
  REQUIRE(without.best);
  REQUIRE(without.best->proven_optimal);
  std::vector<plan> seen;
  solve_options o;
  // The least-moving program gets half of it: ample under sanitizers.
  o.time_limit = std::chrono::milliseconds(20000);
  auto r = solve(p, o, [&](const plan& x) { seen.push_back(x); });
  REQUIRE(r.best);
  CHECK(r.best->proven_optimal);
  CHECK(r.best->objective_units == without.best->objective_units);
  CHECK(check_plan(p, *r.best).empty());
  // The first plan reported already has the proven objective; later ones
  // only move less (the least-moving plan: 0.07 s over the links instead
  // of 26 s for the bare program's plan).
  REQUIRE(seen.size() >= 2);
  CHECK(seen.front().objective_units == r.best->objective_units);
  for (std::size_t i = 1; i < seen.size(); ++i)
    CHECK(seen[i].moving_us < seen[i - 1].moving_us);
  CHECK(r.best->moving_seconds < 0.01 * seen.front().moving_seconds);
  // keep_in_place: the same objective, never more moving.
  cost_model m(p), mb(bare);
  auto nb = solve_node_blocks(mb);
  REQUIRE(nb.found);
  auto kept = keep_in_place(m, mb, nb.best);
  CHECK(m.evaluate(kept).objective == m.evaluate(nb.best).objective);
  CHECK(m.evaluate(kept).moved <= m.evaluate(nb.best).moved);
  CHECK(check_plan(p, make_plan(m, kept)).empty());
}

TEST_CASE("a cluster the layers cannot cover is refused at once, with the "
          "reason, and the window bound's 'no cover' is always right") {
  // 250 single-device nodes, each too small for the heavy last layer: no
  // plan exists. The exact program's table is too large to prove it, so
  // solve() searched to its time limit and said "the time limit ran out";
  // the window bound finds no cover of the layers and says why at once,
  // before any search: with a time limit of 1 ms (no search could prove
  // it in that) the answer is still "infeasible", with the reason. (Not a
  // wall-clock check: the bounds computed first take under a second here
  // and about 25 s under AddressSanitizer.)
  auto p = widest(250, 1);
  solve_options so;
  so.time_limit = std::chrono::milliseconds(1);
  auto r = solve(p, so);
  CHECK(r.status == solve_status::infeasible);
  CHECK_FALSE(r.best);
  REQUIRE_FALSE(r.explanation.empty());
  CHECK(r.explanation[0].find("layer 127 alone needs") != std::string::npos);
  // Small clusters with less memory: wherever the window bound finds no
  // cover, the exact program finds no plan.
  int none = 0;
  for (std::uint64_t seed = 1; seed <= 150; ++seed) {
    auto q = small_cluster(seed, static_cast<objective_kind>(seed % 3));
    for (auto& d : q.devices)
      d.memory_bytes = d.memory_bytes * (1 + seed % 4) / 6;
    INFO("seed " << seed);
    cost_model m(q);
    if (window_lower_bound(m))
      continue;
    ++none;
    auto ex = solve_exact(m);
    CHECK(ex.status == exact_status::infeasible);
    CHECK(solve(q).status == solve_status::infeasible);
  }
  INFO("no cover on " << none);
  CHECK(none > 20);
}

TEST_CASE("throughput on 250 devices the node-block program cannot take: "
          "a walk is the first plan and meets the bound") {
  // 125 nodes of 8 kinds with a card per kind: 9^8 node-visit states are
  // too many. The walk runs without a plan to beat (limits up to the
  // slowest stage a plan could have); its plan is proven by the bound,
  // and the heuristics are not run.
  auto p = widest(125, 2);
  check_proven(p, solve(p), "walk");
}

TEST_CASE("the subset search stops once a plan meets the bound it is given") {
  auto p = rack(80, false, objective_kind::latency, 3);
  cost_model m(p);
  const auto t0 = std::chrono::steady_clock::now();
  auto h = search_subsets(m, 1, std::chrono::minutes(10), nullptr,
                          std::numeric_limits<std::int64_t>::max());
  REQUIRE(h);
  CHECK(h->method == "ordered"); // the first plan found
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::minutes(1));
  CHECK(check_plan(p, make_plan(m, h->plan)).empty());
}
