#include "core/model/json_constraint.hpp"

#include "core/model/sampler.hpp"
#include "core/tokenizer/tokenizer.hpp"

#include <algorithm>

namespace exo::model {

namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

} // namespace

bool json_prefix::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(c))
      return false;
  return true;
}

void json_prefix::value_done() {
  state_ = stack_.empty() ? st::done : st::after_value;
}

bool json_prefix::begin_value(char c) {
  switch (c) {
    case '{':
    case '[':
      if (stack_.size() >= max_json_depth)
        return false;
      stack_.push_back(c);
      state_ = c == '{' ? st::key : st::first_value;
      return true;
    case '"':
      in_key_ = false;
      state_ = st::string;
      return true;
    case '-':
      state_ = st::minus;
      return true;
    case '0':
      state_ = st::zero;
      return true;
    case 't':
      literal_ = "rue";
      state_ = st::literal;
      return true;
    case 'f':
      literal_ = "alse";
      state_ = st::literal;
      return true;
    case 'n':
      literal_ = "ull";
      state_ = st::literal;
      return true;
    default:
      if (c >= '1' && c <= '9') {
        state_ = st::integer;
        return true;
      }
      return false;
  }
}

bool json_prefix::more_ws() {
  return ++ws_run_ <= max_json_whitespace;
}

bool json_prefix::feed(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (!is_ws(c))
    ws_run_ = 0;
  switch (state_) {
    case st::start:
      if (is_ws(c))
        return more_ws();
      if (c != '{')
        return false;
      stack_.push_back('{');
      state_ = st::key;
      return true;
    case st::done:
      return is_ws(c) && more_ws();
    case st::key:
    case st::next_key:
      if (is_ws(c))
        return more_ws();
      if (c == '"') {
        in_key_ = true;
        state_ = st::string;
        return true;
      }
      if (c == '}' && state_ == st::key) {
        stack_.pop_back();
        value_done();
        return true;
      }
      return false;
    case st::colon:
      if (is_ws(c))
        return more_ws();
      if (c != ':')
        return false;
      state_ = st::value;
      return true;
    case st::value:
      return is_ws(c) ? more_ws() : begin_value(c);
    case st::first_value:
      if (is_ws(c))
        return more_ws();
      if (c == ']') {
        stack_.pop_back();
        value_done();
        return true;
      }
      return begin_value(c);
    case st::after_value:
      if (is_ws(c))
        return more_ws();
      if (c == ',') {
        state_ = stack_.back() == '{' ? st::next_key : st::value;
        return true;
      }
      if ((c == '}' && stack_.back() == '{')
          || (c == ']' && stack_.back() == '[')) {
        stack_.pop_back();
        value_done();
        return true;
      }
      return false;
    case st::string:
      if (utf8_left_ > 0) { // a continuation byte, within its bounds
        if (u < utf8_lo_ || u > utf8_hi_)
          return false;
        --utf8_left_;
        utf8_lo_ = 0x80;
        utf8_hi_ = 0xBF;
        return true;
      }
      if (c == '"') {
        if (in_key_) {
          in_key_ = false;
          state_ = st::colon;
        } else {
          value_done();
        }
        return true;
      }
      if (c == '\\') {
        state_ = st::escape;
        return true;
      }
      if (u < 0x20)
        return false; // control characters go escaped
      if (u < 0x80)
        return true;
      // A UTF-8 lead byte (RFC 3629: no overlong forms, no surrogates, at
      // most U+10FFFF).
      utf8_lo_ = 0x80;
      utf8_hi_ = 0xBF;
      if (u >= 0xC2 && u <= 0xDF) {
        utf8_left_ = 1;
      } else if (u >= 0xE0 && u <= 0xEF) {
        utf8_left_ = 2;
        if (u == 0xE0)
          utf8_lo_ = 0xA0;
        else if (u == 0xED)
          utf8_hi_ = 0x9F;
      } else if (u >= 0xF0 && u <= 0xF4) {
        utf8_left_ = 3;
        if (u == 0xF0)
          utf8_lo_ = 0x90;
        else if (u == 0xF4)
          utf8_hi_ = 0x8F;
      } else {
        return false;
      }
      return true;
    case st::escape:
      if (c == 'u') {
        hex_left_ = 4;
        state_ = st::unicode;
        return true;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f'
          || c == 'n' || c == 'r' || c == 't') {
        state_ = st::string;
        return true;
      }
      return false;
    case st::unicode: {
      // Surrogates pair up: a high one (D800-DBFF) must be followed by
      // \u and a low one (DC00-DFFF), which comes no other way (strict
      // parsers refuse lone ones). Checked digit by digit.
      if (!is_hex(c))
        return false;
      const int v = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
      const int i = 4 - hex_left_; // which digit
      if (want_low_ && ((i == 0 && v != 0xD) || (i == 1 && v < 0xC)))
        return false;
      if (!want_low_ && i == 1 && first_hex_ == 0xD) {
        if (v >= 0xC)
          return false; // a lone low surrogate
        high_ = v >= 0x8;
      }
      if (i == 0)
        first_hex_ = static_cast<std::uint8_t>(v);
      if (--hex_left_ == 0) {
        if (want_low_) {
          want_low_ = false;
          state_ = st::string;
        } else if (high_) {
          high_ = false;
          want_low_ = true;
          state_ = st::low_backslash;
        } else {
          state_ = st::string;
        }
      }
      return true;
    }
    case st::low_backslash:
      if (c != '\\')
        return false;
      state_ = st::low_u;
      return true;
    case st::low_u:
      if (c != 'u')
        return false;
      hex_left_ = 4;
      state_ = st::unicode;
      return true;
    case st::minus:
      if (c == '0') {
        state_ = st::zero;
        return true;
      }
      if (c >= '1' && c <= '9') {
        state_ = st::integer;
        return true;
      }
      return false;
    case st::dot:
      if (!is_digit(c))
        return false;
      state_ = st::fraction;
      return true;
    case st::exp:
      if (c == '+' || c == '-') {
        state_ = st::exp_sign;
        return true;
      }
      if (!is_digit(c))
        return false;
      state_ = st::exp_digits;
      return true;
    case st::exp_sign:
      if (!is_digit(c))
        return false;
      state_ = st::exp_digits;
      return true;
    case st::zero:
    case st::integer:
    case st::fraction:
    case st::exp_digits:
      if (is_digit(c) && state_ != st::zero)
        return true;
      if (c == '.' && (state_ == st::zero || state_ == st::integer)) {
        state_ = st::dot;
        return true;
      }
      if ((c == 'e' || c == 'E') && state_ != st::exp_digits) {
        state_ = st::exp;
        return true;
      }
      // The number ends here (always inside a container): the byte is
      // what follows it.
      value_done();
      return feed(c);
    case st::literal:
      if (c != *literal_)
        return false;
      if (*++literal_ == '\0')
        value_done();
      return true;
  }
  return false;
}

