#include "actors/placement/placement_actor.hpp"

#include "core/console/commands.hpp"

#include "core/placement/problem_json.hpp"
#include "core/text/file.hpp"
#include "core/audit/event.hpp"
#include "messages/audit.hpp"
#include "messages/atoms.hpp"
#include "messages/errors.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

namespace exo::placement {

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// A job: what was asked, the model's layers, and the job's current plan.
struct job {
  plan_job_info info;
  model_spec model;
};

struct placement_state {
  static inline const char* name = "exo.placement";

  placement_actor_config cfg;
  /// The latest snapshot and the state re-planning compares against.
  std::optional<member_view> snapshot;
  std::optional<cluster_state> seen;
  /// Changes seen since the last re-plan, and the generation of the newest.
  std::vector<std::string> pending;
  std::uint64_t generation = 0;
  std::vector<job> jobs;
  std::uint64_t next_job = 1;
  std::uint64_t replans = 0;
  std::uint64_t plans = 0;
  std::uint64_t forwarded = 0;
  std::string coordinator;
  /// The latest thermal statuses (kept when a poll fails).
  thermal_view thermal;
};

using self_ptr = caf::stateful_actor<placement_state>*;

/// Takes a new snapshot in; schedules a debounced re-plan on a change.
void observe(self_ptr self, member_view v) {
  auto& st = self->state;
  auto now = state_of(v, st.thermal);
  st.snapshot = std::move(v);
  if (!st.seen) {
    st.seen = std::move(now);
    return;
  }
  if (now == *st.seen)
    return;
  auto changes = describe_changes(*st.seen, now);
  st.seen = std::move(now);
  st.pending.insert(st.pending.end(), changes.begin(), changes.end());
  ++st.generation;
  self->delayed_send(self, st.cfg.debounce, replan_atom::value,
                     st.generation);
}

objective objective_of(const plan_request& r) {
  objective o;
  o.kind = parse_objective_kind(r.objective).value_or(objective_kind::latency);
  o.blend_weight = r.blend_weight;
  return o;
}

/// Solves `r` for `m` on the latest snapshot. Blocking.
plan_info solve_on_snapshot(self_ptr self, const plan_request& r,
                            const model_spec& m) {
  auto& st = self->state;
  member_view empty;
  const auto& view = st.snapshot ? *st.snapshot : empty;
  std::uint64_t ctx = r.context_length ? r.context_length : m.context_train;
  auto conv = to_problem(view, m, ctx, objective_of(r), st.cfg.conversion,
                         st.thermal);
  conv.p.request.sequences = std::max<std::uint32_t>(r.sequences, 1);
  plan_info out;
  std::string reserved;
  try {
    reserved = reserve_for(conv, r);
    solve_options opts;
    opts.time_limit = milliseconds{r.time_limit_ms};
    out = to_plan_info(solve(conv.p, opts));
  } catch (const problem_error& e) {
    out.status = "error";
    out.explanation.push_back(e.what());
  }
  if (out.objective.empty())
    out.objective = r.objective;
  out.notes.insert(out.notes.begin(), conv.notes.begin(), conv.notes.end());
  out.planned_by = st.cfg.node_name;
  out.planned_ns = wall_ns();
  if (!out.stages.empty())
    out.reserved_device = reserved;
  ++st.plans;
  return out;
}

bool same_job(const plan_request& a, const plan_request& b) {
  return a.model_path == b.model_path && a.context_length == b.context_length
         && a.objective == b.objective && a.blend_weight == b.blend_weight
         && a.sequences == b.sequences && a.run == b.run;
}

/// Audits a placement decision (issue 6): plans and re-plans alike.
void audit_plan(self_ptr self, const std::string& job, const plan_request& r,
                const plan_info& p, const std::string& why, bool stale) {
  auto& st = self->state;
  if (!st.cfg.audit)
    return;
  std::string stages;
  for (auto& s : p.stages)
    stages += (stages.empty() ? "" : " ") + s.device + "["
              + std::to_string(s.first_layer) + ","
              + std::to_string(s.end_layer) + ")";
  audit_entry e;
  e.type = static_cast<std::uint8_t>(audit::event_type::placement_decided);
  e.level = static_cast<std::uint8_t>(
    p.stages.empty() || stale ? audit::severity::warning
                              : audit::severity::info);
  e.details = {{"job", job.empty() ? "-" : job},
               {"model", r.model_path},
               {"objective", r.objective},
               {"status", p.status},
               {"solver", p.solver},
               {"stages", stages.empty() ? "-" : stages},
               {"why", why},
               {"stale", stale ? "true" : "false"},
               {"planned_by", st.cfg.node_name}};
  self->send(st.cfg.audit, audit_atom::value, std::move(e));
}

/// Plans `r` now on the latest snapshot; keeps it as a job if asked.
caf::expected<plan_job_info> plan_now(self_ptr self, const plan_request& r) {
  auto& st = self->state;
  if (!parse_objective_kind(r.objective))
    return make_exo_error(exo_errc::invalid_argument,
                          "objective must be latency, throughput or blend, "
                          "not \""
                            + r.objective + "\"");
  if (!(r.blend_weight >= 0 && r.blend_weight <= 1))
    return make_exo_error(exo_errc::invalid_argument,
                          "blend weight must be in [0, 1]");
  model_spec m;
  try {
    // A forwarded request carries the layers: this node may lack the file.
    m = r.layers.empty() ? load_model_spec(r.model_path, r.context_length)
                         : model_of(r);
    if (m.layers.empty())
      throw problem_error("the model has no layers");
  } catch (const problem_error& e) {
    return make_exo_error(exo_errc::invalid_argument, e.what());
  }
  auto p = solve_on_snapshot(self, r, m);
  if (!r.keep) {
    audit_plan(self, {}, r, p, "request", false);
    plan_job_info out;
    out.request = r;
    out.plan = std::move(p);
    return out;
  }
  for (auto& j : st.jobs)
    if (same_job(j.info.request, r)) {
      audit_plan(self, j.info.id, r, p, "request", false);
      j.info.request = r;
      j.info.plan = std::move(p);
      j.info.stale = false;
      j.model = std::move(m);
      return j.info;
    }
  if (st.jobs.size() >= st.cfg.max_jobs && !r.run.empty()) {
    // A run whose end never reached us (its node died) must not block new
    // runs: the oldest run's job makes room.
    auto old = std::find_if(st.jobs.begin(), st.jobs.end(), [](const job& x) {
      return !x.info.request.run.empty();
    });
    if (old != st.jobs.end())
      st.jobs.erase(old);
  }
  if (st.jobs.size() >= st.cfg.max_jobs)
    return make_exo_error(exo_errc::invalid_argument,
                          "too many jobs (" + std::to_string(st.cfg.max_jobs)
                            + ")");
  job j;
  j.info.id = "job-" + std::to_string(st.next_job++);
  audit_plan(self, j.info.id, r, p, "request", false);
  j.info.request = r;
  j.info.plan = std::move(p);
  j.model = std::move(m);
  st.jobs.push_back(std::move(j));
  return st.jobs.back().info;
}

/// Re-plans every job on the latest snapshot, for the pending changes.
void replan_all(self_ptr self) {
  auto& st = self->state;
  std::string reason;
  for (auto& c : st.pending)
    reason += (reason.empty() ? "" : "; ") + c;
  st.pending.clear();
  if (st.jobs.empty())
    return;
  ++st.replans;
  for (auto& j : st.jobs) {
    auto p = solve_on_snapshot(self, j.info.request, j.model);
    // The old plan stays until a new one exists.
    if (p.stages.empty()) {
      j.info.stale = true;
      j.info.plan.notes.push_back("re-plan found no plan (" + p.status
                                  + "): keeping this one");
      for (auto& e : p.explanation)
        j.info.plan.notes.push_back(e);
    } else {
      j.info.stale = false;
      j.info.plan = std::move(p);
    }
    ++j.info.replans;
    j.info.last_reason = reason;
    j.info.last_replan_ns = wall_ns();
    audit_plan(self, j.info.id, j.info.request, j.info.plan,
               "re-plan: " + reason, j.info.stale);
  }
}

/// The devices' free memory as they report it now (the gate's "devices":
/// every node asked), over the member view's, which is refreshed about
/// once a second and gossiped, and lags further under load: a run placed
/// right after another ended was refused for the memory the ended one had
/// held. Only the memory: a device's state stays the view's (a node that
/// does not answer keeps its figures).
void overlay_free_memory(member_view& v, const std::vector<device_info>& now) {
  for (auto& m : v.members)
    for (auto& d : m.devices)
      for (auto& x : now)
        if (x.node == m.name && x.id == d.id
            && x.state != device_state::gone) {
          d.free_memory = x.free_memory;
          break;
        }
}

/// Calls `then()` after a fresh snapshot from the gate (or at once without
/// a gate, or with the last snapshot when the gate does not answer); with
/// `devices_now`, each device's free memory asked of it as well (before a
/// plan, not on every poll; at most 2 s, then the view's figures), at the
/// same time as the thermal statuses.
template <class F>
void with_fresh_snapshot(self_ptr self, F then, bool devices_now = false) {
  auto& st = self->state;
  if (!st.cfg.gate) {
    then();
    return;
  }
  self
    ->request(st.cfg.gate, seconds(3), console_atom::value,
              std::string{"nodes"}, std::string{})
    .then(
      [self, then, devices_now](console_reply& r) mutable {
        self->state.coordinator = r.text;
        struct pending {
          member_view view;
          int left = 0;
          F then;
        };
        auto p = std::make_shared<pending>(
          pending{std::move(r.nodes), devices_now ? 2 : 1, std::move(then)});
        auto done = [self, p] {
          if (--p->left == 0) {
            observe(self, std::move(p->view));
            p->then();
          }
        };
        // The thermal service (through the gate) knows this node's devices
        // and what its peers reported; without it the last statuses stay.
        self
          ->request(self->state.cfg.gate, seconds(3), console_atom::value,
                    std::string{"thermal"}, std::string{})
          .then(
            [self, done](console_reply& t) {
              if (auto th = parse_thermal_json(t.json))
                self->state.thermal = std::move(*th);
              done();
            },
            [done](caf::error&) { done(); });
        if (devices_now)
          self
            ->request(self->state.cfg.gate, seconds(2), console_atom::value,
                      std::string{"devices"}, std::string{})
            .then(
              [p, done](console_reply& d) {
                overlay_free_memory(p->view, d.devices);
                done();
              },
              [done](caf::error&) { done(); });
      },
      [then](caf::error&) mutable { then(); });
}

/// The coordinator's name when it is another node that requests should go
/// to (known from the latest "nodes" poll), else "".
std::string forward_target(self_ptr self) {
  auto& st = self->state;
  if (!st.cfg.gate || st.coordinator.empty()
      || st.coordinator == st.cfg.node_name)
    return {};
  return st.coordinator;
}

/// Sends `msg` to the placement service of `node` through the gate.
template <class... Ts>
auto ask_placement(self_ptr self, const std::string& node,
                   std::chrono::milliseconds timeout, Ts&&... xs) {
  return self->request(self->state.cfg.gate, timeout, service_atom::value,
                       node, std::string{placement_service},
                       caf::make_message(std::forward<Ts>(xs)...));
}

std::string render_error(self_ptr self, const caf::error& err) {
  auto msg = error_message(err);
  return msg.empty() ? self->system().render(err) : msg;
}

console_reply job_reply(const plan_job_info& j, bool json) {
  console_reply out;
  out.command = "plan";
  out.json = render_json(j) + "\n";
  out.text = json ? out.json : render_text(j);
  return out;
}

console_reply jobs_reply(const std::vector<plan_job_info>& jobs) {
  console_reply out;
  out.command = "plans";
  out.json = "[";
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    out.json += (i ? "," : "") + render_json(jobs[i]);
    out.text += (i ? "\n" : "") + render_text(jobs[i]);
  }
  out.json += "]\n";
  if (jobs.empty())
    out.text = "no jobs planned (use: plan MODEL.gguf)\n";
  return out;
}

