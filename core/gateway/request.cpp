#include "core/gateway/request.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <set>

namespace exo::gateway {

namespace {

using json = nlohmann::json;

/// Thrown inside the parser only; parse_request turns it into its result.
struct refused {
  api_error error;
};

[[noreturn]] void refuse(std::string message, std::string param,
                         std::string code = "invalid_value") {
  throw refused{invalid_request(std::move(message), std::move(param),
                                std::move(code))};
}

const char* type_name(const json& v) {
  return v.type_name(); // "null", "object", "array", "string", ...
}

[[noreturn]] void wrong_type(const std::string& param, const json& v,
                             const char* expected) {
  refuse("Invalid type for '" + param + "': expected " + expected
           + ", but got " + type_name(v) + ".",
         param, "invalid_type");
}

std::string get_string(const json& v, const std::string& param) {
  if (!v.is_string())
    wrong_type(param, v, "a string");
  return v.get<std::string>();
}

bool get_bool(const json& v, const std::string& param) {
  if (!v.is_boolean())
    wrong_type(param, v, "a boolean");
  return v.get<bool>();
}

double get_number(const json& v, const std::string& param, double lo,
                  double hi) {
  if (!v.is_number())
    wrong_type(param, v, "a number");
  double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    refuse("Invalid value for '" + param + "': " + v.dump()
             + " is not in [" + json(lo).dump() + ", " + json(hi).dump()
             + "].",
           param);
  return x;
}

std::int64_t get_integer(const json& v, const std::string& param) {
  if (v.is_number_integer())
    return v.is_number_unsigned()
               && v.get<std::uint64_t>()
                    > std::uint64_t(std::numeric_limits<std::int64_t>::max())
             ? (refuse("Invalid value for '" + param + "': " + v.dump()
                         + " is too large.",
                       param),
                0)
             : v.get<std::int64_t>();
  // 16.0 is an integer too (JSON has one number type).
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15)
      return static_cast<std::int64_t>(d);
  }
  wrong_type(param, v, "an integer");
}

/// Text of a message's content: a string, or an array of parts of which
/// only {"type":"text","text":...} are understood.
std::string get_content(const json& v, const std::string& param) {
  if (v.is_string())
    return v.get<std::string>();
  if (!v.is_array())
    wrong_type(param, v, "a string or an array of content parts");
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto p = param + "[" + std::to_string(i) + "]";
    auto& part = v[i];
    if (!part.is_object())
      wrong_type(p, part, "an object");
    auto t = part.find("type");
    if (t == part.end())
      refuse("Missing required parameter: '" + p + ".type'.", p + ".type",
             "missing_required_parameter");
    auto type = get_string(*t, p + ".type");
    if (type != "text")
      refuse("Content parts of type '" + type
               + "' are not supported: only 'text'.",
             p + ".type", "unsupported_value");
    auto text = part.find("text");
    if (text == part.end())
      refuse("Missing required parameter: '" + p + ".text'.", p + ".text",
             "missing_required_parameter");
    out += get_string(*text, p + ".text");
  }
  return out;
}

