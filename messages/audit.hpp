#pragma once

/// The wire contract of the audit sink: any local actor sends it events.
///
///   any actor -- (audit_atom, audit_entry) --> audit sink   (no reply)
///   device    -- (audit_atom, std::vector<audit_entry>) --> sink (no reply;
///                held-back compute events, each with its time_us)
///   console   -- (console_atom, "audit", "query ..."|"verify") --> sink
///
/// Signed checkpoints (core/audit/checkpoint.hpp) between the audit services
/// of the nodes, through the gates:
///   service -- (broadcast_atom, "audit", (audit_atom, witness_atom,
///              audit_checkpoint)) --> gate --> every peer's service
///              -> ok (the peer verifies it and keeps the latest per node)
///   service -- (service_atom, peer, "audit", (audit_atom, witness_atom,
///              std::string node)) --> gate --> peer's service
///              -> audit_checkpoint (what the peer witnessed of `node`;
///              an empty line when nothing)
/// and inside a node:
///   service -- (audit_atom, checkpoint_atom) --> sink -> std::string
///              (the latest own checkpoint line, "" when none)
///   service -- (audit_atom, verify_atom, std::vector<std::string> lines,
///              std::vector<std::string> notes) --> sink -> console_reply
///              (the chain checked against the own checkpoints and the
///              peers' `lines`; `notes` name peers that gave none)

#include "messages/atoms.hpp"
#include "messages/wire_real.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace exo {

using audit_atom = caf::atom_constant<caf::atom("audit")>;
using checkpoint_atom = caf::atom_constant<caf::atom("checkpoint")>;
using witness_atom = caf::atom_constant<caf::atom("witness")>;

/// One audit event as a message. `type` and `level` are the values of
/// exo::audit::event_type and exo::audit::severity (core/audit/event.hpp);
/// the sink drops entries with values it does not know.
struct audit_entry {
  std::uint8_t type = 0;
  std::uint8_t level = 1;
  std::string principal;
  std::map<std::string, std::string> details;
  std::int64_t time_us = 0; ///< 0: when the sink receives it
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, audit_entry& x) {
  return wire(f, caf::meta::type_name("exo.audit_entry"), x.type, x.level,
              x.principal, x.details, x.time_us);
}

/// A signed audit checkpoint as its JSON line (core/audit/checkpoint.hpp:
/// to_line / read_checkpoint). Untrusted when it comes from a peer: the
/// receiver bounds its size and checks every field and the signature.
struct audit_checkpoint {
  std::string line;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, audit_checkpoint& x) {
  return wire(f, caf::meta::type_name("exo.audit_checkpoint"), x.line);
}

} // namespace exo
