#pragma once

/// The shard: a contiguous range of a model's layers [first, last) computed
/// on one device actor, with a KV cache per (job, sequence) resident on that
/// device. The shard is an event-based actor; its stage (model::device_stage
/// with the KV caches) lives on the device actor's thread and is touched
/// only there, by device tasks (messages/device.hpp). It answers:
///
///   (forward_atom, stage_step)  -> stage_step of the last stage (logits,
///                                  one row per sequence of the step);
///                                  other stages compute and delegate the
///                                  step to the next shard. A step of
///                                  several sequences (batched decoding)
///                                  is one device forward for all of them
///   (next_atom, caf::actor)     -> ok   the next stage (none: last stage)
///   (release_atom, job)         -> ok   frees the job's KV caches
///   (release_atom, job, seq)    -> ok   frees one sequence's (it ended)
///   (retain_atom, prefix_retain)       keeps a sequence's prompt rows
///                                  for later jobs (the prefix cache)
///   (claim_atom, prefix_claim)  -> prefix_claim  the keys it keeps, held
///                                  for the job until it is released
///   (adopt_atom, new owner)     -> ok   from its owner only: the shard
///                                  follows the new one (a job handed to
///                                  another coordinator, handoff_atom)
///   (inspect_atom)              -> actor_snapshot
///
/// On start it sends its device a task that creates the stage: the layers'
/// weights read in place (cpu) or uploaded in pieces of at most
/// max_chunk_bytes; if that fails, every step is answered with the reason.
/// A step is checked here, then delegated to the device as one task: a
/// write (activations, or embeddings computed on the host by the first
/// stage, plus positions), the kernels of every layer (and the final norm
/// and output head on the last stage) run directly on the device's pool,
/// a read (activations out, or the last row's logits) -- and the task
/// itself delegates the step to the next stage, so a step costs no
/// round trip through the shard. Activations travel between stages of
/// different nodes in the stage_step; between stages of one node by a
/// device copy into the next stage's inbox for the sequence
///   (inbox_atom, job, seq, bytes) -> (handle_id, device actor)
/// (same-node senders only), the step then carries on_device and no x.
///
/// Shards of different jobs that run the same layers of the same (mapped)
/// model on the same device share one device stage: its weights are read
/// or uploaded once, each shard's sequences keep their own KV caches, and
/// the steps of the jobs that wait for the stage at the same time run as
/// one batched forward (continuous batching: core/workload/step_batcher
/// decides when; a first stage waits at most batch_wait for the jobs of
/// its last batch to come back, a later stage runs what waits at once).
/// Steps whose activations arrive or leave on the device (inboxes) run
/// alone. Each sequence gets exactly what it gets
/// alone on the host devices (the batched forward's rule); the shard's
/// snapshot counts its own steps, tokens and caches, and the stage's
/// figures (shared_by, stage_forwards, merged_steps) for all.
///
/// Every input is checked: batch size against max_chunk_bytes, the
/// activation length against n_embd, the position against the cache (steps
/// of one sequence must arrive in order), token ids against the vocabulary.
/// See docs/architecture.md, "Workload".

#include "messages/device.hpp"
#include "messages/workload.hpp"
#include "core/model/llama_model.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace exo::workload {

struct shard_setup {
  std::shared_ptr<const model::llama_model> model;
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  std::uint32_t n_ctx = 0;  ///< context per sequence
  /// How its device stage's KV caches store keys and values (shards of
  /// jobs with other cache types never share a device stage).
  backend::kv_type kv = backend::kv_type::f16;
  device_actor device;      ///< the device it computes on (required)
  std::string device_id;
  std::string node;
  /// The model file's sha256 (hex; the stage's label in stage_figures_now).
  std::string model_sha256;
  caf::actor owner;         ///< stops when the owner goes down (optional)
  /// Its shard host, told when the shard gets a new owner (adopt_atom)
  /// with whether that one is of another node (optional).
  caf::actor host;
  /// Steps of several jobs that share this stage's device stage wait at
  /// most this long for the other jobs of the last batch (continuous
  /// batching; see the top of this file).
  std::chrono::microseconds batch_wait{2000};
  /// Bytes of prompt prefixes its stage keeps for later jobs
  /// (messages/workload.hpp retain_atom; the stage's first shard sets
  /// it); 0 keeps none.
  std::uint64_t prefix_cache_bytes = 0;
  /// How long its stage stays on the device after its last shard goes (its
  /// weights and kept prompt prefixes, for the next job of these layers:
  /// a chat's next turn), given way at once when the device needs the room
  /// (device::task_context::keep); 0: it goes with its last shard.
  std::chrono::milliseconds keep_alive{0};
};

/// Spawns a shard; throws model_error for a bad layer range or
/// a missing device.
caf::actor spawn_shard(caf::actor_system& sys, shard_setup setup);

/// What the shared stages of this process did so far (continuous
/// batching): forwards run, and steps that ran in one with another job's.
struct stage_batching_totals {
  std::uint64_t forwards = 0;
  std::uint64_t merged_steps = 0;
};
stage_batching_totals batching_totals() noexcept;

/// One device stage of this process (the layers of a model on a device,
/// every job's sequences on it), as the shard host reports it and the
/// gateway's /metrics shows it. Figures are published by the stage's
/// device thread after each forward and each change of its users or
/// caches, so they may be a step old.
struct stage_figures {
  std::string device;       ///< device id
  std::string model;        ///< the model file's sha256, 12 hex digits
  std::uint32_t first = 0;  ///< layers [first, last)
  std::uint32_t last = 0;
  std::string kv_type;      ///< f16, q8_0, f32
  std::uint64_t jobs = 0;      ///< shards (one per job) that use it now
  std::uint64_t sequences = 0; ///< jobs' sequences whose KV cache it holds
  std::uint64_t kv_bytes = 0;  ///< KV cache memory on the device
  /// A paged cache's blocks: in its pool, held by a sequence (or a kept
  /// prompt prefix), held by more than one; all 0 for contiguous caches.
  std::uint64_t kv_blocks = 0;
  std::uint64_t kv_blocks_used = 0;
  std::uint64_t kv_blocks_shared = 0;
  std::uint32_t kv_block_positions = 0; ///< positions per block (0: contiguous)
  std::uint64_t forwards = 0;     ///< forwards run (each a batch of steps)
  std::uint64_t rows = 0;         ///< token rows those forwards computed
  std::uint64_t merged_steps = 0; ///< steps that ran with another job's
  /// How long its steps waited for their batch: a count per bucket of
  /// workload::batch_wait_bounds (core/workload/step_batcher.hpp; not
  /// cumulative, one more than the bounds), and their sum in seconds.
  std::vector<std::uint64_t> wait_counts;
  double wait_sum_s = 0;
};

/// Every stage alive in this process now (kept ones after their last job
/// included), in no particular order. Any thread.
std::vector<stage_figures> stage_figures_now();

/// The largest batch (tokens of one step) the job may send for a model
/// with these widths: activations and logits stay within max_chunk_bytes.
std::uint32_t max_batch_tokens(std::uint32_t n_embd);

/// The most sequences one step may carry (stage_step::parts): what the
/// last stage returns for them, whole rows of logits or (top_k, not 0)
/// each row's candidates, stays within max_chunk_bytes
/// (model::batch_sequences_for).
std::uint32_t max_step_sequences(std::uint32_t n_embd, std::uint32_t n_vocab,
                                 std::uint32_t top_k = 0);

} // namespace exo::workload
