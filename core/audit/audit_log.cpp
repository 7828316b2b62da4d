#include "core/audit/audit_log.hpp"

#include "core/audit/record.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace exo::audit {

namespace {

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

std::int64_t system_clock_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch())
    .count();
}

/// Finds the last good record of `content`: returns the length of the good
/// prefix and fills `last` (seq 0 when none). Counts dropped lines.
std::size_t good_prefix(std::string_view content, record_reader& reader,
                        record& last, std::size_t& dropped) {
  auto end = content.size();
  last.seq = 0;
  while (end > 0) {
    if (content[end - 1] != '\n') {
      auto nl = content.rfind('\n', end - 1);
      end = nl == std::string_view::npos ? 0 : nl + 1;
      ++dropped;
      continue;
    }
    std::size_t start = 0;
    if (end >= 2) {
      auto nl = content.rfind('\n', end - 2);
      start = nl == std::string_view::npos ? 0 : nl + 1;
    }
    auto line = content.substr(start, end - 1 - start);
    if (reader.read(line, last).empty())
      return end;
    last.seq = 0;
    end = start;
    ++dropped;
  }
  return 0;
}

/// good_prefix over a file, reading only as much of its end as it needs:
/// a growing tail (from 64 KiB) until it holds a good record or is the
/// whole file. Startup then costs the same with a file of a few records or
/// of 64 MiB. The tail's first line may be cut: it is left out until the
/// tail reaches the file's start, so lines are the whole file's lines and
/// the answer is good_prefix's on the whole file.
std::uint64_t good_prefix_of(const std::string& path, record_reader& reader,
                             record& last, std::size_t& dropped,
                             std::uint64_t& size) {
  for (std::uint64_t window = 64 << 10;; window *= 2) {
    auto tail = read_tail(path, window);
    size = tail.size;
    std::string_view content{tail.bytes};
    std::uint64_t base = tail.offset;
    if (base > 0) { // skip the (possibly cut) first line
      auto nl = content.find('\n');
      if (nl == std::string_view::npos) {
        if (window >= tail.size)
          return 0;
        continue;
      }
      content.remove_prefix(nl + 1);
      base += nl + 1;
    }
    std::size_t lines = 0;
    auto keep = good_prefix(content, reader, last, lines);
    if (last.seq != 0 || tail.offset == 0) {
      dropped += lines;
      return last.seq != 0 ? base + keep : 0;
    }
    if (window >= (std::uint64_t{1} << 62))
      return 0;
  }
}

} // namespace

audit_log::audit_log(audit_log_options opts) : opts_(std::move(opts)) {
  if (opts_.directory.empty())
    throw audit_error("audit log: no directory given");
  if (opts_.file_prefix.empty()
      || opts_.file_prefix.find('/') != std::string::npos)
    throw audit_error("audit log: invalid file prefix \"" + opts_.file_prefix
                      + "\"");
  if (opts_.buffer_records == 0)
    throw audit_error("audit log: buffer_records must be at least 1");
  if (opts_.max_file_bytes < 1024)
    throw audit_error("audit log: max_file_bytes must be at least 1024");
  if (!opts_.clock)
    opts_.clock = system_clock_us;
  std::error_code ec;
  std::filesystem::create_directories(opts_.directory, ec);
  if (ec)
    throw audit_error("cannot create audit directory " + opts_.directory
                      + ": " + ec.message());
  // The log names principals and what they did: only the node's user may
  // list or read it (0700 folder, 0600 files, also for older files).
  if (::chmod(opts_.directory.c_str(), 0700) != 0)
    throw audit_error(sys_error("cannot make the audit directory private",
                                opts_.directory));
  recover();
}

audit_log::~audit_log() {
  try {
    flush();
  } catch (...) {
    // Nothing sensible to do in a destructor; the records stay unwritten.
  }
  if (fd_ >= 0)
    ::close(fd_);
}

void audit_log::recover() {
  auto files = list_log_files(opts_.directory, opts_.file_prefix);
  for (auto& f : files)
    if (::chmod(f.path.c_str(), 0600) != 0)
      throw audit_error(sys_error("cannot make the audit file private",
                                  f.path));
  prev_ = std::string{genesis_hash};
  seq_ = 0;
  if (files.empty()) {
    open_file(1);
    return;
  }
  record_reader reader;
  record last;
  // The newest file may end in a torn write: cut it back to its last good
  // record. Older files were closed cleanly; a bad end there is tampering.
  auto& newest = files.back();
  std::uint64_t size = 0;
  auto keep =
    good_prefix_of(newest.path, reader, last, recovery_.dropped_lines, size);
  if (keep < size) {
    if (::truncate(newest.path.c_str(), static_cast<off_t>(keep)) != 0)
      throw audit_error(sys_error("cannot truncate torn audit file",
                                  newest.path));
    recovery_.truncated_bytes = size - keep;
  }
  for (auto i = files.size() - 1; last.seq == 0 && i-- > 0;) {
    std::size_t dropped = 0;
    std::uint64_t older = 0;
    auto good = good_prefix_of(files[i].path, reader, last, dropped, older);
    if (good != older)
      throw audit_error("audit file " + files[i].path
                        + " has a corrupt end; run `audit verify`");
  }
  if (last.seq != 0) {
    seq_ = last.seq;
    prev_ = last.hash;
  }
  recovery_.last_seq = seq_;
  open_file(newest.index);
}

