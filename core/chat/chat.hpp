#pragma once

/// Chat prompts from a model's chat template (GGUF `tokenizer.chat_template`
/// or tokenizer_config.json's `chat_template`), rendered byte for byte as
/// Hugging Face's apply_chat_template / @huggingface/jinja do, and the
/// end-of-turn markers at which generation stops.
///
/// ```
/// nlohmann::ordered_json messages = nlohmann::ordered_json::array({
///   {{"role", "system"}, {"content", "Be brief."}},
///   {{"role", "user"}, {"content", "Hello"}}});
/// chat::options opts;
/// opts.add_generation_prompt = true;
/// opts.bos_token = "<|begin_of_text|>";
/// auto prompt = chat::render(template_source, messages, opts);
/// ```

#include "core/chat/error.hpp"
#include "core/chat/interpreter.hpp"
#include "core/chat/template.hpp"

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace exo::chat {

/// What a chat template is rendered with besides the messages.
struct options {
  /// Appends the opening of the assistant's turn.
  bool add_generation_prompt = false;
  /// The tokenizer's BOS / EOS text; absent: the variable is undefined.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  /// More variables (tools, enable_thinking, date_string...): a JSON object.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  /// Resource limits of the render.
  chat::limits limits;
};

/// One message in the usual {role, content} form.
struct message {
  std::string role;
  std::string content;
};

/// `messages` as the JSON array a template reads.
nlohmann::ordered_json to_json(const std::vector<message>& messages);

/// Renders `tmpl` for `messages` (a JSON array of message objects).
std::string render(const compiled_template& tmpl,
                   const nlohmann::ordered_json& messages, const options& opts);

/// Parses and renders `template_source` in one step. Throws template_error.
std::string render(const std::string& template_source,
                   const nlohmann::ordered_json& messages, const options& opts);

/// The text a template puts after an assistant message's content, up to
/// the next turn: found by rendering a probe conversation (user, assistant)
/// and reading what follows the assistant's content, without surrounding
/// whitespace: a marker that starts with '<' ends at its first '>' (what
/// follows opens the next turn), any other at the first whitespace
/// ("<|im_end|>", "<|eot_id|>", "</s>"). Empty when the template puts
/// nothing there or cannot render the probe.
std::string end_of_turn(const compiled_template& tmpl, const options& opts);

/// The strings at which generation should stop: the template's end of turn
/// and the EOS text, without duplicates or empty strings, in that order.
std::vector<std::string> stop_strings(const compiled_template& tmpl,
                                      const options& opts);

/// The assistant-turn opening that add_generation_prompt appends for
/// `messages` (the difference of the two renders); empty when the template
/// ignores the flag.
std::string generation_prompt(const compiled_template& tmpl,
                              const nlohmann::ordered_json& messages,
                              const options& opts);

/// Where `text` first contains one of `stops`: {offset, length}, or
/// {npos, 0}. Lets a generator cut its output at an end-of-turn marker.
std::pair<std::size_t, std::size_t>
find_stop(const std::string& text, const std::vector<std::string>& stops);

} // namespace exo::chat
