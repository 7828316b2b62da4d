#include "core/gateway/response.hpp"

#include "core/text/json.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace exo::gateway {

namespace {

using text::json;

bool is_chat(endpoint_kind k) {
  return k == endpoint_kind::chat_completions;
}

json usage_json(const usage& u) {
  json out;
  out["prompt_tokens"] = u.prompt_tokens;
  out["completion_tokens"] = u.completion_tokens;
  out["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  out["prompt_tokens_details"] = json{{"cached_tokens", u.cached_tokens}};
  return out;
}

json head_json(const response_head& head, const char* object) {
  json out;
  out["id"] = head.id;
  out["object"] = object;
  out["created"] = head.created;
  out["model"] = head.model;
  return out;
}

const char* chunk_object(endpoint_kind k) {
  return is_chat(k) ? "chat.completion.chunk" : "text_completion";
}

/// A float as JSON shows it: its shortest decimal (9 significant digits
/// at most), not the double it widens to.
double shown(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return std::strtod(buf, nullptr);
}

json bytes_of(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s)
    out.push_back(static_cast<int>(c));
  return out;
}

/// A choice's `logprobs` object for `tokens` (see completion_body).
json logprobs_json(endpoint_kind kind,
                   const std::vector<token_logprob>& tokens) {
  if (is_chat(kind)) {
    json content = json::array();
    for (auto& t : tokens) {
      json e;
      e["token"] = valid_utf8(t.token);
      e["logprob"] = shown(t.logprob);
      e["bytes"] = bytes_of(t.token);
      json top = json::array();
      for (auto& a : t.top)
        top.push_back(json{{"token", valid_utf8(a.token)},
                           {"logprob", shown(a.logprob)},
                           {"bytes", bytes_of(a.token)}});
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    json out;
    out["content"] = std::move(content);
    out["refusal"] = nullptr;
    return out;
  }
  json names = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  for (auto& t : tokens) {
    auto text = valid_utf8(t.token);
    names.push_back(text);
    offsets.push_back(t.text_offset);
    if (!t.scored) { // an echoed prompt's first token
      values.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    values.push_back(shown(t.logprob));
    json top = json::object();
    for (auto& a : t.top) {
      auto name = valid_utf8(a.token);
      if (!top.contains(name)) // two tokens of one text: the better one
        top[name] = shown(a.logprob);
    }
    tops.push_back(std::move(top));
  }
  json out;
  out["tokens"] = std::move(names);
  out["token_logprobs"] = std::move(values);
  out["top_logprobs"] = std::move(tops);
  out["text_offset"] = std::move(offsets);
  return out;
}

/// vLLM's prompt_logprobs of a prompt's `tokens` (see completion_body).
json prompt_logprobs_json(const std::vector<token_logprob>& tokens) {
  auto entry = [](float logprob, std::uint32_t rank, const std::string& token) {
    return json{{"logprob", shown(logprob)},
                {"rank", rank},
                {"decoded_token", valid_utf8(token)}};
  };
  json out = json::array();
  for (auto& t : tokens) {
    if (!t.scored) { // the first: nothing comes before it
      out.push_back(nullptr);
      continue;
    }
    json row = json::object();
    row[std::to_string(t.id)] = entry(t.logprob, t.rank, t.token);
    for (std::size_t k = 0; k < t.top.size(); ++k)
      if (t.top[k].id != t.id)
        row[std::to_string(t.top[k].id)] =
          entry(t.top[k].logprob, static_cast<std::uint32_t>(k + 1),
                t.top[k].token);
    out.push_back(std::move(row));
  }
  return out;
}

} // namespace

const char* to_string(finish_reason r) {
  return r == finish_reason::stop ? "stop" : "length";
}

std::string completion_body(endpoint_kind kind, const response_head& head,
                            const std::vector<choice_result>& choices,
                            const usage& u) {
  auto out = head_json(head, is_chat(kind) ? "chat.completion"
                                           : "text_completion");
  out["choices"] = json::array();
  for (std::size_t i = 0; i < choices.size(); ++i) {
    json choice;
    if (is_chat(kind)) {
      choice["index"] = i;
      json message;
      message["role"] = "assistant";
      message["content"] = choices[i].text;
      choice["message"] = std::move(message);
    } else {
      choice["text"] = choices[i].text;
      choice["index"] = i;
    }
    choice["logprobs"] =
      choices[i].with_logprobs ? logprobs_json(kind, choices[i].logprobs)
                               : json(nullptr);
    choice["finish_reason"] = to_string(choices[i].reason);
    if (choices[i].prompt_logprobs && !is_chat(kind))
      choice["prompt_logprobs"] =
        prompt_logprobs_json(*choices[i].prompt_logprobs);
    out["choices"].push_back(std::move(choice));
  }
  if (is_chat(kind) && !choices.empty() && choices.front().prompt_logprobs)
    out["prompt_logprobs"] =
      prompt_logprobs_json(*choices.front().prompt_logprobs);
  out["usage"] = usage_json(u);
  return text::compact(out);
}

std::string text_chunk(endpoint_kind kind, const response_head& head,
                       std::uint32_t index, std::string_view text, bool first,
                       bool include_usage,
                       const std::vector<token_logprob>* logprobs) {
  auto out = head_json(head, chunk_object(kind));
  json choice;
  if (is_chat(kind)) {
    choice["index"] = index;
    json delta = json::object();
    if (first)
      delta["role"] = "assistant";
    delta["content"] = std::string{text};
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = std::string{text};
    choice["index"] = index;
  }
  choice["logprobs"] =
    logprobs ? logprobs_json(kind, *logprobs) : json(nullptr);
  choice["finish_reason"] = nullptr;
  out["choices"] = json::array({std::move(choice)});
  if (include_usage)
    out["usage"] = nullptr;
  return sse_event(text::compact(out));
}

std::string finish_chunk(endpoint_kind kind, const response_head& head,
                         std::uint32_t index, finish_reason reason,
                         bool include_usage) {
  auto out = head_json(head, chunk_object(kind));
  json choice;
  if (is_chat(kind)) {
    choice["index"] = index;
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
    choice["index"] = index;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = to_string(reason);
  out["choices"] = json::array({std::move(choice)});
  if (include_usage)
    out["usage"] = nullptr;
  return sse_event(text::compact(out));
}

std::string usage_chunk(endpoint_kind kind, const response_head& head,
                        const usage& u) {
  auto out = head_json(head, chunk_object(kind));
  out["choices"] = json::array();
  out["usage"] = usage_json(u);
  return sse_event(text::compact(out));
}

std::string error_event(const api_error& e) {
  return sse_event(to_json(e));
}

std::string sse_event(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  out += "data: ";
  out += json;
  out += "\n\n";
  return out;
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

std::string models_body(const std::vector<model_entry>& models) {
  json data = json::array();
  for (auto& m : models) {
    json e;
    e["id"] = m.id;
    e["object"] = "model";
    e["created"] = m.created;
    e["owned_by"] = m.owned_by;
    data.push_back(std::move(e));
  }
  json out;
  out["object"] = "list";
  out["data"] = std::move(data);
  return text::compact(out);
}

std::string health_body(bool ready, std::string_view why) {
  if (ready)
    return R"({"status":"ok"})";
  json err;
  err["code"] = 503;
  err["message"] = std::string{why};
  err["type"] = "unavailable_error";
  json out;
  out["error"] = std::move(err);
  return text::compact(out);
}

id_generator::id_generator() : id_generator(std::random_device{}()
                                             ^ (std::uint64_t{
                                                  std::random_device{}()}
                                                << 32)) {
}

id_generator::id_generator(std::uint64_t nonce) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(nonce));
  nonce_ = buf;
}

std::string id_generator::next(endpoint_kind kind) {
  auto n = counter_.fetch_add(1, std::memory_order_relaxed) + 1;
  return (is_chat(kind) ? "chatcmpl-" : "cmpl-") + nonce_ + "-"
         + std::to_string(n);
}

std::size_t complete_utf8_prefix(std::string_view s) {
  // Look at most 3 bytes back for the lead byte of a sequence that is not
  // finished.
  std::size_t n = s.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80)
      continue; // a continuation byte: keep looking for the lead
    std::size_t need = (c & 0xE0) == 0xC0   ? 2
                       : (c & 0xF0) == 0xE0 ? 3
                       : (c & 0xF8) == 0xF0 ? 4
                                            : 1;
    return need > back ? n - back : n;
  }
  return n;
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = c < 0x80                ? 1
                      : c >= 0xC2 && c <= 0xDF ? 2
                      : c >= 0xE0 && c <= 0xEF ? 3
                      : c >= 0xF0 && c <= 0xF4 ? 4
                                               : 0;
    // The bytes that still could begin a character: replaced by one
    // U+FFFD when it is cut short (the maximal subpart, as browsers and
    // nlohmann::json's replacement count them).
    std::size_t good = 1;
    bool ok = len != 0;
    for (std::size_t k = 1; ok && k < len; ++k) {
      if (i + k >= s.size()) {
        ok = false;
        break;
      }
      auto d = static_cast<unsigned char>(s[i + k]);
      // The second byte's range excludes overlong forms, surrogates and
      // code points past U+10FFFF.
      unsigned lo = 0x80, hi = 0xBF;
      if (k == 1 && c == 0xE0)
        lo = 0xA0;
      else if (k == 1 && c == 0xED)
        hi = 0x9F;
      else if (k == 1 && c == 0xF0)
        lo = 0x90;
      else if (k == 1 && c == 0xF4)
        hi = 0x8F;
      ok = d >= lo && d <= hi;
      good += ok ? 1 : 0;
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += len == 0 ? 1 : good;
    }
  }
  return out;
}

stop_filter::stop_filter(std::vector<std::string> stops)
  : stops_(std::move(stops)) {
  // Empty stop strings would match everywhere; parse_request refuses them.
  stops_.erase(std::remove_if(stops_.begin(), stops_.end(),
                              [](auto& s) { return s.empty(); }),
               stops_.end());
}

std::string stop_filter::feed(std::string_view piece) {
  if (stopped_)
    return {};
  held_ += piece;
  // The earliest complete match ends the text.
  std::size_t cut = std::string::npos;
  for (auto& s : stops_) {
    auto at = held_.find(s);
    if (at < cut)
      cut = at;
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  std::size_t keep = 0;
  for (auto& s : stops_) {
    for (std::size_t len = std::min(s.size() - 1, held_.size()); len > keep;
         --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::size_t release = complete_utf8_prefix(
    std::string_view{held_}.substr(0, held_.size() - keep));
  std::string out = held_.substr(0, release);
  held_.erase(0, release);
  return out;
}

std::string stop_filter::flush() {
  if (stopped_)
    return {};
  std::string out;
  out.swap(held_);
  return out;
}

} // namespace exo::gateway
