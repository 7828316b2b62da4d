#include "actors/access/access_actor.hpp"

#include "core/console/commands.hpp"
#include "core/access/audit_event.hpp"
#include "core/access/revocation_store.hpp"
#include "core/access/revocation_sync.hpp"
#include "core/audit/event.hpp"
#include "core/text/file.hpp"
#include "core/text/json.hpp"
#include "core/text/number.hpp"
#include "messages/access.hpp"
#include "messages/audit.hpp"
#include "messages/cluster.hpp"

#include <caf/all.hpp>

#include <openssl/rand.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace exo::access {

std::string load_or_create_key(const std::string& path) {
  // The key signs every token: it is created 0600 and refused when other
  // users may read or change it (text::check_private says how to fix it).
  if (!text::file_exists(path)) {
    std::uint8_t raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1)
      throw std::runtime_error(path + ": no random bytes for a key");
    static const char* hex = "0123456789abcdef";
    std::string fresh;
    for (auto b : raw) {
      fresh += hex[b >> 4];
      fresh += hex[b & 15];
    }
    fresh += '\n';
    text::create_private(path, fresh, "access key");
  }
  text::check_private(path, "access key");
  auto key = text::read_file(path, 64 * 1024, "access key");
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back())))
    key.pop_back();
  if (key.size() < 32)
    throw std::runtime_error(path + ": the access key must have at least 32 "
                                    "bytes");
  return key;
}

namespace {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string new_token_id() {
  std::uint8_t raw[12];
  RAND_bytes(raw, sizeof raw);
  static const char* hex = "0123456789abcdef";
  std::string id = "t";
  for (auto b : raw) {
    id += hex[b >> 4];
    id += hex[b & 15];
  }
  return id;
}

} // namespace

std::string issue_admin_token(const std::string& key,
                              const std::string& principal,
                              std::int64_t ttl_s) {
  token_claims c;
  c.id = new_token_id();
  c.principal = principal;
  c.granted_role = role::admin;
  c.all_devices = true;
  c.issued_at = unix_now();
  c.expires_at = c.issued_at + ttl_s;
  return token_issuer{key}.issue(c);
}

