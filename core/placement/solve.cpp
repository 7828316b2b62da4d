#include "core/placement/solve.hpp"

#include "core/placement/baseline.hpp"
#include "core/placement/cost_model.hpp"
#include "core/placement/exact_solver.hpp"
#include "core/placement/explain.hpp"
#include "core/placement/gecode_solver.hpp"
#include "core/placement/lower_bound.hpp"
#include "core/placement/node_blocks.hpp"
#include "core/placement/plan_moves.hpp"
#include "core/placement/subset_search.hpp"
#include "core/placement/walk_plans.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace exo::placement {

const char* to_string(solver_kind k) {
  switch (k) {
    case solver_kind::exact:
      return "exact";
    case solver_kind::gecode:
      return "gecode";
    case solver_kind::both:
      return "both";
    case solver_kind::baseline:
      return "baseline";
  }
  return "?";
}

std::optional<solver_kind> parse_solver_kind(const std::string& s) {
  for (auto k : {solver_kind::exact, solver_kind::gecode, solver_kind::both,
                 solver_kind::baseline})
    if (s == to_string(k))
      return k;
  return std::nullopt;
}

const char* to_string(solve_status s) {
  switch (s) {
    case solve_status::optimal:
      return "optimal";
    case solve_status::feasible:
      return "feasible";
    case solve_status::infeasible:
      return "infeasible";
    case solve_status::no_plan:
      return "no_plan";
  }
  return "?";
}

namespace {

/// Above this many devices the default solver does not run Gecode.
constexpr std::size_t max_gecode_devices = 32;

/// A simple valid lower bound: each layer on its fastest device.
std::int64_t static_lower_bound(const cost_model& m) {
  const int L = static_cast<int>(m.layers());
  std::int64_t lat = 0;
  for (int l = 0; l < L; ++l) {
    std::int64_t best = -1;
    for (int d = 0; d < static_cast<int>(m.devices()); ++d) {
      auto t = m.stage_time(d, l, l + 1);
      best = best < 0 ? t : std::min(best, t);
    }
    lat += std::max<std::int64_t>(best, 0);
  }
  auto ms = static_cast<std::int64_t>(std::max<std::size_t>(m.max_stages(), 1));
  return m.combine(lat, (lat + ms - 1) / ms, 0);
}

} // namespace

