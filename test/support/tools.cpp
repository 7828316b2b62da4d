#include "test/support/tools.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace exo::test {

std::string tools_dir() {
  const char* dir = std::getenv("EXO_TEST_TOOLS");
  return dir != nullptr ? dir : "";
}

void skip_test(const std::string& why) {
  std::fprintf(stderr,
               "\n*** SKIPPED: %s\n*** (scripts/test-tools.sh installs the "
               "test-only tools; `make test` runs it first)\n\n",
               why.c_str());
  std::fflush(stderr);
  std::_Exit(skip_exit_code);
}

std::string require_tool(const std::string& package) {
  auto dir = tools_dir();
  if (dir.empty())
    skip_test("EXO_TEST_TOOLS is not set, so " + package
              + " cannot be found");
  auto path = dir + "/node_modules/" + package;
  struct stat st{};
  if (::stat((path + "/package.json").c_str(), &st) != 0)
    skip_test(package + " is not installed in " + dir
              + " (the npm registry may be unreachable)");
  return path;
}

std::string find_node() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (std::size_t i = 0; i <= dirs.size();) {
    auto end = dirs.find(':', i);
    if (end == std::string::npos)
      end = dirs.size();
    auto candidate = dirs.substr(i, end - i) + "/node";
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    i = end + 1;
  }
  return "";
}

std::string require_node() {
  auto node = find_node();
  if (node.empty())
    skip_test("node is not on PATH, so llama.cpp (node-llama-cpp) cannot "
              "be asked");
  return node;
}

} // namespace exo::test
