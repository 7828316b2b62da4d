#include "core/access/revocation_store.hpp"

#include "core/access/access_policy.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace exo::access {

namespace {

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

std::string line_of(const revocation& r) {
  return std::string{r.what == revocation::kind::token ? "token "
                                                       : "principal "}
         + r.name + " " + std::to_string(r.at) + "\n";
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 256)
    return false;
  for (unsigned char c : name)
    if (c <= ' ' || c == 0x7f)
      return false;
  return true;
}

/// Parses one complete line; false when malformed.
bool parse_line(const std::string& line, revocation& out) {
  std::istringstream in{line};
  std::string kind, name, at, extra;
  if (!(in >> kind >> name >> at) || (in >> extra))
    return false;
  if (kind == "token")
    out.what = revocation::kind::token;
  else if (kind == "principal")
    out.what = revocation::kind::principal;
  else
    return false;
  if (!valid_name(name) || at.empty() || at.size() > 18)
    return false;
  std::int64_t v = 0;
  for (std::size_t i = 0; i < at.size(); ++i) {
    char c = at[i];
    if (c == '-' && i == 0 && at.size() > 1)
      continue;
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + (c - '0');
  }
  out.name = std::move(name);
  out.at = at[0] == '-' ? -v : v;
  return true;
}

void write_all(int fd, const std::string& text, const std::string& path) {
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw std::runtime_error(sys_error("cannot write revocations", path));
    }
    done += static_cast<std::size_t>(n);
  }
}

} // namespace

std::vector<revocation> revocation_store::load(std::int64_t now,
                                               std::int64_t max_ttl_s) {
  skipped_ = 0;
  std::vector<revocation> out;
  struct stat sb;
  if (::stat(path_.c_str(), &sb) != 0 && errno == ENOENT)
    return out;
  std::ifstream in{path_, std::ios::binary};
  if (!in)
    throw std::runtime_error(sys_error("cannot read revocations", path_));
  std::stringstream ss;
  ss << in.rdbuf();
  auto content = ss.str();
  std::size_t pos = 0;
  std::size_t kept_lines = 0, lines = 0;
  while (pos < content.size()) {
    auto nl = content.find('\n', pos);
    if (nl == std::string::npos) { // a torn last line
      ++skipped_;
      break;
    }
    ++lines;
    revocation r;
    if (!parse_line(content.substr(pos, nl - pos), r)) {
      ++skipped_;
    } else {
      bool live = r.what == revocation::kind::token ? r.at > now
                                                    : r.at + max_ttl_s > now;
      if (live) {
        out.push_back(std::move(r));
        ++kept_lines;
      }
    }
    pos = nl + 1;
  }
  if (kept_lines == lines && skipped_ == 0)
    return out;
  // Rewrite without the dead entries: a temporary file, fsync, rename.
  auto tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    throw std::runtime_error(sys_error("cannot rewrite revocations", tmp));
  try {
    std::string text;
    for (auto& r : out)
      text += line_of(r);
    write_all(fd, text, tmp);
    if (::fsync(fd) != 0)
      throw std::runtime_error(sys_error("cannot fsync revocations", tmp));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path_.c_str()) != 0)
    throw std::runtime_error(sys_error("cannot replace revocations", path_));
  return out;
}

void revocation_store::append(const revocation& r) {
  if (!valid_name(r.name))
    throw std::invalid_argument("revocation: a name must be 1 to 256 "
                                "printable characters without spaces");
  int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
                  0600);
  if (fd < 0)
    throw std::runtime_error(sys_error("cannot open revocations", path_));
  try {
    write_all(fd, line_of(r), path_);
    if (::fdatasync(fd) != 0)
      throw std::runtime_error(sys_error("cannot fsync revocations", path_));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

void apply_revocations(access_policy& policy,
                       const std::vector<revocation>& rs) {
  for (auto& r : rs) {
    if (r.what == revocation::kind::token)
      policy.revoke_token(r.name, r.at);
    else
      policy.revoke_principal(r.name, r.at);
  }
}

} // namespace exo::access
