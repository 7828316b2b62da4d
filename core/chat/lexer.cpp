#include "core/chat/lexer.hpp"

#include "core/chat/error.hpp"
#include "core/chat/unicode.hpp"

#include <utility>

namespace exo::chat {

const char* to_string(token_kind k) {
  switch (k) {
  case token_kind::text:
    return "text";
  case token_kind::number:
    return "number";
  case token_kind::string:
    return "string";
  case token_kind::identifier:
    return "identifier";
  case token_kind::equals:
    return "'='";
  case token_kind::open_paren:
    return "'('";
  case token_kind::close_paren:
    return "')'";
  case token_kind::open_statement:
    return "'{%'";
  case token_kind::close_statement:
    return "'%}'";
  case token_kind::open_expression:
    return "'{{'";
  case token_kind::close_expression:
    return "'}}'";
  case token_kind::open_square:
    return "'['";
  case token_kind::close_square:
    return "']'";
  case token_kind::open_curly:
    return "'{'";
  case token_kind::close_curly:
    return "'}'";
  case token_kind::comma:
    return "','";
  case token_kind::dot:
    return "'.'";
  case token_kind::colon:
    return "':'";
  case token_kind::pipe:
    return "'|'";
  case token_kind::additive:
    return "operator";
  case token_kind::multiplicative:
    return "operator";
  case token_kind::exponent:
    return "'**'";
  case token_kind::comparison:
    return "comparison";
  case token_kind::unary:
    return "unary operator";
  case token_kind::comment:
    return "comment";
  }
  return "token";
}

source_position locate(std::string_view source, std::size_t offset) {
  source_position p{1, 1};
  if (offset > source.size())
    offset = source.size();
  for (std::size_t i = 0; i < offset;) {
    if (source[i] == '\n') {
      ++p.line;
      p.column = 1;
      ++i;
      continue;
    }
    unicode::decode(source, i);
    ++p.column;
  }
  return p;
}

namespace {

/// Text after preprocessing, each byte with its offset in the original.
struct mapped {
  std::string s;
  std::vector<std::size_t> at;

