#include "actors/audit/audit_service.hpp"

#include "actors/audit/audit_actor.hpp"
#include "core/console/commands.hpp"
#include "messages/audit.hpp"
#include "messages/cluster.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <vector>

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
  /// The own checkpoint last sent to the peers, and ticks since then.
  std::string sent;
  int since_sent = 0;
};

using service_ptr = caf::stateful_actor<audit_service_state>*;

/// Offers the node's latest checkpoint to every peer when it is new, and
/// again every 10 ticks (for peers that joined or restarted since).
void offer_checkpoint(service_ptr self) {
  auto& st = self->state;
  if (!st.gate)
    return;
  self->request(st.sink, std::chrono::seconds(5), audit_atom::value,
                checkpoint_atom::value)
    .then(
      [self](std::string& line) {
        auto& st = self->state;
        ++st.since_sent;
        if (line.empty() || (line == st.sent && st.since_sent < 10))
          return;
        st.sent = line;
        st.since_sent = 0;
        self
          ->request(st.gate, std::chrono::seconds(5), broadcast_atom::value,
                    std::string{"audit"},
                    caf::make_message(audit_atom::value, witness_atom::value,
                                      audit_checkpoint{std::move(line)}))
          .then([](std::uint64_t) {}, [](caf::error&) {});
      },
      [](caf::error&) {});
}

/// `audit verify`: asks every other member for its witness of this node
/// (a member that is down or does not answer is named, not fatal), then
/// has the sink check the log against those and its own checkpoints.
caf::response_promise verify_with_peers(service_ptr self) {
  auto& st = self->state;
  struct gathered {
    std::vector<std::string> lines;
    std::vector<std::string> notes;
    std::size_t pending = 0;
    caf::response_promise rp;
  };
  auto g = std::make_shared<gathered>();
  g->rp = self->make_response_promise();
  auto check_now = [self, g] {
    auto rp = g->rp;
    self
      ->request(self->state.sink, std::chrono::seconds(60), audit_atom::value,
                verify_atom::value, g->lines, g->notes)
      .then([rp](console_reply& r) mutable { rp.deliver(std::move(r)); },
            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  };
  if (!st.gate) {
    check_now();
    return g->rp;
  }
  self
    ->request(st.gate, std::chrono::seconds(5), console_atom::value,
              std::string{"nodes"}, std::string{})
    .then(
      [self, g, check_now](console_reply& r) {
        auto& st = self->state;
        std::vector<std::string> ask;
        for (auto& m : r.nodes.members) {
          if (m.name == st.node)
            continue;
          if (m.status != member_status::alive)
            g->notes.push_back("peer " + m.name + " is "
                               + to_string(m.status)
                               + ": its witness was not asked");
          else
            ask.push_back(m.name);
        }
        if (ask.empty()) {
          check_now();
          return;
        }
        g->pending = ask.size();
        for (auto& peer : ask) {
          auto done = [g, check_now] {
            if (--g->pending == 0)
              check_now();
          };
          self
            ->request(st.gate, std::chrono::seconds(5), service_atom::value,
                      peer, std::string{"audit"},
                      caf::make_message(audit_atom::value,
                                        witness_atom::value, st.node))
            .then(
              [g, peer, done](audit_checkpoint& cp) {
                if (cp.line.empty())
                  g->notes.push_back("peer " + peer
                                     + " has witnessed no checkpoint of "
                                       "this node yet");
                else
                  g->lines.push_back(std::move(cp.line));
                done();
              },
              [self, g, peer, done](caf::error& e) {
                g->notes.push_back("peer " + peer + " did not answer: "
                                   + self->system().render(e));
                done();
              });
        }
      },
      [g, check_now](caf::error&) {
        g->notes.push_back("the member list is unavailable: no peer asked");
        check_now();
      });
  return g->rp;
}

caf::behavior audit_service(caf::stateful_actor<audit_service_state>* self,
                            caf::actor sink, caf::actor gate,
                            std::string node) {
  self->state.sink = std::move(sink);
  self->state.gate = std::move(gate);
  self->state.node = std::move(node);
  self->send(self, tick_atom::value);
  return {
    [self](inspect_atom) {
      auto& st = self->state;
      actor_snapshot s;
      s.name = "audit";
      s.kind = "audit";
      s.node = st.node;
      s.summary = std::to_string(st.seen.size()) + " members' checkpoints";
      s.fields = {{"members", std::to_string(st.seen.size())},
                  {"ticks_since_checkpoint_sent",
                   std::to_string(st.since_sent)}};
      return s;
    },
    [self](console_atom a, std::string& cmd,
           std::string& arg) -> caf::result<caf::message> {
      bool is_verify = false;
      try {
        auto p = console::parse_command("audit", arg);
        is_verify = p.sub == "verify";
      } catch (const console::command_error&) {
        // The sink answers with the error.
      }
      if (is_verify)
        return verify_with_peers(self);
      return self->delegate(self->state.sink, a, std::move(cmd),
                            std::move(arg));
    },
    // Peers' audit services, through the gates (messages/audit.hpp).
    [self](audit_atom a, witness_atom w, audit_checkpoint& cp) {
      return self->delegate(self->state.sink, a, w, std::move(cp));
    },
    [self](audit_atom a, witness_atom w, std::string& node) {
      return self->delegate(self->state.sink, a, w, std::move(node));
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
      offer_checkpoint(self);
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
