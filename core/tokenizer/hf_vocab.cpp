#include "core/tokenizer/hf_vocab.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/gguf/gguf.hpp"
#include "core/text/file.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace exo::model {

namespace {

using json = nlohmann::json;

// The Split regexes of the tokenizer.json files whose pre-tokenizer
// llama.cpp knows (convert_hf_to_gguf.py tells them apart by a hash of
// their output; the regex says the same here).
const char* const llama3_split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const qwen2_split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json parse(const std::string& text, const char* what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw gguf_error(std::string(what) +
                     " does not parse as JSON: " + e.what());
  }
}

/// tokenizer.json files of real models are 2-12 MB; 64 MiB leaves room.
std::string read_file(const std::string& path) {
  try {
    return text::read_file(path, 64ull << 20, "tokenizer file");
  } catch (const text::file_error& e) {
    throw gguf_error(e.what());
  }
}

bool is_byte_level(const json& p, bool use_regex) {
  return p.is_object() && p.value("type", "") == "ByteLevel" &&
         p.value("use_regex", true) == use_regex;
}

/// The llama.cpp pre-tokenizer name of a tokenizer.json pre_tokenizer.
std::string pre_name(const json& p) {
  if (is_byte_level(p, true))
    return "gpt-2";
  if (p.is_object() && p.value("type", "") == "Sequence" &&
      p.contains("pretokenizers") && p["pretokenizers"].size() == 2) {
    const auto& a = p["pretokenizers"][0];
    const auto& b = p["pretokenizers"][1];
    if (a.value("type", "") == "Split" && is_byte_level(b, false) &&
        a.contains("pattern") && a["pattern"].contains("Regex")) {
      auto re = a["pattern"]["Regex"].get<std::string>();
      if (re == llama3_split)
        return "llama-bpe";
      if (re == qwen2_split)
        return "qwen2";
    }
    if (a.value("type", "") == "Digits" &&
        a.value("individual_digits", false) && is_byte_level(b, true))
      return "smollm";
  }
  auto dump = p.dump();
  if (dump.size() > 200)
    dump = dump.substr(0, 200) + "...";
  throw gguf_error("tokenizer.json: pre-tokenizer " + dump +
                   " is none that exo knows (llama-bpe, qwen2, gpt-2, "
                   "smollm)");
}

bool looks_special(const std::string& t) {
  auto starts = [&](const std::string& p) {
    return t.size() >= p.size() && t.compare(0, p.size(), p) == 0;
  };
  auto ends = [&](const std::string& s) {
    return t.size() >= s.size() &&
           t.compare(t.size() - s.size(), s.size(), s) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" ||
         (starts("<|") && ends("|>")) ||
         (starts("<\xEF\xBD\x9C") && ends("\xEF\xBD\x9C>")) ||
         (starts("<unused") && ends(">"));
}

/// A special token of tokenizer_config.json: a string, {"content": ...}
/// or null.
std::optional<std::string> config_token(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key))
    return std::nullopt;
  const auto& v = cfg[key];
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

} // namespace

namespace {

hf_vocab convert(const std::string& tokenizer_json,
                 const std::string& tokenizer_config_json,
                 uint32_t vocab_size, const std::string& pre);

} // namespace

hf_vocab hf_vocab_from_json(const std::string& tokenizer_json,
                            const std::string& tokenizer_config_json,
                            uint32_t vocab_size, const std::string& pre) {
  // A value of the wrong type anywhere ("byte_fallback": "yes") is the
  // file's problem, named like every other (found by fuzz_tokenizer: it
  // escaped as nlohmann's type_error).
  try {
    return convert(tokenizer_json, tokenizer_config_json, vocab_size, pre);
  } catch (const json::exception& e) {
    throw gguf_error(std::string{"tokenizer.json or tokenizer_config.json "
                                 "holds a value of the wrong kind: "}
                     + e.what());
  }
}

