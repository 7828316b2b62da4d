// Leaving: the console's `leave` tells every peer, and a peer that leaves
// is marked left (not dead) in the member table.

#include "actors/cluster/gate_state.hpp"

#include "messages/errors.hpp"

namespace exo::cluster::detail {

using namespace std::chrono;

caf::result<console_reply> leave_cluster(self_ptr self, console_reply reply) {
  auto& st = self->state;
  reply.text = "ok";
  auto left = std::make_shared<std::size_t>(st.peers.size());
  if (*left == 0)
    return reply;
  auto rp = self->make_response_promise();
  for (auto& [name, peer] : st.peers)
    self->request(peer, milliseconds(500), leave_atom::value)
        .then(
            [rp, left, reply](caf::atom_value) mutable {
              if (--*left == 0)
                rp.deliver(reply);
            },
            [rp, left, reply](caf::error&) mutable {
              if (--*left == 0)
                rp.deliver(reply);
            });
  return rp;
}

caf::message_handler leave_handlers(self_ptr self) {
  return {
      [self](leave_atom) -> caf::result<caf::atom_value> {
        auto& st = self->state;
        if (!is_peer(self))
          return denied();
        auto name = st.peer_names[caf::actor_cast<caf::actor_addr>(
            self->current_sender())];
        drop_peer(self, name);
        // It leaves for good: not asked to join again when it still
        // gossips on its way out.
        if (auto s = self->current_sender())
          st.former.erase(s->node());
        if (st.table->mark(name, member_status::left, "left the cluster"))
          st.log("member " + name + " left");
        return caf::ok_atom::value;
      },
  };
}

} // namespace exo::cluster::detail
