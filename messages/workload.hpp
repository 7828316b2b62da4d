#pragma once

/// The wire contract of the workload: shards (a contiguous range of a
/// model's layers on one device), the activations passed from stage to
/// stage, and the weights sent to a node that lacks the model file.
///
/// One step of one sequence through a pipeline of K shards:
///
///   job --forward(stage_step)--> shard 0 --forward--> shard 1 ... shard K-1
///    ^                         (each shard computes its layers, then      |
///    |                          delegates the step to the next one)      |
///    '---------------- stage_step (x = logits of the last row) ----------'
///
/// Several sequences are in flight at once: a shard serves one step at a
/// time, so shard i works on sequence j while shard i+1 works on j-1.
///
/// Placing a shard on another node (through the gates, see gate_actor.hpp):
///
///   coordinator --(service_atom, node, "shards", (shard_atom, spec))--> gate
///      shard host of `node` ("shards"): model in
///        <state_dir>/models/<sha256>/ ?
///        no: fetches the parts it lacks (spec.parts: the header and the
///            tensors of its layer range, each SHA-256-verified) from the
///            bulk channel of spec.source_node (its address from this
///            node's member view; TLS, the server's certificate must name
///            that node; core/tls/bulk_channel.hpp), caches them
///            (workload::partial_model)
///      <-- shard_ready{shard handle, device, bytes received}
///
/// A job, from whoever asks (the console's `run`, `exo-node run`, later the
/// HTTP gateway) to the node's job coordinator (actors/workload/
/// job_coordinator.hpp), which validates, places, starts and links the
/// stages, runs the job and reports:
///
///   caller --(run_atom, job_request, listener)--> coordinator
///     listener <-- job_placed{how the stages were placed}
///     listener <-- job_started{job id}
///     listener <-- job_prompt_scores{job, seq, scores}  (prompt_logprobs:
///                  each sequence's, before its first token)
///     listener <-- job_token{job, seq, token, piece}   (each, as produced)
///     listener <-- job_recovered{what was lost, new stages, stall}
///                  (after a loss, with the first token that follows it)
///   caller <-- job_report{tokens, texts, tokens/s, cancelled}
///          or an error: invalid_argument (the request breaks a rule of
///          core/workload/job_request.hpp), failed_state (placement, a
///          stage or the job failed)
///
/// A local listener receives every event before the caller the report.

#include "core/workload/job_request.hpp" // job_request: plain data
#include "core/workload/model_cache.hpp" // model_part: plain data, no CAF
#include "messages/atoms.hpp"
#include "messages/device.hpp"
#include "messages/wire_real.hpp"

#include <caf/actor.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace exo {

using forward_atom = caf::atom_constant<caf::atom("forward")>;
using shard_atom = caf::atom_constant<caf::atom("shard")>;
using next_atom = caf::atom_constant<caf::atom("next")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
/// (cancel_atom) -> bool: a job stops at the next token boundary (true
/// when it was still running).
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
/// (lost_atom, reason, stages) to a job, from its coordinator: a node
/// holding its stages `stages` (indices) is gone (dead or left). A job whose
/// pipeline has stalled re-places itself (recover_atom), or ends with that
/// error when it cannot.
using lost_atom = caf::atom_constant<caf::atom("lost")>;
/// (recover_atom, job id, lost stage indices, reason) -> job_pipeline, from
/// a job to its coordinator: the stages it had are (partly) gone; the
/// coordinator re-places the layers on the surviving devices, starts and
/// links fresh stages and answers with them (or an error naming what is
/// missing). The job then rebuilds its KV caches by re-feeding each
/// sequence's prompt and the tokens generated so far (after a planned
/// move: writes the rows it read from the old stages, kv_write_atom), and
/// goes on.
using recover_atom = caf::atom_constant<caf::atom("recover")>;
/// (inbox_atom, job, seq, bytes) -> (handle_id, caf::actor device): a
/// shard allocates, on its device, a buffer that its previous stage on
/// the same node copies the sequence's activations into (see
/// stage_step::on_device). Refused for senders of other nodes.
using inbox_atom = caf::atom_constant<caf::atom("inbox")>;

