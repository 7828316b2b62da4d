#pragma once

/// The wire contract of the placement actor (actors/placement/
/// placement_actor.hpp): plan requests, plans and the jobs it re-plans.
///
///   console/jobs -- (plan_atom, plan_request) --> placement -> plan_job_info
///   console      -- (plans_atom) --> placement -> std::vector<plan_job_info>
///   tests/push   -- (snapshot_atom, member_view) --> placement -> ok
///   tests/push   -- (snapshot_atom, member_view,
///                    std::vector<thermal_status>) --> placement -> ok
///
/// Across nodes these go through the gates as (service_atom, coordinator,
/// "plan", message): every node forwards its console's `plan`/`plans` and
/// the workload's `run` asks the coordinator's placement service.
///
/// Plans are plain numbers here; the solver's own types stay in the CAF-free
/// core (core/placement/plan.hpp).

#include "messages/cluster.hpp"
#include "messages/wire_real.hpp"

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace exo {

using plan_atom = caf::atom_constant<caf::atom("plan")>;
using plans_atom = caf::atom_constant<caf::atom("plans")>;
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;
using replan_atom = caf::atom_constant<caf::atom("replan")>;
/// (unplan_atom, job id) -> bool: drops a kept job (a run that ended);
/// false when there was no such job.
using unplan_atom = caf::atom_constant<caf::atom("unplan")>;

/// One model layer as placement sees it (core/placement/problem.hpp,
/// `layer`): what a node that has the model file sends to the coordinator,
/// which may lack it.
struct plan_layer_info {
  std::uint64_t weight_bytes = 0;
  std::uint64_t kv_bytes_per_token = 0;
  double flops_per_token = 0;
  std::uint64_t activation_bytes = 0;
  std::uint32_t operations = 0; ///< device operations per token
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, plan_layer_info& x) {
  return wire(f, caf::meta::type_name("exo.plan_layer_info"), x.weight_bytes,
              x.kv_bytes_per_token, x.flops_per_token, x.activation_bytes,
              x.operations);
}

/// The most layers a plan request may carry.
constexpr std::size_t max_plan_layers = 4096;

/// The most devices a plan request may name in kv_claims.
constexpr std::size_t max_plan_claims = 4096;

/// What to plan: a model file, the context to serve and the objective.
struct plan_request {
  std::string model_path;             ///< a GGUF file on the planning node
  std::uint32_t context_length = 0;   ///< 0: the model's training context
  std::string objective = "latency";  ///< latency | throughput | blend
  double blend_weight = 0.5;          ///< weight of latency in a blend
  std::uint32_t time_limit_ms = 2000; ///< Gecode's limit (exact: unbounded)
  bool keep = true; ///< keep it as a job, re-planned on cluster changes
  /// The model's layers, read by the node that has the file; empty: the
  /// planning node reads model_path itself.
  std::vector<plan_layer_info> layers;
  std::string model_name;          ///< with layers: the model's name
  std::uint32_t context_train = 0; ///< with layers: its training context
  std::string origin;              ///< the node that asked (forwarded)
  /// With layers: a stage's working memory beyond its layers (placement's
  /// stage_extras: every stage, the first, the last).
  std::uint64_t stage_bytes = 0;
  std::uint64_t first_stage_bytes = 0;
  std::uint64_t last_stage_bytes = 0;
  /// Sequences in flight, each with its own KV cache of context_length.
  std::uint32_t sequences = 1;
  /// A running job this plan is for ("NODE#N", the console's `run`); kept
  /// jobs with different runs are different jobs. "" for `plan`.
  std::string run;
  /// Memory kept free for the run's draft model (speculative decoding):
  /// reserve_bytes on the device of node reserve_node with the most free
  /// memory that holds them (plan_info::reserved_device); 0: none.
  std::string reserve_node;
  std::uint64_t reserve_bytes = 0;
  /// Memory the KV caches of running jobs may still claim, per device
  /// ("NODE/ID": bytes): their caches grow as their sequences hold more
  /// positions, so a device's free memory today is not yet this plan's.
  /// The solver counts each device's free memory less its claim.
  std::map<std::string, std::uint64_t> kv_claims;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, plan_request& x) {
  return wire(f, caf::meta::type_name("exo.plan_request"), x.model_path,
              x.context_length, x.objective, x.blend_weight, x.time_limit_ms,
              x.keep, x.layers, x.model_name, x.context_train, x.origin,
              x.stage_bytes, x.first_stage_bytes, x.last_stage_bytes,
              x.sequences, x.run, x.reserve_node, x.reserve_bytes,
              x.kv_claims);
}

/// One pipeline stage: a device and its layers [first_layer, end_layer).
struct plan_stage_info {
  std::string device; ///< "NODE/DEVICE-ID"
  std::string node;
  std::uint32_t first_layer = 0;
  std::uint32_t end_layer = 0;
  double compute_seconds = 0;  ///< per token
  double transfer_seconds = 0; ///< per token, to the next stage
  std::uint64_t memory_used_bytes = 0;
  std::int64_t memory_left_bytes = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, plan_stage_info& x) {
  return wire(f, caf::meta::type_name("exo.plan_stage_info"), x.device, x.node,
              x.first_layer, x.end_layer, x.compute_seconds, x.transfer_seconds,
              x.memory_used_bytes, x.memory_left_bytes);
}

/// A plan (or why there is none).
struct plan_info {
  std::string status; ///< optimal | feasible | infeasible | no_plan | error
  std::vector<plan_stage_info> stages;
  std::string objective; ///< latency | throughput | blend
  double objective_seconds = 0;
  double latency_seconds = 0;
  double bottleneck_seconds = 0;
  double lower_bound_seconds = 0;
  bool proven_optimal = false;
  double solve_seconds = 0;
  std::string solver;                   ///< exact | gecode | baseline
  std::vector<std::string> explanation; ///< why there is no plan
  std::vector<std::string> notes;       ///< devices left out, defaults used
  std::string planned_by;               ///< the node that solved it
  /// "NODE/ID" holding plan_request::reserve_bytes for the draft model,
  /// "" when none was asked for or no device of the node had the room.
  std::string reserved_device;
  std::int64_t planned_ns = 0;          ///< system clock
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, plan_info& x) {
  return wire(f, caf::meta::type_name("exo.plan_info"), x.status, x.stages,
              x.objective, x.objective_seconds, x.latency_seconds,
              x.bottleneck_seconds, x.lower_bound_seconds, x.proven_optimal,
              x.solve_seconds, x.solver, x.explanation, x.notes, x.planned_by,
              x.reserved_device, x.planned_ns);
}

/// A job the placement actor keeps planned: its request, its current plan,
/// and the last re-plan with its reason.
struct plan_job_info {
  std::string id; ///< "job-N"
  plan_request request;
  plan_info plan;
  std::uint32_t replans = 0; ///< re-plans after cluster changes
  std::string last_reason;   ///< the changes behind the last re-plan
  std::int64_t last_replan_ns = 0;
  /// The last re-plan found no plan: `plan` is the previous one, kept.
  bool stale = false;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, plan_job_info& x) {
  return wire(f, caf::meta::type_name("exo.plan_job_info"), x.id, x.request,
              x.plan, x.replans, x.last_reason, x.last_replan_ns, x.stale);
}

} // namespace exo
