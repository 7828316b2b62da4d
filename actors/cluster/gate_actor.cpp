#include "actors/cluster/gate_actor.hpp"

#include "actors/cluster/gate_state.hpp"
#include "actors/topology/topology_actor.hpp"
#include "messages/errors.hpp"
#include "messages/thermal.hpp"
#include "messages/workload.hpp"

#include <algorithm>

namespace exo::cluster::detail {

using namespace std::chrono;

member_info self_info(self_ptr self) {
  auto v = self->state.table->view();
  for (auto& m : v.members)
    if (m.name == self->state.cfg.name)
      return m;
  return {};
}

bool is_local(self_ptr self) {
  auto s = self->current_sender();
  return s && s->node() == self->system().node();
}

bool is_peer(self_ptr self) {
  auto s = self->current_sender();
  if (!s)
    return false;
  if (self->state.peer_names.count(caf::actor_cast<caf::actor_addr>(s)))
    return true;
  for (auto& [name, peer] : self->state.peers)
    if (peer.node() == s->node())
      return true;
  return false;
}

bool is_client(self_ptr self) {
  auto s = self->current_sender();
  return s && self->state.clients.count(caf::actor_cast<caf::actor_addr>(s));
}

bool tokenless_client(self_ptr self) {
  return self->state.cfg.console_requires_token && is_client(self) &&
         !is_local(self) && !is_peer(self);
}

std::string sender_member(self_ptr self) {
  auto s = self->current_sender();
  if (!s)
    return {};
  auto& st = self->state;
  if (auto it = st.peer_names.find(caf::actor_cast<caf::actor_addr>(s));
      it != st.peer_names.end())
    return it->second;
  for (auto& [name, peer] : st.peers)
    if (peer.node() == s->node())
      return name;
  return {};
}

std::string peer_service_refusal(const caf::message& m,
                                 const std::string& sender) {
  std::string origin;
  if (m.match_elements<handoff_atom, job_handoff>()) {
    origin = m.get_as<job_handoff>(1).origin;
    if (origin == sender && !sender.empty())
      return {};
    return "a job handoff of \"" + origin + "\" sent by \"" + sender
           + "\": a node hands over only its own jobs";
  }
  if (m.match_elements<replicate_atom, job_replica>())
    origin = m.get_as<job_replica>(1).origin;
  else if (m.match_elements<replicate_atom, job_progress>())
    origin = m.get_as<job_progress>(1).origin;
  else if (m.match_elements<thermal_atom, thermal_status>()) {
    origin = m.get_as<thermal_status>(1).node;
    if (origin == sender && !sender.empty())
      return {};
    return "a thermal pause of a device of \"" + origin + "\" sent by \""
           + sender + "\": a node reports only its own devices";
  } else
    return {};
  if (origin == sender && !sender.empty())
    return {};
  return "a job replica of \"" + origin + "\" sent by \"" + sender
         + "\": a node replicates only its own jobs";
}

caf::error denied() {
  return make_exo_error(exo_errc::access_denied,
                        "the sender has not completed the join handshake");
}

void notify_watchers(self_ptr self) {
  auto& st = self->state;
  if (!st.table || st.watchers.empty())
    return;
  auto now = st.table->view();
  auto events = member_changes(st.watched, now, st.table->coordinator());
  st.watched = std::move(now);
  for (auto& e : events)
    for (auto& w : st.watchers)
      self->send(w, e);
}

void release_held(self_ptr self) {
  auto& st = self->state;
  if (st.held.empty())
    return;
  auto now = steady::now();
  std::vector<held_service_message> keep;
  for (auto& h : st.held) {
    auto peer = st.peers.find(h.node);
    if (peer != st.peers.end()) {
      h.rp.delegate(peer->second, service_atom::value, std::move(h.service),
                    std::move(h.msg));
    } else if (now >= h.deadline || !st.table || !st.table->alive(h.node)) {
      h.rp.deliver(make_exo_error(exo_errc::invalid_argument,
                                  "no live node named \"" + h.node
                                    + "\" (not connected within "
                                    + std::to_string(
                                      2 * st.cfg.connect_timeout.count())
                                    + " ms)"));
    } else {
      keep.push_back(std::move(h));
    }
  }
  st.held = std::move(keep);
}

bool hint_former(self_ptr self) {
  auto& st = self->state;
  auto s = self->current_sender();
  if (!s)
    return false;
  auto it = st.former.find(s->node());
  if (it == st.former.end())
    return false;
  auto now = steady::now();
  auto& f = it->second;
  if (f.hinted == steady::time_point{}
      || now - f.hinted >= st.cfg.connect_timeout) {
    f.hinted = now;
    st.log("asked " + f.name
           + " to join again: its node sends to us as to a member, but "
             "we dropped it");
    self->send(f.gate, join_atom::value);
  }
  return true;
}

bool joining_with(self_ptr self, const caf::node_id& node) {
  auto& st = self->state;
  if (st.joining.count(node))
    return true;
  // (A console client's join holds nothing: clients send no services.)
  return std::any_of(st.pending.begin(), st.pending.end(),
                     [&](const auto& p) {
                       return !p.second.client && p.first.node() == node;
                     });
}

void release_inbound(self_ptr self, const caf::node_id* node,
                     const std::string& name) {
  auto& st = self->state;
  if (st.inbound.empty())
    return;
  auto now = steady::now();
  std::vector<held_inbound> keep;
  for (auto& h : st.inbound) {
    if (node != nullptr && h.node == *node) {
      auto why = peer_service_refusal(h.msg, name);
      auto svc = st.services.find(h.service);
      if (!why.empty()) {
        st.log("refused: " + why);
        h.rp.deliver(make_exo_error(exo_errc::access_denied, why));
      } else if (svc == st.services.end()) {
        h.rp.deliver(make_exo_error(exo_errc::invalid_argument,
                                    "no service "" + h.service + "" on "
                                      + st.cfg.name));
      } else {
        h.rp.delegate(svc->second, std::move(h.msg));
      }
    } else if (now >= h.deadline) {
      auto f = st.former.find(h.node);
      h.rp.deliver(make_exo_error(
        exo_errc::access_denied,
        "the sender has not completed the join handshake ("
          + (f == st.former.end() ? std::string{"its node"} : f->second.name)
          + " did not join within "
          + std::to_string(2 * st.cfg.connect_timeout.count()) + " ms)"));
    } else {
      keep.push_back(std::move(h));
    }
  }
  st.inbound = std::move(keep);
}

namespace {

std::int64_t wall_ns() {
  return duration_cast<nanoseconds>(system_clock::now().time_since_epoch())
      .count();
}

/// Sends `m` to every peer gate; the reply is how many answered with a
/// `Reply`.
template<class Reply>
caf::result<std::uint64_t> broadcast(self_ptr self, const caf::message& m) {
  auto& st = self->state;
  if (st.peers.empty())
    return std::uint64_t{0};
  struct tally {
    std::uint64_t answered = 0;
    std::size_t pending = 0;
    caf::response_promise rp;
    void one(bool ok) {
      answered += ok ? 1 : 0;
      if (--pending == 0)
        rp.deliver(answered);
    }
  };
  auto t = std::make_shared<tally>();
  t->pending = st.peers.size();
  t->rp = self->make_response_promise();
  for (auto& [name, peer] : st.peers)
    self->request(peer, seconds(2), m)
        .then([t](Reply&) { t->one(true); },
              [t](caf::error&) { t->one(false); });
  return t->rp;
}

caf::message_handler core_handlers(self_ptr self) {
  return {
      [self](subscribe_atom, members_atom,
             caf::actor& listener) -> caf::result<member_view> {
        // Local actors only: a remote client may not have the gate push
        // messages at an actor of its choice.
        if (!is_local(self))
          return denied();
        if (!listener)
          return make_exo_error(exo_errc::invalid_argument,
                                "subscribe: no listener");
        auto& st = self->state;
        if (st.watchers.empty())
          st.watched = st.table->view();
        else
          notify_watchers(self); // earlier watchers see the changes first
        if (std::find(st.watchers.begin(), st.watchers.end(), listener)
            == st.watchers.end()) {
          self->monitor(listener);
          st.watchers.push_back(listener);
        }
        return st.watched;
      },
      [self](caf::publish_atom, std::uint16_t port) {
        auto& st = self->state;
        st.cfg.port = port;
        auto me = self_info(self);
        me.port = port;
        st.table = std::make_unique<member_table>(me);
        start_discovery(self);
      },
      [self](register_atom, std::string& command,
             caf::actor& handler) -> caf::result<caf::atom_value> {
        if (!is_local(self))
          return denied();
        if (!handler || command.empty())
          return make_exo_error(exo_errc::invalid_argument,
                                "register: command and handler required");
        self->state.services[command] = handler;
        return caf::ok_atom::value;
      },
      [self](broadcast_atom, std::string& cmd,
             std::string& arg) -> caf::result<std::uint64_t> {
        if (!is_local(self))
          return denied();
        return broadcast<console_reply>(
            self, caf::make_message(console_atom::value, std::move(cmd),
                                    std::move(arg)));
      },
      [self](broadcast_atom, std::string& service,
             caf::message& m) -> caf::result<std::uint64_t> {
        if (!is_local(self))
          return denied();
        return broadcast<caf::atom_value>(
            self, caf::make_message(service_atom::value, std::move(service),
                                    std::move(m)));
      },
      [self](service_atom, std::string& node, std::string& service,
             caf::message& m) -> caf::result<caf::message> {
        if (!is_local(self))
          return denied();
        auto& st = self->state;
        if (node == st.cfg.name) {
          auto it = st.services.find(service);
          if (it == st.services.end())
            return make_exo_error(exo_errc::invalid_argument,
                                  "no service \"" + service + "\" on " + node);
          return self->delegate(it->second, std::move(m));
        }
        auto peer = st.peers.find(node);
        if (peer == st.peers.end()) {
          // Alive by gossip, not connected yet: a member that has just
          // joined. Hold the message until the connection is there.
          if (st.table && st.table->alive(node)) {
            auto rp = self->make_response_promise();
            st.held.push_back({node, std::move(service), std::move(m), rp,
                               steady::now() + 2 * st.cfg.connect_timeout});
            return rp;
          }
          return make_exo_error(exo_errc::invalid_argument,
                                "no live node named \"" + node + "\"");
        }
        return self->delegate(peer->second, service_atom::value,
                              std::move(service), std::move(m));
      },
      [self](service_atom, std::string& service,
             caf::message& m) -> caf::result<caf::message> {
        auto& st = self->state;
        if (!is_peer(self) && !is_local(self)) {
          // A node we dropped that still sends to us as a member (it was
          // paused, or our verdict was about our link): held while it joins
          // again, which it is told to do. So is one whose join with us is
          // under way: it admitted us first, and what it sends now may
          // overtake its answer (over a second connection both dialled).
          auto sender = self->current_sender(); // null: anonymous
          if (sender && st.inbound.size() < gate_state::max_held_inbound
              && (hint_former(self) || joining_with(self, sender->node()))) {
            auto node = sender->node();
            auto rp = self->make_response_promise(); // takes the sender
            st.inbound.push_back(
              {std::move(node), std::move(service), std::move(m), rp,
               steady::now() + 2 * st.cfg.connect_timeout});
            return rp;
          }
          return denied();
        }
        if (!is_local(self)) {
          auto why = peer_service_refusal(m, sender_member(self));
          if (!why.empty()) {
            st.log("refused: " + why);
            return make_exo_error(exo_errc::access_denied, why);
          }
        }
        auto it = st.services.find(service);
        if (it == st.services.end())
          return make_exo_error(exo_errc::invalid_argument,
                                "no service \"" + service + "\" on " +
                                    st.cfg.name);
        return self->delegate(it->second, std::move(m));
      },
      [self](ping_atom, std::int64_t t) -> caf::result<std::int64_t> {
        if (!is_peer(self) && !is_local(self))
          return denied();
        return t;
      },
      [self](bulk_atom, chunk& c) -> caf::result<std::uint64_t> {
        if (!is_peer(self) && !is_local(self))
          return denied();
        return static_cast<std::uint64_t>(c.bytes.size());
      },
  };
}

caf::behavior gate_impl(self_ptr self, gate_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  member_info me;
  me.name = st.cfg.name;
  me.host = st.cfg.host;
  me.port = st.cfg.port;
  me.bulk_port = st.cfg.bulk_port;
  me.incarnation = st.cfg.incarnation;
  me.join_time_ns = wall_ns();
  st.table = std::make_unique<member_table>(me);
  st.topology = topology::spawn_topology(self->system());
  self->link_to(st.topology);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  self->send(self, tick_atom::value);
  self->delayed_send(self, milliseconds{500}, measure_atom::value);
  return core_handlers(self)
      .or_else(join_handlers(self))
      .or_else(health_handlers(self))
      .or_else(leave_handlers(self))
      .or_else(console_handlers(self));
}

} // namespace

} // namespace exo::cluster::detail

namespace exo::cluster {

caf::actor spawn_gate(caf::actor_system& sys, gate_config cfg) {
  return sys.spawn(detail::gate_impl, std::move(cfg));
}

} // namespace exo::cluster
