#include "runtime/node/runtime.hpp"
#include "core/tls/hello.hpp"

#include "actors/directory/directory_actor.hpp"
#include "actors/cluster/gate_actor.hpp"
#include "actors/node/node_actor.hpp"
#include "messages/registration.hpp"
#include "runtime/node/heap_trim.hpp"
#include "runtime/node/safety.hpp"
#include "runtime/node/services.hpp"
#include "core/tls/bootstrap.hpp"
#include "core/text/file.hpp"
#include "core/tls/bulk_channel.hpp"
#include "runtime/system/caf_tls.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/certificate.hpp"
#include "core/tls/material.hpp"
#include "core/tls/private_key.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"

#include "messages/cluster.hpp"
#include "messages/device.hpp"
#include "messages/workload.hpp"
#include "core/text/line.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <thread>
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
                              + std::strerror(errno),
                            2);
    }
    if (i < path.size())
      cur += path[i];
  }
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode))
    throw startup_error("state directory " + path + " is not a directory",
                        2);
  // It holds the node's key, tokens and audit log: others must not be able
  // to replace them.
  try {
    text::check_private(path, "state directory", 022);
  } catch (const text::file_error& e) {
    throw startup_error(e.what(), 2);
  }
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

/// The node's TLS material, checked before any actor system exists (CAF
/// 0.17 hangs on a wrong passphrase).
struct tls_setup {
  tls::material files;
  std::string note; ///< printed once (e.g. how to issue more certificates)
};

tls_setup resolve_tls(const config::node_config& cfg) {
  tls_setup out;
  try {
    if (cfg.tls.unset()) {
      auto local = tls::ensure_local_material(cfg.node.state_dir,
                                              cfg.node.name);
      out.files = local.files;
      if (local.created_ca)
        out.note = local.instructions;
    } else {
      out.files.certificate = cfg.tls.certificate;
      out.files.key = cfg.tls.key;
      out.files.cafile = cfg.tls.ca;
      if (!cfg.tls.passphrase_file.empty())
        out.files.passphrase
          = tls::read_passphrase_file(cfg.tls.passphrase_file);
    }
    out.files.role = tls::cert_role::node;
    auto info = tls::check_material(out.files);
    if (info.common_name != cfg.node.name)
      throw startup_error("the certificate " + out.files.certificate
                          + " is for \"" + info.common_name
                          + "\", but this node is named \""
                          + cfg.node.name + "\"",
                          2);
  } catch (const tls::tls_error& e) {
    throw startup_error(std::string{"TLS: "} + e.what(), 2);
  }
  return out;
}

} // namespace

struct runtime::impl {
  config::node_config cfg;
  tls_setup tls;
  caf::actor gate;
  std::uint16_t port = 0;
  /// The bulk channel: model files for peers, off CAF's connection.
  std::shared_ptr<tls::bulk_blobs> blobs;
  std::unique_ptr<tls::bulk_server> bulk;
  std::vector<service> services;
  safety_parts safety; // issue 6: audit sink, access policy
  caf::actor connection_watch; // audits the TLS guard's refusals
  caf::actor heap_trim;        // gives free heap pages back (heap_trim.hpp)
  std::unique_ptr<caf::actor_system_config> own_cfg;
  std::unique_ptr<caf::actor_system> own_sys;
  caf::actor_system* sys = nullptr;
  caf::actor node;
  caf::actor directory;
  discovered found;
  bool running = false;
  /// runtime::stop_step(): static strings only.
  std::atomic<const char*> step{""};
};

std::unique_ptr<caf::actor_system_config> make_system_config() {
  auto cfg = std::make_unique<caf::actor_system_config>();
  register_messages(*cfg);
  cfg->load<caf::io::middleman>();
  cfg->load<caf::openssl::manager>();
  tls::apply_transport_settings(*cfg);
  return cfg;
}

