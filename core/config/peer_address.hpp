#pragma once

/// A peer's "host:port", and the error every config parser throws. Apart
/// from node_config so that programs that only name a peer (exo-console)
/// do not link the device backends.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace exo::config {

/// A config that cannot be used; what() names the key path and the problem.
class config_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct peer_address {
  std::string host;
  std::uint16_t port = 0;
};

/// "host:port" -> peer_address. Throws config_error naming `path`.
peer_address parse_peer(const std::string& text, const std::string& path);

} // namespace exo::config