std::vector<chat_message> get_messages(const json& v,
                                       const request_limits& limits) {
  if (!v.is_array())
    wrong_type("messages", v, "an array");
  if (v.empty())
    refuse("Invalid 'messages': empty array. Expected an array with minimum "
           "length 1.",
           "messages", "empty_array");
  if (v.size() > limits.max_messages)
    refuse("Invalid 'messages': " + std::to_string(v.size())
             + " messages, more than the limit of "
             + std::to_string(limits.max_messages) + ".",
           "messages", "array_above_max_length");
  static const std::set<std::string> roles{"system", "developer", "user",
                                           "assistant", "tool"};
  std::vector<chat_message> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto p = "messages[" + std::to_string(i) + "]";
    auto& m = v[i];
    if (!m.is_object())
      wrong_type(p, m, "an object");
    chat_message msg;
    auto role = m.find("role");
    if (role == m.end())
      refuse("Missing required parameter: '" + p + ".role'.", p + ".role",
             "missing_required_parameter");
    msg.role = get_string(*role, p + ".role");
    if (roles.count(msg.role) == 0)
      refuse("Invalid value: '" + msg.role + "'. Supported values are: "
               "'system', 'developer', 'user', 'assistant' and 'tool'.",
             p + ".role");
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (msg.role != "assistant")
        refuse("Missing required parameter: '" + p + ".content'.",
               p + ".content", "missing_required_parameter");
    } else {
      msg.content = get_content(*content, p + ".content");
    }
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() == "role" || it.key() == "content")
        continue;
      if (it.key() == "name") {
        msg.name = get_string(it.value(), p + ".name");
        continue;
      }
      refuse("Unrecognized parameter: '" + p + "." + it.key()
               + "' (tools and function calls are not supported).",
             p + "." + it.key(), "unknown_parameter");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::vector<std::string> get_stop(const json& v) {
  std::vector<std::string> out;
  if (v.is_null())
    return out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > 4)
      refuse("Invalid 'stop': " + std::to_string(v.size())
               + " stop sequences, at most 4 are allowed.",
             "stop", "array_above_max_length");
    for (std::size_t i = 0; i < v.size(); ++i)
      out.push_back(get_string(v[i], "stop[" + std::to_string(i) + "]"));
  } else {
    wrong_type("stop", v, "a string or an array of strings");
  }
  for (auto& s : out)
    if (s.empty())
      refuse("Invalid 'stop': a stop sequence may not be empty.", "stop");
  return out;
}

/// Token ids of a prompt given as an array of integers (`what` names it
/// in errors: "prompt" or "prompt[0]").
std::vector<std::int32_t> get_token_ids(const json& v,
                                        const std::string& what) {
  if (v.empty())
    refuse("Invalid '" + what + "': an empty array of tokens (no prompt).",
           what);
  std::vector<std::int32_t> ids;
  ids.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto& t = v[i];
    const auto at = what + "[" + std::to_string(i) + "]";
    if (!t.is_number_integer())
      wrong_type(at, t, "a token id (an integer)");
    // Unsigned first: a value above int64's range is not one below it.
    if (t.is_number_unsigned() ? t.get<std::uint64_t>() > 0x7fffffffULL
                               : (t.get<std::int64_t>() < 0
                                  || t.get<std::int64_t>() > 0x7fffffffLL))
      refuse("Invalid '" + at + "': " + t.dump()
               + " is not a token id (0 or more).",
             at);
    ids.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
  }
  return ids;
}

/// A completion's prompt: a string, or OpenAI's other forms of it (an
/// array of strings, an array of token ids, an array of arrays of token
/// ids); several prompts (at most limits.max_prompts) are each a request
/// of their own (completion_request::more_prompts).
void get_prompt(const json& v, completion_request& r,
                const request_limits& limits) {
  if (!v.is_array()) {
    r.prompt = get_string(v, "prompt");
    return;
  }
  const bool strings = !v.empty() && v[0].is_string();
  const bool arrays = !v.empty() && v[0].is_array();
  if (!strings && !arrays) {
    r.prompt_ids = get_token_ids(v, "prompt");
    return;
  }
  if (v.size() > limits.max_prompts)
    refuse("Invalid 'prompt': " + std::to_string(v.size())
             + " prompts in one request; at most "
             + std::to_string(limits.max_prompts) + ".",
           "prompt", "unsupported_value");
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto at = "prompt[" + std::to_string(i) + "]";
    if (strings) {
      auto text = get_string(v[i], at);
      if (i == 0)
        r.prompt = std::move(text);
      else
        r.more_prompts.push_back(std::move(text));
    } else {
      if (!v[i].is_array())
        wrong_type(at, v[i], "an array of token ids (as prompt[0])");
      auto ids = get_token_ids(v[i], at);
      if (i == 0)
        r.prompt_ids = std::move(ids);
      else
        r.more_prompt_ids.push_back(std::move(ids));
    }
  }
}

/// A count of alternative tokens a response names per token (completions'
/// logprobs, chat's top_logprobs): 0 to max_top_logprobs.
std::int64_t get_logprob_count(std::int64_t n, const std::string& key) {
  if (n < 0 || n > max_top_logprobs)
    refuse("Invalid value for '" + key + "': " + std::to_string(n)
             + ". It must be from 0 to " + std::to_string(max_top_logprobs)
             + ".",
           key);
  return n;
}

