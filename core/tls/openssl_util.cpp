#include "core/tls/openssl_util.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>

namespace exo::tls::detail {

std::string drain_errors() {
  std::string result;
  while (auto code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    if (!result.empty())
      result += "; ";
    result += buf;
  }
  return result;
}

void fail(tls_errc code, const std::string& what) {
  auto details = drain_errors();
  if (details.empty())
    throw tls_error(code, what);
  throw tls_error(code, what + " (OpenSSL: " + details + ")");
}

error_queue_guard::~error_queue_guard() {
  ERR_clear_error();
}

bio_ptr read_bio(std::string_view data) {
  if (data.size() > max_pem_size)
    throw tls_error(tls_errc::invalid_argument,
                    "PEM data too large (" + std::to_string(data.size()) +
                        " bytes)");
  bio_ptr bio{BIO_new_mem_buf(data.data(), static_cast<int>(data.size()))};
  if (!bio)
    fail(tls_errc::internal, "cannot allocate a memory BIO");
  return bio;
}

std::string bio_contents(BIO* bio) {
  char* data = nullptr;
  auto len = BIO_get_mem_data(bio, &data);
  if (len <= 0 || data == nullptr)
    return {};
  return std::string(data, static_cast<size_t>(len));
}

std::string read_file(const std::string& path, std::string_view what) {
  auto prefix = std::string{what} + " '" + path + "'";
  if (path.empty())
    throw tls_error(tls_errc::io, std::string{what} + ": no path given");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw tls_error(tls_errc::io,
                    "cannot open " + prefix + ": " + std::strerror(errno));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_fd{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    throw tls_error(tls_errc::io,
                    "cannot stat " + prefix + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw tls_error(tls_errc::io, prefix + " is not a regular file");
  if (static_cast<size_t>(st.st_size) > max_pem_size)
    throw tls_error(tls_errc::not_pem,
                    prefix + " is too large to be PEM material (" +
                        std::to_string(st.st_size) + " bytes)");
  std::string result;
  char buf[4096];
  for (;;) {
    auto n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw tls_error(tls_errc::io,
                      "cannot read " + prefix + ": " + std::strerror(errno));
    }
    if (n == 0)
      break;
    result.append(buf, static_cast<size_t>(n));
    if (result.size() > max_pem_size)
      throw tls_error(tls_errc::not_pem,
                      prefix + " is too large to be PEM material");
  }
  return result;
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::string format_time(const ASN1_TIME* t) {
  struct tm tm;
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1)
    return "(invalid time)";
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

} // namespace exo::tls::detail
