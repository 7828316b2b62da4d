#pragma once

/// OpenAI request bodies of `POST /v1/completions` and
/// `POST /v1/chat/completions`, parsed into one typed request and
/// validated: every wrong type, out-of-range value, unknown field or model
/// is refused with an api_error that names the field.

#include "core/gateway/api_error.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exo::gateway {

/// The endpoint a request came to.
enum class endpoint_kind {
  completions,      ///< `/v1/completions`: a prompt, text out.
  chat_completions, ///< `/v1/chat/completions`: messages, a message out.
};

/// One message of a chat: the content parts of type "text" joined.
struct chat_message {
  /// system, developer, user, assistant or tool.
  std::string role;
  std::string content;
  /// The optional participant name.
  std::string name;
};

/// A validated completion request, what the coordinator runs.
/// The most alternatives a response names per token (OpenAI's
/// top_logprobs; the jobs' model::max_top_logprobs).
constexpr std::int64_t max_top_logprobs = 20;
/// The most tokens a logit_bias names (model::max_logit_bias).
constexpr std::size_t max_logit_bias = 1024;

struct completion_request {
  endpoint_kind kind = endpoint_kind::completions;
  std::string model;
  /// The prompt (completions only).
  std::string prompt;
  /// Or the prompt as token ids of the model's vocabulary (completions
  /// only: `"prompt": [ids]` or `[[ids]]`), read as given (no BOS added);
  /// then `prompt` is empty.
  std::vector<std::int32_t> prompt_ids;
  /// The conversation (chat only; at least one message).
  std::vector<chat_message> messages;
  /// Most tokens to generate (max_tokens or max_completion_tokens); absent:
  /// until the end of text or the context.
  std::optional<std::int64_t> max_tokens;
  /// Sampling temperature in [0, 2]; 0 is greedy.
  double temperature = 1.0;
  /// Nucleus sampling mass in (0, 1].
  double top_p = 1.0;
  /// The sampler's seed, when the client chose one.
  std::optional<std::int64_t> seed;
  /// vLLM's sampling extras (llama-server takes them too): the best
  /// `top_k` tokens only (absent: 40, as llama-server; 0 or -1: the whole
  /// vocabulary), `min_p` in [0, 1] (tokens at least min_p times as likely
  /// as the best), `repetition_penalty` in (0, 2] over the prompt's and
  /// generated tokens (1: none).
  std::optional<std::int64_t> top_k;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  /// OpenAI's penalties, each in [-2, 2]: a token's logit loses
  /// frequency_penalty for every time the choice generated it so far, and
  /// presence_penalty once if it did (model::adjust_logits).
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  /// response_format {"type": "json_object"}: JSON mode, the text is one
  /// JSON object (model::sampler_params::json).
  bool json_object = false;
  /// OpenAI's logit_bias: token id -> bias in [-100, 100] added to its
  /// logit; at most max_logit_bias tokens (the vocabulary is the mapping's
  /// check).
  std::map<std::int32_t, double> logit_bias;
  /// Up to four stop strings, none empty (each choice stops on its own).
  std::vector<std::string> stop;
  /// Choices to generate (OpenAI's n, 1 to request_limits::max_choices):
  /// sequences of one job, the prompt read once, choice i sampled with
  /// seed + i.
  std::uint32_t n = 1;
  /// Answer as server-sent events.
  bool stream = false;
  /// With stream: one last chunk carrying the usage.
  bool include_usage = false;
  /// The end user's identifier, for logs.
  std::string user;
  /// -1: no log-probabilities; else each generated token's and its
  /// `logprobs` best alternatives' (completions' `logprobs: N`, chat's
  /// `logprobs: true` with `top_logprobs: N`; 0 to max_top_logprobs).
  std::int32_t logprobs = -1;
  /// Completions' prompts after the first (OpenAI's array of strings, or
  /// of token-id arrays; the first is `prompt` or `prompt_ids`, and all
  /// are of one form): the server runs each prompt as a request of its
  /// own (its n choices, its job), and the answer's choice p * n + j is
  /// prompt p's choice j, the usage their sum. A backend sees one prompt
  /// a request (these empty).
  std::vector<std::string> more_prompts;
  std::vector<std::vector<std::int32_t>> more_prompt_ids;
  /// The request's prompts (1 and the more ones).
  std::size_t prompt_count() const {
    return 1 + more_prompts.size() + more_prompt_ids.size();
  }
  /// The answer's choices: n for each prompt.
  std::uint32_t total_choices() const {
    return n * static_cast<std::uint32_t>(prompt_count());
  }
  /// Completions' `echo`: each choice's text starts with the prompt (a
  /// prompt of token ids as their text). With logprobs the choice's
  /// logprobs start with the prompt's tokens (the first one's null), as
  /// scoring a text reads them (lm-evaluation-harness); max_tokens may
  /// then be 0.
  bool echo = false;
  /// vLLM's `prompt_logprobs: N` (completions and chat): -1 none; else the
  /// prompt's tokens after the first with their log-probability, their
  /// rank in the vocabulary and their row's N best alternatives (0 to
  /// max_top_logprobs), each choice's `prompt_logprobs` for completions,
  /// the answer's for chat (the rendered template's tokens). Not with
  /// stream (vLLM's rule: no chunk has a place for them).
  std::int32_t prompt_logprobs = -1;

