#include "runtime/node/services.hpp"

#include "actors/workload/job_coordinator.hpp"
#include "actors/workload/shard_host.hpp"
#include "actors/placement/placement_actor.hpp"
#include "actors/access/access_actor.hpp"
#include "actors/audit/audit_service.hpp"
#include "actors/device/device_service.hpp"
#include "actors/thermal/thermal_actor.hpp"

#include <caf/all.hpp>

namespace exo {

namespace {

/// Console "thermal": one monitor per device of the node.
service spawn_thermal_service(const service_context& ctx) {
  auto& sf = ctx.cfg->safety;
  thermal::thermal_service_config tc;
  tc.node = ctx.cfg->node.name;
  tc.node_actor = ctx.node;
  tc.gate = ctx.gate;
  tc.audit = ctx.audit;
  tc.interval = ctx.cfg->devices.telemetry_interval;
  tc.policy.limit_c = sf.thermal_limit_c;
  tc.policy.margin_c = sf.thermal_margin_c;
  tc.policy.hysteresis_c = sf.thermal_hysteresis_c;
  tc.policy.interval_s = tc.interval.count() / 1000.0;
  tc.policy.horizon_s = std::max(sf.thermal_horizon_s, tc.policy.interval_s);
  tc.policy.min_dwell_s = sf.thermal_min_dwell_s;
  tc.policy.validate();
  auto h = thermal::spawn_thermal_service(*ctx.sys, std::move(tc));
  return {"thermal", "thermal", h, {"thermal"}};
}

/// Console "token": issue, revoke (broadcast to peers), check.
service spawn_access_service(const service_context& ctx) {
  access::access_actor_config ac;
  ac.node = ctx.cfg->node.name;
  ac.policy = ctx.access;
  ac.key = ctx.access_key;
  ac.audit = ctx.audit;
  ac.gate = ctx.gate;
  ac.max_ttl_s = access::max_token_ttl_s;
  ac.revocations_file = ctx.cfg->node.state_dir + "/access/revocations";
  auto h = access::spawn_access_actor(*ctx.sys, std::move(ac));
  return {"access", "access", h, {"token"}};
}

} // namespace

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
  pc.client_dirs = config::client_dirs(*ctx.cfg);
  out.push_back({"placement", "placement",
                 placement::spawn_placement_actor(*ctx.sys, std::move(pc)),
                 placement::placement_commands()});
  // safety (issue 6): audit, thermal, tokens, clients' device operations.
  out.push_back(spawn_audit_service(ctx));
  out.push_back(spawn_thermal_service(ctx));
  out.push_back(spawn_access_service(ctx));
  out.push_back(spawn_device_service(ctx));
  // shards (issue 5): shards for job coordinators, model transfer.
  out.push_back(workload::spawn_shard_host(ctx));
  // jobs: the job coordinator (console `run`, `jobs`, `cancel`).
  out.push_back(workload::spawn_jobs_service(ctx));
  return out;
}

} // namespace exo
