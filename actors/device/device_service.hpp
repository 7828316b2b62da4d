#pragma once

/// The node's "dev" service: console `dev info/alloc/free/sync DEVICE ...
/// auth=TOKEN`, a client's device operation on this node, always sent to
/// the device actor as the token-bearing variant (the device checks it).

#include "actors/service/service.hpp"

namespace exo {

/// Spawns the service: name "dev", command "dev".
service spawn_device_service(const service_context& ctx);

} // namespace exo
