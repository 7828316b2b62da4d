#pragma once

// What CAF 0.17's BASP broker keeps of the nodes it has seen. Part of
// exo_tls_caf (CAF 0.17 specifics of every exo actor system).
//
// Why: for every node it connects to, the broker spawns a helper that asks
// the node's spawn server for its configuration server and keeps a handle
// to it in basp_broker::spawn_servers, keyed by the node. Nothing erases
// that entry when the node goes (purge_state drops its proxies only), so
// the helper's actor stays allocated for the life of the process: about
// 1.1 KB for each peer process ever connected. Every exo-console run is a
// new CAF node: 800 consoles left 864 KB in a node (heaptrack), and a
// 30-minute soak's node grew steadily by it. Nothing in exo uses spawn
// servers (it registers no actor types to spawn remotely).

#include <chrono>
#include <cstddef>
#include <optional>

namespace caf {
class actor_system;
} // namespace caf

namespace exo::tls {

struct remote_node_counts {
  std::size_t known = 0;     ///< spawn-server handles kept (nodes seen)
  std::size_t forgotten = 0; ///< of them, dropped now: no route left
};

/// Drops the broker's handles for nodes it has no route to any more, and
/// stops those helpers still waiting for an answer from them. Runs on the
/// middleman's multiplexer thread, where the broker runs, and waits for it
/// at most `wait`; nullopt when it did not run within that (zero: never
/// waits). A system without a BASP broker yet gets one (CAF's named
/// broker), as its first connection would.
std::optional<remote_node_counts>
forget_departed_nodes(caf::actor_system& sys, std::chrono::milliseconds wait);

} // namespace exo::tls
