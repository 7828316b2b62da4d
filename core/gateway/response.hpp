#pragma once

/// OpenAI response shapes: completion and chat.completion objects, the
/// streaming chunks (`text_completion`, `chat.completion.chunk`) in
/// server-sent-event framing ending in `data: [DONE]`, the model list and
/// the `/health` body (llama-server's).

#include "core/gateway/request.hpp"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exo::gateway {

/// Why generation ended.
enum class finish_reason {
  stop,   ///< End of text or a stop string.
  length, ///< max_tokens or the context was reached.
};

/// "stop" or "length".
const char* to_string(finish_reason r);

/// Token counts of one request.
struct usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  /// Of the prompt's tokens, those whose KV rows came from the prefix
  /// cache (`prompt_tokens_details.cached_tokens`, as OpenAI's).
  std::int64_t cached_tokens = 0;
};

/// What identifies a response: id, creation time, model.
struct response_head {
  std::string id;
  /// Seconds since the Unix epoch.
  std::int64_t created = 0;
  std::string model;
};

/// A generated token's log-probability as a response shows it (the
/// request's logprobs): its bytes (a token may hold part of a UTF-8
/// character) and its best alternatives', best first.
struct token_logprob {
  struct alternative {
    std::string token;
    float logprob = 0.0f;
    std::int32_t id = -1; ///< the token id (-1: not known)
  };
  std::string token;
  float logprob = 0.0f;
  std::vector<alternative> top;
  /// The token id (-1: not known) and its rank in its row (tokens at
  /// least as likely, itself included; 0: not known): a prompt's scores
  /// have both (prompt_logprobs_json).
  std::int32_t id = -1;
  std::uint32_t rank = 0;
  /// Where its bytes start in the choice's text (completions'
  /// text_offset; set by the server's sink).
  std::uint64_t text_offset = 0;
  /// false: a token without a log-probability (an echoed prompt's first:
  /// nothing comes before it), shown as null in token_logprobs and
  /// top_logprobs.
  bool scored = true;
};

/// One choice of a whole answer.
struct choice_result {
  std::string text;
  finish_reason reason = finish_reason::length;
  /// The request asked for log-probabilities: its tokens'.
  bool with_logprobs = false;
  std::vector<token_logprob> logprobs{};
  /// vLLM's prompt_logprobs (the request's): its prompt's tokens, the
  /// first unscored, with ids, ranks and the alternatives asked for.
  std::optional<std::vector<token_logprob>> prompt_logprobs{};
};

/// A whole (non-streamed) answer: a `text_completion` object for
/// completions, a `chat.completion` object for chat, its choices with
/// their indices in order, as compact JSON. `u` counts the completion
/// tokens of every choice. A choice's `logprobs` is null, or with
/// with_logprobs its tokens' as OpenAI shows them: for chat
/// `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
/// "logprob", "bytes"}]}], "refusal": null}`, for completions
/// `{"tokens", "token_logprobs", "top_logprobs": [{token: logprob}],
/// "text_offset"}` (each token's text_offset: bytes of the choice's text
/// before it). A token's text
/// is its bytes with what is not whole UTF-8 replaced (valid_utf8); chat's
/// `bytes` are the token's own. With vLLM's prompt_logprobs, each
/// completions choice's `prompt_logprobs` (chat: the answer's, choice 0's)
/// is `null` for the prompt's first token, then per token an object from
/// token ids (decimal strings) to `{"logprob", "rank", "decoded_token"}`:
/// the prompt's token (its rank in the vocabulary) and its alternatives
/// (rank k for the k-th best; one that is the prompt's token is not
/// repeated).
std::string completion_body(endpoint_kind kind, const response_head& head,
                            const std::vector<choice_result>& choices,
                            const usage& u);

/// One streamed chunk carrying `text` of choice `index` (and the assistant
/// role when `first`, the choice's first chunk, for chat), as an SSE
/// event. With `include_usage` the chunk has `"usage": null`, as OpenAI's.
/// With `logprobs` the chunk's `logprobs` holds those tokens' (as
/// completion_body shows them).
std::string text_chunk(endpoint_kind kind, const response_head& head,
                       std::uint32_t index, std::string_view text, bool first,
                       bool include_usage,
                       const std::vector<token_logprob>* logprobs = nullptr);

/// The chunk that ends choice `index` with its finish_reason, as an SSE
/// event.
std::string finish_chunk(endpoint_kind kind, const response_head& head,
                         std::uint32_t index, finish_reason reason,
                         bool include_usage);

/// The last chunk of a stream with include_usage: no choices, the usage;
/// as an SSE event.
std::string usage_chunk(endpoint_kind kind, const response_head& head,
                        const usage& u);

/// An error inside a started stream: `data: {"error":...}` as an SSE event.
std::string error_event(const api_error& e);

/// `data: <json>\n\n`.
std::string sse_event(std::string_view json);

/// `data: [DONE]\n\n`, the end of every stream.
std::string sse_done();

/// One model of `/v1/models`.
struct model_entry {
  std::string id;
  std::int64_t created = 0;
  std::string owned_by = "exo";
};

/// `{"object":"list","data":[{"id","object":"model","created",
/// "owned_by"}]}`.
std::string models_body(const std::vector<model_entry>& models);

/// `/health` as llama-server answers it: `{"status":"ok"}` when ready,
/// otherwise its 503 error body naming `why` ("Loading model").
std::string health_body(bool ready, std::string_view why = "Loading model");

/// Makes response ids: a prefix, a random part fixed per generator and a
/// counter ("chatcmpl-3f2a9c01d4e5b6a7-12"). Thread-safe.
class id_generator {
public:
  id_generator();
  /// Seeded explicitly (tests).
  explicit id_generator(std::uint64_t nonce);
  /// "cmpl-..." for completions, "chatcmpl-..." for chat.
  std::string next(endpoint_kind kind);

private:
  std::string nonce_;
  std::atomic<std::uint64_t> counter_{0};
};

/// Applies stop strings to text that arrives in pieces: text that could be
/// the start of a stop string is held back until it is known not to be;
/// on a match everything from the stop string on is dropped (OpenAI does
/// not return the stop string). Also holds back an incomplete UTF-8
/// sequence at the end, so every piece it releases is whole characters.
class stop_filter {
public:
  explicit stop_filter(std::vector<std::string> stops = {});

  /// Adds `piece`; returns the text that may be sent now.
  std::string feed(std::string_view piece);

  /// Whether a stop string was found (feed() returns "" afterwards).
  bool stopped() const noexcept { return stopped_; }

  /// At the end of generation: the text still held back.
  std::string flush();

private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

/// Length of the longest prefix of `s` that does not end inside a UTF-8
/// sequence (an incomplete trailing sequence of at most 3 bytes is left
/// out; invalid bytes count as whole characters).
std::size_t complete_utf8_prefix(std::string_view s);

/// `s` with every byte that does not belong to a well-formed UTF-8
/// character replaced by U+FFFD: the text a client decodes, byte for byte
/// (a resumed stream's byte count is of this text).
std::string valid_utf8(std::string_view s);

} // namespace exo::gateway
