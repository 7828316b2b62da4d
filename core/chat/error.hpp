#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace exo::chat {

/// What went wrong while compiling or rendering a chat template.
enum class error_kind {
  /// The template does not lex or parse (unterminated tag, bad token...).
  syntax,
  /// Evaluation failed (unknown filter, bad operand types, ...).
  render,
  /// The template itself called `raise_exception(message)`.
  raised,
  /// A resource limit was hit (output size, loop iterations, depth).
  limit,
};

/// Returns "syntax error", "render error", "template raised" or "limit".
const char* to_string(error_kind k);

/// Raised by every chat-template failure. The message names the problem and,
/// where one is known, the template's line and column (1-based, in
/// characters); `raise_exception`'s own message is kept verbatim in
/// `detail()`.
class template_error : public std::runtime_error {
 public:
  template_error(error_kind kind, std::string detail, std::size_t line = 0,
                 std::size_t column = 0);

  error_kind kind() const noexcept { return kind_; }

  /// The problem without the position prefix.
  const std::string& detail() const noexcept { return detail_; }

  /// 1-based line of the offending place, 0 when unknown.
  std::size_t line() const noexcept { return line_; }

  /// 1-based column (characters) of the offending place, 0 when unknown.
  std::size_t column() const noexcept { return column_; }

 private:
  error_kind kind_;
  std::string detail_;
  std::size_t line_;
  std::size_t column_;
};

} // namespace exo::chat
