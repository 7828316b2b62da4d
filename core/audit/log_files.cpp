#include "core/audit/log_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
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

std::string read_file(const std::string& path) {
  return read_tail(path, UINT64_MAX).bytes;
}

file_tail read_tail(const std::string& path, std::uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw audit_error("cannot open " + path + ": " + std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    auto err = errno;
    ::close(fd);
    throw audit_error("cannot read " + path + ": " + std::strerror(err));
  }
  file_tail out;
  out.size = static_cast<std::uint64_t>(sb.st_size);
  auto n = std::min(out.size, max_bytes);
  out.offset = out.size - n;
  // One allocation and one pass: a log file reaches tens of MB.
  out.bytes.resize(static_cast<std::size_t>(n));
  std::size_t done = 0;
  while (done < n) {
    auto r = ::pread(fd, out.bytes.data() + done, n - done,
                     static_cast<off_t>(out.offset + done));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      auto err = r < 0 ? std::strerror(errno) : "the file shrank while read";
      ::close(fd);
      throw audit_error("cannot read " + path + ": " + err);
    }
    done += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return out;
}

} // namespace exo::audit
