// Joining and admission: the handshake both ways (we connect to seeds and
// members; nodes and console clients join us), proven with certificates of
// the cluster CA over the TLS connection.

#include "actors/cluster/gate_state.hpp"

#include "core/tls/private_key.hpp"
#include "core/tls/trust_store.hpp"
#include "messages/errors.hpp"

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <algorithm>
#include <set>

namespace exo::cluster::detail {

using namespace std::chrono;

namespace {

/// A refused join is an attempt on the cluster: audited with the name the
/// peer claimed (cut to 128 bytes: it is the peer's text) and the reason.
void audit_join_refused(self_ptr self, const std::string& claimed,
                        const std::string& why) {
  audit::event ev;
  ev.type = audit::event_type::join_refused;
  ev.level = audit::severity::warning;
  ev.details = {{"claimed", claimed.substr(0, 128)}, {"reason", why}};
  send_audit(self, ev, {});
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

void accept_peer(self_ptr self, const std::string& name, caf::actor peer) {
  auto& st = self->state;
  if (auto it = st.peers.find(name); it != st.peers.end()) {
    if (it->second == peer)
      return;
    drop_peer(self, name);
  }
  st.peer_names[peer.address()] = name;
  self->monitor(peer);
  auto node = peer.node();
  st.former.erase(node);
  st.peers[name] = std::move(peer);
  release_held(self); // messages that waited for this connection
  release_inbound(self, &node, name); // what its node sent meanwhile
}

void backoff(self_ptr self, const std::string& key,
             const std::string& why = "") {
  auto& st = self->state;
  // A lost member we could not reach again is dead.
  if (auto it = st.suspects.find(key); it != st.suspects.end()) {
    auto name = it->second;
    st.suspects.erase(it);
    mark_dead(self, name, "connection lost" + (why.empty() ? "" : ": " + why));
  }
  auto& a = st.attempts[key];
  a.in_flight = false;
  a.next_try = steady::now() + a.delay;
  a.delay = std::min(a.delay * 2, milliseconds{5000});
}

/// The handshake with `node` (as the dialer) ended, either way.
void joined_or_not(self_ptr self, const caf::node_id& node) {
  auto& j = self->state.joining;
  if (auto it = j.find(node); it != j.end() && --it->second <= 0)
    j.erase(it);
}

void handshake(self_ptr self, caf::actor peer, std::string key) {
  auto& st = self->state;
  ++st.joining[peer.node()];
  auto nonce_j = tls::make_nonce();
  join_hello hello{st.cfg.name, to_bytes(nonce_j), false};
  self->request(peer, st.cfg.connect_timeout, join_atom::value, hello)
      .then(
          [self, peer, key, nonce_j](join_challenge& c) {
            auto& st = self->state;
            std::string responder;
            tls::nonce nonce_r{};
            try {
              if (!member_table::valid_name(c.responder) ||
                  !to_nonce(c.nonce, nonce_r) ||
                  c.cert_pem.size() > tls::max_peer_cert_size ||
                  c.signature.size() > tls::max_signature_size)
                throw std::runtime_error("malformed challenge");
              responder =
                  tls::verify_join(c.cert_pem, *st.cfg.ca, nonce_j, c.responder,
                                   st.cfg.name, c.signature);
            } catch (const std::exception& e) {
              joined_or_not(self, peer.node());
              st.log("refusing " + key + ": " + e.what());
              backoff(self, key);
              return;
            }
            if (responder == st.cfg.name) {
              joined_or_not(self, peer.node());
              if (c.cert_pem == st.cfg.cert_pem) {
                // A seed that is ourselves: never try it again.
                st.attempts[key].is_self = true;
                st.attempts[key].in_flight = false;
              } else {
                st.log("the name \"" + responder +
                       "\" is in use by a live member at " + key);
                backoff(self, key);
              }
              return;
            }
            join_proof proof;
            proof.claimed = st.cfg.name;
            proof.cert_pem = st.cfg.cert_pem;
            proof.signature =
                tls::sign_join(*st.cfg.key, nonce_r, st.cfg.name, responder);
            proof.self = self_info(self);
            self->request(peer, st.cfg.connect_timeout, prove_atom::value,
                          proof)
                .then(
                    [self, peer, key, responder](member_view& v) {
                      auto& st = self->state;
                      joined_or_not(self, peer.node());
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
                      discount_hearsay(self, v, responder, now);
                      st.table->merge(v, now);
                      st.table->revive(responder, now);
                      std::uint64_t seen = 0;
                      for (auto& m : v.members)
                        if (m.name == st.cfg.name)
                          seen = std::max(seen, m.incarnation);
                      if (st.table->accuses_self(v))
                        st.table->bump_incarnation(seen);
                      else // raised for us by the responder (rejoin)
                        st.table->adopt_incarnation(seen);
                      if (!known)
                        st.log("joined " + responder + " (" + key + ")");
                      connect_missing(self);
                    },
                    [self, peer, key, responder](caf::error& err) {
                      joined_or_not(self, peer.node());
                      auto why = self->system().render(err);
                      self->state.log("join refused by " + responder + ": " +
                                      why);
                      backoff(self, key, why);
                    });
          },
          [self, peer, key](caf::error& err) {
            joined_or_not(self, peer.node());
            auto why = self->system().render(err);
            self->state.log("no join answer from " + key + ": " + why);
            backoff(self, key, why);
          });
}

} // namespace

void drop_peer(self_ptr self, const std::string& name) {
  auto& st = self->state;
  auto it = st.peers.find(name);
  if (it == st.peers.end())
    return;
  auto node = it->second.node();
  if (!st.former.count(node) && st.former.size() >= gate_state::max_former)
    st.former.erase(st.former.begin());
  st.former[node] = former_peer{name, it->second, {}};
  st.peer_names.erase(it->second.address());
  self->demonitor(it->second);
  st.peers.erase(it);
}

/// Connects to every seed and every alive member we have no link to.
void connect_missing(self_ptr self) {
  auto& st = self->state;
  for (auto& seed : st.cfg.seeds) {
    // A seed we know by name follows the member rule below, unless that
    // member is gone (then the seed may have restarted: try it again).
    auto key = seed.host + ":" + std::to_string(seed.port);
    auto it = st.attempts.find(key);
    if (it != st.attempts.end() && !it->second.peer.empty() &&
        st.table->alive(it->second.peer) && !(st.cfg.name < it->second.peer))
      continue;
    try_connect(self, seed.host, seed.port);
  }
  // Of two members, the one with the smaller name connects: one
  // connection per pair, never two racing ones.
  auto v = st.table->view();
  for (auto& m : v.members)
    if (st.cfg.name < m.name && m.status == member_status::alive &&
        !st.peers.count(m.name))
      try_connect(self, m.host, m.port);
}

void rejoin_peer(self_ptr self, const std::string& name) {
  auto& st = self->state;
  auto it = st.peers.find(name);
  auto* m = st.table->find(name);
  if (it == st.peers.end() || m == nullptr)
    return;
  auto key = m->host + ":" + std::to_string(m->port);
  auto& a = st.attempts[key];
  if (a.in_flight)
    return;
  a.in_flight = true;
  st.suspects[key] = name; // no answer: dead
  handshake(self, it->second, key);
}

void redial_refuted(self_ptr self, const member_view& v) {
  auto& st = self->state;
  for (auto& name : st.table->contradicted(v)) {
    if (st.peers.count(name))
      continue;
    auto* m = st.table->find(name);
    if (m != nullptr)
      try_connect(self, m->host, m->port);
  }
}

void try_connect(self_ptr self, const std::string& host, std::uint16_t port) {
  auto& st = self->state;
  auto key = host + ":" + std::to_string(port);
  if (port == st.cfg.port &&
      (host == st.cfg.host || host == "127.0.0.1" || host == "localhost"))
    return; // ourselves
  auto& a = st.attempts[key];
  if (a.is_self || a.in_flight || steady::now() < a.next_try)
    return;
  if (!a.peer.empty() && st.peers.count(a.peer))
    return; // already joined through this address
  a.in_flight = true;
  auto mm = self->system().openssl_manager().actor_handle();
  self->request(mm, st.cfg.connect_timeout, caf::connect_atom::value, host,
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

caf::message_handler join_handlers(self_ptr self) {
  return {
      // A peer gate says it dropped us (hint_former): join it again.
      [self](join_atom) {
        if (!is_peer(self))
          return;
        auto name = sender_member(self);
        self->state.log("joining " + name
                        + " again: it no longer holds us a member");
        rejoin_peer(self, name);
      },
      // Open to anyone holding a certificate of the cluster CA.
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
        c.signature =
            tls::sign_join(*st.cfg.key, theirs, st.cfg.name, h.claimed);
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
          audit_join_refused(self, p.claimed, why);
          return make_exo_error(exo_errc::access_denied, why);
        };
        if (it == st.pending.end() || it->second.claimed != p.claimed)
          return refuse("no join in progress for this name");
        auto pend = it->second;
        st.pending.erase(it);
        if (p.cert_pem.size() > tls::max_peer_cert_size ||
            p.signature.size() > tls::max_signature_size)
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
        if (live != st.peers.end() && live->second.address() != sender &&
            st.table->alive(p.claimed))
          return refuse("the name \"" + p.claimed +
                        "\" is in use by a live member");
        accept_peer(self, p.claimed, caf::actor_cast<caf::actor>(sender_ptr));
        auto now = steady::now();
        bool fresh = st.table->rejoin(p.self, now);
        ++st.joins_accepted;
        if (fresh)
          st.log("member " + p.claimed + " joined from " + p.self.host + ":" +
                 std::to_string(p.self.port));
        return st.table->view();
      },
  };
}

} // namespace exo::cluster::detail