std::vector<plan_job_info> job_infos(self_ptr self) {
  std::vector<plan_job_info> out;
  for (auto& j : self->state.jobs)
    out.push_back(j.info);
  return out;
}

/// `plans` on a node that is not the coordinator: the coordinator's jobs.
void forward_plans(self_ptr self, const std::string& co,
                   caf::response_promise rp) {
  ++self->state.forwarded;
  ask_placement(self, co, seconds(10), plans_atom::value)
    .then(
      [rp, co](std::vector<plan_job_info>& xs) mutable {
        auto out = jobs_reply(xs);
        out.text += "(jobs kept by the coordinator " + co + ")\n";
        rp.deliver(std::move(out));
      },
      [self, rp, co](caf::error& err) mutable {
        rp.deliver(make_exo_error(exo_errc::failed_state,
                                  "plans: the coordinator " + co
                                    + " did not answer: "
                                    + render_error(self, err)));
      });
}

/// `plan MODEL` on a node that is not the coordinator: this node reads the
/// model's layers (the coordinator may lack the file) and the coordinator
/// plans, on its snapshot, and keeps the job.
void forward_plan(self_ptr self, const std::string& co, plan_arguments a,
                  caf::response_promise rp) {
  auto& st = self->state;
  try {
    attach_model(a.request,
                 load_model_spec(a.request.model_path,
                                 a.request.context_length));
  } catch (const problem_error& e) {
    rp.deliver(make_exo_error(exo_errc::invalid_argument,
                              "plan: " + std::string{e.what()}));
    return;
  }
  a.request.origin = st.cfg.node_name;
  ++st.forwarded;
  auto limit = milliseconds{a.request.time_limit_ms} + seconds(30);
  ask_placement(self, co, limit, plan_atom::value, a.request)
    .then(
      [self, rp, a, co](plan_job_info& j) mutable {
        auto out = job_reply(j, a.json);
        if (!a.json)
          out.text += "(asked on " + self->state.cfg.node_name
                      + ", planned by the coordinator " + co + ")\n";
        rp.deliver(std::move(out));
      },
      [self, rp, co](caf::error& err) mutable {
        rp.deliver(make_exo_error(exo_errc::failed_state,
                                  "plan: the coordinator " + co
                                    + " did not answer: "
                                    + render_error(self, err)));
      });
}

