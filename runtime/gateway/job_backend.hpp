#pragma once

/// The gateway's completion_backend over the job coordinator
/// (actors/workload/job_coordinator.hpp): every completion becomes one job
/// of the node's coordinator, which places it on the cluster's devices.
///
///   server thread --complete(req, sink)--> spawns a bridge actor, returns
///   bridge: map_request (core/gateway/job_mapping.hpp: prompt or chat,
///           max_tokens, sampling, context) -- refused: sink.fail(400)
///     --(run_atom, job_request, bridge)--> coordinator
///     <-- job_started{id}    remembered for cancelling
///     <-- job_prompt_scores  (echo with logprobs) sink.prompt_logprobs:
///                            the prompt's tokens, each scored
///     <-- job_token{piece}   sink.token(piece); the end-of-turn token
///                            and the vocabulary's end of generation
///                            are not text
///     <-- job_report         sink.finish(stop | length, prompt tokens)
///      or error              invalid_argument: 400; before the job
///                            started (placement, no device can take it):
///                            503; after: 500
///   a resumed stream (req.resume: X-Exo-Resume, its node died) follows
///   the job instead: --(attach_atom, id, prompt, bridge, true)-->
///   coordinator, which finds it here or on another node; the tokens come
///   again from the first (job_token::index: those passed on are dropped,
///   a gap fails the stream) and the sink leaves out the bytes the client
///   has; a job that cannot go on (cancelled, failed): 409, another
///   prompt than the job's: 404. A job no node has (its node died before a
///   backup held it, backups are off, a lone node restarted, its end is
///   no longer kept: unknown_handle) runs again here, once, under the same
///   id: the job is named by the completion's id (req.id) and, when the
///   request gives no seed, seeded by it (seed_of_id), so the same request
///   draws the same tokens again (on the same kinds of devices) and the
///   client gets the rest of its text.
///   sink closed (client gone, stop string, server stopping): the sink's
///   on_close sends the bridge a message; it cancels the job
///   ((cancel_atom, id) to the coordinator), which stops at its next token
///   and frees its KV caches. A streamed job whose client's connection
///   dropped is left instead, with `resume_grace` (> 0): (cancel_atom, id,
///   bridge, grace ms) to the coordinator that runs it, which cancels it
///   once the grace has passed unless a client follows it again (a resume
///   through this or any node).
///
/// Neither side blocks: the server's threads only spawn actors and send
/// messages (asynchronous), the actors only call the sink (which never
/// blocks). The sink's back-pressure (`full`) is not passed on: a job
/// cannot pause; the server drops a client whose buffer overruns its hard
/// limit, and that cancels the job.

#include "core/gateway/job_mapping.hpp"
#include "runtime/gateway/completion_backend.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace exo::gateway {

/// Runs completions as jobs of `coordinator` (spawned in `sys`). As a
/// metrics source: per served model with a draft, the tokens its draft
/// proposed and those the model kept (speculative decoding), summed over
/// the jobs that ended.
class job_backend : public completion_backend, public metrics_source {
public:
  /// `node`: the node's name, in its log lines.
  job_backend(caf::actor_system& sys, caf::actor coordinator,
              std::vector<model_source> models, mapping_limits limits = {},
              std::chrono::milliseconds resume_grace = {},
              std::string node = {});
  ~job_backend() override;

  void complete(const completion_request& req,
                std::shared_ptr<token_sink> sink) override;

  /// /tokenize and /detokenize with the served models' vocabularies
  /// (answer_tokenize).
  tokenize_answer tokenize(const tokenize_request& req) override;

  /// The models, for server_options::models.
  std::vector<model_entry> entries() const;

  /// exo_speculative_proposed_tokens_total and
  /// exo_speculative_accepted_tokens_total, by model (models with a draft).
  void collect(prometheus::text_writer& w) override;

  struct state;

private:
  std::shared_ptr<state> state_;
};

} // namespace exo::gateway
