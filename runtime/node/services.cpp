#include "runtime/node/services.hpp"

#include "actors/jobs/shards_service.hpp"
#include "actors/placement/placement_actor.hpp"
#include "runtime/node/safety.hpp"

#include <caf/all.hpp>

namespace exo {

std::vector<service> spawn_services(const service_context& ctx) {
  std::vector<service> out;
  (void) ctx;
  // One call per service, e.g.:
  //   out.push_back(placement::spawn_service(ctx));
  // placement: plans models on the live cluster, re-plans its jobs.
  placement::placement_actor_config pc;
  pc.node_name = ctx.cfg->node.name;
  pc.gate = ctx.gate;
  pc.poll_interval = ctx.cfg->network.heartbeat * 2;
  pc.audit = ctx.audit; // placement decisions are audited (issue 6)
  out.push_back({"placement", "placement",
                 placement::spawn_placement_actor(*ctx.sys, std::move(pc)),
                 placement::placement_commands()});
  // safety (issue 6, runtime/node/safety.hpp): audit, thermal, tokens.
  out.push_back(spawn_audit_service(ctx));
  out.push_back(spawn_thermal_service(ctx));
  out.push_back(spawn_access_service(ctx));
  out.push_back(spawn_device_service(ctx));
  // shards (issue 5): shards for peers, model transfer, console `run`.
  out.push_back(jobs::spawn_shards_service(ctx));
  return out;
}

} // namespace exo
