#pragma once

/// The job: M sequences generated through a pipeline of shards. It feeds
/// each sequence's prompt in bounded batches, samples every next token
/// from the last stage's logits (a seeded sampler per sequence) and feeds
/// it back, until -n tokens or end-of-sequence. The sequences are split
/// into groups, as many as stages (more when a step cannot carry a whole
/// group): a group's sequences travel as one batched step (each stage
/// reads its weights once for all of them), and every group has a step in
/// flight, so while shard i works on one group, shard i+1 works on
/// another (pipeline parallelism); with M = 1 the stages take turns.
/// Generation per sequence is independent of M and of the batching: each
/// sequence gets the tokens it gets alone (the same bits of logits with
/// quantized weights on host devices; see docs/architecture.md).
///
///   caller --(run_atom)--> job --forward--> shard 0 --> ... --> shard K-1
///   caller <-- finish(result) --'  <--- logits ---------------------'
///
/// The job monitors its stages. A stage that goes away (its node killed,
/// its connection lost), a step that fails and a stage's node gone, and
/// (lost_atom, reason, stages) from the coordinator (a node that froze and
/// was declared dead) when a step has been in flight for a second or more —
/// tokens that still flow mean the stage answers — are a loss. With a
/// `recoverer` (the coordinator) the job asks it for a new pipeline
/// (recover_atom: the layers re-placed on the surviving devices), re-feeds
/// every unfinished sequence's prompt and the tokens it generated so far
/// (rebuilding the KV caches; the samplers keep their state, so the tokens
/// are those of an uninterrupted run) and goes on; answers from the old
/// pipeline are dropped. Without one, or after `max_recoveries`, or when
/// the coordinator cannot re-place it, the job ends at once with an error
/// naming the stage (never the step timeout).
///
///   job --(recover_atom, id, lost stages, why)--> recoverer
///   job <-- job_pipeline{stages, names, placement}   (or an error)
///   job --forward(prompt + generated so far)--> new stage 0 ...
///
/// (handoff_atom) -> job_handoff pauses the job at its next token boundary
/// (the steps in flight answered and sampled, none sent) and answers with
/// its stages and what their caches hold; then (handoff_atom, true) ends
/// it without releasing them (another coordinator's job goes on with
/// them: job_setup::resident) and (handoff_atom, false) lets it go on.
///
/// (cancel_atom) -> bool stops the job at the next token boundary: no new
/// step is sent, the steps in flight are awaited (their logits are not
/// sampled), then the job releases its KV caches in every stage and
/// answers (run_atom) with what it generated so far and `cancelled` set.
///
/// (cancel_atom, seq) -> bool stops sequence `seq` alone at its next token
/// boundary (its caches are released, the others go on; true when it was
/// still running): a choice of a gateway request whose stop string matched.

#include "core/model/json_constraint.hpp"
#include "core/model/sampler.hpp"
#include "messages/workload.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/message.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <set>
#include <vector>

namespace exo::workload {

/// What a job produced.
struct job_result {
  std::vector<std::vector<std::int32_t>> tokens; ///< generated, per sequence
  std::vector<std::vector<float>> logits; ///< last logits, per sequence
  std::uint64_t prompt_tokens = 0;
  /// Of them, the tokens of copies of another sequence's prompt, read from
  /// its computation (job_setup::share_prompts): not computed again.
  std::uint64_t shared_prompt_tokens = 0;
  /// Of them, the tokens whose KV rows came from the stages' prefix cache
  /// (job_setup::prefix_cache): read by an earlier job, not computed.
  std::uint64_t cached_prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  double prompt_s = 0;     ///< until the last prompt's logits arrived
  double generation_s = 0; ///< from then until the end
  double total_s = 0;
  std::string error;       ///< empty on success
  bool cancelled = false;  ///< stopped by (cancel_atom); tokens: so far
  std::vector<job_recovered> recoveries; ///< the losses it survived
  /// Speculative decoding: tokens the draft proposed, and those kept.
  std::uint64_t drafted = 0;
  std::uint64_t accepted = 0;

