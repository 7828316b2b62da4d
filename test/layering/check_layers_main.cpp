// check-layers SOURCE_DIR: exit 0 when exo's includes point down the layers
// (backends -> core -> messages -> actors -> runtime) without folder
// cycles, else 1 with one line per broken rule (test/layering/
// layer_check.hpp says what the rules are).

#include "test/layering/layer_check.hpp"

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2 || std::string{argv[1]} == "--help") {
    std::cerr << "usage: check-layers SOURCE_DIR\n"
                 "Checks that includes point down the layers backends -> "
                 "core -> messages -> actors -> runtime, that backends/ and "
                 "core/ include no CAF, and that folders include each other "
                 "without cycles.\n";
    return argc == 2 ? 0 : 2;
  }
  auto found = exo::layering::check_tree(argv[1]);
  for (auto& v : found)
    std::cout << v.file << ":" << v.line << ": " << v.what << "\n";
  if (found.empty())
    std::cout << "layers: every include points down, no folder cycles\n";
  return found.empty() ? 0 : 1;
}
