#pragma once

/// A job request and its validation: what every way of starting a job (the
/// console's `run`, `exo-node run`, later the HTTP gateway) asks for, and
/// the rules it must pass before anything is placed. Plain data and pure
/// functions, no actor system: the job coordinator
/// (actors/workload/job_coordinator.hpp) calls prepare_job() on every
/// request, so both paths refuse the same request with the same message.
///
/// The rules, each failing with job_error naming the problem:
///   - the model file is readable as a GGUF model with a tokenizer;
///   - the prompt gives at least one token;
///   - sequences in [1, max_job_sequences];
///   - stages 0 (the solver's plan) or in [1, n_layer];
///   - temperature finite in [0, max_temperature], top-p in [0, 1],
///     min-p in [0, 1], repetition penalty in (0, 2], frequency and
///     presence penalties in [-2, 2], a logit bias of at
///     most model::max_logit_bias tokens of the vocabulary (ascending,
///     distinct), each -100 to 100;
///   - logprobs -1 or in [0, model::max_top_logprobs]; prompt_logprobs
///     only with logprobs;
///   - the KV cache type one of f16, q8_0, f32 (q8_0: the model's heads a
///     multiple of 32 wide);
///   - the context (context_for): --ctx at most the model's training
///     context, and prompt + n_gen at most --ctx, or at most the training
///     context without --ctx.

#include "backends/backend.hpp"
#include "core/model/sampler.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace exo::model {
class llama_model;
class tokenizer;
} // namespace exo::model

