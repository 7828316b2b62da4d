#include "core/workload/run_options.hpp"

#include <stdexcept>

namespace exo::workload {

namespace {

std::uint64_t to_uint(const std::string& key, const std::string& v) {
  try {
    std::size_t used = 0;
    auto x = std::stoull(v, &used);
    if (used != v.size() || v.empty() || v[0] == '-')
      throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw std::invalid_argument(key + " needs a non-negative integer, not '"
                                + v + "'");
  }
}

float to_float(const std::string& key, const std::string& v) {
  try {
    std::size_t used = 0;
    auto x = std::stof(v, &used);
    if (used != v.size())
      throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw std::invalid_argument(key + " needs a number, not '" + v + "'");
  }
}

std::uint32_t to_u32(const std::string& key, const std::string& v,
                     std::uint32_t lo, std::uint32_t hi) {
  auto x = to_uint(key, v);
  if (x < lo || x > hi)
    throw std::invalid_argument(key + " must be in [" + std::to_string(lo)
                                + ", " + std::to_string(hi) + "]");
  return static_cast<std::uint32_t>(x);
}

} // namespace

run_options parse_run_options(const std::vector<std::string>& words,
                              bool local) {
  run_options o;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const auto& k = words[i];
    if (i + 1 >= words.size())
      throw std::invalid_argument(k + " needs a value");
    const auto& v = words[++i];
    if (k == "--model")
      o.model = v;
    else if (k == "--prompt")
      o.prompt = v;
    else if (k == "-n" || k == "--n")
      o.n_gen = to_u32(k, v, 0, 1u << 20);
    else if (k == "--seed")
      o.sampling.seed = to_uint(k, v);
    else if (k == "--temperature")
      o.sampling.temperature = to_float(k, v);
    else if (k == "--top-k")
      o.sampling.top_k = to_u32(k, v, 0, 1u << 30);
    else if (k == "--top-p")
      o.sampling.top_p = to_float(k, v);
    else if (k == "--stages")
      o.stages = to_u32(k, v, 1, 1024);
    else if (k == "--sequences")
      o.sequences = to_u32(k, v, 1, 256);
    else if (k == "--ctx")
      o.n_ctx = to_u32(k, v, 1, 1u << 24);
    else if (k == "--logits-out" && local)
      o.logits_out = v;
    else if (k == "--config" && local)
      o.config = v;
    else if (k == "--state-dir" && local)
      o.state_dir = v;
    else if (k == "--llama-threads" && local)
      o.llama_threads = to_u32(k, v, 1, 1024);
    else
      throw std::invalid_argument("unknown option " + k);
  }
  if (o.model.empty())
    throw std::invalid_argument("run needs --model FILE");
  return o;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote != 0) {
      if (c == quote)
        quote = 0;
      else if (c == '\\' && quote == '"' && i + 1 < text.size())
        cur += text[++i];
      else
        cur += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word)
        out.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (quote != 0)
    throw std::invalid_argument("unterminated quote");
  if (in_word)
    out.push_back(cur);
  return out;
}

} // namespace exo::workload
