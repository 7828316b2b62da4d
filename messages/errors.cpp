#include "messages/errors.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>

namespace exo {

const char* to_string(exo_errc code) noexcept {
  switch (code) {
    case exo_errc::unsupported: return "unsupported";
    case exo_errc::invalid_argument: return "invalid_argument";
    case exo_errc::out_of_range: return "out_of_range";
    case exo_errc::out_of_memory: return "out_of_memory";
    case exo_errc::quota_exceeded: return "quota_exceeded";
    case exo_errc::no_device: return "no_device";
    case exo_errc::device_lost: return "device_lost";
    case exo_errc::timeout: return "timeout";
    case exo_errc::driver_error: return "driver_error";
    case exo_errc::paused: return "paused";
    case exo_errc::wrong_device: return "wrong_device";
    case exo_errc::unknown_handle: return "unknown_handle";
    case exo_errc::access_denied: return "access_denied";
    case exo_errc::failed_state: return "failed_state";
  }
  return "unknown";
}

caf::atom_value exo_error_category() {
  return caf::atom("exo");
}

caf::error make_exo_error(exo_errc code, std::string message) {
  return caf::error{static_cast<std::uint8_t>(code), exo_error_category(),
                    caf::make_message(std::move(message))};
}

caf::error to_caf_error(const backend::error& err) {
  // backend::errc and exo_errc list the shared codes in the same order.
  auto code = static_cast<exo_errc>(static_cast<std::uint8_t>(err.code) + 1);
  return make_exo_error(code, err.message);
}

std::string error_message(const caf::error& err) {
  if (err.category() != exo_error_category())
    return {};
  const auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return {};
}

void add_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(
    exo_error_category(),
    [](std::uint8_t code, caf::atom_value, const caf::message& ctx) {
      std::string out = to_string(static_cast<exo_errc>(code));
      if (ctx.size() == 1 && ctx.match_element<std::string>(0)) {
        out += ": ";
        out += ctx.get_as<std::string>(0);
      }
      return out;
    });
}

} // namespace exo
