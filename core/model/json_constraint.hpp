#pragma once

/// JSON mode (OpenAI's response_format {"type": "json_object"}): the text a
/// sequence generates must stay a prefix of one JSON object (RFC 8259),
/// and ends when the object does.
///
/// json_prefix follows the text byte by byte: every byte it takes keeps the
/// bytes so far a prefix of some valid document, a byte that cannot is
/// refused. mask_json gives each token of a vocabulary the masked_logit
/// when its bytes cannot follow: what a job does to a row before it
/// samples (actors/workload/job_actor.cpp), so the sampled text is always
/// valid JSON so far, and once the object is closed only an
/// end-of-generation token can come. Plain values, no allocation while
/// the nesting stays under 16 levels (a copy per token checked is cheap).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace exo::model {

class tokenizer;

/// The deepest nesting of objects and arrays json_prefix takes.
constexpr std::size_t max_json_depth = 128;

/// The most whitespace bytes in a row json_prefix takes between tokens of
/// JSON (llama.cpp's JSON grammar bounds it too): a model that would pad
/// forever has to write the object instead.
constexpr std::size_t max_json_whitespace = 20;

class json_prefix {
public:
  /// Takes `bytes` if the text so far followed by them is still a prefix
  /// of a valid JSON document whose top-level value is an object, with at
  /// most max_json_whitespace whitespace bytes in a row outside strings;
  /// returns false otherwise (the state is then unspecified: check on a
  /// copy).
  bool feed(std::string_view bytes);
  bool feed(char c);

  /// Whether the text so far is one whole object (trailing whitespace
  /// allowed).
  bool complete() const { return state_ == st::done; }

private:
  enum class st : std::uint8_t {
    value,       ///< a value is next (after ':', '[' or ',' in an array)
    first_value, ///< after '[': a value or ']'
    key,         ///< after '{': a key or '}'
    next_key,    ///< after ',' in an object: a key
    colon,       ///< after a key
    after_value, ///< after a value inside an object or array
    string,      ///< inside a string (a key when in_key_)
    escape,      ///< after a backslash in a string
    unicode,     ///< in a \uXXXX escape (hex_left_ digits to go)
    low_backslash, ///< after a high surrogate's escape: '\' must come
    low_u,         ///< then 'u' (and a low surrogate's digits)
    minus,       ///< a number's '-': a digit must come
    zero,        ///< a number's leading 0
    integer,     ///< a number's integer digits
    dot,         ///< after '.': a digit must come
    fraction,    ///< a number's fraction digits
    exp,         ///< after 'e': a sign or digit
    exp_sign,    ///< after the exponent's sign: a digit must come
    exp_digits,  ///< the exponent's digits
    literal,     ///< inside true, false or null
    start,       ///< nothing yet: whitespace or '{'
    done,        ///< the object is closed: whitespace only
  };

  /// A value ended: what comes after it in its container (or done).
  void value_done();
  /// Begins a value at byte c (state value or first_value).
  bool begin_value(char c);
  /// One more whitespace byte outside a string: within the bound?
  bool more_ws();

  st state_ = st::start;
  bool in_key_ = false;         ///< the string is an object's key
  std::uint8_t utf8_left_ = 0;  ///< continuation bytes still due
  std::uint8_t utf8_lo_ = 0x80; ///< the next continuation's bounds
  std::uint8_t utf8_hi_ = 0xBF;
  std::uint8_t hex_left_ = 0;
  std::uint8_t ws_run_ = 0; ///< whitespace bytes in a row, outside strings
  std::uint8_t first_hex_ = 0; ///< a \u escape's first digit
  bool high_ = false;          ///< the escape is a high surrogate
  bool want_low_ = false;      ///< a low surrogate's escape must follow
  const char* literal_ = nullptr; ///< the rest of true/false/null
  std::string stack_;             ///< '{' and '[' of the open containers
};

/// A vocabulary's bytes arranged for mask_json: each token's bytes as
/// generated text gives them (empty for control and unused tokens), and
/// the tokens that have some sorted by them, each with the length of the
/// start it shares with the one before (a walk of the vocabulary's trie:
/// each shared start is checked once, and a start the state refuses
/// rules out every token that begins with it).
struct vocab_bytes {
  std::vector<std::string> bytes;   ///< by token id
  std::vector<std::int32_t> order;  ///< ids with bytes, sorted by bytes
  std::vector<std::uint32_t> shared; ///< per order[i]: bytes shared with
                                     ///< order[i - 1] (0 for the first)
};

/// vocab_bytes of `bytes` (by id).
vocab_bytes make_vocab_bytes(std::vector<std::string> bytes);

/// The first `n` tokens of `tok` (tokenizer::piece without specials; ids
/// past the vocabulary have none). Sorting them is most of the cost (70 ms
/// for 100K tokens).
std::shared_ptr<const vocab_bytes> vocab_bytes_of(const tokenizer& tok,
                                                  std::size_t n);

/// vocab_bytes_of a loaded tokenizer, made once while it is loaded: every
/// JSON-mode job of a model shares it (thread-safe; a tokenizer released
/// and another loaded in its place gets its own).
std::shared_ptr<const vocab_bytes>
shared_vocab_bytes(const std::shared_ptr<const tokenizer>& tok,
                   std::size_t n);

/// Masks (model::masked_logit), in a row of `n` logits, every token that
/// cannot come next after `state`: a token whose bytes the state refuses
/// (or that has none), and while the object is open every token of
/// `end_tokens`; once it is complete only `end_tokens` stay (or, with
/// none, tokens of whitespace alone). Returns how many tokens stay.
std::size_t mask_json(const json_prefix& state, const vocab_bytes& vocab,
                      const std::set<std::int32_t>& end_tokens, float* logits,
                      std::size_t n);

} // namespace exo::model