/// (kv_read_atom, job, seq, pos, n) -> kv_rows, from a job to one of its
/// stages: positions [pos, pos + n) of the sequence's KV cache there (a
/// planned move: the caches go to the new stages instead of being
/// rebuilt). At most kv_rows_bytes in one answer.
using kv_read_atom = caf::atom_constant<caf::atom("kv_read")>;
/// (kv_write_atom, kv_rows) -> ok, from a job to a stage of its new
/// pipeline: appends the rows to the sequence's cache there (made by the
/// first, at position 0); the layers must be the stage's own.
using kv_write_atom = caf::atom_constant<caf::atom("kv_write")>;

/// (drain_atom, node) -> std::string, from the jobs service where an
/// operator typed `drain NODE` to that of every other alive node: each
/// moves the runs it coordinates off NODE (planned moves) and answers with
/// their keys ("n2:4, n2:7"; "" when none).
///
/// (drain_atom, node, own_runs) -> console_reply, to a node's own jobs
/// service: `drain NODE` as the console types it (own_runs), or only the
/// other nodes' runs (a node's graceful stop drains itself that way: its
/// own runs are taken over by their backups).
using drain_atom = caf::atom_constant<caf::atom("drain")>;

/// (replicate_atom, job_replica) -> ok, from a job's coordinator to the
/// jobs service of the node that backs the job up; then (replicate_atom,
/// job_progress) as tokens come. See job_replica.
using replicate_atom = caf::atom_constant<caf::atom("replicate")>;
/// (attach_atom, key) -> console_reply: the jobs service that runs or backs
/// up the job named `key` (its run --id, or NODE:ID) answers when the job
/// ends, as the console's `run` would have.
///
/// (attach_atom, key, prompt, listener, forward) -> job_report: follows job
/// `key` as a stream (the gateway's resumed completions): `listener` gets
/// job_started, then every token generated so far (replayed, each with its
/// index) and those that follow as they come; the answer is the job's
/// report (or its error). `prompt` must be the job's
/// workload::prompt_identity (its text, or its token ids: a client resumes
/// only its own request). With `forward`, a node that does not
/// have the job asks the others (which do not forward again) and, while
/// none has it, asks again for a few seconds: a job whose node just died
/// is found once its backup takes it over; a node that just started and
/// has not met its seeds yet waits for them instead of answering that it
/// is alone. No node has it (then):
/// unknown_handle; a prompt that is not the job's: invalid_argument; a job
/// that cannot go on (cancelled, failed, tokens not kept): failed_state.
using attach_atom = caf::atom_constant<caf::atom("attach")>;
/// A graceful stop hands the jobs a node coordinates to their backups
/// without recomputation (issue 21, planned moves):
///
/// (handoff_atom) -> console_reply, to a node's own jobs service as it
/// stops: every job it runs moves its stages off this node (planned moves)
/// and is handed to its backup; answers once each is handed over or left
/// to the takeover (its replica re-fed) with what happened.
///
/// (handoff_atom) -> job_handoff, from a coordinator to its job: the job
/// stops at its next token boundary (no step in flight, every sequence's
/// last token sampled, not yet fed) and answers with its stages and what
/// they hold; (handoff_atom, bool commit) then ends it without releasing
/// its KV caches (commit) or lets it go on.
///
/// (handoff_atom, job_handoff) -> caf::actor, from the coordinator to the
/// jobs service of the job's backup: it runs the job from there on the
/// same stages and answers with its coordinator, which the stages are then
/// given to ((adopt_atom, new owner) -> ok to each shard, from its owner
/// only).
using handoff_atom = caf::atom_constant<caf::atom("handoff")>;
/// (prefetch_atom, sha256, size, source node) -> path, to a shard host:
/// fetches the whole model file into this node's model cache (from the
/// source's bulk channel, verified) and answers with its path.
using prefetch_atom = caf::atom_constant<caf::atom("prefetch")>;

