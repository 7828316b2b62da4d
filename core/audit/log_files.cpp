#include "core/audit/log_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace exo::audit {

std::string log_file_name(std::string_view prefix, std::uint64_t index) {
  auto digits = std::to_string(index);
  if (digits.size() < 6)
    digits.insert(0, 6 - digits.size(), '0');
  std::string name{prefix};
  name += '-';
  name += digits;
  name += ".jsonl";
  return name;
}

std::vector<log_file> list_log_files(const std::string& dir,
                                     std::string_view prefix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it{dir, ec};
  if (ec)
    throw audit_error("cannot read audit directory " + dir + ": "
                      + ec.message());
  std::vector<log_file> files;
  for (; it != fs::directory_iterator{}; it.increment(ec)) {
    if (ec)
      throw audit_error("cannot read audit directory " + dir + ": "
                        + ec.message());
    auto name = it->path().filename().string();
    std::string_view n{name};
    if (n.size() <= prefix.size() + 7 || n.substr(0, prefix.size()) != prefix
        || n[prefix.size()] != '-' || n.substr(n.size() - 6) != ".jsonl")
      continue;
    auto digits = n.substr(prefix.size() + 1,
                           n.size() - prefix.size() - 1 - 6);
    if (digits.empty() || digits.size() > 18
        || !std::all_of(digits.begin(), digits.end(),
                        [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    files.push_back({std::stoull(std::string{digits}), it->path().string()});
  }
  std::sort(files.begin(), files.end(),
            [](auto& a, auto& b) { return a.index < b.index; });
  return files;
}

namespace {

/// An open file, closed when it goes; pread that names the file.
class reader_fd {
public:
  explicit reader_fd(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
      throw audit_error("cannot open " + path + ": " + std::strerror(errno));
    struct stat sb {};
    if (::fstat(fd_, &sb) != 0) {
      auto err = errno;
      ::close(fd_);
      throw audit_error("cannot read " + path + ": " + std::strerror(err));
    }
    size_ = static_cast<std::uint64_t>(sb.st_size);
  }
  ~reader_fd() {
    ::close(fd_);
  }
  reader_fd(const reader_fd&) = delete;
  reader_fd& operator=(const reader_fd&) = delete;

  std::uint64_t size() const {
    return size_;
  }
  /// Up to `n` bytes at `at` into `buf` (fewer at the end of the file).
  std::size_t read(char* buf, std::size_t n, std::uint64_t at) {
    std::size_t done = 0;
    while (done < n) {
      auto r = ::pread(fd_, buf + done, n - done,
                       static_cast<off_t>(at + done));
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        throw audit_error("cannot read " + path_ + ": "
                          + std::strerror(errno));
      if (r == 0)
        break;
      done += static_cast<std::size_t>(r);
    }
    return done;
  }

private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

} // namespace

std::string read_file(const std::string& path) {
  return read_tail(path, UINT64_MAX).bytes;
}

file_tail read_tail(const std::string& path, std::uint64_t max_bytes) {
  reader_fd f{path};
  file_tail out;
  out.size = f.size();
  auto n = std::min(out.size, max_bytes);
  out.offset = out.size - n;
  // One allocation and one pass: a log file reaches tens of MB.
  out.bytes.resize(static_cast<std::size_t>(n));
  if (f.read(out.bytes.data(), out.bytes.size(), out.offset) < n)
    throw audit_error("cannot read " + path + ": the file shrank while read");
  return out;
}

namespace {

/// The sequence number a record line starts with (`{"seq":N,`), or
/// nothing when the line does not start so.
std::optional<std::uint64_t> line_seq(std::string_view line) {
  constexpr std::string_view head{"{\"seq\":"};
  if (line.substr(0, head.size()) != head)
    return std::nullopt;
  std::uint64_t v = 0;
  std::size_t i = head.size(), digits = 0;
  for (; i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i, ++digits)
    v = v * 10 + static_cast<std::uint64_t>(line[i] - '0');
  if (digits == 0 || digits > 19 || i >= line.size() || line[i] != ',')
    return std::nullopt;
  return v;
}

} // namespace

void for_each_file_line(const std::string& path, std::uint64_t from,
                        const std::function<bool(std::string_view, bool)>& fn,
                        std::size_t max_line) {
  reader_fd f{path};
  constexpr std::size_t chunk = std::size_t{1} << 20;
  std::vector<char> buf(chunk);
  std::string line;      // a line begun in an earlier chunk
  bool cutting = false;  // skipping the rest of a line passed cut
  for (auto at = from; at < f.size();) {
    auto n = f.read(buf.data(), chunk, at);
    if (n == 0)
      break; // the file shrank: what was read is all there is
    at += n;
    std::string_view data{buf.data(), n};
    while (!data.empty()) {
      auto nl = data.find('\n');
      auto part = data.substr(0, nl);
      if (cutting) {
        if (nl != std::string_view::npos)
          cutting = false;
      } else if (nl != std::string_view::npos) {
        if (line.empty()) {
          if (!fn(part, true))
            return;
        } else {
          line.append(part);
          if (!fn(line, true))
            return;
          line.clear();
        }
      } else {
        line.append(part);
      }
      if (!cutting && line.size() > max_line) {
        auto cut = std::string_view{line}.substr(0, max_line);
        if (!fn(cut, false))
          return;
        line.clear();
        cutting = nl == std::string_view::npos;
      }
      data.remove_prefix(nl == std::string_view::npos ? data.size() : nl + 1);
    }
  }
  if (!line.empty())
    fn(line, false);
}

std::uint64_t seek_after_seq(const std::string& path,
                             std::uint64_t after_seq) {
  reader_fd f{path};
  constexpr std::uint64_t window = 64 << 10;
  constexpr std::size_t probe = 4096;
  char buf[probe];
  // Every line starting before `lo` holds a record at or below after_seq;
  // the first one above it starts before `hi`.
  std::uint64_t lo = 0, hi = f.size();
  while (hi - lo > window) {
    auto mid = lo + (hi - lo) / 2;
    auto n = f.read(buf, probe, mid);
    std::string_view data{buf, n};
    auto nl = data.find('\n');
    if (nl == std::string_view::npos)
      return lo; // a line of 4 KiB or more: not a record's
    auto start = mid + nl + 1;
    data.remove_prefix(nl + 1);
    if (data.size() < 32 && start < f.size()) { // its head is cut: read it
      n = f.read(buf, probe, start);
      data = std::string_view{buf, n};
    }
    if (start >= f.size()) {
      hi = mid;
      continue;
    }
    auto seq = line_seq(data);
    if (!seq)
      return lo;
    if (*seq <= after_seq)
      lo = start;
    else
      hi = mid;
  }
  return lo;
}

} // namespace exo::audit
