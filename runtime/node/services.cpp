#include "runtime/node/services.hpp"

#include "runtime/node/safety.hpp"

#include <caf/all.hpp>

namespace exo {

std::vector<service> spawn_services(const service_context& ctx) {
  std::vector<service> out;
  (void) ctx;
  // One call per service, e.g.:
  //   out.push_back(placement::spawn_service(ctx));
  // safety (issue 6, runtime/node/safety.hpp): audit, thermal, tokens.
  out.push_back(spawn_audit_service(ctx));
  out.push_back(spawn_thermal_service(ctx));
  out.push_back(spawn_access_service(ctx));
  return out;
}

} // namespace exo
