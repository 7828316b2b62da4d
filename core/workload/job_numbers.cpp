#include "core/workload/job_numbers.hpp"

#include "core/text/file.hpp"
#include "core/text/number.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace exo::workload {

namespace {

constexpr const char* prefix = "exo job numbers: last ";

/// Far below 2^64: a file that claims more is not ours, and next() never
/// wraps (2^63 jobs would take the age of the universe).
constexpr std::uint64_t max_last =
    std::numeric_limits<std::uint64_t>::max() / 2;

} // namespace

std::string job_numbers::file_text(std::uint64_t last) {
  return prefix + std::to_string(last) + "\n";
}

std::uint64_t job_numbers::parse(const std::string& text) {
  std::string p{prefix};
  if (text.compare(0, p.size(), p) != 0)
    throw std::invalid_argument("it does not start with \"" + p + "\"");
  auto rest = text.substr(p.size());
  if (!rest.empty() && rest.back() == '\n')
    rest.pop_back();
  return text::parse_integer<std::uint64_t>(rest, 0, max_last,
                                            "the last job number");
}

job_numbers::job_numbers(std::string path) : path_(std::move(path)) {
  if (path_.empty() || !text::file_exists(path_))
    return;
  try {
    last_ = parse(text::read_file(path_, 256, "job numbers file"));
  } catch (const std::exception& e) {
    note_ = "set aside the job numbers file " + path_ + " (" + e.what() +
            "): job numbers start from 1 again";
    last_ = 0;
  }
}

std::uint64_t job_numbers::next() {
  auto n = ++last_;
  if (path_.empty())
    return n;
  // A new file renamed over the old one: a crash mid-write leaves the old
  // number or the new one, never a torn line.
  auto tmp = path_ + ".tmp";
  std::string why;
  {
    std::ofstream out{tmp, std::ios::binary | std::ios::trunc};
    if (out) {
      out << file_text(n);
      out.flush();
    }
    if (!out)
      why = "cannot write " + tmp + ": " + std::strerror(errno);
  }
  if (why.empty() && std::rename(tmp.c_str(), path_.c_str()) != 0)
    why = "cannot rename " + tmp + " to " + path_ + ": " + std::strerror(errno);
  if (!why.empty() && !write_failed_) {
    write_failed_ = true;
    note_ = "job numbers are not kept (" + why +
            "): after a restart they start from 1 again";
  }
  return n;
}

} // namespace exo::workload
