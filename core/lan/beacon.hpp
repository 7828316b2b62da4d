#pragma once

// A UDP multicast beacon for zero-config discovery (no CAF): joins a group
// on one interface (the node's listen address), sends datagrams to it with
// a TTL of 1 (they never leave the LAN segment) and drains what arrived
// without blocking. The gate sends its signed hello (core/tls/hello.hpp)
// through it and checks every datagram it receives.

#include <cstdint>
#include <string>
#include <vector>

namespace exo::lan {

class beacon {
public:
  /// Opens a socket bound to group:port that receives the group on the
  /// interface with IPv4 address `interface_address` and sends through it.
  /// @throws std::runtime_error naming the call that failed.
  beacon(const std::string& group, std::uint16_t port,
         const std::string& interface_address);
  ~beacon();
  beacon(const beacon&) = delete;
  beacon& operator=(const beacon&) = delete;

  /// Sends one datagram to the group; false when the kernel refused it.
  bool send(const std::string& datagram);

  /// The datagrams that arrived since the last call (at most `max` of at
  /// most `max_size` bytes each; longer ones are cut to max_size + 1 bytes
  /// so the receiver can refuse them).
  std::vector<std::string> receive(std::size_t max = 64,
                                   std::size_t max_size = 8192);

private:
  int fd_ = -1;
  std::uint32_t group_ = 0; ///< network order
  std::uint16_t port_ = 0;  ///< network order
};

/// Whether `address` is a concrete IPv4 address other than loopback and
/// the unspecified 0.0.0.0: an interface discovery can announce on.
bool announceable(const std::string& address);

} // namespace exo::lan
