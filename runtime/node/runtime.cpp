#include "runtime/node/runtime.hpp"

#include "actors/directory/directory_actor.hpp"
#include "actors/node/node_actor.hpp"
#include "messages/registration.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace exo {

namespace {

/// mkdir -p with mode 0700 for directories we create.
void make_dirs(const std::string& path) {
  std::string cur;
  for (std::size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!cur.empty() && cur != "/" && ::mkdir(cur.c_str(), 0700) != 0
          && errno != EEXIST)
        throw startup_error("cannot create state directory " + cur + ": "
                            + std::strerror(errno));
    }
    if (i < path.size())
      cur += path[i];
  }
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode))
    throw startup_error("state directory " + path + " is not a directory");
}

std::string registry_path(const config::node_config& cfg) {
  return cfg.node.state_dir + "/devices.json";
}

struct discovered {
  std::shared_ptr<backend::registry> devices;
  std::shared_ptr<discovery::device_registry> known;
  discovery::discovery_result found;
};

discovered run_discovery(const config::node_config& cfg) {
  discovered d;
  auto made = backend::registry::create(cfg.factory_options());
  if (!made)
    throw startup_error(made.err().message);
  d.devices = std::make_shared<backend::registry>(std::move(*made));
  std::string note;
  d.known = std::make_shared<discovery::device_registry>(
    discovery::device_registry::load(registry_path(cfg), note));
  d.found = discovery::discover(*d.devices, *d.known, true);
  d.found.registry_note = note;
  return d;
}

} // namespace

struct runtime::impl {
  config::node_config cfg;
  std::unique_ptr<caf::actor_system_config> own_cfg;
  std::unique_ptr<caf::actor_system> own_sys;
  caf::actor_system* sys = nullptr;
  caf::actor node;
  caf::actor directory;
  discovered found;
  bool running = false;
};

std::unique_ptr<caf::actor_system_config> make_system_config() {
  auto cfg = std::make_unique<caf::actor_system_config>();
  register_messages(*cfg);
  cfg->load<caf::io::middleman>();
  cfg->load<caf::openssl::manager>();
  return cfg;
}

runtime::runtime(config::node_config cfg) : impl_(std::make_unique<impl>()) {
  impl_->cfg = std::move(cfg);
}

runtime::runtime(caf::actor_system& sys, config::node_config cfg)
  : impl_(std::make_unique<impl>()) {
  impl_->cfg = std::move(cfg);
  impl_->sys = &sys;
}

runtime::~runtime() {
  stop();
}

void runtime::start() {
  auto& d = *impl_;
  if (d.running)
    return;
  make_dirs(d.cfg.node.state_dir);
  d.found = run_discovery(d.cfg);
  if (d.sys == nullptr) {
    d.own_cfg = make_system_config();
    // Plain (non-TLS) CAF nodes are never accepted: only the openssl
    // manager publishes. Without TLS material CAF 0.17 would run anonymous
    // TLS, so a node publishes only after its material is configured.
    d.own_sys = std::make_unique<caf::actor_system>(*d.own_cfg);
    d.sys = d.own_sys.get();
  }
  d.directory = directory::spawn_directory(*d.sys, d.cfg.node.name);
  node::node_setup setup;
  setup.cfg = d.cfg;
  setup.devices = d.found.devices;
  setup.found = d.found.found;
  setup.known = d.found.known;
  setup.registry_path = registry_path(d.cfg);
  setup.directory = d.directory;
  d.node = node::spawn_node_actor(*d.sys, std::move(setup));
  d.running = true;
}

void runtime::stop() {
  auto& d = *impl_;
  if (!d.running)
    return;
  d.running = false;
  {
    caf::scoped_actor self{*d.sys};
    // Ask for the device actors first, so we can wait for every one.
    std::vector<exo::device_actor> devs;
    self->request(d.node, std::chrono::seconds(5), devices_atom::value,
                  actors_atom::value)
      .receive([&](std::vector<exo::device_actor>& xs) { devs = xs; },
               [](caf::error&) {});
    self->send_exit(d.node, caf::exit_reason::user_shutdown);
    self->send_exit(d.directory, caf::exit_reason::user_shutdown);
    self->wait_for(d.node);
    for (auto& dev : devs)
      self->wait_for(dev);
  }
  std::string err;
  if (d.found.known)
    d.found.known->save(registry_path(d.cfg), err);
  d.node = nullptr;
  d.directory = nullptr;
  d.found.devices.reset();
  if (d.own_sys) {
    d.own_sys.reset();
    d.own_cfg.reset();
    d.sys = nullptr;
  }
}

caf::actor_system& runtime::system() {
  if (impl_->sys == nullptr)
    throw startup_error("runtime not started");
  return *impl_->sys;
}

caf::actor runtime::node() const {
  return impl_->node;
}

caf::actor runtime::directory() const {
  return impl_->directory;
}

const config::node_config& runtime::config() const noexcept {
  return impl_->cfg;
}

const discovery::discovery_result& runtime::discovery() const noexcept {
  return impl_->found.found;
}

discovery::discovery_result discover_devices(const config::node_config& cfg) {
  std::string note;
  auto path = registry_path(cfg);
  struct stat sb {};
  bool have_dir = ::stat(cfg.node.state_dir.c_str(), &sb) == 0;
  auto made = backend::registry::create(cfg.factory_options());
  if (!made)
    throw startup_error(made.err().message);
  auto known = discovery::device_registry::load(path, note);
  auto r = discovery::discover(*made, known, true);
  r.registry_note = note;
  if (have_dir) {
    std::string err;
    known.save(path, err);
  }
  // Devices die with the registry: drop the live pointers.
  for (auto& rec : r.devices)
    rec.device = nullptr;
  return r;
}

} // namespace exo