/// OpenAI's logit_bias: an object from token ids (decimal strings) to
/// biases in [-100, 100], at most max_logit_bias of them.
std::map<std::int32_t, double> get_logit_bias(const json& v) {
  const std::string key = "logit_bias";
  if (!v.is_object())
    wrong_type(key, v, "an object");
  if (v.size() > max_logit_bias)
    refuse("Invalid value for 'logit_bias': " + std::to_string(v.size())
             + " tokens, more than the limit of "
             + std::to_string(max_logit_bias) + ".",
           key);
  std::map<std::int32_t, double> out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const auto& id = it.key();
    const bool digits =
      !id.empty() && id.size() <= 9
      && std::all_of(id.begin(), id.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      refuse("Invalid key in 'logit_bias': \"" + id.substr(0, 32)
               + "\" is not a token id (a non-negative integer).",
             key);
    const auto bias = get_number(it.value(), key + "." + id, -100.0, 100.0);
    out[static_cast<std::int32_t>(std::stol(id))] = bias;
  }
  return out;
}

/// response_format: {"type": "text"} (plain text) or {"type":
/// "json_object"} (JSON mode); json_schema is refused by name.
bool get_json_mode(const json& v) {
  const std::string key = "response_format";
  if (!v.is_object())
    wrong_type(key, v, "an object");
  auto t = v.find("type");
  if (t == v.end())
    refuse("Missing required parameter: 'response_format.type'.",
           key + ".type", "missing_required_parameter");
  if (!t->is_string())
    wrong_type(key + ".type", *t, "a string");
  const auto type = t->get<std::string>();
  if (type == "json_schema")
    refuse("'response_format' of type 'json_schema' is not supported; "
           "'json_object' is (the output is one JSON object).",
           key + ".type", "unsupported_value");
  if (type != "text" && type != "json_object")
    refuse("Invalid value for 'response_format.type': '" + type.substr(0, 32)
             + "'. Supported values are: 'text' and 'json_object'.",
           key + ".type");
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "type")
      refuse("Unrecognized parameter: 'response_format." + it.key() + "'.",
             key + "." + it.key(), "unknown_parameter");
  return type == "json_object";
}

/// Fields OpenAI defines that exo does not implement: accepted only with
/// their neutral value, so that nothing a client asks for is silently
/// ignored.
bool neutral_unsupported(const std::string& key, const json& v) {
  if (v.is_null())
    return key == "suffix" || key == "best_of" || key == "echo"
           || key == "metadata" || key == "store"
           || key == "parallel_tool_calls";
  if (key == "echo" || key == "store")
    return v.is_boolean() && !v.get<bool>();
  if (key == "best_of")
    return v.is_number_integer() && v.get<std::int64_t>() == 1;
  if (key == "metadata")
    return v.is_object() && v.empty();
  return false;
}

void require_object(const json& body) {
  if (!body.is_object())
    throw refused{invalid_json(std::string{"expected an object, got "}
                               + type_name(body))};
}

/// Refuses a model the server does not serve (404), after every other
/// check of the body.
void require_known(const std::string& model, const model_filter& known) {
  if (known && !known(model))
    throw refused{model_not_found(model)};
}

