#pragma once

/// Safety assembly (issue 6): the audit sink and the shared access policy
/// exist before the node actor (so every device actor reports to and checks
/// with them); the thermal, access, audit and dev console services are
/// spawned with the other services (services.cpp); the sink is stopped
/// last, after the devices.

#include "core/access/shared_policy.hpp"
#include "core/config/node_config.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace exo::tls {
class private_key;
class trust_store;
} // namespace exo::tls

namespace exo {

/// What the audit sink signs its checkpoints with and checks its peers'
/// with: the node's certificate and key, and the cluster CA (loaded once,
/// by runtime::start, for the gate too). Empty: no checkpoints.
struct audit_signing {
  std::string cert_pem;
  std::shared_ptr<const tls::private_key> key;
  std::shared_ptr<const tls::trust_store> ca;
};

struct safety_parts {
  caf::actor audit;
  std::shared_ptr<access::shared_policy> access;
  std::string key;
  std::string admin_token_file;
  std::string revocations_file; ///< <state_dir>/access/revocations
};

/// Opens <state_dir>/audit, loads (or creates) the access key, applies the
/// revocations kept in <state_dir>/access/revocations, writes the
/// first admin token to <state_dir>/access/admin.token when missing, and
/// audits config_load and backend_start. With `signing`, the sink signs
/// checkpoints of its log (safety.audit_checkpoint_*) and witnesses its
/// peers'. Throws std::runtime_error.
safety_parts start_safety(caf::actor_system& sys,
                          const config::node_config& cfg,
                          std::size_t devices,
                          const audit_signing& signing = {});

/// Applies network.limits to this process's TLS guard (a client
/// certificate may message `gate` only) and spawns the actor
/// that, every `interval`, audits the connections the guard refused
/// (connection_refused: limit, peer, address, detail) and writes each to
/// stderr for the operator. At most 64 records per interval; more are
/// counted in one summary record, so a flood cannot fill the log.
caf::actor start_connection_watch(caf::actor_system& sys,
                                  const config::node_config& cfg,
                                  caf::actor audit, std::uint64_t gate,
                                  std::chrono::milliseconds interval
                                  = std::chrono::milliseconds{1000});

/// Audits backend_stop, stops the sink and waits for it.
void stop_safety(caf::actor_system& sys, safety_parts& parts);

} // namespace exo
