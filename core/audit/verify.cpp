#include "core/audit/verify.hpp"

#include "core/audit/hash_chain.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/record.hpp"

namespace exo::audit {

verify_result verify(const std::vector<std::string>& files,
                     const verify_options& opts) {
  verify_result res;
  record_reader reader;
  record r;
  bool have_prev = false;
  std::uint64_t expected = 0; // valid when have_prev
  for (std::size_t fi = 0; fi < files.size() && res.ok; ++fi) {
    auto& path = files[fi];
    auto content = read_file(path);
    ++res.files;
    bool last_file = fi + 1 == files.size();
    auto fail = [&](std::optional<std::uint64_t> seq, std::size_t line,
                    std::string why) {
      res.ok = false;
      res.bad_seq = seq;
      res.bad_file = path;
      res.bad_line = line;
      res.reason = std::move(why);
    };
    for_each_line(content, [&](std::string_view line, std::size_t number,
                               bool complete) {
      std::optional<std::uint64_t> want;
      if (have_prev)
        want = expected;
      if (!complete) {
        if (last_file) {
          res.torn_tail = true;
        } else {
          fail(want, number, "incomplete line in the middle of the log");
        }
        return false;
      }
      auto err = reader.read(line, r);
      if (!err.empty()) {
        // Without a predecessor, name the sequence number the line claims.
        if (!want && reader.read(line, r, false).empty())
          want = r.seq;
        fail(want, number, err);
        return false;
      }
      if (!have_prev) {
        if (opts.require_genesis && (r.seq != 1 || r.prev != genesis_hash)) {
          fail(1, number, "the log does not start at the chain's first record"
                          " (seq 1 with prev of zeros): records removed");
          return false;
        }
        res.first_seq = r.seq;
      } else if (r.seq < expected) {
        fail(expected, number,
             "sequence number " + std::to_string(r.seq) + " follows "
               + std::to_string(expected - 1)
               + ": record inserted or reordered");
        return false;
      } else if (r.seq > expected) {
        fail(expected, number,
             "sequence number jumps from " + std::to_string(expected - 1)
               + " to " + std::to_string(r.seq)
               + ": record(s) removed or reordered");
        return false;
      } else if (r.prev != res.last_hash) {
        fail(expected, number,
             "\"prev\" does not match the hash of record "
               + std::to_string(expected - 1)
               + ": record inserted, replaced or the chain was rewritten");
        return false;
      }
      have_prev = true;
      expected = r.seq + 1;
      res.last_seq = r.seq;
      res.last_hash = r.hash;
      ++res.records;
      return true;
    });
  }
  return res;
}

} // namespace exo::audit
