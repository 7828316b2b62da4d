#pragma once

#include "core/audit/event.hpp"
#include "core/audit/hash_chain.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace exo::audit {

/// One record of the audit log, as written on disk.
///
/// On disk a record is one JSON line with the fields in this fixed order:
///
///   {"seq":7,"time":1700000000000000,"node":"n1","principal":"alice",
///    "type":"device_allocate","severity":"info","details":{"bytes":"4096"},
///    "prev":"<64 hex>","hash":"<64 hex>"}
///
/// `hash` is the SHA-256 of the line's bytes up to (not including)
/// `,"hash":`; `prev` is the `hash` of the record before it (64 zeros for the
/// first record of a chain). Since a record's hash covers its `prev`, each
/// hash commits to the whole history before it.
struct record {
  std::uint64_t seq = 0;
  /// Microseconds since the Unix epoch.
  std::int64_t time_us = 0;
  std::string node;
  std::string principal;
  event_type type = event_type::config_load;
  severity level = severity::info;
  details_map details;
  std::string prev;
  std::string hash;
};

/// Fills in `r.hash` from the other fields and returns the record's line,
/// ending in '\n'. `hasher` is reused scratch.
std::string seal_record(record& r, sha256& hasher);

/// Appends the line of an already sealed record (with its stored `hash`) to
/// `out`, ending in '\n'. Re-serialising a parsed record gives back the exact
/// bytes that were read, since the encoding is canonical.
void append_record_line(std::string& out, const record& r);

/// Parses and checks record lines. Keeps a JSON parser and a hasher to reuse,
/// so one reader should serve many lines. Not thread-safe.
class record_reader {
public:
  record_reader();
  ~record_reader();
  record_reader(const record_reader&) = delete;
  record_reader& operator=(const record_reader&) = delete;

  /// Parses `line` (without its '\n') into `out`. With `check_hash`, also
  /// recomputes the hash over the line and compares it with the stored one.
  /// Returns an empty string on success, otherwise what is wrong.
  std::string read(std::string_view line, record& out, bool check_hash = true);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace exo::audit
