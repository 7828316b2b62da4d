#pragma once

/// The wire contract of the cluster: the join handshake, the member view
/// spread by gossip, measured links, and the console's requests.
///
/// Join (both ends prove which certificate name they hold a key for; TLS
/// alone only proves "some certificate of our CA"):
///
///   joiner J                                  responder R (published gate)
///     | --- join(join_hello{J, nonce_J}) ----------> |
///     | <-- join_challenge{R, nonce_R, cert_R,       |  sig_R = sign(key_R,
///     |                    sig_R} ------------------ |    nonce_J, ctx(R, J))
///     | verify sig_R against the CA and R's name     |
///     | --- prove(join_proof{J, cert_J, sig_J,       |  sig_J = sign(key_J,
///     |                      member_info J}) ------> |    nonce_R, ctx(J, R))
///     |                                              | verify, refuse a name
///     | <-- member_view ---------------------------- | that is alive elsewhere
///
/// After that both gates accept gossip (heartbeat + view) from each other.
/// Everything a peer sends is bounded and validated before use.

#include "messages/atoms.hpp"
#include "messages/bounded_bytes.hpp"
#include "messages/device.hpp"
#include "messages/wire_real.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace exo {

using join_atom = caf::atom_constant<caf::atom("join")>;
using prove_atom = caf::atom_constant<caf::atom("prove")>;
using gossip_atom = caf::atom_constant<caf::atom("gossip")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using bulk_atom = caf::atom_constant<caf::atom("bulk")>;
using console_atom = caf::atom_constant<caf::atom("console")>;
using links_atom = caf::atom_constant<caf::atom("links")>;
using members_atom = caf::atom_constant<caf::atom("members")>;
using broadcast_atom = caf::atom_constant<caf::atom("broadcast")>;
using service_atom = caf::atom_constant<caf::atom("service")>;

/// Limits on what a peer may send.
constexpr std::size_t max_members = 256;
constexpr std::size_t max_devices_per_member = 256;
constexpr std::size_t max_links_per_member = 256;
constexpr std::size_t max_name_length = 64;
constexpr std::size_t max_text_length = 1024;

enum class member_status : std::uint8_t { alive, dead, left };

const char* to_string(member_status s) noexcept;

/// One measured link, from one node to another.
struct link_info {
  std::string from;
  std::string to;
  double rtt_p50_us = 0;
  double rtt_p99_us = 0;
  double jitter_us = 0;
  double loss = 0;          ///< fraction of probes lost, 0..1
  double bandwidth_bps = 0; ///< bytes per second
  std::int64_t measured_ns = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, link_info& x) {
  return wire(f, caf::meta::type_name("exo.link_info"), x.from, x.to,
              x.rtt_p50_us, x.rtt_p99_us, x.jitter_us, x.loss, x.bandwidth_bps,
              x.measured_ns);
}

/// One member of the cluster as the view knows it.
struct member_info {
  std::string name;
  std::string host;
  std::uint16_t port = 0;
  std::uint16_t bulk_port = 0;   ///< its bulk channel; 0: none
  std::uint64_t incarnation = 0; ///< grows with every start of the node
  member_status status = member_status::alive;
  std::int64_t join_time_ns = 0;
  std::string status_reason;
  std::vector<device_info> devices;
  std::vector<link_info> links; ///< links measured from this member
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, member_info& x) {
  return wire(f, caf::meta::type_name("exo.member_info"), x.name, x.host,
              x.port, x.bulk_port, x.incarnation, x.status, x.join_time_ns,
              x.status_reason, x.devices, x.links);
}

/// What a gate knows: every member, from the point of view of `from`.
struct member_view {
  std::string from;
  std::vector<member_info> members;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, member_view& x) {
  return wire(f, caf::meta::type_name("exo.member_view"), x.from, x.members);
}

/// What changed about one member, as a gate saw it (member_event).
enum class member_change : std::uint8_t {
  joined,  ///< a member this gate did not know
  status,  ///< a known member's status changed (alive, dead, left)
  removed, ///< a member is no longer in the view
};

const char* to_string(member_change c) noexcept;

/// One change of the cluster's membership. A local actor subscribes with
/// (subscribe_atom, members_atom, listener) to a gate: the reply is the
/// gate's member_view as it stands, and from then on `listener` receives a
/// member_event for each change, in order, until it goes away.
struct member_event {
  member_change change = member_change::joined;
  member_info member;      ///< the member after the change
  member_status previous = member_status::alive; ///< for change == status
  std::string coordinator; ///< the cluster's coordinator after the change
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, member_event& x) {
  return wire(f, caf::meta::type_name("exo.member_event"), x.change,
              x.member, x.previous, x.coordinator);
}

struct join_hello {
  std::string claimed;             ///< the name the joiner claims
  std::vector<std::uint8_t> nonce; ///< 32 bytes for the responder to sign
  bool client = false;             ///< a console/client, not a node
};

/// The largest nonce and signature a peer may send (nonces are 32 bytes,
/// ECDSA P-256 signatures about 72, Ed25519 64; tls::max_signature_size).
constexpr std::size_t max_nonce_bytes = 64;
constexpr std::size_t max_signature_bytes = 1024;

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_hello& x) {
  auto nonce = bounded<max_nonce_bytes>(x.nonce);
  return wire(f, caf::meta::type_name("exo.join_hello"), x.claimed, nonce,
              x.client);
}

struct join_challenge {
  std::string responder;
  std::vector<std::uint8_t> nonce; ///< 32 bytes for the joiner to sign
  std::string cert_pem;            ///< the responder's certificate
  std::vector<std::uint8_t> signature;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_challenge& x) {
  auto nonce = bounded<max_nonce_bytes>(x.nonce);
  auto signature = bounded<max_signature_bytes>(x.signature);
  return wire(f, caf::meta::type_name("exo.join_challenge"), x.responder, nonce,
              x.cert_pem, signature);
}

struct join_proof {
  std::string claimed;
  std::string cert_pem;
  std::vector<std::uint8_t> signature;
  member_info self; ///< ignored for clients
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_proof& x) {
  auto signature = bounded<max_signature_bytes>(x.signature);
  return wire(f, caf::meta::type_name("exo.join_proof"), x.claimed, x.cert_pem,
              signature, x.self);
}

/// The reply to a console command: the part its command fills.
struct console_reply {
  std::string command;
  member_view nodes;
  std::vector<device_info> devices;
  std::vector<link_info> links;
  std::vector<actor_snapshot> actors; ///< one element for "inspect"
  std::string text;                   ///< "coordinator", "leave"; services:
                                      ///< the reply rendered for people
  std::string json;                   ///< services: the reply as JSON
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, console_reply& x) {
  return wire(f, caf::meta::type_name("exo.console_reply"), x.command, x.nodes,
              x.devices, x.links, x.actors, x.text, x.json);
}

} // namespace exo
