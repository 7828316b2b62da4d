#include "runtime/scenario/listen_port.hpp"

#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace exo::scenario {

namespace {

constexpr std::uint32_t lowest_port = 10000;

/// Whether a listener could bind `port` on `addr` now.
bool binds(const in_addr& addr, std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = addr;
  sa.sin_port = htons(port);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return ok;
}

} // namespace

std::pair<std::uint16_t, std::uint16_t>
parse_ephemeral_range(const std::string& text) {
  std::istringstream in{text};
  long low = 0;
  long high = 0;
  if (in >> low >> high && low >= 1 && low <= high && high <= 65535)
    return {static_cast<std::uint16_t>(low), static_cast<std::uint16_t>(high)};
  return {32768, 60999};
}

std::pair<std::uint16_t, std::uint16_t> ephemeral_range() {
  std::ifstream f{"/proc/sys/net/ipv4/ip_local_port_range"};
  std::stringstream text;
  text << f.rdbuf();
  return parse_ephemeral_range(text.str());
}

std::uint16_t stable_listen_port(const std::string& host) {
  in_addr addr{};
  if (::inet_pton(AF_INET, host.c_str(), &addr) != 1)
    throw std::runtime_error("no stable port on " + host
                             + ": not an IPv4 address");
  auto [low, high] = ephemeral_range();
  // The ports below the range (from lowest_port) and above it.
  std::uint32_t below = low > lowest_port ? low - lowest_port : 0;
  std::uint32_t above = 65535u - high;
  if (high < lowest_port) {
    below = 0;
    above = 65535u - lowest_port + 1;
  }
  if (below + above == 0)
    throw std::runtime_error("no stable port on " + host
                             + ": the ephemeral range "
                             + std::to_string(low) + "-"
                             + std::to_string(high)
                             + " leaves no port from "
                             + std::to_string(lowest_port));
  std::random_device seed;
  std::mt19937 gen{seed()};
  std::uniform_int_distribution<std::uint32_t> draw{0, below + above - 1};
  for (int i = 0; i < 200; ++i) {
    auto k = draw(gen);
    std::uint32_t port = k < below ? lowest_port + k
                                   : (high < lowest_port ? lowest_port
                                                         : high + 1u)
                                       + (k - below);
    if (binds(addr, static_cast<std::uint16_t>(port)))
      return static_cast<std::uint16_t>(port);
  }
  throw std::runtime_error("no stable port on " + host
                           + ": 200 ports outside the ephemeral range "
                           + std::to_string(low) + "-" + std::to_string(high)
                           + " were all taken");
}

} // namespace exo::scenario