completion_request parse(endpoint_kind kind, const json& body,
                         const request_limits& limits,
                         const model_filter& known_model) {
  require_object(body);
  const bool chat = kind == endpoint_kind::chat_completions;
  completion_request r;
  r.kind = kind;
  std::optional<std::int64_t> max_tokens;
  std::optional<std::int64_t> max_completion_tokens;
  bool have_stream_options = false;
  std::optional<std::int64_t> top_logprobs; // chat
  bool chat_logprobs = false;
  bool have_model = false;
  bool have_input = false;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const auto& key = it.key();
    const auto& v = it.value();
    if (key == "model") {
      r.model = get_string(v, key);
      have_model = true;
    } else if (key == "prompt" && !chat) {
      get_prompt(v, r, limits);
      have_input = true;
    } else if (key == "messages" && chat) {
      r.messages = get_messages(v, limits);
      have_input = true;
    } else if (key == "max_tokens") {
      if (!v.is_null())
        max_tokens = get_integer(v, key);
    } else if (key == "max_completion_tokens" && chat) {
      if (!v.is_null())
        max_completion_tokens = get_integer(v, key);
    } else if (key == "temperature") {
      if (!v.is_null())
        r.temperature = get_number(v, key, 0.0, 2.0);
    } else if (key == "top_p") {
      if (!v.is_null()) {
        r.top_p = get_number(v, key, 0.0, 1.0);
        if (r.top_p == 0.0)
          refuse("Invalid value for 'top_p': must be greater than 0.", key);
      }
    } else if (key == "seed") {
      if (!v.is_null())
        r.seed = get_integer(v, key);
    } else if (key == "top_k") {
      if (v.is_null())
        continue;
      auto k = get_integer(v, key);
      if (k < -1 || k > (1 << 30))
        refuse("Invalid value for 'top_k': " + v.dump()
                 + ". It must be -1 or 0 (every token) or a count up to "
                 + std::to_string(1 << 30) + ".",
               key);
      r.top_k = k;
    } else if (key == "min_p") {
      if (!v.is_null())
        r.min_p = get_number(v, key, 0.0, 1.0);
    } else if (key == "repetition_penalty") {
      if (v.is_null())
        continue;
      r.repetition_penalty = get_number(v, key, 0.0, 2.0);
      if (r.repetition_penalty == 0.0)
        refuse("Invalid value for 'repetition_penalty': must be greater "
               "than 0.", key);
    } else if (key == "frequency_penalty") {
      if (!v.is_null())
        r.frequency_penalty = get_number(v, key, -2.0, 2.0);
    } else if (key == "presence_penalty") {
      if (!v.is_null())
        r.presence_penalty = get_number(v, key, -2.0, 2.0);
    } else if (key == "response_format") {
      if (!v.is_null())
        r.json_object = get_json_mode(v);
    } else if (key == "logit_bias") {
      if (!v.is_null())
        r.logit_bias = get_logit_bias(v);
    } else if (key == "stop") {
      r.stop = get_stop(v);
    } else if (key == "n") {
      if (v.is_null())
        continue;
      auto n = get_integer(v, key);
      if (n < 1 || n > static_cast<std::int64_t>(limits.max_choices))
        refuse("Invalid value for 'n': " + v.dump() + ". It must be from 1 to "
                 + std::to_string(limits.max_choices) + " (the choices run "
                 "as sequences of one job, each holding a KV cache).",
               key);
      r.n = static_cast<std::uint32_t>(n);
    } else if (key == "logprobs" && chat) {
      if (!v.is_null())
        chat_logprobs = get_bool(v, key);
    } else if (key == "top_logprobs" && chat) {
      if (!v.is_null())
        top_logprobs = get_integer(v, key);
    } else if (key == "logprobs") { // completions: how many alternatives
      if (v.is_null() || (v.is_boolean() && !v.get<bool>()))
        continue;
      r.logprobs = static_cast<std::int32_t>(
        get_logprob_count(get_integer(v, key), key));
    } else if (key == "stream") {
      if (!v.is_null())
        r.stream = get_bool(v, key);
    } else if (key == "stream_options") {
      if (v.is_null())
        continue;
      if (!v.is_object())
        wrong_type(key, v, "an object");
      have_stream_options = true;
      for (auto o = v.begin(); o != v.end(); ++o) {
        if (o.key() == "include_usage")
          r.include_usage = get_bool(o.value(), "stream_options.include_usage");
        else
          refuse("Unrecognized parameter: 'stream_options." + o.key() + "'.",
                 "stream_options." + o.key(), "unknown_parameter");
      }
    } else if (key == "user") {
      if (!v.is_null())
        r.user = get_string(v, key);
    } else if (key == "echo" && !chat) {
      if (!v.is_null())
        r.echo = get_bool(v, key);
    } else if (key == "prompt_logprobs") { // vLLM's
      if (v.is_null())
        continue;
      const auto n = get_integer(v, key);
      if (n == -1)
        refuse("Invalid value for 'prompt_logprobs': -1 (the whole "
               "vocabulary) is not served; it must be from 0 to "
                 + std::to_string(max_top_logprobs) + ".",
               key);
      r.prompt_logprobs =
        static_cast<std::int32_t>(get_logprob_count(n, key));
    } else if (neutral_unsupported(key, v)) {
      continue;
    } else if (key == "prompt" || key == "messages"
               || key == "max_completion_tokens") {
      refuse("Unrecognized parameter: '" + key + "' (this is /v1/"
               + (chat ? "chat/completions" : "completions") + ").",
             key, "unknown_parameter");
    } else {
      refuse("Unrecognized or unsupported parameter: '" + key + "' = "
               + v.dump().substr(0, 64) + ".",
             key, "unknown_parameter");
    }
  }
  if (!have_model)
    refuse("Missing required parameter: 'model'.", "model",
           "missing_required_parameter");
  if (!have_input)
    refuse(std::string{"Missing required parameter: '"}
             + (chat ? "messages" : "prompt") + "'.",
           chat ? "messages" : "prompt", "missing_required_parameter");
  if (r.prompt_count() > 1 && r.total_choices() > limits.max_prompts)
    refuse("Invalid 'n': " + std::to_string(r.n) + " choices of each of "
             + std::to_string(r.prompt_count()) + " prompts are "
             + std::to_string(r.total_choices()) + "; at most "
             + std::to_string(limits.max_prompts) + " in one request.",
           "n");
  if (max_tokens && max_completion_tokens
      && *max_tokens != *max_completion_tokens)
    refuse("'max_tokens' and 'max_completion_tokens' disagree; send one.",
           "max_tokens");
  r.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  if (r.max_tokens) {
    auto param = max_completion_tokens ? "max_completion_tokens"
                                       : "max_tokens";
    // 0 with echo: the prompt alone (with logprobs, scored), as OpenAI's
    // legacy completions allow; with prompt_logprobs: the prompt scored.
    const bool prompt_only = r.echo || r.prompt_logprobs >= 0;
    if (*r.max_tokens < (prompt_only ? 0 : 1))
      refuse(std::string{"Invalid '"} + param + "': "
               + std::to_string(*r.max_tokens) + ". Expected at least "
               + (prompt_only ? "0"
                              : "1 (0 only with 'echo' or 'prompt_logprobs')")
               + ".",
             param);
    if (*r.max_tokens > limits.max_tokens)
      refuse(std::string{"Invalid '"} + param + "': "
               + std::to_string(*r.max_tokens)
               + " is larger than the limit of "
               + std::to_string(limits.max_tokens) + " tokens.",
             param);
  }
  if (top_logprobs && !chat_logprobs)
    refuse("Invalid value for 'top_logprobs': 'logprobs' must be set to true "
           "when 'top_logprobs' is specified.",
           "top_logprobs");
  if (chat_logprobs)
    r.logprobs = static_cast<std::int32_t>(
      top_logprobs ? get_logprob_count(*top_logprobs, "top_logprobs") : 0);
  if (r.prompt_logprobs >= 0 && r.stream)
    refuse("'prompt_logprobs' is not available when 'stream' is true (the "
           "whole answer carries them).",
           "prompt_logprobs");
  if (have_stream_options && !r.stream)
    refuse("The 'stream_options' parameter is only allowed when 'stream' is "
           "enabled.",
           "stream_options");
  require_known(r.model, known_model);
  return r;
}

