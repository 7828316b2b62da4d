#pragma once

#include "core/audit/event.hpp"
#include "core/audit/hash_chain.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/query.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace exo::audit {

/// When the log calls fsync(2).
enum class fsync_policy : std::uint8_t {
  every_record, ///< write and fsync each record before `append` returns
  every_flush,  ///< fsync after each flush of the buffer (default)
  never,        ///< leave it to the OS
};

/// Settings of an `audit_log`.
struct audit_log_options {
  /// Folder of the log files; created when missing.
  std::string directory;
  /// Node name written into every record.
  std::string node;
  /// Files are named `<file_prefix>-000001.jsonl`, `-000002`, ...
  std::string file_prefix = "audit";
  /// Buffer at most this many records; `append` flushes when it is full.
  std::size_t buffer_records = 1000;
  fsync_policy sync = fsync_policy::every_flush;
  /// Start a new file when the current one would grow beyond this.
  std::uint64_t max_file_bytes = 64ull << 20;
  /// Microseconds since the Unix epoch; defaults to the system clock.
  std::function<std::int64_t()> clock;
};

/// What opening the log found and repaired.
struct recovery_report {
  /// Bytes cut from the end of the last file (a torn write).
  std::uint64_t truncated_bytes = 0;
  /// Incomplete or corrupt lines removed from the end of the last file.
  std::size_t dropped_lines = 0;
  /// Sequence number of the last good record (0 for a new log).
  std::uint64_t last_seq = 0;
};

/// Append-only, hash-chained audit log writer with bounded buffering, an
/// fsync policy and size-based rotation.
///
/// Opening recovers from a crash: trailing lines of the newest file that are
/// incomplete or fail their hash check are truncated away, and the chain
/// continues from the last good record. Rotation links the first record of a
/// new file to the last record of the previous one.
///
/// Not thread-safe: one owner (the audit actor) calls it. Errors are thrown
/// as `audit_error`.
class audit_log {
public:
  /// Opens (or creates) the log in `opts.directory`.
  explicit audit_log(audit_log_options opts);

  /// Flushes; errors at this point are swallowed.
  ~audit_log();

  audit_log(const audit_log&) = delete;
  audit_log& operator=(const audit_log&) = delete;

  /// Appends `ev` and returns its sequence number. Flushes when the buffer is
  /// full (or at once with `fsync_policy::every_record`).
  std::uint64_t append(const event& ev);

  /// Writes the buffered records and fsyncs unless the policy is `never`.
  void flush();

  /// Flushes, then runs `q` over all files of this log.
  query_page query(const audit_query& q);

  /// Flushes, then returns record `seq` as stored (its hash not checked),
  /// or nothing when no readable record has that number. Reads the files
  /// from their ends, newest first, in growing tails (from 64 KiB) until
  /// one reaches a record at or before `seq`: a record near the end (the
  /// latest checkpoint's, at a node's start) costs the same in a log of a
  /// few records or of many 64 MiB files, where query() parses every
  /// record before it.
  std::optional<record> record_at(std::uint64_t seq);

  /// Sequence number of the last appended record (0 when empty).
  std::uint64_t last_seq() const noexcept { return seq_; }

  /// Hash of the last appended record (the chain head).
  const std::string& last_hash() const noexcept { return prev_; }

  /// Records appended but not yet written.
  std::size_t buffered() const noexcept { return buffered_; }

  /// Path of the file being written.
  const std::string& current_file() const noexcept { return path_; }

  /// What opening the log repaired.
  const recovery_report& recovery() const noexcept { return recovery_; }

private:
  void recover();
  void open_file(std::uint64_t index);
  void write_buffer();
  void sync_file();
  void rotate();

  audit_log_options opts_;
  sha256 hasher_;
  std::string prev_;
  std::uint64_t seq_ = 0;
  std::uint64_t index_ = 0;
  std::string path_;
  int fd_ = -1;
  std::uint64_t file_bytes_ = 0;
  std::string buffer_;
  std::size_t buffered_ = 0;
  recovery_report recovery_;
};

} // namespace exo::audit
