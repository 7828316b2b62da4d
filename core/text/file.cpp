#include "core/text/file.hpp"

#include <climits>
#include <cstdlib>

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace exo::text {

namespace {

std::string kind_of(mode_t m) {
  if (S_ISDIR(m))
    return "a directory";
  if (S_ISFIFO(m))
    return "a FIFO";
  if (S_ISCHR(m))
    return "a character device";
  if (S_ISBLK(m))
    return "a block device";
  if (S_ISSOCK(m))
    return "a socket";
  return "not a regular file";
}

std::string prefix(const std::string& what, const std::string& path) {
  return what + " " + path + ": ";
}

/// Closes a descriptor on every path out.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace

std::string size_text(std::uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0)
    return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0)
    return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

std::string read_file(const std::string& path, std::uint64_t max_bytes,
                      const std::string& what) {
  // O_NONBLOCK: opening a FIFO without a writer must not wait for one.
  fd_guard f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (f.fd < 0)
    throw file_error(prefix(what, path) + "cannot open: "
                     + std::strerror(errno));
  struct stat sb {};
  if (::fstat(f.fd, &sb) != 0)
    throw file_error(prefix(what, path) + "cannot stat: "
                     + std::strerror(errno));
  if (!S_ISREG(sb.st_mode))
    throw file_error(prefix(what, path) + "is " + kind_of(sb.st_mode)
                     + ", not a regular file");
  auto too_large = [&] {
    return file_error(prefix(what, path) + "larger than "
                      + size_text(max_bytes));
  };
  if (static_cast<std::uint64_t>(sb.st_size) > max_bytes)
    throw too_large();
  std::string out;
  out.resize(static_cast<std::size_t>(sb.st_size));
  std::size_t have = 0;
  for (;;) {
    if (have == out.size()) {
      // The file may have grown since fstat: read on, up to the bound.
      if (out.size() > max_bytes)
        throw too_large();
      out.resize(std::min<std::uint64_t>(max_bytes + 1,
                                         out.size() + 64 * 1024));
      if (have == out.size())
        throw too_large();
    }
    auto n = ::read(f.fd, &out[have], out.size() - have);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw file_error(prefix(what, path) + "cannot read: "
                       + std::strerror(errno));
    }
    if (n == 0)
      break;
    have += static_cast<std::size_t>(n);
  }
  out.resize(have);
  if (out.size() > max_bytes)
    throw too_large();
  return out;
}

bool file_exists(const std::string& path) {
  struct stat sb {};
  return ::lstat(path.c_str(), &sb) == 0;
}

void check_private(const std::string& path, const std::string& what,
                   unsigned forbidden) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0)
    throw file_error(prefix(what, path) + "cannot stat: "
                     + std::strerror(errno));
  if (sb.st_uid != ::geteuid())
    throw file_error(prefix(what, path) + "owned by uid "
                     + std::to_string(sb.st_uid) + ", not by this user ("
                     + std::to_string(::geteuid()) + "): chown it");
  if ((sb.st_mode & forbidden & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o",
                  static_cast<unsigned>(sb.st_mode & 07777));
    auto fix = S_ISDIR(sb.st_mode) ? "chmod 700 " : "chmod 600 ";
    throw file_error(prefix(what, path) + "mode " + mode
                     + ((sb.st_mode & forbidden & 022) ? " lets other users change it"
                                                       : " lets other users read it")
                     + "; fix with: " + fix + path);
  }
}

void create_private(const std::string& path, const std::string& text,
                    const std::string& what) {
  fd_guard f{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                    0600)};
  if (f.fd < 0)
    throw file_error(prefix(what, path) + "cannot create: "
                     + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(f.fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw file_error(prefix(what, path) + "cannot write: "
                       + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(f.fd) != 0)
    throw file_error(prefix(what, path) + "cannot sync: "
                     + std::strerror(errno));
}

} // namespace exo::text

namespace exo::text {

namespace {

/// `p` with "." and ".." taken out lexically (no file is touched); false
/// when ".." climbs above the root.
bool normalize(const std::string& p, std::string& out) {
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i <= p.size()) {
    auto j = p.find('/', i);
    if (j == std::string::npos)
      j = p.size();
    auto part = p.substr(i, j - i);
    if (part == "..") {
      if (parts.empty())
        return false;
      parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  out.clear();
  for (auto& x : parts)
    out += "/" + x;
  if (out.empty())
    out = "/";
  return true;
}

bool inside(const std::string& path, const std::string& dir) {
  if (dir == "/")
    return true;
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0
         && path[dir.size()] == '/';
}

std::string real(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) == nullptr)
    return {};
  return buf;
}

} // namespace

std::string resolve_client_file(const std::string& name,
                                const std::vector<std::string>& dirs,
                                const std::string& what) {
  auto refuse = [&] {
    // The name as given, control bytes shown as '?', at most 256 bytes.
    std::string shown;
    for (char c : name.substr(0, 256))
      shown += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
    if (name.size() > 256)
      shown += "...";
    return file_error(what + " " + shown
                      + ": no such file in this node's model folders "
                        "(models.dirs)");
  };
  if (name.empty() || name.size() > 4096
      || name.find('\0') != std::string::npos)
    throw refuse();
  for (auto& d : dirs) {
    std::string dir;
    if (d.empty() || d[0] != '/' || !normalize(d, dir))
      continue;
    std::string lexical;
    if (!normalize(name[0] == '/' ? name : dir + "/" + name, lexical)
        || !inside(lexical, dir))
      continue;
    auto real_dir = real(dir);
    auto found = real(lexical);
    if (real_dir.empty() || found.empty() || !inside(found, real_dir))
      continue;
    return found;
  }
  throw refuse();
}

} // namespace exo::text
