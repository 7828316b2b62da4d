#pragma once

/// The services every node runs (actors/service/service.hpp says what a
/// service is). To add one: write its spawn function (an actor in actors/)
/// and add one call to spawn_services() in services.cpp.

#include "actors/service/service.hpp"

#include <vector>

namespace exo {

/// Spawns every service of the node.
std::vector<service> spawn_services(const service_context& ctx);

} // namespace exo
