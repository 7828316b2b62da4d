#pragma once

/// The node actor: supervisor of one node's devices. It owns the backend
/// registries (through shared pointers its device actors keep alive),
/// spawns one device actor per verified device, answers "devices" for the
/// whole node, and rescans for devices that appeared or vanished
/// (periodically and on demand).
///
///   console --- devices ---> node --- info ---> each device actor
///   console <--- [device_info...] --- node
///   timer ---- tick ----> node: rescan, adopt new devices, mark gone ones

#include "core/access/shared_policy.hpp"
#include "messages/device.hpp"
#include "core/config/node_config.hpp"
#include "core/discovery/discovery.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <map>
#include <memory>
#include <string>

namespace exo::node {

/// Everything the node actor starts from.
struct node_setup {
  config::node_config cfg;
  /// The registry discovery ran over and its result (devices to adopt).
  std::shared_ptr<backend::registry> devices;
  discovery::discovery_result found;
  /// The persistent device registry and where to save it.
  std::shared_ptr<discovery::device_registry> known;
  std::string registry_path;
  caf::actor directory; ///< may be null
  /// Safety (issue 6), handed to every device actor (both may be null).
  caf::actor audit;
  std::shared_ptr<access::shared_policy> access;
};

/// Spawns the node actor (detached: rescans block on drivers).
caf::actor spawn_node_actor(caf::actor_system& sys, node_setup setup);

/// Messages only the node actor understands, besides devices/inspect:
///   (rescan_atom)            -> std::string summary of changes
///   (devices_atom, actors_atom) -> std::vector<exo::device_actor> handles

} // namespace exo::node
