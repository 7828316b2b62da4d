#include "core/placement/plan_command.hpp"

#include "core/cli/program.hpp"
#include "core/placement/pack.hpp"
#include "core/placement/problem_json.hpp"
#include "core/placement/solve.hpp"
#include "core/text/number.hpp"

#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <string>

namespace exo::placement {

namespace {

struct bad_args {
  std::string what;
};

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.9g", v);
  return b;
}

void write_json(std::ostream& out, const solve_result& r) {
  auto num = [](double v) { return text::number(v); };
  text::json scores = text::json::array();
  for (const auto& s : r.scores)
    scores.push_back({{"device", s.device_id},
                      {"total", num(s.total)},
                      {"compute", num(s.compute)},
                      {"memory", num(s.memory)},
                      {"network", num(s.network)},
                      {"thermal", num(s.thermal)},
                      {"bandwidth", num(s.bandwidth)}});
  text::json j = {
    {"status", to_string(r.status)},
    {"plan", r.best ? plan_to_json(*r.best) : text::json(nullptr)},
    {"explanation", r.explanation},
    {"baseline", r.baseline ? plan_to_json(*r.baseline) : text::json(nullptr)},
    {"baseline_violations", r.baseline_violations},
    {"notes", r.notes},
    {"device_scores", scores}};
  out << text::compact(j) << "\n";
}

void write_text(std::ostream& out, const solve_result& r) {
  if (r.best)
    print_plan_table(out, *r.best);
  if (r.baseline && r.best && r.best->solver != "baseline") {
    out << "baseline (memory-proportional): "
        << format_seconds(r.baseline->objective_seconds);
    if (r.best->objective_seconds > 0)
      out << ", " << num(r.baseline->objective_seconds
                         / r.best->objective_seconds)
          << "x ours";
    out << (r.baseline_violations.empty() ? ", fits memory"
                                          : ", breaks a constraint: "
                                              + r.baseline_violations[0])
        << "\n";
  }
  for (const auto& n : r.notes)
    out << "note: " << n << "\n";
  char buf[160];
  out << "device scores (why a device ranks where it does; not the "
         "objective):\n";
  std::snprintf(buf, sizeof(buf), "  %-20s %6s %8s %7s %8s %8s %9s\n",
                "device", "score", "compute", "memory", "network", "thermal",
                "bandwidth");
  out << buf;
  for (const auto& s : r.scores) {
    std::snprintf(buf, sizeof(buf),
                  "  %-20s %6.3f %8.2f %7.2f %8.2f %8.2f %9.2f\n",
                  s.device_id.c_str(), s.total, s.compute, s.memory, s.network,
                  s.thermal, s.bandwidth);
    out << buf;
  }
}

/// `plan --problem A --problem B ...`: the jobs packed in that order.
int run_packing(const std::vector<std::string>& files,
                const solve_options& opts, bool json, std::ostream& out,
                std::ostream& err) {
  std::vector<packed_job> packed;
  try {
    std::vector<problem> jobs;
    for (const auto& f : files)
      jobs.push_back(read_problem_file(f));
    packed = pack_jobs(jobs, opts);
  } catch (const problem_error& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    err << "error: out of memory while packing\n";
    return 2;
  }
  std::size_t placed = 0;
  text::json all = text::json::array();
  for (std::size_t j = 0; j < packed.size(); ++j) {
    const auto& pj = packed[j];
    const bool ok = pj.refused.empty();
    placed += ok ? 1 : 0;
    if (json) {
      all.push_back({{"file", files[j]},
                     {"status", ok ? to_string(pj.result.status) : "refused"},
                     {"plan", ok && pj.result.best
                                ? plan_to_json(*pj.result.best)
                                : text::json(nullptr)},
                     {"refused", pj.refused}});
      continue;
    }
    out << "job " << j + 1 << " (" << files[j] << "): ";
    if (ok) {
      out << "placed\n";
      print_plan_table(out, *pj.result.best);
    } else {
      out << "refused\n";
      for (const auto& why : pj.refused)
        out << "  " << why << "\n";
    }
  }
  if (json)
    out << text::compact(text::json{{"jobs", all}}) << "\n";
  else
    out << "packed: " << placed << " of " << packed.size()
        << " jobs placed\n";
  if (placed == packed.size())
    return 0;
  err << "refused: " << packed.size() - placed << " of " << packed.size()
      << " jobs do not fit\n";
  return 1;
}

} // namespace

