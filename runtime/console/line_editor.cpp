#include "runtime/console/line_editor.hpp"

#include <termios.h>
#include <unistd.h>

#include <fstream>
#include <iostream>

namespace exo::console {

line_editor::line_editor(std::string history_file)
  : history_file_(std::move(history_file)) {
  if (history_file_.empty())
    return;
  std::ifstream in{history_file_};
  std::string line;
  while (std::getline(in, line))
    if (!line.empty())
      history_.push_back(line);
}

line_editor::~line_editor() {
  if (history_file_.empty())
    return;
  std::ofstream out{history_file_, std::ios::trunc};
  auto first = history_.size() > 500 ? history_.size() - 500 : 0;
  for (auto i = first; i < history_.size(); ++i)
    out << history_[i] << "\n";
}

void line_editor::add_history(const std::string& line) {
  if (!line.empty() && (history_.empty() || history_.back() != line))
    history_.push_back(line);
}

std::optional<std::string> line_editor::read(const std::string& prompt) {
  if (!isatty(STDIN_FILENO)) {
    std::string line;
    if (!std::getline(std::cin, line))
      return std::nullopt;
    return line;
  }
  return read_raw(prompt);
}

namespace {

/// Puts the terminal in raw mode for the lifetime of the object.
struct raw_mode {
  termios saved{};
  bool ok = false;
  raw_mode() {
    if (tcgetattr(STDIN_FILENO, &saved) != 0)
      return;
    termios raw = saved;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    ok = tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0;
  }
  ~raw_mode() {
    if (ok)
      tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
  }
};

void redraw(const std::string& prompt, const std::string& buf,
            std::size_t cursor) {
  std::string out = "\r\x1b[K" + prompt + buf;
  if (cursor < buf.size())
    out += "\x1b[" + std::to_string(buf.size() - cursor) + "D";
  auto n = ::write(STDOUT_FILENO, out.data(), out.size());
  (void) n;
}

} // namespace

std::optional<std::string> line_editor::read_raw(const std::string& prompt) {
  raw_mode mode;
  std::string buf;
  std::size_t cursor = 0;
  std::size_t hist = history_.size();
  redraw(prompt, buf, cursor);
  for (;;) {
    char c = 0;
    if (::read(STDIN_FILENO, &c, 1) != 1)
      return std::nullopt;
    if (c == '\r' || c == '\n') {
      auto n = ::write(STDOUT_FILENO, "\n", 1);
      (void) n;
      return buf;
    }
    if (c == 4) { // Ctrl-D
      if (buf.empty()) {
        auto n = ::write(STDOUT_FILENO, "\n", 1);
        (void) n;
        return std::nullopt;
      }
      if (cursor < buf.size())
        buf.erase(cursor, 1);
    } else if (c == 3) { // Ctrl-C: drop the line
      buf.clear();
      cursor = 0;
      auto n = ::write(STDOUT_FILENO, "^C\n", 3);
      (void) n;
    } else if (c == 127 || c == 8) {
      if (cursor > 0)
        buf.erase(--cursor, 1);
    } else if (c == 1) {
      cursor = 0;
    } else if (c == 5) {
      cursor = buf.size();
    } else if (c == 21) {
      buf.erase(0, cursor);
      cursor = 0;
    } else if (c == 11) {
      buf.erase(cursor);
    } else if (c == 27) {
      char seq[3] = {};
      if (::read(STDIN_FILENO, seq, 1) != 1 || ::read(STDIN_FILENO, seq + 1, 1) != 1)
        continue;
      if (seq[0] != '[')
        continue;
      switch (seq[1]) {
        case 'A': // up
          if (hist > 0) {
            buf = history_[--hist];
            cursor = buf.size();
          }
          break;
        case 'B': // down
          if (hist < history_.size()) {
            ++hist;
            buf = hist == history_.size() ? std::string{} : history_[hist];
            cursor = buf.size();
          }
          break;
        case 'C':
          if (cursor < buf.size())
            ++cursor;
          break;
        case 'D':
          if (cursor > 0)
            --cursor;
          break;
        case 'H':
          cursor = 0;
          break;
        case 'F':
          cursor = buf.size();
          break;
        case '3': // delete: ESC [ 3 ~
          if (::read(STDIN_FILENO, seq + 2, 1) == 1 && cursor < buf.size())
            buf.erase(cursor, 1);
          break;
        default:
          break;
      }
    } else if (static_cast<unsigned char>(c) >= 32) {
      buf.insert(cursor++, 1, c);
    }
    redraw(prompt, buf, cursor);
  }
}

} // namespace exo::console
