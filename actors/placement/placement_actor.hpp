#pragma once

/// The placement actor: plans models on the live cluster and keeps the jobs
/// it planned planned as the cluster changes. Detached (solve() blocks).
///
///   gate <-- (console_atom, "nodes", "") -- every poll_interval (and before
///            every "plan") -- placement
///   gate <-- (console_atom, "devices", "") -- before every plan: the
///            devices' free memory now over the view's (refreshed about
///            once a second and gossiped), at most 2 s
///   changes of members or device states (cluster_state) are collected;
///   after `debounce` without a further change every job is re-planned,
///   once, with the collected changes as its reason:
///
///     change --+-- change --+-- change ---- quiet for `debounce` --> re-plan
///              |            |               (older timers are stale: each
///              +- timer(g1) +- timer(g2)     carries its generation)
///
///   The old plan stays the job's plan until the new one is ready; a re-plan
///   that finds no plan keeps the old one and marks the job stale.
///
/// Messages (messages/placement.hpp):
///   (plan_atom, plan_request)      -> plan_job_info (plans now; kept as a
///                                     job unless request.keep is false)
///   (plans_atom)                   -> std::vector<plan_job_info>
///   (unplan_atom, job id)          -> bool: drops a kept job (the console's
///                                     `run` registers its plan, with
///                                     request.run set, and drops it when
///                                     the run ends; ask it with a
///                                     request: an unexpected bool sent
///                                     back is refused with an error, and
///                                     an error message stops this actor)
///   (snapshot_atom, member_view)   -> ok: a cluster snapshot as if polled
///                                     (tests; a push from a future topology
///                                     or jobs actor)
///   (snapshot_atom, member_view, std::vector<thermal_status>)
///                                  -> ok: the same with thermal statuses
///   (console_atom, cmd, arg)       -> console_reply, for the gate:
///     plan MODEL.gguf [ctx=N] [objective=latency|throughput|blend]
///          [blend=W] [time-limit=MS] [keep=no]
///     plan --problem FILE.json [objective=...] [time-limit=MS]
///     plans
///   (inspect_atom)                 -> actor_snapshot (the directory)
///
/// Every node runs one, but the coordinator (the gate's deterministic choice:
/// the alive member with the smallest name) plans for the cluster: on any
/// other node the console's `plan MODEL` reads the model's layers locally
/// and sends (plan_atom, plan_request) through the gates to the
/// coordinator's service, `plans` asks for the coordinator's jobs. Requests
/// that arrive as plan_atom/plans_atom are always answered where they
/// arrive (no forwarding loops), and `plan --problem FILE` is solved locally
/// (it needs no cluster). Jobs live on the coordinator that planned them:
/// when it dies they are gone with it; the next coordinator plans anew when
/// asked (`plan MODEL` again). Each poll also reads the thermal service's
/// statuses (console "thermal" through the gate): paused devices are left
/// out, warm ones slowed, and a thermal transition re-plans like any other
/// change. See docs/architecture.md, "Placement".

#include "actors/placement/cluster_snapshot.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace exo::placement {

struct placement_actor_config {
  /// This node's name (shown as planned_by).
  std::string node_name;
  /// The local gate, polled for "nodes"; none: only snapshots sent with
  /// snapshot_atom are seen.
  caf::actor gate;
  std::chrono::milliseconds poll_interval{500};
  /// Quiet time after the last change before re-planning.
  std::chrono::milliseconds debounce{500};
  conversion_options conversion;
  /// Most jobs kept; planning one more is refused.
  std::size_t max_jobs = 64;
  /// The node's audit sink (optional): every plan and re-plan is sent as a
  /// placement_decided event (audit_atom, audit_entry) naming the job, the
  /// model, the outcome, the stages and why it was planned.
  caf::actor audit;
  /// The folders a client's `plan MODEL` / `plan --problem FILE` may name
  /// (core/text/file.hpp resolve_client_file); none: any path (trusted
  /// callers only: the runtime always sets it from models.dirs).
  std::optional<std::vector<std::string>> client_dirs;
};

/// The gate service name the placement actor is reachable under from other
/// nodes: (service_atom, node, placement_service, message).
constexpr const char* placement_service = "plan";

/// Spawns the placement actor (detached).
caf::actor spawn_placement_actor(caf::actor_system& sys,
                                 placement_actor_config cfg);

/// Spawns a node's placement service: named `node_name`, polling `gate`
/// every `poll_interval`, the other settings at their defaults.
caf::actor spawn_placement_actor(caf::actor_system& sys, std::string node_name,
                                 caf::actor gate,
                                 std::chrono::milliseconds poll_interval);

/// The console commands it answers: "plan", "plans".
std::vector<std::string> placement_commands();

/// Parses the argument of the console's `plan` command into a request, or
/// returns the reason it is wrong. `problem_file` is set for
/// `--problem FILE`.
struct plan_arguments {
  plan_request request;
  std::string problem_file;
  bool json = false;
};
std::string parse_plan_arguments(const std::string& arg, plan_arguments& out);

} // namespace exo::placement
