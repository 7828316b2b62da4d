#include "test/support/raw_tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <stdexcept>
#include <vector>

namespace exo::test {

raw_tls::raw_tls(std::uint16_t port, const std::string& cert,
                 const std::string& key, const std::string& ca) {
  // Writing to a connection the node dropped is what these tests expect:
  // an error, not the end of the test process.
  static const bool no_sigpipe = [] {
    std::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  static_cast<void>(no_sigpipe);
  ctx_ = SSL_CTX_new(TLS_client_method());
  if (!ctx_
      || SSL_CTX_use_certificate_file(ctx_, cert.c_str(), SSL_FILETYPE_PEM) != 1
      || SSL_CTX_use_PrivateKey_file(ctx_, key.c_str(), SSL_FILETYPE_PEM) != 1
      || SSL_CTX_load_verify_locations(ctx_, ca.c_str(), nullptr) != 1) {
    SSL_CTX_free(ctx_);
    throw std::runtime_error("raw_tls: cannot load " + cert);
  }
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0
      || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr)
           != 0) {
    if (fd_ >= 0)
      ::close(fd_);
    SSL_CTX_free(ctx_);
    throw std::runtime_error("raw_tls: cannot connect to port "
                             + std::to_string(port));
  }
  timeval tv{10, 0};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ssl_ = SSL_new(ctx_);
  SSL_set_fd(ssl_, fd_);
}

raw_tls::~raw_tls() {
  SSL_free(ssl_);
  ::close(fd_);
  SSL_CTX_free(ctx_);
}

bool raw_tls::handshake() {
  ERR_clear_error();
  return SSL_connect(ssl_) == 1;
}

bool raw_tls::announce(std::uint32_t payload_len) {
  // operation client_handshake (1), padding, flags, the length (big
  // endian), operation data and actor ids (zero).
  unsigned char header[32] = {1, 0, 0, 0};
  header[4] = static_cast<unsigned char>(payload_len >> 24);
  header[5] = static_cast<unsigned char>(payload_len >> 16);
  header[6] = static_cast<unsigned char>(payload_len >> 8);
  header[7] = static_cast<unsigned char>(payload_len);
  ERR_clear_error();
  return SSL_write(ssl_, header, sizeof header) == sizeof header;
}

bool raw_tls::send_zeros(std::size_t n) {
  std::vector<char> zeros(16384);
  while (n > 0) {
    auto k = static_cast<int>(n < zeros.size() ? n : zeros.size());
    ERR_clear_error();
    if (SSL_write(ssl_, zeros.data(), k) != k)
      return false;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool raw_tls::send(const void* data, std::size_t n) {
  auto* p = static_cast<const char*>(data);
  auto deadline = std::chrono::steady_clock::now() + send_patience_;
  while (n > 0) {
    auto k = static_cast<int>(n < (1u << 20) ? n : (1u << 20));
    ERR_clear_error();
    auto rc = SSL_write(ssl_, p, k);
    if (rc <= 0) {
      // SO_SNDTIMEO (10 s) ran out with nothing taken: retried with the
      // same bytes, as OpenSSL requires, until the patience is spent.
      if (SSL_get_error(ssl_, rc) == SSL_ERROR_WANT_WRITE
          && std::chrono::steady_clock::now() < deadline)
        continue;
      note_failure("SSL_write", rc);
      return false;
    }
    p += rc;
    n -= static_cast<std::size_t>(rc);
  }
  return true;
}

void raw_tls::set_send_patience(std::chrono::milliseconds patience) {
  send_patience_ = patience;
}

void raw_tls::note_failure(const char* call, int rc) {
  auto err = errno;
  auto code = SSL_get_error(ssl_, rc);
  const char* what = code == SSL_ERROR_ZERO_RETURN ? "closed by the peer"
                     : code == SSL_ERROR_WANT_WRITE
                       ? "timed out: the peer took nothing"
                     : code == SSL_ERROR_WANT_READ
                       ? "timed out: the peer sent nothing"
                     : code == SSL_ERROR_SYSCALL ? "socket error"
                     : code == SSL_ERROR_SSL     ? "TLS error"
                                                 : "other error";
  last_error_ = std::string{call} + " returned " + std::to_string(rc) + ": "
                + what + " (SSL error " + std::to_string(code) + ", errno "
                + std::to_string(err) + " " + std::strerror(err) + ")";
}

bool raw_tls::receive(void* data, std::size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    auto k = static_cast<int>(n < (1u << 20) ? n : (1u << 20));
    ERR_clear_error();
    auto rc = SSL_read(ssl_, p, k);
    if (rc <= 0) {
      note_failure("SSL_read", rc);
      return false;
    }
    p += rc;
    n -= static_cast<std::size_t>(rc);
  }
  return true;
}

std::uint16_t raw_tls::local_port() const {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return 0;
  return ntohs(a.sin_port);
}

void raw_tls::set_receive_buffer(int bytes) {
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

bool raw_tls::closed_within(std::chrono::milliseconds patience) {
  auto deadline = std::chrono::steady_clock::now() + patience;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (SSL_pending(ssl_) == 0) {
      if (left.count() <= 0)
        return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        return false;
    }
    ERR_clear_error();
    int rc = SSL_read(ssl_, buf, sizeof buf);
    if (rc > 0)
      continue; // the server's own bytes (its BASP handshake)
    int e = SSL_get_error(ssl_, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
      continue;
    return true;
  }
}

bool raw_tls::socket_closed_within(std::chrono::milliseconds patience) {
  return exo::test::socket_closed_within(fd_, patience);
}

bool socket_closed_within(int fd, std::chrono::milliseconds patience) {
  auto deadline = std::chrono::steady_clock::now() + patience;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      continue;
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      return true;
  }
}

bool holds_tcp_peer(int pid, std::uint16_t peer_port) {
  // The socket's inode from /proc/net/tcp (remote address 127.0.0.1:port,
  // hex, little-endian address), then whether one of pid's descriptors is
  // that socket.
  char want[32];
  std::snprintf(want, sizeof want, "0100007F:%04X", peer_port);
  std::set<std::string> inodes;
  std::ifstream tcp{"/proc/net/tcp"};
  std::string line;
  std::getline(tcp, line); // the header
  while (std::getline(tcp, line)) {
    std::istringstream in{line};
    std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
    in >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid
      >> timeout >> inode;
    if (remote == want && inode != "0")
      inodes.insert("socket:[" + inode + "]");
  }
  auto dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = opendir(dir.c_str())) {
    bool found = false;
    while (auto* e = readdir(d)) {
      char target[256];
      auto path = dir + "/" + e->d_name;
      auto n = readlink(path.c_str(), target, sizeof target - 1);
      if (n > 0) {
        target[n] = '\0';
        found = found || inodes.count(target) > 0;
      }
    }
    closedir(d);
    return found;
  }
  return false;
}

namespace {

long status_kib(int pid, const char* format) {
  auto path = "/proc/" + std::to_string(pid) + "/status";
  std::FILE* f = std::fopen(path.c_str(), "r");
  long kib = -1;
  char line[256];
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, format, &kib) == 1)
      break;
  if (f)
    std::fclose(f);
  return kib;
}

} // namespace

long resident_kib(int pid) {
  return status_kib(pid, "VmRSS: %ld kB");
}

long peak_resident_kib(int pid) {
  return status_kib(pid, "VmHWM: %ld kB");
}

} // namespace exo::test