namespace {

hf_vocab convert(const std::string& tokenizer_json,
                 const std::string& tokenizer_config_json,
                 uint32_t vocab_size, const std::string& pre) {
  const json tj = parse(tokenizer_json, "tokenizer.json");
  const json cfg = tokenizer_config_json.empty()
                       ? json::object()
                       : parse(tokenizer_config_json, "tokenizer_config.json");
  if (!tj.is_object() || !tj.contains("model") || !tj["model"].is_object())
    throw gguf_error("tokenizer.json has no \"model\" object");
  const json& m = tj["model"];
  if (m.value("type", "") != "BPE")
    throw gguf_error("tokenizer.json model type '" + m.value("type", "") +
                     "' is not supported (only BPE)");
  if (!m.contains("vocab") || !m["vocab"].is_object())
    throw gguf_error("tokenizer.json has no model.vocab object");

  // id -> text over the model's vocabulary and the added tokens.
  std::map<int64_t, std::string> by_id;
  std::map<std::string, int64_t> id_of;
  if (vocab_size > max_hf_vocab_tokens)
    throw gguf_error("vocabulary size " + std::to_string(vocab_size) +
                     " is larger than exo converts (" +
                     std::to_string(max_hf_vocab_tokens) + " tokens)");
  auto put = [&](const std::string& text, const json& idv) {
    if (!idv.is_number_integer() || idv.get<int64_t>() < 0 ||
        idv.get<int64_t>() > INT32_MAX)
      throw gguf_error("tokenizer.json: token '" + text + "' has no valid id");
    if (idv.get<int64_t>() >= static_cast<int64_t>(max_hf_vocab_tokens))
      throw gguf_error("tokenizer.json: token '" + text + "' has id " +
                       std::to_string(idv.get<int64_t>()) +
                       ", beyond the largest vocabulary exo converts (" +
                       std::to_string(max_hf_vocab_tokens) + " tokens)");
    int64_t id = idv.get<int64_t>();
    by_id[id] = text;
    id_of[text] = id;
  };
  for (auto& [text, idv] : m["vocab"].items())
    put(text, idv);
  const size_t base_size = by_id.size();
  struct added {
    std::string content;
    bool special, normalized;
  };
  std::map<int64_t, added> added_tokens;
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array())
    for (auto& a : tj["added_tokens"]) {
      auto content = a.value("content", std::string());
      if (content.empty() || !a.contains("id"))
        throw gguf_error("tokenizer.json: an added token has no content "
                         "or id");
      put(content, a["id"]);
      added_tokens[a["id"].get<int64_t>()] = {
          content, a.value("special", false), a.value("normalized", false)};
    }
  const int64_t max_id = by_id.empty() ? -1 : by_id.rbegin()->first;