/// The prefix cache (core/workload/prefix_key.hpp): a stage keeps the
/// first rows of a prompt it read, for later jobs that start with the
/// same tokens, while it lives (shared by jobs on the same device and
/// layers), within its budget (shard_setup::prefix_cache_bytes, the least
/// recently used dropped first, and all of them that no job holds when a
/// KV cache cannot grow).
///
/// (retain_atom, prefix_retain), from a job to each of its stages once a
/// sequence's prompt is read: keep a copy of its rows up to its longest
/// prefix, found by the key of each of its prefixes (no answer; nothing
/// when the budget cannot hold it, the longest key is kept already or the
/// sequence has no such rows here).
using retain_atom = caf::atom_constant<caf::atom("retain")>;
/// (claim_atom, prefix_claim) -> prefix_claim, from a job to each of its
/// stages before its first step: the keys of the request's that the stage
/// holds, each held for the job until it releases its caches; a step part
/// with `prefix` then starts the sequence's cache as a copy.
using claim_atom = caf::atom_constant<caf::atom("claim")>;

/// Largest batch, sequence count and context a shard accepts from a peer.
constexpr std::size_t max_sequences_per_shard = 1024;

/// Keys of prompt prefixes a job asks its stages for (claim_atom), and
/// those a stage holds (the answer). At most max_prefix_claim keys.
struct prefix_claim {
  std::uint64_t job = 0;
  std::vector<std::uint64_t> keys;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, prefix_claim& x) {
  return wire(f, caf::meta::type_name("exo.prefix_claim"), x.job, x.keys);
}

/// Most keys in one prefix_claim or prefix_retain.
constexpr std::size_t max_prefix_claim = 4096;

/// A sequence's prompt prefixes to keep (retain_atom): keys[i] is the key
/// of its first lengths[i] positions, lengths ascending; the rows kept are
/// those of the longest.
struct prefix_retain {
  std::uint64_t job = 0;
  std::uint32_t seq = 0;
  std::vector<std::uint32_t> lengths;
  std::vector<std::uint64_t> keys;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, prefix_retain& x) {
  return wire(f, caf::meta::type_name("exo.prefix_retain"), x.job, x.seq,
              x.lengths, x.keys);
}

/// Part of a batched step: n of its tokens (rows), of sequence `seq` at
/// positions pos .. pos + n - 1.
///
/// `fork`: the sequence's first step, after a prompt it shares with
/// sequence `from` (of the same job), which the stages computed once: each
/// stage starts its cache as a copy of `from`'s first `pos` positions
/// (device_stage::fork_cache), then runs the part. A stage that holds a
/// cache for the sequence already (the step sent again after a planned
/// move wrote it) runs the part as it is. With `prefix` (not 0) the copy
/// is of the stage's retained prompt prefix of that key (claim_atom),
/// which holds `pos` positions, instead of another sequence's.
struct step_part {
  std::uint32_t seq = 0;
  std::uint32_t pos = 0;
  std::uint32_t n = 0;
  bool fork = false;
  std::uint32_t from = 0;
  std::uint64_t prefix = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_part& x) {
  return wire(f, caf::meta::type_name("exo.step_part"), x.seq, x.pos, x.n,
              x.fork, x.from, x.prefix);
}

namespace model {

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprobs& x) {
  return wire(f, caf::meta::type_name("exo.token_logprobs"), x.logprob,
              x.top_ids, x.top_logprobs, x.rank);
}

} // namespace model

/// A prompt's scoring (stage_step::scores, job_request::prompt_logprobs):
/// the log-probability of each of its tokens after the ones before it,
/// as OpenAI's completions show with `echo` and `logprobs`.
struct step_scores {
  /// Asked: one per row of the step (empty: none), the token whose
  /// log-probability that row's logits give (the prompt's next token), or
  /// -1 for a row not scored.
  std::vector<std::int32_t> ids;
  /// Asked: also each scored row's `top` best tokens (at most
  /// model::max_top_logprobs).
  std::uint32_t top = 0;
  /// Answered by the last stage: one per row with an id, in row order
  /// (model::logprobs_of: the id's log-probability, its row's `top` best).
  std::vector<model::token_logprobs> rows;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_scores& x) {
  return wire(f, caf::meta::type_name("exo.step_scores"), x.ids, x.top,
              x.rows);
}

