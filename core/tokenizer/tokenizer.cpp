#include "core/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <queue>

namespace exo::model {

namespace {

const std::string space_marker = "\xE2\x96\x81"; // U+2581

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

/// Length of the UTF-8 sequence starting with byte c (1 for invalid bytes).
size_t utf8_len(unsigned char c) {
  if (c < 0x80)
    return 1;
  if ((c >> 5) == 0x6)
    return 2;
  if ((c >> 4) == 0xE)
    return 3;
  if ((c >> 3) == 0x1E)
    return 4;
  return 1;
}

/// Splits s into UTF-8 characters (invalid or cut sequences give 1 byte).
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(s[i])),
                        s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

struct byte_map {
  std::string to_unicode[256];
  std::unordered_map<std::string, uint8_t> from_unicode;
  byte_map() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC)
                    || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = direct ? static_cast<uint32_t>(b)
                           : static_cast<uint32_t>(256 + n++);
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

bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v'
         || c == '\f';
}
bool is_letter(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
bool is_digit(unsigned char c) {
  return c >= '0' && c <= '9';
}

/// GPT-2's pre-tokenizer pattern, with every non-ASCII byte taken as a
/// letter: 's|'t|'re|'ve|'m|'ll|'d| ?L+| ?N+| ?[^sLN]+|s+(?!S)|s+
std::vector<std::string> gpt2_pretokenize(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  const size_t n = s.size();
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < n) {
    if (s[i] == '\'') {
      static const char* cs[] = {"'s", "'t", "'re", "'ve", "'m", "'ll",
                                 "'d"};
      bool hit = false;
      for (auto* c : cs) {
        std::string cc(c);
        if (s.compare(i, cc.size(), cc) == 0) {
          out.push_back(cc);
          i += cc.size();
          hit = true;
          break;
        }
      }
      if (hit)
        continue;
    }
    size_t j = i;
    if (at(j) == ' ' && j + 1 < n && !is_space(at(j + 1)))
      ++j;
    if (j < n && !is_space(at(j))) {
      auto cls = [&](unsigned char c) {
        return is_letter(c) ? 0 : is_digit(c) ? 1 : 2;
      };
      int k = cls(at(j));
      while (j < n && !is_space(at(j)) && cls(at(j)) == k)
        ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
      continue;
    }
    // A run of whitespace.
    j = i;
    while (j < n && is_space(at(j)))
      ++j;
    if (j < n && j - i > 1)
      --j; // leave the last one to prefix the next word
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

} // namespace

const std::string& gpt2_byte_to_unicode(uint8_t b) {
  return bytes().to_unicode[b];
}

tokenizer tokenizer::from_gguf(const gguf_file& f) {
  tokenizer t;
  t.kind_ = f.get_string("tokenizer.ggml.model");
  if (t.kind_ != "llama" && t.kind_ != "gpt2")
    throw gguf_error("unsupported tokenizer model '" + t.kind_
                     + "' (supported: llama, gpt2)");
  t.pieces_ = string_array(f, "tokenizer.ggml.tokens");
  if (t.pieces_.empty())
    throw gguf_error("tokenizer.ggml.tokens is empty");
  const size_t n = t.pieces_.size();
  t.types_.assign(n, static_cast<int32_t>(token_kind::normal));
  t.scores_.assign(n, 0.0f);
  if (f.find("tokenizer.ggml.token_type")) {
    auto& a = f.get_array("tokenizer.ggml.token_type");
    if (a.values.size() != n)
      throw gguf_error("tokenizer.ggml.token_type has "
                       + std::to_string(a.values.size())
                       + " entries for " + std::to_string(n) + " tokens");
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
      throw gguf_error("tokenizer.ggml.scores has "
                       + std::to_string(a.values.size())
                       + " entries for " + std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) {
      auto* d = std::get_if<double>(&a.values[i]);
      if (!d)
        throw gguf_error("tokenizer.ggml.scores must hold floats");
      t.scores_[i] = static_cast<float>(*d);
    }
  }
  for (size_t i = 0; i < n; ++i)
    t.ids_.emplace(t.pieces_[i], static_cast<int32_t>(i));
  auto id_key = [&](const std::string& key, int32_t fallback) {
    if (!f.find(key))
      return fallback;
    auto v = f.get_uint(key);
    if (v >= n)
      throw gguf_error("key '" + key + "' names token " + std::to_string(v)
                       + " outside the vocabulary of " + std::to_string(n));
    return static_cast<int32_t>(v);
  };
  t.bos_ = id_key("tokenizer.ggml.bos_token_id", -1);
  t.eos_ = id_key("tokenizer.ggml.eos_token_id", -1);
  t.unk_ = id_key("tokenizer.ggml.unknown_token_id", -1);
  if (f.find("tokenizer.ggml.add_bos_token"))
    t.add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token");
  else
    t.add_bos_ = t.kind_ == "llama";
  if (f.find("tokenizer.ggml.add_space_prefix"))
    t.add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix");
  for (int b = 0; b < 256; ++b) {
    std::string key;
    if (t.kind_ == "llama") {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      key = buf;
    } else {
      key = gpt2_byte_to_unicode(static_cast<uint8_t>(b));
    }
    auto it = t.ids_.find(key);
    t.byte_tokens_[b] = it == t.ids_.end() ? -1 : it->second;
  }
  if (t.kind_ == "gpt2") {
    auto merges = string_array(f, "tokenizer.ggml.merges");
    for (size_t r = 0; r < merges.size(); ++r) {
      auto sp = merges[r].find(' ', 1);
      if (sp == std::string::npos)
        throw gguf_error("tokenizer.ggml.merges entry "
                         + std::to_string(r) + " has no space");
      t.merge_rank_.emplace(
        std::make_pair(merges[r].substr(0, sp), merges[r].substr(sp + 1)),
        static_cast<int32_t>(r));
    }
  }
  return t;
}

const std::string& tokenizer::raw_piece(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size())
    throw gguf_error("token id " + std::to_string(id)
                     + " is outside the vocabulary of "
                     + std::to_string(pieces_.size()));
  return pieces_[id];
}

