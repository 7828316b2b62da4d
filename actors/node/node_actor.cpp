#include "actors/node/node_actor.hpp"

#include "actors/device/device_actor.hpp"
#include "messages/errors.hpp"

#include <caf/all.hpp>

#include <ctime>

namespace exo::node {

namespace {

struct adopted {
  exo::device_actor handle;
  std::string id;
  bool present = true; ///< still enumerated by the last scan
};

struct node_state {
  static inline const char* name = "exo.node";
  node_setup setup;
  std::vector<adopted> devices;
  std::uint64_t rescans = 0;
  std::string last_rescan;
};

using self_ptr = caf::stateful_actor<node_state>*;

void adopt(self_ptr self, const std::shared_ptr<backend::registry>& owner,
           const discovery::device_record& rec) {
  auto& st = self->state;
  device::device_actor_config dc;
  dc.node = st.setup.cfg.node.name;
  dc.keepalive = owner;
  dc.audit = st.setup.audit;   // issue 6: audit sink
  // A log that fsyncs every record is asked for no delay: compute events
  // then go to the sink one by one.
  if (st.setup.cfg.safety.audit_fsync == "every_record")
    dc.audit_batch_interval = std::chrono::milliseconds{0};
  dc.access = st.setup.access; // issue 6: token checks
  // A device that measured its rates at start measures them again when
  // idle (a device that measures nothing says so at its first look).
  dc.measure_again = st.setup.cfg.devices.cpu_measure_rates
                       ? std::chrono::milliseconds{st.setup.cfg.devices
                                                     .cpu_measure_again}
                       : std::chrono::milliseconds{0};
  if (!rec.verified)
    dc.failed_reason = rec.reason;
  auto handle = device::spawn_device_actor(self->system(), *rec.device, dc);
  self->monitor(handle);
  if (st.setup.directory)
    caf::anon_send(st.setup.directory, register_atom::value,
               "device/" + rec.id, std::string{"device"},
               caf::actor_cast<caf::actor>(handle));
  st.devices.push_back(adopted{handle, rec.id, true});
}

void save_registry(self_ptr self) {
  auto& st = self->state;
  if (st.setup.registry_path.empty() || !st.setup.known)
    return;
  std::string err;
  if (!st.setup.known->save(st.setup.registry_path, err))
    std::fprintf(stderr, "exo-node: warning: %s\n", err.c_str());
}

/// Enumerates devices again; adopts new ones, marks vanished ones.
std::string rescan(self_ptr self) {
  auto& st = self->state;
  ++st.rescans;
  auto opts = st.setup.cfg.factory_options();
  opts.use_environment = true;
  auto made = backend::registry::create(opts);
  if (!made)
    return "rescan failed: " + made.err().message;
  auto fresh = std::make_shared<backend::registry>(std::move(*made));
  std::vector<discovery::device_record> found;
  std::string summary;
  // Devices we already own are not touched (their actor owns them).
  std::vector<std::string> ids;
  for (auto* dev : fresh->devices())
    ids.push_back(dev->properties().id);
  bool adopted_any = false;
  for (auto* dev : fresh->devices()) {
    auto& id = dev->properties().id;
    auto known = std::find_if(st.devices.begin(), st.devices.end(),
                              [&](auto& a) { return a.id == id; });
    if (known != st.devices.end()) {
      known->present = true;
      continue;
    }
    discovery::device_record rec;
    rec.id = id;
    rec.backend = backend::to_string(dev->properties().kind);
    rec.name = dev->properties().name;
    rec.vendor = dev->properties().vendor;
    rec.driver_version = dev->properties().driver_version;
    rec.total_memory = dev->properties().total_memory;
    rec.simulated = dev->properties().simulated;
    rec.device = dev;
    auto v = discovery::verify_device(*dev);
    rec.verified = v.ok();
    if (!v.ok())
      rec.reason = v.err().to_string();
    adopt(self, fresh, rec);
    adopted_any = true;
    found.push_back(rec);
    summary += "appeared: " + id + "\n";
  }
  for (auto& a : st.devices) {
    if (std::find(ids.begin(), ids.end(), a.id) == ids.end() && a.present) {
      a.present = false;
      summary += "disappeared: " + a.id + "\n";
    }
  }
  if (!adopted_any)
    fresh.reset(); // nothing new: release the second enumeration
  if (st.setup.known) {
    st.setup.known->update(found, static_cast<std::int64_t>(std::time(nullptr)));
    save_registry(self);
  }
  st.last_rescan = summary.empty() ? "no change" : summary;
  return st.last_rescan;
}

/// Collects device_info from every device actor.
struct info_gather {
  std::vector<device_info> out;
  std::size_t pending = 0;
  caf::response_promise rp;
  void done_one() {
    if (--pending == 0)
      rp.deliver(std::move(out));
  }
};

caf::behavior node_impl(self_ptr self, node_setup setup) {
  auto& st = self->state;
  st.setup = std::move(setup);
  for (auto& rec : st.setup.found.devices)
    adopt(self, st.setup.devices, rec);
  save_registry(self);
  auto interval = st.setup.cfg.devices.rescan_interval;
  if (interval.count() > 0)
    self->delayed_send(self, interval, tick_atom::value);
  if (st.setup.directory)
    caf::anon_send(st.setup.directory, register_atom::value, std::string{"node"},
               std::string{"node"}, caf::actor_cast<caf::actor>(self));
  self->set_down_handler([self](caf::down_msg& dm) {
    for (auto& a : self->state.devices)
      if (a.handle.address() == dm.source)
        a.present = false;
  });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    for (auto& a : self->state.devices)
      self->send_exit(a.handle, msg.reason);
    self->quit(msg.reason);
  });
  return {
    [self](devices_atom) -> caf::result<std::vector<device_info>> {
      auto& st = self->state;
      if (st.devices.empty())
        return std::vector<device_info>{};
      auto g = std::make_shared<info_gather>();
      g->pending = st.devices.size();
      g->rp = self->make_response_promise();
      for (auto& a : st.devices) {
        auto id = a.id;
        auto present = a.present;
        auto node = st.setup.cfg.node.name;
        self->request(a.handle, std::chrono::seconds(5), info_atom::value)
          .then(
            [g, present](device_info& info) {
              if (!present) {
                info.state = device_state::gone;
                info.state_reason = "no longer enumerated by its backend";
              }
              g->out.push_back(std::move(info));
              g->done_one();
            },
            [g, id, node](caf::error& err) {
              device_info info;
              info.id = id;
              info.node = node;
              info.state = device_state::gone;
              info.state_reason = "device actor did not answer: "
                                  + caf::to_string(err);
              g->out.push_back(std::move(info));
              g->done_one();
            });
      }
      return g->rp;
    },
    [self](devices_atom, actors_atom) {
      std::vector<exo::device_actor> out;
      for (auto& a : self->state.devices)
        out.push_back(a.handle);
      return caf::make_message(std::move(out));
    },
    [self](rescan_atom) { return rescan(self); },
    [self](tick_atom) {
      rescan(self);
      self->delayed_send(self, self->state.setup.cfg.devices.rescan_interval,
                         tick_atom::value);
    },
    [self](inspect_atom) {
      auto& st = self->state;
      actor_snapshot snap;
      snap.name = "node";
      snap.kind = "node";
      snap.node = st.setup.cfg.node.name;
      snap.summary = std::to_string(st.devices.size()) + " devices";
      snap.fields = {{"devices", std::to_string(st.devices.size())},
                     {"rescans", std::to_string(st.rescans)},
                     {"last_rescan", st.last_rescan},
                     {"config", st.setup.cfg.source},
                     {"state_dir", st.setup.cfg.node.state_dir},
                     {"queue_depth", std::to_string(self->mailbox().size())}};
      return snap;
    },
  };
}

} // namespace

caf::actor spawn_node_actor(caf::actor_system& sys, node_setup setup) {
  return sys.spawn<caf::detached>(node_impl, std::move(setup));
}

} // namespace exo::node
