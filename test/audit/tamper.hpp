#pragma once

/// Test helpers that tamper with an audit log the way an attacker who holds
/// the files would: cut its tail, drop its head, or rewrite a record and
/// recompute every later hash (so that the hash chain alone still verifies).
/// They use core/audit's own record parser and sealing.

#include "core/audit/hash_chain.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/record.hpp"

#include <cstdint>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace exo::test {

/// The records of each file of a log, in order.
inline std::vector<std::vector<audit::record>>
read_log(const std::vector<std::string>& files) {
  std::vector<std::vector<audit::record>> out;
  audit::record_reader reader;
  for (auto& f : files) {
    auto content = audit::read_file(f);
    out.emplace_back();
    audit::for_each_line(content, [&](std::string_view line, std::size_t,
                                      bool complete) {
      if (!complete)
        return false;
      audit::record r;
      auto err = reader.read(line, r);
      if (!err.empty())
        throw std::runtime_error("tamper: " + f + ": " + err);
      out.back().push_back(std::move(r));
      return true;
    });
  }
  return out;
}

/// Writes the records back as they are (their stored hashes).
inline void write_log(const std::vector<std::string>& files,
                      const std::vector<std::vector<audit::record>>& recs) {
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::string text;
    for (auto& r : recs[i])
      audit::append_record_line(text, r);
    std::ofstream out{files[i], std::ios::binary | std::ios::trunc};
    out << text;
  }
}

/// Keeps records 1..keep_seq, drops the rest.
inline void cut_tail(const std::vector<std::string>& files,
                     std::uint64_t keep_seq) {
  auto recs = read_log(files);
  for (auto& f : recs)
    while (!f.empty() && f.back().seq > keep_seq)
      f.pop_back();
  write_log(files, recs);
}

/// Drops records 1..n (what is left still chains from record n+1).
inline void drop_head(const std::vector<std::string>& files,
                      std::uint64_t n) {
  auto recs = read_log(files);
  for (auto& f : recs)
    while (!f.empty() && f.front().seq <= n)
      f.erase(f.begin());
  write_log(files, recs);
}

/// Changes record `seq` with `change` and recomputes its hash and every
/// later `prev` and hash, so the chain verifies on its own.
inline void rewrite(const std::vector<std::string>& files, std::uint64_t seq,
                    const std::function<void(audit::record&)>& change) {
  auto recs = read_log(files);
  audit::sha256 hasher;
  std::string prev;
  bool rechain = false;
  for (auto& f : recs)
    for (auto& r : f) {
      if (r.seq == seq) {
        change(r);
        rechain = true;
      }
      if (rechain) {
        if (!prev.empty())
          r.prev = prev;
        audit::seal_record(r, hasher);
      }
      prev = r.hash;
    }
  if (!rechain)
    throw std::runtime_error("tamper: no record " + std::to_string(seq));
  write_log(files, recs);
}

} // namespace exo::test
