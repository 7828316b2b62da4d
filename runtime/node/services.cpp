#include "runtime/node/services.hpp"

#include <caf/all.hpp>

namespace exo {

std::vector<service> spawn_services(const service_context& ctx) {
  std::vector<service> out;
  (void) ctx;
  // One call per service, e.g.:
  //   out.push_back(placement::spawn_service(ctx));
  return out;
}

} // namespace exo
