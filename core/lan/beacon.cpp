#include "core/lan/beacon.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace exo::lan {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("discovery: " + what + ": " + std::strerror(errno));
}

in_addr ipv4(const std::string& s, const char* what) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1)
    throw std::runtime_error(std::string{"discovery: "} + what + " " + s
                             + " is not an IPv4 address");
  return a;
}

} // namespace

bool announceable(const std::string& address) {
  in_addr a{};
  if (inet_pton(AF_INET, address.c_str(), &a) != 1)
    return false;
  const auto h = ntohl(a.s_addr);
  return h != 0 && (h >> 24) != 127;
}

beacon::beacon(const std::string& group, std::uint16_t port,
               const std::string& interface_address) {
  const auto g = ipv4(group, "group");
  if ((ntohl(g.s_addr) >> 28) != 0xE)
    throw std::runtime_error("discovery: group " + group
                             + " is not a multicast address");
  const auto iface = ipv4(interface_address, "interface");
  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0)
    fail("socket");
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr = g; // receive only the group's datagrams
  if (bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    close(fd_);
    fail("bind " + group + ":" + std::to_string(port));
  }
  ip_mreq mreq{};
  mreq.imr_multiaddr = g;
  mreq.imr_interface = iface;
  unsigned char ttl = 1, loop = 1;
  if (setsockopt(fd_, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof mreq) != 0
      || setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_IF, &iface, sizeof iface) != 0
      || setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl) != 0
      || setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop)
           != 0) {
    const int e = errno;
    close(fd_);
    errno = e;
    fail("join " + group + " on " + interface_address);
  }
  group_ = g.s_addr;
  port_ = htons(port);
}

beacon::~beacon() {
  if (fd_ >= 0)
    close(fd_);
}

bool beacon::send(const std::string& datagram) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = port_;
  to.sin_addr.s_addr = group_;
  return sendto(fd_, datagram.data(), datagram.size(), 0,
                reinterpret_cast<sockaddr*>(&to), sizeof to)
         == static_cast<ssize_t>(datagram.size());
}

std::vector<std::string> beacon::receive(std::size_t max,
                                         std::size_t max_size) {
  std::vector<std::string> out;
  std::string buf(max_size + 1, '\0');
  while (out.size() < max) {
    auto n = recv(fd_, buf.data(), buf.size(), MSG_TRUNC);
    if (n < 0)
      break; // EAGAIN: nothing more
    out.emplace_back(buf.data(), std::min<std::size_t>(
                                   static_cast<std::size_t>(n), buf.size()));
  }
  return out;
}

} // namespace exo::lan
