#pragma once

/// Chat prompts for every way of running a model: `exo-model run --chat`,
/// `exo-node run --chat`, the console's `run --chat` and the gateway's
/// `POST /v1/chat/completions` all build their prompt here, so the four
/// give the model the same tokens for the same conversation.
///
///   messages --(the file's tokenizer.chat_template, core/chat;
///               bos_token/eos_token from the vocabulary;
///               add_generation_prompt)--> text
///   text --(tokenizer, parse_special: the template's control tokens
///           become their ids)--> prompt tokens
///
/// As llama.cpp's common_chat_templates_apply, a BOS that the template
/// writes itself is dropped from the text when the tokenizer adds one
/// (so the prompt starts with exactly one BOS). Generation stops at the
/// tokenizer's end-of-generation set and at the template's end-of-turn
/// markers (chat::stop_strings): those that are one special token become
/// stop tokens, the others stop strings on the generated text.
///
/// Plain data and functions: no actor system.

#include "core/chat/chat.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace exo::model {
class gguf_file;
class tokenizer;
} // namespace exo::model

namespace exo::workload {

/// A rendered conversation and where its answer ends.
struct chat_prompt {
  /// The template's output, to be tokenized with parse_special.
  std::string text;
  /// End-of-turn markers that are one special token (beside the
  /// tokenizer's end-of-generation set).
  std::vector<std::int32_t> stop_tokens;
  /// End-of-turn markers that are plain text.
  std::vector<std::string> stop_strings;
};

/// The conversation of a one-shot chat: an optional system message, then
/// the user's.
std::vector<chat::message> chat_messages(const std::string& system,
                                         const std::string& user);

/// Renders `messages` with the chat template of `file` for `tok`, with the
/// assistant's turn opened. Throws job_error (core/workload/
/// job_request.hpp) when the file has no tokenizer.chat_template, or
/// naming the template's line and column when it fails to render (also
/// for raise_exception).
chat_prompt render_chat(const model::gguf_file& file,
                        const model::tokenizer& tok,
                        const std::vector<chat::message>& messages);

/// The prompt's tokens: with `special` (a rendered chat), llama_tokenize
/// with add_special and parse_special; otherwise the text encoded with a
/// BOS when the file asks for one, special tokens not parsed.
std::vector<std::int32_t> prompt_tokens(const model::tokenizer& tok,
                                        const std::string& text,
                                        bool special);

} // namespace exo::workload
