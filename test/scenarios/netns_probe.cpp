// A small TCP probe for the namespace network tests, run inside a node's
// namespace (`ip netns exec NS netns_probe ...`):
//   netns_probe serve ADDR PORT          accept one connection, count its
//                                        bytes to EOF, print "received N
//                                        bytes in S s: R Mbit/s"
//   netns_probe send ADDR PORT BYTES     connect (5 s bound), send BYTES
//   netns_probe connect ADDR PORT MS     exit 0 when a connection is made
//                                        within MS milliseconds (printing
//                                        "connected in T ms": one round
//                                        trip), else 1
// Exit 2 on bad arguments or a socket error.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool address(const char* host, const char* port, sockaddr_in& sa) {
  std::memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(std::atoi(port)));
  return inet_pton(AF_INET, host, &sa.sin_addr) == 1;
}

/// A connected socket, or -1 when none within ms.
int connect_within(const sockaddr_in& sa, int ms) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  fcntl(fd, F_SETFL, O_NONBLOCK);
  int rc = connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
  if (rc != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  if (rc != 0) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, ms) != 1) {
      close(fd);
      return -1;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      close(fd);
      return -1;
    }
  }
  fcntl(fd, F_SETFL, 0);
  return fd;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 4)
    return 2;
  const std::string mode = argv[1];
  sockaddr_in sa;
  if (!address(argv[2], argv[3], sa)) {
    std::fprintf(stderr, "bad address %s\n", argv[2]);
    return 2;
  }
  if (mode == "serve") {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0
        || listen(s, 4) != 0) {
      std::perror("bind/listen");
      return 2;
    }
    std::printf("listening\n");
    std::fflush(stdout);
    int c = accept(s, nullptr, nullptr);
    if (c < 0)
      return 2;
    std::vector<char> buf(1 << 16);
    long long n = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      auto r = read(c, buf.data(), buf.size());
      if (r <= 0)
        break;
      if (n == 0)
        t0 = std::chrono::steady_clock::now(); // from the first byte
      n += r;
    }
    double s_ = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                              - t0)
                  .count();
    std::printf("received %lld bytes in %.3f s: %.2f Mbit/s\n", n, s_,
                s_ > 0 ? n * 8 / s_ / 1e6 : 0.0);
    return 0;
  }
  if (mode == "send" && argc == 5) {
    int fd = connect_within(sa, 5000);
    if (fd < 0) {
      std::perror("connect");
      return 2;
    }
    long long left = std::atoll(argv[4]);
    std::vector<char> buf(1 << 16, 'x');
    while (left > 0) {
      auto w = write(fd, buf.data(),
                     static_cast<std::size_t>(
                       std::min<long long>(left, static_cast<long long>(buf.size()))));
      if (w <= 0)
        return 2;
      left -= w;
    }
    close(fd);
    return 0;
  }
  if (mode == "connect" && argc == 5) {
    auto t0 = std::chrono::steady_clock::now();
    int fd = connect_within(sa, std::atoi(argv[4]));
    if (fd < 0)
      return 1;
    std::printf("connected in %.3f ms\n",
                std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - t0)
                  .count());
    close(fd);
    return 0;
  }
  return 2;
}
