#include "core/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/tokenizer/pretokenizer.hpp"

namespace exo::model {

namespace {

// llama.cpp's llama_token_attr bits.
constexpr uint32_t attr_unknown = 1u << 0;
constexpr uint32_t attr_unused = 1u << 1;
constexpr uint32_t attr_normal = 1u << 2;
constexpr uint32_t attr_control = 1u << 3;
constexpr uint32_t attr_user_defined = 1u << 4;
constexpr uint32_t attr_byte = 1u << 5;

uint32_t attr_of(int32_t type) {
  switch (static_cast<token_kind>(type)) {
  case token_kind::normal:
    return attr_normal;
  case token_kind::unknown:
    return attr_unknown;
  case token_kind::control:
    return attr_control;
  case token_kind::user_defined:
    return attr_user_defined;
  case token_kind::unused:
    return attr_unused;
  case token_kind::byte:
    return attr_byte;
  }
  return 0; // undefined
}

const std::string space_marker = "\xE2\x96\x81"; // U+2581

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

/// Length of the UTF-8 sequence a byte starts, as llama.cpp counts it.
size_t utf8_len(unsigned char c) {
  static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                    1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[c >> 4];
}

struct byte_map {
  std::string to_unicode[256];
  std::unordered_map<std::string, uint8_t> from_unicode;
  byte_map() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                    (b >= 0xAE && b <= 0xFF);
      uint32_t cp =
          direct ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      to_unicode[b] = utf8(cp);
      from_unicode[to_unicode[b]] = static_cast<uint8_t>(b);
    }
  }
};

const byte_map& bytes() {
  static const byte_map m;
  return m;
}

std::vector<std::string> string_array(const gguf_file& f,
                                      const std::string& key) {
  auto& a = f.get_array(key);
  if (a.type != gguf_value_type::string)
    throw gguf_error("key '" + key + "' must be an array of strings");
  std::vector<std::string> out;
  out.reserve(a.values.size());
  for (auto& v : a.values)
    out.push_back(std::get<std::string>(v));
  return out;
}

void replace_all(std::string& s, const std::string& from,
                 const std::string& to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  for (size_t hit; (hit = s.find(from, i)) != std::string::npos;) {
    out.append(s, i, hit - i);
    out += to;
    i = hit + from.size();
  }
  out.append(s, i, std::string::npos);
  s = std::move(out);
}

/// The settings llama.cpp derives from a BPE pre-tokenizer name.
struct bpe_settings {
  bool clean_spaces = true;
  bool ignore_merges = false;
  bool add_bos = false;
};

bpe_settings settings_for(const std::string& pre) {
  bpe_settings s;
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") {
    s.ignore_merges = true;
    s.add_bos = true;
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "smollm") {
    s.clean_spaces = false;
  }
  return s;
}

// Texts by which llama.cpp recognises special tokens the file does not name.
const char* const eot_texts[] = {"<|eot_id|>",
                                 "<|im_end|>",
                                 "<|end|>",
                                 "<end_of_turn>",
                                 "<|endoftext|>",
                                 "<|end_of_text|>",
                                 "<EOT>",
                                 "_<EOT>",
                                 "[EOT]",
                                 "<\xEF\xBD\x9C"
                                 "end\xE2\x96\x81"
                                 "of\xE2\x96\x81"
                                 "sentence\xEF\xBD\x9C>",
                                 "<end_of_utterance>"};
const char* const eog_texts[] = {"<|eot_id|>",
                                 "<|im_end|>",
                                 "<|end|>",
                                 "<|return|>",
                                 "<|call|>",
                                 "<|flush|>",
                                 "<|calls|>",
                                 "<end_of_turn>",
                                 "<|endoftext|>",
                                 "</s>",
                                 "<|eom_id|>",
                                 "<EOT>",
                                 "_<EOT>",
                                 "[EOT]",
                                 "[EOS]",
                                 "<|end_of_text|>",
                                 "<end_of_utterance>",
                                 "<eos>",
                                 "<turn|>",
                                 "<|tool_response>",
                                 "<\xEF\xBD\x9C"
                                 "end\xE2\x96\x81"
                                 "of\xE2\x96\x81"
                                 "sentence\xEF\xBD\x9C>",
                                 "[e~["};
