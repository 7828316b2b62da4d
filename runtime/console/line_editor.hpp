#pragma once

/// A small line editor for the console: left/right, home/end, backspace,
/// delete, up/down through history, Ctrl-A/E/U/K/D/C. Falls back to plain
/// getline when stdin is not a terminal.

#include <optional>
#include <string>
#include <vector>

namespace exo::console {

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