tokenize_request parse_tokenize_body(bool detokenize, const json& body,
                                     const request_limits& limits,
                                     const model_filter& known_model) {
  require_object(body);
  tokenize_request r;
  r.detokenize = detokenize;
  bool have_model = false, have_input = false;
  const char* input = detokenize ? "tokens" : "prompt";
  for (auto it = body.begin(); it != body.end(); ++it) {
    const auto& key = it.key();
    const auto& v = it.value();
    if (key == "model") {
      r.model = get_string(v, key);
      have_model = true;
    } else if (detokenize && key == "tokens") {
      if (!v.is_array())
        wrong_type(key, v, "an array of token ids");
      // An empty array is an empty text.
      if (!v.empty())
        r.tokens = get_token_ids(v, key);
      have_input = true;
    } else if (!detokenize && key == "prompt" && !have_input) {
      r.prompt = get_string(v, key);
      have_input = true;
    } else if (!detokenize && key == "messages" && !have_input) {
      r.kind = endpoint_kind::chat_completions;
      r.messages = get_messages(v, limits);
      have_input = true;
    } else if (!detokenize && key == "add_special_tokens") {
      r.add_special = get_bool(v, key);
    } else if (!detokenize && (key == "prompt" || key == "messages")) {
      refuse("Give 'prompt' or 'messages', not both.", key);
    } else {
      refuse("Unrecognized parameter: '" + key + "'.", key,
             "unknown_parameter");
    }
  }
  if (!have_model)
    refuse("Missing required parameter: 'model'.", "model",
           "missing_required_parameter");
  if (!have_input)
    refuse(std::string{"Missing required parameter: '"} + input
             + (detokenize ? "'." : "' (or 'messages')."),
           input, "missing_required_parameter");
  require_known(r.model, known_model);
  return r;
}

