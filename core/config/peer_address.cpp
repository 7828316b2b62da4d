#include "core/config/peer_address.hpp"

#include <cstdlib>

namespace exo::config {

peer_address parse_peer(const std::string& text, const std::string& path) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw config_error(path + ": must be \"host:port\", got \"" + text
                       + "\"");
  peer_address p;
  p.host = text.substr(0, colon);
  if (p.host.size() > 2 && p.host.front() == '[' && p.host.back() == ']')
    p.host = p.host.substr(1, p.host.size() - 2);
  auto port = text.substr(colon + 1);
  char* end = nullptr;
  auto v = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || v < 1 || v > 65535)
    throw config_error(path + ": port must be an integer in [1, 65535], got \""
                       + port + "\"");
  p.port = static_cast<std::uint16_t>(v);
  return p;
}

} // namespace exo::config
