#include "runtime/node/safety.hpp"

#include "runtime/system/caf_nodes.hpp"

#include "actors/access/access_actor.hpp"
#include "actors/audit/audit_actor.hpp"
#include "core/access/revocation_store.hpp"
#include "core/tls/connection_limits.hpp"
#include "messages/atoms.hpp"
#include "messages/audit.hpp"

#include <caf/all.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace exo {

namespace {

void send_event(const caf::actor& sink, audit::event_type type,
                std::map<std::string, std::string> details) {
  audit::event ev;
  ev.type = type;
  ev.details = std::move(details);
  audit::emit(sink, ev);
}

} // namespace

safety_parts start_safety(caf::actor_system& sys,
                          const config::node_config& cfg,
                          std::size_t devices,
                          const audit_signing& signing) {
  safety_parts out;
  auto& sf = cfg.safety;
  audit::audit_actor_config ac;
  ac.log.directory = cfg.node.state_dir + "/audit";
  ac.log.node = cfg.node.name;
  ac.log.max_file_bytes = sf.audit_max_file_bytes;
  ac.log.sync = sf.audit_fsync == "every_record" ? audit::fsync_policy::every_record
                : sf.audit_fsync == "never"      ? audit::fsync_policy::never
                                                 : audit::fsync_policy::every_flush;
  ac.flush_interval = sf.audit_flush_interval;
  ac.checkpoints.key = signing.key;
  ac.checkpoints.cert_pem = signing.cert_pem;
  ac.checkpoints.ca = signing.ca;
  ac.checkpoints.every_records = sf.audit_checkpoint_records;
  ac.checkpoints.every = sf.audit_checkpoint_interval;
  ac.checkpoints.keep = sf.audit_checkpoint_keep;
  try {
    out.audit = audit::spawn_audit_actor(sys, ac);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string{"audit: "} + e.what());
  }
  auto key_file = sf.access_key_file.empty()
                    ? cfg.node.state_dir + "/access.key"
                    : sf.access_key_file;
  out.key = access::load_or_create_key(key_file);
  access::access_config pc;
  pc.key = out.key;
  pc.rate_per_s = sf.access_rate_per_s;
  pc.burst = sf.access_burst;
  out.access = std::make_shared<access::shared_policy>(pc);
  auto dir = cfg.node.state_dir + "/access";
  ::mkdir(dir.c_str(), 0700);
  // Revocations survive a restart: applied before any device actor exists.
  out.revocations_file = dir + "/revocations";
  std::size_t restored = 0, skipped = 0;
  try {
    access::revocation_store store{out.revocations_file};
    auto now = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
    auto rs = store.load(now, access::max_token_ttl_s);
    out.access->apply(rs);
    restored = rs.size();
    skipped = store.skipped();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string{"access: "} + e.what());
  }
  // The first admin token: whoever can read the state directory is admin.
  out.admin_token_file = dir + "/admin.token";
  struct stat sb;
  if (::stat(out.admin_token_file.c_str(), &sb) != 0) {
    auto token = access::issue_admin_token(out.key, "admin@" + cfg.node.name,
                                           access::max_token_ttl_s) + "\n";
    int fd = ::open(out.admin_token_file.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      auto n = ::write(fd, token.data(), token.size());
      (void) n;
      ::close(fd);
    }
    send_event(out.audit, audit::event_type::token_issued,
               {{"subject", "admin@" + cfg.node.name},
                {"role", "admin"},
                {"file", out.admin_token_file}});
  }
  send_event(out.audit, audit::event_type::config_load,
             {{"source", cfg.source},
              {"key_file", key_file},
              {"revocations_restored", std::to_string(restored)},
              {"revocation_lines_skipped", std::to_string(skipped)}});
  send_event(out.audit, audit::event_type::backend_start,
             {{"devices", std::to_string(devices)}});
  return out;
}

namespace {

void audit_refusals(const caf::actor& audit) {
  auto refusals = tls::take_connection_refusals();
  std::size_t n = 0;
  for (auto& r : refusals) {
    if (n++ == 64)
      break;
    std::fprintf(stderr, "exo: refused a TLS connection from %s%s%s: %s\n",
                 r.address.c_str(), r.peer.empty() ? "" : " (",
                 r.peer.empty() ? "" : (r.peer + ")").c_str(),
                 r.detail.c_str());
    audit::event ev;
    ev.type = audit::event_type::connection_refused;
    ev.level = audit::severity::warning;
    ev.principal = r.peer.empty() ? std::string{} : "cert:" + r.peer;
    ev.details = {{"limit", r.limit},
                  {"address", r.address},
                  {"certificate", r.peer.empty() ? "none"
                                  : r.node       ? "node"
                                                 : "client"},
                  {"detail", r.detail}};
    audit::emit(audit, ev);
  }
  if (refusals.size() > 64) {
    audit::event ev;
    ev.type = audit::event_type::connection_refused;
    ev.level = audit::severity::warning;
    ev.details = {{"limit", "many"},
                  {"more", std::to_string(refusals.size() - 64)},
                  {"detail", "more refusals in one second than are "
                             "recorded one by one"}};
    audit::emit(audit, ev);
    std::fprintf(stderr, "exo: refused %zu more TLS connections\n",
                 refusals.size() - 64);
  }
}

} // namespace

caf::actor start_connection_watch(caf::actor_system& sys,
                                  const config::node_config& cfg,
                                  caf::actor audit, std::uint64_t gate,
                                  std::chrono::milliseconds interval) {
  auto limits = cfg.network.limits;
  limits.client_targets = {gate};
  // CAF greets every node it connects to with a request to its spawn
  // server (which spawns nothing here: exo registers no actor types).
  limits.client_named_targets = {
    static_cast<std::uint64_t>(caf::atom("SpawnServ"))};
  tls::configure_connection_guard(limits);
  // Refusals before the watch existed (none: the node is not listening
  // yet) are dropped with the guard's previous configuration.
  tls::take_connection_refusals();
  // The state goes as spawn arguments: CAF 0.17 dereferences a null tuple
  // for an actor spawned without any (notes/caf-0.17.md).
  return sys.spawn(
    [](caf::event_based_actor* self, caf::actor sink,
       std::chrono::milliseconds every) {
      self->delayed_send(self, every, tick_atom::value);
      return caf::behavior{[self, sink, every](tick_atom) {
        if (sink)
          audit_refusals(sink);
        // What CAF keeps of departed peers (each console run is one):
        // dropped on the multiplexer thread; the watch does not wait.
        tls::forget_departed_nodes(self->system(),
                                   std::chrono::milliseconds{0});
        self->delayed_send(self, every, tick_atom::value);
      }};
    },
    std::move(audit), interval);
}

void stop_safety(caf::actor_system& sys, safety_parts& parts) {
  if (!parts.audit)
    return;
  send_event(parts.audit, audit::event_type::backend_stop, {});
  caf::scoped_actor self{sys};
  self->send_exit(parts.audit, caf::exit_reason::user_shutdown);
  self->wait_for(parts.audit);
  parts.audit = nullptr;
}

} // namespace exo
