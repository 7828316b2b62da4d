#pragma once

#include <cstdint>
#include <string>

namespace exo::access {

/// A client's device operation as typed at the console (command "dev"):
///
///   dev info  DEVICE        auth=TOKEN
///   dev alloc DEVICE SIZE   auth=TOKEN   -> a handle (4096, 64MiB)
///   dev free  DEVICE HANDLE auth=TOKEN
///   dev sync  DEVICE        auth=TOKEN
///   dev fault DEVICE FAULT  auth=TOKEN   -> what it did (admin; simulated
///                                            devices only, for test
///                                            clusters: backends/sim)
///
/// The service on each node forwards it to that node's device actor as the
/// token-bearing variant (messages/access.hpp), so it is checked and
/// audited there like any client request. A missing auth= is not refused
/// here: the empty token is refused (and audited) by the device actor.
struct device_request {
  enum class op : std::uint8_t { info, allocate, free, sync, fault };
  op what = op::info;
  std::string device;
  std::uint64_t bytes = 0;  ///< alloc
  std::uint64_t handle = 0; ///< free
  std::string fault;        ///< fault: sim_runtime_fault_error's names
  std::string token;
};

/// Parses the argument of "dev"; returns an error message (empty on
/// success). Never throws.
std::string parse_device_request(const std::string& arg, device_request& out);

/// The usage line of "dev".
const char* device_request_usage() noexcept;

} // namespace exo::access
