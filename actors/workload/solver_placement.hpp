#pragma once

/// A job's placement from the placement service (actors/placement): the
/// request the console's `run` sends to the coordinator's placement actor,
/// and the solver's plan turned into the stages the job starts. Pure
/// functions (no actor system).
///
///   run -- (service_atom, coordinator, "plan",
///           (plan_atom, run_plan_request(...))) --> gate -> plan_job_info
///   stages_of(plan, member view) -> [stage_place]  (device names looked up)

#include "actors/workload/simple_placement.hpp"
#include "backends/backend.hpp"
#include "messages/cluster.hpp"
#include "core/placement/problem.hpp"
#include "messages/placement.hpp"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace exo::workload {

/// The plan request of a run: the model file (its layers and a stage's
/// working memory read here and attached, so the coordinator need not have
/// the file), the context the job needs, its sequences (a KV cache each),
/// the objective (throughput when several sequences are in flight, else
/// latency). With a `run` id ("NODE#N") the plan is kept as a job of the
/// placement service, re-planned (and its reasons shown by `plans`) while
/// the run lasts; the run drops it with (unplan_atom, job id) when it ends.
/// Without one it is not kept. The layers' KV memory is that of a cache of
/// type `kv`. Throws std::invalid_argument when the model cannot be read.
plan_request run_plan_request(const std::string& model, std::uint32_t n_ctx,
                              std::uint32_t sequences,
                              const std::string& origin,
                              const std::string& run = {},
                              backend::kv_type kv = backend::kv_type::f16);

/// A member view of one alive node with `devices` (a node planning on its
/// own devices, without a cluster).
member_view single_node_view(const std::string& node,
                             const std::vector<device_info>& devices);

/// Solves `r` (its layers attached, or read from r.model_path) on `view`
/// here, with the placement service's conversion rules (cluster_snapshot)
/// but no placement service: what `exo-node run` does on its own devices.
/// `planned_by` names `node`. Never throws: a bad model or problem gives a
/// plan with status "error" and the reason as its explanation. `resident`:
/// the layers devices hold now (a re-placement passes the stages that
/// survive), so that of equal plans the one that keeps them wins; ranges on
/// devices not in the view are ignored.
plan_info plan_locally(
  const plan_request& r, const member_view& view, const std::string& node,
  const std::vector<placement::resident_layers>& resident = {});

/// What the KV caches of one stage of a running job may still claim: each
/// sequence's cache holds room for `n_ctx` positions when full and for at
/// least `held[s]` now (its prompt and the tokens it generated: caches grow
/// as their sequences do, device_stage_options::kv_grow_positions), so
/// the rest, at `kv_bytes_per_token` each, may still be allocated. A
/// sequence missing from `held` holds nothing yet. With `block_positions`
/// (a paged stage's blocks; 0: none) both counts are whole blocks: a
/// cache takes a block at its first position.
std::uint64_t kv_claim(std::uint64_t kv_bytes_per_token, std::uint32_t n_ctx,
                       std::uint32_t sequences,
                       const std::vector<std::uint64_t>& held,
                       std::uint32_t block_positions);

/// Whether a job whose KV caches need `kv[i]` bytes on stage i of `plan` —
/// the stages a running job of the same model holds, whose weights it
/// would share — fits beside it: every stage's device is on an alive
/// member of `view`, not in `excluded` ("NODE/ID"), and has free memory
/// for its KV with a 5% margin beyond `promised` ("NODE/ID" -> the bytes
/// the jobs already there may still claim: kv_claim of each of their
/// stages).
bool fits_beside(const std::vector<stage_place>& plan,
                 const std::vector<std::uint64_t>& kv,
                 const member_view& view,
                 const std::map<std::string, std::uint64_t>& promised,
                 const std::set<std::string>& excluded);

/// Why a plan without stages has none: "the placement solver found no plan
/// (STATUS); EXPLANATION...; NOTE..." with the notes of the memory it kept
/// out of reach (reserve_for: running jobs' KV claims, a draft's room).
std::string no_plan(const plan_info& p);

/// The stages of a solver's plan, in pipeline order: each stage's device
/// ("NODE/ID") resolved in `view`. Throws std::invalid_argument naming the
/// reason when the plan has no stages (with the solver's explanation), a
/// stage's node is not alive or lacks the device, or the layer ranges do
/// not cover [0, n_layer) in order.
std::vector<stage_place> stages_of(const plan_info& p,
                                   const member_view& view,
                                   std::uint32_t n_layer);

/// The plan for people: the solver's stage table (device, layers, compute
/// and transfer time per token, memory), whether it is proven optimal, who
/// planned it.
std::string describe_plan(const plan_info& p);

} // namespace exo::workload
