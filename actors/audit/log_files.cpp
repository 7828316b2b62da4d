#include "actors/audit/log_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

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
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw audit_error("cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad())
    throw audit_error("cannot read " + path);
  return std::move(buf).str();
}

} // namespace exo::audit
