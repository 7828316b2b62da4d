#pragma once

/// The chat-template lexer. It reproduces the reference renderer's
/// (@huggingface/jinja, as transformers' apply_chat_template configures
/// Jinja) preprocessing: a single trailing newline is dropped,
/// lstrip_blocks and trim_blocks are on, and transformers' `{% generation %}`
/// markers are removed. Every token remembers its offset in the original
/// source so that errors can name a line and column.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace exo::chat {

enum class token_kind {
  text,
  number,
  string,
  identifier,
  equals,
  open_paren,
  close_paren,
  open_statement,
  close_statement,
  open_expression,
  close_expression,
  open_square,
  close_square,
  open_curly,
  close_curly,
  comma,
  dot,
  colon,
  pipe,
  additive,
  multiplicative,
  exponent,
  comparison,
  unary,
  comment,
};

/// A readable name such as "'%}'" or "identifier" for messages.
const char* to_string(token_kind k);

struct token {
  token_kind kind;
  std::string text;
  std::size_t offset; ///< byte offset in the original source
};

/// A 1-based line and column (column counted in characters).
struct source_position {
  std::size_t line = 0;
  std::size_t column = 0;
};

/// The line and column of byte `offset` of `source`.
source_position locate(std::string_view source, std::size_t offset);

/// Splits `source` into tokens. Throws template_error (syntax) naming the
/// line and column of an unterminated tag, comment or string, or of an
/// unexpected character.
std::vector<token> tokenize(std::string_view source);

} // namespace exo::chat
