#include "core/model/model_info.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

namespace exo::model {

namespace {

std::string count_text(uint64_t n) {
  char buf[64];
  if (n >= 1000000000ull)
    std::snprintf(buf, sizeof buf, "%.2f B", static_cast<double>(n) / 1e9);
  else if (n >= 1000000ull)
    std::snprintf(buf, sizeof buf, "%.2f M", static_cast<double>(n) / 1e6);
  else if (n >= 1000ull)
    std::snprintf(buf, sizeof buf, "%.2f K", static_cast<double>(n) / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  return buf;
}

std::string bytes_text(uint64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB",
                static_cast<double>(n) / (1024.0 * 1024.0));
  return buf;
}

} // namespace

model_summary summarize(const gguf_file& f) {
  model_summary s;
  s.architecture = f.get_string_or("general.architecture", "?");
  s.name = f.get_string_or("general.name", "");
  std::map<uint32_t, model_summary::type_share> by_type;
  for (auto& t : f.tensors()) {
    s.parameters += t.n_elements;
    s.tensor_bytes += t.n_bytes;
    auto& e = by_type[static_cast<uint32_t>(t.type)];
    e.type = t.type;
    e.tensors += 1;
    e.bytes += t.n_bytes;
  }
  for (auto& [id, e] : by_type) {
    e.share = s.tensor_bytes ? static_cast<double>(e.bytes)
                                 / static_cast<double>(s.tensor_bytes)
                             : 0.0;
    s.types.push_back(e);
  }
  std::stable_sort(s.types.begin(), s.types.end(),
                   [](auto& a, auto& b) { return a.bytes > b.bytes; });
  s.tokenizer_model = f.get_string_or("tokenizer.ggml.model", "");
  s.tokenizer_pre = f.get_string_or("tokenizer.ggml.pre", "");
  if (auto* kv = f.find("tokenizer.ggml.tokens"))
    if (auto* a = std::get_if<std::shared_ptr<gguf_array>>(&kv->value))
      if (*a)
        s.vocab_size = (*a)->values.size();
  s.has_chat_template = f.find("tokenizer.chat_template") != nullptr;
  s.context_length = f.get_uint_or(s.architecture + ".context_length", 0);
  return s;
}

std::vector<std::string> summary_lines(const model_summary& s) {
  std::vector<std::string> out;
  out.push_back("architecture: " + s.architecture
                + (s.name.empty() ? "" : " (" + s.name + ")"));
  out.push_back("parameters: " + count_text(s.parameters) + " in "
                + bytes_text(s.tensor_bytes) + " of tensors");
  std::string types = "tensor types:";
  for (auto& t : s.types) {
    char buf[128];
    std::snprintf(buf, sizeof buf, " %s %.1f%% (%llu tensors)",
                  to_string(t.type), 100.0 * t.share,
                  static_cast<unsigned long long>(t.tensors));
    types += (&t == &s.types.front() ? "" : ",") + std::string(buf);
  }
  out.push_back(types);
  out.push_back("tokenizer: "
                + (s.tokenizer_model.empty() ? std::string("none")
                                             : s.tokenizer_model)
                + (s.tokenizer_pre.empty() ? "" : ", pre " + s.tokenizer_pre)
                + ", " + std::to_string(s.vocab_size) + " tokens");
  out.push_back(std::string("chat template: ")
                + (s.has_chat_template ? "yes" : "no"));
  out.push_back("context length: "
                + (s.context_length ? std::to_string(s.context_length)
                                    : std::string("unknown")));
  return out;
}

} // namespace exo::model
