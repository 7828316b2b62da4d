// exo-scenario: bring up a declarative test cluster and check it.
//
//   exo-scenario run FILE.json [--keep] [--verbose] [--bin-dir DIR]
//                    [--report OUT.json] [--step-within-pct N]
//   exo-scenario check FILE.json
//   exo-scenario clean-network [--tag TAG]
//
// Exit status: 0 when every step passed (or, for check, the file is valid),
// 1 when a step failed, 2 for a bad scenario file or bad arguments, 77 when
// the scenario needs network namespaces this machine cannot make, 130 when
// interrupted. scenarios/README.md documents the file format.

#include "core/cli/program.hpp"
#include "runtime/scenario/netns.hpp"
#include "runtime/scenario/process.hpp"
#include "runtime/scenario/runner.hpp"
#include "runtime/scenario/scenario.hpp"

#include <exception>
#include <iostream>
#include <regex>
#include <string>

namespace {

constexpr const char* footer = R"(run    starts the scenario's exo-node processes with a throwaway PKI, on
       127.0.0.1 or (with "network": {"namespaces": true}, as root) each in
       its own network namespace on a bridge, links shaped as the file says;
       runs its steps (PASS/FAIL with timing), stops every process, removes
       the network and its temp dir (--keep leaves the dir: configs, logs,
       certificates).
check  only validates the file.
clean-network [--tag TAG]  removes the namespaces and links of runs that
       were killed before they could clean up: that run's (TAG, from its
       "network exoXXXX" line), or every run's (do not use it so while
       another scenario runs).
--bin-dir DIR  where exo-node, exo-console and exo-model are (default:
       $EXO_BIN_DIR, next to exo-scenario, its build-tree siblings, $PATH).

Exit status: 0 all steps passed, 1 a step failed, 2 bad file or arguments,
77 the scenario needs network namespaces that cannot be made here.
)";

int bad_usage(const std::string& msg) {
  std::cerr << "exo-scenario: " << msg << " (see --help)\n";
  return 2;
}

int real_main(int argc, char** argv) {
  CLI::App app{"Brings up a declarative test cluster and checks it.",
               "exo-scenario"};
  exo::cli::configure(app);
  app.require_subcommand(1);
  app.footer(footer);
  exo::scenario::runner_options opts;
  std::string file;
  auto* run = app.add_subcommand("run", "run a scenario's steps on a local "
                                        "cluster");
  run->add_option("file", file, "the scenario")->type_name("FILE.json");
  run->add_flag("--keep", opts.keep, "keep the temp dir");
  run->add_flag("--verbose", opts.verbose, "print every process's output");
  run->add_option("--bin-dir", opts.bin_dir,
                  "where exo-node, exo-console and exo-model are")
    ->type_name("DIR");
  run->add_option("--report", opts.report,
                  "write a JSON report: result, nodes, network and the "
                  "timeline of the steps")
    ->type_name("FILE.json");
  run->add_option("--step-within-pct", opts.step_within_pct,
                  "the bound of every run step's expect_step_within_pct "
                  "(predicted against measured step time) instead of the "
                  "file's: a machine shared with other work (CI) passes a "
                  "looser one")
    ->check(CLI::Range(1.0, 1000.0))
    ->type_name("N");
  auto* check = app.add_subcommand("check", "only validate the file");
  check->add_option("file", file, "the scenario")->type_name("FILE.json");
  auto* clean = app.add_subcommand(
    "clean-network", "remove network namespaces and links left by killed runs");
  std::string tag;
  clean->add_option("--tag", tag, "only this run's (exo + 4 hex digits, as "
                                  "its \"network exoXXXX\" line says)")
    ->type_name("TAG");
  if (auto code = exo::cli::parse(app, argc, argv, std::cout, std::cerr,
                                  "exo-scenario: "))
    return *code;
  if (clean->parsed()) {
    // Only what a run names: exoXXXXbr, exoXXXXhN, exoXXXX-NODE.
    static const std::regex tag_re{"exo[0-9a-f]{4}"};
    if (!tag.empty() && !std::regex_match(tag, tag_re))
      return bad_usage("--tag " + tag + " is not exo + 4 hex digits");
    const std::regex ours{" " + (tag.empty() ? "exo[0-9a-f]{4}" : tag)
                          + "(br$|h[0-9]+$|-)"};
    std::vector<std::string> found;
    for (auto& what : exo::scenario::netns_leftovers("exo"))
      if (std::regex_search(what, ours))
        found.push_back(what);
    exo::scenario::netns_remove(found);
    for (auto& what : found)
      std::cout << "removed " << what << "\n";
    std::cout << found.size() << " left-over network object(s) removed\n";
    return 0;
  }
  std::string cmd = run->parsed() ? "run" : "check";
  if (file.empty())
    return bad_usage(cmd + " needs a scenario FILE.json");
  exo::scenario::scenario sc;
  try {
    sc = exo::scenario::load(file);
  } catch (const exo::scenario::scenario_error& e) {
    std::cerr << "exo-scenario: invalid scenario: " << e.what() << "\n";
    return 2;
  }
  if (cmd == "check") {
    std::cout << file << ": scenario " << sc.name << ", " << sc.nodes.size()
              << " node(s), " << sc.steps.size() << " step(s): ok\n";
    return 0;
  }
  exo::scenario::install_interrupt_handlers();
  return exo::scenario::run(sc, opts, std::cout);
}

} // namespace

int main(int argc, char** argv) {
  try {
    return real_main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "exo-scenario: error: " << e.what() << "\n";
    return 1;
  }
}
