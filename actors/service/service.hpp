#pragma once

/// Node services: actors beyond the core (node, devices, directory, gate)
/// that a node runs, each reachable from the console through the gate.
/// runtime::start() spawns them after the gate is up (runtime/node/
/// services.cpp); every service is registered with the directory under its
/// name, each of its console commands with the gate, and it is stopped (and
/// waited for) by runtime::stop() before the node actor. A service's spawn
/// function takes the context below and returns the running service.

#include "core/access/shared_policy.hpp"
#include "core/config/node_config.hpp"
#include "core/tls/material.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace exo::tls {
class bulk_blobs;
} // namespace exo::tls

namespace exo {

/// What a service may use.
struct service_context {
  caf::actor_system* sys = nullptr;
  const config::node_config* cfg = nullptr;
  caf::actor node;      ///< devices_atom -> std::vector<device_info>, ...
  caf::actor directory; ///< actors_atom, inspect_atom
  caf::actor gate;      ///< (console_atom, "nodes"|"links"|..., arg)
  std::uint16_t port = 0;
  /// Safety (issue 6): the node's audit sink, its shared access policy and
  /// the HMAC key of its tokens (set by runtime::start before services).
  caf::actor audit;
  std::shared_ptr<access::shared_policy> access;
  std::string access_key;
  /// The node's TLS files (for bulk_fetch) and the blobs its bulk channel
  /// serves (core/tls/bulk_channel.hpp).
  tls::material tls;
  std::shared_ptr<tls::bulk_blobs> blobs;
};

/// One running service.
struct service {
  std::string name;                  ///< directory name, e.g. "placement"
  std::string kind;                  ///< directory kind
  caf::actor handle;
  std::vector<std::string> commands; ///< console commands it answers
};

} // namespace exo
