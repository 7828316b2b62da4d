#include "runtime/node/safety.hpp"

#include "actors/access/access_actor.hpp"
#include "actors/access/device_request.hpp"
#include "actors/access/revocation_store.hpp"
#include "actors/audit/audit_actor.hpp"
#include "actors/thermal/thermal_actor.hpp"
#include "messages/audit.hpp"
#include "messages/device.hpp"
#include "messages/cluster.hpp"

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
                          std::size_t devices) {
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

service spawn_thermal_service(const service_context& ctx) {
  auto& sf = ctx.cfg->safety;
  thermal::thermal_service_config tc;
  tc.node = ctx.cfg->node.name;
  tc.node_actor = ctx.node;
  tc.gate = ctx.gate;
  tc.audit = ctx.audit;
  tc.interval = ctx.cfg->devices.telemetry_interval;
  tc.policy.limit_c = sf.thermal_limit_c;
  tc.policy.margin_c = sf.thermal_margin_c;
  tc.policy.hysteresis_c = sf.thermal_hysteresis_c;
  tc.policy.interval_s = tc.interval.count() / 1000.0;
  tc.policy.horizon_s = std::max(sf.thermal_horizon_s, tc.policy.interval_s);
  tc.policy.min_dwell_s = sf.thermal_min_dwell_s;
  tc.policy.validate();
  auto h = thermal::spawn_thermal_service(*ctx.sys, std::move(tc));
  return {"thermal", "thermal", h, {"thermal"}};
}

service spawn_access_service(const service_context& ctx) {
  access::access_actor_config ac;
  ac.node = ctx.cfg->node.name;
  ac.policy = ctx.access;
  ac.key = ctx.access_key;
  ac.audit = ctx.audit;
  ac.gate = ctx.gate;
  ac.max_ttl_s = access::max_token_ttl_s;
  ac.revocations_file = ctx.cfg->node.state_dir + "/access/revocations";
  auto h = access::spawn_access_actor(*ctx.sys, std::move(ac));
  return {"access", "access", h, {"token"}};
}

namespace {

struct audit_service_state {
  static inline const char* name = "exo.audit_service";
  caf::actor sink;
  caf::actor gate;
  std::string node;
  std::map<std::string, member_status> seen;
};

caf::behavior audit_service(caf::stateful_actor<audit_service_state>* self,
                            caf::actor sink, caf::actor gate,
                            std::string node) {
  self->state.sink = std::move(sink);
  self->state.gate = std::move(gate);
  self->state.node = std::move(node);
  self->send(self, tick_atom::value);
  return {
    [self](console_atom a, std::string& cmd, std::string& arg) {
      return self->delegate(self->state.sink, a, std::move(cmd),
                            std::move(arg));
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
      self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
    },
  };
}

} // namespace

namespace {

/// Console "dev": clients' device operations on this node's devices, always
/// as the token-bearing variants (actors/access/device_request.hpp). The
/// service itself holds no rights: the device actor checks the token.
caf::behavior device_service(caf::event_based_actor* self,
                             caf::actor node_actor) {
  using access::device_request;
  return {
    [self, node_actor](console_atom, const std::string&,
                       const std::string& arg) -> caf::result<console_reply> {
      device_request req;
      auto why = access::parse_device_request(arg, req);
      if (!why.empty())
        return caf::make_error(caf::sec::invalid_argument,
                               "dev: " + why + " ("
                                 + access::device_request_usage() + ")");
      auto rp = self->make_response_promise<console_reply>();
      auto fail = [rp](caf::error& err) mutable { rp.deliver(std::move(err)); };
      // Finds the device by id among this node's device actors (asked
      // without a token: the service is an actor of this node), then sends
      // the client's operation with the client's token.
      self->request(node_actor, std::chrono::seconds(5), devices_atom::value,
                    actors_atom::value)
        .then(
          [self, rp, req, fail](std::vector<device_actor>& hs) mutable {
            struct search {
              std::size_t pending = 0;
              device_actor found;
            };
            auto s = std::make_shared<search>();
            s->pending = hs.size();
            auto finish = [self, rp, req, s, fail]() mutable {
              if (!s->found) {
                rp.deliver(caf::make_error(caf::sec::invalid_argument,
                                           "dev: no device \"" + req.device
                                             + "\" on this node"));
                return;
              }
              auto reply = [rp](std::string text) mutable {
                console_reply r;
                r.command = "dev";
                r.json = "{\"result\":\"" + text + "\"}";
                r.text = std::move(text) + "\n";
                rp.deliver(std::move(r));
              };
              auto to = std::chrono::seconds(10);
              using op = device_request::op;
              switch (req.what) {
                case op::info:
                  self->request(s->found, to, info_atom::value, req.token)
                    .then([reply](device_info& i) mutable {
                            reply(i.id + " " + std::string{to_string(i.state)});
                          },
                          fail);
                  break;
                case op::allocate:
                  self
                    ->request(s->found, to, allocate_atom::value, req.bytes,
                              req.token)
                    .then([reply](handle_id h) mutable {
                            reply(std::to_string(h));
                          },
                          fail);
                  break;
                case op::free:
                  self
                    ->request(s->found, to, free_atom::value, req.handle,
                              req.token)
                    .then([reply](caf::atom_value) mutable { reply("ok"); },
                          fail);
                  break;
                case op::sync:
                  self->request(s->found, to, sync_atom::value, req.token)
                    .then([reply](caf::atom_value) mutable { reply("ok"); },
                          fail);
                  break;
              }
            };
            if (hs.empty()) {
              finish();
              return;
            }
            for (auto& h : hs)
              self->request(h, std::chrono::seconds(5), info_atom::value)
                .then(
                  [s, h, req, finish](device_info& i) mutable {
                    if (i.id == req.device)
                      s->found = h;
                    if (--s->pending == 0)
                      finish();
                  },
                  [s, finish](caf::error&) mutable {
                    if (--s->pending == 0)
                      finish();
                  });
          },
          fail);
      return rp;
    },
  };
}

} // namespace

service spawn_device_service(const service_context& ctx) {
  auto h = ctx.sys->spawn(device_service, ctx.node);
  return {"dev", "dev", h, {"dev"}};
}

service spawn_audit_service(const service_context& ctx) {
  auto h = ctx.sys->spawn(audit_service, ctx.audit, ctx.gate,
                          ctx.cfg->node.name);
  return {"audit", "audit", h, {"audit"}};
}

} // namespace exo
