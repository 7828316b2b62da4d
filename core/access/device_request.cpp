#include "core/access/device_request.hpp"

#include <limits>
#include <sstream>
#include <vector>

namespace exo::access {

namespace {

bool parse_u64(const std::string& text, std::uint64_t& out) {
  if (text.empty() || text.size() > 20)
    return false;
  constexpr auto max = std::numeric_limits<std::uint64_t>::max();
  out = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return false;
    auto d = static_cast<std::uint64_t>(c - '0');
    if (out > (max - d) / 10)
      return false;
    out = out * 10 + d;
  }
  return true;
}

} // namespace

const char* device_request_usage() noexcept {
  return "dev info DEVICE auth=TOKEN | dev alloc DEVICE BYTES auth=TOKEN | "
         "dev free DEVICE HANDLE auth=TOKEN | dev sync DEVICE auth=TOKEN";
}

std::string parse_device_request(const std::string& arg, device_request& out) {
  std::istringstream in{arg};
  std::vector<std::string> plain;
  std::string w;
  bool have_auth = false;
  while (in >> w) {
    if (w.rfind("auth=", 0) == 0) {
      if (have_auth)
        return "auth= given twice";
      have_auth = true;
      out.token = w.substr(5);
    } else if (w.find('=') != std::string::npos) {
      return "unknown option \"" + w.substr(0, w.find('=')) + "\"";
    } else {
      plain.push_back(w);
    }
  }
  if (plain.empty())
    return "no operation given";
  auto& op = plain[0];
  std::size_t want = 2;
  if (op == "info") {
    out.what = device_request::op::info;
  } else if (op == "sync") {
    out.what = device_request::op::sync;
  } else if (op == "alloc") {
    out.what = device_request::op::allocate;
    want = 3;
  } else if (op == "free") {
    out.what = device_request::op::free;
    want = 3;
  } else {
    return "unknown operation \"" + op + "\"";
  }
  if (plain.size() != want)
    return op + " expects " + std::to_string(want - 1) + " argument(s), got "
           + std::to_string(plain.size() - 1);
  out.device = plain[1];
  if (want == 3) {
    auto& n = out.what == device_request::op::allocate ? out.bytes
                                                        : out.handle;
    if (!parse_u64(plain[2], n))
      return op + ": \"" + plain[2] + "\" is not a non-negative integer";
  }
  return {};
}

} // namespace exo::access