void prepare_system(caf::actor_system_config& sys_cfg,
                    const config::node_config& node) {
  make_dirs(node.node.state_dir);
  auto tls = resolve_tls(node);
  register_messages(sys_cfg);
  sys_cfg.load<caf::io::middleman>();
  sys_cfg.load<caf::openssl::manager>();
  tls::apply_transport_settings(sys_cfg);
  tls::apply_material(sys_cfg, tls.files);
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
  d.tls = resolve_tls(d.cfg);
  d.found = run_discovery(d.cfg);
  if (d.sys == nullptr) {
    d.own_cfg = make_system_config();
    tls::apply_material(*d.own_cfg, d.tls.files);
    // Plain (non-TLS) CAF nodes are never accepted: only the openssl
    // manager publishes. Without TLS material CAF 0.17 would run anonymous
    // TLS, so a node publishes only after its material is configured.
    d.own_sys = std::make_unique<caf::actor_system>(*d.own_cfg);
    d.sys = d.own_sys.get();
  } else {
    try {
      tls::require_authenticated_tls(d.sys->config());
    } catch (const tls::tls_error& e) {
      throw startup_error(std::string{"TLS: "} + e.what());
    }
  }
  d.directory = directory::spawn_directory(*d.sys, d.cfg.node.name);
  node::node_setup setup;
  setup.cfg = d.cfg;
  setup.devices = d.found.devices;
  setup.found = d.found.found;
  setup.known = d.found.known;
  setup.registry_path = registry_path(d.cfg);
  setup.directory = d.directory;
  // The node's certificate, key and CA: the gate's join handshake and the
  // audit sink's signed checkpoints use them.
  audit_signing signing;
  try {
    signing.cert_pem = tls::certificate::load(d.tls.files.certificate).to_pem();
    signing.key = std::make_shared<tls::private_key>(
      tls::private_key::load(d.tls.files.key, d.tls.files.passphrase));
    signing.ca = std::make_shared<tls::trust_store>(
      tls::trust_store::load(d.tls.files.cafile));
  } catch (const tls::tls_error& e) {
    caf::anon_send_exit(d.directory, caf::exit_reason::user_shutdown);
    throw startup_error(std::string{"TLS: "} + e.what(), 2);
  }
  // Safety (issue 6): audit sink and access policy before the devices.
  try {
    d.safety = start_safety(*d.sys, d.cfg, d.found.found.devices.size(),
                            signing);
  } catch (const std::exception& e) {
    caf::anon_send_exit(d.directory, caf::exit_reason::user_shutdown);
    // A key or state file refused for its permissions is the user's to fix.
    throw startup_error(e.what(),
                        dynamic_cast<const text::file_error*>(&e) ? 2 : 1);
  }
  setup.audit = d.safety.audit;
  setup.access = d.safety.access;
  d.node = node::spawn_node_actor(*d.sys, std::move(setup));
  d.running = true;
  // The gate: membership, published over TLS.
  cluster::gate_config gc;
  gc.name = d.cfg.node.name;
  gc.host = d.cfg.network.listen;
  gc.seeds = d.cfg.network.seeds;
  gc.heartbeat = d.cfg.network.heartbeat;
  gc.failure_timeout = d.cfg.network.failure_timeout;
  gc.forget_departed = d.cfg.network.forget_departed;
  gc.connect_timeout = d.cfg.network.connect_timeout;
  gc.incarnation = static_cast<std::uint64_t>(
    std::chrono::system_clock::now().time_since_epoch().count());
  gc.cert_pem = signing.cert_pem;
  gc.key = signing.key;
  gc.ca = signing.ca;
  gc.node = d.node;
  gc.directory = d.directory;
  // Clients' console commands are checked against tokens (issue 6).
  gc.access = d.safety.access;
  gc.audit = d.safety.audit;
  gc.console_requires_token = d.cfg.safety.console_requires_token;
  gc.discovery = d.cfg.network.discovery;
  try {
    gc.cluster_id = tls::ca_id(d.tls.files.cafile);
  } catch (const std::exception&) {
    gc.discovery.enabled = false; // no CA file to name the cluster by
  }
  // The bulk channel listens beside the gate; members learn its port.
  try {
    d.blobs = std::make_shared<tls::bulk_blobs>();
    tls::bulk_server::options bo;
    bo.host = d.cfg.network.listen;
    bo.port = d.cfg.network.bulk_port;
    d.bulk = std::make_unique<tls::bulk_server>(d.tls.files, d.blobs, bo);
  } catch (const std::exception& e) {
    stop();
    throw startup_error(std::string{"bulk channel: "} + e.what());
  }
  gc.bulk_port = d.bulk->port();
  d.gate = cluster::spawn_gate(*d.sys, std::move(gc));
  // What a TLS peer may hold (network.limits), and that a client may
  // message the gate only, before anyone can connect.
  d.connection_watch = start_connection_watch(*d.sys, d.cfg, d.safety.audit,
                                              d.gate.id());
  d.heap_trim = start_heap_trim(*d.sys);
  caf::anon_send(d.directory, register_atom::value, std::string{"gate"},
                 std::string{"gate"}, d.gate);
  auto port = caf::openssl::publish(d.gate, d.cfg.network.port,
                                    d.cfg.network.listen.c_str(), true);
  if (!port) {
    auto why = d.sys->render(port.error());
    stop();
    throw startup_error("cannot listen on " + d.cfg.network.listen + ":"
                        + std::to_string(d.cfg.network.port) + ": " + why);
  }
  d.port = *port;
  caf::anon_send(d.gate, caf::publish_atom::value, d.port);
  service_context ctx;
  ctx.sys = d.sys;
  ctx.cfg = &d.cfg;
  ctx.node = d.node;
  ctx.directory = d.directory;
  ctx.gate = d.gate;
  ctx.port = d.port;
  ctx.audit = d.safety.audit;
  ctx.access = d.safety.access;
  ctx.access_key = d.safety.key;
  ctx.tls = d.tls.files;
  ctx.blobs = d.blobs;
  d.services = spawn_services(ctx);
  for (auto& svc : d.services) {
    caf::anon_send(d.directory, register_atom::value, svc.name, svc.kind,
                   svc.handle);
    // The gate takes registrations from local senders only (an anonymous
    // message may come from anywhere), and "ready" must mean the console
    // reaches every service: register from a scoped actor and wait.
    caf::scoped_actor reg{*d.sys};
    for (auto& cmd : svc.commands) {
      caf::error failed;
      reg->request(d.gate, std::chrono::seconds(5), register_atom::value, cmd,
                   svc.handle)
        .receive([](caf::atom_value) {},
                 [&](caf::error& err) { failed = std::move(err); });
      if (failed)
        throw startup_error("cannot register console command \"" + cmd
                            + "\": " + d.sys->render(failed));
    }
  }
}

