// Heartbeats, gossip and failure detection (a member table merged from
// every peer's view; silence past failure_timeout or a failed reconnect is
// death), and the periodic measurement of links to every peer.

#include "actors/cluster/gate_state.hpp"
#include "core/tls/hello.hpp"

#include "actors/topology/topology_actor.hpp"

#include <algorithm>

namespace exo::cluster::detail {

using namespace std::chrono;

namespace {

/// One heartbeat: gossip to every peer, expire the silent, connect.
/// A member the table forgot leaves nothing in the gate either: our record
/// no longer lists a link to it, its address is no longer dialled (unless
/// it is a seed), its discounted verdicts go.
void forget_peer_state(gate_state& st, const std::string& name) {
  st.links.erase(name);
  std::set<std::string> seeds;
  for (auto& sd : st.cfg.seeds)
    seeds.insert(sd.host + ":" + std::to_string(sd.port));
  for (auto it = st.attempts.begin(); it != st.attempts.end();)
    it = it->second.peer == name && !seeds.count(it->first)
           ? st.attempts.erase(it)
           : std::next(it);
  for (auto it = st.discounted.begin(); it != st.discounted.end();) {
    auto slash = it->find('/');
    bool about = it->substr(0, slash) == name
                 || (slash != std::string::npos
                     && it->substr(slash + 1) == name);
    it = about ? st.discounted.erase(it) : std::next(it);
  }
}

void tick(self_ptr self) {
  auto& st = self->state;
  ++st.ticks;
  auto now = steady::now();
  // This node was paused (SIGSTOP, a suspended VM) for longer than the
  // failure timeout: the others' silence was ours. Declaring them all dead
  // on waking made a thawed node gossip stale verdicts that partitioned
  // the cluster; it hears from them again (or declares them dead) within
  // a failure timeout from now.
  // The others may have declared us dead and dropped us meanwhile (then
  // nothing of theirs reaches us): every connected peer is asked to take
  // us back with a join over its connection; one that does not answer
  // within the connect timeout is dead.
  if (st.ticks > 1 && now - st.last_tick > st.cfg.failure_timeout) {
    st.table->heard_from_all(now);
    st.log("was paused for "
           + std::to_string(duration_cast<milliseconds>(now - st.last_tick)
                              .count())
           + " ms: the members' silence is not held against them; joining "
             "them again");
    std::vector<std::string> names;
    for (auto& [name, peer] : st.peers)
      names.push_back(name);
    for (auto& name : names)
      rejoin_peer(self, name);
  }
  st.last_tick = now;
  for (auto& name : st.table->expire(now, st.cfg.failure_timeout)) {
    drop_peer(self, name);
    st.log("member " + name + " is dead: no heartbeat");
  }
  for (auto& name : st.table->forget_departed(now, st.cfg.forget_departed)) {
    forget_peer_state(st, name);
    st.log("member " + name
           + " forgotten (departed longer than network.forget_departed_ms)");
  }
  auto v = st.table->view();
  for (auto& [name, peer] : st.peers)
    self->send(peer, gossip_atom::value, v);
  release_inbound(self, nullptr); // refuse what waited too long
  // Forget half-finished joins nobody completed.
  for (auto it = st.pending.begin(); it != st.pending.end();)
    it = it->second.deadline < now ? st.pending.erase(it) : std::next(it);
  connect_missing(self);
  discovery_tick(self);
  // Refresh our devices every second or so.
  auto every = std::max<std::int64_t>(
      1, 1000 / std::max<std::int64_t>(1, st.cfg.heartbeat.count()));
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

} // namespace

void start_discovery(self_ptr self) {
  auto& st = self->state;
  const auto& d = st.cfg.discovery;
  if (!d.enabled || st.beacon || !lan::announceable(st.cfg.host)
      || st.cfg.cluster_id.empty() || !st.cfg.key)
    return;
  try {
    st.beacon = std::make_unique<lan::beacon>(d.group, d.port, st.cfg.host);
    st.next_hello = steady::now();
    st.log("discovery: announcing on " + d.group + ":"
           + std::to_string(d.port) + " from " + st.cfg.host);
  } catch (const std::exception& e) {
    st.log(std::string{e.what()} + " (seeds only)");
  }
}

void discovery_tick(self_ptr self) {
  auto& st = self->state;
  if (!st.beacon)
    return;
  auto now = steady::now();
  const auto unix_ms = duration_cast<milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  if (now >= st.next_hello) {
    st.next_hello = now + st.cfg.discovery.interval;
    tls::hello_info me{st.cfg.name, st.cfg.host, st.cfg.port};
    try {
      st.beacon->send(tls::make_hello(*st.cfg.key, st.cfg.cert_pem,
                                      st.cfg.cluster_id, me, unix_ms));
    } catch (const std::exception& e) {
      st.log(std::string{"discovery: cannot sign a hello: "} + e.what());
    }
  }
  for (auto& d : st.beacon->receive(64, tls::max_hello_size)) {
    std::string why;
    auto h = tls::check_hello(d, *st.cfg.ca, st.cfg.cluster_id, unix_ms, why);
    if (!h) {
      // Another cluster's hellos are expected on a shared LAN: count them,
      // say nothing.
      ++st.hellos_refused;
      continue;
    }
    if (h->name == st.cfg.name || st.table->alive(h->name))
      continue;
    try_connect(self, h->host, h->port);
  }
}

void discount_hearsay(self_ptr self, member_view& v, const std::string& from,
                      steady::time_point now) {
  auto& st = self->state;
  std::vector<std::string> connected;
  for (auto& [name, peer] : st.peers)
    connected.push_back(name);
  for (auto& name :
       st.table->discount_hearsay(v, now, st.cfg.failure_timeout, connected)) {
    // Said once per member and gossiper, not at every heartbeat.
    if (st.discounted.insert(from + "/" + name).second)
      st.log("ignored " + from + "'s verdict that " + name
             + " is dead: connected to it and heard from it within the "
               "failure timeout (the verdict is about "
             + from + "'s own link)");
  }
}

void mark_dead(self_ptr self, const std::string& name,
               const std::string& reason) {
  auto& st = self->state;
  drop_peer(self, name);
  if (st.table->mark(name, member_status::dead, reason))
    st.log("member " + name + " is dead: " + reason);
  notify_watchers(self);
}

/// Asks the topology actor to measure every peer; calls `then` with all
/// links once all are done (a failed measurement is left out).
void measure_all(self_ptr self,
                 std::function<void(std::vector<link_info>)> then,
                 bool fresh) {
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
    self->request(st.topology, seconds(30), measure_atom::value, st.cfg.name,
                  name, peer, fresh)
        .then(
            [self, results, finish_one](link_info& l) {
              self->state.links[l.to] = l;
              results->push_back(l);
              finish_one();
            },
            [finish_one](caf::error&) { finish_one(); });
}

void on_down(self_ptr self, caf::down_msg& dm) {
  auto& st = self->state;
  auto& ws = st.watchers;
  ws.erase(std::remove_if(ws.begin(), ws.end(),
                          [&](const caf::actor& w) {
                            return w.address() == dm.source;
                          }),
           ws.end());
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
}

caf::message_handler health_handlers(self_ptr self) {
  return {
      [self](tick_atom) {
        tick(self);
        notify_watchers(self);
        release_held(self);
        self->delayed_send(self, self->state.cfg.heartbeat, tick_atom::value);
      },
      [self](measure_atom) {
        measure_all(self, [](std::vector<link_info>) {});
        self->delayed_send(self, self->state.cfg.measure_interval,
                           measure_atom::value);
      },
      [self](gossip_atom, member_view& v) {
        auto& st = self->state;
        if (!is_peer(self)) {
          hint_former(self); // a gate we dropped: it should join again
          return;
        }
        auto name = sender_member(self);
        if (auto err = member_table::validate(v)) {
          st.log("ignored gossip from " + name + ": " + *err);
          return;
        }
        ++st.gossip_in;
        auto now = steady::now();
        st.table->heard_from(name, now);
        discount_hearsay(self, v, name, now);
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
          if (m.status != member_status::alive && m.name != st.cfg.name &&
              st.table->alive(m.name))
            was_alive.push_back(m.name);
        st.table->merge(v, now);
        for (auto& m : v.members)
          if (m.status != member_status::alive && st.peers.count(m.name) &&
              m.name != name && !st.table->alive(m.name))
            drop_peer(self, m.name);
        redial_refuted(self, v);
        // A verdict learned by gossip is logged like one of our own, so the
        // log tells when each node learned of each death.
        for (auto& gone : was_alive)
          if (auto* m = st.table->find(gone); m && !st.table->alive(gone))
            st.log("member " + gone +
                   (m->status == member_status::left ? " left" : " is dead") +
                   ": reported by " + name);
      },
  };
}

} // namespace exo::cluster::detail
