#pragma once

#include "core/audit/record.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace exo::audit {

/// A filter over audit records with pagination. Every set field must match.
///
/// Pagination: either skip `offset` matches, or pass the `next_cursor` of
/// the previous page as `after_seq` (stable while the log grows).
struct audit_query {
  /// Inclusive lower bound on the time (µs since the Unix epoch).
  std::optional<std::int64_t> since_us;
  /// Exclusive upper bound on the time (µs since the Unix epoch).
  std::optional<std::int64_t> until_us;
  std::optional<std::string> principal;
  std::optional<event_type> type;
  /// Only records with a larger sequence number (a cursor).
  std::uint64_t after_seq = 0;
  std::size_t offset = 0;
  std::size_t limit = 100;
};

/// One page of query results.
struct query_page {
  std::vector<record> records;
  /// Set when more matches follow: pass it as `after_seq` for the next page.
  std::optional<std::uint64_t> next_cursor;
  /// Lines that could not be parsed and were skipped (e.g. a torn tail).
  std::size_t skipped_lines = 0;
};

/// Returns whether `r` passes the filters of `q` (not the pagination).
bool matches(const audit_query& q, const record& r) noexcept;

/// Runs `q` over the log files of `prefix` in `dir`, oldest first. Throws
/// `audit_error` when the directory or a file cannot be read.
query_page query_directory(const std::string& dir, const std::string& prefix,
                           const audit_query& q);

/// Parses a time for queries: an integer (µs since the Unix epoch) or UTC
/// ISO 8601 "YYYY-MM-DDTHH:MM:SS[.ffffff][Z]". Returns nothing when invalid.
std::optional<std::int64_t> parse_time(std::string_view text) noexcept;

} // namespace exo::audit