namespace {

struct access_state {
  static inline const char* name = "exo.access";
  access_actor_config cfg;
  std::unique_ptr<token_issuer> issuer;
  std::uint64_t issued = 0;
  std::uint64_t revoked = 0;
  std::uint64_t refused = 0;
  /// Revocation catch-up (revocation_sync.hpp): what this node knows, and
  /// the incarnation of each member it exchanged lists with.
  std::unique_ptr<hmac_sha256> sync_mac;
  revocation_set known;
  std::map<std::string, std::uint64_t> synced;
  std::set<std::string> syncing;
  std::uint64_t sync_learned = 0;
  std::uint64_t sync_rejected = 0;
  std::uint64_t limits_set = 0;
};

using self_ptr = caf::stateful_actor<access_state>*;

void audit_event(access_state& st, const audit::event& ev,
                 const std::string& principal) {
  if (!st.cfg.audit)
    return;
  audit_entry e;
  e.type = static_cast<std::uint8_t>(ev.type);
  e.level = static_cast<std::uint8_t>(ev.level);
  e.principal = principal;
  e.details = ev.details;
  e.details["node"] = st.cfg.node;
  caf::anon_send(st.cfg.audit, audit_atom::value, std::move(e));
}

caf::error usage(const std::string& why) {
  return caf::make_error(caf::sec::invalid_argument,
                         "token: " + why
                           + " (token issue principal=P role=R "
                             "[devices=a,b|*] [quota=SIZE] [ttl=DURATION] "
                             "auth=ADMIN | token revoke ID|principal=P "
                             "auth=ADMIN | token limit principal=P "
                             "rate=N[/s] [burst=B] auth=ADMIN | token limits "
                             "auth=TOKEN | token check TOKEN [perm=P] "
                             "[device=D])");
}

/// The admin behind `auth`, or an (audited) refusal.
caf::expected<std::string>
admin_of(access_state& st, const std::map<std::string, std::string>& kv) {
  auto it = kv.find("auth");
  decision d;
  if (it == kv.end()) {
    d.code = decision_code::malformed;
    d.reason = "no auth=ADMIN_TOKEN given";
  } else {
    d = st.cfg.policy->check(it->second, permission::policy_admin);
  }
  if (d)
    return d.principal;
  ++st.refused;
  audit_event(st, make_audit_event(d, permission::policy_admin), d.principal);
  return caf::make_error(caf::sec::invalid_argument,
                         "token: admin required: "
                           + std::string{to_string(d.code)} + ": "
                           + d.reason);
}

/// Applies a revocation to the policy, remembers it for catch-up, appends
/// it to the revocations file and audits it (token_revoked, and
/// policy_change: the node's policy changed). `relayed` is "false" (an
/// admin's command here), "true" (a peer's relay) or "sync" (catch-up from
/// `from`). Returns "true" when persisted, "false" without a file, else
/// why it was not.
std::string apply_revocation(access_state& st, const revocation& rev,
                             const std::string& admin,
                             const std::string& relayed,
                             const std::string& from) {
  if (rev.what == revocation::kind::principal)
    st.cfg.policy->revoke_principal(rev.name, rev.at);
  else
    st.cfg.policy->revoke_token(rev.name, rev.at);
  st.known.add(rev);
  ++st.revoked;
  std::string persisted = "true";
  if (!st.cfg.revocations_file.empty()) {
    try {
      revocation_store{st.cfg.revocations_file}.append(rev);
    } catch (const std::exception& e) {
      persisted = e.what();
    }
  } else {
    persisted = "false";
  }
  audit::event ev;
  ev.type = audit::event_type::token_revoked;
  if (rev.what == revocation::kind::principal) {
    ev.details["subject"] = rev.name;
    ev.details["through"] = std::to_string(rev.at);
  } else {
    ev.details["token_id"] = rev.name;
  }
  ev.details["relayed"] = relayed;
  ev.details["persisted"] = persisted;
  if (!from.empty())
    ev.details["from"] = from;
  audit_event(st, ev, admin);
  audit::event change;
  change.type = audit::event_type::policy_change;
  change.details = {{"change", "revocation_added"},
                    {"kind", rev.what == revocation::kind::principal
                               ? "principal"
                               : "token"},
                    {"name", rev.name},
                    {"relayed", relayed}};
  if (!from.empty())
    change.details["from"] = from;
  audit_event(st, change, admin);
  return persisted;
}

/// A rate or burst: a decimal number in [0, 1000000] with at most three
/// digits after the point, optionally followed by "/s" (so that the text
/// a node relays, number_text, is exactly what it applied).
bool parse_rate(std::string text, double& out) {
  if (text.size() > 2 && text.compare(text.size() - 2, 2, "/s") == 0)
    text.resize(text.size() - 2);
  if (text.empty() || text.size() > 16)
    return false;
  auto dot = text.find('.');
  auto digits = [](const std::string& t) {
    return !t.empty()
           && t.find_first_not_of("0123456789") == std::string::npos;
  };
  if (dot == std::string::npos ? !digits(text)
                               : !digits(text.substr(0, dot))
                                   || !digits(text.substr(dot + 1))
                                   || text.size() - dot - 1 > 3)
    return false;
  out = std::strtod(text.c_str(), nullptr);
  return std::isfinite(out) && out >= 0 && out <= 1e6;
}

/// A rate as parse_rate reads it: fixed point, trailing zeros dropped.
std::string number_text(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  std::string s = buf;
  while (s.back() == '0')
    s.pop_back();
  if (s.back() == '.')
    s.pop_back();
  return s;
}

/// Relays `relay` (a "token" command with relay=1) to every live peer
/// through the gate, then replies `r` with how many applied it.
caf::result<console_reply> broadcast(self_ptr self, console_reply r,
                                     std::string relay,
                                     const std::string& what) {
  auto& st = self->state;
  auto rp = self->make_response_promise<console_reply>();
  auto t0 = std::chrono::steady_clock::now();
  self
    ->request(st.cfg.gate, std::chrono::seconds(3), broadcast_atom::value,
              std::string{"token"}, std::move(relay))
    .then(
      [rp, r, t0, what](std::uint64_t peers) mutable {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
        r.text += "told " + std::to_string(peers) + " peers in "
                  + std::to_string(ms) + " ms\n";
        r.json = text::compact(
          {{what, true}, {"peers", peers}, {"broadcast_ms", ms}});
        rp.deliver(std::move(r));
      },
      [rp, r, what](caf::error&) mutable {
        r.text += "could not reach the peers\n";
        r.json = text::compact({{what, true}, {"peers", -1}});
        rp.deliver(std::move(r));
      });
  return rp;
}

caf::result<console_reply> handle(self_ptr self, const std::string& arg) {
  auto& st = self->state;
  console::parsed_command p;
  try {
    p = console::parse_command("token", arg);
  } catch (const console::command_error& e) {
    return usage(e.what());
  }
  const auto& sub = p.sub;
  // Options by name (auth= among them, empty when not given) and the
  // positional words, as the handlers below read them.
  auto kv = p.values;
  if (p.has_auth)
    kv["auth"] = p.auth;
  const auto& plain = p.args;
  console_reply r;
  r.command = "token";
  if (sub == "check") {
    if (plain.size() != 1)
      return usage("check needs one token");
    auto p = permission::device_info;
    if (auto it = kv.find("perm"); it != kv.end()) {
      auto parsed = parse_permission(it->second);
      if (!parsed)
        return usage("unknown permission \"" + it->second + "\"");
      p = *parsed;
    }
    auto dev = kv.count("device") ? kv["device"] : std::string{};
    auto d = st.cfg.policy->check(plain[0], p, dev);
    if (!d) {
      ++st.refused;
      audit_event(st, make_audit_event(d, p, dev), d.principal);
    }
    r.text = std::string{to_string(d.code)}
             + (d.reason.empty() ? "" : ": " + d.reason) + "\n";
    r.json = text::compact(
      {{"decision", to_string(d.code)}, {"principal", d.principal}});
    return r;
  }
  if (sub == "issue") {
    auto admin = admin_of(st, kv);
    if (!admin)
      return std::move(admin.error());
    token_claims c;
    c.id = new_token_id();
    c.principal = kv["principal"];
    if (c.principal.empty() || c.principal.size() > 128)
      return usage("principal=P required");
    auto role_name = kv.count("role") ? kv["role"] : std::string{"user"};
    auto ro = parse_role(role_name);
    if (!ro)
      return usage("unknown role \"" + role_name + "\"");
    c.granted_role = *ro;
    auto devs = kv.count("devices") ? kv["devices"] : std::string{"*"};
    if (devs == "*") {
      c.all_devices = true;
    } else {
      for (std::size_t b = 0, e = 0; b <= devs.size(); b = e + 1) {
        e = std::min(devs.find(',', b), devs.size());
        if (e > b)
          c.devices.push_back(devs.substr(b, e - b));
      }
    }
    // The table checked both with the strict parser (quota a size:
    // 4294967296 or 4GiB, never "4G" or "-1"; ttl whole seconds: 3600 or
    // 1h, never "1e9"); the range of ttl is this node's.
    c.quota_bytes = p.size("quota", c.quota_bytes);
    auto ttl_words = p.seconds("ttl", 86400);
    if (ttl_words > static_cast<std::uint64_t>(st.cfg.max_ttl_s))
      return usage("ttl must be in [1, " + std::to_string(st.cfg.max_ttl_s)
                   + "] seconds");
    auto ttl = static_cast<std::int64_t>(ttl_words);
    if (ttl <= 0 || ttl > st.cfg.max_ttl_s)
      return usage("ttl must be in [1, " + std::to_string(st.cfg.max_ttl_s)
                   + "] seconds");
    c.issued_at = unix_now();
    c.expires_at = c.issued_at + ttl;
    auto token = st.issuer->issue(c);
    ++st.issued;
    audit::event ev;
    ev.type = audit::event_type::token_issued;
    ev.details = {{"token_id", c.id},
                  {"subject", c.principal},
                  {"role", std::string{to_string(c.granted_role)}},
                  {"devices", devs},
                  {"expires_at", std::to_string(c.expires_at)}};
    audit_event(st, ev, *admin);
    r.text = token + "\n";
    r.json = text::compact({{"token", token}, {"id", c.id}});
    return r;
  }
  if (sub == "revoke") {
    auto admin = admin_of(st, kv);
    if (!admin)
      return std::move(admin.error());
    bool relayed = kv.count("relay") > 0;
    auto now = unix_now();
    revocation rev;
    if (kv.count("principal")) {
      // Through the revoking node's time: a relay carries it, bounded by
      // this node's own clock below and a minute of skew above.
      auto through = now;
      if (relayed && kv.count("through")) {
        try {
          auto given = text::parse_integer<std::int64_t>(kv["through"]);
          through = std::max(now, std::min(given, now + 60));
        } catch (const text::number_error& e) {
          return usage(std::string{"through: "} + e.what());
        }
      }
      rev = {revocation::kind::principal, kv["principal"], through};
    } else if (plain.size() == 1) {
      rev = {revocation::kind::token, plain[0], now + st.cfg.max_ttl_s};
    } else {
      return usage("revoke needs a token id or principal=P");
    }
    if (rev.name.empty() || rev.name.size() > 256)
      return usage("a token id or principal has 1 to 256 characters");
    auto persisted = apply_revocation(st, rev, *admin,
                                      relayed ? "true" : "false", "");
    r.text = "revoked on " + st.cfg.node + "\n";
    if (persisted != "true" && !st.cfg.revocations_file.empty())
      r.text += "warning: not persisted: " + persisted + "\n";
    if (relayed || !st.cfg.gate) {
      r.json = text::compact({{"revoked", true}, {"peers", 0}});
      return r;
    }
    auto relay = "revoke "
                 + (rev.what == revocation::kind::principal
                      ? "principal=" + rev.name
                          + " through=" + std::to_string(rev.at)
                      : rev.name)
                 + " auth=" + kv["auth"] + " relay=1";
    return broadcast(self, std::move(r), std::move(relay), "revoked");
  }
  if (sub == "limit") {
    auto admin = admin_of(st, kv);
    if (!admin)
      return std::move(admin.error());
    bool relayed = kv.count("relay") > 0;
    auto principal = kv["principal"];
    if (principal.empty() || principal.size() > 128)
      return usage("limit needs principal=P (1 to 128 characters)");
    if (!kv.count("rate"))
      return usage("limit needs rate=N (operations per second, 0: none)");
    double rate = 0, burst = 0;
    if (!parse_rate(kv["rate"], rate))
      return usage("rate=\"" + kv["rate"].substr(0, 32)
                   + "\" is not a number of operations per second in [0, "
                     "1000000] with at most 3 decimals (e.g. rate=5/s)");
    burst = std::max(1.0, std::ceil(rate));
    if (kv.count("burst") && !parse_rate(kv["burst"], burst))
      return usage("burst must be a number in [1, 1000000] with at most 3 "
                   "decimals");
    if (rate > 0 && burst < 1)
      return usage("burst must be a number in [1, 1000000] with at most 3 "
                   "decimals");
    try {
      st.cfg.policy->set_rate_limit(principal, rate, burst);
    } catch (const std::invalid_argument& e) {
      return usage(e.what());
    }
    ++st.limits_set;
    audit::event change;
    change.type = audit::event_type::policy_change;
    change.details = {{"change", "rate_limit"},
                      {"subject", principal},
                      {"rate_per_s", number_text(rate)},
                      {"burst", number_text(burst)},
                      {"relayed", relayed ? "true" : "false"}};
    audit_event(st, change, *admin);
    r.text = "rate limit of " + principal + " on " + st.cfg.node + ": "
             + (rate > 0 ? number_text(rate) + "/s, burst "
                             + number_text(burst)
                         : std::string{"none"})
             + "\n";
    if (relayed || !st.cfg.gate) {
      r.json = text::compact({{"limited", true}, {"peers", 0}});
      return r;
    }
    return broadcast(self, std::move(r),
                     "limit principal=" + principal + " rate="
                       + number_text(rate) + " burst=" + number_text(burst)
                       + " auth=" + kv["auth"] + " relay=1",
                     "limited");
  }
  if (sub == "limits") {
    auto it = kv.find("auth");
    decision d;
    if (it == kv.end()) {
      d.code = decision_code::malformed;
      d.reason = "no auth=TOKEN given";
    } else {
      d = st.cfg.policy->check(it->second, permission::monitoring_read);
    }
    if (!d) {
      ++st.refused;
      audit_event(st, make_audit_event(d, permission::monitoring_read),
                  d.principal);
      return caf::make_error(caf::sec::invalid_argument,
                             "token limits: " + std::string{to_string(d.code)}
                               + ": " + d.reason);
    }
    auto def = st.cfg.policy->default_rate_limit();
    auto line = [](const rate_limit_info& l) {
      return l.principal + " "
             + (l.rate_per_s > 0 ? number_text(l.rate_per_s) + "/s burst "
                                     + number_text(l.burst)
                                 : std::string{"unlimited"})
             + "\n";
    };
    r.text = "PRINCIPAL RATE on " + st.cfg.node + "\n" + line(def);
    text::json limits = text::json::array();
    auto all = st.cfg.policy->rate_limits();
    all.insert(all.begin(), def);
    for (auto& l : all) {
      if (&l != &all.front())
        r.text += line(l);
      limits.push_back({{"principal", l.principal},
                        {"rate_per_s", text::number(l.rate_per_s)},
                        {"burst", text::number(l.burst)}});
    }
    r.json = text::compact({{"node", st.cfg.node}, {"limits", limits}});
    return r;
  }
  return usage("unknown subcommand \"" + sub + "\"");
}

/// (resync_atom): poll the member view for members to exchange revocation
/// lists with (revocation_sync.hpp). Sent to the actor itself only.
using resync_atom = caf::atom_constant<caf::atom("resync")>;

/// Applies the entries of a peer's list that this node lacks; returns the
/// valid entries the list held (to answer with what the peer lacks), or
/// an error when the list was refused whole.
caf::expected<std::vector<revocation>>
learn(access_state& st, const std::string& text, const std::string& from) {
  auto d = decode_revocations(text, *st.sync_mac, unix_now(),
                              st.cfg.max_ttl_s);
  if (!d.error.empty()) {
    ++st.sync_rejected;
    return caf::make_error(caf::sec::invalid_argument,
                           "token sync: " + d.error);
  }
  st.sync_rejected += d.rejected;
  for (auto& rev : d.accepted) {
    if (st.known.knows(rev))
      continue;
    apply_revocation(st, rev, "", "sync", from);
    ++st.sync_learned;
  }
  return std::move(d.accepted);
}

/// Sends `peer` this node's revocation list through the gate; applies
/// the entries it answers with (those this node lacked).
void sync_with(self_ptr self, const std::string& peer,
               std::uint64_t incarnation) {
  auto& st = self->state;
  st.syncing.insert(peer);
  st.known.sweep(unix_now(), st.cfg.max_ttl_s);
  auto text = encode_revocations(st.known.entries(), *st.sync_mac);
  self
    ->request(st.cfg.gate, std::chrono::seconds(5), service_atom::value, peer,
              std::string{"token"},
              caf::make_message(token_atom::value, st.cfg.node,
                                std::move(text)))
    .then(
      [self, peer, incarnation](std::string& missing) {
        auto& st = self->state;
        st.syncing.erase(peer);
        if (learn(st, missing, peer))
          st.synced[peer] = incarnation;
      },
      [self, peer](caf::error&) {
        // Not reachable yet (e.g. the gate has not connected): retried
        // at the next poll.
        self->state.syncing.erase(peer);
      });
}

void poll_members(self_ptr self) {
  auto& st = self->state;
  self
    ->request(st.cfg.gate, std::chrono::seconds(2), console_atom::value,
              std::string{"nodes"}, std::string{})
    .then(
      [self](console_reply& r) {
        auto& st = self->state;
        std::set<std::string> alive;
        for (auto& m : r.nodes.members) {
          if (m.name == st.cfg.node || m.status != member_status::alive)
            continue;
          alive.insert(m.name);
          auto it = st.synced.find(m.name);
          if ((it == st.synced.end() || it->second != m.incarnation)
              && !st.syncing.count(m.name))
            sync_with(self, m.name, m.incarnation);
        }
        // A member that is gone is synced again when it comes back.
        for (auto it = st.synced.begin(); it != st.synced.end();)
          it = alive.count(it->first) ? std::next(it) : st.synced.erase(it);
      },
      [](caf::error&) {});
}

caf::behavior access_impl(self_ptr self, access_actor_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.issuer = std::make_unique<token_issuer>(st.cfg.key);
  st.sync_mac = std::make_unique<hmac_sha256>(st.cfg.key);
  // What the node knows already (start_safety applied the same file).
  if (!st.cfg.revocations_file.empty()) {
    try {
      revocation_store store{st.cfg.revocations_file};
      for (auto& rev : store.load(unix_now(), st.cfg.max_ttl_s))
        st.known.add(rev);
    } catch (const std::exception&) {
      // start_safety refused to start on an unreadable file already.
    }
  }
  self->delayed_send(self, st.cfg.sweep_interval, tick_atom::value);
  if (st.cfg.gate && st.cfg.sync_interval.count() > 0)
    self->send(self, resync_atom::value);
  return {
    [self](console_atom, const std::string&,
           const std::string& arg) -> caf::result<console_reply> {
      return handle(self, arg);
    },
    [self](tick_atom) {
      // Not audited: a sweep forgets only what can no longer matter
      // (expired tokens' cache entries and revocations, idle principals).
      self->state.cfg.policy->sweep();
      self->delayed_send(self, self->state.cfg.sweep_interval,
                         tick_atom::value);
    },
    [self](resync_atom) {
      poll_members(self);
      self->delayed_send(self, self->state.cfg.sync_interval,
                         resync_atom::value);
    },
    // A peer's revocation list (through its gate's service_atom, which
    // only authenticated peers reach); answered with what the peer lacks.
    [self](token_atom, const std::string& from,
           const std::string& text) -> caf::result<std::string> {
      auto& st = self->state;
      auto theirs = learn(st, text, from.substr(0, 64));
      if (!theirs)
        return std::move(theirs.error());
      return encode_revocations(st.known.missing_from(*theirs),
                                *st.sync_mac);
    },
    [self](inspect_atom) {
      auto& st = self->state;
      actor_snapshot snap;
      snap.name = "access";
      snap.kind = "access";
      snap.node = st.cfg.node;
      snap.summary = std::to_string(st.cfg.policy->cache_size())
                     + " cached tokens";
      snap.fields = {{"issued", std::to_string(st.issued)},
                     {"revoked", std::to_string(st.revoked)},
                     {"refused", std::to_string(st.refused)},
                     {"revocations_known", std::to_string(st.known.size())},
                     {"sync_learned", std::to_string(st.sync_learned)},
                     {"sync_rejected", std::to_string(st.sync_rejected)},
                     {"limits_set", std::to_string(st.limits_set)}};
      return snap;
    },
  };
}

} // namespace

caf::actor spawn_access_actor(caf::actor_system& sys,
                              access_actor_config cfg) {
  return sys.spawn(access_impl, std::move(cfg));
}

} // namespace exo::access