caf::result<console_reply> console(self_ptr self, const std::string& cmd,
                                   const std::string& arg) {
  auto& st = self->state;
  if (cmd == "plans") {
    if (!st.cfg.gate)
      return jobs_reply(job_infos(self));
    auto rp = self->make_response_promise<console_reply>();
    with_fresh_snapshot(self, [self, rp]() mutable {
      auto co = forward_target(self);
      if (co.empty())
        rp.deliver(jobs_reply(job_infos(self)));
      else
        forward_plans(self, co, rp);
    });
    return rp;
  }
  if (cmd != "plan")
    return make_exo_error(exo_errc::invalid_argument,
                          "placement: unknown command \"" + cmd + "\"");
  plan_arguments a;
  if (auto err = parse_plan_arguments(arg, a); !err.empty())
    return make_exo_error(exo_errc::invalid_argument, "plan: " + err);
  // A client names files of the node: only inside its model folders.
  if (st.cfg.client_dirs) {
    try {
      if (!a.problem_file.empty())
        a.problem_file = text::resolve_client_file(
          a.problem_file, *st.cfg.client_dirs, "problem file");
      if (!a.request.model_path.empty())
        a.request.model_path = text::resolve_client_file(
          a.request.model_path, *st.cfg.client_dirs, "model");
    } catch (const text::file_error& e) {
      return make_exo_error(exo_errc::invalid_argument,
                            "plan: " + std::string{e.what()});
    }
  }
  if (!a.problem_file.empty()) {
    plan_info info;
    try {
      auto p = read_problem_file(a.problem_file);
      solve_options opts;
      opts.time_limit = milliseconds{a.request.time_limit_ms};
      if (a.request.objective != "file") {
        opts.objective = parse_objective_kind(a.request.objective);
        opts.blend_weight = a.request.blend_weight;
      }
      info = to_plan_info(solve(p, opts));
    } catch (const problem_error& e) {
      return make_exo_error(exo_errc::invalid_argument,
                            "plan: " + std::string{e.what()});
    }
    info.planned_by = st.cfg.node_name;
    info.planned_ns = wall_ns();
    console_reply out;
    out.command = cmd;
    out.json = render_json(info) + "\n";
    out.text = a.json ? out.json : render_text(info);
    return out;
  }
  auto rp = self->make_response_promise<console_reply>();
  with_fresh_snapshot(
    self,
    [self, rp, a]() mutable {
      if (auto co = forward_target(self); !co.empty()) {
        forward_plan(self, co, std::move(a), rp);
        return;
      }
      auto j = plan_now(self, a.request);
      if (!j) {
        rp.deliver(j.error());
        return;
      }
      rp.deliver(job_reply(*j, a.json));
    },
    true);
  return rp;
}

