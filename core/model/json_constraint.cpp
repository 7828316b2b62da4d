#include "core/model/json_constraint.hpp"

#include "core/model/sampler.hpp"
#include "core/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cstdint>
#include <mutex>

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

vocab_bytes make_vocab_bytes(std::vector<std::string> bytes) {
  vocab_bytes v;
  v.bytes = std::move(bytes);
  for (std::size_t id = 0; id < v.bytes.size(); ++id)
    if (!v.bytes[id].empty())
      v.order.push_back(static_cast<std::int32_t>(id));
  std::sort(v.order.begin(), v.order.end(),
            [&](std::int32_t a, std::int32_t b) {
              return v.bytes[static_cast<std::size_t>(a)]
                     < v.bytes[static_cast<std::size_t>(b)];
            });
  v.shared.assign(v.order.size(), 0);
  for (std::size_t i = 1; i < v.order.size(); ++i) {
    const auto& a = v.bytes[static_cast<std::size_t>(v.order[i - 1])];
    const auto& b = v.bytes[static_cast<std::size_t>(v.order[i])];
    std::uint32_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k])
      ++k;
    v.shared[i] = k;
  }
  return v;
}

std::shared_ptr<const vocab_bytes> vocab_bytes_of(const tokenizer& tok,
                                                  std::size_t n) {
  std::vector<std::string> bytes(n);
  const std::size_t have = std::min(n, tok.size());
  for (std::size_t id = 0; id < have; ++id)
    bytes[id] = tok.piece(static_cast<std::int32_t>(id), false);
  return std::make_shared<const vocab_bytes>(
    make_vocab_bytes(std::move(bytes)));
}

std::shared_ptr<const vocab_bytes>
shared_vocab_bytes(const std::shared_ptr<const tokenizer>& tok,
                   std::size_t n) {
  struct entry {
    std::weak_ptr<const tokenizer> tok;
    std::size_t n;
    std::shared_ptr<const vocab_bytes> vocab;
  };
  static std::mutex m;
  static std::vector<entry> made;
  std::lock_guard<std::mutex> lock{m};
  made.erase(std::remove_if(made.begin(), made.end(),
                            [](const entry& e) { return e.tok.expired(); }),
             made.end());
  for (const auto& e : made)
    if (e.n == n && !e.tok.owner_before(tok) && !tok.owner_before(e.tok))
      return e.vocab;
  made.push_back({tok, n, vocab_bytes_of(*tok, n)});
  return made.back().vocab;
}

std::size_t mask_json(const json_prefix& state, const vocab_bytes& vocab,
                      const std::set<std::int32_t>& end_tokens, float* logits,
                      std::size_t n) {
  std::vector<char> keep(n, 0);
  const auto& bytes = vocab.bytes;
  if (state.complete()) {
    if (end_tokens.empty())
      for (std::size_t id = 0; id < n && id < bytes.size(); ++id)
        keep[id] = !bytes[id].empty()
                   && bytes[id].find_first_not_of(" \t\n\r")
                        == std::string::npos;
  } else {
    // The trie's walk: path[d] is the state after the first d bytes of
    // the token at hand (those it shares with the one before are already
    // there); `dead` is the byte of the path the state refused.
    std::vector<json_prefix> path{state};
    std::size_t dead = SIZE_MAX;
    for (std::size_t i = 0; i < vocab.order.size(); ++i) {
      const auto id = static_cast<std::size_t>(vocab.order[i]);
      const std::size_t shared = vocab.shared[i];
      if (dead != SIZE_MAX && shared > dead)
        continue; // it starts with the refused bytes too
      dead = SIZE_MAX;
      path.resize(std::min(path.size(), shared + 1));
      const auto& b = bytes[id];
      bool ok = true;
      for (std::size_t d = path.size() - 1; d < b.size(); ++d) {
        json_prefix next = path.back();
        if (!next.feed(b[d])) {
          dead = d;
          ok = false;
          break;
        }
        path.push_back(std::move(next));
      }
      if (ok && id < n)
        keep[id] = 1;
    }
  }
  for (auto t : end_tokens)
    if (t >= 0 && static_cast<std::size_t>(t) < n)
      keep[static_cast<std::size_t>(t)] = state.complete();
  std::size_t kept = 0;
  for (std::size_t id = 0; id < n; ++id) {
    if (keep[id])
      ++kept;
    else
      logits[id] = masked_logit;
  }
  return kept;
}

} // namespace exo::model
