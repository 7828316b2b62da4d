#pragma once

/// The embedding API (docs/embedding.md): one exo node inside a process,
/// either with an actor system of its own (what exo-node does) or inside
/// the actor system of another CAF application, whose config
/// exo::prepare_system() readies in one call.
///
///   exo::config::node_config cfg = exo::config::load("node.json");
///   caf::actor_system_config sys_cfg;
///   exo::prepare_system(sys_cfg, cfg); // messages, modules, TLS material
///   caf::actor_system sys{sys_cfg};
///   exo::runtime rt{sys, cfg};
///   rt.start();             // discovery, device actors, gate, services;
///                           // joins the cluster of cfg's seeds
///   exo::jobs_actor jobs = rt.jobs(); // typed handles (handles.hpp)
///   rt.stop();              // actors stopped, registry saved

#include "core/access/shared_policy.hpp"
#include "core/config/node_config.hpp"
#include "core/discovery/discovery.hpp"
#include "core/tls/material.hpp"
#include "runtime/node/handles.hpp"

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

  /// What stop() is doing now, for a program that bounds how long it
  /// waits: "" before stop(), then "stopping services", "leaving the
  /// cluster", "stopping the node and its devices", "closing the audit
  /// log", "releasing the actor system" (a runtime with its own system:
  /// CAF waits there until every detached actor is destroyed) and
  /// "stopped". Thread-safe.
  std::string stop_step() const;

  caf::actor_system& system();
  /// The node actor: its devices. Invalid before start().
  node_actor node() const;
  caf::actor directory() const;
  /// The published gate: membership, member events, console requests.
  gate_actor gate() const;
  /// The job coordinator (service "jobs"): submits jobs, streams tokens.
  jobs_actor jobs() const;
  /// The placement service (service "placement").
  placement_actor placement() const;
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

/// Readies an application's own actor system config to host the node that
/// `node` describes, before the actor system exists: registers exo's
/// message types, loads CAF's io and openssl modules, applies exo's
/// transport settings and the node's TLS material (creating the state
/// directory, and a local CA and certificate when the config names no TLS
/// files, as exo-node does). Throws startup_error (status 2: the config's
/// state directory or TLS files are wrong).
void prepare_system(caf::actor_system_config& sys_cfg,
                    const config::node_config& node);

/// Runs discovery without any actor: for `exo-node --devices`.
discovery::discovery_result discover_devices(const config::node_config& cfg);

} // namespace exo