caf::behavior placement_impl(self_ptr self, placement_actor_config cfg) {
  self->state.cfg = std::move(cfg);
  if (self->state.cfg.gate)
    self->send(self, tick_atom::value);
  return {
    [self](tick_atom) {
      with_fresh_snapshot(self, [] {});
      self->delayed_send(self, self->state.cfg.poll_interval,
                         tick_atom::value);
    },
    [self](replan_atom, std::uint64_t generation) {
      // Only the timer of the newest change fires a re-plan.
      if (generation == self->state.generation)
        replan_all(self);
    },
    [self](snapshot_atom, member_view& v) {
      observe(self, std::move(v));
      return caf::ok_atom::value;
    },
    [self](snapshot_atom, member_view& v, std::vector<thermal_status>& xs) {
      self->state.thermal = to_thermal_view(xs);
      observe(self, std::move(v));
      return caf::ok_atom::value;
    },
    [self](plan_atom,
           plan_request& r) -> caf::result<plan_job_info> {
      auto rp = self->make_response_promise<plan_job_info>();
      with_fresh_snapshot(
        self,
        [self, rp, r]() mutable {
          auto j = plan_now(self, r);
          if (j)
            rp.deliver(std::move(*j));
          else
            rp.deliver(j.error());
        },
        true);
      return rp;
    },
    [self](plans_atom) { return job_infos(self); },
    [self](unplan_atom, const std::string& id) {
      auto& jobs = self->state.jobs;
      auto it = std::find_if(jobs.begin(), jobs.end(),
                             [&](const job& j) { return j.info.id == id; });
      if (it == jobs.end())
        return false;
      jobs.erase(it);
      return true;
    },
    [self](console_atom, std::string& cmd,
           std::string& arg) -> caf::result<console_reply> {
      return console(self, cmd, arg);
    },
    [self](inspect_atom) {
      auto& st = self->state;
      actor_snapshot s;
      s.name = "placement";
      s.kind = "placement";
      s.node = st.cfg.node_name;
      s.summary = std::to_string(st.jobs.size()) + " jobs, "
                  + std::to_string(st.replans) + " re-plans";
      s.fields = {{"jobs", std::to_string(st.jobs.size())},
                  {"plans", std::to_string(st.plans)},
                  {"replans", std::to_string(st.replans)},
                  {"forwarded", std::to_string(st.forwarded)},
                  {"coordinator", st.coordinator},
                  {"thermal_devices", std::to_string(st.thermal.size())},
                  {"pending_changes", std::to_string(st.pending.size())},
                  {"debounce_ms", std::to_string(st.cfg.debounce.count())}};
      return s;
    },
  };
}


} // namespace

