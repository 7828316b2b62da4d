#pragma once

/// The job coordinator: the one place a job goes through, whoever asks for
/// it (the console's `run`, `exo-node run`, later the HTTP gateway). For
/// each request it
///
///   1. validates it (core/workload/job_request.hpp: model, context,
///      sampling, sequences, stages), refusing with invalid_argument;
///   2. places it: with stages K an even split (simple_placement.hpp) over
///      the alive members, this node first; else the solver's plan
///      (solver_placement.hpp) from the coordinating node's placement
///      service (with a gate: kept and re-planned while the job lasts) or
///      solved here on this node's own devices (without one);
///   3. starts one shard per stage through the shard hosts (shard_host.hpp;
///      remote ones through the gate, with the parts of the model they may
///      lack), links them and runs the job (job_actor.hpp);
///      When no plan fits (the solver finds it infeasible, or a device
///      cannot allocate a stage) while this coordinator's other runs hold
///      memory, the run waits for them, first come first placed, at most
///      `admission_wait`; then it fails with out_of_memory (the gateway's
///      429). A run whose KV cache cannot grow anywhere waits the same way
///      (its stages stopped) and is re-fed once placed again;
///   4. streams job_placed, job_started and every job_token to the
///      listener, and answers with a job_report (or failed_state naming the
///      stage, the placement or the job's error).
///
///   caller --(run_atom, job_request, listener)----------> coordinator
///     (with a gate) --(service_atom, node, "shards", (shard_atom, spec))
///                                     --> gate --> shard host of `node`
///     (without)     --(shard_atom, spec)--> this node's shard host
///                  <-- shard_ready, per stage
///     shard i --(next_atom, shard i+1)
///     job --(run_atom)--> ... job_result
///   caller <-- job_report
///
/// It also answers
///   (cancel_atom, job id) -> bool: the job stops at its next token
///       boundary (false when it is not running here);
///   (cancel_atom, job id, seq) -> bool: sequence `seq` of the job stops
///       at its next token boundary, the others go on (a gateway choice
///       whose stop string matched; false when it is not running here);
///   (cancel_atom, listener): the run that `listener` asked for and that
///       waits for memory ends now (its client left; no answer);
///   (cancel_atom, job id, listener, grace ms) -> bool: the streaming
///       client `listener` (the one that asked, or a follower) lost its
///       connection: the job is cancelled when the grace has passed unless
///       a client that did not leave follows it by then (false when it is
///       not running here);
///   (cancel_atom, "ORIGIN:ID") -> bool: a job handed over to this node
///       that a client cancelled at its origin while the handoff was under
///       way stops here (at once, or as soon as its job runs);
/// and, as the node service "jobs", the console commands
///   run --model FILE --prompt TEXT [-n N] [--seed S] [--temperature T]
///       [--top-k K] [--top-p P] [--stages K] [--sequences M] [--ctx C]
///       [--chat [--system TEXT]] (the prompt as a user message in the
///       model's chat template; stops at its end of turn)
///       the reply: "job N", the placement, the bytes of model sent, the
///       text and tokens/s; this node's stdout shows the placement, "job N
///       started" and the tokens as they come;
///   jobs    -> the jobs this node coordinates: id, model, tokens so far;
///   drain NODE -> the runs it coordinates with stages on NODE are
///       re-placed without NODE at once (the recovery path: fresh stages,
///       the tokens so far re-fed), so NODE can leave; not counted against
///       a job's max_recoveries;
///   cancel N -> job N stops at its next token boundary; its `run` replies
///       with the text so far and "cancelled: job N stopped after T
///       generated tokens". Job ids are per coordinating node.
/// With an audit sink, job_submitted and job_finished (outcome ok,
/// cancelled or error) are audited.

#include "actors/service/service.hpp"

#include <optional>
#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace exo::tls {
class bulk_blobs;
} // namespace exo::tls

namespace exo::workload {

struct job_coordinator_config {
  std::string node;    ///< this node's name
  caf::actor node_actor; ///< devices_atom: this node's devices
  /// With a gate: the cluster (member view, the placement service, the
  /// shard hosts of every node). Without: this node alone.
  caf::actor gate;
  caf::actor shard_host; ///< this node's; required without a gate
  caf::actor audit;      ///< optional
  /// What this node's bulk channel serves: the models of the jobs it
  /// coordinates, for peers that lack them (optional).
  std::shared_ptr<tls::bulk_blobs> blobs;
  /// The folders a console `run --model` may name (core/text/file.hpp
  /// resolve_client_file); none: any path (trusted callers only: the
  /// runtime always sets it from models.dirs).
  std::optional<std::vector<std::string>> client_dirs;
  /// Replicate each job to a backup node (models.backup_jobs).
  bool backups = true;
  /// How long a run that finds no room (the plan is infeasible, or a
  /// device cannot allocate its stage or KV cache) waits for the memory
  /// this coordinator's other runs hold (models.admission_wait_ms); 0:
  /// it fails at once. A run waits only while other runs hold memory.
  std::chrono::milliseconds admission_wait{30000};
  /// The gate's failure timeout (network.failure_timeout_ms): a node whose
  /// own timers stalled about this long was paused, and the backups of its
  /// jobs may have taken them over meanwhile (job_coordinator.cpp,
  /// check_fences).
  std::chrono::milliseconds failure_timeout{1500};
  /// The node has seeds (network.seeds) it may not have met yet: until it
  /// has met a peer (or for the follow's search, 15 s, after its start)
  /// an empty member view does not mean it is alone, and a follow of a
  /// job it does not have waits for peers to ask instead of answering
  /// "no node has job" (which makes a resumed stream run its job again
  /// while the job goes on elsewhere).
  bool seeded = false;
  /// Where the last job number given out is kept (core/workload/
  /// job_numbers.hpp: a restarted node goes on from it, so that its new
  /// jobs' keys are not those of its old ones, which other nodes may have
  /// taken over); "": numbers in memory, from 1 (a node alone).
  std::string job_numbers_file;
};

/// Spawns a coordinator (detached: it maps and hashes model files).
caf::actor spawn_job_coordinator(caf::actor_system& sys,
                                 job_coordinator_config cfg);

/// Spawns the node service: name "jobs", commands "run", "jobs",
/// "cancel"; a coordinator with the node's gate.
service spawn_jobs_service(const service_context& ctx);

} // namespace exo::workload