/// One batch on its way through the stages: tokens of one sequence, or of
/// several (batched decoding: every stage reads its weights once for all
/// of them). The first stage embeds `tokens`; every stage reads and writes
/// `x` (n rows of n_embd floats, n = tokens.size()); the last stage
/// replies with the logits of the last row of each sequence in `x`
/// (n_vocab floats each, in order), or with `top_k` candidates of each
/// (see top_k). Bounded by max_chunk_bytes like every bulk message.
///
/// `parts` empty: every token is sequence `seq`'s, from `pos`. Else the
/// sequences in row order (distinct, their n adding up to tokens.size(),
/// at most workload::max_step_sequences), the first one (seq, pos): a
/// job keeps at most one step per first sequence in flight.
///
/// Between two stages of one node the activations do not travel in the
/// message: the sender copies them, device to device (messages/device.hpp
/// copy_atom), into the buffer the receiver allocated for the sequence
/// (inbox_atom), and sends the step with `on_device` set and `x` empty.
struct stage_step {
  std::uint64_t job = 0;
  std::uint32_t seq = 0;
  std::uint32_t pos = 0; ///< position of the first token in the sequence
  std::vector<std::int32_t> tokens;
  std::vector<float> x;
  bool on_device = false; ///< x is in the receiver's inbox for (job, seq)
  std::vector<step_part> parts; ///< several sequences (see above)
  /// Speculative decoding's verification: every row is a step of its own
  /// (the bits of one-token steps) and the last stage answers with the
  /// logits of every row, not only each sequence's last.
  bool apart = false;
  /// The step may start before the end of what the stages hold for its
  /// sequences: they forget the positions from there on first (drafted
  /// tokens the model did not accept).
  bool rewind = false;
  /// Not 0: the last stage answers with each row of logits reduced to its
  /// `top_k` best (model::sampler::top_candidates: larger first, the lower
  /// token id first among equals), their values in `x` and their token ids
  /// in `top_ids`, top_k of each per row, instead of whole rows: all a
  /// sampler reads (model::sampler::candidates), a few bytes instead of
  /// n_vocab floats a row, so a step of a large-vocabulary model carries
  /// as many sequences as its activations allow. A row holding a
  /// non-finite logit is reduced to the first one, top_k times. At most
  /// max_step_top_k, below the model's n_vocab.
  std::uint32_t top_k = 0;
  std::vector<std::int32_t> top_ids;
  /// With top_k: the last stage also answers with each row's
  /// model::log_sum_exp in `lse` (one a row), which the job's
  /// log-probabilities subtract (job_request::logprobs).
  bool logprobs = false;
  std::vector<double> lse;
  /// Rows to score (a prompt read with job_request::prompt_logprobs): the
  /// last stage answers with each asked row's log-probabilities besides
  /// the usual logits, computed from every row's logits in pieces
  /// (device_stage::row_logits) without changing the step's own bits.
  step_scores scores;
};

/// The largest stage_step::top_k a stage accepts.
constexpr std::uint32_t max_step_top_k = 4096;

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_step& x) {
  return wire(f, caf::meta::type_name("exo.stage_step"), x.job, x.seq, x.pos,
              x.tokens, x.x, x.on_device, x.parts, x.apart, x.rewind,
              x.top_k, x.top_ids, x.logprobs, x.lse, x.scores);
}