int run_plan_command(int argc, char** argv, std::ostream& out,
                     std::ostream& err) {
  std::vector<std::string> files;
  bool json = false;
  solve_options opts;
  std::string objective, blend_weight, time_limit, solver;
  bool in_node = argc > 0 && std::string(argv[0]) == "plan";
  CLI::App app{"Places a model on devices: prints the plan for a JSON "
               "problem file, without any cluster.",
               in_node ? "exo-node plan" : "exo-plan"};
  cli::configure(app);
  app.add_option("--problem", files,
                 "the placement problem (JSON); several: jobs packed on one "
                 "cluster in that order, each on the memory the ones before "
                 "leave")
    ->type_name("FILE.json");
  app.add_option("--objective", objective,
                 "latency, throughput or blend (default: the file's)")
    ->type_name("latency|throughput|blend");
  app.add_option("--blend-weight", blend_weight,
                 "weight of latency in blend, in [0, 1]")
    ->type_name("W");
  app.add_option("--time-limit", time_limit,
                 "solver time limit: milliseconds, or with a unit (2s, 1m)")
    ->type_name("MS|DURATION");
  app.add_flag("--json", json, "print JSON");
  app.add_option("--solver", solver, "which solver runs")
    ->type_name("exact|gecode|both|baseline");
  app.footer("Exit status: 0 with a plan, 1 infeasible or no plan, "
             "2 bad input.");
  // A leading "plan" word (exo-node plan ...) is the command, not an
  // argument.
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i)
    if (i > 1 || std::string(argv[i]) != "plan")
      args.emplace_back(argv[i]);
  if (auto code = cli::parse(app, std::move(args), out, err, "error: "))
    return *code;
  try {
    if (app.count("--objective") > 0) {
      opts.objective = parse_objective_kind(objective);
      if (!opts.objective)
        throw bad_args{"--objective must be latency, throughput or blend, "
                       "not \"" + objective + "\""};
    }
    // Numbers through the one strict parser (core/text/number.hpp): no
    // hex floats, signs or spaces; the time limit may carry a unit.
    if (app.count("--blend-weight") > 0) {
      try {
        opts.blend_weight = text::parse_real(blend_weight, 0, 1);
      } catch (const text::number_error& e) {
        throw bad_args{"--blend-weight must be a number in [0, 1]: "
                       + std::string{e.what()}};
      }
    }
    if (app.count("--time-limit") > 0) {
      try {
        opts.time_limit = text::parse_duration_as<std::chrono::milliseconds>(
          time_limit, std::chrono::milliseconds{86400000});
        if (opts.time_limit.count() == 0)
          throw text::number_error("'" + time_limit + "' must be > 0");
      } catch (const text::number_error& e) {
        throw bad_args{"--time-limit must be milliseconds or a duration "
                       "(500, 2s, 1m) in [1ms, 1d]: "
                       + std::string{e.what()}};
      }
    }
    if (app.count("--solver") > 0) {
      auto k = parse_solver_kind(solver);
      if (!k)
        throw bad_args{"--solver must be exact, gecode, both or baseline, "
                       "not \"" + solver + "\""};
      opts.solver = *k;
    }
    if (files.empty())
      throw bad_args{"--problem FILE.json is required"};
  } catch (const bad_args& e) {
    err << "error: " << e.what << " (see --help)\n";
    return 2;
  }
  if (files.size() > 1)
    return run_packing(files, opts, json, out, err);
  const auto& file = files.front();
  solve_result r;
  try {
    auto p = read_problem_file(file);
    r = solve(p, opts);
  } catch (const problem_error& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    err << "error: out of memory while solving " << file << "\n";
    return 2;
  }
  if (json)
    write_json(out, r);
  else
    write_text(out, r);
  if (r.best && r.status != solve_status::infeasible)
    return 0;
  err << (r.status == solve_status::infeasible ? "infeasible: "
                                                : "no plan: ");
  for (std::size_t i = 0; i < r.explanation.size(); ++i)
    err << (i ? "; " : "") << r.explanation[i];
  err << "\n";
  return 1;
}

} // namespace exo::placement
