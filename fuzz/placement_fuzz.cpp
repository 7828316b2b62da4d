// Placement problems as JSON (`exo-plan`, the console's `plan --problem`):
// a checked problem or a problem_error naming the key. A small valid problem
// also goes through the cost model, the window bound and the node-block
// program (the code that reads resident layers, kinds and node classes).
#include "core/placement/cost_model.hpp"
#include "core/placement/lower_bound.hpp"
#include "core/placement/node_blocks.hpp"
#include "core/placement/problem_json.hpp"
#include "fuzz/fuzz_target.hpp"

#include <stdexcept>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  try {
    auto p = exo::placement::parse_problem_json(
      std::string_view{reinterpret_cast<const char*>(data), size});
    if (p.devices.size() <= 6 && p.layers.size() <= 24
        && p.links.size() <= 16) {
      exo::placement::cost_model m(p);
      (void) exo::placement::window_lower_bound(m);
      (void) exo::placement::solve_node_blocks(m, nullptr, 200000);
    }
  } catch (const exo::placement::problem_error&) {
  }
  return 0;
}
