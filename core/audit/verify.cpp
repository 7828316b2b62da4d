#include "core/audit/verify.hpp"

#include "core/audit/hash_chain.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/record.hpp"

#include <algorithm>
#include <map>

namespace exo::audit {

namespace {

template <class Seen>
void check_checkpoints(verify_result& res, std::vector<checkpoint> cps,
                       const std::map<std::uint64_t, Seen>& at,
                       const std::string& first_prev,
                       const std::string& log_node,
                       const std::string& first_file,
                       const std::string& last_file, std::size_t last_line) {
  std::stable_sort(cps.begin(), cps.end(),
                   [](const checkpoint& a, const checkpoint& b) {
                     return a.seq < b.seq;
                   });
  res.newest_checkpoint = cps.back();
  auto& newest = cps.back();
  auto fail = [&](std::uint64_t seq, std::string file, std::size_t line,
                  std::string why) {
    res.ok = false;
    res.bad_seq = seq;
    res.bad_file = std::move(file);
    res.bad_line = line;
    res.reason = std::move(why);
  };
  auto range = [](std::uint64_t a, std::uint64_t b) {
    return a == b ? "record " + std::to_string(a)
                  : "records " + std::to_string(a) + ".." + std::to_string(b);
  };
  // Whose log is it? Every record names its node.
  for (auto& cp : cps) {
    if (res.records > 0 && cp.node != log_node) {
      fail(cp.seq, last_file, 0,
           describe(cp) + " is of node " + cp.node
             + ", but the log's records are of node " + log_node);
      return;
    }
  }
  if (res.records == 0) {
    fail(1, last_file, 1,
         range(1, newest.seq) + " missing: " + describe(newest) + " says "
           + std::to_string(newest.seq) + " records, the log holds none");
    return;
  }
  // Dropped head: a node's log starts at record 1.
  if (res.first_seq != 1) {
    fail(1, first_file, 1,
         range(1, res.first_seq - 1) + " missing (the head was dropped): "
           + describe(newest) + " covers records 1.."
           + std::to_string(newest.seq) + ", the log starts at seq "
           + std::to_string(res.first_seq));
    return;
  }
  if (first_prev != genesis_hash) {
    fail(1, first_file, 1,
         "record 1 does not start a chain (its \"prev\" is not 64 zeros),"
         " but " + describe(newest) + " covers records 1.."
           + std::to_string(newest.seq) + ": the log was rewritten");
    return;
  }
  std::uint64_t good_up_to = 0; // the last checkpointed seq that matched
  for (auto& cp : cps) {
    if (cp.seq > res.last_seq) {
      fail(res.last_seq + 1, last_file, last_line + 1,
           range(res.last_seq + 1, cp.seq) + " missing: " + describe(cp)
             + " says " + std::to_string(cp.seq)
             + " records, the log ends at seq "
             + std::to_string(res.last_seq) + " (its tail was cut)");
      return;
    }
    auto& s = at.at(cp.seq);
    if (s.hash != cp.head) {
      fail(cp.seq, s.file, s.line,
           "record " + std::to_string(cp.seq) + " hash differs from the "
             + describe(cp) + ": the log was rewritten (a record in seq "
             + std::to_string(good_up_to + 1) + ".."
             + std::to_string(cp.seq) + " was changed)");
      return;
    }
    good_up_to = cp.seq;
    ++res.checkpoints_checked;
  }
}

} // namespace

verify_result verify(const std::vector<std::string>& files,
                     const verify_options& opts) {
  verify_result res;
  record_reader reader;
  record r;
  bool have_prev = false;
  std::uint64_t expected = 0; // valid when have_prev
  // The records the checkpoints name: their hash, file and line.
  struct seen {
    std::string hash;
    std::string file;
    std::size_t line = 0;
  };
  std::map<std::uint64_t, seen> at;
  for (auto& cp : opts.checkpoints)
    at.emplace(cp.seq, seen{});
  std::string first_prev;
  std::string log_node;
  std::size_t last_line = 0;
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
        first_prev = r.prev;
        log_node = r.node;
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
      last_line = number;
      if (auto it = at.find(r.seq); it != at.end())
        it->second = seen{r.hash, path, number};
      return true;
    });
  }
  if (res.ok && !opts.checkpoints.empty())
    check_checkpoints(res, opts.checkpoints, at, first_prev, log_node,
                      files.empty() ? std::string{} : files.front(),
                      files.empty() ? std::string{} : files.back(), last_line);
  return res;
}

} // namespace exo::audit