  void push(char c, std::size_t origin) {
    s += c;
    at.push_back(origin);
  }
};

bool line_terminator_before(const mapped& m, std::size_t i) {
  if (i == 0)
    return true;
  char c = m.s[i - 1];
  if (c == '\n' || c == '\r')
    return true;
  // U+2028 / U+2029 end with 0xA8 / 0xA9 after E2 80.
  return i >= 3 && static_cast<unsigned char>(m.s[i - 3]) == 0xE2 &&
         static_cast<unsigned char>(m.s[i - 2]) == 0x80 &&
         (static_cast<unsigned char>(c) == 0xA8 ||
          static_cast<unsigned char>(c) == 0xA9);
}

/// lstrip_blocks: spaces and tabs from a line start up to `{%`, `{#`, `{-`.
mapped lstrip_blocks(const mapped& in) {
  mapped out;
  const auto& s = in.s;
  for (std::size_t i = 0; i < s.size();) {
    if (line_terminator_before(in, i)) {
      std::size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t'))
        ++j;
      if (j + 1 < s.size() && s[j] == '{' &&
          (s[j + 1] == '%' || s[j + 1] == '#' || s[j + 1] == '-')) {
        i = j;
      }
      // Copy at least the character at i so that the scan moves on.
      out.push(s[i], in.at[i]);
      ++i;
      continue;
    }
    out.push(s[i], in.at[i]);
    ++i;
  }
  return out;
}

/// trim_blocks: the newline right after `%}`, `#}` or `-}` is dropped.
mapped trim_blocks(const mapped& in) {
  mapped out;
  const auto& s = in.s;
  for (std::size_t i = 0; i < s.size(); ++i) {
    out.push(s[i], in.at[i]);
    if (i + 2 < s.size() && (s[i] == '#' || s[i] == '%' || s[i] == '-') &&
        s[i + 1] == '}' && s[i + 2] == '\n') {
      out.push(s[i + 1], in.at[i + 1]);
      i += 2; // skip the newline
    }
  }
  return out;
}

std::size_t skip_spaces(std::string_view s, std::size_t i) {
  while (auto n = unicode::space_at(s, i))
    i += n;
  return i;
}

/// Matches `{%-? \s* (end)?generation \s* -?%}` at `i`; returns the end.
std::size_t match_generation(std::string_view s, std::size_t i, bool& lstrip,
                             bool& rstrip) {
  if (s.compare(i, 2, "{%") != 0)
    return 0;
  std::size_t j = i + 2;
  lstrip = j < s.size() && s[j] == '-';
  if (lstrip)
    ++j;
  j = skip_spaces(s, j);
  if (s.compare(j, 3, "end") == 0 && s.compare(j + 3, 10, "generation") == 0)
    j += 3;
  if (s.compare(j, 10, "generation") != 0)
    return 0;
  j = skip_spaces(s, j + 10);
  rstrip = j < s.size() && s[j] == '-';
  if (rstrip)
    ++j;
  if (s.compare(j, 2, "%}") != 0)
    return 0;
  return j + 2;
}

/// Removes transformers' `{% generation %}` / `{% endgeneration %}` tags.
mapped strip_generation(const mapped& in) {
  const auto& s = in.s;
  if (s.find("generation") == std::string::npos)
    return in;
  mapped out;
  std::size_t copied = 0; // everything before this is in `out`
  for (std::size_t i = 0; i < s.size(); ++i) {
    bool lstrip = false;
    bool rstrip = false;
    auto end = match_generation(s, i, lstrip, rstrip);
    if (end == 0)
      continue;
    // The whitespace run just before the tag (not before `copied`).
    std::size_t before = i;
    while (before > copied) {
      std::size_t k = before - 1;
      while (k > copied && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80)
        --k;
      if (unicode::space_at(s, k) != before - k)
        break;
      before = k;
    }
    std::size_t after = skip_spaces(s, end);
    for (std::size_t k = copied; k < (lstrip ? before : i); ++k)
      out.push(s[k], in.at[k]);
    if (!rstrip)
      for (std::size_t k = end; k < after; ++k)
        out.push(s[k], in.at[k]);
    copied = after;
    i = after - 1;
  }
  for (std::size_t k = copied; k < s.size(); ++k)
    out.push(s[k], in.at[k]);
  return out;
}

mapped preprocess(std::string_view source) {
  mapped m;
  auto n = source.size();
  if (n > 0 && source[n - 1] == '\n')
    --n;
  m.s.assign(source.substr(0, n));
  m.at.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    m.at[i] = i;
  return strip_generation(trim_blocks(lstrip_blocks(m)));
}

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_';
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

struct operator_entry {
  const char* text;
  token_kind kind;
};

constexpr operator_entry operator_table[] = {
    {"{%", token_kind::open_statement},
    {"%}", token_kind::close_statement},
    {"{{", token_kind::open_expression},
    {"}}", token_kind::close_expression},
    {"(", token_kind::open_paren},
    {")", token_kind::close_paren},
    {"{", token_kind::open_curly},
    {"}", token_kind::close_curly},
    {"[", token_kind::open_square},
    {"]", token_kind::close_square},
    {",", token_kind::comma},
    {".", token_kind::dot},
    {":", token_kind::colon},
    {"|", token_kind::pipe},
    {"<=", token_kind::comparison},
    {">=", token_kind::comparison},
    {"==", token_kind::comparison},
    {"!=", token_kind::comparison},
    {"<", token_kind::comparison},
    {">", token_kind::comparison},
    {"+", token_kind::additive},
    {"-", token_kind::additive},
    {"~", token_kind::additive},
    {"**", token_kind::exponent},
    {"*", token_kind::multiplicative},
    {"//", token_kind::multiplicative},
    {"/", token_kind::multiplicative},
    {"%", token_kind::multiplicative},
    {"=", token_kind::equals},
};

class lexer {
 public:
  lexer(std::string_view source, mapped m)
      : source_(source), m_(std::move(m)), s_(m_.s) {
    // nop
  }

  std::vector<token> run();

 private:
  [[noreturn]] void fail(const std::string& what, std::size_t at) const {
    auto origin = at < m_.at.size() ? m_.at[at] : source_.size();
    auto p = locate(source_, origin);
    throw template_error(error_kind::syntax, what, p.line, p.column);
  }

  std::size_t origin(std::size_t at) const {
    return at < m_.at.size() ? m_.at[at] : source_.size();
  }

  void push(token_kind kind, std::string text, std::size_t at) {
    tokens_.push_back(token{kind, std::move(text), origin(at)});
  }

  bool starts(const char* lit) const {
    return s_.compare(pos_, std::char_traits<char>::length(lit), lit) == 0;
  }

