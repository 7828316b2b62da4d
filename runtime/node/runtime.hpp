#pragma once

/// The embedding API: one exo node inside a process, either with an actor
/// system of its own (what exo-node does) or inside the actor system of
/// another CAF application (which must call exo::register_messages on its
/// config first, load the io and openssl modules, and should call
/// exo::tls::apply_transport_settings for fast remote round trips).
///
///   exo::config::node_config cfg = exo::config::load("node.json");
///   exo::runtime rt{cfg};
///   rt.start();                       // discovery, device actors, node
///   caf::actor node = rt.node();      // ask it: devices_atom, inspect_atom
///   rt.stop();                        // actors stopped, registry saved

#include "core/access/shared_policy.hpp"
#include "core/config/node_config.hpp"
#include "core/discovery/discovery.hpp"
#include "core/tls/material.hpp"

#include <caf/fwd.hpp>
#include <caf/actor.hpp>

#include <memory>
#include <stdexcept>
#include <string>

namespace exo {

/// A node that could not start; what() says why. status() is the exit
/// status exo-node gives it: 2 for bad input the user must fix (the
/// config's state directory, TLS material, the access key), 1 for anything
/// else (a port in use, a device that fails).
class startup_error : public std::runtime_error {
public:
  explicit startup_error(const std::string& what, int status = 1)
    : std::runtime_error(what), status_(status) {
  }
  int status() const noexcept {
    return status_;
  }

private:
  int status_;
};

class runtime {
public:
  /// A runtime with an actor system of its own.
  explicit runtime(config::node_config cfg);

  /// A runtime inside an existing actor system (embedding).
  runtime(caf::actor_system& sys, config::node_config cfg);

  ~runtime();

  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  /// Creates the state directory, discovers and verifies devices, and
  /// spawns the directory, node and device actors. Throws startup_error.
  void start();

  /// Stops every actor of this node and saves the device registry.
  void stop();

  caf::actor_system& system();
  caf::actor node() const;
  caf::actor directory() const;
  /// The published gate (membership, console requests).
  caf::actor gate() const;
  /// The node service registered as `name` ("shards", "jobs", ...; see
  /// runtime/node/services.cpp); an invalid handle when there is none.
  caf::actor service_actor(const std::string& name) const;
  /// The TLS port the gate listens on.
  std::uint16_t port() const noexcept;
  /// The node's TLS files (certificate, key, passphrase, cluster CA), as
  /// checked at start().
  const tls::material& tls_material() const noexcept;
  /// The node's access policy (checks exo's bearer tokens); null before
  /// start().
  std::shared_ptr<access::shared_policy> access_policy() const;
  /// The node's audit sink; invalid before start().
  caf::actor audit() const;
  /// A note about TLS to show once (how to issue certificates for more
  /// nodes), empty when there is nothing to say.
  const std::string& tls_note() const noexcept;
  const config::node_config& config() const noexcept;
  const discovery::discovery_result& discovery() const noexcept;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Builds the actor system config every exo process uses: exo's messages,
/// the io and openssl modules, exo's transport settings.
std::unique_ptr<caf::actor_system_config> make_system_config();

/// Runs discovery without any actor: for `exo-node --devices`.
discovery::discovery_result discover_devices(const config::node_config& cfg);

} // namespace exo