void audit_log::open_file(std::uint64_t index) {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  index_ = index;
  path_ = (std::filesystem::path{opts_.directory}
           / log_file_name(opts_.file_prefix, index))
            .string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0)
    throw audit_error(sys_error("cannot open audit file", path_));
  auto size = ::lseek(fd_, 0, SEEK_END);
  if (size < 0)
    throw audit_error(sys_error("cannot seek in audit file", path_));
  file_bytes_ = static_cast<std::uint64_t>(size);
  if (size == 0 && opts_.sync != fsync_policy::never) {
    // Make the new file's directory entry durable too.
    int dir = ::open(opts_.directory.c_str(), O_RDONLY | O_DIRECTORY);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }
}

std::uint64_t audit_log::append(const event& ev) {
  record r;
  r.seq = seq_ + 1;
  r.time_us = ev.time_us ? *ev.time_us : opts_.clock();
  r.node = opts_.node;
  r.principal = ev.principal;
  r.type = ev.type;
  r.level = ev.level;
  r.details = ev.details;
  r.prev = prev_;
  auto line = seal_record(r, hasher_);
  // Rotate first, so that a file never grows beyond its limit (unless a
  // single record is larger than the limit).
  if (file_bytes_ + buffer_.size() > 0
      && file_bytes_ + buffer_.size() + line.size() > opts_.max_file_bytes)
    rotate();
  buffer_ += line;
  ++buffered_;
  seq_ = r.seq;
  prev_ = std::move(r.hash);
  if (opts_.sync == fsync_policy::every_record
      || buffered_ >= opts_.buffer_records)
    flush();
  return seq_;
}

void audit_log::flush() {
  if (buffered_ == 0)
    return;
  write_buffer();
  if (opts_.sync != fsync_policy::never)
    sync_file();
}

void audit_log::write_buffer() {
  std::size_t done = 0;
  while (done < buffer_.size()) {
    auto n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      // Keep what was not written; the next flush retries it.
      buffer_.erase(0, done);
      file_bytes_ += done;
      throw audit_error(sys_error("cannot write audit file", path_));
    }
    done += static_cast<std::size_t>(n);
  }
  file_bytes_ += buffer_.size();
  buffer_.clear();
  buffered_ = 0;
}

void audit_log::sync_file() {
  if (::fdatasync(fd_) != 0)
    throw audit_error(sys_error("cannot fsync audit file", path_));
}

void audit_log::rotate() {
  flush();
  if (opts_.sync == fsync_policy::never)
    sync_file(); // a closed file must be complete before the next one starts
  open_file(index_ + 1);
}

query_page audit_log::query(const audit_query& q) {
  flush();
  return query_directory(opts_.directory, opts_.file_prefix, q);
}

std::optional<record> audit_log::record_at(std::uint64_t seq) {
  flush();
  if (seq == 0)
    return std::nullopt;
  record_reader reader;
  auto files = list_log_files(opts_.directory, opts_.file_prefix);
  for (auto f = files.rbegin(); f != files.rend(); ++f) {
    for (std::uint64_t window = 64 << 10;; window *= 2) {
      auto tail = read_tail(f->path, window);
      std::string_view content{tail.bytes};
      if (tail.offset > 0) { // the first line may be cut
        auto nl = content.find('\n');
        content.remove_prefix(nl == std::string_view::npos ? content.size()
                                                            : nl + 1);
      }
      std::optional<record> found;
      std::uint64_t first = 0; // the smallest readable seq in the tail
      record r;
      for_each_line(content, [&](std::string_view line, std::size_t,
                                 bool complete) {
        if (!complete || !reader.read(line, r, false).empty())
          return true;
        if (first == 0 || r.seq < first)
          first = r.seq;
        if (r.seq == seq) {
          found = r;
          return false;
        }
        return true;
      });
      if (found)
        return found;
      if (first != 0 && first <= seq)
        return std::nullopt; // it would be in this tail
      if (tail.offset == 0 || window >= (std::uint64_t{1} << 62))
        break; // the whole file: an older one may hold it
    }
  }
  return std::nullopt;
}

} // namespace exo::audit