const char* const fim_pre_texts[] = {
    "<|fim_prefix|>",    "<fim-prefix>",    "<fim_prefix>", "<PRE>",
    "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"};
const char* const fim_suf_texts[] = {
    "<|fim_suffix|>",    "<fim-suffix>",    "<fim_suffix>", "<SUF>",
    "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"};
const char* const fim_mid_texts[] = {
    "<|fim_middle|>",    "<fim-middle>",    "<fim_middle>", "<MID>",
    "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};
const char* const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                     "<PAD>", "[PAD]"};
const char* const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>",
                                     "<fim-repo>", "<REPO>", "<reponame>"};
const char* const fim_sep_texts[] = {"<|file_sep|>"};

} // namespace

const std::string& gpt2_byte_to_unicode(uint8_t b) {
  return bytes().to_unicode[b];
}

tokenizer::tokenizer() = default;
tokenizer::~tokenizer() = default;
tokenizer::tokenizer(tokenizer&&) noexcept = default;
tokenizer& tokenizer::operator=(tokenizer&&) noexcept = default;

tokenizer tokenizer::from_gguf(const gguf_file& f) {
  tokenizer t;
  t.kind_ = f.get_string("tokenizer.ggml.model");
  t.pre_ = f.get_string_or("tokenizer.ggml.pre", "default");
  if (t.kind_ == "llama") {
    t.pre_ = "default";
    t.bos_ = 1;
    t.eos_ = 2;
    t.unk_ = 0;
    t.add_space_prefix_ = true;
    t.add_bos_ = true;
  } else if (t.kind_ == "gpt2") {
    if (t.pre_.empty())
      t.pre_ = "default";
    // Throws for an unknown name before anything else is read.
    t.pretok_ =
        std::make_unique<pretokenizer>(pretokenizer::regexes_for(t.pre_));
    auto s = settings_for(t.pre_);
    t.clean_spaces_ = s.clean_spaces;
    t.ignore_merges_ = s.ignore_merges;
    t.add_bos_ = s.add_bos;
    t.bos_ = t.eos_ = 11;
    if (!f.find("tokenizer.ggml.merges"))
      throw gguf_error("tokenizer.ggml.merges is missing: a gpt2 (BPE) "
                       "vocabulary needs its merges");
  } else {
    throw gguf_error("unsupported tokenizer model '" + t.kind_ +
                     "' in tokenizer.ggml.model (supported: llama, gpt2)");
  }
  if (f.find("tokenizer.ggml.add_space_prefix"))
    t.add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix");

  t.pieces_ = string_array(f, "tokenizer.ggml.tokens");
  if (t.pieces_.empty())
    throw gguf_error("tokenizer.ggml.tokens is empty");
  if (t.pieces_.size() > static_cast<size_t>(INT32_MAX))
    throw gguf_error("tokenizer.ggml.tokens has too many tokens");
  const size_t n = t.pieces_.size();
  t.types_.assign(n, static_cast<int32_t>(token_kind::normal));
  t.scores_.assign(n, 0.0f);
  if (f.find("tokenizer.ggml.token_type")) {
    auto& a = f.get_array("tokenizer.ggml.token_type");
    if (a.values.size() != n)
      throw gguf_error("tokenizer.ggml.token_type has " +
                       std::to_string(a.values.size()) + " entries for " +
                       std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) {
      if (auto* v = std::get_if<int64_t>(&a.values[i]))
        t.types_[i] = static_cast<int32_t>(*v);
      else if (auto* u = std::get_if<uint64_t>(&a.values[i]))
        t.types_[i] = static_cast<int32_t>(*u);
      else
        throw gguf_error("tokenizer.ggml.token_type must hold integers");
    }
  }
  if (f.find("tokenizer.ggml.scores")) {
    auto& a = f.get_array("tokenizer.ggml.scores");
    if (a.values.size() != n)
      throw gguf_error("tokenizer.ggml.scores has " +
                       std::to_string(a.values.size()) + " entries for " +
                       std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) {
      if (auto* d = std::get_if<double>(&a.values[i]))
        t.scores_[i] = static_cast<float>(*d);
      else if (auto* v = std::get_if<int64_t>(&a.values[i]))
        t.scores_[i] = static_cast<float>(*v);
      else
        throw gguf_error("tokenizer.ggml.scores must hold numbers");
    }
  }
  t.attrs_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    auto& word = t.pieces_[i];
    if (word.empty()) // as llama.cpp names an empty token
      word = "[EMPTY_" + std::to_string(i) + "]";
    if (!t.ids_.emplace(word, static_cast<int32_t>(i)).second)
      throw gguf_error("duplicate token in tokenizer.ggml.tokens: '" + word +
                       "' has ids " + std::to_string(t.ids_.at(word)) +
                       " and " + std::to_string(i));
    t.attrs_[i] = attr_of(t.types_[i]);
  }

  if (t.kind_ == "gpt2") {
    auto merges = string_array(f, "tokenizer.ggml.merges");
    t.merge_rank_.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      auto sp = merges[r].find(' ', 1);
      if (sp == std::string::npos)
        throw gguf_error("tokenizer.ggml.merges entry " + std::to_string(r) +
                         " ('" + merges[r] +
                         "') is not two pieces separated by a space");
      t.merge_rank_.emplace(
          std::make_pair(merges[r].substr(0, sp), merges[r].substr(sp + 1)),
          static_cast<int32_t>(r));
    }
  }

  // Special ids: llama.cpp's defaults unless outside the vocabulary; a file
  // naming an id outside it is refused.
  for (auto* id : {&t.bos_, &t.eos_, &t.unk_})
    if (*id >= 0 && static_cast<size_t>(*id) >= n)
      *id = -1;
  auto id_key = [&](const std::string& key, int32_t& id) {
    if (!f.find(key))
      return;
    auto v = f.get_uint(key);
    if (v >= n)
      throw gguf_error("key '" + key + "' names token " + std::to_string(v) +
                       " outside the vocabulary of " + std::to_string(n));
    id = static_cast<int32_t>(v);
  };
  id_key("tokenizer.ggml.bos_token_id", t.bos_);
  id_key("tokenizer.ggml.eos_token_id", t.eos_);
  id_key("tokenizer.ggml.eot_token_id", t.eot_);
  id_key("tokenizer.ggml.eom_token_id", t.eom_);
  id_key("tokenizer.ggml.unknown_token_id", t.unk_);
  if (f.find("tokenizer.ggml.add_bos_token"))
    t.add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token");
  if (f.find("tokenizer.ggml.add_eos_token"))
    t.add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token");
  if (t.add_bos_ && t.bos_ < 0)
    throw gguf_error("tokenizer.ggml.add_bos_token is true, but "
                     "tokenizer.ggml.bos_token_id is not set");
  if (t.add_eos_ && t.eos_ < 0)
    throw gguf_error("tokenizer.ggml.add_eos_token is true, but "
                     "tokenizer.ggml.eos_token_id is not set");

  // Tokens llama.cpp recognises by their text: they become control tokens.
  auto find_text = [&](const char* s) {
    auto it = t.ids_.find(s);
    return it == t.ids_.end() ? -1 : it->second;
  };
  auto detect = [&](auto& texts, int32_t& id) {
    if (id >= 0)
      return;
    for (const char* s : texts)
      if (int32_t hit = find_text(s); hit >= 0) {
        id = hit;
        t.attrs_[hit] |= attr_control;
        return;
      }
  };
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1,
          fim_sep = -1;
  detect(eot_texts, t.eot_);
  const char* const eom_texts[] = {"<|eom_id|>"};
  detect(eom_texts, t.eom_);
  detect(fim_pre_texts, fim_pre);
  detect(fim_suf_texts, fim_suf);
  detect(fim_mid_texts, fim_mid);
  detect(fim_pad_texts, fim_pad);
  detect(fim_rep_texts, fim_rep);
  detect(fim_sep_texts, fim_sep);
  for (size_t i = 0; i < n; ++i)
    if ((t.attrs_[i] & attr_control) &&
        t.pieces_[i].find("unused") != std::string::npos)
      t.attrs_[i] |= attr_unused;

  // The end-of-generation set.
  for (auto id : {fim_pad, fim_rep, fim_sep})
    if (id >= 0)
      t.eog_.insert(id);
  for (const char* s : eog_texts)
    if (int32_t id = find_text(s); id >= 0) {
      t.eog_.insert(id);
      t.attrs_[id] |= attr_control;
    }
  for (auto id : {t.eos_, t.eot_, t.eom_})
    if (id >= 0)
      t.eog_.insert(id);

  // Tokens looked for in text, longest first.
  for (size_t i = 0; i < n; ++i)
    if (t.attrs_[i] & (attr_control | attr_user_defined | attr_unknown))
      t.special_cache_.push_back(static_cast<int32_t>(i));
  std::stable_sort(t.special_cache_.begin(), t.special_cache_.end(),
                   [&](int32_t a, int32_t b) {
                     return t.pieces_[a].size() > t.pieces_[b].size();
                   });
  return t;
}

