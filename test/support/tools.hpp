#pragma once

/// Test support: the test-only npm tools (scripts/test-tools.sh installs
/// them into $EXO_TEST_TOOLS, outside the tree). A test that needs one calls
/// require_tool(); when the tool is missing it prints why, loudly, and ends
/// the test process with exit code 77, which CTest reports as skipped
/// ("Not Run"), never as passed.

#include <string>

namespace exo::test {

/// The exit code CTest counts as "skipped" for every exo test.
constexpr int skip_exit_code = 77;

/// The folder of the tools ($EXO_TEST_TOOLS), or "" when unset.
std::string tools_dir();

/// The folder node_modules/<package> of an installed tool; when it is not
/// installed, prints a SKIPPED banner naming it and exits with 77.
std::string require_tool(const std::string& package);

/// The path of Node.js (`node` on PATH), "" when there is none.
std::string find_node();

/// The path of Node.js (`node` on PATH); when there is none, prints a
/// SKIPPED banner (llama.cpp, node-llama-cpp, cannot be asked) and exits
/// with 77.
std::string require_node();

/// Prints a SKIPPED banner with `why` and exits with 77.
[[noreturn]] void skip_test(const std::string& why);

} // namespace exo::test