std::string parse_plan_arguments(const std::string& arg, plan_arguments& out) {
  console::parsed_command p;
  try {
    p = console::parse_command("plan", arg);
  } catch (const console::command_error& e) {
    return std::string{e.what()}
           + " (plan MODEL.gguf [ctx=N] [objective=latency|throughput|blend]"
             " [blend=W] [time-limit=MS] [keep=no], or plan --problem "
             "FILE.json)";
  }
  out.json = p.has("json");
  out.problem_file = p.text("problem");
  if (!p.args.empty())
    out.request.model_path = p.args[0];
  if (p.has("ctx")) {
    auto n = p.count("ctx", 0);
    if (n > 999'999'999)
      return "ctx must be a whole number of tokens, not \"" + p.text("ctx")
             + "\"";
    out.request.context_length = static_cast<std::uint32_t>(n);
  }
  if (p.has("objective"))
    out.request.objective = p.text("objective");
  if (p.has("blend"))
    out.request.blend_weight = p.number("blend", 0);
  if (p.has("time-limit"))
    out.request.time_limit_ms
      = static_cast<std::uint32_t>(p.count("time-limit", 0));
  if (p.has("keep"))
    out.request.keep = p.text("keep") == "yes";
  if (!out.problem_file.empty()) {
    if (!out.request.model_path.empty())
      return "give a model or --problem FILE, not both";
    if (!p.has("objective"))
      out.request.objective = "file"; // the file's own objective
    return {};
  }
  if (out.request.model_path.empty())
    return "which model? plan MODEL.gguf [ctx=N] "
           "[objective=latency|throughput|blend]";
  return {};
}

std::vector<std::string> placement_commands() {
  return {"plan", "plans"};
}

caf::actor spawn_placement_actor(caf::actor_system& sys,
                                 placement_actor_config cfg) {
  return sys.spawn<caf::detached>(placement_impl, std::move(cfg));
}

caf::actor spawn_placement_actor(caf::actor_system& sys, std::string node_name,
                                 caf::actor gate,
                                 std::chrono::milliseconds poll_interval) {
  placement_actor_config cfg;
  cfg.node_name = std::move(node_name);
  cfg.gate = std::move(gate);
  cfg.poll_interval = poll_interval;
  return spawn_placement_actor(sys, std::move(cfg));
}

} // namespace exo::placement
