#pragma once

/// The wire contract of access control. Client-originated device operations
/// carry a bearer token (see core/access/token.hpp) as their last element;
/// the device actor checks it against the node's shared access policy.
///
///   client -- (allocate_atom, bytes, token) --> device -> handle
///   client -- (free_atom, h, token) --> device
///   client -- (compute_atom, kernel_call, token) --> device
///   client -- (sync_atom, token) --> device
///   client -- (info_atom, token) --> device
///   console -- (console_atom, "dev", "sync DEVICE auth=TOKEN" ...) --> dev
///              service of that node, which sends the variants above
///   console -- (console_atom, "token", "issue ..."|"revoke ..."|"limit ..."
///              |"limits ..."|"check ...") --> access service; revocations
///              and limits reach live peers by broadcast
///   access service -- (service_atom, peer, "token", (token_atom, node,
///              list)) --> gate --> the peer's access service -> the
///              entries the sender lacks (std::string): revocation
///              catch-up, see core/access/revocation_sync.hpp

#include "messages/atoms.hpp"

namespace exo {

using token_atom = caf::atom_constant<caf::atom("token")>;

} // namespace exo
