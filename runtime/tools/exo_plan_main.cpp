// exo-plan: prints a placement plan for a JSON problem file, without any
// cluster. The same command is `exo-node plan ...`.
//
//   exo-plan --problem config/placement/three_nodes.json [--json]
#include <iostream>

#include "core/placement/plan_command.hpp"

int main(int argc, char** argv) {
  return exo::placement::run_plan_command(argc, argv, std::cout, std::cerr);
}
