// The node config parser: any bytes are either a config or a config_error
// naming the problem.
#include "core/config/node_config.hpp"
#include "fuzz/fuzz_target.hpp"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  std::string text{reinterpret_cast<const char*>(data), size};
  try {
    auto cfg = exo::config::parse(text, "fuzz");
    (void) exo::config::gateway_exposure_problem(cfg.gateway);
  } catch (const exo::config::config_error&) {
  }
  return 0;
}
