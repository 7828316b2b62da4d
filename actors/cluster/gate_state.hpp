#pragma once

/// The gate's state and the functions its files share. Internal to
/// actors/cluster: the gate is one actor whose handlers live in files by
/// concern:
///   gate_actor.cpp    assembly, sender checks, service routing
///   gate_join.cpp     joining and admission (the TLS-backed handshake)
///   gate_health.cpp   heartbeats, gossip, failure detection, link
///                     measurement
///   gate_leave.cpp    leaving the cluster
///   gate_console.cpp  console commands and inspection (checked against
///                     the access policy)

#include "core/text/line.hpp"
#include "actors/cluster/gate_actor.hpp"
#include "core/lan/beacon.hpp"
#include "actors/cluster/member_table.hpp"
#include "core/audit/event.hpp"
#include "core/tls/challenge.hpp"
#include "messages/cluster.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace exo::cluster::detail {

using steady = std::chrono::steady_clock;

/// A join we answered and whose proof we wait for.
struct pending_join {
  tls::nonce nonce;
  std::string claimed;
  bool client = false;
  steady::time_point deadline;
};

/// A message for a service of a member that gossip says is alive but that
/// this gate has no connection to yet (the connection is on its way):
/// delivered once it is there, refused at the deadline.
struct held_service_message {
  std::string node;
  std::string service;
  caf::message msg;
  caf::response_promise rp;
  steady::time_point deadline;
};

/// A peer this gate dropped (declared dead, or replaced by a new
/// connection under its name): its node may still think it is connected to
/// us and send to us before it learns otherwise.
struct former_peer {
  std::string name;
  caf::actor gate;
  steady::time_point hinted{}; ///< when it was last told to join again
};

/// A service message from a former peer's node: held until that node has
/// joined again (it was told to), refused at the deadline.
struct held_inbound {
  caf::node_id node;
  std::string service;
  caf::message msg;
  caf::response_promise rp;
  steady::time_point deadline;
};

/// Backoff of one address we try to connect to.
struct attempt {
  steady::time_point next_try{};
  std::chrono::milliseconds delay{200};
  bool in_flight = false;
  bool is_self = false;
  std::string peer; ///< the member this address led to, once joined
};

struct gate_state {
  static inline const char* name = "exo.gate";

  gate_config cfg;
  /// Zero-config discovery (cfg.discovery): the multicast socket, when it
  /// runs, and when the next hello goes out.
  std::unique_ptr<lan::beacon> beacon;
  steady::time_point next_hello;
  std::uint64_t hellos_refused = 0;
  /// "GOSSIPER/MEMBER" of death verdicts already logged as discounted.
  std::set<std::string> discounted;
  std::unique_ptr<member_table> table;
  std::map<std::string, caf::actor> peers;           // name -> remote gate
  std::map<caf::actor_addr, std::string> peer_names; // sender -> name
  std::map<caf::actor_addr, std::string> clients;    // sender -> client name
  std::map<caf::actor_addr, pending_join> pending;
  std::map<std::string, attempt> attempts;     // "host:port" -> backoff
  std::map<std::string, link_info> links;      // to -> link
  std::map<std::string, std::string> suspects; // "host:port" -> name
  std::map<std::string, caf::actor> services;  // console command -> handler
  caf::actor topology;
  /// Local actors told of every member event (subscribe_atom), and the view
  /// they were last told about.
  std::vector<caf::actor> watchers;
  member_view watched;
  std::vector<held_service_message> held;
  /// Peers dropped, by node (at most max_former), and what their nodes
  /// sent meanwhile (at most max_held_inbound).
  std::map<caf::node_id, former_peer> former;
  std::vector<held_inbound> inbound;
  /// Nodes we run a join handshake with as the dialer (how many at once):
  /// the other side admits us before we admit it, and what it sends then
  /// may come over another connection ahead of its proof's answer.
  std::map<caf::node_id, int> joining;
  static constexpr std::size_t max_former = 256;
  static constexpr std::size_t max_held_inbound = 256;
  std::uint64_t ticks = 0;
  steady::time_point last_tick; ///< when the last heartbeat tick ran
  std::uint64_t joins_accepted = 0;
  std::uint64_t joins_refused = 0;
  std::uint64_t gossip_in = 0;
  std::string last_refusal;

  void log(const std::string& line) const {
    exo::text::line(std::cout) << "exo-node " << cfg.name << ": " << line << std::endl;
  }
};

using self_ptr = caf::stateful_actor<gate_state>*;

// -- gate_actor.cpp -----------------------------------------------------------

/// This node's own entry of the member table.
member_info self_info(self_ptr self);