namespace {

/// The shard host's count of stages of jobs other nodes coordinate; -1
/// when it does not answer.
long foreign_stages(caf::scoped_actor& self, const caf::actor& shards) {
  long n = -1;
  self->request(shards, std::chrono::seconds(2), inspect_atom::value)
    .receive(
      [&](actor_snapshot& s) {
        for (auto& [k, v] : s.fields)
          if (k == "foreign_shards")
            n = std::stol(v);
      },
      [](caf::error&) {});
  return n;
}

/// "0.42": seconds since `began`, for the stop's log.
std::string seconds_since(std::chrono::steady_clock::time_point began) {
  std::chrono::duration<double> took = std::chrono::steady_clock::now()
                                       - began;
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f", took.count());
  return secs;
}

/// A graceful stop first has the other nodes move their jobs' stages off
/// this node (planned moves: KV caches carried, nothing re-fed) and waits,
/// bounded, until none is left here; its own jobs are taken over by their
/// backups when it leaves.
void move_foreign_stages(caf::scoped_actor& self, const caf::actor& jobs,
                         const caf::actor& shards, const std::string& node) {
  if (!jobs || !shards || foreign_stages(self, shards) <= 0)
    return;
  auto began = std::chrono::steady_clock::now();
  self->request(jobs, std::chrono::seconds(15), drain_atom::value, node,
                false)
    .receive([](console_reply&) {}, [](caf::error&) {});
  long left = 0;
  auto deadline = began + std::chrono::seconds(15);
  while ((left = foreign_stages(self, shards)) > 0
         && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto secs = seconds_since(began);
  text::line(std::cout) << "exo-node " << node << ": "
                        << (left > 0 ? std::to_string(left)
                                         + " stages of other nodes' jobs "
                                           "still here after "
                                     : std::string{"other nodes' jobs moved "
                                                   "their stages off in "})
                        << secs << " s" << (left > 0 ? ": they re-feed" : "")
                        << std::endl;
}

/// Then its own jobs are handed to their backups with their stages and KV
/// caches (handoff_atom: nothing re-fed); a job the handoff cannot take is
/// taken over by its backup when this node has left (its replica re-fed).
void hand_jobs_over(caf::scoped_actor& self, const caf::actor& jobs,
                    const std::string& node) {
  if (!jobs)
    return;
  auto began = std::chrono::steady_clock::now();
  bool any = false;
  std::string failed;
  self->request(jobs, std::chrono::seconds(45), handoff_atom::value)
    .receive([&](console_reply& r) { any = !r.text.empty(); },
             [&](caf::error& err) { failed = self->system().render(err); });
  // Each job handed over or left to its takeover is on the log already
  // (the coordinator says each).
  if (!failed.empty())
    text::line(std::cout) << "exo-node " << node
                          << ": the jobs were not handed over (" << failed
                          << "): their backups take them over" << std::endl;
  else if (any)
    text::line(std::cout) << "exo-node " << node
                          << ": handing the jobs over took "
                          << seconds_since(began) << " s" << std::endl;
}

} // namespace

void runtime::stop() {
  auto& d = *impl_;
  if (!d.running)
    return;
  d.running = false;
  {
    caf::scoped_actor self{*d.sys};
    if (d.gate) {
      d.step = "moving other nodes' stages off this node";
      move_foreign_stages(self, service_actor("jobs"),
                          service_actor("shards"), d.cfg.node.name);
      d.step = "handing this node's jobs to their backups";
      hand_jobs_over(self, service_actor("jobs"), d.cfg.node.name);
    }
    d.step = "stopping services";
    for (auto& svc : d.services) {
      self->send_exit(svc.handle, caf::exit_reason::user_shutdown);
      self->wait_for(svc.handle);
    }
    d.services.clear();
    if (d.connection_watch) {
      self->send_exit(d.connection_watch, caf::exit_reason::user_shutdown);
      self->wait_for(d.connection_watch);
      d.connection_watch = nullptr;
    }
    if (d.heap_trim) {
      self->send_exit(d.heap_trim, caf::exit_reason::user_shutdown);
      self->wait_for(d.heap_trim);
      d.heap_trim = nullptr;
    }
    d.bulk.reset(); // joins its threads; nothing is served any more
    d.step = "leaving the cluster";
    if (d.gate) {
      // Tell every peer we leave, so they need not wait for a timeout.
      self->request(d.gate, std::chrono::seconds(2), console_atom::value,
                    std::string{"leave"}, std::string{})
        .receive([](caf::message&) {}, [](caf::error&) {});
      if (d.port != 0)
        d.sys->middleman().unpublish(d.gate, d.port);
      self->send_exit(d.gate, caf::exit_reason::user_shutdown);
      self->wait_for(d.gate);
      d.gate = nullptr;
    }
    // Ask for the device actors first, so we can wait for every one.
    d.step = "stopping the node and its devices";
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
  d.step = "closing the audit log";
  stop_safety(*d.sys, d.safety); // issue 6: the sink goes last
  std::string err;
  if (d.found.known)
    d.found.known->save(registry_path(d.cfg), err);
  d.node = nullptr;
  d.directory = nullptr;
  d.found.devices.reset();
  if (d.own_sys) {
    d.step = "releasing the actor system";
    d.own_sys.reset();
    d.own_cfg.reset();
    d.sys = nullptr;
  }
  d.step = "stopped";
}

std::string runtime::stop_step() const {
  return impl_->step.load();
}

caf::actor_system& runtime::system() {
  if (impl_->sys == nullptr)
    throw startup_error("runtime not started");
  return *impl_->sys;
}

node_actor runtime::node() const {
  return caf::actor_cast<node_actor>(impl_->node);
}

gate_actor runtime::gate() const {
  return caf::actor_cast<gate_actor>(impl_->gate);
}

jobs_actor runtime::jobs() const {
  return caf::actor_cast<jobs_actor>(service_actor("jobs"));
}

placement_actor runtime::placement() const {
  return caf::actor_cast<placement_actor>(service_actor("placement"));
}

caf::actor runtime::service_actor(const std::string& name) const {
  for (auto& svc : impl_->services)
    if (svc.name == name)
      return svc.handle;
  return {};
}

std::uint16_t runtime::port() const noexcept {
  return impl_->port;
}

const tls::material& runtime::tls_material() const noexcept {
  return impl_->tls.files;
}

std::shared_ptr<access::shared_policy> runtime::access_policy() const {
  return impl_->safety.access;
}

caf::actor runtime::audit() const {
  return impl_->safety.audit;
}

const std::string& runtime::tls_note() const noexcept {
  return impl_->tls.note;
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
