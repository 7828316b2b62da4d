#include "actors/access/access_actor.hpp"

#include "actors/access/audit_event.hpp"
#include "actors/access/revocation_store.hpp"
#include "actors/audit/event.hpp"
#include "messages/access.hpp"
#include "messages/audit.hpp"
#include "messages/cluster.hpp"

#include <caf/all.hpp>

#include <openssl/rand.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace exo::access {

std::string load_or_create_key(const std::string& path) {
  std::ifstream in{path};
  if (!in) {
    std::uint8_t raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1)
      throw std::runtime_error(path + ": no random bytes for a key");
    static const char* hex = "0123456789abcdef";
    std::string text;
    for (auto b : raw) {
      text += hex[b >> 4];
      text += hex[b & 15];
    }
    text += '\n';
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
      throw std::runtime_error(path + ": cannot create the access key");
    auto n = ::write(fd, text.data(), text.size());
    ::fsync(fd);
    ::close(fd);
    if (n != static_cast<ssize_t>(text.size()))
      throw std::runtime_error(path + ": cannot write the access key");
    in.open(path);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto key = ss.str();
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
                             "[devices=a,b|*] [quota=BYTES] [ttl=S] "
                             "auth=ADMIN | token revoke ID|principal=P "
                             "auth=ADMIN | token check TOKEN [perm=P] "
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

caf::result<console_reply> handle(self_ptr self, const std::string& arg) {
  auto& st = self->state;
  std::istringstream in{arg};
  std::string sub;
  in >> sub;
  std::map<std::string, std::string> kv;
  std::vector<std::string> plain;
  std::string w;
  while (in >> w) {
    auto eq = w.find('=');
    if (eq == std::string::npos)
      plain.push_back(w);
    else
      kv[w.substr(0, eq)] = w.substr(eq + 1);
  }
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
    r.json = "{\"decision\":\"" + std::string{to_string(d.code)}
             + "\",\"principal\":\"" + d.principal + "\"}";
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
      std::istringstream ds{devs};
      std::string d;
      while (std::getline(ds, d, ','))
        if (!d.empty())
          c.devices.push_back(d);
    }
    std::int64_t ttl = 86400;
    try {
      if (kv.count("quota"))
        c.quota_bytes = std::stoull(kv["quota"]);
      if (kv.count("ttl"))
        ttl = std::stoll(kv["ttl"]);
    } catch (...) {
      return usage("quota and ttl must be integers");
    }
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
    r.json = "{\"token\":\"" + token + "\",\"id\":\"" + c.id + "\"}";
    return r;
  }
  if (sub == "revoke") {
    auto admin = admin_of(st, kv);
    if (!admin)
      return std::move(admin.error());
    audit::event ev;
    ev.type = audit::event_type::token_revoked;
    bool relayed = kv.count("relay") > 0;
    auto now = unix_now();
    revocation rev;
    if (kv.count("principal")) {
      // Through the revoking node's time: a relay carries it, bounded by
      // this node's own clock below and a minute of skew above.
      auto through = now;
      if (relayed && kv.count("through")) {
        try {
          std::int64_t given = std::stoll(kv["through"]);
          through = std::max(now, std::min(given, now + 60));
        } catch (...) {
          return usage("through must be an integer");
        }
      }
      rev = {revocation::kind::principal, kv["principal"], through};
      ev.details["subject"] = kv["principal"];
      ev.details["through"] = std::to_string(through);
    } else if (plain.size() == 1) {
      rev = {revocation::kind::token, plain[0], now + st.cfg.max_ttl_s};
      ev.details["token_id"] = plain[0];
    } else {
      return usage("revoke needs a token id or principal=P");
    }
    if (rev.name.empty() || rev.name.size() > 256)
      return usage("a token id or principal has 1 to 256 characters");
    if (rev.what == revocation::kind::principal)
      st.cfg.policy->revoke_principal(rev.name, rev.at);
    else
      st.cfg.policy->revoke_token(rev.name, rev.at);
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
    ev.details["relayed"] = relayed ? "true" : "false";
    ev.details["persisted"] = persisted;
    audit_event(st, ev, *admin);
    // The node's policy changed (a revocation entry): policy_change, apart
    // from token_revoked, which records the admin's act.
    audit::event change;
    change.type = audit::event_type::policy_change;
    change.details = {{"change", "revocation_added"},
                      {"kind", rev.what == revocation::kind::principal
                                 ? "principal"
                                 : "token"},
                      {"name", rev.name},
                      {"relayed", relayed ? "true" : "false"}};
    audit_event(st, change, *admin);
    r.text = "revoked on " + st.cfg.node + "\n";
    if (persisted != "true" && !st.cfg.revocations_file.empty())
      r.text += "warning: not persisted: " + persisted + "\n";
    if (relayed || !st.cfg.gate) {
      r.json = "{\"revoked\":true,\"peers\":0}";
      return r;
    }
    auto relay = "revoke "
                 + (rev.what == revocation::kind::principal
                      ? "principal=" + rev.name
                          + " through=" + std::to_string(rev.at)
                      : rev.name)
                 + " auth=" + kv["auth"] + " relay=1";
    auto rp = self->make_response_promise<console_reply>();
    auto t0 = std::chrono::steady_clock::now();
    self
      ->request(st.cfg.gate, std::chrono::seconds(3), broadcast_atom::value,
                std::string{"token"}, std::move(relay))
      .then(
        [rp, r, t0](std::uint64_t peers) mutable {
          auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
          r.text += "told " + std::to_string(peers) + " peers in "
                    + std::to_string(ms) + " ms\n";
          r.json = "{\"revoked\":true,\"peers\":" + std::to_string(peers)
                   + ",\"broadcast_ms\":" + std::to_string(ms) + "}";
          rp.deliver(std::move(r));
        },
        [rp, r](caf::error&) mutable {
          r.text += "could not reach the peers\n";
          r.json = "{\"revoked\":true,\"peers\":-1}";
          rp.deliver(std::move(r));
        });
    return rp;
  }
  return usage("unknown subcommand \"" + sub + "\"");
}

caf::behavior access_impl(self_ptr self, access_actor_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.issuer = std::make_unique<token_issuer>(st.cfg.key);
  self->delayed_send(self, st.cfg.sweep_interval, tick_atom::value);
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
                     {"refused", std::to_string(st.refused)}};
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
