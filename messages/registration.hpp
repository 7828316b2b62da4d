#pragma once

/// Registers every message type and error category of exo's wire contract
/// with an actor system config. Every node calls it with the same names.

#include <caf/fwd.hpp>

namespace exo {

void register_messages(caf::actor_system_config& cfg);

} // namespace exo