  hf_vocab v;
  const bool byte_fallback = m.value("byte_fallback", false);
  const bool spm = byte_fallback && tj.contains("decoder") &&
                   tj["decoder"].is_object() &&
                   tj["decoder"].value("type", "") == "Sequence";
  if (spm) {
    // LlamaHfVocab: the base vocabulary, then the added tokens above it.
    v.model = "llama";
    v.pre = "default";
    std::set<std::string> specials;
    for (auto* key : {"bos_token", "eos_token", "unk_token", "pad_token",
                      "sep_token", "cls_token", "mask_token"})
      if (auto t = config_token(cfg, key))
        specials.insert(*t);
    if (cfg.is_object() && cfg.contains("additional_special_tokens") &&
        cfg["additional_special_tokens"].is_array())
      for (auto& t : cfg["additional_special_tokens"])
        if (t.is_string())
          specials.insert(t.get<std::string>());
    static const std::regex byte_re("<0x[0-9A-Fa-f]{2}>");
    for (int64_t id = 0; id <= max_id; ++id) {
      auto it = by_id.find(id);
      if (it == by_id.end())
        throw gguf_error("tokenizer.json: token id " + std::to_string(id) +
                         " is missing (ids must be contiguous)");
      const auto& text = it->second;
      int32_t type;
      if (static_cast<size_t>(id) >= base_size)
        type = static_cast<int32_t>(specials.count(text)
                                        ? token_kind::control
                                        : token_kind::user_defined);
      else if (std::regex_match(text, byte_re))
        type = static_cast<int32_t>(token_kind::byte);
      else if (specials.count(text))
        type = static_cast<int32_t>(token_kind::control);
      else
        type = static_cast<int32_t>(token_kind::normal);
      v.tokens.push_back(text);
      v.scores.push_back(-1000.0f);
      v.types.push_back(type);
    }
    for (uint32_t k = 1; v.tokens.size() < vocab_size; ++k) {
      v.tokens.push_back("[PAD" + std::to_string(k) + "]");
      v.scores.push_back(-1000.0f);
      v.types.push_back(static_cast<int32_t>(token_kind::unused));
    }
  } else {
    v.model = "gpt2";
    v.pre = pre.empty() ? pre_name(tj.value("pre_tokenizer", json())) : pre;
    // Without a vocabulary size the tokenizer's own count is the size, as
    // convert_hf_to_gguf.py takes it (len(vocab)): an id at or above it
    // leaves ids without a token, which only a given size pads (and an id
    // far out would otherwise pad millions of them: found by
    // fuzz_tokenizer).
    const int64_t n =
        vocab_size == 0 ? static_cast<int64_t>(by_id.size()) : vocab_size;
    if (max_id >= n)
      throw gguf_error(
          "tokenizer.json has token id " + std::to_string(max_id) +
          ", outside the vocabulary size " + std::to_string(n) +
          (vocab_size == 0 ? " (its count of tokens: ids must be contiguous "
                             "unless a vocabulary size pads them)"
                           : ""));
    for (int64_t id = 0; id < n; ++id) {
      auto it = by_id.find(id);
      if (it == by_id.end()) {
        v.tokens.push_back("[PAD" + std::to_string(id) + "]");
        v.types.push_back(static_cast<int32_t>(token_kind::unused));
        continue;
      }
      std::string text = it->second;
      auto a = added_tokens.find(id);
      int32_t type = static_cast<int32_t>(token_kind::normal);
      if (a != added_tokens.end()) {
        if (a->second.special || looks_special(text)) {
          type = static_cast<int32_t>(token_kind::control);
        } else {
          // User-defined spaces are pre-normalised (U+2581 -> ' ').
          std::string out;
          for (size_t i = 0; i < text.size();) {
            if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
              out += ' ';
              i += 3;
            } else {
              out += text[i++];
            }
          }
          text = out;
          type = static_cast<int32_t>(token_kind::user_defined);
        }
      }
      v.tokens.push_back(text);
      v.types.push_back(type);
    }
    if (!m.contains("merges") || !m["merges"].is_array() || m["merges"].empty())
      throw gguf_error("tokenizer.json has no model.merges: a byte-level "
                       "BPE vocabulary needs its merges");
    v.merges.reserve(m["merges"].size());
    for (auto& e : m["merges"]) {
      if (e.is_string()) {
        v.merges.push_back(e.get<std::string>());
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() &&
                 e[1].is_string()) {
        v.merges.push_back(e[0].get<std::string>() + " " +
                           e[1].get<std::string>());
      } else {
        throw gguf_error("tokenizer.json: merge " + e.dump() +
                         " is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }

  // Special tokens, as gguf-py's SpecialVocab finds them.
  auto id_for = [&](const char* key) -> int64_t {
    auto t = config_token(cfg, key);
    if (!t)
      return -1;
    auto it = id_of.find(*t);
    return it == id_of.end() ? -1 : it->second;
  };
  v.bos = id_for("bos_token");
  v.eos = id_for("eos_token");
  v.unk = id_for("unk_token");
  v.pad = id_for("pad_token");
  if (v.bos < 0 && v.model == "gpt2") {
    // Qwen names no BOS in tokenizer_config.json; its config.json (not
    // read here) gives <|endoftext|>, which convert_hf_to_gguf.py writes.
    if (auto it = id_of.find("<|endoftext|>"); it != id_of.end())
      v.bos = it->second;
  }
  if (cfg.is_object()) {
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      v.add_bos = cfg["add_bos_token"].get<bool>();
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean())
      v.add_eos = cfg["add_eos_token"].get<bool>();
    if (cfg.contains("chat_template")) {
      const auto& ct = cfg["chat_template"];
      if (ct.is_string()) {
        v.chat_template = ct.get<std::string>();
      } else if (ct.is_array()) {
        for (auto& e : ct)
          if (e.is_object() && e.value("name", "") == "default" &&
              e.contains("template") && e["template"].is_string())
            v.chat_template = e["template"].get<std::string>();
      }
    }
  }
  // Without add_bos_token in the config, a TemplateProcessing post
  // processor says whether BOS/EOS surround a single sequence.
  if (!v.add_bos && tj.contains("post_processor") &&
      tj["post_processor"].is_object() &&
      tj["post_processor"].value("type", "") == "TemplateProcessing" &&
      tj["post_processor"].contains("single") &&
      tj["post_processor"]["single"].is_array() &&
      !tj["post_processor"]["single"].empty()) {
    const auto& single = tj["post_processor"]["single"];
    auto special_id = [](const json& e) -> std::string {
      if (e.is_object() && e.contains("SpecialToken"))
        return e["SpecialToken"].value("id", "");
      return "";
    };
    auto bos_text = config_token(cfg, "bos_token");
    auto eos_text = config_token(cfg, "eos_token");
    v.add_bos = bos_text && special_id(single.front()) == *bos_text;
    if (!v.add_eos)
      v.add_eos = eos_text && special_id(single.back()) == *eos_text;
  }
  const auto n = static_cast<int64_t>(v.tokens.size());
  for (auto id : {v.bos, v.eos, v.unk, v.pad})
    if (id >= n)
      throw gguf_error("tokenizer_config.json names token " +
                       std::to_string(id) + ", outside the vocabulary of " +
                       std::to_string(n));
  return v;
}

} // namespace

hf_vocab load_hf_vocab(const std::string& tokenizer_path,
                       const std::string& config_path, uint32_t vocab_size) {
  return hf_vocab_from_json(
      read_file(tokenizer_path),
      config_path.empty() ? std::string() : read_file(config_path), vocab_size);
}

} // namespace exo::model