std::vector<int32_t> tokenizer::encode(const std::string& text,
                                       bool with_bos) const {
  std::vector<int32_t> out;
  if (with_bos && bos_ >= 0)
    out.push_back(bos_);
  if (text.empty())
    return out;
  auto body = kind_ == "llama" ? encode_spm(text) : encode_bpe(text);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<int32_t> tokenizer::encode_spm(const std::string& raw) const {
  std::string text = add_space_prefix_ ? " " + raw : raw;
  std::string esc;
  for (char c : text) {
    if (c == ' ')
      esc += space_marker;
    else
      esc += c;
  }
  struct symbol {
    size_t start, len;
    int prev, next;
  };
  std::vector<symbol> sym;
  for (size_t i = 0; i < esc.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(esc[i])),
                        esc.size() - i);
    int idx = static_cast<int>(sym.size());
    sym.push_back({i, n, idx - 1, idx + 1});
    i += n;
  }
  sym.back().next = -1;
  struct bigram {
    int left, right;
    float score;
    size_t len;
  };
  auto cmp = [](const bigram& a, const bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<bigram, std::vector<bigram>, decltype(cmp)> q(cmp);
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0)
      return;
    auto it = ids_.find(esc.substr(sym[l].start, sym[l].len + sym[r].len));
    if (it == ids_.end())
      return;
    q.push({l, r, scores_[it->second], sym[l].len + sym[r].len});
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
  std::vector<int32_t> out;
  for (int i = 0; i != -1; i = sym[i].next) {
    auto piece = esc.substr(sym[i].start, sym[i].len);
    auto it = ids_.find(piece);
    if (it != ids_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (unsigned char c : piece) {
      if (byte_tokens_[c] >= 0)
        out.push_back(byte_tokens_[c]);
      else if (unk_ >= 0)
        out.push_back(unk_);
    }
  }
  return out;
}

void tokenizer::bpe_word(const std::string& word,
                         std::vector<int32_t>& out) const {
  std::string mapped;
  for (unsigned char c : word)
    mapped += gpt2_byte_to_unicode(c);
  auto parts = utf8_chars(mapped);
  while (parts.size() > 1) {
    int best = -1;
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = merge_rank_.find({parts[i], parts[i + 1]});
      if (it != merge_rank_.end() && it->second < best_rank) {
        best_rank = it->second;
        best = static_cast<int>(i);
      }
    }
    if (best < 0)
      break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + best + 1);
  }
  for (auto& p : parts) {
    auto it = ids_.find(p);
    if (it != ids_.end()) {
      out.push_back(it->second);
      continue;
    }
    // Not in the vocabulary: fall back to one token per byte.
    for (auto& ch : utf8_chars(p)) {
      auto bm = bytes().from_unicode.find(ch);
      int32_t id = bm == bytes().from_unicode.end()
                     ? -1
                     : byte_tokens_[bm->second];
      if (id >= 0)
        out.push_back(id);
      else if (unk_ >= 0)
        out.push_back(unk_);
    }
  }
}

std::vector<int32_t> tokenizer::encode_bpe(const std::string& text) const {
  std::vector<int32_t> out;
  for (auto& w : gpt2_pretokenize(text))
    bpe_word(w, out);
  return out;
}

std::string tokenizer::piece(int32_t id) const {
  const auto& p = raw_piece(id);
  const auto type = static_cast<token_kind>(types_[id]);
  if (type == token_kind::control || type == token_kind::unknown
      || type == token_kind::unused)
    return {};
  if (kind_ == "llama") {
    if (type == token_kind::byte && p.size() == 6 && p[0] == '<') {
      auto v = std::strtoul(p.substr(3, 2).c_str(), nullptr, 16);
      return std::string(1, static_cast<char>(v));
    }
    std::string out;
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, 3, space_marker) == 0) {
        out += ' ';
        i += 3;
      } else {
        out += p[i++];
      }
    }
    return out;
  }
  std::string out;
  for (auto& ch : utf8_chars(p)) {
    auto it = bytes().from_unicode.find(ch);
    if (it != bytes().from_unicode.end())
      out += static_cast<char>(it->second);
    else
      out += ch;
  }
  return out;
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