  // Set by the server, not read from the body:
  /// The completion's id (the chunks' "id"): the name of its job, by which
  /// a client whose gateway node died resumes the stream through another
  /// node's gateway.
  std::string id;
  /// A resumed stream (resume_point): follow job `id` instead of starting
  /// one, and leave out the first `resume_after[i]` bytes of choice i's
  /// text (what the client already has; empty: nothing).
  bool resume = false;
  std::vector<std::uint64_t> resume_after;
  /// With echo: the prompt's text, which each choice's text starts with
  /// (counted in its bytes like the completion's: a resumed client that
  /// has it does not get it again); the more prompts' in more_echo_texts.
  std::string echo_text;
  std::vector<std::string> more_echo_texts;
};

/// Where a client resumes a stream: the request's headers
/// `X-Exo-Resume: <the completion's id>` and `Last-Event-ID: <bytes of
/// text received>` (each text chunk of a stream carries that count as its
/// SSE `id:`; with n > 1 choices, the counts of every choice joined by
/// commas, "12,0,40"). The body is the original request again.
struct resume_point {
  std::string id;
  /// Bytes received per choice; empty: none (no Last-Event-ID).
  std::vector<std::uint64_t> after;
};

/// Reads the resume headers (empty views: the header is absent). Returns
/// nothing without either header; sets `error` (status 400, else 0) and
/// returns nothing for a malformed id (1 to 64 letters, digits, '.', '_'
/// or '-'), a Last-Event-ID that is not 1 to 256 decimal byte counts
/// joined by commas, or a Last-Event-ID without X-Exo-Resume.
/// (That it names as many counts as the request has choices is the
/// server's check.)
std::optional<resume_point> parse_resume(std::string_view resume,
                                         std::string_view last_event_id,
                                         api_error& error);

/// Bounds a request must respect.
struct request_limits {
  /// Largest body accepted (413 above).
  std::size_t max_body_bytes = 1 << 20;
  /// Largest max_tokens accepted (the context of the largest model).
  std::int64_t max_tokens = 1 << 17;
  /// Most chat messages.
  std::size_t max_messages = 1024;
  /// Largest n (choices per request).
  std::uint32_t max_choices = 16;
  /// Most prompts in one completions request (OpenAI's array of prompts),
  /// and most choices in all (prompts times n).
  std::size_t max_prompts = 64;
};

/// A parse result: a request, or the error to answer with.
struct parsed_request {
  std::optional<completion_request> request;
  api_error error;
  explicit operator bool() const noexcept { return request.has_value(); }
};

/// `POST /tokenize` and `POST /detokenize` (vLLM's endpoints beside the
/// OpenAI API): a prompt's tokens as a completion reads them, and the text
/// of token ids.
struct tokenize_request {
  std::string model;
  /// tokenize: a completion's prompt (`prompt`: text) or a chat's
  /// (`messages`: the prompt its template renders); detokenize: `tokens`.
  endpoint_kind kind = endpoint_kind::completions;
  std::string prompt;
  std::vector<chat_message> messages;
  /// tokenize: the BOS (and what else the vocabulary adds) as a
  /// completion's prompt gets it (vLLM's add_special_tokens, default
  /// true); false: the text's tokens alone.
  bool add_special = true;
  bool detokenize = false;
  /// detokenize: the ids to turn into text.
  std::vector<std::int32_t> tokens;
};

/// The answer to a /tokenize or /detokenize request: its JSON body, or
/// the error.
struct tokenize_answer {
  std::string body;
  std::optional<api_error> error;
};

/// A tokenize parse result.
struct parsed_tokenize {
  std::optional<tokenize_request> request;
  api_error error;
  explicit operator bool() const noexcept { return request.has_value(); }
};

/// Whether a model id is served here.
using model_filter = std::function<bool(const std::string&)>;

/// Parses and validates the body of a request to `kind`. `known_model`
/// decides which model ids exist (404 for the others); an empty filter
/// accepts every id.
parsed_request parse_request(endpoint_kind kind, std::string_view body,
                             const request_limits& limits,
                             const model_filter& known_model = {});

/// Parses the body of `POST /tokenize` (`detokenize` false: "model" and
/// "prompt" or "messages", optional "add_special_tokens") or
/// `POST /detokenize` ("model" and "tokens"), refusing what parse_request
/// refuses (bad JSON, a body too large, unknown fields, an unknown model).
parsed_tokenize parse_tokenize(bool detokenize, std::string_view body,
                               const request_limits& limits,
                               const model_filter& known_model = {});

} // namespace exo::gateway