  double prompt_tps() const {
    return prompt_s > 0 ? prompt_tokens / prompt_s : 0;
  }
  double generation_tps() const {
    return generation_s > 0 ? generated_tokens / generation_s : 0;
  }
};

struct job_setup {
  std::uint64_t id = 0;
  std::vector<caf::actor> stages; ///< in order, each told its next stage
  /// Where each stage runs ("n2/cpu:0"), for errors; may be empty.
  std::vector<std::string> stage_names;
  std::uint32_t n_embd = 0;
  std::uint32_t n_vocab = 0;
  /// The model's layers and K/V width (n_embd_kv): bound the KV rows a
  /// planned move takes from its stages (0: not checked).
  std::uint32_t n_layer = 0;
  std::uint32_t n_embd_kv = 0;
  std::vector<std::vector<std::int32_t>> prompts; ///< one per sequence
  /// Sequences whose prompt is an earlier sequence's share it: the stages
  /// compute it once, the others sample from its logits and copy its KV
  /// rows (a fresh job without a draft only).
  bool share_prompts = true;
  /// The prefix cache (messages/workload.hpp retain_atom, claim_atom): a
  /// fresh job without a draft asks its stages for the rows of its
  /// prompts' prefixes that earlier jobs read, copies them instead of
  /// computing them, and leaves its own prompts' for later jobs.
  bool prefix_cache = true;
  std::uint32_t n_gen = 16;
  /// The most sequences one step carries (0: as many as a step can,
  /// workload::max_step_sequences); 1 sends every sequence on its own.
  std::uint32_t step_sequences = 0;
  /// Speculative decoding: the stages of a draft model with the same
  /// vocabulary (in order, each told its next; the job keeps its
  /// sequences' caches there as in its own stages and releases them).
  /// After its prompt, each sequence repeats: the draft proposes
  /// `draft_tokens` tokens one by one, the model reads the last token and
  /// the proposals in one step whose rows are each a step of its own
  /// (stage_step::apart), and the job keeps the proposals up to the first
  /// one the model does not pick, plus the model's own next token; the
  /// stages forget the rest (stage_step::rewind). Greedy, the tokens are
  /// exactly those of decoding without a draft. Sampling (temperature
  /// above 0), the draft draws each proposal from its distribution q and
  /// the model keeps it with probability min(1, p/q), else draws its
  /// token from the residual (model::keep_proposal, model::residual):
  /// every token is distributed exactly as without a draft, and a seed
  /// gives the same tokens again, though not the same ones as without a
  /// draft (the draws differ). A draft stage that fails turns speculation
  /// off for the rest of the job.
  std::vector<caf::actor> draft_stages;
  std::uint32_t draft_n_embd = 0; ///< the draft model's width
  std::uint32_t draft_tokens = 4;
  model::sampler_params sampling; ///< sequence j is seeded with seed + j
  /// The last stage returns each sequence's whole row of logits, and the
  /// result keeps the last one of each (job_result::logits). false: it
  /// returns only what the sampler reads of a row (its top_k best, or the
  /// largest at temperature 0: stage_step::top_k), result.logits stay
  /// empty, and a step carries as many sequences as its activations allow
  /// instead of as many rows of n_vocab floats as fit a message (8 for a
  /// 128K vocabulary); a sampler that reads whole rows (top_k 0) gets them
  /// either way.
  bool keep_logits = true;
  /// End-of-generation tokens (EOS, EOT, <|eot_id|>, <|im_end|>...): a
  /// sequence stops at any of them.
  std::set<std::int32_t> eog;
  /// JSON mode (sampling.json): the vocabulary's bytes as generated text
  /// gives them (model::vocab_bytes_of, read by model::mask_json).
  std::shared_ptr<const model::vocab_bytes> vocab;
  /// A step in flight for longer ends the job with an error naming the
  /// sequence (checked by a watchdog every step_timeout / 4, at most 1 s).
  std::chrono::milliseconds step_timeout{120000};
  /// -1: none; else each token's log-probability and its `logprobs` best
  /// alternatives' (job_request::logprobs), passed to on_token.
  std::int32_t logprobs = -1;
  /// With logprobs >= 0: each sequence's prompt is scored as it is read
  /// (stage_step::scores: every prompt token's log-probability after the
  /// ones before it, and its `logprobs` best alternatives), and
  /// on_prompt_scores gets them once, when its prompt is read, before its
  /// first token (a sequence sharing another's prompt gets that one's). A
  /// job that goes on from resident caches (a handoff) does not send them
  /// again: its first coordinator did. The caller turns the prefix cache
  /// off (rows copied from it are not scored).
  bool prompt_logprobs = false;
  std::function<void(std::uint32_t seq,
                     const std::vector<model::token_logprobs>& scores)>
    on_prompt_scores;
  /// Called in the job's context for every token, as it is produced, with
  /// its log-probabilities when the job computes them (else nullptr).
  std::function<void(std::uint32_t seq, std::int32_t token,
                     const model::token_logprobs* logprobs)>
    on_token;
  /// Called in the job's context when sequence `seq`'s tokens are whole
  /// (after each token; speculating, after a round's last): its first
  /// `tokens`, for which its sampler drew `draws` numbers. A job resumed
  /// from there (generated, generated_draws) draws what this one will.
  std::function<void(std::uint32_t seq, std::size_t tokens,
                     std::uint64_t draws)>
    on_settled;
  /// Who re-places the job's stages after a loss (its coordinator); none:
  /// a loss ends the job.
  caf::actor recoverer;
  /// How many losses a job survives before one ends it.
  std::uint32_t max_recoveries = 4;
  /// Called in the job's context after each recovery, with the first token
  /// that follows it (its stall measured).
  std::function<void(const job_recovered&)> on_recovered;
  /// Tokens each sequence generated before this job began (a job taken
  /// over from a coordinating node that died, its tokens replicated): fed
  /// after the prompt (all but the last: its next step or round reads it,
  /// as a running sequence's), the sampler advanced past their draws, so
  /// the job goes on exactly as the first one would have. They are part of
  /// the result (not of generated_tokens) and not passed to on_token.
  std::vector<std::vector<std::int32_t>> generated;
  /// Per sequence, what its sampler drew for `generated` (on_settled's
  /// `draws`; at most workload::max_draws); empty: one number a token at a
  /// temperature above 0 (a run without a draft).
  std::vector<std::uint64_t> generated_draws;
  /// With `generated`: what the job resumes after and since when; reported
  /// as its first recovery (its stall measured to the first new token).
  std::string resumed_after;
  std::string resumed_placement;
  /// With `resumed_after`: KV cache bytes a planned move carried for it
  /// (one that was not over when the job was handed over).
  std::uint64_t resumed_moved_bytes = 0;
  std::chrono::steady_clock::time_point resumed_since{};
  /// When the last of `generated` was known to be out (the last
  /// replicated token's arrival): the stall's gap_s counts from there.
  std::chrono::steady_clock::time_point resumed_last_token{};
  /// With `generated`: the recoveries of the job before it was taken over
  /// (replicated with its tokens); the result lists them first.
  std::vector<job_recovered> earlier_recoveries;
  /// The id its stages know its KV caches by (0: `id`): a job handed over
  /// by a coordinator that stops keeps the first one's there.
  std::uint64_t stage_job = 0;
  /// With `generated`, a job handed over (handoff_atom): the positions
  /// each sequence's caches hold in `stages` (its prompt and every token
  /// generated but the last). It goes on from there, nothing re-fed; its
  /// first recovery (resumed_after) reports the positions kept.
  std::vector<std::uint32_t> resident;
  /// With `resident`: the caches may hold rows past those positions (an
  /// earlier job's drafted tokens): each sequence's first step rewinds.
  bool rewind_first = false;
  /// Turns the result into the reply to (run_atom).
  std::function<caf::message(job_result&)> finish;
};

/// Spawns a job; it answers one (run_atom) with finish(result) and quits.
/// It releases its sequences' KV caches in every stage when done.
caf::actor spawn_job(caf::actor_system& sys, job_setup setup);

/// Runs a job and waits for it (for programs and tests).
job_result run_job(caf::actor_system& sys, job_setup setup);

/// Splits n_layer layers into k contiguous ranges as evenly as possible:
/// the bounds {0, ..., n_layer} (k + 1 of them).
std::vector<std::uint32_t> even_split(std::uint32_t n_layer, std::uint32_t k);

} // namespace exo::workload
