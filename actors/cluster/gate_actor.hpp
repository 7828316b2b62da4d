#pragma once

/// The gate: a node's published actor and its membership. It is the only
/// actor reachable over TLS. It runs the join handshake (both ends prove
/// the certificate name they hold a key for), keeps the member view and
/// spreads it by gossip with every heartbeat, detects failures (remote
/// monitors for a fast verdict on a dropped connection, heartbeat silence
/// as the backstop), chooses the coordinator deterministically, connects to
/// seeds and to every member it learns of (asynchronously, with timeouts and
/// backoff), and answers the console for the whole cluster.
///
/// Nothing but join/prove is accepted from a sender that has not proven
/// its name; everything a peer sends is validated against size limits.

#include "core/access/shared_policy.hpp"
#include "messages/cluster.hpp"
#include "core/config/node_config.hpp"

#include <caf/fwd.hpp>
#include <caf/actor.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace exo::tls {
class private_key;
class trust_store;
} // namespace exo::tls

namespace exo::cluster {

struct gate_config {
  std::string name;
  std::string host;         ///< advertised address
  std::uint16_t port = 0;   ///< advertised port (set after publishing)
  std::uint16_t bulk_port = 0; ///< the node's bulk channel (0: none)
  std::vector<config::peer_address> seeds;
  std::chrono::milliseconds heartbeat{250};
  std::chrono::milliseconds failure_timeout{1500};
  std::chrono::milliseconds connect_timeout{2000};
  /// member_table::forget_departed's retention.
  std::chrono::milliseconds forget_departed{600000};
  std::chrono::milliseconds measure_interval{5000};
  std::uint64_t incarnation = 0;
  std::string cert_pem;                      ///< our certificate
  std::shared_ptr<const tls::private_key> key;
  std::shared_ptr<const tls::trust_store> ca;
  caf::actor node;      ///< local node actor (devices)
  caf::actor directory; ///< local directory (actors, inspect)
  /// Safety (issue 6): clients' console commands are checked against this
  /// policy (core/access/console_rule.hpp); refusals and client reads
  /// (device_list, monitoring_read) go to the audit sink. Both optional.
  std::shared_ptr<access::shared_policy> access;
  caf::actor audit;
  /// Refuse a client's console command that carries no auth=TOKEN (and
  /// the typed devices/actors/inspect requests of clients).
  bool console_requires_token = false;
  /// Zero-config discovery: once published, the gate announces a signed
  /// hello (core/tls/hello.hpp) on this multicast group every interval and
  /// connects to every node of its cluster (`cluster_id`, its CA's
  /// SHA-256) whose hello it verifies. Off when disabled or when `host` is
  /// not a concrete non-loopback IPv4 address.
  config::discovery_section discovery{false, {}, 0, {}};
  std::string cluster_id;
};

/// Spawns the gate. Send it (caf::publish_atom, std::uint16_t port) once it
/// is published so it advertises the right port.
caf::actor spawn_gate(caf::actor_system& sys, gate_config cfg);

/// Console commands the gate answers, from authenticated clients and local
/// actors, as (console_atom, command, argument):
///   "nodes"       -> member_view
///   "devices"     -> std::vector<device_info> of every alive member
///   "links"       -> std::vector<link_info> of every member
///   "actors"      -> std::vector<actor_snapshot> (argument: node, "" = ours)
///   "inspect"     -> actor_snapshot (argument: "NODE/NAME" or "NAME")
///   "coordinator" -> std::string
///   "measure"     -> std::vector<link_info> after measuring now
///   "leave"       -> ok once every peer was told we leave
///
/// Every console command of a client is checked first, in one place
/// (access::console_permission / console_rule): with `auth=TOKEN` in the
/// argument the token must hold the command's permission (the word is
/// taken out before the command runs; "dev" and "token" get it unchanged
/// and check it themselves); without one the command is served only when
/// `console_requires_token` is off. A refusal is an access_denied error
/// and an access_denied audit event. Commands from peers and from actors
/// of the node are not checked (they are the cluster's own traffic).
///
/// Services extend the console without touching the gate: a local actor
/// sends the gate (register_atom, std::string command, caf::actor handler)
/// and from then on the gate delegates (console_atom, command, argument)
/// for that command to the handler, which replies with a console_reply
/// (text for people, json for scripts). "services" lists them.
///
/// Services reach their peers on other nodes through the gate: a local
/// actor sends (broadcast_atom, command, argument) and the gate sends
/// (console_atom, command, argument) to every live peer gate, which
/// delegates it to its own service; the reply is the number of peers that
/// answered (std::uint64_t). Peer gates accept console commands from
/// authenticated peers, so a service sees cluster-internal requests too.
/// Typed: (broadcast_atom, std::string service, caf::message m) sends
/// (service_atom, service, m) to every live peer gate, which delegates `m`
/// to its service of that name, which answers ok; the reply counts the
/// peers that did (the thermal reports travel so).
///
/// Typed requests between services of different nodes go through
///   (service_atom, std::string node, std::string service, caf::message m)
/// sent to the local gate: it forwards (service_atom, service, m) to the
/// gate of `node` (or handles it itself when `node` is ours), which
/// delegates `m` to its service registered under that name, and the reply
/// (any registered type, actor handles included) comes back to the
/// requester. Services register with (register_atom, name, handler) like
/// console commands.

} // namespace exo::cluster
