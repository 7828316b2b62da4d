#include "core/workload/chat_prompt.hpp"

#include "core/gguf/gguf.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/workload/job_request.hpp"

#include <algorithm>
#include <optional>

namespace exo::workload {

namespace {

/// The text of a special token, or nothing when the vocabulary lacks it.
std::optional<std::string> special_text(const model::tokenizer& tok,
                                        std::int32_t id) {
  if (id < 0 || static_cast<std::size_t>(id) >= tok.size())
    return std::nullopt;
  return tok.piece(id, true);
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return !prefix.empty() && s.compare(0, prefix.size(), prefix) == 0;
}

} // namespace

std::vector<chat::message> chat_messages(const std::string& system,
                                         const std::string& user) {
  std::vector<chat::message> out;
  if (!system.empty())
    out.push_back({"system", system});
  out.push_back({"user", user});
  return out;
}

chat_prompt render_chat(const model::gguf_file& file,
                        const model::tokenizer& tok,
                        const std::vector<chat::message>& messages) {
  auto* kv = file.find("tokenizer.chat_template");
  if (kv == nullptr)
    throw job_error("the model has no chat template "
                    "(tokenizer.chat_template): use a plain prompt");
  std::string source;
  try {
    source = file.get_string("tokenizer.chat_template");
  } catch (const std::exception& e) {
    throw job_error(std::string{"the model's chat template: "} + e.what());
  }
  chat::options opts;
  opts.add_generation_prompt = true;
  opts.bos_token = special_text(tok, tok.bos());
  opts.eos_token = special_text(tok, tok.eos());
  chat_prompt out;
  try {
    chat::compiled_template tmpl{source};
    out.text = chat::render(tmpl, chat::to_json(messages), opts);
    for (auto& s : chat::stop_strings(tmpl, opts)) {
      auto ids = tok.tokenize(s, false, true);
      auto kind = ids.size() == 1 ? tok.type(ids[0])
                                  : model::token_kind::normal;
      if (kind == model::token_kind::control
          || kind == model::token_kind::user_defined) {
        if (std::find(out.stop_tokens.begin(), out.stop_tokens.end(), ids[0])
            == out.stop_tokens.end())
          out.stop_tokens.push_back(ids[0]);
      } else {
        out.stop_strings.push_back(s);
      }
    }
  } catch (const chat::template_error& e) {
    throw job_error(std::string{"the model's chat template: "} + e.what());
  }
  // llama.cpp: the tokenizer adds the BOS; the template's own is dropped.
  if (tok.add_bos() && opts.bos_token && starts_with(out.text, *opts.bos_token))
    out.text.erase(0, opts.bos_token->size());
  return out;
}

std::vector<std::int32_t> prompt_tokens(const model::tokenizer& tok,
                                        const std::string& text,
                                        bool special) {
  if (special)
    return tok.tokenize(text, true, true);
  return tok.encode(text, tok.add_bos());
}

} // namespace exo::workload