void tokenizer::check_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size())
    throw gguf_error("token id " + std::to_string(id) +
                     " is outside the vocabulary of " +
                     std::to_string(pieces_.size()));
}

const std::string& tokenizer::raw_piece(int32_t id) const {
  check_id(id);
  return pieces_[id];
}

token_kind tokenizer::type(int32_t id) const {
  check_id(id);
  return static_cast<token_kind>(types_[id]);
}

int32_t tokenizer::byte_token(uint8_t b) const {
  if (kind_ == "llama") {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    if (auto it = ids_.find(buf); it != ids_.end())
      return it->second;
    if (auto it = ids_.find(std::string(1, static_cast<char>(b)));
        it != ids_.end())
      return it->second;
    throw gguf_error("the vocabulary has no token for byte " +
                     std::string(buf) + " (byte fallback)");
  }
  auto it = ids_.find(gpt2_byte_to_unicode(b));
  return it == ids_.end() ? -1 : it->second;
}

std::vector<int32_t> tokenizer::tokenize(const std::string& text,
                                         bool add_special,
                                         bool parse_special) const {
  // Partition the text around the special tokens it contains.
  struct fragment {
    int32_t token; // -1: the text [offset, offset + length)
    size_t offset, length;
  };
  std::vector<fragment> frags;
  if (!text.empty())
    frags.push_back({-1, 0, text.size()});
  for (int32_t id : special_cache_) {
    if (!parse_special && (attrs_[id] & (attr_control | attr_unknown)))
      continue;
    const auto& needle = pieces_[id];
    std::vector<fragment> next;
    next.reserve(frags.size());
    for (auto& fr : frags) {
      if (fr.token >= 0) {
        next.push_back(fr);
        continue;
      }
      size_t pos = fr.offset;
      const size_t end = fr.offset + fr.length;
      while (pos < end) {
        auto hit = text.find(needle, pos);
        if (hit == std::string::npos || hit + needle.size() > end)
          break;
        if (hit > pos)
          next.push_back({-1, pos, hit - pos});
        next.push_back({id, 0, 0});
        pos = hit + needle.size();
      }
      if (pos < end)
        next.push_back({-1, pos, end - pos});
    }
    frags = std::move(next);
  }

  std::vector<int32_t> out;
  if (add_special && add_bos_)
    out.push_back(bos_);
  bool prev_special = true; // SPM: a space in front of the first text
  for (auto& fr : frags) {
    if (fr.token >= 0) {
      out.push_back(fr.token);
      prev_special = true;
      continue;
    }
    auto piece = text.substr(fr.offset, fr.length);
    if (kind_ == "llama") {
      if (add_space_prefix_ && prev_special)
        piece.insert(0, 1, ' ');
      replace_all(piece, " ", space_marker);
      tokenize_spm(piece, out);
    } else {
      tokenize_bpe(piece, out);
    }
    prev_special = false;
  }
  if (add_special && add_eos_)
    out.push_back(eos_);
  return out;
}

