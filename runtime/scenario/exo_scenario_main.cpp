// exo-scenario: bring up a declarative test cluster and check it.
//
//   exo-scenario run FILE.json [--keep] [--verbose] [--bin-dir DIR]
//   exo-scenario check FILE.json
//
// Exit status: 0 when every step passed (or, for check, the file is valid),
// 1 when a step failed, 2 for a bad scenario file or bad arguments,
// 130 when interrupted. scenarios/README.md documents the file format.

#include "runtime/scenario/process.hpp"
#include "runtime/scenario/runner.hpp"
#include "runtime/scenario/scenario.hpp"

#include <exception>
#include <iostream>
#include <string>

namespace {

constexpr const char* usage = R"(usage: exo-scenario run FILE.json [--keep] [--verbose] [--bin-dir DIR]
       exo-scenario check FILE.json

run    starts the scenario's exo-node processes on 127.0.0.1 with a throwaway
       PKI, runs its steps (PASS/FAIL with timing), stops every process and
       removes its temp dir (--keep leaves it: configs, logs, certificates).
check  only validates the file.
--bin-dir DIR  where exo-node, exo-console and exo-model are (default:
       $EXO_BIN_DIR, next to exo-scenario, its build-tree siblings, $PATH).

Exit status: 0 all steps passed, 1 a step failed, 2 bad file or arguments.
)";

int bad_usage(const std::string& msg) {
  std::cerr << "exo-scenario: " << msg << " (see --help)\n";
  return 2;
}

int real_main(int argc, char** argv) {
  if (argc >= 2 && (std::string{argv[1]} == "--help"
                    || std::string{argv[1]} == "-h")) {
    std::cout << usage;
    return 0;
  }
  if (argc < 2)
    return bad_usage("which command? run or check");
  std::string cmd = argv[1];
  if (cmd != "run" && cmd != "check")
    return bad_usage("unknown command \"" + cmd + "\"");
  exo::scenario::runner_options opts;
  std::string file;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--keep" && cmd == "run")
      opts.keep = true;
    else if (a == "--verbose" && cmd == "run")
      opts.verbose = true;
    else if (a == "--bin-dir" && cmd == "run") {
      if (i + 1 >= argc)
        return bad_usage("--bin-dir needs a directory");
      opts.bin_dir = argv[++i];
    } else if (a == "--help" || a == "-h") {
      std::cout << usage;
      return 0;
    } else if (!a.empty() && a[0] == '-')
      return bad_usage("unknown option \"" + a + "\"");
    else if (file.empty())
      file = a;
    else
      return bad_usage("one scenario file at a time");
  }
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
