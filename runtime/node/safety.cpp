#include "runtime/node/safety.hpp"

#include "actors/access/access_actor.hpp"
#include "actors/audit/audit_actor.hpp"
#include "core/access/revocation_store.hpp"
#include "messages/audit.hpp"

#include <caf/all.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
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