std::vector<int32_t> tokenizer::encode(const std::string& text,
                                       bool with_bos) const {
  std::vector<int32_t> out;
  if (with_bos && bos_ >= 0)
    out.push_back(bos_);
  auto body = tokenize(text, false, false);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

void tokenizer::tokenize_spm(const std::string& text,
                             std::vector<int32_t>& out) const {
  struct symbol {
    size_t start, len;
    int prev, next;
  };
  std::vector<symbol> sym;
  for (size_t i = 0; i < text.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(text[i])),
                        text.size() - i);
    int idx = static_cast<int>(sym.size());
    sym.push_back({i, n, idx - 1, i + n == text.size() ? -1 : idx + 1});
    i += n;
  }
  if (sym.empty())
    return;
  struct bigram {
    int left, right;
    float score;
    size_t len;
  };
  // Highest score first; on a tie the leftmost.
  auto cmp = [](const bigram& a, const bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<bigram, std::vector<bigram>, decltype(cmp)> q(cmp);
  std::unordered_map<std::string, std::pair<int, int>> rev_merge;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0)
      return;
    auto s = text.substr(sym[l].start, sym[l].len + sym[r].len);
    auto it = ids_.find(s);
    if (it == ids_.end())
      return;
    q.push({l, r, scores_[it->second], s.size()});
    rev_merge[s] = {l, r};
  };
  for (size_t i = 1; i < sym.size(); ++i)
    try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!q.empty()) {
    auto b = q.top();
    q.pop();
    auto& l = sym[b.left];
    auto& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len)
      continue; // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0)
      sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  // A piece that is no token goes back to the merge that made it, down to
  // single characters, which fall back to byte tokens.
  auto resegment = [&](auto& self, int i) -> void {
    const auto s = text.substr(sym[i].start, sym[i].len);
    if (auto it = ids_.find(s); it != ids_.end()) {
      out.push_back(it->second);
      return;
    }
    auto p = rev_merge.find(s);
    if (p == rev_merge.end()) {
      for (unsigned char c : s)
        out.push_back(byte_token(c));
      return;
    }
    auto [l, r] = p->second;
    self(self, l);
    self(self, r);
  };
  for (int i = 0; i != -1; i = sym[i].next)
    resegment(resegment, i);
}

