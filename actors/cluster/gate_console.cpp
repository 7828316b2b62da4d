// Console commands and inspection: what authenticated clients and peers may
// ask (nodes, devices, links, actors, inspect, measure, leave, the node's
// services), each client command checked against the access policy and
// audited.

#include "actors/cluster/gate_state.hpp"

#include "core/access/audit_event.hpp"
#include "core/access/console_rule.hpp"
#include "core/console/commands.hpp"
#include "messages/audit.hpp"
#include "messages/errors.hpp"

namespace exo::cluster::detail {

using namespace std::chrono;

void send_audit(self_ptr self, const audit::event& ev, std::string principal) {
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

namespace {

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
  auto action =
      access::console_rule(req, auth.has_token, st.cfg.console_requires_token);
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
    d.reason = st.cfg.console_requires_token
                   ? "no auth=TOKEN given (this node requires a token with "
                     "every console command)"
                   : "no auth=TOKEN given (" + cmd
                         + " needs a token with the " +
                         std::string{access::to_string(req.perm)}
                         + " permission; only read-only views are open to "
                           "client certificates)";
  } else if (!st.cfg.access) {
    d.code = access::decision_code::permission_denied;
    d.reason = "no access policy on this node";
  } else {
    d = st.cfg.access->check(auth.token, req.perm);
  }
  // Who acted: the token's principal, else the client's certificate.
  auto who = !d.principal.empty() ? d.principal
             : !client.empty()    ? "cert:" + client
                                  : std::string{};
  auto ev = access::make_audit_event(d, req.perm);
  ev.details["command"] = cmd;
  ev.details["client"] = client;
  ev.details["token"] = auth.has_token ? "yes" : "no";
  if (!d) {
    send_audit(self, ev, who);
    return make_exo_error(exo_errc::access_denied,
                          cmd + ": " + std::string{access::to_string(d.code)} +
                              ": " + d.reason);
  }
  if (cmd == "leave") {
    // Leaving takes this node out of every job it serves: who asked, and
    // from which client, goes in the log before it happens.
    audit::event leave;
    leave.type = audit::event_type::node_leave;
    leave.level = audit::severity::warning;
    leave.details = {{"client", client},
                     {"token", auth.has_token ? "yes" : "no"}};
    send_audit(self, leave, who);
  }
  if (req.perm == access::permission::device_list ||
      req.perm == access::permission::monitoring_read ||
      req.perm == access::permission::thermal_read) {
    ev.type = req.perm == access::permission::device_list
                  ? audit::event_type::device_list
                  : audit::event_type::monitoring_read;
    ev.level = audit::severity::info;
    ev.details.erase("decision");
    if (!auth.rest.empty())
      ev.details["argument"] = auth.rest.substr(0, 256);
    send_audit(self, ev, who);
  }
  if (auth.has_token)
    arg = std::move(auth.rest);
  return caf::none;
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

caf::result<console_reply> run_command(self_ptr self, const std::string& cmd,
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
                  gone.state_reason =
                      "node did not answer: " + caf::to_string(err);
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
    // The console's table checks the words (one optional NODE for actors,
    // one [NODE:]ACTOR for inspect), whoever sent them.
    console::parsed_command p;
    try {
      p = console::parse_command(cmd, arg);
    } catch (const console::command_error& e) {
      return make_exo_error(exo_errc::invalid_argument, e.what());
    }
    std::string node = st.cfg.name;
    std::string what = p.args.empty() ? std::string{} : p.args.front();
    if (cmd == "actors" && !what.empty())
      node = what;
    if (cmd == "inspect") {
      if (auto colon = what.find(':'); colon != std::string::npos) {
        node = what.substr(0, colon);
        what = what.substr(colon + 1);
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
    measure_all(
      self,
      [rp, reply](std::vector<link_info> ls) mutable {
        reply.links = std::move(ls);
        rp.deliver(std::move(reply));
      },
      true);
    return rp;
  }
  if (cmd == "leave")
    return leave_cluster(self, std::move(reply));
  if (auto it = st.services.find(cmd); it != st.services.end()) {
    auto rp = self->make_response_promise();
    // A `run` (and an `attach`) answers when its job ends, which may take hours (its job's
    // own watchdogs bound it, and the console its own wait); other service
    // commands answer at once.
    auto limit = cmd == "run" || cmd == "attach"
                   ? std::chrono::seconds(24 * 3600)
                   : seconds(60);
    self->request(it->second, limit, console_atom::value, cmd, arg)
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

} // namespace

caf::message_handler console_handlers(self_ptr self) {
  return {
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
                      {"queue_depth", std::to_string(self->mailbox().size())},
                      {"actors_running",
                       std::to_string(self->system().registry().running())}};
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
        s.summary = std::to_string(st.peers.size()) + " peers, coordinator " +
                    st.table->coordinator();
        s.fields = {{"peers", std::to_string(st.peers.size())},
                    {"joins_accepted", std::to_string(st.joins_accepted)},
                    {"joins_refused", std::to_string(st.joins_refused)},
                    {"last_refusal", st.last_refusal},
                    {"queue_depth", std::to_string(self->mailbox().size())},
                    // Every actor of the process (a leak shows here).
                    {"actors_running",
                     std::to_string(self->system().registry().running())}};
        return s;
      },
      [self](console_atom, std::string& cmd,
             std::string& arg) -> caf::result<console_reply> {
        if (!is_client(self) && !is_local(self) && !is_peer(self))
          return denied();
        if (cmd.size() > 64 || arg.size() > 4096)
          return make_exo_error(exo_errc::invalid_argument, "command too long");
        if (is_client(self) && !is_local(self) && !is_peer(self))
          if (auto err = check_client(self, cmd, arg))
            return err;
        return run_command(self, cmd, arg);
      },
  };
}

} // namespace exo::cluster::detail