/// What a shard is: layers [first, last) of a model on one device.
struct shard_spec {
  /// Path of the GGUF file, honoured only for requests from the same node;
  /// other nodes use their model cache or fetch the file from `source`.
  std::string model;
  std::string sha256; ///< hex digest of the whole file
  std::uint64_t size = 0;
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  std::uint32_t n_ctx = 0; ///< context per sequence
  std::string device;      ///< device id on that node; "" = the node picks
  std::string source_node; ///< the member whose bulk channel serves it
  /// The byte ranges of the file this stage needs, with their digests
  /// (model::stage_file_ranges): all a node without the file receives.
  std::vector<workload::model_part> parts;
  caf::actor owner; ///< the shard stops when its owner goes down
  /// The KV cache's type (backend::parse_kv_type; "" = f16).
  std::string kv_type;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_spec& x) {
  return wire(f, caf::meta::type_name("exo.shard_spec"), x.model, x.sha256,
              x.size, x.first, x.last, x.n_ctx, x.device, x.source_node,
              x.parts, x.owner, x.kv_type);
}

/// A shard that is up and ready for forward steps.
struct shard_ready {
  caf::actor shard;
  std::string node;
  std::string device; ///< device id
  std::string device_name;
  std::uint64_t bytes_received = 0; ///< model bytes fetched for it
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_ready& x) {
  return wire(f, caf::meta::type_name("exo.shard_ready"), x.shard, x.node,
              x.device, x.device_name, x.bytes_received);
}

/// Positions [pos, pos + n) of one sequence's KV cache for layers
/// [first, last): layer by layer, its n K rows then its n V rows,
/// `row_bytes` each (model::device_stage::read_kv's layout). What a
/// planned move carries from the old stages to the new ones, in pieces of
/// at most max_chunk_bytes.
struct kv_rows {
  std::uint64_t job = 0;
  std::uint32_t seq = 0;
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  std::uint32_t pos = 0;
  std::uint32_t n = 0;
  std::uint64_t row_bytes = 0;
  std::vector<std::uint8_t> data;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_rows& x) {
  auto data = bounded<max_chunk_bytes>(x.data);
  return wire(f, caf::meta::type_name("exo.kv_rows"), x.job, x.seq, x.first,
              x.last, x.pos, x.n, x.row_bytes, data);
}

// A job's request on the wire (core/workload/job_request.hpp).

namespace model {

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampler_params& x) {
  return wire(f, caf::meta::type_name("exo.sampler_params"), x.temperature,
              x.top_k, x.top_p, x.seed, x.min_p, x.repetition_penalty,
              x.frequency_penalty, x.presence_penalty, x.bias_ids,
              x.bias_values, x.json);
}

} // namespace model

namespace workload {

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_request& x) {
  return wire(f, caf::meta::type_name("exo.job_request"), x.model, x.prompt,
              x.n_gen, x.sampling, x.stages, x.sequences, x.n_ctx,
              x.keep_logits, x.special, x.stop_tokens, x.name, x.batch,
              x.draft, x.draft_tokens, x.kv_type, x.share_prompt,
              x.prefix_cache, x.prompt_ids, x.logprobs, x.prompt_logprobs);
}

} // namespace workload

/// How a job's stages were placed: the solver's table or the even split,
/// then one line per stage. Sent before the stages start.
struct job_placed {
  std::string text;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_placed& x) {
  return wire(f, caf::meta::type_name("exo.job_placed"), x.text);
}

/// The job's stages are linked and its first steps are on their way.
struct job_started {
  std::uint64_t job = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_started& x) {
  return wire(f, caf::meta::type_name("exo.job_started"), x.job);
}

/// A job's new pipeline after a loss (the answer to recover_atom): its
/// stages in order, where each runs ("n2/cpu:0"), and how they were placed.
struct job_pipeline {
  std::vector<caf::actor> stages;
  std::vector<std::string> names;
  std::string placement;
  /// The stages' layer ranges: stage i runs [bounds[i], bounds[i + 1])
  /// (empty when not known: a planned move then rebuilds the caches).
  std::vector<std::uint32_t> bounds;
  /// What the re-placement followed: the loss the job asked it for, and
  /// any loss while it was being placed again ("...; then ..."); empty:
  /// the job's own reason.
  std::string lost;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_pipeline& x) {
  return wire(f, caf::meta::type_name("exo.job_pipeline"), x.stages, x.names,
              x.placement, x.bounds, x.lost);
}

