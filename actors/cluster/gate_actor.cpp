#include "actors/cluster/gate_actor.hpp"

#include "core/access/audit_event.hpp"
#include "core/access/console_rule.hpp"
#include "actors/cluster/member_table.hpp"
#include "actors/topology/topology_actor.hpp"
#include "messages/audit.hpp"
#include "messages/errors.hpp"
#include "core/tls/challenge.hpp"
#include "core/tls/private_key.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>

namespace exo::cluster {

namespace {

using namespace std::chrono;
using steady = steady_clock;

std::int64_t wall_ns() {
  return duration_cast<nanoseconds>(system_clock::now().time_since_epoch())
    .count();
}

/// A join we answered and whose proof we wait for.
struct pending_join {
  tls::nonce nonce;
  std::string claimed;
  bool client = false;
  steady::time_point deadline;
};

/// Backoff of one address we try to connect to.
struct attempt {
  steady::time_point next_try{};
  milliseconds delay{200};
  bool in_flight = false;
  bool is_self = false;
  std::string peer; ///< the member this address led to, once joined
};

struct gate_state {
  static inline const char* name = "exo.gate";

  gate_config cfg;
  std::unique_ptr<member_table> table;
  std::map<std::string, caf::actor> peers;          // name -> remote gate
  std::map<caf::actor_addr, std::string> peer_names; // sender -> name
  std::map<caf::actor_addr, std::string> clients;    // sender -> client name
  std::map<caf::actor_addr, pending_join> pending;
  std::map<std::string, attempt> attempts;           // "host:port" -> backoff
  std::map<std::string, link_info> links;            // to -> link
  std::map<std::string, std::string> suspects;       // "host:port" -> name
  std::map<std::string, caf::actor> services;        // console command -> handler
  caf::actor topology;
  std::uint64_t ticks = 0;
  std::uint64_t joins_accepted = 0;
  std::uint64_t joins_refused = 0;
  std::uint64_t gossip_in = 0;
  std::string last_refusal;

