#include "core/access/device_request.hpp"

#include "core/console/commands.hpp"
#include "core/text/number.hpp"

#include <string>

namespace exo::access {

const char* device_request_usage() noexcept {
  return "dev info DEVICE auth=TOKEN | dev alloc DEVICE SIZE auth=TOKEN | "
         "dev free DEVICE HANDLE auth=TOKEN | dev sync DEVICE auth=TOKEN | "
         "dev fault DEVICE FAULT auth=TOKEN";
}

std::string parse_device_request(const std::string& arg, device_request& out) {
  console::parsed_command p;
  try {
    p = console::parse_command("dev", arg);
  } catch (const console::command_error& e) {
    return e.what();
  }
  using op = device_request::op;
  out.what = p.sub == "sync"    ? op::sync
             : p.sub == "alloc" ? op::allocate
             : p.sub == "free"  ? op::free
             : p.sub == "fault" ? op::fault
                                : op::info;
  out.device = p.args[0];
  out.token = p.auth;
  // The table checked both (a size, a count): these cannot throw.
  if (out.what == op::allocate)
    out.bytes = text::parse_size(p.args[1]);
  else if (out.what == op::free)
    out.handle = text::parse_integer<std::uint64_t>(p.args[1]);
  else if (out.what == op::fault)
    out.fault = p.args[1];
  return {};
}

} // namespace exo::access
