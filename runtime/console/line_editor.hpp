#pragma once

/// A small line editor for the console: left/right, home/end, backspace,
/// delete, up/down through history, Ctrl-A/E/U/K/D/C. Falls back to plain
/// getline when stdin is not a terminal.

#include <optional>
#include <string>
#include <vector>

namespace exo::console {

/// `line` as the history file keeps it: every bearer token (a word
/// starting "exo1.", or the value of auth=) replaced by "<token>", so that
/// a secret typed once is never written to disk.
std::string redact_secrets(const std::string& line);

/// Keeps the last 500 lines in `history_file` (created 0600, made 0600 if
/// it was not), secrets redacted; the session itself recalls them as typed.
class line_editor {
public:
  explicit line_editor(std::string history_file = {});
  ~line_editor();

  /// Reads one line; nothing at end of input (Ctrl-D on an empty line).
  std::optional<std::string> read(const std::string& prompt);

  void add_history(const std::string& line);
  const std::vector<std::string>& history() const noexcept {
    return history_;
  }

private:
  std::optional<std::string> read_raw(const std::string& prompt);

  std::string history_file_;
  std::vector<std::string> history_;
};

} // namespace exo::console
