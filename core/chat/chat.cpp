#include "core/chat/chat.hpp"

#include "core/chat/unicode.hpp"

namespace exo::chat {

nlohmann::ordered_json to_json(const std::vector<message>& messages) {
  auto out = nlohmann::ordered_json::array();
  for (auto& m : messages)
    out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

namespace {

nlohmann::ordered_json variables(const nlohmann::ordered_json& messages,
                                 const options& opts) {
  if (!messages.is_array())
    throw template_error(error_kind::render, "messages must be a JSON array");
  if (!opts.extra.is_object() && !opts.extra.is_null())
    throw template_error(error_kind::render,
                         "extra variables must be a JSON object");
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["messages"] = messages;
  vars["add_generation_prompt"] = opts.add_generation_prompt;
  if (opts.bos_token)
    vars["bos_token"] = *opts.bos_token;
  if (opts.eos_token)
    vars["eos_token"] = *opts.eos_token;
  if (opts.extra.is_object()) {
    for (auto it = opts.extra.begin(); it != opts.extra.end(); ++it) {
      if (vars.contains(it.key()))
        throw template_error(error_kind::render, "extra variable '" + it.key() +
                                                     "' is already set");
      vars[it.key()] = it.value();
    }
  }
  return vars;
}

} // namespace

std::string render(const compiled_template& tmpl,
                   const nlohmann::ordered_json& messages,
                   const options& opts) {
  return tmpl.render(variables(messages, opts), opts.limits);
}

std::string render(const std::string& template_source,
                   const nlohmann::ordered_json& messages,
                   const options& opts) {
  compiled_template tmpl{template_source};
  return render(tmpl, messages, opts);
}

std::string end_of_turn(const compiled_template& tmpl, const options& opts) {
  // A content no template would produce by itself.
  static const std::string probe = "\x1e"
                                   "exo-probe-7f3a"
                                   "\x1e";
  auto messages = to_json({{"user", "Hi"}, {"assistant", probe}});
  options o = opts;
  o.add_generation_prompt = false;
  std::string text;
  try {
    text = render(tmpl, messages, o);
  } catch (const template_error&) {
    return {};
  }
  auto at = text.rfind(probe);
  if (at == std::string::npos)
    return {};
  auto tail = unicode::trim(std::string_view{text}.substr(at + probe.size()));
  // A special-token-like marker ("<|eot_id|>", "</s>", "<end_of_turn>")
  // ends at its '>': whatever follows opens the next turn. Otherwise the
  // marker runs up to the first whitespace.
  std::size_t end = 0;
  if (!tail.empty() && tail[0] == '<') {
    auto close = tail.find('>');
    if (close != std::string_view::npos)
      return std::string(tail.substr(0, close + 1));
  }
  while (end < tail.size() && unicode::space_at(tail, end) == 0)
    unicode::decode(tail, end);
  return std::string(tail.substr(0, end));
}

std::vector<std::string> stop_strings(const compiled_template& tmpl,
                                      const options& opts) {
  std::vector<std::string> out;
  auto add = [&](const std::string& s) {
    if (!s.empty() && std::find(out.begin(), out.end(), s) == out.end())
      out.push_back(s);
  };
  add(end_of_turn(tmpl, opts));
  if (opts.eos_token)
    add(*opts.eos_token);
  return out;
}

std::string generation_prompt(const compiled_template& tmpl,
                              const nlohmann::ordered_json& messages,
                              const options& opts) {
  options with = opts;
  with.add_generation_prompt = true;
  options without = opts;
  without.add_generation_prompt = false;
  auto a = render(tmpl, messages, with);
  auto b = render(tmpl, messages, without);
  if (a.size() >= b.size() && a.compare(0, b.size(), b) == 0)
    return a.substr(b.size());
  return {};
}

std::pair<std::size_t, std::size_t>
find_stop(const std::string& text, const std::vector<std::string>& stops) {
  std::size_t best = std::string::npos;
  std::size_t len = 0;
  for (auto& s : stops) {
    if (s.empty())
      continue;
    auto at = text.find(s);
    if (at != std::string::npos && (best == std::string::npos || at < best)) {
      best = at;
      len = s.size();
    }
  }
  return {best, len};
}

} // namespace exo::chat