/// One recovery of a running job: what was lost, where its layers went and
/// what it cost. Sent to the listener when the first token after it is
/// out, and listed in the job's report.
struct job_recovered {
  std::uint64_t job = 0;
  std::string reason;    ///< what was lost ("stage 1 (n2/cpu:0) is gone...")
  std::string placement; ///< the new stages (job_placed's form)
  std::uint64_t replayed = 0; ///< tokens re-fed to rebuild the KV caches
  double recovery_s = 0; ///< from the loss being noticed to the next token
  double gap_s = 0;      ///< from the last token before it to the next one
  /// A planned move: KV cache bytes carried to the new stages, and the
  /// positions (of all sequences) they held, instead of being re-fed.
  std::uint64_t moved_bytes = 0;
  std::uint64_t moved_positions = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_recovered& x) {
  return wire(f, caf::meta::type_name("exo.job_recovered"), x.job, x.reason,
              x.placement, x.replayed, x.recovery_s, x.gap_s, x.moved_bytes,
              x.moved_positions);
}

/// What a node needs to take a job over when its coordinating node dies:
/// sent by the coordinator to one other node (the backup) when the job
/// starts, to a new backup when that one dies, and kept up to date with
/// job_progress. The backup fetches the whole model file into its cache
/// first (prefetch_atom; the coordinator may be the only node with it) and
/// then answers ok. When the origin is declared dead or gone, the backup
/// places the job on the survivors and goes on from the replicated tokens
/// (the same tokens: generation is deterministic from the request, the
/// seeds and the tokens so far; tokens the replica had not received yet
/// are simply generated again).
struct job_replica {
  std::string origin;     ///< the coordinating node
  std::uint64_t job = 0;  ///< its id there
  workload::job_request request; ///< `model` is the origin's path (unused)
  std::string model_sha256;
  std::uint64_t model_size = 0;
  std::vector<std::vector<std::int32_t>> tokens; ///< so far, per sequence
  /// Per sequence: the numbers its sampler drew for `tokens`
  /// (model::sampler::draws; a speculative round draws several a token).
  /// Tokens are replicated a whole round at a time, so a takeover draws
  /// from there what the first node would have.
  std::vector<std::uint64_t> draws;
  /// The losses the job survived so far (a takeover reports them before
  /// its own); at most max_replicated_recoveries are kept.
  std::vector<job_recovered> recoveries;
  /// Speculative decoding: the draft model's digest and size ("" and 0
  /// without one); the backup fetches it too and goes on with it.
  std::string draft_sha256;
  std::uint64_t draft_size = 0;
  /// With request.logprobs >= 0: per sequence, each of `tokens`'
  /// log-probabilities (as many as its tokens); else empty.
  std::vector<std::vector<model::token_logprobs>> logprobs;
  /// The keys ("NODE:ID", workload::job_key_problem) of the copies of the
  /// job that ran before this one, each taken over by the next: the first
  /// coordinator's first (the job's key everywhere: a job taken over keeps
  /// it), at most workload::max_job_lineage. Empty for a job that started
  /// on `origin`. A node that backs several copies of one job up tells
  /// which copy ran before which (the later one is the job).
  std::vector<std::string> lineage;
};

/// The most recoveries a backup keeps of a job (a peer cannot make it
/// hold more).
constexpr std::size_t max_replicated_recoveries = 64;

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_replica& x) {
  return wire(f, caf::meta::type_name("exo.job_replica"), x.origin, x.job,
              x.request, x.model_sha256, x.model_size, x.tokens, x.draws,
              x.recoveries, x.draft_sha256, x.draft_size, x.logprobs,
              x.lineage);
}

