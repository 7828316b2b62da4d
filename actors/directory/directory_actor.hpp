#pragma once

/// The directory: knows every actor of the node by name and kind, for the
/// inspection console and dashboard (CAF 0.17 cannot list running actors).
/// Actors that go down leave the directory by themselves (it monitors them).
///
///   any --- register(name, kind, actor) ---> directory -> ok
///   console --- actors ---> directory --- inspect ---> each actor
///                           directory <--- snapshot --- (or a timeout note)
///   console <--- [snapshot...] --- directory

#include "messages/device.hpp"

#include <caf/fwd.hpp>

#include <chrono>
#include <string>

namespace exo::directory {

/// Spawns the directory of node `node`. Inspect requests to members time out
/// after `timeout`; a member that does not answer is listed with a note.
caf::actor spawn_directory(caf::actor_system& sys, std::string node,
                           std::chrono::milliseconds timeout
                           = std::chrono::milliseconds{2000});

} // namespace exo::directory
