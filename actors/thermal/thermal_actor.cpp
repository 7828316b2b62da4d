#include "actors/thermal/thermal_actor.hpp"

#include "core/console/commands.hpp"

#include "core/audit/event.hpp"
#include "core/text/json.hpp"
#include "core/thermal/audit_event.hpp"
#include "messages/audit.hpp"
#include "messages/cluster.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

namespace exo::thermal {

namespace {

using namespace std::chrono_literals;

// -- the monitor ------------------------------------------------------------

struct monitor_state {
  static inline const char* name = "exo.thermal";
  thermal_actor_config cfg;
  std::unique_ptr<thermal_policy> policy;
  thermal_status status;
  std::vector<caf::actor> subscribers;
  bool sampling = false;
  bool seen_temperature = false; ///< status.peak_c holds a reading
};

using monitor_ptr = caf::stateful_actor<monitor_state>*;
using done_fn = std::function<void()>;

void refresh_status(monitor_state& st) {
  auto& p = *st.policy;
  st.status.state = std::string{to_string(p.state())};
  st.status.predicted_c = p.predicted_c();
  st.status.fitted = p.fitted();
  auto ttl = p.time_to_limit();
  st.status.time_to_limit_s = ttl ? *ttl : -1;
}

void on_transition(monitor_ptr self, const thermal_transition& tr,
                   done_fn done) {
  auto& st = self->state;
  ++st.status.transitions;
  st.status.reason = tr.reason;
  if (st.cfg.audit) {
    auto ev = make_audit_event(tr, st.cfg.device);
    audit_entry e;
    e.type = static_cast<std::uint8_t>(ev.type);
    e.level = static_cast<std::uint8_t>(ev.level);
    e.details = std::move(ev.details);
    e.details["node"] = st.cfg.node;
    caf::anon_send(st.cfg.audit, audit_atom::value, std::move(e));
  }
  for (auto& sub : st.subscribers)
    caf::anon_send(sub, thermal_atom::value, st.status);
  auto finish = [done](caf::atom_value) { done(); };
  auto failed = [self, done](caf::error& err) {
    self->state.status.reason +=
        " (device: " + self->system().render(err) + ")";
    done();
  };
  if (tr.to == thermal_state::paused)
    self->request(st.cfg.target, 5s, pause_atom::value, "thermal: " + tr.reason)
        .then(finish, failed);
  else if (tr.from == thermal_state::paused)
    self->request(st.cfg.target, 5s, resume_atom::value).then(finish, failed);
  else
    done();
}

void sample(monitor_ptr self, done_fn done) {
  auto& st = self->state;
  if (st.sampling) {
    done();
    return;
  }
  st.sampling = true;
  auto finish = [self, done] {
    self->state.sampling = false;
    done();
  };
  self->request(st.cfg.target, 5s, telemetry_atom::value)
      .then(
          [self, finish](telemetry_sample& s) {
            auto& st = self->state;
            // Load and clock, reported with or without a temperature.
            st.status.utilization
              = s.utilization && std::isfinite(*s.utilization)
                  ? std::min(1.0, std::max(0.0, *s.utilization))
                  : -1.0;
            st.status.clock_mhz = s.clock_mhz ? *s.clock_mhz : 0;
            if (!s.temperature_c) {
              st.status.has_temperature = false;
              st.status.state = "no temperature";
              finish();
              return;
            }
            st.status.has_temperature = true;
            st.status.temp_c = *s.temperature_c;
            if (std::isfinite(st.status.temp_c)) {
              st.status.peak_c = st.seen_temperature
                                   ? std::max(st.status.peak_c,
                                              st.status.temp_c)
                                   : st.status.temp_c;
              st.seen_temperature = true;
            }
            st.status.power_w = s.power_w ? *s.power_w : 0.0;
            thermal_sample ts{st.cfg.clock(), st.status.temp_c,
                              st.status.power_w};
            // Planned power: the device keeps drawing what it draws now.
            auto tr = st.policy->observe(ts, st.status.power_w);
            refresh_status(st);
            if (tr)
              on_transition(self, *tr, finish);
            else
              finish();
          },
          [self, finish](caf::error& err) {
            self->state.status.reason =
                "telemetry: " + self->system().render(err);
            finish();
          });
}

caf::behavior monitor_impl(monitor_ptr self, thermal_actor_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  if (!st.cfg.clock)
    st.cfg.clock = [] {
      return std::chrono::duration<double>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  st.policy = std::make_unique<thermal_policy>(st.cfg.policy);
  st.status.node = st.cfg.node;
  st.status.device = st.cfg.device;
  st.status.limit_c = st.cfg.policy.limit_c;
  st.status.state = "normal";
  st.status.time_to_limit_s = -1;
  if (st.cfg.interval.count() > 0)
    self->send(self, tick_atom::value);
  return {
      [self](tick_atom) {
        sample(self, [self] {
          self->delayed_send(self, self->state.cfg.interval, tick_atom::value);
        });
      },
      [self](thermal_atom, tick_atom) -> caf::result<thermal_status> {
        auto rp = self->make_response_promise<thermal_status>();
        sample(self, [self, rp]() mutable { rp.deliver(self->state.status); });
        return rp;
      },
      [self](thermal_atom) { return self->state.status; },
      [self](thermal_atom, subscribe_atom, caf::actor& who) {
        if (who)
          self->state.subscribers.push_back(std::move(who));
      },
  };
}

// -- the service ------------------------------------------------------------

struct peer_report {
  std::vector<thermal_status> statuses;
  std::chrono::steady_clock::time_point at;
};

struct service_state {
  static inline const char* name = "exo.thermal_service";
  thermal_service_config cfg;
  std::vector<caf::actor> monitors;
  std::vector<thermal_status> local;
  std::map<std::string, peer_report> peers;
};

using service_ptr = caf::stateful_actor<service_state>*;

/// Asks every monitor for its status; calls `done` with all answers.
void gather(service_ptr self,
            std::function<void(std::vector<thermal_status>)> done) {
  auto& st = self->state;
  if (st.monitors.empty()) {
    done({});
    return;
  }
  struct acc {
    std::vector<thermal_status> xs;
    std::size_t pending = 0;
    std::function<void(std::vector<thermal_status>)> done;
  };
  auto a = std::make_shared<acc>();
  a->pending = st.monitors.size();
  a->done = std::move(done);
  for (auto& m : st.monitors)
    self->request(m, 5s, thermal_atom::value)
        .then(
            [a](thermal_status& s) {
              a->xs.push_back(std::move(s));
              if (--a->pending == 0)
                a->done(std::move(a->xs));
            },
            [a](caf::error&) {
              if (--a->pending == 0)
                a->done(std::move(a->xs));
            });
}

std::vector<thermal_status> cluster_view(service_state& st) {
  auto xs = st.local;
  auto stale = std::chrono::steady_clock::now() - 3 * st.cfg.report_interval;
  for (auto& [node, rep] : st.peers)
    if (rep.at >= stale && node != st.cfg.node)
      xs.insert(xs.end(), rep.statuses.begin(), rep.statuses.end());
  return xs;
}

std::string status_json(const std::vector<thermal_status>& xs) {
  text::json devices = text::json::array();
  for (auto& s : xs)
    devices.push_back({{"node", s.node},
                       {"device", s.device},
                       {"has_temperature", s.has_temperature},
                       {"temp_c", text::number(s.temp_c, 6)},
                       {"power_w", text::number(s.power_w, 6)},
                       {"utilization", text::number(s.utilization, 4)},
                       {"clock_mhz", s.clock_mhz},
                       {"predicted_c", text::number(s.predicted_c, 6)},
                       {"limit_c", text::number(s.limit_c, 6)},
                       {"peak_c", text::number(s.peak_c, 6)},
                       {"time_to_limit_s", text::number(s.time_to_limit_s, 6)},
                       {"state", s.state}});
  return text::compact({{"devices", devices}});
}

caf::behavior service_impl(service_ptr self, thermal_service_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  self->request(st.cfg.node_actor, 10s, devices_atom::value, actors_atom::value)
      .then(
          [self](std::vector<exo::device_actor>& devs) {
            for (auto& dev : devs)
              self->request(dev, 10s, info_atom::value)
                  .then([self, dev](device_info& info) {
                    auto& st = self->state;
                    if (info.state == device_state::failed ||
                        info.state == device_state::gone)
                      return;
                    thermal_actor_config mc;
                    mc.node = st.cfg.node;
                    mc.device = info.id;
                    mc.target = dev;
                    mc.policy = st.cfg.policy;
                    mc.audit = st.cfg.audit;
                    mc.interval = st.cfg.interval;
                    auto m = spawn_thermal_actor(self->system(), std::move(mc));
                    self->link_to(m);
                    // Its transitions: a pause moves the jobs off the
                    // device (below).
                    self->send(m, thermal_atom::value, subscribe_atom::value,
                               caf::actor_cast<caf::actor>(self));
                    st.monitors.push_back(m);
                  });
          },
          [](caf::error&) {});
  self->delayed_send(self, st.cfg.report_interval, tick_atom::value);
  return {
      [self](tick_atom) {
        gather(self, [self](std::vector<thermal_status> xs) {
          auto& st = self->state;
          st.local = std::move(xs);
          if (st.cfg.gate && !st.local.empty())
            self->request(st.cfg.gate, 3s, broadcast_atom::value,
                          std::string{"thermal"},
                          caf::make_message(thermal_atom::value,
                                            report_atom::value, st.local))
                .then([](std::uint64_t) {}, [](caf::error&) {});
          self->delayed_send(self, st.cfg.report_interval, tick_atom::value);
        });
      },
      // A monitor of this node paused its device: the jobs services of
      // every node (this one too) move the stages they coordinate there
      // to other devices, KV caches and all (job_coordinator).
      [self](thermal_atom, thermal_status& s) {
        // (The monitors send anonymously: a status of this node's.)
        auto& st = self->state;
        if (s.node != st.cfg.node || s.state != "paused" || !st.cfg.gate)
          return;
        auto msg = caf::make_message(thermal_atom::value, s);
        self->request(st.cfg.gate, 3s, service_atom::value, st.cfg.node,
                      std::string{"jobs"}, msg)
          .then([](caf::message&) {}, [](caf::error&) {});
        self->request(st.cfg.gate, 3s, broadcast_atom::value,
                      std::string{"jobs"}, std::move(msg))
          .then([](std::uint64_t) {}, [](caf::error&) {});
      },
      // A peer's thermal service reports its devices (through the gates).
      [self](thermal_atom, report_atom,
             std::vector<thermal_status>& xs) -> caf::result<caf::atom_value> {
        auto& st = self->state;
        if (auto bad = check_report(xs))
          return caf::make_error(caf::sec::invalid_argument,
                                 "thermal report: " + *bad);
        // Name first: in `a[k] = {std::move(xs), ...}` the right side is
        // evaluated first (C++17), which would leave xs empty for k.
        auto node = xs.front().node;
        if (node != st.cfg.node)
          st.peers[node] = {std::move(xs), std::chrono::steady_clock::now()};
        return caf::ok_atom::value;
      },
      [self](console_atom, const std::string&,
             const std::string& arg) -> caf::result<console_reply> {
        console_reply r;
        r.command = "thermal";
        try {
          console::parse_command("thermal", arg);
        } catch (const console::command_error& e) {
          return caf::make_error(caf::sec::invalid_argument,
                                 std::string{"thermal: "} + e.what());
        }
        auto rp = self->make_response_promise<console_reply>();
        gather(self, [self, rp, r](std::vector<thermal_status> xs) mutable {
          auto& st = self->state;
          st.local = std::move(xs);
          auto all = cluster_view(st);
          r.text = render_overview(all);
          r.json = status_json(all);
          rp.deliver(std::move(r));
        });
        return rp;
      },
      [self](inspect_atom) {
        auto& st = self->state;
        actor_snapshot snap;
        snap.name = "thermal";
        snap.kind = "thermal";
        snap.node = st.cfg.node;
        snap.summary = std::to_string(st.monitors.size()) + " monitors";
        return snap;
      },
  };
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

} // namespace

caf::actor spawn_thermal_actor(caf::actor_system& sys,
                               thermal_actor_config cfg) {
  return sys.spawn(monitor_impl, std::move(cfg));
}

caf::actor spawn_thermal_service(caf::actor_system& sys,
                                 thermal_service_config cfg) {
  return sys.spawn(service_impl, std::move(cfg));
}

std::optional<std::string> check_report(const std::vector<thermal_status>& xs) {
  if (xs.empty() || xs.size() > max_report_statuses)
    return "a report carries 1 to " + std::to_string(max_report_statuses) +
           " statuses, not " + std::to_string(xs.size());
  for (auto& s : xs) {
    if (s.node != xs.front().node)
      return "a report mixes nodes (" + xs.front().node.substr(0, 64) +
             " and " + s.node.substr(0, 64) + ")";
    if (s.node.empty() || s.node.size() > 64 || s.device.empty() ||
        s.device.size() > 128 || s.state.size() > 32 || s.reason.size() > 512)
      return "a status with a name or state of bad length";
    for (double v :
         {s.temp_c, s.power_w, s.predicted_c, s.limit_c, s.time_to_limit_s,
          s.utilization, s.peak_c})
      if (!std::isfinite(v))
        return "status of " + s.device.substr(0, 128) +
               " holds a number that is not finite";
    if (s.utilization < -1 || s.utilization > 1)
      return "status of " + s.device.substr(0, 128) +
             " holds a utilization outside [-1, 1]";
  }
  return std::nullopt;
}

std::string render_overview(const std::vector<thermal_status>& xs) {
  std::ostringstream o;
  const thermal_status* hottest = nullptr;
  std::vector<const thermal_status*> paused, blind;
  for (auto& s : xs) {
    if (!s.has_temperature) {
      blind.push_back(&s);
      continue;
    }
    if (!hottest || s.temp_c > hottest->temp_c)
      hottest = &s;
    if (s.state == "paused")
      paused.push_back(&s);
  }
  o << "hottest: ";
  if (hottest)
    o << hottest->node << "/" << hottest->device << " " << fmt(hottest->temp_c)
      << " C (limit " << fmt(hottest->limit_c) << " C)\n";
  else
    o << "none (no device reports a temperature)\n";
  o << "paused: ";
  if (paused.empty())
    o << "none";
  for (std::size_t i = 0; i < paused.size(); ++i)
    o << (i ? ", " : "") << paused[i]->node << "/" << paused[i]->device;
  o << "\n";
  o << "NODE/DEVICE  TEMP  PEAK  PREDICTED  LIMIT  TIME-TO-LIMIT  STATE\n";
  for (auto& s : xs) {
    o << s.node << "/" << s.device << "  ";
    if (!s.has_temperature) {
      o << "-  -  -  -  -  no temperature reading\n";
      continue;
    }
    o << fmt(s.temp_c) << "  " << fmt(s.peak_c) << "  " << fmt(s.predicted_c)
      << "  " << fmt(s.limit_c) << "  "
      << (s.time_to_limit_s < 0 ? std::string{"never"}
                                : fmt(s.time_to_limit_s) + " s")
      << "  " << s.state << "\n";
  }
  return o.str();
}

} // namespace exo::thermal
