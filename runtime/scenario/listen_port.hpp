#pragma once

/// Ports for listeners that must keep their address across a restart (a
/// scenario's node that is killed and started again, a test that restarts
/// a node where its peers look for it).
///
/// A listener given port 0 gets one from the kernel's ephemeral range, and
/// once it dies the kernel may hand that port to any other process on the
/// machine (another test's node listening on port 0, any outgoing
/// connection): the restart then cannot listen, and the peers that redial
/// the old address reach a stranger. A port outside that range is never
/// handed out by the kernel; only a process that names it can take it.

#include <cstdint>
#include <string>
#include <utility>

namespace exo::scenario {

/// The kernel's ephemeral range, "LOW HIGH" as in
/// /proc/sys/net/ipv4/ip_local_port_range; {32768, 60999} (Linux's
/// default) when `text` does not hold two ports LOW <= HIGH.
std::pair<std::uint16_t, std::uint16_t>
parse_ephemeral_range(const std::string& text);

/// parse_ephemeral_range of this machine's file.
std::pair<std::uint16_t, std::uint16_t> ephemeral_range();

/// A TCP port on the IPv4 address `host` that is free now (a test socket
/// with SO_REUSEADDR, as listeners set it, binds it) and lies outside the
/// ephemeral range: drawn at random from 10000-65535 less that range.
/// Throws std::runtime_error naming `host` when no such port binds in 200
/// draws (or `host` is not an IPv4 address).
std::uint16_t stable_listen_port(const std::string& host);

} // namespace exo::scenario
