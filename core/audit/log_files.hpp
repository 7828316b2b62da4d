#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace exo::audit {

/// Raised for I/O failures and bad arguments of the audit library; the
/// message names the file and the problem.
class audit_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// One file of a rotated log: `<prefix>-<index, 6+ digits>.jsonl`.
struct log_file {
  std::uint64_t index = 0;
  std::string path;
};

/// Returns the name of file number `index`, e.g. "audit-000003.jsonl".
std::string log_file_name(std::string_view prefix, std::uint64_t index);

/// Lists the log files of `prefix` in `dir`, oldest first. Throws
/// `audit_error` when `dir` cannot be read.
std::vector<log_file> list_log_files(const std::string& dir,
                                     std::string_view prefix);

/// Reads a whole file. Throws `audit_error` naming the file on failure.
std::string read_file(const std::string& path);

/// The end of a file: its size and its last `max_bytes` bytes (all of it
/// when smaller). Throws `audit_error` naming the file on failure.
struct file_tail {
  std::uint64_t size = 0;   ///< of the whole file
  std::uint64_t offset = 0; ///< where `bytes` starts in the file
  std::string bytes;
};
file_tail read_tail(const std::string& path, std::uint64_t max_bytes);

/// Calls `fn(line, complete)` for every line of the file at `path` from
/// byte `from` on (without the '\n'), reading it a chunk at a time, so
/// that memory stays at a chunk and a line however large the file (a
/// query reads a 64 MiB file this way). A line longer than `max_line` is
/// passed cut, as incomplete, and the rest of it skipped; the last line is
/// incomplete when no '\n' ends it. `fn` returns false to stop. Throws
/// `audit_error` naming the file when it cannot be read.
void for_each_file_line(const std::string& path, std::uint64_t from,
                        const std::function<bool(std::string_view, bool)>& fn,
                        std::size_t max_line = std::size_t{1} << 20);

/// Where reading the file at `path` may start for its records after
/// sequence number `after_seq`: the start of a line at or before the first
/// record with a larger one. Records go by increasing sequence number,
/// each line starting `{"seq":N,` (record.hpp's writer): a binary search
/// over byte offsets that reads each probe's line start, until 64 KiB are
/// left. Where the search had got to (0 at first: the whole file) when a
/// probed line is not such a record. Throws `audit_error` naming the file
/// when it cannot be read.
std::uint64_t seek_after_seq(const std::string& path, std::uint64_t after_seq);

/// Calls `fn(line, line_number, complete)` for every line of `content`
/// (without the '\n'); the last line is incomplete when it has no '\n'.
template <class F>
void for_each_line(std::string_view content, F&& fn) {
  std::size_t pos = 0;
  std::size_t number = 1;
  while (pos < content.size()) {
    auto nl = content.find('\n', pos);
    if (nl == std::string_view::npos) {
      fn(content.substr(pos), number, false);
      return;
    }
    if (!fn(content.substr(pos, nl - pos), number, true))
      return;
    pos = nl + 1;
    ++number;
  }
}

} // namespace exo::audit