solve_result solve(const problem& original, const solve_options& opts,
                   const plan_callback& on_improved,
                   const std::atomic<bool>* cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now()
                                         - t0)
      .count();
  };
  problem p = original;
  if (opts.objective)
    p.objective.kind = *opts.objective;
  if (opts.blend_weight)
    p.objective.blend_weight = *opts.blend_weight;
  validate(p);
  solve_result res;
  res.scores = score_devices(p);
  const cost_model m(p);
  if (m.devices() == 0) {
    res.status = solve_status::infeasible;
    res.explanation = explain_infeasible(p);
    res.solve_seconds = elapsed();
    return res;
  }
  {
    auto b = make_plan(m, baseline_assignment(m));
    b.solver = "baseline";
    res.baseline_violations = check_plan(p, b);
    res.baseline = std::move(b);
  }
  std::int64_t lower = static_lower_bound(m);
  if (auto r = relaxed_lower_bound(m))
    lower = std::max(lower, *r);
  if (auto c = capacity_lower_bound(m))
    lower = std::max(lower, c->objective);
  const auto window = window_lower_bound(m);
  if (window)
    lower = std::max(lower, *window);
  std::optional<std::int64_t> best_units;
  std::int64_t best_moved = 0;
  assignment best_assignment;
  bool proven = false;
  bool infeasible = false;
  // Accepts a plan from a solver: checked, strictly better, reported.
  auto accept = [&](const assignment& a, const char* solver) {
    auto x = make_plan(m, a);
    x.solver = solver;
    auto bad = check_plan(p, x);
    if (!bad.empty()) {
      res.notes.push_back(std::string("internal error: the ") + solver
                          + " solver produced an invalid plan: " + bad[0]);
      return;
    }
    // Strictly better: a lower objective, or as low with the weights
    // there sooner.
    if (best_units && !better(x.objective_units, x.moving_us, *best_units,
                              best_moved))
      return;
    best_units = x.objective_units;
    best_moved = x.moving_us;
    best_assignment = a;
    x.lower_bound_seconds = m.to_seconds(lower);
    x.solve_seconds = elapsed();
    res.best = x;
    if (on_improved)
      on_improved(x);
  };

  if (opts.solver == solver_kind::baseline) {
    res.best = res.baseline;
    res.best->solve_seconds = elapsed();
    res.best->lower_bound_seconds = m.to_seconds(lower);
    if (res.baseline_violations.empty()) {
      res.status = solve_status::feasible;
    } else {
      res.status = solve_status::infeasible;
      res.explanation = res.baseline_violations;
    }
    res.solve_seconds = elapsed();
    res.lower_bound_seconds = m.to_seconds(lower);
    return res;
  }

  // No cover of the layers by device windows: no plan exists (a layer no
  // device can hold, memory that does not pack). Said at once, instead of
  // searching to the time limit where the exact program cannot prove it.
  if (!window && m.layers() > 0) {
    res.status = solve_status::infeasible;
    res.explanation = explain_infeasible(p);
    res.lower_bound_seconds = m.to_seconds(lower);
    res.solve_seconds = elapsed();
    return res;
  }

  // Gecode's model of a large cluster takes longer to post than a time
  // limit allows (128 devices x 128 layers: about a second before the
  // search starts) and finds no plan there; with more devices than this the
  // default solver leaves it out and gives its time to the heuristics.
  const bool gecode_helps = m.devices() <= max_gecode_devices;
  if (opts.solver == solver_kind::exact || opts.solver == solver_kind::both) {
    auto r = solve_exact(m, cancel, opts.exact_max_entries,
                         t0 + opts.time_limit);
    switch (r.status) {
      case exact_status::solved:
        lower = std::max(lower, r.lower_bound);
        accept(r.best, "exact");
        proven = r.proven_optimal();
        break;
      case exact_status::infeasible:
        infeasible = true;
        proven = true;
        break;
      case exact_status::too_large: {
        res.notes.push_back(
          "exact solver skipped: " + std::to_string(r.states)
          + " states of device classes are too many for its table");
        // Nodes of one hardware behind one switch are interchangeable: the
        // program over node visits is exact among plans that enter each
        // node once, and its plan is often proven by the window bound.
        if (opts.solver == solver_kind::both) {
          // Re-placement: weights in place (`resident`) make devices of
          // one kind differ, and the program's table grows with them (a
          // 64-device cluster less a node: 500 node-visit states become
          // 10240, 7-40x the time). The objective does not depend on them:
          // the program runs on the cluster without them, and the moving
          // time is then lowered by moves that keep the objective, from
          // its plan and from the previous plan made whole.
          problem bare;
          std::optional<cost_model> without;
          if (m.has_resident()) {
            bare = p;
            bare.resident.clear();
            without.emplace(bare);
          }
          const cost_model& m_bare = without ? *without : m;
          auto nb =
            solve_node_blocks(m_bare, cancel, opts.exact_max_entries, lower);
          if (nb.found) {
            accept(nb.best, "node-blocks");
            // Latency: where a plan that enters a node twice can be
            // rearranged into one that does not, no slower, the best block
            // plan is at most every plan but those that come back to their
            // first node, which the window bound's part for them bounds.
            if (lower < nb.objective && block_plans_suffice(m_bare)) {
              const auto back = returning_lower_bound(m_bare);
              const auto proof =
                back ? std::min(nb.objective, *back) : nb.objective;
              if (proof > lower) {
                lower = proof;
                res.notes.push_back(
                  "node-block plans suffice: a plan that enters a node "
                  "twice becomes one that does not, no slower (identical "
                  "middle layers, cuts obeying the triangle inequality)");
              }
            }
          } else if (!nb.skipped.empty())
            res.notes.push_back("node-block program skipped: " + nb.skipped);
          // Throughput, unproven: plans that pass a node more than once
          // (a node with a fast card as a bridge between slow ones), which
          // the node-block program cannot make, in at most a tenth of the
          // time.
          bool walked = false;
          if (m.kind() == objective_kind::throughput
              && (!best_units || lower < *best_units) && !res.cancelled) {
            const auto none = std::numeric_limits<std::int64_t>::max();
            const auto until =
              std::chrono::steady_clock::now() + opts.time_limit / 10;
            if (auto w = least_walk_plan(m, lower,
                                         best_units.value_or(none), until,
                                         cancel)) {
              accept(*w, "walk");
              walked = true;
            }
          }
          if (m.has_resident() && !res.cancelled) {
            const auto until =
              std::chrono::steady_clock::now() + opts.time_limit / 10;
            const std::pair<assignment, const char*> starts[] = {
              {keep_in_place(m, m_bare, best_assignment),
               walked ? "walk" : "node-blocks"},
              {previous_plan(m, p), "previous plan"}};
            for (const auto& [start, label] : starts) {
              if (start.empty())
                continue;
              auto r =
                improve_by_moves(m, start, until, cancel, move_goal::moving);
              accept(r.best, r.moves > 0 ? "moves" : label);
            }
            // Then, in at most half the time limit, the program with the
            // weights in place: the plan of that objective that moves
            // least (among those that enter each node once, so not when
            // only a walk reaches that objective), when it finishes in
            // time.
            if (best_units && lower >= *best_units && !walked) {
              auto exact_moving = solve_node_blocks(
                m, cancel, opts.exact_max_entries, *best_units,
                std::chrono::steady_clock::now() + opts.time_limit / 2);
              if (exact_moving.found)
                accept(exact_moving.best, "node-blocks");
            }
          }
        }
        // Unless that plan is proven: good plans (devices in orders, the
        // exact program on subsets of the devices), in at most 40% of the
        // time; Gecode then searches below the best of them.
        if (opts.solver == solver_kind::both
            && !(best_units && lower >= *best_units)) {
          auto share = gecode_helps ? 2 : 9; // tenths of the time limit
          auto budget = std::chrono::milliseconds(opts.time_limit.count()
                                                  * share / 10);
          if (auto h = search_subsets(m, opts.exact_max_entries, budget,
                                      cancel, lower))
            accept(h->plan, h->method.c_str());
        }
        break;
      }
      case exact_status::cancelled:
        res.cancelled = true;
        break;
    }
  }
  // A plan not proven: local moves the programs cannot make (a node
  // entered twice, a bridge between two slow links), in at most a tenth
  // of the time limit.
  if (opts.solver == solver_kind::both && best_units && !proven
      && lower < *best_units && !res.cancelled) {
    auto r = improve_by_moves(m, best_assignment,
                              std::chrono::steady_clock::now()
                                + opts.time_limit / 10,
                              cancel);
    if (r.moves > 0)
      accept(r.best, "moves");
  }
  const bool bound_met = best_units && lower >= *best_units;
  const bool run_gecode = (opts.solver == solver_kind::gecode && !bound_met)
                          || (opts.solver == solver_kind::both && !proven
                              && !bound_met && !res.cancelled
                              && gecode_helps);
  if (opts.solver == solver_kind::both && !gecode_helps && !proven
      && !bound_met)
    res.notes.push_back("gecode skipped: " + std::to_string(m.devices())
                        + " devices (more than "
                        + std::to_string(max_gecode_devices)
                        + "); the plan comes from the heuristics");
  if (run_gecode) {
    gecode_options g;
    // What is left of the time limit (at least a tenth of it).
    auto spent = std::chrono::milliseconds(
      static_cast<std::int64_t>(elapsed() * 1000));
    g.time_limit = std::max(opts.time_limit - spent, opts.time_limit / 10);
    g.cancel = cancel;
    g.upper_bound = best_units;
    auto r = solve_gecode(
      m, g, [&](const assignment& a, std::int64_t) { accept(a, "gecode"); });
    res.cancelled = res.cancelled || r.cancelled;
    if (r.complete) {
      proven = true;
      infeasible = !best_units.has_value();
    }
  }
  // A plan that meets a valid lower bound is optimal, whichever search
  // found it and however that search ended (stopped, cancelled).
  if (!infeasible && best_units && lower >= *best_units)
    proven = true;
  if (infeasible) {
    res.status = solve_status::infeasible;
    res.explanation = explain_infeasible(p);
  } else if (res.best) {
    if (proven)
      lower = best_units.value_or(lower);
    res.best->lower_bound_seconds = m.to_seconds(lower);
    res.best->proven_optimal = proven;
    res.status = proven ? solve_status::optimal : solve_status::feasible;
  } else {
    res.status = solve_status::no_plan;
    res.explanation.push_back(
      res.cancelled ? "the search was cancelled before any plan was found"
                    : "the time limit ran out before any plan was found");
  }
  res.lower_bound_seconds = m.to_seconds(lower);
  res.solve_seconds = elapsed();
  if (res.best)
    res.best->solve_seconds = res.solve_seconds;
  return res;
}

} // namespace exo::placement
