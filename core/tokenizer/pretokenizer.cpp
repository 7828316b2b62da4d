#include "core/tokenizer/pretokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/gguf/gguf.hpp"

namespace exo::model {

namespace {

// The regexes of llama.cpp's llm_tokenizer_bpe, by pre-tokenizer. The
// contractions are spelled case by case (no inline (?i:...)), as llama.cpp
// adapted them from tokenizer.json.
const char* const gpt2_regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"
    "|\\s+(?!\\S)";
const char* const llama3_regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const qwen2_regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

size_t utf8_len(unsigned char c) {
  static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                    1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[c >> 4];
}

void put_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

} // namespace

std::string sanitize_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const uint32_t replacement = 0xFFFD;
  auto cont = [&](size_t k) {
    return k < s.size() && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80;
  };
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = replacement;
    size_t n = 1;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0 && cont(i + 1)) {
      cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3F);
      n = 2;
    } else if ((c & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3F);
      n = 3;
    } else if ((c & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) &&
               cont(i + 3)) {
      cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) |
           ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3F);
      n = 4;
    }
    // Like llama.cpp, an overlong form is re-encoded in its shortest form;
    // surrogates and code points past U+10FFFF, which llama.cpp cannot
    // encode either, become U+FFFD.
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
      cp = replacement;
    put_utf8(cp, out);
    i += n;
  }
  return out;
}

struct pretokenizer::impl {
  std::vector<pcre2_code*> codes;
  ~impl() {
    for (auto* c : codes)
      pcre2_code_free(c);
  }
};

pretokenizer::pretokenizer(const std::vector<std::string>& regexes)
    : impl_(std::make_unique<impl>()) {
  for (auto& re : regexes) {
    int err = 0;
    PCRE2_SIZE at = 0;
    auto* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                      PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw gguf_error("pre-tokenizer regex '" + re + "' does not compile at " +
                       std::to_string(at) + ": " +
                       reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); // optional: speed only
    impl_->codes.push_back(code);
  }
}

pretokenizer::~pretokenizer() = default;
pretokenizer::pretokenizer(pretokenizer&&) noexcept = default;
pretokenizer& pretokenizer::operator=(pretokenizer&&) noexcept = default;

std::vector<std::string> pretokenizer::regexes_for(const std::string& pre) {
  if (pre == "default" || pre.empty())
    return {"[\\p{P}\\$\\+<=>\\^~\\|]+", gpt2_regex, "\\p{N}+",
            "[0-9][0-9][0-9]"};
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" ||
      pre == "dbrx" || pre == "smaug-bpe")
    return {llama3_regex};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "stablelm2")
    return {qwen2_regex};
  if (pre == "gpt-2" || pre == "gpt2" || pre == "phi-2" || pre == "mpt" ||
      pre == "olmo")
    return {gpt2_regex};
  if (pre == "smollm" || pre == "starcoder" || pre == "refact")
    return {"\\p{N}", gpt2_regex};
  throw gguf_error("unknown pre-tokenizer '" + pre +
                   "' in tokenizer.ggml.pre (supported: default, "
                   "llama-bpe, qwen2, gpt-2, smollm and their aliases)");
}

std::vector<std::string> pretokenizer::split(const std::string& text) const {
  std::vector<std::string> pieces{text};
  if (text.empty())
    return {};
  pcre2_match_data* md = nullptr;
  for (auto* code : impl_->codes) {
    md = pcre2_match_data_create_from_pattern(code, nullptr);
    if (md == nullptr)
      throw std::bad_alloc();
    std::vector<std::string> next;
    next.reserve(pieces.size());
    for (auto& chunk : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(chunk.data());
      size_t pos = 0, last = 0;
      while (pos < chunk.size()) {
        int rc = pcre2_match(code, subject, chunk.size(), pos,
                             PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH)
          break;
        if (rc < 0) {
          pcre2_match_data_free(md);
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          throw gguf_error(std::string("pre-tokenizer regex failed on a ") +
                           std::to_string(chunk.size()) + "-byte piece: " +
                           reinterpret_cast<const char*>(msg));
        }
        const auto* ov = pcre2_get_ovector_pointer(md);
        const size_t start = ov[0], end = ov[1];
        if (end == start) { // an empty match: try one character further
          pos = start + utf8_len(static_cast<unsigned char>(chunk[start]));
          continue;
        }
        if (start > last)
          next.push_back(chunk.substr(last, start - last));
        next.push_back(chunk.substr(start, end - start));
        last = pos = end;
      }
      if (last < chunk.size())
        next.push_back(chunk.substr(last));
    }
    pcre2_match_data_free(md);
    pieces = std::move(next);
  }
  return pieces;
}

} // namespace exo::model