void tokenizer::tokenize_bpe(const std::string& text,
                             std::vector<int32_t>& out) const {
  for (auto& w : pretok_->split(sanitize_utf8(text))) {
    std::string mapped;
    for (unsigned char c : w)
      mapped += gpt2_byte_to_unicode(c);
    bpe_word(mapped, out);
  }
}

void tokenizer::bpe_word(const std::string& word,
                         std::vector<int32_t>& out) const {
  struct symbol {
    size_t start, len;
    int prev, next;
  };
  std::vector<symbol> sym;
  if (ignore_merges_ && ids_.count(word)) {
    sym.push_back({0, word.size(), -1, -1});
  } else {
    for (size_t i = 0; i < word.size();) {
      size_t n = std::min(utf8_len(static_cast<unsigned char>(word[i])),
                          word.size() - i);
      int idx = static_cast<int>(sym.size());
      sym.push_back({i, n, idx - 1, i + n == word.size() ? -1 : idx + 1});
      i += n;
    }
  }
  struct bigram {
    int left, right;
    std::string text;
    int32_t rank;
  };
  // Lowest rank first; on a tie the leftmost.
  auto cmp = [](const bigram& a, const bigram& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<bigram, std::vector<bigram>, decltype(cmp)> q(cmp);
  auto text_of = [&](int i) { return word.substr(sym[i].start, sym[i].len); };
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0)
      return;
    auto a = text_of(l), b = text_of(r);
    auto it = merge_rank_.find({a, b});
    if (it == merge_rank_.end())
      return;
    q.push({l, r, a + b, it->second});
  };
  for (size_t i = 1; i < sym.size(); ++i)
    try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!q.empty()) {
    auto b = q.top();
    q.pop();
    auto& l = sym[b.left];
    auto& r = sym[b.right];
    if (l.len == 0 || r.len == 0 ||
        text_of(b.left) + text_of(b.right) != b.text)
      continue; // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0)
      sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int i = 0; i != -1 && !sym.empty(); i = sym[i].next) {
    auto s = text_of(i);
    if (auto it = ids_.find(s); it != ids_.end()) {
      out.push_back(it->second);
      continue;
    }
    // Not a token (merges and vocabulary disagree): llama.cpp looks up each
    // byte of the mapped text on its own and drops what it does not find.
    for (char c : s)
      if (auto it = ids_.find(std::string(1, c)); it != ids_.end())
        out.push_back(it->second);
  }
}

