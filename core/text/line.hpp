#pragma once

/// One log line, written whole. A chain of << on std::cout is one write
/// per piece, so two threads' lines interleave mid-line (a node's
/// "listening on 127.0.0.1:" was once cut by a gate's "joined ..." and a
/// test could not read the port). `line` collects what is streamed into it
/// and writes it to its stream in one write when the statement ends, then
/// flushes:
///
///     exo::text::line(std::cout) << "exo-node " << name << ": job " << id
///                                << " placed" << std::endl;

#include <ostream>
#include <sstream>
#include <string>

namespace exo::text {

class line {
public:
  explicit line(std::ostream& out) : out_(out) {}
  line(const line&) = delete;
  line& operator=(const line&) = delete;
  ~line() {
    const std::string s = buf_.str();
    out_.write(s.data(), static_cast<std::streamsize>(s.size()));
    out_.flush();
  }

  template <class T>
  line& operator<<(const T& v) {
    buf_ << v;
    return *this;
  }
  /// std::endl, std::flush (they act on the buffer; the line is flushed
  /// when written anyway).
  line& operator<<(std::ostream& (*manip)(std::ostream&)) {
    manip(buf_);
    return *this;
  }
  /// std::fixed and the other format flags.
  line& operator<<(std::ios_base& (*manip)(std::ios_base&)) {
    manip(buf_);
    return *this;
  }

private:
  std::ostream& out_;
  std::ostringstream buf_;
};

} // namespace exo::text
