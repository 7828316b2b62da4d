#pragma once

/// The shard: a contiguous range of a model's layers [first, last) bound to
/// one device actor, with a KV cache per (job, sequence). It runs detached
/// (a forward step blocks its thread for the step's math) and answers:
///
///   (forward_atom, stage_step)  -> stage_step of the last stage (logits);
///                                  other stages compute and delegate the
///                                  step to the next shard
///   (next_atom, caf::actor)     -> ok   the next stage (none: last stage)
///   (release_atom, job)         -> ok   drops the job's KV caches
///   (inspect_atom)              -> actor_snapshot
///
/// Every input is checked: batch size against max_chunk_bytes, the
/// activation length against n_embd, the position against the cache (steps
/// of one sequence must arrive in order), token ids against the vocabulary.
///
/// Today the math runs on the host through model::llama_stage (the same
/// code as exo-model); the device actor is the shard's binding (its id is
/// reported with the placement). See
/// docs/architecture.md, "Workload".

#include "messages/device.hpp"
#include "messages/workload.hpp"
#include "runtime/model/llama_model.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <memory>
#include <string>

namespace exo::shard {

struct shard_setup {
  std::shared_ptr<const model::llama_model> model;
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  std::uint32_t n_ctx = 0;  ///< context per sequence
  device_actor device;      ///< the device it is bound to
  std::string device_id;
  std::string node;
  caf::actor owner;         ///< stops when the owner goes down (optional)
};

/// Spawns a shard (detached).
caf::actor spawn_shard(caf::actor_system& sys, shard_setup setup);

/// The largest batch (tokens of one step) the job may send for a model
/// with these widths: activations and logits stay within max_chunk_bytes.
std::uint32_t max_batch_tokens(std::uint32_t n_embd);

} // namespace exo::shard