std::string tokenizer::piece_text(int32_t id) const {
  const auto& p = pieces_[id];
  const uint32_t a = attrs_[id];
  if (a & (attr_unknown | attr_control | attr_user_defined))
    return p;
  if (a & attr_normal) {
    if (kind_ == "llama") {
      std::string out = p;
      replace_all(out, space_marker, " ");
      return out;
    }
    std::string out;
    for (size_t i = 0; i < p.size();) {
      size_t n =
          std::min(utf8_len(static_cast<unsigned char>(p[i])), p.size() - i);
      auto ch = p.substr(i, n);
      auto it = bytes().from_unicode.find(ch);
      if (it != bytes().from_unicode.end()) {
        out += static_cast<char>(it->second);
      } else { // as llama.cpp marks a character outside the byte alphabet
        out += "[UNK_BYTE_0x";
        for (unsigned char c : ch) {
          char buf[4];
          std::snprintf(buf, sizeof buf, "%02x", c);
          out += buf;
        }
        out += p + "]";
      }
      i += n;
    }
    return out;
  }
  if (a & attr_byte) {
    if (p.size() >= 5) {
      auto v = std::strtoul(p.substr(3, 2).c_str(), nullptr, 16);
      return std::string(1, static_cast<char>(v));
    }
    return std::string(1, '\0');
  }
  return {}; // unused or undefined
}

std::string tokenizer::piece(int32_t id, bool special) const {
  check_id(id);
  if (!special && (attrs_[id] & (attr_unknown | attr_control)))
    return {};
  return piece_text(id);
}

std::string tokenizer::detokenize(const std::vector<int32_t>& ids,
                                  bool special) const {
  std::string text;
  bool remove_space = add_space_prefix_;
  for (auto id : ids) {
    auto p = piece(id, special);
    if (remove_space && !p.empty() && p[0] == ' ')
      p.erase(0, 1);
    remove_space = false;
    text += p;
  }
  if (!clean_spaces_ || text.empty())
    return text;
  // clean_up_tokenization_spaces, pass by pass as llama.cpp does it.
  size_t total = text.size(), n = 0;
  n = 1;
  for (size_t i = 1; i < total; ++i) { // " ?", " !", " .", " ,"
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
      --n;
    text[n++] = x;
  }
  total = n;
  n = 1;
  for (size_t i = 1; i < total; ++i) { // " ' "
    const char x = text[i];
    if (x == '\'' && i + 1 < total && text[i - 1] == ' ' &&
        text[i + 1] == ' ') {
      --n;
      text[++i] = '\0';
    }
    text[n++] = x;
  }
  total = n;
  n = 1;
  for (size_t i = 1; i < total; ++i) { // " 's", " 'm", " 're", " 've"
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < total) {
      const char x1 = text[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --n;
      } else if (i + 2 < total) {
        const char x2 = text[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))
          --n;
      }
    }
    text[n++] = x;
  }
  text.resize(n);
  return text;
}

std::string tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  bool first = true;
  for (auto id : ids) {
    auto p = piece(id);
    if (p.empty())
      continue;
    if (first && kind_ == "llama" && add_space_prefix_ && p[0] == ' ')
      p.erase(0, 1);
    first = false;
    out += p;
  }
  return out;
}

} // namespace exo::model