  token_kind last_kind(bool& any) const {
    any = !tokens_.empty();
    return any ? tokens_.back().kind : token_kind::text;
  }

  void strip_trailing_whitespace() {
    if (!tokens_.empty() && tokens_.back().kind == token_kind::text) {
      auto trimmed = unicode::trim_end(tokens_.back().text);
      tokens_.back().text.resize(trimmed.size());
      if (tokens_.back().text.empty())
        tokens_.pop_back();
    }
  }

  void open_tag(token_kind kind, std::size_t width) {
    tag_open_ = pos_;
    tag_kind_ = kind;
    in_tag_ = true;
    push(kind, kind == token_kind::open_statement ? "{%" : "{{", pos_);
    pos_ += width;
  }

  void lex_comment();
  void lex_string(char quote);
  void lex_number(std::string prefix, std::size_t start);

  std::string_view source_;
  mapped m_;
  const std::string& s_;
  std::size_t pos_ = 0;
  std::vector<token> tokens_;
  int curly_depth_ = 0;
  bool in_tag_ = false;
  std::size_t tag_open_ = 0;
  token_kind tag_kind_ = token_kind::open_statement;
};

void lexer::lex_comment() {
  auto start = pos_;
  pos_ += 2;
  bool strip_before = pos_ < s_.size() && s_[pos_] == '-';
  if (strip_before)
    ++pos_;
  auto close = s_.find("#}", pos_);
  if (close == std::string::npos)
    fail("unterminated comment: '{#' has no matching '#}'", start);
  std::string text = s_.substr(pos_, close - pos_);
  bool strip_after = !text.empty() && text.back() == '-';
  if (strip_after)
    text.pop_back();
  if (strip_before)
    strip_trailing_whitespace();
  push(token_kind::comment, std::move(text), start);
  pos_ = close + 2;
  if (strip_after)
    pos_ = skip_spaces(s_, pos_);
}

void lexer::lex_string(char quote) {
  auto start = pos_;
  ++pos_;
  std::string out;
  char16_t pending_high = 0;
  auto flush_high = [&] {
    if (pending_high != 0) {
      unicode::append(out, 0xFFFD);
      pending_high = 0;
    }
  };
  while (true) {
    if (pos_ >= s_.size())
      fail("unterminated string literal", start);
    char c = s_[pos_];
    if (c == quote)
      break;
    if (c != '\\') {
      flush_high();
      out += c;
      ++pos_;
      continue;
    }
    if (pos_ + 1 >= s_.size())
      fail("unterminated string literal", start);
    char e = s_[pos_ + 1];
    pos_ += 2;
    if (e == 'x' || e == 'u') {
      std::size_t len = e == 'x' ? 2 : 4;
      unsigned v = 0;
      for (std::size_t k = 0; k < len; ++k) {
        int h = pos_ + k < s_.size() ? hex_value(s_[pos_ + k]) : -1;
        if (h < 0)
          fail(std::string("invalid escape sequence \\") + e, pos_ - 2);
        v = v * 16 + static_cast<unsigned>(h);
      }
      pos_ += len;
      if (v >= 0xD800 && v <= 0xDBFF) {
        flush_high();
        pending_high = static_cast<char16_t>(v);
      } else if (v >= 0xDC00 && v <= 0xDFFF && pending_high != 0) {
        char32_t cp = 0x10000 + ((pending_high - 0xD800) << 10) + (v - 0xDC00);
        pending_high = 0;
        unicode::append(out, cp);
      } else {
        flush_high();
        unicode::append(out, v);
      }
      continue;
    }
    flush_high();
    switch (e) {
    case 'n':
      out += '\n';
      break;
    case 't':
      out += '\t';
      break;
    case 'r':
      out += '\r';
      break;
    case 'b':
      out += '\b';
      break;
    case 'f':
      out += '\f';
      break;
    case 'v':
      out += '\v';
      break;
    case '\'':
    case '"':
    case '\\':
      out += e;
      break;
    default:
      fail(std::string("unknown escape sequence \\") + e, pos_ - 2);
    }
  }
  flush_high();
  ++pos_; // closing quote
  push(token_kind::string, std::move(out), start);
}

void lexer::lex_number(std::string prefix, std::size_t start) {
  std::string num = std::move(prefix);
  while (pos_ < s_.size() && is_digit(s_[pos_]))
    num += s_[pos_++];
  bool after_dot = !tokens_.empty() && tokens_.back().kind == token_kind::dot;
  if (!after_dot && pos_ + 1 < s_.size() && s_[pos_] == '.' &&
      is_digit(s_[pos_ + 1])) {
    num += s_[pos_++];
    while (pos_ < s_.size() && is_digit(s_[pos_]))
      num += s_[pos_++];
  }
  push(token_kind::number, std::move(num), start);
}

std::vector<token> lexer::run() {
  while (pos_ < s_.size()) {
    bool any = false;
    auto last = last_kind(any);
    if (!any || last == token_kind::close_statement ||
        last == token_kind::close_expression || last == token_kind::comment) {
      auto start = pos_;
      while (pos_ < s_.size() &&
             !(s_[pos_] == '{' && pos_ + 1 < s_.size() &&
               (s_[pos_ + 1] == '%' || s_[pos_ + 1] == '{' ||
                s_[pos_ + 1] == '#')))
        ++pos_;
      if (pos_ > start) {
        push(token_kind::text, s_.substr(start, pos_ - start), start);
        continue;
      }
    }
    if (starts("{#")) {
      lex_comment();
      continue;
    }
    if (starts("{%-")) {
      strip_trailing_whitespace();
      open_tag(token_kind::open_statement, 3);
      continue;
    }
    if (starts("{{-")) {
      strip_trailing_whitespace();
      open_tag(token_kind::open_expression, 3);
      curly_depth_ = 0;
      continue;
    }
    pos_ = skip_spaces(s_, pos_);
    if (pos_ >= s_.size())
      break;
    if (starts("-%}") || starts("-}}")) {
      bool stmt = starts("-%}");
      push(stmt ? token_kind::close_statement : token_kind::close_expression,
           stmt ? "%}" : "}}", pos_);
      in_tag_ = false;
      pos_ = skip_spaces(s_, pos_ + 3);
      continue;
    }
    auto start = pos_;
    char c = s_[pos_];
    if (c == '-' || c == '+') {
      any = false;
      last = last_kind(any);
      if (!any || last == token_kind::text)
        fail(std::string("unexpected character '") + c + "'", pos_);
      bool binary = last == token_kind::identifier ||
                    last == token_kind::number || last == token_kind::string ||
                    last == token_kind::close_paren ||
                    last == token_kind::close_square;
      if (!binary) {
        ++pos_;
        if (pos_ < s_.size() && is_digit(s_[pos_]))
          lex_number(std::string(1, c), start);
        else
          push(token_kind::unary, std::string(1, c), start);
        continue;
      }
    }
    bool matched = false;
    for (auto& op : operator_table) {
      std::string_view lit = op.text;
      if (lit == "}}" && curly_depth_ > 0)
        continue;
      if (s_.compare(pos_, lit.size(), lit) != 0)
        continue;
      if (op.kind == token_kind::open_statement ||
          op.kind == token_kind::open_expression) {
        open_tag(op.kind, lit.size());
        if (op.kind == token_kind::open_expression)
          curly_depth_ = 0;
      } else {
        if (op.kind == token_kind::close_statement ||
            op.kind == token_kind::close_expression)
          in_tag_ = false;
        else if (op.kind == token_kind::open_curly)
          ++curly_depth_;
        else if (op.kind == token_kind::close_curly)
          --curly_depth_;
        push(op.kind, std::string(lit), pos_);
        pos_ += lit.size();
      }
      matched = true;
      break;
    }
    if (matched)
      continue;
    if (c == '\'' || c == '"') {
      lex_string(c);
      continue;
    }
    if (is_digit(c)) {
      lex_number("", start);
      continue;
    }
    if (is_word(c)) {
      while (pos_ < s_.size() && is_word(s_[pos_]))
        ++pos_;
      push(token_kind::identifier, s_.substr(start, pos_ - start), start);
      continue;
    }
    std::size_t end = pos_;
    auto cp = unicode::decode(s_, end);
    std::string shown;
    unicode::append(shown, cp);
    fail("unexpected character '" + shown + "'", pos_);
  }
  if (in_tag_) {
    bool stmt = tag_kind_ == token_kind::open_statement;
    fail(std::string("unterminated tag: '") + (stmt ? "{%" : "{{") +
             "' has no matching '" + (stmt ? "%}" : "}}") + "'",
         tag_open_);
  }
  return std::move(tokens_);
}

} // namespace

std::vector<token> tokenize(std::string_view source) {
  lexer lx{source, preprocess(source)};
  return lx.run();
}

} // namespace exo::chat
