#include "runtime/console/line_editor.hpp"

#include "core/access/token.hpp"
#include "core/text/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <cctype>
#include <string_view>

#include <fstream>
#include <iostream>
#include <sstream>

namespace exo::console {

line_editor::line_editor(std::string history_file)
  : history_file_(std::move(history_file)) {
  if (history_file_.empty())
    return;
  // At most 1 MiB of it, and only a regular file: history is a
  // convenience, never a reason to hang or fail.
  std::string text;
  try {
    text = text::read_file(history_file_, 1u << 20, "history");
  } catch (const text::file_error&) {
    return;
  }
  std::istringstream in{text};
  std::string line;
  while (std::getline(in, line))
    if (!line.empty())
      history_.push_back(line);
}

std::string redact_secrets(const std::string& line) {
  constexpr std::string_view auth = "auth=";
  std::string out;
  std::size_t i = 0;
  while (i < line.size()) {
    if (std::isspace(static_cast<unsigned char>(line[i]))) {
      out += line[i++];
      continue;
    }
    auto end = i;
    while (end < line.size()
           && !std::isspace(static_cast<unsigned char>(line[end])))
      ++end;
    std::string_view word{line.data() + i, end - i};
    if (word.substr(0, auth.size()) == auth)
      out += "auth=<token>";
    else if (word.substr(0, access::token_prefix.size())
             == access::token_prefix)
      out += "<token>";
    else
      out += word;
    i = end;
  }
  return out;
}

line_editor::~line_editor() {
  if (history_file_.empty())
    return;
  int fd = ::open(history_file_.c_str(),
                  O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return; // history is a convenience: never an error at exit
  ::fchmod(fd, 0600);
  std::string text;
  auto first = history_.size() > 500 ? history_.size() - 500 : 0;
  for (auto i = first; i < history_.size(); ++i)
    text += redact_secrets(history_[i]) + "\n";
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0)
      break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
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
