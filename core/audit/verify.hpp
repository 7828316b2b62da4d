#pragma once

#include "core/audit/checkpoint.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace exo::audit {

/// Options of `verify`.
struct verify_options {
  /// Require the first record to be the start of a chain (seq 1 and a `prev`
  /// of 64 zeros). Off by default, so that a suffix of rotated files (older
  /// ones archived) can be checked on its own.
  bool require_genesis = false;
  /// Signed checkpoints of this log, already verified (read_checkpoint,
  /// load_checkpoints). With any, the log must hold every record a
  /// checkpoint covers: it must start at record 1 (else "dropped head"),
  /// reach the highest checkpointed seq (else "cut tail"), and the record at
  /// each checkpoint's seq must have the checkpoint's head hash (else "the
  /// log was rewritten"). Checkpoints of another node than the log's fail.
  std::vector<checkpoint> checkpoints;
};

/// Outcome of `verify`.
struct verify_result {
  bool ok = true;
  std::size_t files = 0;
  std::uint64_t records = 0;
  std::uint64_t first_seq = 0;
  std::uint64_t last_seq = 0;
  /// Hash of the last good record (the chain head).
  std::string last_hash;
  /// The last line of the last file has no '\n': a torn write from a crash,
  /// which the sink truncates on start. It does not make `ok` false.
  bool torn_tail = false;
  /// How many checkpoints were checked (all of them when `ok`).
  std::size_t checkpoints_checked = 0;
  /// The checkpoint with the highest seq (when any was given).
  std::optional<checkpoint> newest_checkpoint;

  // On failure:

  /// The first sequence number whose record is not what the chain requires
  /// (missing, modified, out of order); nothing when it cannot be told.
  std::optional<std::uint64_t> bad_seq;
  std::string bad_file;
  std::size_t bad_line = 0;
  std::string reason;
};

/// Checks the hash chain across `files`, in the given order (the order of
/// rotation). Detects modified, removed, inserted and reordered records and,
/// against `opts.checkpoints`, a cut tail, a dropped head and a rewrite with
/// recomputed hashes; reports the first problem. Throws `audit_error` when a file cannot be
/// read.
verify_result verify(const std::vector<std::string>& files,
                     const verify_options& opts = {});

} // namespace exo::audit