  void log(const std::string& line) const {
    std::cout << "exo-node " << cfg.name << ": " << line << std::endl;
  }
};

using self_ptr = caf::stateful_actor<gate_state>*;

member_info self_info(self_ptr self) {
  auto v = self->state.table->view();
  for (auto& m : v.members)
    if (m.name == self->state.cfg.name)
      return m;
  return {};
}

/// Whether the current sender may use more than join/prove.
bool is_local(self_ptr self) {
  auto s = self->current_sender();
  return s && s->node() == self->system().node();
}

/// The sender is an authenticated peer gate, or another actor (e.g. a
/// topology actor) of a node whose gate proved its name to us.
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

/// A client whose typed requests (devices, actors, inspect) are refused
/// because this node wants a token with every client request, and those
/// carry none.
bool tokenless_client(self_ptr self) {
  return self->state.cfg.console_requires_token && is_client(self)
         && !is_local(self) && !is_peer(self);
}

void send_audit(self_ptr self, const audit::event& ev,
                std::string principal) {
  auto& st = self->state;
  if (!st.cfg.audit)
    return;
  audit_entry e;
  e.type = static_cast<std::uint8_t>(ev.type);
  e.level = static_cast<std::uint8_t>(ev.level);
  e.principal = std::move(principal);
  e.details = ev.details;
  caf::anon_send(st.cfg.audit, audit_atom::value, std::move(e));
}

/// Checks a client's console command (issue 6), the one place where they
/// are: access::console_permission names the permission, console_rule
/// says whether to check. Takes auth= out of `arg` unless the service
/// checks it itself. Refusals are audited (access_denied); the reads a
/// client asked for are audited as device_list / monitoring_read.
caf::error check_client(self_ptr self, const std::string& cmd,
                        std::string& arg) {
  auto& st = self->state;
  // The requirement is read from the argument without auth=, which is
  // what the command will see ("auth=T report ..." is a report).
  auto auth = access::take_auth(arg);
  auto req = access::console_permission(cmd, auth.rest);
  auto action = access::console_rule(req, auth.has_token,
                                     st.cfg.console_requires_token);
  if (action == access::console_action::pass_through)
    return caf::none;
  if (!auth.error.empty())
    return make_exo_error(exo_errc::invalid_argument, cmd + ": " + auth.error);
  std::string client;
  auto s = self->current_sender();
  if (auto it = st.clients.find(caf::actor_cast<caf::actor_addr>(s));
      it != st.clients.end())
    client = it->second;
  access::decision d;
  if (action == access::console_action::serve) {
    d.code = access::decision_code::allow;
  } else if (action == access::console_action::refuse) {
    d.code = access::decision_code::malformed;
    d.reason = "no auth=TOKEN given (this node requires a token with every "
               "console command)";
  } else if (!st.cfg.access) {
    d.code = access::decision_code::permission_denied;
    d.reason = "no access policy on this node";
  } else {
    d = st.cfg.access->check(auth.token, req.perm);
  }
  auto ev = access::make_audit_event(d, req.perm);
  ev.details["command"] = cmd;
  ev.details["client"] = client;
  ev.details["token"] = auth.has_token ? "yes" : "no";
  if (!d) {
    send_audit(self, ev, d.principal);
    return make_exo_error(exo_errc::access_denied,
                          cmd + ": " + std::string{access::to_string(d.code)}
                            + ": " + d.reason);
  }
  if (req.perm == access::permission::device_list
      || req.perm == access::permission::monitoring_read
      || req.perm == access::permission::thermal_read) {
    ev.type = req.perm == access::permission::device_list
                ? audit::event_type::device_list
                : audit::event_type::monitoring_read;
    ev.level = audit::severity::info;
    ev.details.erase("decision");
    if (!auth.rest.empty())
      ev.details["argument"] = auth.rest.substr(0, 256);
    send_audit(self, ev, d.principal);
  }
  if (auth.has_token)
    arg = std::move(auth.rest);
  return caf::none;
}

caf::error denied() {
  return make_exo_error(exo_errc::access_denied,
                        "the sender has not completed the join handshake");
}

std::vector<std::uint8_t> to_bytes(const tls::nonce& n) {
  return {n.begin(), n.end()};
}

bool to_nonce(const std::vector<std::uint8_t>& in, tls::nonce& out) {
  if (in.size() != out.size())
    return false;
  std::copy(in.begin(), in.end(), out.begin());
  return true;
}

void drop_peer(self_ptr self, const std::string& name) {
  auto& st = self->state;
  auto it = st.peers.find(name);
  if (it == st.peers.end())
    return;
  st.peer_names.erase(it->second.address());
  self->demonitor(it->second);
  st.peers.erase(it);
}

void accept_peer(self_ptr self, const std::string& name, caf::actor peer) {
  auto& st = self->state;
  if (auto it = st.peers.find(name); it != st.peers.end()) {
    if (it->second == peer)
      return;
    drop_peer(self, name);
  }
  st.peer_names[peer.address()] = name;
  self->monitor(peer);
  st.peers[name] = std::move(peer);
}

void try_connect(self_ptr self, const std::string& host, std::uint16_t port);

/// Connects to every seed and every alive member we have no link to.
void connect_missing(self_ptr self) {
  auto& st = self->state;
  for (auto& seed : st.cfg.seeds) {
    // A seed we know by name follows the member rule below, unless that
    // member is gone (then the seed may have restarted: try it again).
    auto key = seed.host + ":" + std::to_string(seed.port);
    auto it = st.attempts.find(key);
    if (it != st.attempts.end() && !it->second.peer.empty()
        && st.table->alive(it->second.peer) && !(st.cfg.name < it->second.peer))
      continue;
    try_connect(self, seed.host, seed.port);
  }
  // Of two members, the one with the smaller name connects: one
  // connection per pair, never two racing ones.
  auto v = st.table->view();
  for (auto& m : v.members)
    if (st.cfg.name < m.name && m.status == member_status::alive
        && !st.peers.count(m.name))
      try_connect(self, m.host, m.port);
}

void mark_dead(self_ptr self, const std::string& name,
               const std::string& reason);

void backoff(self_ptr self, const std::string& key,
             const std::string& why = "") {
  auto& st = self->state;
  // A lost member we could not reach again is dead.
  if (auto it = st.suspects.find(key); it != st.suspects.end()) {
    auto name = it->second;
    st.suspects.erase(it);
    mark_dead(self, name,
              "connection lost" + (why.empty() ? "" : ": " + why));
  }
  auto& a = st.attempts[key];
  a.in_flight = false;
  a.next_try = steady::now() + a.delay;
  a.delay = std::min(a.delay * 2, milliseconds{5000});
}

void handshake(self_ptr self, caf::actor peer, std::string key) {
  auto& st = self->state;
  auto nonce_j = tls::make_nonce();
  join_hello hello{st.cfg.name, to_bytes(nonce_j), false};
  self->request(peer, st.cfg.connect_timeout, join_atom::value, hello)
    .then(
      [self, peer, key, nonce_j](join_challenge& c) {
        auto& st = self->state;
        std::string responder;
        tls::nonce nonce_r{};
        try {
          if (!member_table::valid_name(c.responder)
              || !to_nonce(c.nonce, nonce_r)
              || c.cert_pem.size() > tls::max_peer_cert_size
              || c.signature.size() > tls::max_signature_size)
            throw std::runtime_error("malformed challenge");
          responder = tls::verify_join(c.cert_pem, *st.cfg.ca, nonce_j,
                                       c.responder, st.cfg.name, c.signature);
        } catch (const std::exception& e) {
          st.log("refusing " + key + ": " + e.what());
          backoff(self, key);
          return;
        }
        if (responder == st.cfg.name) {
          if (c.cert_pem == st.cfg.cert_pem) {
            // A seed that is ourselves: never try it again.
            st.attempts[key].is_self = true;
            st.attempts[key].in_flight = false;
          } else {
            st.log("the name \"" + responder
                   + "\" is in use by a live member at " + key);
            backoff(self, key);
          }
          return;
        }
        join_proof proof;
        proof.claimed = st.cfg.name;
        proof.cert_pem = st.cfg.cert_pem;
        proof.signature = tls::sign_join(*st.cfg.key, nonce_r, st.cfg.name,
                                         responder);
        proof.self = self_info(self);
        self->request(peer, st.cfg.connect_timeout, prove_atom::value, proof)
          .then(
            [self, peer, key, responder](member_view& v) {
              auto& st = self->state;
              st.attempts[key] = attempt{};
              st.attempts[key].peer = responder;
              st.suspects.erase(key);
              if (auto err = member_table::validate(v)) {
                st.log("bad view from " + responder + ": " + *err);
                return;
              }
              bool known = st.peers.count(responder) > 0;
              accept_peer(self, responder, peer);
              auto now = steady::now();
              st.table->merge(v, now);
              st.table->revive(responder, now);
              if (st.table->accuses_self(v)) {
                std::uint64_t seen = 0;
                for (auto& m : v.members)
                  if (m.name == st.cfg.name)
                    seen = std::max(seen, m.incarnation);
                st.table->bump_incarnation(seen);
              }
              if (!known)
                st.log("joined " + responder + " (" + key + ")");
              connect_missing(self);
            },
            [self, key, responder](caf::error& err) {
              auto why = self->system().render(err);
              self->state.log("join refused by " + responder + ": " + why);
              backoff(self, key, why);
            });
      },
      [self, key](caf::error& err) {
        auto why = self->system().render(err);
        self->state.log("no join answer from " + key + ": " + why);
        backoff(self, key, why);
      });
}

void try_connect(self_ptr self, const std::string& host, std::uint16_t port) {
  auto& st = self->state;
  auto key = host + ":" + std::to_string(port);
  if (port == st.cfg.port && (host == st.cfg.host || host == "127.0.0.1"
                              || host == "localhost"))
    return; // ourselves
  auto& a = st.attempts[key];
  if (a.is_self || a.in_flight || steady::now() < a.next_try)
    return;
  if (!a.peer.empty() && st.peers.count(a.peer))
    return; // already joined through this address
  a.in_flight = true;
  auto mm = self->system().openssl_manager().actor_handle();
  self
    ->request(mm, st.cfg.connect_timeout, caf::connect_atom::value, host,
              port)
    .then(
      [self, key](const caf::node_id&, caf::strong_actor_ptr& ptr,
                  const std::set<std::string>&) {
        if (!ptr) {
          backoff(self, key);
          return;
        }
        handshake(self, caf::actor_cast<caf::actor>(ptr), key);
      },
      [self, key](caf::error& err) {
        backoff(self, key, self->system().render(err));
      });
}

void mark_dead(self_ptr self, const std::string& name,
               const std::string& reason) {
  auto& st = self->state;
  drop_peer(self, name);
  if (st.table->mark(name, member_status::dead, reason))
    st.log("member " + name + " is dead: " + reason);
}

/// One heartbeat: gossip to every peer, expire the silent, connect.
void tick(self_ptr self) {
  auto& st = self->state;
  ++st.ticks;
  auto now = steady::now();
  for (auto& name : st.table->expire(now, st.cfg.failure_timeout)) {
    drop_peer(self, name);
    st.log("member " + name + " is dead: no heartbeat");
  }
  auto v = st.table->view();
  for (auto& [name, peer] : st.peers)
    self->send(peer, gossip_atom::value, v);
  // Forget half-finished joins nobody completed.
  for (auto it = st.pending.begin(); it != st.pending.end();)
    it = it->second.deadline < now ? st.pending.erase(it) : std::next(it);
  connect_missing(self);
  // Refresh our devices every second or so.
  auto every = std::max<std::int64_t>(1, 1000 / std::max<std::int64_t>(
                                                   1, st.cfg.heartbeat.count()));
  if (st.cfg.node && st.ticks % static_cast<std::uint64_t>(every) == 1) {
    self->request(st.cfg.node, seconds(5), devices_atom::value)
      .then(
        [self](std::vector<device_info>& devs) {
          auto& st = self->state;
          std::vector<link_info> ls;
          for (auto& [to, l] : st.links)
            ls.push_back(l);
          st.table->update_self(std::move(devs), std::move(ls));
        },
        [](caf::error&) {});
  }
}

/// Asks the topology actor to measure every peer; calls `then` with all
/// links once all are done (a failed measurement is left out).
void measure_all(self_ptr self,
                 std::function<void(std::vector<link_info>)> then) {
  auto& st = self->state;
  auto results = std::make_shared<std::vector<link_info>>();
  auto left = std::make_shared<std::size_t>(st.peers.size());
  if (*left == 0 || !st.topology) {
    then({});
    return;
  }
  auto finish_one = [self, results, left, then] {
    if (--*left == 0) {
      std::vector<link_info> ls;
      for (auto& [to, li] : self->state.links)
        ls.push_back(li);
      auto me = self_info(self);
      self->state.table->update_self(me.devices, std::move(ls));
      then(*results);
    }
  };
  for (auto& [name, peer] : st.peers)
    self
      ->request(st.topology, seconds(30), measure_atom::value, st.cfg.name,
                name, peer)
      .then(
        [self, results, finish_one](link_info& l) {
          self->state.links[l.to] = l;
          results->push_back(l);
          finish_one();
        },
        [finish_one](caf::error&) { finish_one(); });
}

/// Collects the devices of every node into one console reply.
struct device_collector {
  console_reply out;
  std::size_t pending = 0;
  caf::response_promise rp;
  void add(std::vector<device_info> xs) {
    out.devices.insert(out.devices.end(), std::make_move_iterator(xs.begin()),
                       std::make_move_iterator(xs.end()));
    if (--pending == 0)
      rp.deliver(std::move(out));
  }
};

caf::result<console_reply> console(self_ptr self, const std::string& cmd,
                                   const std::string& arg) {
  auto& st = self->state;
  console_reply reply;
  reply.command = cmd;
  if (cmd == "nodes") {
    reply.nodes = st.table->view();
    reply.text = st.table->coordinator();
    return reply;
  }
  if (cmd == "coordinator") {
    reply.text = st.table->coordinator();
    return reply;
  }
  if (cmd == "links") {
    for (auto& m : st.table->view().members)
      if (m.status == member_status::alive)
        reply.links.insert(reply.links.end(), m.links.begin(), m.links.end());
    return reply;
  }
  if (cmd == "devices") {
    auto c = std::make_shared<device_collector>();
    c->out = std::move(reply);
    c->pending = 1 + st.peers.size();
    c->rp = self->make_response_promise();
    auto ask = [&](const caf::actor& whom, const std::string& node) {
      self->request(whom, seconds(5), devices_atom::value)
        .then([c](std::vector<device_info>& xs) { c->add(std::move(xs)); },
              [c, node](caf::error& err) {
                device_info gone;
                gone.node = node;
                gone.id = "?";
                gone.state = device_state::gone;
                gone.state_reason = "node did not answer: "
                                    + caf::to_string(err);
                c->add({gone});
              });
    };
    if (st.cfg.node)
      ask(st.cfg.node, st.cfg.name);
    else
      c->add({});
    for (auto& [name, peer] : st.peers)
      ask(peer, name);
    return c->rp;
  }
  if (cmd == "actors" || cmd == "inspect") {
    std::string node = st.cfg.name, what = arg;
    if (cmd == "actors" && !arg.empty())
      node = arg;
    if (cmd == "inspect") {
      if (auto colon = arg.find(':'); colon != std::string::npos) {
        node = arg.substr(0, colon);
        what = arg.substr(colon + 1);
      }
      if (what.empty())
        return make_exo_error(exo_errc::invalid_argument,
                              "inspect needs an actor name");
    }
    caf::actor target;
    if (node == st.cfg.name) {
      target = self;
    } else if (auto it = st.peers.find(node); it != st.peers.end()) {
      target = it->second;
    } else {
      return make_exo_error(exo_errc::invalid_argument,
                            "no live node named \"" + node + "\"");
    }
    auto rp = self->make_response_promise();
    auto on_err = [rp](caf::error& err) mutable { rp.deliver(err); };
    if (cmd == "actors")
      self->request(target, seconds(5), actors_atom::value)
        .then(
          [rp, reply](std::vector<actor_snapshot>& xs) mutable {
            reply.actors = std::move(xs);
            rp.deliver(std::move(reply));
          },
          on_err);
    else
      self->request(target, seconds(5), inspect_atom::value, what)
        .then(
          [rp, reply](actor_snapshot& x) mutable {
            reply.actors.push_back(std::move(x));
            rp.deliver(std::move(reply));
          },
          on_err);
    return rp;
  }
  if (cmd == "measure") {
    auto rp = self->make_response_promise();
    measure_all(self, [rp, reply](std::vector<link_info> ls) mutable {
      reply.links = std::move(ls);
      rp.deliver(std::move(reply));
    });
    return rp;
  }
  if (cmd == "leave") {
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
  if (auto it = st.services.find(cmd); it != st.services.end()) {
    auto rp = self->make_response_promise();
    self->request(it->second, seconds(60), console_atom::value, cmd, arg)
      .then([rp](console_reply& r) mutable { rp.deliver(std::move(r)); },
            [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
    return rp;
  }
  if (cmd == "services") {
    for (auto& [name, handler] : st.services)
      reply.text += name + "\n";
    return reply;
  }
  return make_exo_error(exo_errc::invalid_argument,
                        "unknown command \"" + cmd + "\"");
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
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (auto it = st.peer_names.find(dm.source); it != st.peer_names.end()) {
      auto name = it->second;
      drop_peer(self, name);
      auto* m = st.table->find(name);
      if (m == nullptr || m->status != member_status::alive)
        return;
      // A dropped connection is a suspicion, not a verdict: CAF 0.17 can
      // drop healthy TLS connections when another one closes. The member
      // with the smaller name reconnects at once; a refused or failed
      // reconnect makes the member dead (a killed node is found within
      // milliseconds), and heartbeat silence is the backstop on both ends.
      if (st.cfg.name < name) {
        auto key = m->host + ":" + std::to_string(m->port);
        st.suspects[key] = name;
        st.attempts[key] = attempt{};
        try_connect(self, m->host, m->port);
      }
    }
    st.clients.erase(dm.source);
  });
  self->send(self, tick_atom::value);
  self->delayed_send(self, milliseconds{500}, measure_atom::value);
  return {
    [self](caf::publish_atom, std::uint16_t port) {
      auto& st = self->state;
      st.cfg.port = port;
      auto me = self_info(self);
      me.port = port;
      st.table = std::make_unique<member_table>(me);
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
        self->request(peer, seconds(2), console_atom::value, cmd, arg)
          .then([t](console_reply&) { t->one(true); },
                [t](caf::error&) { t->one(false); });
      return t->rp;
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
      if (peer == st.peers.end())
        return make_exo_error(exo_errc::invalid_argument,
                              "no live node named \"" + node + "\"");
      return self->delegate(peer->second, service_atom::value,
                            std::move(service), std::move(m));
    },
    [self](service_atom, std::string& service,
           caf::message& m) -> caf::result<caf::message> {
      if (!is_peer(self) && !is_local(self))
        return denied();
      auto& st = self->state;
      auto it = st.services.find(service);
      if (it == st.services.end())
        return make_exo_error(exo_errc::invalid_argument,
                              "no service \"" + service + "\" on "
                                + st.cfg.name);
      return self->delegate(it->second, std::move(m));
    },
    [self](tick_atom) {
      tick(self);
      self->delayed_send(self, self->state.cfg.heartbeat, tick_atom::value);
    },
    [self](measure_atom) {
      measure_all(self, [](std::vector<link_info>) {});
      self->delayed_send(self, self->state.cfg.measure_interval,
                         measure_atom::value);
    },
    // -- the join handshake (open to anyone holding a CA certificate) -------
    [self](join_atom, join_hello& h) -> caf::result<join_challenge> {
      auto& st = self->state;
      tls::nonce theirs{};
      if (!member_table::valid_name(h.claimed) || !to_nonce(h.nonce, theirs))
        return make_exo_error(exo_errc::invalid_argument,
                              "malformed join request");
      auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
      if (!sender)
        return make_exo_error(exo_errc::invalid_argument, "anonymous join");
      if (st.pending.size() >= 1024 && !st.pending.count(sender))
        return make_exo_error(exo_errc::access_denied,
                              "too many joins in progress");
      auto mine = tls::make_nonce();
      st.pending[sender] = pending_join{mine, h.claimed, h.client,
                                        steady::now() + seconds(10)};
      join_challenge c;
      c.responder = st.cfg.name;
      c.nonce = to_bytes(mine);
      c.cert_pem = st.cfg.cert_pem;
      c.signature = tls::sign_join(*st.cfg.key, theirs, st.cfg.name,
                                   h.claimed);
      return c;
    },
    [self](prove_atom, join_proof& p) -> caf::result<member_view> {
      auto& st = self->state;
      auto sender_ptr = self->current_sender();
      auto sender = caf::actor_cast<caf::actor_addr>(sender_ptr);
      auto it = st.pending.find(sender);
      auto refuse = [&](const std::string& why) {
        ++st.joins_refused;
        st.last_refusal = p.claimed + ": " + why;
        st.log("refused join of \"" + p.claimed + "\": " + why);
        return make_exo_error(exo_errc::access_denied, why);
      };
      if (it == st.pending.end() || it->second.claimed != p.claimed)
        return refuse("no join in progress for this name");
      auto pend = it->second;
      st.pending.erase(it);
      if (p.cert_pem.size() > tls::max_peer_cert_size
          || p.signature.size() > tls::max_signature_size)
        return refuse("proof too large");
      try {
        if (pend.client)
          tls::verify_challenge(p.cert_pem, *st.cfg.ca, pend.nonce,
                                tls::join_context(p.claimed, st.cfg.name),
                                p.signature, tls::cert_role::client);
        else
          tls::verify_join(p.cert_pem, *st.cfg.ca, pend.nonce, p.claimed,
                           st.cfg.name, p.signature);
      } catch (const std::exception& e) {
        return refuse(e.what());
      }
      if (pend.client) {
        st.clients[sender] = p.claimed;
        self->monitor(sender_ptr);
        return st.table->view();
      }
      if (p.claimed == st.cfg.name)
        return refuse("that is our own name");
      p.self.name = p.claimed;
      p.self.status = member_status::alive;
      if (auto err = member_table::validate(p.self))
        return refuse(*err);
      auto live = st.peers.find(p.claimed);
      // A live connection under that name means a live member holds it
      // (a restarted node comes back only after its old connection
      // dropped and it was marked dead).
      if (live != st.peers.end() && live->second.address() != sender
          && st.table->alive(p.claimed))
        return refuse("the name \"" + p.claimed
                      + "\" is in use by a live member");
      accept_peer(self, p.claimed, caf::actor_cast<caf::actor>(sender_ptr));
      auto now = steady::now();
      auto* known = st.table->find(p.claimed);
      bool fresh = !known || known->incarnation != p.self.incarnation
                   || known->status != member_status::alive;
      st.table->merge(p.self, now);
      st.table->revive(p.claimed, now);
      ++st.joins_accepted;
      if (fresh)
        st.log("member " + p.claimed + " joined from " + p.self.host + ":"
               + std::to_string(p.self.port));
      return st.table->view();
    },
    // -- between authenticated gates -----------------------------------------
    [self](gossip_atom, member_view& v) {
      auto& st = self->state;
      if (!is_peer(self))
        return;
      auto name = st.peer_names[caf::actor_cast<caf::actor_addr>(
        self->current_sender())];
      if (auto err = member_table::validate(v)) {
        st.log("ignored gossip from " + name + ": " + *err);
        return;
      }
      ++st.gossip_in;
      auto now = steady::now();
      st.table->heard_from(name, now);
      // Someone declared us dead: refute with a larger incarnation.
      if (st.table->accuses_self(v)) {
        std::uint64_t seen = 0;
        for (auto& m : v.members)
          if (m.name == st.cfg.name)
            seen = std::max(seen, m.incarnation);
        st.table->bump_incarnation(seen);
        st.log("refuted a claim that we are dead");
      }
      std::vector<std::string> was_alive;
      for (auto& m : v.members)
        if (m.status != member_status::alive && m.name != st.cfg.name
            && st.table->alive(m.name))
          was_alive.push_back(m.name);
      st.table->merge(v, now);
      for (auto& m : v.members)
        if (m.status != member_status::alive && st.peers.count(m.name)
            && m.name != name && !st.table->alive(m.name))
          drop_peer(self, m.name);
      // A verdict learned by gossip is logged like one of our own, so the
      // log tells when each node learned of each death.
      for (auto& gone : was_alive)
        if (auto* m = st.table->find(gone); m && !st.table->alive(gone))
          st.log("member " + gone
                 + (m->status == member_status::left ? " left"
                                                     : " is dead")
                 + ": reported by " + name);
    },
    [self](leave_atom) -> caf::result<caf::atom_value> {
      auto& st = self->state;
      if (!is_peer(self))
        return denied();
      auto name = st.peer_names[caf::actor_cast<caf::actor_addr>(
        self->current_sender())];
      drop_peer(self, name);
      if (st.table->mark(name, member_status::left, "left the cluster"))
        st.log("member " + name + " left");
      return caf::ok_atom::value;
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
    [self](devices_atom) -> caf::result<caf::message> {
      if (!is_peer(self) && !is_client(self) && !is_local(self))
        return denied();
      if (tokenless_client(self))
        return make_exo_error(exo_errc::access_denied,
                              "this node requires a token: use the console "
                              "command with auth=TOKEN");
      auto& st = self->state;
      if (!st.cfg.node)
        return caf::make_message(std::vector<device_info>{});
      return self->delegate(st.cfg.node, devices_atom::value);
    },
    [self](actors_atom) -> caf::result<caf::message> {
      if (!is_peer(self) && !is_client(self) && !is_local(self))
        return denied();
      if (tokenless_client(self))
        return make_exo_error(exo_errc::access_denied,
                              "this node requires a token: use the console "
                              "command with auth=TOKEN");
      auto& st = self->state;
      if (!st.cfg.directory)
        return caf::make_message(std::vector<actor_snapshot>{});
      return self->delegate(st.cfg.directory, actors_atom::value);
    },
    [self](inspect_atom, std::string& name) -> caf::result<caf::message> {
      if (!is_peer(self) && !is_client(self) && !is_local(self))
        return denied();
      if (tokenless_client(self))
        return make_exo_error(exo_errc::access_denied,
                              "this node requires a token: use the console "
                              "command with auth=TOKEN");
      auto& st = self->state;
      if (name == "gate") {
        actor_snapshot s;
        s.name = "gate";
        s.kind = "gate";
        s.node = st.cfg.name;
        s.summary = std::to_string(st.peers.size()) + " peers";
        s.fields = {{"peers", std::to_string(st.peers.size())},
                    {"clients", std::to_string(st.clients.size())},
                    {"joins_accepted", std::to_string(st.joins_accepted)},
                    {"joins_refused", std::to_string(st.joins_refused)},
                    {"last_refusal", st.last_refusal},
                    {"gossip_in", std::to_string(st.gossip_in)},
                    {"coordinator", st.table->coordinator()},
                    {"queue_depth", std::to_string(self->mailbox().size())}};
        return caf::make_message(std::move(s));
      }
      if (!st.cfg.directory)
        return make_exo_error(exo_errc::invalid_argument, "no directory");
      return self->delegate(st.cfg.directory, inspect_atom::value,
                            std::move(name));
    },
    [self](inspect_atom) {
      auto& st = self->state;
      actor_snapshot s;
      s.name = "gate";
      s.kind = "gate";
      s.node = st.cfg.name;
      s.summary = std::to_string(st.peers.size()) + " peers, coordinator "
                  + st.table->coordinator();
      s.fields = {{"peers", std::to_string(st.peers.size())},
                  {"joins_accepted", std::to_string(st.joins_accepted)},
                  {"joins_refused", std::to_string(st.joins_refused)},
                  {"last_refusal", st.last_refusal},
                  {"queue_depth", std::to_string(self->mailbox().size())}};
      return s;
    },
    [self](console_atom, std::string& cmd,
           std::string& arg) -> caf::result<console_reply> {
      if (!is_client(self) && !is_local(self) && !is_peer(self))
        return denied();
      if (cmd.size() > 64 || arg.size() > 4096)
        return make_exo_error(exo_errc::invalid_argument,
                              "command too long");
      if (is_client(self) && !is_local(self) && !is_peer(self))
        if (auto err = check_client(self, cmd, arg))
          return err;
      return console(self, cmd, arg);
    },
  };
}

} // namespace

caf::actor spawn_gate(caf::actor_system& sys, gate_config cfg) {
  return sys.spawn(gate_impl, std::move(cfg));
}

} // namespace exo::cluster
