#pragma once

/// From an OpenAI request to a job (core/workload/job_request.hpp): the
/// CAF-free half of the gateway's bridge to the job coordinator
/// (runtime/gateway/job_backend.hpp).
///
///   /v1/completions       prompt as text (BOS as the file asks, special
///                         tokens not parsed, as llama-server)
///   /v1/chat/completions  messages rendered with the model's chat template
///                         (core/workload/chat_prompt.hpp), special tokens
///                         parsed; stops at the template's end of turn
///   max_tokens            -n; absent: 16 for completions (OpenAI's
///                         default), the rest of the context for chat
///   temperature, top_p, seed  the sampler's (no seed: seed_of_id of the
///                         completion's id, random since the id is, and
///                         the same wherever the id is run again)
///   logprobs, top_logprobs  each token's log-probability and its best
///                         alternatives' (job_request::logprobs)
///   echo with logprobs    the prompt's tokens' too
///                         (job_request::prompt_logprobs)
///   prompt_logprobs       likewise (vLLM's; the job's logprobs the larger
///                         count, each part of the answer cut to its own)
///   n                     sequences: the job's sequence i is choice i
///                         (seed + i; the prompt read once, its KV rows
///                         copied to the others)
///
/// Refusals are OpenAI errors: a model without a chat template, a template
/// that fails, a prompt with no tokens and a request longer than the
/// context are 400s naming the problem.

#include "core/gateway/api_error.hpp"
#include "core/gateway/request.hpp"
#include "core/gateway/response.hpp"
#include "core/workload/job_request.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace exo::model {
class gguf_file;
class tokenizer;
} // namespace exo::model

namespace exo::gateway {

/// One model the gateway serves, with what mapping a request needs from
/// its file (read once at start).
struct model_source {
  std::string id;   ///< the id clients name
  std::string path; ///< the GGUF file on this node
  std::shared_ptr<const model::gguf_file> file;
  std::shared_ptr<const model::tokenizer> tokenizer;
  std::uint32_t n_ctx_train = 0; ///< 0: the file states none
  bool has_chat_template = false;
  /// A draft model's file for the requests (speculative decoding); ""
  /// none. The coordinator checks its vocabulary per job.
  std::string draft;
};

/// Reads the header and vocabulary of `path`. Throws std::runtime_error
/// naming the model id and the problem.
model_source load_model_source(const std::string& id, const std::string& path);

/// The model id of a file: its name without the directory and ".gguf".
std::string model_id_of(const std::string& path);

/// A request ready for the coordinator, or the error to answer with.
struct mapped_job {
  workload::job_request job;
  std::int64_t prompt_tokens = 0;
  /// Tokens after which generation has stopped (finish_reason stop): the
  /// vocabulary's end-of-generation set and the template's end of turn.
  std::set<std::int32_t> stop_ids;
  /// The template's end-of-turn markers that are plain text (cut by the
  /// bridge; the request's own stop strings are the server's).
  std::vector<std::string> stop_strings;
  std::optional<api_error> error;
};

/// Bounds of the mapping.
struct mapping_limits {
  /// Context per request (prompt + completion), at most the model's
  /// training context.
  std::uint32_t ctx = 4096;
  /// max_tokens when a completions request gives none.
  std::uint32_t default_completion_tokens = 16;
  /// Every job's KV cache type (job_request::kv_type; "" = f16).
  std::string kv_type;
};

/// The sampler's seed of a request that gives none: a hash of its
/// completion's id (`req.id`, "cmpl-<random>-<n>"). Any node computes the
/// same from the id, so a job that no node holds any more can run again
/// under it, drawing the same numbers (a resumed stream,
/// runtime/gateway/job_backend.hpp).
std::uint64_t seed_of_id(std::string_view id);

/// Maps `req` for `model`. `seed` is used when the request has none.
mapped_job map_request(const model_source& model,
                       const completion_request& req,
                       const mapping_limits& limits, std::uint64_t seed);

/// Answers `req` for `model`. tokenize: `{"count", "max_model_len",
/// "tokens"}`, the tokens a completion (or chat completion) of the prompt
/// reads, or without `add_special` the text's tokens alone; detokenize:
/// `{"prompt"}`, llama.cpp's text of the ids (special tokens as their
/// text). A token outside the vocabulary is a 400 naming it.
tokenize_answer answer_tokenize(const model_source& model,
                                const tokenize_request& req,
                                const mapping_limits& limits);

/// How a job that ran ended: stop when its last token is in `stop_ids`
/// or it was stopped early (`cancelled`: the client closed, a stop string
/// matched), length otherwise (it generated all it was allowed).
finish_reason finish_of(const std::vector<std::int32_t>& tokens,
                        const std::set<std::int32_t>& stop_ids,
                        bool cancelled);

} // namespace exo::gateway