/// More of a replicated job (see job_replica): sequence j had have[j]
/// tokens, `more[j]` follow, drawn with draws[j] numbers in all;
/// `recoveries` the losses it survived since the last progress. `ended`:
/// the job ended, the replica goes.
struct job_progress {
  std::string origin;
  std::uint64_t job = 0;
  std::vector<std::uint32_t> have;
  std::vector<std::vector<std::int32_t>> more;
  std::vector<std::uint64_t> draws;
  bool ended = false;
  std::vector<job_recovered> recoveries;
  /// With logprobs: `more`'s log-probabilities, per sequence (as many).
  std::vector<std::vector<model::token_logprobs>> more_logprobs;
  /// With `ended`, why the replica goes when the job did not end: this
  /// copy was taken over by node `moved_to` (its clients there follow
  /// the job to it), or, `moved_to` being `origin`, the job goes on there
  /// with another backup (a former backup's stale replica: its clients
  /// attach at the origin). Empty: the job ended on `origin`.
  std::string moved_to;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_progress& x) {
  return wire(f, caf::meta::type_name("exo.job_progress"), x.origin, x.job,
              x.have, x.more, x.draws, x.ended, x.recoveries,
              x.more_logprobs, x.moved_to);
}

/// A running job handed by its coordinating node (stopping) to the node
/// that backs it up (see handoff_atom): the stages stay where they are,
/// with their KV caches, and the backup's job goes on from each sequence's
/// next token; nothing is re-fed. Checked by the receiver like every peer
/// message (sizes, ranges, the replica it must already hold).
struct job_handoff {
  std::string origin;    ///< the stopping coordinator
  std::uint64_t job = 0; ///< its id there: the key of the replica
  /// The id its stages keep its KV caches under (its first coordinator's,
  /// when it was handed over before).
  std::uint64_t stage_job = 0;
  std::vector<caf::actor> stages; ///< in order, linked as they are
  std::vector<std::string> nodes;
  std::vector<std::string> devices; ///< device ids on those nodes
  std::vector<std::uint32_t> bounds; ///< stage i: [bounds[i], bounds[i+1])
  /// Per sequence: every token generated so far and the positions its
  /// stages' caches hold (the prompt and all of them but the last).
  std::vector<std::vector<std::int32_t>> tokens;
  std::vector<std::uint32_t> pos;
  /// Per sequence: the numbers its sampler drew for `tokens` (a round of
  /// speculative decoding dropped at the pause does not count).
  std::vector<std::uint64_t> draws;
  std::vector<job_recovered> recoveries; ///< every loss it survived
  /// A recovery not over when it paused (its first token still to come:
  /// the planned move of its stages off the stopping node), at most one,
  /// and how long ago its loss was noticed: the backup's first token ends
  /// it, its reason said before the handoff's.
  std::vector<job_recovered> unfinished;
  std::uint64_t unfinished_us = 0;
  /// The caches may hold rows past `pos` (drafted tokens the model did not
  /// keep): the first step of each sequence rewinds.
  bool rewind = false;
  std::uint64_t paused_us = 0; ///< since its last token, when handed over
  std::string placement;       ///< how the stages were placed
  /// With logprobs: `tokens`' log-probabilities, per sequence (as many).
  std::vector<std::vector<model::token_logprobs>> logprobs;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_handoff& x) {
  return wire(f, caf::meta::type_name("exo.job_handoff"), x.origin, x.job,
              x.stage_job, x.stages, x.nodes, x.devices, x.bounds, x.tokens, x.pos,
              x.draws, x.recoveries, x.unfinished, x.unfinished_us, x.rewind,
              x.paused_us, x.placement, x.logprobs);
}

/// One generated token of one sequence, with its text and its place in
/// the sequence's output (0 the first generated token): a listener that
/// follows a job through a takeover drops what it already has and sees a
/// gap.
struct job_token {
  std::uint64_t job = 0;
  std::uint32_t seq = 0;
  std::int32_t token = 0;
  std::string piece;
  std::uint32_t index = 0;
  /// The job asked for log-probabilities (job_request::logprobs): this
  /// token's.
  bool has_logprobs = false;
  model::token_logprobs logprobs{};
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_token& x) {
  return wire(f, caf::meta::type_name("exo.job_token"), x.job, x.seq, x.token,
              x.piece, x.index, x.has_logprobs, x.logprobs);
}

