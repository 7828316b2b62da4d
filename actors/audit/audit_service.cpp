#include "actors/audit/audit_service.hpp"

#include "actors/audit/audit_actor.hpp"
#include "messages/audit.hpp"
#include "messages/cluster.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <map>

namespace exo {

namespace {

void send_event(const caf::actor& sink, audit::event_type type,
                std::map<std::string, std::string> details) {
  audit::event ev;
  ev.type = type;
  ev.details = std::move(details);
  audit::emit(sink, ev);
}

struct audit_service_state {
  static inline const char* name = "exo.audit_service";
  caf::actor sink;
  caf::actor gate;
  std::string node;
  std::map<std::string, member_status> seen;
};

caf::behavior audit_service(caf::stateful_actor<audit_service_state>* self,
                            caf::actor sink, caf::actor gate,
                            std::string node) {
  self->state.sink = std::move(sink);
  self->state.gate = std::move(gate);
  self->state.node = std::move(node);
  self->send(self, tick_atom::value);
  return {
    [self](console_atom a, std::string& cmd, std::string& arg) {
      return self->delegate(self->state.sink, a, std::move(cmd),
                            std::move(arg));
    },
    // Member joins and leaves, from the gate's member view (polled).
    [self](tick_atom) {
      auto& st = self->state;
      self
        ->request(st.gate, std::chrono::seconds(2), console_atom::value,
                  std::string{"nodes"}, std::string{})
        .then(
          [self](console_reply& r) {
            auto& st = self->state;
            for (auto& m : r.nodes.members) {
              if (m.name == st.node)
                continue;
              auto it = st.seen.find(m.name);
              bool was_alive = it != st.seen.end()
                               && it->second == member_status::alive;
              bool alive = m.status == member_status::alive;
              if (alive != was_alive && (alive || it != st.seen.end()))
                send_event(st.sink,
                           alive ? audit::event_type::member_joined
                                 : audit::event_type::member_left,
                           {{"member", m.name},
                            {"address",
                             m.host + ":" + std::to_string(m.port)},
                            {"status", to_string(m.status)},
                            {"reason", m.status_reason}});
              st.seen[m.name] = m.status;
            }
          },
          [](caf::error&) {});
      self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
    },
  };
}

} // namespace

service spawn_audit_service(const service_context& ctx) {
  auto h = ctx.sys->spawn(audit_service, ctx.audit, ctx.gate,
                          ctx.cfg->node.name);
  return {"audit", "audit", h, {"audit"}};
}

} // namespace exo