/// The JSON document of a request body, or the error: a body over the
/// limit, bad JSON.
std::optional<json> read_body(std::string_view body,
                              const request_limits& limits, api_error& error) {
  if (body.size() > limits.max_body_bytes) {
    error = body_too_large(limits.max_body_bytes);
    return std::nullopt;
  }
  json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded()) {
    // Parse again with exceptions for the position and reason.
    try {
      auto again = json::parse(body);
      (void) again;
      error = invalid_json("not valid JSON");
    } catch (const json::exception& e) {
      // parse_error, and out_of_range for a number that overflows a
      // double (1e100000): both are the client's bad JSON.
      error = invalid_json(e.what());
    }
    return std::nullopt;
  }
  return doc;
}

/// Runs `parse` on the body's document; refusals become `error`.
template <class T, class Parse>
std::optional<T> parse_body(std::string_view body,
                            const request_limits& limits, api_error& error,
                            Parse parse) {
  auto doc = read_body(body, limits, error);
  if (!doc)
    return std::nullopt;
  try {
    return parse(*doc);
  } catch (const refused& r) {
    error = r.error;
  } catch (const json::exception& e) {
    error = invalid_request(std::string{"Malformed request: "} + e.what());
  }
  return std::nullopt;
}

} // namespace

parsed_request parse_request(endpoint_kind kind, std::string_view body,
                             const request_limits& limits,
                             const model_filter& known_model) {
  parsed_request out;
  out.request = parse_body<completion_request>(
    body, limits, out.error,
    [&](const json& doc) { return parse(kind, doc, limits, known_model); });
  return out;
}

parsed_tokenize parse_tokenize(bool detokenize, std::string_view body,
                               const request_limits& limits,
                               const model_filter& known_model) {
  parsed_tokenize out;
  out.request = parse_body<tokenize_request>(
    body, limits, out.error, [&](const json& doc) {
      return parse_tokenize_body(detokenize, doc, limits, known_model);
    });
  return out;
}

std::optional<resume_point> parse_resume(std::string_view resume,
                                         std::string_view last_event_id,
                                         api_error& error) {
  error = {};
  error.status = 0;
  if (resume.empty()) {
    if (!last_event_id.empty())
      error = invalid_request("Last-Event-ID needs X-Exo-Resume: the id of "
                              "the completion to resume",
                              "Last-Event-ID");
    return std::nullopt;
  }
  auto id_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  };
  if (resume.size() > 64
      || !std::all_of(resume.begin(), resume.end(), id_char)) {
    error = invalid_request("X-Exo-Resume must be a completion's id (1 to 64 "
                            "letters, digits, '.', '_' or '-')",
                            "X-Exo-Resume");
    return std::nullopt;
  }
  resume_point out;
  out.id = std::string{resume};
  if (!last_event_id.empty()) {
    // "N" or, with several choices, "N0,N1,...": each 1 to 15 digits.
    std::string_view rest = last_event_id;
    for (;;) {
      auto comma = rest.find(',');
      auto count = rest.substr(0, comma);
      const bool digits = !count.empty() && count.size() <= 15
                          && std::all_of(count.begin(), count.end(),
                                         [](char c) {
                                           return c >= '0' && c <= '9';
                                         });
      if (!digits || out.after.size() == 256) {
        error = invalid_request("Last-Event-ID must be the bytes of text "
                                "received (decimal numbers, one per choice "
                                "joined by commas, as the stream's id: "
                                "lines give them)",
                                "Last-Event-ID");
        return std::nullopt;
      }
      out.after.push_back(std::stoull(std::string{count}));
      if (comma == std::string_view::npos)
        break;
      rest.remove_prefix(comma + 1);
    }
  }
  return out;
}

} // namespace exo::gateway
