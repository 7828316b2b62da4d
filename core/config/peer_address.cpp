#include "core/config/peer_address.hpp"

#include "core/text/number.hpp"

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
  // The one strict parser: digits only ("+80", " 80" and "0x50" were
  // strtol's).
  try {
    p.port = text::parse_integer<std::uint16_t>(port, 1, 65535);
  } catch (const text::number_error&) {
    throw config_error(path + ": port must be an integer in [1, 65535], got \""
                       + port.substr(0, 64) + "\"");
  }
  return p;
}

} // namespace exo::config