/// Whether the current sender is an actor of this node.
bool is_local(self_ptr self);

/// The sender is an authenticated peer gate, or another actor (e.g. a
/// topology actor) of a node whose gate proved its name to us.
bool is_peer(self_ptr self);

/// The sender is a console client that completed the join handshake.
bool is_client(self_ptr self);

/// A client whose typed requests (devices, actors, inspect) are refused
/// because this node wants a token with every client request, and those
/// carry none.
bool tokenless_client(self_ptr self);

/// Tells the watchers what changed in the member table since last time.
void notify_watchers(self_ptr self);
/// Delivers the held service messages whose node is connected now, and
/// refuses those past their deadline (or whose node is no longer alive).
void release_held(self_ptr self);
/// A message from a node whose gate was our peer and was dropped: tells
/// that gate (once a connect timeout) to join again, since its node still
/// sends to us as to a member. Returns whether the sender is such a node.
bool hint_former(self_ptr self);
/// Whether a join handshake with `node` is under way, either side.
bool joining_with(self_ptr self, const caf::node_id& node);
/// Delivers the held inbound service messages of `node` (which has just
/// joined as member `name`), or, with `node` null, refuses those past their
/// deadline.
void release_inbound(self_ptr self, const caf::node_id* node,
                     const std::string& name = {});
/// Sends `ev` to the node's audit sink (nothing without one).
void send_audit(self_ptr self, const audit::event& ev, std::string principal);

/// The error for a sender that has not completed the join handshake.
caf::error denied();

// -- gate_join.cpp ------------------------------------------------------------

/// Forgets the connection to `name` (if any).
void drop_peer(self_ptr self, const std::string& name);

/// Connects to host:port and runs the join handshake, with backoff.
void try_connect(self_ptr self, const std::string& host, std::uint16_t port);

/// Connects to every seed and every alive member we have no link to.
void connect_missing(self_ptr self);

/// Runs the join handshake again over the connection to peer `name`: after
/// this node was paused, or when the peer says it dropped us. The peer
/// readmits us (a member it declared dead comes back with a larger
/// incarnation); no answer within the connect timeout makes it dead.
void rejoin_peer(self_ptr self, const std::string& name);

/// Dials the members that `v` (a peer's gossip) lists alive at an
/// incarnation at least the one we declared dead: our verdict was about
/// our own link, or we were paused, and neither side would dial otherwise.
void redial_refuted(self_ptr self, const member_view& v);

/// join and prove: admission of nodes and console clients.
caf::message_handler join_handlers(self_ptr self);

// -- gate_health.cpp ----------------------------------------------------------

/// Takes out of `v` (gossip or a join reply from `from`) the death verdicts
/// our own connection and heartbeats contradict (member_table::
/// discount_hearsay), logging each once.
void discount_hearsay(self_ptr self, member_view& v, const std::string& from,
                      steady::time_point now);

/// Declares `name` dead for `reason`.
void mark_dead(self_ptr self, const std::string& name,
               const std::string& reason);

/// Asks the topology actor to measure every peer; calls `then` with all
/// links once all are done (a failed measurement is left out). `fresh`
/// measures every bandwidth now instead of reusing a recent figure.
void measure_all(self_ptr self,
                 std::function<void(std::vector<link_info>)> then,
                 bool fresh = false);

/// Why a service message from peer node `sender` is refused, or "": a job
/// replica or its progress (replicate_atom) whose origin is not the sender,
/// since a node may only replicate its own jobs -- else a peer could plant
/// a job in another node's name on the backup and have it taken over.
std::string peer_service_refusal(const caf::message& m,
                                 const std::string& sender);

/// The member whose node sent the current message ("" when none is known).
std::string sender_member(self_ptr self);

/// Zero-config discovery: opens the beacon once the gate is published
/// (logs why not when it cannot), and on every tick sends the hello when
/// due and connects to the verified nodes of our cluster it hears.
void start_discovery(self_ptr self);
void discovery_tick(self_ptr self);

/// A monitored peer or client went away.
void on_down(self_ptr self, caf::down_msg& dm);

/// tick, measure and gossip: heartbeats and failure detection.
caf::message_handler health_handlers(self_ptr self);

// -- gate_leave.cpp -----------------------------------------------------------

/// The console's `leave`: tells every peer we leave; `reply` once all
/// answered or timed out.
caf::result<console_reply> leave_cluster(self_ptr self, console_reply reply);

/// A peer that leaves.
caf::message_handler leave_handlers(self_ptr self);

// -- gate_console.cpp ---------------------------------------------------------

/// devices, actors, inspect and console: what clients and peers may ask.
caf::message_handler console_handlers(self_ptr self);

} // namespace exo::cluster::detail
