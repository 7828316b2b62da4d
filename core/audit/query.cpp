#include "core/audit/query.hpp"

#include "core/audit/log_files.hpp"

#include <ctime>

namespace exo::audit {

bool matches(const audit_query& q, const record& r) noexcept {
  if (q.since_us && r.time_us < *q.since_us)
    return false;
  if (q.until_us && r.time_us >= *q.until_us)
    return false;
  if (q.principal && r.principal != *q.principal)
    return false;
  if (q.type && r.type != *q.type)
    return false;
  return r.seq > q.after_seq;
}

query_page query_directory(const std::string& dir, const std::string& prefix,
                           const audit_query& q) {
  query_page page;
  if (q.limit == 0)
    return page;
  record_reader reader;
  record r;
  std::size_t skipped = 0;
  bool done = false;
  for (auto& file : list_log_files(dir, prefix)) {
    // A file at a time, a chunk at a time (a file reaches 64 MiB); after a
    // cursor, from near its first newer record (a gateway polls for the
    // records after the last it saw every second).
    auto from = q.after_seq > 0 ? seek_after_seq(file.path, q.after_seq)
                                : std::uint64_t{0};
    for_each_file_line(file.path, from, [&](std::string_view line,
                                            bool complete) {
      if (!complete || !reader.read(line, r, false).empty()) {
        ++page.skipped_lines;
        return true;
      }
      if (!matches(q, r))
        return true;
      if (skipped < q.offset) {
        ++skipped;
        return true;
      }
      if (page.records.size() == q.limit) {
        page.next_cursor = page.records.back().seq;
        done = true;
        return false;
      }
      page.records.push_back(r);
      return true;
    });
    if (done)
      break;
  }
  return page;
}

std::optional<std::int64_t> parse_time(std::string_view text) noexcept {
  if (text.empty())
    return std::nullopt;
  bool all_digits = true;
  for (char c : text)
    all_digits = all_digits && c >= '0' && c <= '9';
  if (all_digits) {
    if (text.size() > 18)
      return std::nullopt;
    std::int64_t v = 0;
    for (char c : text)
      v = v * 10 + (c - '0');
    return v;
  }
  // YYYY-MM-DDTHH:MM:SS[.ffffff][Z], every field its exact digits (no
  // signs, spaces or short fields) and a date that exists.
  if (text.size() < 19 || text.size() > 40)
    return std::nullopt;
  auto field = [&](std::size_t at, std::size_t n) -> int {
    int v = 0;
    for (std::size_t i = at; i < at + n; ++i) {
      if (text[i] < '0' || text[i] > '9')
        return -1;
      v = v * 10 + (text[i] - '0');
    }
    return v;
  };
  if (text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':'
      || text[16] != ':')
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = field(0, 4);
  tm.tm_mon = field(5, 2);
  tm.tm_mday = field(8, 2);
  tm.tm_hour = field(11, 2);
  tm.tm_min = field(14, 2);
  tm.tm_sec = field(17, 2);
  if (tm.tm_year < 1970 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1
      || tm.tm_hour < 0 || tm.tm_hour > 23 || tm.tm_min < 0 || tm.tm_min > 59
      || tm.tm_sec < 0 || tm.tm_sec > 59)
    return std::nullopt;
  static constexpr int days[] = {31, 28, 31, 30, 31, 30,
                                 31, 31, 30, 31, 30, 31};
  auto y = tm.tm_year;
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (tm.tm_mday > days[tm.tm_mon - 1] + (tm.tm_mon == 2 && leap ? 1 : 0))
    return std::nullopt;
  std::int64_t frac = 0;
  std::size_t pos = 19;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits < 6) {
        frac = frac * 10 + (text[pos] - '0');
        ++digits;
      }
      ++pos;
    }
    if (digits == 0)
      return std::nullopt;
    for (; digits < 6; ++digits)
      frac *= 10;
  }
  if (pos < text.size() && text[pos] == 'Z')
    ++pos;
  if (pos != text.size())
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  auto secs = timegm(&tm);
  return static_cast<std::int64_t>(secs) * 1000000 + frac;
}

} // namespace exo::audit