/// The log-probabilities of sequence `seq`'s prompt tokens after the
/// first, each after the ones before it (job_request::prompt_logprobs):
/// `scores[i]` is token i + 1's, with the request's `logprobs` best
/// alternatives. Sent once per sequence, before its first job_token (a
/// job taken over computes and sends them again; a follower keeps the
/// first).
struct job_prompt_scores {
  std::uint64_t job = 0;
  std::uint32_t seq = 0;
  std::vector<std::int32_t> tokens; ///< the prompt (one more than scores)
  std::vector<model::token_logprobs> scores;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_prompt_scores& x) {
  return wire(f, caf::meta::type_name("exo.job_prompt_scores"), x.job, x.seq,
              x.tokens, x.scores);
}

/// The end of a job that ran (cancelled or not): what it generated and
/// how fast. A job that failed ends with an error instead.
struct job_report {
  std::uint64_t job = 0;
  std::string placement; ///< job_placed's text
  std::uint32_t stages = 0;
  std::string model_sha256;     ///< "" when the job stayed on one node
  std::uint64_t bytes_sent = 0; ///< model bytes sent to other nodes
  std::vector<std::vector<std::int32_t>> tokens; ///< per sequence
  std::vector<std::string> texts; ///< the generated text, per sequence
  std::vector<float> logits;      ///< sequence 0's last (keep_logits)
  std::uint64_t prompt_tokens = 0;
  /// Of them, copies of another sequence's prompt, computed once.
  std::uint64_t shared_prompt_tokens = 0;
  /// Of them, rows copied from the stages' prefix cache (an earlier job
  /// read them).
  std::uint64_t cached_prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  double prompt_s = 0;
  double generation_s = 0;
  bool cancelled = false;
  /// The losses it survived, in order (re-placed and resumed).
  std::vector<job_recovered> recoveries;
  /// Speculative decoding: where the draft ran ("" = no draft), the tokens
  /// it proposed and those the model kept.
  std::string draft;
  std::uint64_t drafted = 0;
  std::uint64_t accepted = 0;

  double prompt_tps() const {
    return prompt_s > 0 ? prompt_tokens / prompt_s : 0;
  }
  double generation_tps() const {
    return generation_s > 0 ? generated_tokens / generation_s : 0;
  }
  /// "" or, when sequences shared a prompt or rows came from the prefix
  /// cache, the line that says how many prompt tokens were computed and at
  /// what rate.
  std::string sharing_line() const {
    const auto reused = shared_prompt_tokens + cached_prompt_tokens;
    if (reused == 0 || reused > prompt_tokens)
      return {};
    const auto computed = prompt_tokens - reused;
    std::string line = "prompt sharing: ";
    if (shared_prompt_tokens > 0)
      line += std::to_string(shared_prompt_tokens) + " of the "
              + std::to_string(prompt_tokens)
              + " prompt tokens were copies of another sequence's prompt, "
                "computed once; ";
    if (cached_prompt_tokens > 0)
      line += std::to_string(cached_prompt_tokens) + " of the "
              + std::to_string(prompt_tokens)
              + " prompt tokens came from the prefix cache (an earlier job "
                "read them); ";
    return line + std::to_string(computed) + " computed ("
           + std::to_string(static_cast<long long>(
             prompt_s > 0 ? computed / prompt_s : 0))
           + " tokens/s)\n";
  }
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_report& x) {
  return wire(f, caf::meta::type_name("exo.job_report"), x.job, x.placement,
              x.stages, x.model_sha256, x.bytes_sent, x.tokens, x.texts,
              x.logits, x.prompt_tokens, x.generated_tokens, x.prompt_s,
              x.generation_s, x.cancelled, x.recoveries, x.draft, x.drafted,
              x.accepted, x.shared_prompt_tokens, x.cached_prompt_tokens);
}

} // namespace exo