std::size_t mask_json(const json_prefix& state,
                      const std::vector<std::string>& token_bytes,
                      const std::set<std::int32_t>& end_tokens, float* logits,
                      std::size_t n) {
  const bool complete = state.complete();
  std::size_t kept = 0;
  for (std::size_t id = 0; id < n; ++id) {
    bool ok = false;
    if (end_tokens.count(static_cast<std::int32_t>(id)) != 0) {
      ok = complete;
    } else if (id < token_bytes.size() && !token_bytes[id].empty()) {
      const auto& b = token_bytes[id];
      if (complete) {
        ok = end_tokens.empty()
             && b.find_first_not_of(" \t\n\r") == std::string::npos;
      } else {
        json_prefix s = state;
        ok = s.feed(b);
      }
    }
    if (ok)
      ++kept;
    else
      logits[id] = masked_logit;
  }
  return kept;
}

std::shared_ptr<const std::vector<std::string>>
token_bytes_of(const tokenizer& tok, std::size_t n) {
  auto out = std::make_shared<std::vector<std::string>>(n);
  const std::size_t have = std::min(n, tok.size());
  for (std::size_t id = 0; id < have; ++id)
    (*out)[id] = tok.piece(static_cast<std::int32_t>(id), false);
  return out;
}

} // namespace exo::model
