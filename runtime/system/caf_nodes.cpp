#include "runtime/system/caf_nodes.hpp"

#include <caf/actor_system.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/send.hpp>

#include <future>
#include <memory>

namespace exo::tls {

std::optional<remote_node_counts>
forget_departed_nodes(caf::actor_system& sys, std::chrono::milliseconds wait) {
  auto& mm = sys.middleman();
  // The middleman made its BASP broker as it started: a lookup, no spawn.
  auto broker = mm.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  if (!broker)
    return std::nullopt;
  auto done = std::make_shared<std::promise<remote_node_counts>>();
  auto result = done->get_future();
  // The handle keeps the broker's object alive until the task has run.
  mm.backend().dispatch([broker, done] {
    auto* b = static_cast<caf::io::basp_broker*>(
      caf::actor_cast<caf::abstract_actor*>(broker));
    remote_node_counts n;
    if (!b->getf(caf::abstract_actor::is_terminated_flag)) {
      auto& servers = b->spawn_servers;
      for (auto it = servers.begin(); it != servers.end();) {
        if (b->instance.tbl().lookup(it->first)) {
          ++it;
          continue;
        }
        // Waiting for a node that is gone: it would wait 5 minutes.
        caf::anon_send_exit(it->second, caf::exit_reason::user_shutdown);
        it = servers.erase(it);
        ++n.forgotten;
      }
      n.known = servers.size() + n.forgotten;
    }
    done->set_value(n);
  });
  if (wait.count() <= 0
      || result.wait_for(wait) != std::future_status::ready)
    return std::nullopt;
  return result.get();
}

} // namespace exo::tls
