#pragma once

/// A node's job numbers: the N of the job key NODE:N that its backups,
/// their takeovers and the clients that follow a job go by. They must not
/// start again from 1 when the node restarts: a node that took job
/// NODE:2 over, or backs up a copy taken over from it, keeps that key
/// for a while, and would take the restarted node's own new job 2 for the
/// old one (and end it as taken over). So the last number given out is
/// kept in the node's state folder and the numbers go on from it.

#include <cstdint>
#include <string>
#include <utility>

namespace exo::workload {

class job_numbers {
 public:
  /// Numbers kept in the file at `path`; "" keeps them in memory only
  /// (from 1: a node alone, `exo-node run`, backs nothing up). A file
  /// that cannot be read or holds no number is set aside: the numbers
  /// start from 1 and take_note() says why.
  explicit job_numbers(std::string path = {});

  /// The next number, written to the file before it is given out (a
  /// restart never gives it again). When the file cannot be written the
  /// number is given all the same and take_note() says why (once).
  std::uint64_t next();

  /// The last number given out (0: none yet).
  std::uint64_t last() const noexcept { return last_; }

  /// Why the file was set aside or could not be written, once: "" when
  /// all went well or it was taken already. Meant for the node's log.
  std::string take_note() { return std::exchange(note_, {}); }

  /// The text the file holds for `last` ("exo job numbers: last 42\n").
  static std::string file_text(std::uint64_t last);

  /// The last number in a file's `text`; throws std::invalid_argument
  /// naming what is wrong.
  static std::uint64_t parse(const std::string& text);

 private:
  std::string path_;
  std::uint64_t last_ = 0;
  std::string note_;
  bool write_failed_ = false;
};

} // namespace exo::workload
