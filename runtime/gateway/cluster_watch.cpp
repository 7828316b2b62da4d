#include "runtime/gateway/cluster_watch.hpp"

#include "core/gateway/api_error.hpp"
#include "core/gateway/cluster_view.hpp"
#include "core/gateway/prometheus.hpp"
#include "messages/atoms.hpp"
#include "messages/cluster.hpp"
#include "messages/errors.hpp"
#include "runtime/console/render.hpp"

#include <caf/all.hpp>

#include <map>
#include <mutex>

namespace exo::gateway {

using text::json;

/// What the poller writes and the server's threads read.
struct cluster_watch::shared {
  std::string node;
  std::vector<model_entry> models;
  mutable std::mutex mx; // guards the members below
  json snapshot;
  std::string snapshot_text;
  std::map<std::string, std::string> parts; // "nodes" -> JSON
  std::vector<prometheus::device_reading> readings;
  bool ready = false;
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, std::function<void(std::string)>> subscribers;
  std::uint64_t polls = 0;
  std::uint64_t audit_last = 0; // the audit log's last sequence number
  /// The placement service's counters (its inspect fields): plans, replans.
  std::map<std::string, double> placement;

  void publish(json snap, std::vector<json> events) {
    std::vector<std::string> texts;
    for (auto& e : events)
      texts.push_back(text::compact(e));
    std::map<std::string, std::string> new_parts;
    for (auto* p : {"nodes", "devices", "links", "thermal", "jobs"})
      new_parts[p] = text::spaced(snapshot_part(snap, p)) + "\n";
    auto new_readings = device_readings(snap);
    auto new_text = text::spaced(snap) + "\n";
    // Subscribers are called under the lock: a push only posts (never
    // blocks), and unsubscribe() waiting for a push in progress is what
    // lets a server stop and free its io_context safely.
    std::lock_guard<std::mutex> guard{mx};
    parts = std::move(new_parts);
    readings = std::move(new_readings);
    snapshot_text = std::move(new_text);
    snapshot = std::move(snap);
    ready = true;
    ++polls;
    for (auto& t : texts)
      for (auto& [_, fn] : subscribers)
        fn(t);
  }
};

namespace {

using namespace std::chrono;

/// One poll's answers, filled as they arrive.
struct poll_round {
  cluster_parts parts;
  int waiting = 0;
  std::vector<json> audit;
};

struct poller_state {
  caf::actor gate;
  std::shared_ptr<cluster_watch::shared> sh;
  milliseconds interval{1000};
  json last; // the last snapshot (null before the first)
  std::uint64_t audit_after = 0;
  bool audit_started = false;
  bool polling = false;
};

using poller_ptr = caf::stateful_actor<poller_state>*;

json parse_or_null(const std::string& s) {
  auto j = json::parse(s, nullptr, false);
  return j.is_discarded() ? json{} : j;
}

std::int64_t now_ms() {
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

void finish_round(poller_ptr self, const std::shared_ptr<poll_round>& r) {
  auto& st = self->state;
  auto snap = make_snapshot(r->parts);
  auto t = now_ms();
  auto events = diff_events(st.last, snap, t);
  for (auto& e : audit_events(json(r->audit), t))
    events.push_back(std::move(e));
  st.last = snap;
  st.sh->publish(std::move(snap), std::move(events));
  st.polling = false;
  self->delayed_send(self, st.interval, tick_atom::value);
}

void ask(poller_ptr self, const std::shared_ptr<poll_round>& r,
         std::string cmd, std::string arg,
         std::function<void(console_reply&)> use) {
  ++r->waiting;
  auto done = [self, r] {
    if (--r->waiting == 0)
      finish_round(self, r);
  };
  self->request(self->state.gate, seconds(3), console_atom::value,
                std::move(cmd), std::move(arg))
    .then(
      [use, done](console_reply& reply) {
        use(reply);
        done();
      },
      [done](caf::error&) { done(); });
}

void poll(poller_ptr self) {
  auto& st = self->state;
  if (st.polling)
    return;
  st.polling = true;
  auto r = std::make_shared<poll_round>();
  r->parts.node = st.sh->node;
  json models = json::array();
  for (auto& m : st.sh->models)
    models.push_back({{"id", m.id}, {"object", "model"}, {"owned_by",
                                                          m.owned_by}});
  r->parts.models = models;
  ask(self, r, "nodes", "", [r](console_reply& x) {
    r->parts.nodes = parse_or_null(console::json(x.nodes, x.text));
  });
  ask(self, r, "devices", "", [r](console_reply& x) {
    r->parts.devices = parse_or_null(console::json(x.devices));
  });
  ask(self, r, "links", "", [r](console_reply& x) {
    r->parts.links = parse_or_null(console::json(x.links));
  });
  ask(self, r, "thermal", "", [r](console_reply& x) {
    r->parts.thermal = parse_or_null(x.json);
  });
  ask(self, r, "jobs", "", [r](console_reply& x) {
    r->parts.jobs = parse_or_null(x.json);
  });
  ask(self, r, "inspect", "placement", [self](console_reply& x) {
    if (x.actors.size() != 1)
      return;
    std::map<std::string, double> counters;
    for (auto& [k, v] : x.actors[0].fields)
      if (k == "plans" || k == "replans") {
        try {
          counters[k] = std::stod(v);
        } catch (const std::exception&) {
        }
      }
    std::lock_guard<std::mutex> guard{self->state.sh->mx};
    self->state.sh->placement = std::move(counters);
  });
  // The device stages of every node alive at the last poll (this node's
  // alone at the first): their shard hosts' inspections.
  std::vector<std::string> alive;
  if (st.last.is_object() && st.last.contains("nodes")
      && st.last["nodes"].is_array())
    for (auto& n : st.last["nodes"])
      if (n.is_object() && n.value("status", "") == "alive"
          && n.contains("name") && n["name"].is_string())
        alive.push_back(n["name"].get<std::string>());
  if (alive.empty())
    alive.push_back(st.sh->node);
  r->parts.stages = json::array();
  for (auto& name : alive)
    ask(self, r, "inspect", name + ":shards", [r, name](console_reply& x) {
      if (x.actors.size() != 1)
        return;
      for (auto& e : stage_entries(name, x.actors[0].fields))
        if (r->parts.stages.size() < max_view_entries)
          r->parts.stages.push_back(std::move(e));
    });
  // The audit log's new records (on the first poll only where it ends:
  // the events are what happens from now on).
  auto arg = st.audit_started
               ? "query after=" + std::to_string(st.audit_after)
                   + " limit=200"
               : std::string{"query limit=1"};
  ask(self, r, "audit", arg, [self, r](console_reply& x) {
    auto& st = self->state;
    auto doc = parse_or_null(x.json);
    if (!doc.is_object() || !doc.contains("records")
        || !doc["records"].is_array())
      return;
    std::uint64_t last = st.audit_after;
    for (auto& rec : doc["records"])
      if (rec.is_object() && rec.contains("seq")
          && rec["seq"].is_number_unsigned())
        last = std::max<std::uint64_t>(last, rec["seq"].get<std::uint64_t>());
    if (st.audit_started) {
      for (auto& rec : doc["records"])
        r->audit.push_back(rec);
    }
    st.audit_after = last;
    st.audit_started = true;
    std::lock_guard<std::mutex> guard{st.sh->mx};
    st.sh->audit_last = last;
  });
}

caf::behavior poller(poller_ptr self, caf::actor gate,
                     std::shared_ptr<cluster_watch::shared> sh,
                     milliseconds interval) {
  self->state.gate = std::move(gate);
  self->state.sh = std::move(sh);
  self->state.interval = interval;
  self->send(self, tick_atom::value);
  return {
    [self](tick_atom) { poll(self); },
  };
}

} // namespace

cluster_watch::cluster_watch(caf::actor_system& sys, caf::actor gate,
                             std::string node,
                             std::vector<model_entry> models,
                             std::chrono::milliseconds interval)
  : sh_(std::make_shared<shared>()) {
  sh_->node = std::move(node);
  sh_->models = std::move(models);
  // A snapshot before the first poll answers: the node and its models.
  cluster_parts first;
  first.node = sh_->node;
  json ms = json::array();
  for (auto& m : sh_->models)
    ms.push_back({{"id", m.id}, {"object", "model"}, {"owned_by",
                                                      m.owned_by}});
  first.models = ms;
  auto snap = make_snapshot(first);
  sh_->snapshot_text = text::spaced(snap) + "\n";
  for (auto* p : {"nodes", "devices", "links", "thermal", "jobs"})
    sh_->parts[p] = text::spaced(snapshot_part(snap, p)) + "\n";
  sh_->snapshot = std::move(snap);
  gate_ = gate;
  poller_ = sys.spawn(poller, std::move(gate), sh_, interval);
}

cluster_watch::~cluster_watch() {
  caf::anon_send_exit(poller_, caf::exit_reason::user_shutdown);
  std::lock_guard<std::mutex> guard{sh_->mx};
  sh_->subscribers.clear();
}

std::optional<std::string> cluster_watch::view(const std::string& name) {
  std::lock_guard<std::mutex> guard{sh_->mx};
  if (name == "cluster")
    return sh_->snapshot_text;
  auto it = sh_->parts.find(name);
  if (it == sh_->parts.end())
    return std::nullopt;
  return it->second;
}

std::uint64_t cluster_watch::subscribe(std::function<void(std::string)> push) {
  std::lock_guard<std::mutex> guard{sh_->mx};
  auto id = sh_->next_id++;
  sh_->subscribers.emplace(id, std::move(push));
  return id;
}

void cluster_watch::unsubscribe(std::uint64_t id) {
  std::lock_guard<std::mutex> guard{sh_->mx};
  sh_->subscribers.erase(id);
}

bool cluster_watch::ready() const {
  std::lock_guard<std::mutex> guard{sh_->mx};
  return sh_->ready;
}

namespace {

/// A one-shot actor: asks the gate's console `cmd arg`, hands `done` the
/// status and body `render` makes of the reply (errors: 404 when the
/// message says the thing is unknown, else 503), and quits.
void ask_once(caf::actor_system& sys, caf::actor gate, std::string cmd,
              std::string arg,
              std::function<std::string(console_reply&)> render,
              std::function<void(int, std::string)> done) {
  // At least one argument after `self`: CAF 0.17 spawns a function without
  // any by dereferencing a null tuple pointer (UBSan stops it).
  sys.spawn([=](caf::event_based_actor* self, const std::string& command) {
    self->request(gate, seconds(10), console_atom::value, command, arg)
      .then(
        [=](console_reply& r) {
          done(200, render(r));
          self->quit();
        },
        [=](caf::error& err) {
          auto msg = error_message(err);
          if (msg.empty())
            msg = self->system().render(err);
          api_error e;
          bool missing = msg.find("no job") != std::string::npos
                         || msg.find("unknown") != std::string::npos
                         || msg.find("not found") != std::string::npos;
          e.status = missing ? 404 : 503;
          e.message = cmd + ": " + msg;
          e.type = missing ? "not_found_error" : "server_error";
          e.code = missing ? "not_found" : "unavailable";
          done(e.status, to_json(e) + "\n");
          self->quit();
        });
  }, cmd);
}

} // namespace

void cluster_watch::cancel_job(std::uint64_t id,
                               std::function<void(int, std::string)> done) {
  ask_once(poller_.home_system(), gate_, "cancel", std::to_string(id),
           [](console_reply& r) {
             return r.json.empty() ? std::string{"{}\n"} : r.json;
           },
           std::move(done));
}

bool cluster_watch::ask(const std::string& name, std::size_t limit,
                        const std::string& type,
                        std::function<void(int, std::string)> done) {
  auto& sys = poller_.home_system();
  if (name == "actors") {
    ask_once(sys, gate_, "actors", type,
             [](console_reply& r) { return console::json(r.actors); },
             std::move(done));
    return true;
  }
  if (name == "plans") {
    ask_once(sys, gate_, "plans", "",
             [](console_reply& r) {
               return r.json.empty() ? std::string{"[]\n"} : r.json;
             },
             std::move(done));
    return true;
  }
  if (name == "audit") {
    // The newest `limit` records: the log is read from its start, so ask
    // where it ends first (the watcher knows the last sequence number).
    std::uint64_t last = 0;
    {
      std::lock_guard<std::mutex> guard{sh_->mx};
      last = sh_->audit_last;
    }
    auto arg = "query limit=" + std::to_string(limit)
               + (last > limit ? " after=" + std::to_string(last - limit)
                               : std::string{})
               + (type.empty() ? std::string{} : " type=" + type);
    ask_once(sys, gate_, "audit", arg,
             [](console_reply& r) {
               return r.json.empty() ? std::string{"{\"records\":[]}\n"}
                                     : r.json + "\n";
             },
             std::move(done));
    return true;
  }
  return false;
}

void cluster_watch::collect(prometheus::text_writer& w) {
  std::vector<prometheus::device_reading> readings;
  std::uint64_t polls = 0, audit_last = 0;
  std::size_t nodes = 0, jobs = 0, waiting = 0;
  json links, thermal, stages;
  std::map<std::string, double> placement;
  {
    std::lock_guard<std::mutex> guard{sh_->mx};
    placement = sh_->placement;
    stages = sh_->snapshot["stages"];
    readings = sh_->readings;
    audit_last = sh_->audit_last;
    links = sh_->snapshot["links"];
    thermal = sh_->snapshot["thermal"];
    polls = sh_->polls;
    auto& n = sh_->snapshot["nodes"];
    if (n.is_array())
      for (auto& x : n)
        if (x.is_object() && x.value("status", "") == "alive")
          ++nodes;
    const auto counted = count_jobs(sh_->snapshot);
    jobs = counted.running;
    waiting = counted.waiting;
  }
  prometheus::write_device_gauges(w, readings);
  w.family("exo_cluster_nodes", "Members of the cluster that are alive",
           prometheus::metric_type::gauge);
  w.sample({}, static_cast<double>(nodes));
  w.family("exo_jobs_running", "Jobs this node coordinates now",
           prometheus::metric_type::gauge);
  w.sample({}, static_cast<double>(jobs));
  w.family("exo_jobs_waiting",
           "Jobs this node coordinates that wait for memory to be admitted",
           prometheus::metric_type::gauge);
  w.sample({}, static_cast<double>(waiting));
  auto text_of = [](const json& o, const char* k) {
    return o.contains(k) && o[k].is_string() ? o[k].get<std::string>()
                                             : std::string{};
  };
  auto num_of = [](const json& o, const char* k) {
    return o.contains(k) && o[k].is_number() ? o[k].get<double>() : -1.0;
  };
  if (links.is_array() && !links.empty()) {
    w.family("exo_link_rtt_seconds", "Measured round trip (p50) of a link",
             prometheus::metric_type::gauge);
    for (auto& l : links)
      if (num_of(l, "rtt_p50_us") >= 0)
        w.sample({{"from", text_of(l, "from")}, {"to", text_of(l, "to")}},
                 num_of(l, "rtt_p50_us") / 1e6);
    w.family("exo_link_bandwidth_bytes_per_second",
             "Measured bandwidth of a link", prometheus::metric_type::gauge);
    for (auto& l : links)
      if (num_of(l, "bandwidth_bps") >= 0)
        w.sample({{"from", text_of(l, "from")}, {"to", text_of(l, "to")}},
                 num_of(l, "bandwidth_bps"));
  }
  if (thermal.is_array() && !thermal.empty()) {
    w.family("exo_thermal_state",
             "1 for a device's thermal state (normal, warm, paused, ...)",
             prometheus::metric_type::gauge);
    for (auto& t : thermal)
      w.sample({{"node", text_of(t, "node")},
                {"device", text_of(t, "device")},
                {"state", text_of(t, "state")}},
               1);
  }
  if (placement.count("plans")) {
    w.family("exo_placement_plans_total",
             "Plans the placement service has solved (console plan)",
             prometheus::metric_type::counter);
    w.sample({}, placement["plans"]);
  }
  if (placement.count("replans")) {
    w.family("exo_placement_replans_total",
             "Plans the placement service solved again after a change",
             prometheus::metric_type::counter);
    w.sample({}, placement["replans"]);
  }
  write_stage_metrics(w, stages);
  w.family("exo_audit_last_sequence",
           "The last sequence number of this node's audit log",
           prometheus::metric_type::gauge);
  w.sample({}, static_cast<double>(audit_last));
  w.family("exo_cluster_polls_total",
           "Snapshots of the cluster the gateway has taken",
           prometheus::metric_type::counter);
  w.sample({}, static_cast<double>(polls));
}

} // namespace exo::gateway
