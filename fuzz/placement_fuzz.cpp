// Placement problems as JSON (`exo-plan`, the console's `plan --problem`):
// a checked problem or a problem_error naming the key.
#include "core/placement/problem_json.hpp"
#include "fuzz/fuzz_target.hpp"

#include <stdexcept>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  try {
    auto p = exo::placement::parse_problem_json(
      std::string_view{reinterpret_cast<const char*>(data), size});
    (void) p;
  } catch (const exo::placement::problem_error&) {
  }
  return 0;
}