namespace exo::workload {

struct run_options;

/// Most sequences one job keeps in flight.
constexpr std::uint32_t max_job_sequences = 256;

/// Highest sampling temperature a job accepts.
constexpr float max_temperature = 100.0f;

/// A request that breaks a rule; what() names the rule and the values.
class job_error : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

/// What a caller asks for: M sequences of one prompt through a model.
struct job_request {
  std::string model;  ///< path of the GGUF file on the coordinating node
  std::string prompt; ///< text, tokenized with the model's vocabulary
  /// The prompt as token ids of the model's vocabulary (a client's token
  /// array: /v1/completions with `"prompt": [ids]`), read as they are;
  /// when given, `prompt` is empty.
  std::vector<std::int32_t> prompt_ids;
  std::uint32_t n_gen = 16; ///< tokens to generate per sequence
  model::sampler_params sampling;
  std::uint32_t stages = 0;    ///< 0: the solver's plan; K: an even split
  std::uint32_t sequences = 1; ///< copies of the prompt in flight at once
  std::uint32_t n_ctx = 0;     ///< 0: prompt + n_gen
  /// At most this many sequences per step (batched decoding); 0: as many
  /// as a step carries.
  std::uint32_t batch = 0;
  /// The sequences' copies of the prompt are computed once (the stages
  /// copy its KV rows: the same tokens); false: each computes its own.
  bool share_prompt = true;
  /// The stages' prefix cache: rows of the prompt that an earlier job read
  /// are copied, not computed (core/workload/prefix_key.hpp); false: the
  /// whole prompt is computed.
  bool prefix_cache = true;
  bool keep_logits = false;    ///< report sequence 0's last logits
  /// Speculative decoding: the draft model's path on the coordinating
  /// node ("" = none) and its proposals per round (1 to
  /// max_draft_tokens).
  std::string draft;
  std::uint32_t draft_tokens = 4;
  /// The prompt is a rendered chat (core/workload/chat_prompt.hpp): its
  /// special tokens are parsed (prompt_tokens with `special`).
  bool special = false;
  /// Tokens that end a sequence besides the vocabulary's end-of-generation
  /// set (a chat template's end of turn).
  std::vector<std::int32_t> stop_tokens;
  /// How the stages' KV caches store keys and values (--kv-type): "" or
  /// "f16" (llama.cpp's default), "q8_0" (llama.cpp's --cache-type-k/-v
  /// q8_0: 53% of the memory, its bits; heads a multiple of 32 wide) or
  /// "f32".
  std::string kv_type;
  /// The client's name for the job (console `run --id NAME`): `attach NAME`
  /// on any node finds it, also after its coordinating node died and
  /// another took it over. "" = none (it is still found as NODE:ID).
  std::string name;
  /// -1: none; else every generated token comes with its log-probability
  /// and its `logprobs` best alternatives' (0 to model::max_top_logprobs;
  /// model::token_logprobs: OpenAI's logprobs / top_logprobs).
  std::int32_t logprobs = -1;
  /// With logprobs: the prompt's tokens' too, each after the ones before
  /// it (the first has none), with its `logprobs` best alternatives
  /// (job_prompt_scores, before the first token of each sequence):
  /// OpenAI's completions with `echo`, what scoring a text reads (every
  /// row of the prompt goes through the output head; the prefix cache is
  /// not claimed from).
  bool prompt_logprobs = false;
};

/// What names a job's prompt to a client that follows it (attach: a client
/// resumes only its own request): the prompt's text, or for a prompt of
/// token ids a NUL byte, "tokens:" and the ids joined by commas (no text
/// prompt a client sends through the gateway starts with a NUL byte's
/// "tokens:" and means those ids).
std::string prompt_identity(const job_request& r);

/// What is wrong with the log-probabilities a peer sent beside a job's
/// `tokens` (job_replica, job_progress, job_handoff), "" when nothing: none
/// when `logprobs` is -1; else one per token, each with at most `logprobs`
/// alternatives (ids not negative: a vocabulary's bound is the user's
/// check), every number finite.
std::string logprobs_problem(
  const std::vector<std::vector<std::int32_t>>& tokens,
  const std::vector<std::vector<model::token_logprobs>>& lp,
  std::int32_t logprobs);

/// Longest node name in a job's key (as a member's name).
constexpr std::size_t max_key_node = 64;

/// Most copies of one job a replica names (job_replica::lineage): a longer
/// line keeps its first and its last ones.
constexpr std::size_t max_job_lineage = 16;

/// `lineage` with `key` (the copy that ran last) added, the middle ones
/// dropped past max_job_lineage.
std::vector<std::string> extend_lineage(std::vector<std::string> lineage,
                                        const std::string& key);

/// What is wrong with `key` as a job's key from a peer ("NODE:ID": 1 to
/// max_key_node bytes of name, ':', then a decimal id of 1 to 20 digits
/// that fits 64 bits), "" when nothing.
std::string job_key_problem(const std::string& key);

/// The most proposals a round of speculative decoding may ask for.
constexpr std::uint32_t max_draft_tokens = 31;

/// The most numbers a sequence's sampler draws for `tokens` tokens of a
/// job whose draft proposes `draft_tokens` a round: a round keeps at least
/// one token and draws its proposals, a verdict on each and one token more
/// (speculative sampling, model::keep_proposal); a plain run draws one a
/// token. What a peer says a sequence drew (job_replica::draws) is held to
/// it: a sampler skips that many numbers one by one. (`draft_tokens` above
/// max_draft_tokens counts as that.)
std::uint64_t max_draws(std::uint64_t tokens, std::uint32_t draft_tokens);

/// Longest job name (run --id).
constexpr std::size_t max_job_name = 64;

/// Checks a job name: 1 to max_job_name letters, digits, '.', '_' or '-'
/// (no ':', which joins a node and an id). Throws job_error.
void check_job_name(const std::string& name);

/// The job part of a program's or console command's options. With
/// --chat the prompt becomes the model's chat prompt (render_chat of
/// --system and --prompt; reads the model file): throws job_error when the
/// model cannot be read or has no chat template.
job_request make_job_request(const run_options& o);

/// What the rules read from a model.
struct model_limits {
  std::uint32_t n_layer = 0;
  std::uint32_t n_vocab = 0;
  std::uint32_t n_ctx_train = 0; ///< 0: the model states none
};

/// The context per sequence a job of `prompt_tokens` tokens plus `n_gen`
/// needs: `n_ctx` when given, else prompt + n_gen. Throws job_error when
/// `n_ctx` exceeds the training context, or prompt + n_gen exceeds `n_ctx`
/// (or the training context when `n_ctx` is 0).
std::uint32_t context_for(std::size_t prompt_tokens, std::uint32_t n_gen,
                          std::uint32_t n_ctx, const model_limits& limits);

/// Checks the sampling parameters; throws job_error.
void check_sampling(const model::sampler_params& p);

/// The KV cache type a request names ("" is f16); throws job_error for a
/// name that is none.
backend::kv_type kv_type_of(const job_request& r);

/// Checks every rule that does not need the model file (sequences, stages,
/// sampling, context) and returns the context per sequence. Throws
/// job_error.
std::uint32_t validate(const job_request& r, std::size_t prompt_tokens,
                       const model_limits& limits);

/// A request that passed every rule, with what its checks loaded.
struct prepared_job {
  job_request request;
  std::shared_ptr<const model::llama_model> model;
  std::shared_ptr<const model::tokenizer> tokenizer;
  /// The draft model (request.draft), its vocabulary checked: the same
  /// pieces for every id.
  std::shared_ptr<const model::llama_model> draft;
  std::vector<std::int32_t> prompt; ///< the prompt's tokens
  std::uint32_t n_ctx = 0;          ///< context per sequence
};

/// Loads the draft model at `path` for speculative decoding with `m`:
/// throws job_error unless its vocabulary is the model's piece for piece
/// and its training context holds `n_ctx` (0: not checked).
std::shared_ptr<const model::llama_model>
load_draft(const std::string& path, const model::llama_model& m,
           const model::tokenizer& tok, std::uint32_t n_ctx);

/// Loads the model and its tokenizer (once per version of the file: the
/// last few files stay loaded, shared by the jobs prepared from them),
/// tokenizes the prompt and applies every rule. Throws job_error naming
/// the problem (a model that cannot be read included).
prepared_job prepare_job(job_request r);

} // namespace exo::workload
