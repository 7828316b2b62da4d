#include "messages/registration.hpp"

#include "messages/audit.hpp"
#include "messages/cluster.hpp"
#include "messages/device.hpp"
#include "messages/placement.hpp"
#include "messages/errors.hpp"
#include "messages/thermal.hpp"
#include "messages/workload.hpp"

#include <caf/actor_system_config.hpp>

namespace exo {

const char* to_string(device_state s) noexcept {
  switch (s) {
    case device_state::ready: return "ready";
    case device_state::busy: return "busy";
    case device_state::paused: return "paused";
    case device_state::failed: return "failed";
    case device_state::gone: return "gone";
  }
  return "unknown";
}

const char* to_string(member_status s) noexcept {
  switch (s) {
    case member_status::alive: return "alive";
    case member_status::dead: return "dead";
    case member_status::left: return "left";
  }
  return "unknown";
}

const char* to_string(member_change c) noexcept {
  switch (c) {
    case member_change::joined: return "joined";
    case member_change::status: return "status";
    case member_change::removed: return "removed";
  }
  return "unknown";
}

void register_messages(caf::actor_system_config& cfg) {
  cfg.add_message_type<chunk>("exo.chunk");
  cfg.add_message_type<kernel_call>("exo.kernel_call");
  cfg.add_message_type<std::vector<kernel_call>>("exo.kernel_calls");
  cfg.add_message_type<device_info>("exo.device_info");
  cfg.add_message_type<std::vector<device_info>>("exo.device_infos");
  cfg.add_message_type<telemetry_sample>("exo.telemetry_sample");
  cfg.add_message_type<actor_snapshot>("exo.actor_snapshot");
  cfg.add_message_type<std::vector<actor_snapshot>>("exo.actor_snapshots");
  cfg.add_message_type<link_info>("exo.link_info");
  cfg.add_message_type<std::vector<link_info>>("exo.link_infos");
  cfg.add_message_type<member_info>("exo.member_info");
  cfg.add_message_type<member_view>("exo.member_view");
  cfg.add_message_type<member_event>("exo.member_event");
  cfg.add_message_type<join_hello>("exo.join_hello");
  cfg.add_message_type<join_challenge>("exo.join_challenge");
  cfg.add_message_type<join_proof>("exo.join_proof");
  cfg.add_message_type<console_reply>("exo.console_reply");
  // Workload (issue 5): shards, stage steps, model transfer.
  cfg.add_message_type<stage_step>("exo.stage_step");
  cfg.add_message_type<shard_spec>("exo.shard_spec");
  cfg.add_message_type<shard_ready>("exo.shard_ready");
  cfg.add_message_type<workload::job_request>("exo.job_request");
  cfg.add_message_type<job_placed>("exo.job_placed");
  cfg.add_message_type<job_started>("exo.job_started");
  cfg.add_message_type<job_token>("exo.job_token");
  cfg.add_message_type<job_prompt_scores>("exo.job_prompt_scores");
  cfg.add_message_type<job_report>("exo.job_report");
  cfg.add_message_type<job_pipeline>("exo.job_pipeline");
  cfg.add_message_type<kv_rows>("exo.kv_rows");
  cfg.add_message_type<prefix_claim>("exo.prefix_claim");
  cfg.add_message_type<prefix_retain>("exo.prefix_retain");
  cfg.add_message_type<job_recovered>("exo.job_recovered");
  cfg.add_message_type<std::vector<job_recovered>>("exo.job_recovereds");
  cfg.add_message_type<job_replica>("exo.job_replica");
  cfg.add_message_type<job_progress>("exo.job_progress");
  cfg.add_message_type<job_handoff>("exo.job_handoff");
  // placement (messages/placement.hpp)
  cfg.add_message_type<plan_request>("exo.plan_request");
  cfg.add_message_type<plan_stage_info>("exo.plan_stage_info");
  cfg.add_message_type<plan_info>("exo.plan_info");
  cfg.add_message_type<plan_job_info>("exo.plan_job_info");
  cfg.add_message_type<std::vector<plan_job_info>>("exo.plan_job_infos");
  // Safety (issue 6): audit sink, thermal monitors.
  cfg.add_message_type<audit_entry>("exo.audit_entry");
  cfg.add_message_type<std::vector<audit_entry>>("exo.audit_entries");
  cfg.add_message_type<audit_checkpoint>("exo.audit_checkpoint");
  cfg.add_message_type<thermal_status>("exo.thermal_status");
  cfg.add_message_type<std::vector<thermal_status>>("exo.thermal_statuses");
  add_error_category(cfg);
}

} // namespace exo
