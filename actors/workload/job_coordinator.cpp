#include "actors/workload/job_coordinator.hpp"
#include "core/text/line.hpp"

#include "core/text/json.hpp"
#include "core/text/number.hpp"

#include <deque>

#include "actors/placement/placement_actor.hpp"
#include "actors/workload/handoff_check.hpp"
#include "actors/workload/job_actor.hpp"
#include "actors/workload/simple_placement.hpp"
#include "actors/workload/solver_placement.hpp"
#include "core/audit/event.hpp"
#include "core/console/commands.hpp"
#include "core/config/node_config.hpp"
#include "core/text/file.hpp"
#include "core/model/device_stage.hpp"
#include "core/model/json_constraint.hpp"
#include "core/model/stage_ranges.hpp"
#include "core/tls/bulk_channel.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/workload/job_lineage.hpp"
#include "core/workload/job_numbers.hpp"
#include "core/workload/job_request.hpp"
#include "core/workload/model_cache.hpp"
#include "core/workload/run_options.hpp"
#include "messages/audit.hpp"
#include "messages/cluster.hpp"
#include "messages/errors.hpp"
#include "messages/placement.hpp"
#include "messages/thermal.hpp"
#include "messages/workload.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

namespace exo::workload {

namespace {

using namespace std::chrono_literals;

/// Where a job's events go: a listener actor, the node's stdout (the
/// console's `run`), or nowhere. `token` is called in the job's context.
struct job_sink {
  std::function<void(const job_placed&)> placed;
  std::function<void(const job_started&)> started;
  std::function<void(const job_token&)> token;
  /// Called in the job's context with each sequence's prompt scores
  /// (job_request::prompt_logprobs), before its first token.
  std::function<void(const job_prompt_scores&)> scores;
  /// Called in the job's context after a recovery (its stall measured).
  std::function<void(const job_recovered&)> recovered;
  /// Called once, in the coordinator's context, with the report or the
  /// error that ended the job.
  std::function<void(caf::expected<job_report>)> done;
};

struct job_run;

/// A client following a job as a stream ((attach_atom, key, prompt,
/// listener, forward)): its listener gets every token, the promise the
/// job's report.
struct follower {
  caf::actor listener;
  caf::typed_response_promise<job_report> rp;
};

/// The tokens a job generated so far, per sequence: written by the job (in
/// its context) as they come, read by the coordinator to replicate them.
struct token_log {
  std::mutex mx;
  std::vector<std::vector<std::int32_t>> tokens;
  /// With job_request::logprobs: each token's log-probabilities, beside
  /// `tokens` (as many per sequence); else empty.
  std::vector<std::vector<model::token_logprobs>> logprobs;
  /// With job_request::prompt_logprobs: each sequence's prompt scores,
  /// once its job computed them (job_prompt_scores; job empty when not
  /// yet).
  std::vector<job_prompt_scores> prompt_scores;
  /// Per sequence: how many of `tokens` are whole (job_setup::on_settled:
  /// no round of speculative decoding under way past them) and the
  /// numbers its sampler drew for them: what is replicated.
  std::vector<std::size_t> whole;
  std::vector<std::uint64_t> draws;
  /// The losses the job survived (its earlier coordinators' too).
  std::vector<job_recovered> recoveries;
  /// The followers' listeners: each got the tokens so far, under `mx`,
  /// when it was added; the job sends them each new one.
  std::vector<caf::actor> listeners;
};

/// A job this node coordinates (console `jobs`, `cancel`).
struct running_job {
  caf::actor job;
  std::string model;
  std::string stages;
  /// Where its layers are (console `jobs` JSON, the gateway's views).
  std::vector<stage_place> plan;
  std::uint32_t sequences = 0;
  std::uint32_t n_gen = 0;
  std::chrono::steady_clock::time_point started;
  /// Tokens generated so far (written by the job, read by the coordinator).
  std::shared_ptr<std::atomic<std::uint64_t>> tokens;
  bool cancel_requested = false;
  std::weak_ptr<job_run> run; ///< its placement, stages and recoveries
  /// "NODE:ID" of the node that first coordinated it (attach finds it by
  /// that, and by its run --id name).
  std::string key;
  /// "ORIGIN:ID" this node backed it up as before it took it over ("" for
  /// a job that started here); not `key` for a job taken over twice: its
  /// origin asks by it.
  std::string taken_from;
  /// The keys of the copies before this one (job_replica::lineage).
  std::vector<std::string> lineage;
  /// The node that took this copy over while this node was unreachable
  /// (end_taken_over): this copy ends, the job runs there. "" if none.
  std::string moved_to;
  std::string name;
  /// Replication (with a gate): every token so far, the node that backs
  /// the job up ("" none yet), the tokens it holds per sequence and the
  /// nodes that refused.
  std::shared_ptr<token_log> log;
  std::string backup;
  /// The backup answered the replica: it holds the model (and the draft,
  /// or failed to fetch it) and could take the job over now.
  bool backup_ready = false;
  std::vector<std::uint32_t> replicated;
  std::size_t replicated_recoveries = 0;
  std::set<std::string> refused;
  /// Replication ticks since the last message to the backup.
  int quiet_ticks = 0;
  /// Backups this node saw go down while they held the job's replica: any
  /// of them may have taken the job over (this node was the one cut off,
  /// or both were). Each is asked every heartbeat while alive here, until
  /// it answers (probe_former_backups); ticks since the last asking.
  std::set<std::string> former_backups;
  int probe_ticks = 0;
  /// This node was paused about the failure timeout while the job ran (at
  /// `fenced_at`, check_fences): the node that backed it up then may have
  /// taken it over.
  /// Until that node answers after the pause (fence_limit at most), a lost
  /// stage is not re-placed (held_recovery, what was lost): the copy waits
  /// instead of running on beside the copy taken over.
  std::set<std::string> fence;
  std::chrono::steady_clock::time_point fenced_at;
  std::optional<std::string> held_recovery;
  /// Clients whose connection dropped ((cancel_atom, id, listener,
  /// grace)): the job is cancelled once its grace has passed if every
  /// client it has is among them.
  std::set<caf::actor_addr> left;
  /// Being handed to its backup (this node stops): no more progress to it.
  bool handing_off = false;
};

/// A job this node backs up for the node that coordinates it (job_replica):
/// taken over when that node dies or leaves.
struct backup_job {
  job_replica replica;
  std::string path; ///< the whole model in this node's cache, once fetched
  /// The draft model there, once fetched ("" without one, or when it
  /// could not be: the job then goes on without it).
  std::string draft_path;
  /// The draft model is being fetched (beside the model). A takeover
  /// meanwhile goes on without it: a greedy job's tokens are the same, a
  /// sampled one's are drawn from the same distribution but are not the
  /// uninterrupted run's (its rounds drew other numbers).
  bool draft_pending = false;
  /// When the last of its tokens arrived here.
  std::chrono::steady_clock::time_point last_token;
  /// Clients attached before a takeover (attach_atom): moved to the run.
  std::vector<caf::typed_response_promise<console_reply>> attached;
  std::vector<follower> followers;
};

struct job_run;

/// A follow asked of the other nodes (none of this node's jobs is `key`):
/// asked again, while `deadline` allows, when every node said no.
struct pending_follow {
  std::string key;
  std::string prompt;
  caf::actor listener;
  caf::typed_response_promise<job_report> rp;
  std::chrono::steady_clock::time_point deadline;
  std::uint32_t round = 0;
  std::set<std::string> asked; ///< nodes whose answer this round awaits
  std::string misses;          ///< what they said
};

/// An ended run's tokens and report, for a follower that comes late.
struct ended_stream {
  std::string prompt; ///< prompt_identity (a follower gives the same)
  std::vector<job_prompt_scores> scores; ///< before the tokens
  std::vector<job_token> tokens;
  caf::expected<job_report> report{job_report{}};
};

/// Most tokens of an ended run kept for late followers.
constexpr std::size_t max_replayed_tokens = 16384;

struct coordinator_state {
  job_coordinator_config cfg;
  /// Runs whose stages are starting (not yet a running job): a member that
  /// dies ends those with a stage on it.
  std::vector<std::weak_ptr<job_run>> starting;
  std::map<std::string, std::string> offered; ///< sha256 -> path
  /// Parts with digests per "sha256:first:last", computed once.
  std::map<std::string, std::vector<workload::model_part>> parts;
  std::uint64_t jobs = 0; ///< jobs started since this node started
  /// Job ids: they go on across restarts (job_numbers_file).
  workload::job_numbers numbers;
  std::map<std::uint64_t, running_job> running; ///< by job id
  /// The other members alive now (the gate's member events): where
  /// backups are chosen.
  std::set<std::string> alive;
  /// Whether any other member was ever alive since this node started,
  /// and when it started: a seeded node that met no one yet is not alone
  /// (cfg.seeded).
  bool met_peer = false;
  std::chrono::steady_clock::time_point started
    = std::chrono::steady_clock::now();
  /// When each member was last seen dead or gone (the gate's member
  /// events), for lineage_believed; entries older than lineage_window go.
  std::map<std::string, std::chrono::steady_clock::time_point> went_down;
  /// The jobs of other nodes this node backs up, by "ORIGIN:ID".
  std::map<std::string, backup_job> backups;
  /// The replication timer runs; when it last ticked (a gap of more than
  /// 3/4 of the failure timeout: this node was paused, check_fences).
  bool replicating = false;
  std::chrono::steady_clock::time_point last_replicate;
  /// The jobs linked to it (they stop with it), until their exit message.
  std::set<caf::actor_addr> linked_jobs;
  /// The ends of the last runs (attach after the end, or through a backup
  /// whose origin finished it): key, name, what attach answers.
  struct ended_run {
    std::string key;
    std::string name;
    /// NODE:ID of its run here: a job taken over keeps its first key, but
    /// its backup knows it by this one (and asks by it when it ends).
    std::string here;
    std::string taken_from; ///< as running_job::taken_from
    std::string moved_to; ///< as running_job::moved_to
    caf::expected<console_reply> reply;
    /// For a follower (null when the run never started or was too long).
    std::shared_ptr<const ended_stream> stream;
  };
  std::deque<ended_run> ended;
  /// The last jobs that ended (console `jobs` JSON "recent"), newest last:
  /// a job shorter than a watcher's poll is still seen, with its final
  /// token count and outcome.
  std::deque<text::json> recent;
  /// Runs waiting for memory (no plan fits now; held here, nothing else
  /// does), first come first placed; the one being placed again; whether
  /// the retry timer runs.
  std::deque<std::shared_ptr<job_run>> waiting;
  std::weak_ptr<job_run> retrying;
  bool retry_timer = false;
  /// Runs from their start to their end (they may hold memory), and when
  /// the last one ended (its stages stop after it: their memory comes
  /// back a little later).
  std::size_t live = 0;
  std::chrono::steady_clock::time_point last_end{};
  /// Follows asked of the other nodes, by number.
  std::map<std::uint64_t, pending_follow> follows;
  /// Nodes drained (`drain NODE`, a node stopping), until when: new runs
  /// are not placed there (a node that leaves is forgotten here).
  std::map<std::string, std::chrono::steady_clock::time_point> drained;
  std::uint64_t next_follow = 0;
  static inline const char* name = "exo.job_coordinator";
};

/// How many ended jobs `recent` keeps.
constexpr std::size_t recent_jobs = 20;

using self_ptr = caf::stateful_actor<coordinator_state>*;

void follow_missed(self_ptr self, std::uint64_t n, std::uint32_t round,
                   const std::string& node, const caf::error& err);

/// One job, from its request to its report.
struct job_run {
  prepared_job job;
  job_sink sink;
  std::string sha; ///< "" without a gate (the job stays on this node)
  std::uint64_t size = 0;
  /// The draft model's digest and size (with a gate and a draft), so that a
  /// backup can fetch it.
  std::string draft_sha;
  std::uint64_t draft_size = 0;
  std::vector<stage_place> plan;
  std::string placement_text; ///< how it was placed
  std::string first_placement; ///< how it was placed when the job started
  std::vector<shard_ready> ready;
  std::size_t pending = 0;
  std::string error;
  /// The placement job kept for this run and the node keeping it (the
  /// coordinator), dropped when the run ends; "" without one.
  std::string plan_job;
  std::string planner;
  /// Speculative decoding: the draft model's shard (on this node) and
  /// where it runs, or why it does not.
  caf::actor draft;
  std::string draft_where;
  /// The device the plan kept the draft's memory on (its id on this
  /// node), "" when the plan kept none: the node picks.
  std::string draft_device;
  bool ended = false;
  /// The job once it runs (0 and none before).
  std::uint64_t id = 0;
  caf::actor job_handle;
  /// Placements tried (the first, then one per re-placement): answers of
  /// an earlier one are dropped (their shards stopped).
  std::uint32_t attempt = 0;
  /// Nodes lost while the run lasts: never placed on again; and the
  /// devices ("node/id") that failed under a stage, their nodes alive.
  std::set<std::string> lost_nodes;
  std::set<std::string> lost_devices;
  /// Of lost_devices, those left for heat only (a thermal pause): given
  /// back when no other device has room (no_room), the run then waits
  /// there for the device to cool rather than end.
  std::set<std::string> heat_paused;
  /// Devices given back that way: placed on even while paused (their
  /// stages start and run once they cool).
  std::set<std::string> wait_to_cool;
  /// A running job waiting for its new pipeline (recover_atom).
  std::optional<caf::typed_response_promise<job_pipeline>> recovery;
  std::string lost_why; ///< what the current re-placement follows
  /// Between a loss and the new stages being linked: a loss meanwhile
  /// (a node of the new plan dying) places it again, both losses said.
  bool replacing = false;
  std::uint64_t bytes_sent = 0; ///< model bytes sent, all placements
  /// A job taken over from a coordinator that died: its "ORIGIN:ID", the
  /// tokens replicated so far, what happened and when.
  std::string key;
  std::string taken_from; ///< as running_job::taken_from
  std::string moved_to; ///< as running_job::moved_to
  std::vector<std::string> lineage; ///< as running_job::lineage
  std::vector<std::vector<std::int32_t>> generated;
  std::vector<std::uint64_t> generated_draws; ///< their samplers' draws
  /// Their log-probabilities (job_request::logprobs; else empty).
  std::vector<std::vector<model::token_logprobs>> generated_logprobs;
  std::string resumed_after;
  std::uint64_t resumed_moved_bytes = 0;
  std::vector<job_recovered> earlier_recoveries; ///< before the takeover
  std::chrono::steady_clock::time_point resumed_since{};
  std::chrono::steady_clock::time_point resumed_last_token{};
  /// Clients waiting for its end (attach): they get run's reply.
  std::vector<caf::typed_response_promise<console_reply>> attached;
  /// Clients following it as a stream; and the token log they are in
  /// once the job runs.
  std::vector<follower> followers;
  std::shared_ptr<token_log> log;
  /// Counted in coordinator_state::live until it ends.
  bool live = false;
  /// Waiting for memory (no plan fits): since when, until when at most,
  /// and whether it is in the queue now; the devices whose KV cache could
  /// not grow (left out of the next placement only: they may have room
  /// once the run waited).
  std::chrono::steady_clock::time_point wait_since{};
  std::chrono::steady_clock::time_point wait_until{};
  bool waiting = false;
  std::string wait_why; ///< why it waits: the last placement's answer
  /// Who asked (run_atom's listener): it may withdraw the run while it
  /// waits (cancel_atom with itself).
  caf::actor_addr listener;
  std::set<std::string> full_devices;
  /// The code a run that ends with an error ends with.
  exo_errc end_code = exo_errc::failed_state;
  /// Handed to its backup (this node stops): it ends here without a word,
  /// its clients re-attach there.
  bool handed_off = false;
  /// A job handed over to this node: its stages, kept as they are.
  std::optional<job_handoff> handoff;
  /// Cancelled before its job runs (a cancel its origin received while it
  /// handed the job over): the job stops as soon as it starts.
  bool cancel_on_start = false;
};

/// How many placements a run may go through (the first and re-placements
/// after losses) before a loss ends it.
constexpr std::uint32_t max_placements = 8;

using run_ptr = std::shared_ptr<job_run>;

caf::error fail(exo_errc code, std::string what) {
  return make_exo_error(code, std::move(what));
}

std::string render(self_ptr self, const caf::error& err) {
  auto msg = error_message(err);
  return msg.empty() ? self->system().render(err) : msg;
}

/// Stops the run's stages, drops its kept plan and, with an error, ends it
/// at once; then runs `then` once the placement service has dropped the
/// plan (at most 2 s), so that a run started after a finished one's
/// answer is placed without its reservation. A re-placement that fails
/// answers its job instead (which ends and comes back here).
void drop_plan(self_ptr self, const run_ptr& run,
               std::function<void()> then);

void end_run(self_ptr self, const run_ptr& run, std::string error,
             std::function<void()> then = {}) {
  for (auto& r : run->ready)
    if (r.shard)
      self->send_exit(r.shard, caf::exit_reason::user_shutdown);
  if (run->draft && !run->recovery) {
    self->send_exit(run->draft, caf::exit_reason::user_shutdown);
    run->draft = nullptr;
  }
  if (run->recovery) {
    auto rp = std::move(*run->recovery);
    run->recovery.reset();
    rp.deliver(fail(run->end_code, std::move(error)));
    return;
  }
  if (!error.empty() && !run->ended) {
    run->ended = true;
    run->sink.done(fail(run->end_code, std::move(error)));
  }
  drop_plan(self, run, std::move(then));
}

/// The coordinator stops re-planning (and reserving for) the run's kept
/// plan; `then` runs once it did (at most 2 s).
void drop_plan(self_ptr self, const run_ptr& run,
               std::function<void()> then) {
  if (run->plan_job.empty()) {
    if (then)
      then();
    return;
  }
  // The coordinator stops re-planning the ended run. A request, not a
  // send: the answer must come back to a handler (an unexpected answer is
  // refused with an error, and an error message stops an actor).
  auto once = std::make_shared<std::function<void()>>(std::move(then));
  auto go = [once] {
    if (*once) {
      auto f = std::move(*once);
      *once = nullptr;
      f();
    }
  };
  self
    ->request(self->state.cfg.gate, 2s, service_atom::value, run->planner,
              std::string{placement::placement_service},
              caf::make_message(unplan_atom::value, run->plan_job))
    .then([go](bool) { go(); }, [go](caf::error&) { go(); });
  run->plan_job.clear();
}

/// Sends one job event to the node's audit sink, if there is one.
void audit_job(self_ptr self, audit::event_type type,
               std::map<std::string, std::string> details,
               audit::severity level = audit::severity::info) {
  auto& st = self->state;
  if (!st.cfg.audit)
    return;
  audit_entry e;
  e.type = static_cast<std::uint8_t>(type);
  e.level = static_cast<std::uint8_t>(level);
  e.details = std::move(details);
  e.details["node"] = st.cfg.node;
  self->send(st.cfg.audit, audit_atom::value, std::move(e));
}

/// The parts of the run's model a stage of layers [first, last) needs,
/// with their digests (hashed once per model and range).
std::vector<workload::model_part> stage_parts(self_ptr self,
                                              const job_run& run,
                                              std::uint32_t first,
                                              std::uint32_t last) {
  auto key = run.sha + ":" + std::to_string(first) + ":"
             + std::to_string(last);
  auto& memo = self->state.parts;
  if (auto it = memo.find(key); it != memo.end())
    return it->second;
  std::vector<workload::model_part> out;
  auto& path = run.job.request.model;
  for (auto& r : model::stage_file_ranges(*run.job.model, first, last))
    out.push_back(
      {r.offset, r.length, workload::range_sha256(path, r.offset, r.length)});
  memo[key] = out;
  return out;
}

/// The job's report, built in the job's context when it ends.
job_report make_report(const job_run& run, std::uint64_t id,
                       const job_result& r) {
  job_report out;
  out.job = id;
  out.placement = run.first_placement;
  out.stages = static_cast<std::uint32_t>(run.ready.size());
  out.model_sha256 = run.sha;
  out.bytes_sent = run.bytes_sent;
  out.recoveries = r.recoveries;
  out.draft = run.draft_where;
  out.drafted = r.drafted;
  out.accepted = r.accepted;
  out.tokens = r.tokens;
  for (auto& t : r.tokens)
    out.texts.push_back(run.job.tokenizer->decode(t));
  if (run.job.request.keep_logits && !r.logits.empty())
    out.logits = r.logits[0];
  out.prompt_tokens = r.prompt_tokens;
  out.shared_prompt_tokens = r.shared_prompt_tokens;
  out.cached_prompt_tokens = r.cached_prompt_tokens;
  out.generated_tokens = r.generated_tokens;
  out.prompt_s = r.prompt_s;
  out.generation_s = r.generation_s;
  out.cancelled = r.cancelled;
  return out;
}

/// A job as console `jobs` JSON shows it.
text::json job_json(std::uint64_t id, const running_job& j,
                    const std::string& state) {
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - j.started)
                .count();
  text::json stages = text::json::array();
  for (auto& p : j.plan)
    stages.push_back({{"node", p.node},
                      {"device", p.device},
                      {"device_name", p.device_name},
                      {"first_layer", p.first},
                      // inclusive (the plan's `last` is one past)
                      {"last_layer", p.last > p.first ? p.last - 1 : p.first}});
  return {{"job", id},
          {"model", j.model},
          {"state", state},
          {"tokens", j.tokens ? j.tokens->load(std::memory_order_relaxed) : 0},
          {"sequences", j.sequences},
          {"n_gen", j.n_gen},
          {"seconds", text::number(secs, 4)},
          {"cancelling", j.cancel_requested},
          {"key", j.key},
          {"name", j.name},
          {"backup", j.backup},
          {"backup_ready", j.backup_ready},
          {"stages", stages}};
}

/// Moves job `id` from `running` to `recent` with its outcome.
void job_ended(self_ptr self, std::uint64_t id, const std::string& state) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end())
    return;
  st.recent.push_back(job_json(id, it->second, state));
  if (st.recent.size() > recent_jobs)
    st.recent.pop_front();
  st.running.erase(it);
}

/// Where the run's stages are: "n1/cpu:0 n2/cpu:0".
std::string stage_list(const job_run& run) {
  std::string out;
  for (auto& r : run.ready)
    out += (out.empty() ? "" : " ") + r.node + "/" + r.device;
  return out;
}

/// The indices of the stages of `plan` on `node`.
std::vector<std::uint32_t> stages_on(const std::vector<stage_place>& plan,
                                     const std::string& node) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < plan.size(); ++i)
    if (plan[i].node == node)
      out.push_back(i);
  return out;
}

/// How often the tokens of the running jobs go to their backups.
constexpr auto replicate_period = std::chrono::milliseconds(100);

/// Replication ticks without new tokens before a message goes anyway (a
/// heartbeat, 1 s).
constexpr int heartbeat_ticks = 10;

/// How long a member seen dead or gone is remembered so (coordinator_state::
/// went_down): workload::lineage_window.
using workload::lineage_window;

/// How many jobs of other nodes one node backs up at most.
constexpr std::size_t max_backups = 1024;

void replicate_tick(self_ptr self);

/// Whether `err` is a backup's answer that it runs the job now (what it
/// answers an origin that was frozen or cut off, declared dead, and came
/// back: the origin then ends its copy, replicate_tick).
bool taken_over(const caf::error& err) {
  return err.category() == exo_error_category()
         && err.code() == static_cast<std::uint8_t>(exo_errc::failed_state)
         && error_message(err).find(console::job_taken_over)
              != std::string::npos;
}

/// Tells `node` to drop its replica of job `id` (job_progress::ended):
/// the job ended here (`moved_to` empty), this copy was taken over by
/// `moved_to`, or (`moved_to` this node) the job goes on here and `node`
/// no longer backs it up. Asked, not sent, and nothing waits for the
/// answer: a node that does not get it holds a replica nobody updates,
/// which it drops when it hears of the job's end or its holder.
void send_drop(self_ptr self, std::uint64_t id, const std::string& node,
               const std::string& moved_to) {
  auto& st = self->state;
  job_progress p;
  p.origin = st.cfg.node;
  p.job = id;
  p.ended = true;
  p.moved_to = moved_to;
  self
    ->request(st.cfg.gate, 30s, service_atom::value, node,
              std::string{"jobs"},
              caf::make_message(replicate_atom::value, std::move(p)))
    .then([](caf::ok_atom) {}, [](caf::error&) {});
}

/// Job `id`'s backup and its former backups that are alive here, but
/// `except`: the nodes that may hold a replica of it.
std::vector<std::string> replica_holders(const coordinator_state& st,
                                         const running_job& rj,
                                         const std::string& except) {
  std::vector<std::string> out;
  if (!rj.backup.empty() && rj.backup != except)
    out.push_back(rj.backup);
  for (auto& fb : rj.former_backups)
    if (fb != rj.backup && fb != except && st.alive.count(fb) != 0)
      out.push_back(fb);
  return out;
}

/// Ends this node's copy of job `id`, which its backup took over while
/// this node was unreachable: the job stops, its stages too. The nodes
/// that back this copy up drop their replicas and send the clients
/// attached there on to the node that took it over (a replica kept would
/// hold them until the job's end never came, and would be taken over
/// again if this node went).
void end_taken_over(self_ptr self, std::uint64_t id, const std::string& why) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end() || !it->second.moved_to.empty())
    return; // not here, or ending already (another node said so first)
  exo::text::line(std::cout) << "exo-node " << st.cfg.node << ": job " << id
            << " ends here: " << why << std::endl;
  const auto taker = console::taken_over_by(why);
  if (!it->second.handing_off)
    for (auto& n : replica_holders(st, it->second, taker))
      send_drop(self, id, n, taker);
  it->second.former_backups.clear();
  it->second.backup.clear(); // no more progress, no replica to drop
  it->second.backup_ready = false;
  it->second.moved_to = console::taken_over_by(why);
  if (auto run = it->second.run.lock()) {
    run->moved_to = it->second.moved_to;
    end_run(self, run, why);
  }
  it->second.cancel_requested = true;
  // Asked, not sent: the job answers whether it stops, and an answer to a
  // plain message would come back here as one nobody handles.
  self->request(it->second.job, 10s, cancel_atom::value)
    .then([](bool) {}, [](caf::error&) {});
}

/// Entries [from, to) of a sequence's log-probabilities, as far as it has
/// them.
std::vector<model::token_logprobs>
logprobs_between(const std::vector<model::token_logprobs>& l,
                 std::size_t from, std::size_t to) {
  to = std::min(to, l.size());
  from = std::min(from, to);
  return {l.begin() + static_cast<std::ptrdiff_t>(from),
          l.begin() + static_cast<std::ptrdiff_t>(to)};
}

/// Chooses a node to back job `id` up — an alive member that is not this
/// node, has not refused, preferably one without a stage of the job (it
/// would be lost with it) — and sends it the job's replica. A node that
/// refuses or fails is left out and the next one tried; with none left the
/// job runs without a backup (said on the node's log).
void choose_backup(self_ptr self, std::uint64_t id) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end() || !st.cfg.gate || !st.cfg.backups)
    return;
  auto& rj = it->second;
  auto run = rj.run.lock();
  if (!run || run->ended)
    return;
  rj.backup.clear();
  rj.backup_ready = false;
  std::string pick;
  for (int pass = 0; pass < 2 && pick.empty(); ++pass)
    for (auto& m : st.alive) {
      if (m == st.cfg.node || rj.refused.count(m) != 0)
        continue;
      if (pass == 0 && !stages_on(rj.plan, m).empty())
        continue;
      pick = m;
      break;
    }
  if (pick.empty())
    return;
  job_replica r;
  r.origin = st.cfg.node;
  r.job = id;
  r.request = run->job.request;
  r.request.model.clear(); // a path of this node: no use elsewhere
  r.lineage = rj.lineage;
  r.model_sha256 = run->sha;
  r.model_size = run->size;
  r.draft_sha256 = run->draft_sha;
  r.draft_size = run->draft_size;
  {
    std::lock_guard<std::mutex> guard{rj.log->mx};
    for (std::size_t j = 0; j < rj.log->tokens.size(); ++j) {
      auto& t = rj.log->tokens[j];
      r.tokens.emplace_back(t.begin(),
                            t.begin()
                              + static_cast<std::ptrdiff_t>(
                                std::min(rj.log->whole[j], t.size())));
    }
    r.draws = rj.log->draws;
    r.recoveries = rj.log->recoveries;
    for (std::size_t j = 0; j < rj.log->logprobs.size(); ++j)
      r.logprobs.push_back(
        logprobs_between(rj.log->logprobs[j], 0, r.tokens[j].size()));
  }
  rj.replicated_recoveries = r.recoveries.size();
  rj.backup = pick;
  rj.replicated.clear();
  for (auto& t : r.tokens)
    rj.replicated.push_back(static_cast<std::uint32_t>(t.size()));
  // The backup fetches the whole model first (it may have to run every
  // layer): a long deadline.
  self
    ->request(st.cfg.gate, 3600s, service_atom::value, pick,
              std::string{"jobs"},
              caf::make_message(replicate_atom::value, std::move(r)))
    .then(
      [self, id, pick](caf::ok_atom) {
        auto it = self->state.running.find(id);
        if (it != self->state.running.end() && it->second.backup == pick)
          it->second.backup_ready = true;
      },
      [self, id, pick](caf::error& err) {
        auto& st = self->state;
        auto it = st.running.find(id);
        if (it == st.running.end() || it->second.backup != pick)
          return;
        if (taken_over(err)) { // it knows the job runs elsewhere now
          end_taken_over(self, id,
                         error_message(err)
                           + " while this node was unreachable");
          return;
        }
        exo::text::line(std::cerr) << "exo-node " << st.cfg.node << ": job " << id
                  << " is not backed up on " << pick << ": "
                  << render(self, err) << std::endl;
        it->second.refused.insert(pick);
        choose_backup(self, id);
      });
  if (!st.replicating) {
    st.replicating = true;
    self->delayed_send(self, replicate_period, tick_atom::value);
  }
}

void replace_run(self_ptr self, const run_ptr& run, std::string why);

/// How long a fenced job waits for the node that backed it up before this
/// node was paused (running_job::fence): a node that took the job over
/// answers well within it; one that crashed never does, and the job goes
/// on.
std::chrono::milliseconds fence_limit(const job_coordinator_config& cfg) {
  return std::max<std::chrono::milliseconds>(4 * cfg.failure_timeout, 10s);
}

/// Job `id` need not wait for `node` any more (it answered, or the wait is
/// over): once no node is left to hear from, a re-placement that waited
/// goes on.
void unfence(self_ptr self, std::uint64_t id, const std::string& node) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end())
    return;
  auto& rj = it->second;
  rj.fence.erase(node);
  if (!rj.fence.empty() || !rj.held_recovery)
    return;
  auto why = std::move(*rj.held_recovery);
  rj.held_recovery.reset();
  if (auto run = rj.run.lock(); run && run->recovery && !run->ended)
    replace_run(self, run, std::move(why));
}

/// An answer of `node` to what job `id` sent it at `sent` (a heartbeat or
/// a probe): `err` none, or the error. A node that took the job over ends
/// this copy; one that answered after this node's pause lifts its fence;
/// a former backup that answered is not asked again.
void heard_from(self_ptr self, std::uint64_t id, const std::string& node,
                std::chrono::steady_clock::time_point sent,
                const caf::error& err) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end() || it->second.handing_off)
    return;
  if (err && taken_over(err)) {
    end_taken_over(self, id,
                   error_message(err) + " while this node was unreachable");
    return;
  }
  const bool answered
    = !err
      || (err.category() == exo_error_category()
          && err.code() == static_cast<std::uint8_t>(exo_errc::failed_state));
  if (!answered)
    return; // not reached: asked again
  // A former backup that answered and did not take the job over may still
  // hold the replica it had when this node saw it go (a false suspicion):
  // it drops it, else it would take the job over beside the backup if
  // this node went. Only once it is alive again here: the answers to what
  // was sent before it went down come in first, from a node not yet back
  // (which could not be told, and may still take the job over after).
  if (st.alive.count(node) != 0
      && it->second.former_backups.erase(node) != 0
      && node != it->second.backup)
    send_drop(self, id, node, st.cfg.node);
  if (sent >= it->second.fenced_at)
    unfence(self, id, node);
}

/// Sends job `id`'s progress `p` to `node`; its answer goes to heard_from.
void send_progress(self_ptr self, std::uint64_t id, const std::string& node,
                   job_progress p, std::chrono::steady_clock::time_point now) {
  auto& st = self->state;
  self
    ->request(st.cfg.gate, 30s, service_atom::value, node,
              std::string{"jobs"},
              caf::make_message(replicate_atom::value, std::move(p)))
    .then(
      [self, id, node, now](caf::ok_atom) {
        heard_from(self, id, node, now, caf::error{});
      },
      [self, id, node, now](caf::error& err) {
        heard_from(self, id, node, now, err);
      });
}

/// Asks job `id`'s former backups and the nodes its fence waits for, those
/// alive here, whether one of them runs the job now (an empty
/// job_progress: a node that took the copy over answers so, as to a
/// heartbeat). A node whose backup was declared dead may be the one that
/// was cut off: its backup took the job over, and the job's new backup
/// here knows nothing of that. The current backup hears the heartbeats.
void probe_former_backups(self_ptr self, std::uint64_t id) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end())
    return;
  auto ask = it->second.former_backups;
  ask.insert(it->second.fence.begin(), it->second.fence.end());
  const auto now = std::chrono::steady_clock::now();
  for (auto& fb : ask) {
    if (st.alive.count(fb) == 0 || fb == it->second.backup)
      continue;
    job_progress p;
    p.origin = st.cfg.node;
    p.job = id;
    send_progress(self, id, fb, std::move(p), now);
  }
}

/// After a pause of this node: every job with a backup waits for it
/// (running_job::fence). Paused: its timer late by more than three
/// quarters of the failure timeout (the others count their silence from
/// their last word from this node, before the timer's last tick, so a
/// pause a little shorter than the timeout may be enough for a verdict; a
/// false alarm costs one answer from the backup, or fence_limit when the
/// backup died then). And a fence whose nodes have not answered within
/// fence_limit is lifted: the job goes on.
void check_fences(self_ptr self, std::chrono::steady_clock::time_point now) {
  auto& st = self->state;
  const bool paused
    = st.last_replicate != std::chrono::steady_clock::time_point{}
      && now - st.last_replicate > st.cfg.failure_timeout * 3 / 4;
  std::vector<std::pair<std::uint64_t, std::string>> lapsed;
  for (auto& [id, rj] : st.running) {
    if (paused && !rj.backup.empty() && !rj.handing_off) {
      rj.fence.insert(rj.backup);
      rj.former_backups.insert(rj.backup);
      rj.fenced_at = now;
    }
    if (!rj.fence.empty() && now - rj.fenced_at > fence_limit(st.cfg))
      for (auto& n : rj.fence)
        lapsed.emplace_back(id, n);
  }
  for (auto& [id, n] : lapsed) {
    auto it = st.running.find(id);
    if (it == st.running.end())
      continue;
    if (it->second.held_recovery)
      exo::text::line(std::cout)
        << "exo-node " << st.cfg.node << ": job " << id << " goes on: " << n
        << ", which backed it up when this node was paused, has not answered"
           " in "
        << fence_limit(st.cfg).count() << " ms" << std::endl;
    unfence(self, id, n);
  }
}

/// Sends every backed-up job's new tokens to its backup (job_progress);
/// runs while such jobs run (or wait for nodes that backed them up).
void replicate_tick(self_ptr self) {
  auto& st = self->state;
  const auto now = std::chrono::steady_clock::now();
  check_fences(self, now);
  st.last_replicate = now;
  bool any = false;
  for (auto& [id, rj] : st.running) {
    if (rj.handing_off)
      continue;
    if (!rj.former_backups.empty() || !rj.fence.empty()) {
      any = true;
      if (++rj.probe_ticks >= heartbeat_ticks) {
        rj.probe_ticks = 0;
        probe_former_backups(self, id);
      }
    }
    if (rj.backup.empty() || !rj.log)
      continue;
    any = true;
    job_progress p;
    p.origin = st.cfg.node;
    p.job = id;
    bool more = false;
    {
      std::lock_guard<std::mutex> guard{rj.log->mx};
      // Whole rounds only (token_log::whole), with their draws.
      auto& t = rj.log->tokens;
      rj.replicated.resize(t.size(), 0);
      for (std::size_t j = 0; j < t.size(); ++j) {
        const auto whole = std::min(rj.log->whole[j], t[j].size());
        const auto from = std::min<std::size_t>(rj.replicated[j], whole);
        p.have.push_back(static_cast<std::uint32_t>(from));
        p.more.emplace_back(t[j].begin() + static_cast<std::ptrdiff_t>(from),
                            t[j].begin() + static_cast<std::ptrdiff_t>(whole));
        if (j < rj.log->logprobs.size())
          p.more_logprobs.push_back(
            logprobs_between(rj.log->logprobs[j], from, whole));
        p.draws.push_back(rj.log->draws[j]);
        more = more || !p.more.back().empty();
        rj.replicated[j] = static_cast<std::uint32_t>(whole);
      }
      auto& rs = rj.log->recoveries;
      if (rj.replicated_recoveries < rs.size()) {
        p.recoveries.assign(rs.begin() + static_cast<std::ptrdiff_t>(
                                           rj.replicated_recoveries),
                            rs.end());
        rj.replicated_recoveries = rs.size();
        more = true;
      }
    }
    // New tokens, or every heartbeat_ticks ticks a message without any: a
    // backup that took the job over while this node was unreachable says
    // so (a job stuck without tokens would never hear it otherwise).
    if (more || ++rj.quiet_ticks >= heartbeat_ticks) {
      rj.quiet_ticks = 0;
      send_progress(self, id, rj.backup, std::move(p), now);
    }
  }
  st.replicating = any;
  if (any)
    self->delayed_send(self, replicate_period, tick_atom::value);
  else
    st.last_replicate = {};
}

/// Job `id` ended here: its backup drops the replica.
void drop_replica(self_ptr self, std::uint64_t id) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end() || it->second.handing_off)
    return;
  for (auto& n : replica_holders(st, it->second, {}))
    send_drop(self, id, n, {});
}

/// Token `t` of sequence seq, its index-th, as a listener gets it, with
/// its log-probabilities when there are some (`lp` not null).
job_token token_event(std::uint64_t id, std::uint32_t seq, std::int32_t t,
                      std::uint32_t index, const model::token_logprobs* lp,
                      const model::tokenizer& tok) {
  job_token e{id, seq, t, tok.piece(t), index};
  if (lp) {
    e.has_logprobs = true;
    e.logprobs = *lp;
  }
  return e;
}

/// Token i of sequence seq of `tokens`, with its log-probabilities when
/// `logprobs` holds them.
job_token token_event(std::uint64_t id, std::uint32_t seq, std::uint32_t i,
                      const std::vector<std::vector<std::int32_t>>& tokens,
                      const std::vector<std::vector<model::token_logprobs>>&
                        logprobs,
                      const model::tokenizer& tok) {
  const bool has = seq < logprobs.size() && i < logprobs[seq].size();
  return token_event(id, seq, tokens[seq][i], i,
                     has ? &logprobs[seq][i] : nullptr, tok);
}

/// Sends `listener` the tokens generated so far, each sequence in order
/// (its prompt scores first, when it has them).
void replay(const token_log& log, const model::tokenizer& tok,
            std::uint64_t id, const caf::actor& listener) {
  for (auto& e : log.prompt_scores)
    if (e.job != 0) {
      auto copy = e;
      copy.job = id;
      caf::anon_send(listener, std::move(copy));
    }
  for (std::uint32_t seq = 0; seq < log.tokens.size(); ++seq)
    for (std::uint32_t i = 0; i < log.tokens[seq].size(); ++i)
      caf::anon_send(listener,
                     token_event(id, seq, i, log.tokens, log.logprobs, tok));
}

void move_late_stages(self_ptr self, const run_ptr& run, const char* again);
void cancel_handed(self_ptr self, std::uint64_t id, const std::string& key);

void start_job(self_ptr self, const run_ptr& run) {
  auto& req = run->job.request;
  auto& hp = run->job.model->hparams();
  job_setup j;
  ++self->state.jobs;
  j.id = self->state.numbers.next();
  if (auto note = self->state.numbers.take_note(); !note.empty())
    exo::text::line(std::cerr) << "exo-node " << self->state.cfg.node << ": "
                               << note << std::endl;
  for (auto& r : run->ready) {
    j.stages.push_back(r.shard);
    j.stage_names.push_back(r.node + "/" + r.device);
  }
  j.n_embd = hp.n_embd;
  j.n_vocab = hp.n_vocab;
  j.n_layer = hp.n_layer;
  j.n_embd_kv = hp.n_embd_kv();
  j.prompts.assign(req.sequences, run->job.prompt);
  j.n_gen = req.n_gen;
  j.step_sequences = req.batch;
  j.share_prompts = req.share_prompt;
  // A scored prompt's rows all go through the output head: none are
  // copied from (or left to) the prefix cache.
  j.prefix_cache = req.prefix_cache && !req.prompt_logprobs;
  j.prompt_logprobs = req.prompt_logprobs && req.logprobs >= 0;
  // (Without the draft too: what a resumed job's samplers drew is held to
  // what rounds of that many proposals draw, workload::max_draws.)
  j.draft_tokens = req.draft_tokens;
  if (run->draft) {
    j.draft_stages = {run->draft};
    j.draft_n_embd = run->job.draft->hparams().n_embd;
  }
  j.sampling = req.sampling;
  j.keep_logits = req.keep_logits;
  j.logprobs = req.logprobs;
  j.eog = run->job.tokenizer->eog_ids();
  j.eog.insert(req.stop_tokens.begin(), req.stop_tokens.end());
  if (req.sampling.json)
    j.vocab = model::shared_vocab_bytes(run->job.tokenizer, hp.n_vocab);
  j.generated = run->generated;
  j.generated_draws = run->generated_draws;
  j.resumed_after = run->resumed_after;
  j.resumed_moved_bytes = run->resumed_moved_bytes;
  j.resumed_placement = run->placement_text;
  j.resumed_since = run->resumed_since;
  j.resumed_last_token = run->resumed_last_token;
  j.earlier_recoveries = run->earlier_recoveries;
  if (run->handoff) { // its stages hold the caches: nothing is re-fed
    j.stage_job = run->handoff->stage_job;
    j.resident = run->handoff->pos;
    j.rewind_first = run->handoff->rewind;
  }
  auto id = j.id;
  auto tok = run->job.tokenizer;
  auto log = std::make_shared<token_log>();
  log->tokens = run->generated;
  log->recoveries = run->earlier_recoveries;
  log->tokens.resize(req.sequences);
  for (auto& t : log->tokens)
    log->whole.push_back(t.size());
  log->draws = run->generated_draws;
  log->draws.resize(req.sequences, 0);
  if (req.logprobs >= 0) {
    log->logprobs = run->generated_logprobs;
    log->logprobs.resize(req.sequences);
  }
  if (j.prompt_logprobs)
    log->prompt_scores.resize(req.sequences);
  std::uint64_t so_far = 0;
  for (auto& t : log->tokens)
    so_far += t.size();
  auto produced = std::make_shared<std::atomic<std::uint64_t>>(so_far);
  // Followers attached before the job ran (a takeover being placed) get
  // what was generated before, then the rest.
  for (auto& f : run->followers)
    if (f.listener) {
      self->send(f.listener, job_started{id});
      replay(*log, *tok, id, f.listener);
      log->listeners.push_back(f.listener);
    }
  run->log = log;
  j.on_settled = [log](std::uint32_t seq, std::size_t tokens,
                       std::uint64_t draws) {
    std::lock_guard<std::mutex> guard{log->mx};
    if (seq < log->whole.size()) {
      log->whole[seq] = tokens;
      log->draws[seq] = draws;
    }
  };
  j.on_prompt_scores = [run, log, id](
                         std::uint32_t seq,
                         const std::vector<model::token_logprobs>& scores) {
    job_prompt_scores e{id, seq, run->job.prompt, scores};
    std::vector<caf::actor> followers;
    {
      std::lock_guard<std::mutex> guard{log->mx};
      if (seq < log->prompt_scores.size())
        log->prompt_scores[seq] = e;
      followers = log->listeners;
    }
    for (auto& f : followers)
      caf::anon_send(f, e);
    if (run->sink.scores)
      run->sink.scores(e);
  };
  j.on_token = [run, tok, produced, log,
                id](std::uint32_t seq, std::int32_t t,
                    const model::token_logprobs* lp) {
    produced->fetch_add(1, std::memory_order_relaxed);
    auto e = token_event(id, seq, t, 0, lp, *tok);
    std::vector<caf::actor> followers;
    {
      std::lock_guard<std::mutex> guard{log->mx};
      if (seq < log->tokens.size()) {
        e.index = static_cast<std::uint32_t>(log->tokens[seq].size());
        log->tokens[seq].push_back(t);
        if (lp && seq < log->logprobs.size())
          log->logprobs[seq].push_back(*lp);
      }
      followers = log->listeners;
    }
    for (auto& f : followers)
      caf::anon_send(f, e);
    if (run->sink.token)
      run->sink.token(e);
  };
  if (self->state.cfg.gate) { // losses re-place it on the survivors
    j.recoverer = caf::actor_cast<caf::actor>(self);
    j.on_recovered = [run, log](const job_recovered& r) {
      {
        std::lock_guard<std::mutex> guard{log->mx};
        log->recoveries.push_back(r); // replicated with the tokens
      }
      if (run->sink.recovered)
        run->sink.recovered(r);
    };
  }
  run->first_placement = run->placement_text;
  j.finish = [run, id](job_result& r) {
    if (!r.error.empty())
      return caf::make_message(fail(exo_errc::failed_state, r.error));
    return caf::make_message(make_report(*run, id, r));
  };
  auto job_id = std::to_string(id);
  auto stages = stage_list(*run);
  audit_job(self, audit::event_type::job_submitted,
            {{"job", job_id},
             {"model", run->sha.substr(0, 16)},
             {"stages", stages},
             {"sequences", std::to_string(req.sequences)},
             {"n_gen", std::to_string(req.n_gen)}});
  auto job = spawn_job(self->system(), std::move(j));
  // The job goes with its coordinator (a node shutting down, its jobs taken
  // over by their backups); a job that ends does not take it along.
  self->link_to(job);
  self->state.linked_jobs.insert(job.address());
  run->id = id;
  run->job_handle = job;
  auto& rj = self->state.running[id];
  rj.job = job;
  rj.run = run;
  rj.model = run->sha.empty() ? req.model : run->sha.substr(0, 12);
  rj.stages = stages;
  rj.plan = run->plan;
  rj.sequences = req.sequences;
  rj.n_gen = req.n_gen;
  rj.started = std::chrono::steady_clock::now();
  rj.tokens = produced;
  if (run->key.empty())
    run->key = self->state.cfg.node + ":" + job_id;
  rj.key = run->key;
  rj.taken_from = run->taken_from;
  rj.lineage = run->lineage;
  rj.name = req.name;
  rj.log = log;
  if (run->sink.started)
    run->sink.started(job_started{id});
  if (run->handoff) { // its origin is leaving: not a backup
    rj.refused.insert(run->handoff->origin);
    run->handoff.reset();
  }
  if (!run->cancel_on_start)
    choose_backup(self, id); // with a gate and another node alive
  self->request(job, caf::infinite, run_atom::value)
    .then(
      [self, run, job_id, id](job_report& r) {
        if (run->handed_off) {
          self->state.running.erase(id);
          return;
        }
        run->recovery.reset(); // the job is over: no re-placement for it
        ++run->attempt;
        drop_replica(self, id);
        job_ended(self, id, r.cancelled ? "cancelled" : "finished");
        audit_job(self, audit::event_type::job_finished,
                  {{"job", job_id},
                   {"outcome", r.cancelled ? "cancelled" : "ok"}});
        end_run(self, run, "", [run, r = std::move(r)]() mutable {
          if (!run->ended) {
            run->ended = true;
            run->sink.done(std::move(r));
          }
        });
      },
      [self, run, job_id, id](caf::error& err) {
        if (run->handed_off) { // its backup runs it now
          self->state.running.erase(id);
          return;
        }
        run->recovery.reset();
        ++run->attempt;
        drop_replica(self, id);
        job_ended(self, id, "failed");
        auto why = render(self, err);
        audit_job(self, audit::event_type::job_finished,
                  {{"job", job_id}, {"outcome", "error"}, {"error", why}},
                  audit::severity::warning);
        end_run(self, run, why);
      });
  // Drained or paused for heat while its stages started (after run_atom:
  // the job takes the move once it runs).
  move_late_stages(self, run, "");
  if (run->cancel_on_start) // after run_atom: it ends with its tokens
    cancel_handed(self, id, run->key);
}

/// With a draft model (speculative decoding), starts its shard on this
/// node (the device the plan kept its memory on, else the one the node
/// picks), then the job; a draft that cannot
/// start is said in the report and the job runs without it.
void start_draft(self_ptr self, const run_ptr& run) {
  auto& st = self->state;
  if (!run->job.draft || run->draft || run->id != 0) {
    start_job(self, run);
    return;
  }
  shard_spec spec;
  spec.model = run->job.request.draft;
  spec.first = 0;
  spec.last = run->job.draft->hparams().n_layer;
  spec.n_ctx = run->job.n_ctx;
  spec.device = run->draft_device; // where the plan kept its memory
  spec.source_node = st.cfg.node;
  spec.owner = caf::actor_cast<caf::actor>(self);
  auto attempt = run->attempt;
  auto on_ready = [self, run, attempt](shard_ready& r) {
    if (attempt != run->attempt || run->ended) {
      self->send_exit(r.shard, caf::exit_reason::user_shutdown);
      return;
    }
    run->draft = r.shard;
    run->draft_where = run->job.request.draft + " on " + r.node + "/"
                       + r.device + ", "
                       + std::to_string(run->job.request.draft_tokens)
                       + " tokens a round";
    start_job(self, run);
  };
  auto on_error = [self, run, attempt](caf::error& err) {
    if (attempt != run->attempt || run->ended)
      return;
    run->draft_where = "none: the draft model's shard did not start ("
                       + render(self, err) + ")";
    start_job(self, run);
  };
  auto msg = caf::make_message(shard_atom::value, std::move(spec));
  if (st.cfg.gate)
    self
      ->request(st.cfg.gate, 600s, service_atom::value, st.cfg.node,
                std::string{"shards"}, std::move(msg))
      .then(on_ready, on_error);
  else
    self->request(st.cfg.shard_host, 600s, std::move(msg))
      .then(on_ready, on_error);
}

/// A node drained or a device paused for heat while the run was being
/// placed (the view it was placed on was older): its stages there move on
/// at once, a planned move of the job that runs now (`again`: " again"
/// after a re-placement, "" the first time).
void move_late_stages(self_ptr self, const run_ptr& run, const char* again) {
  auto& st = self->state;
  std::vector<std::uint32_t> late;
  std::string where;
  for (std::uint32_t i = 0; i < run->plan.size(); ++i) {
    auto& sp = run->plan[i];
    auto dev = sp.node + "/" + sp.device;
    if (run->lost_nodes.count(sp.node) != 0
        || run->heat_paused.count(dev) != 0) {
      late.push_back(i);
      where += (where.empty() ? "" : ", ") + dev;
    }
  }
  auto it = st.running.find(run->id);
  if (late.empty() || it == st.running.end())
    return;
  exo::text::line(std::cout)
    << "exo-node " << st.cfg.node << ": moving job " << run->id << " off "
    << where << " (drained or paused for heat while it was placed" << again
    << ")" << std::endl;
  self->send(it->second.job, lost_atom::value,
             where + " was drained or paused for heat while the job was placed"
               + again + " (a planned move)",
             late, true);
}

/// The stages are up and linked: the job starts, or a job that lost its
/// pipeline gets the new one.
void stages_linked(self_ptr self, const run_ptr& run) {
  if (self->state.retrying.lock() == run) // the next in line may go
    self->state.retrying.reset();
  run->replacing = false;
  run->wait_since = {}; // a later wait (a cache that cannot grow) is new
  run->wait_until = {};
  run->wait_to_cool.clear(); // a later pause moves it again
  if (!run->recovery) {
    start_draft(self, run);
    return;
  }
  job_pipeline p;
  for (auto& r : run->ready) {
    p.stages.push_back(r.shard);
    p.names.push_back(r.node + "/" + r.device);
  }
  p.placement = run->placement_text;
  p.lost = run->lost_why;
  if (run->plan.size() == run->ready.size() && !run->plan.empty()) {
    p.bounds.push_back(run->plan.front().first);
    for (auto& sp : run->plan)
      p.bounds.push_back(sp.last);
  }
  auto& st = self->state;
  auto stages = stage_list(*run);
  if (auto it = st.running.find(run->id); it != st.running.end()) {
    it->second.stages = stages;
    it->second.plan = run->plan;
  }
  audit_job(self, audit::event_type::job_recovered,
            {{"job", std::to_string(run->id)},
             {"stages", stages},
             {"lost", run->lost_why}},
            audit::severity::warning);
  // The node's log says it for every job (a gateway's too).
  exo::text::line(std::cout) << "exo-node " << st.cfg.node << ": job " << run->id
            << " re-placed after " << run->lost_why << ": now on " << stages
            << std::endl;
  auto rp = std::move(*run->recovery);
  run->recovery.reset();
  rp.deliver(std::move(p));
  move_late_stages(self, run, " again");
}

void link_stages(self_ptr self, const run_ptr& run) {
  auto n = run->ready.size();
  if (n == 1) {
    stages_linked(self, run);
    return;
  }
  run->pending = n - 1;
  auto attempt = run->attempt;
  for (std::size_t i = 0; i + 1 < n; ++i)
    self
      ->request(run->ready[i].shard, 10s, next_atom::value,
                run->ready[i + 1].shard)
      .then(
        [self, run, attempt](caf::ok_atom) {
          if (attempt != run->attempt)
            return;
          if (--run->pending == 0 && run->error.empty())
            stages_linked(self, run);
        },
        [self, run, attempt](caf::error& err) {
          if (attempt != run->attempt)
            return;
          if (run->error.empty()) {
            run->error = render(self, err);
            end_run(self, run, run->error);
          }
        });
}


/// Starts the shards of `run->plan` on their nodes' shard hosts, then
/// links them and runs the job.
void start_stages(self_ptr self, const run_ptr& run) {
  auto& st = self->state;
  // A cache type other than the default is said with the placement, with
  // what a token of context costs in it.
  const auto kv = kv_type_of(run->job.request);
  if (kv != backend::kv_type::f16
      && run->placement_text.find("KV cache: ") == std::string::npos) {
    model::device_stage_options o;
    o.kv = kv;
    const auto& m = *run->job.model;
    run->placement_text
      += std::string{"KV cache: "} + backend::to_string(kv) + ", "
         + std::to_string(model::device_stage_memory(m, 0, m.hparams().n_layer,
                                                     o)
                            .kv_bytes_per_token)
         + " bytes a token of context (every layer)\n";
  }
  if (run->sink.placed && !run->job_handle) // a job's recovery reports it itself
    run->sink.placed(job_placed{run->placement_text});
  auto k = static_cast<std::uint32_t>(run->plan.size());
  // What a node without the file receives: its stage's parts.
  std::vector<std::vector<workload::model_part>> parts(k);
  try {
    for (std::uint32_t i = 0; i < k; ++i)
      if (run->plan[i].node != st.cfg.node)
        parts[i] = stage_parts(self, *run, run->plan[i].first,
                               run->plan[i].last);
  } catch (const std::exception& e) {
    end_run(self, run, e.what());
    return;
  }
  run->ready.resize(k);
  run->pending = k;
  if (run->replacing && run->id != 0) { // the node's log says each attempt
    std::string where;
    for (auto& p : run->plan)
      where += (where.empty() ? "" : " ") + p.node + "/" + p.device;
    exo::text::line(std::cout)
      << "exo-node " << st.cfg.node << ": job " << run->id
      << " starting its stages again on " << where << " (after "
      << run->lost_why << ")" << std::endl;
  }
  auto& starting = st.starting;
  starting.erase(std::remove_if(starting.begin(), starting.end(),
                                [](const std::weak_ptr<job_run>& w) {
                                  auto r = w.lock();
                                  return !r || r->ended || r->pending == 0;
                                }),
                 starting.end());
  if (std::none_of(starting.begin(), starting.end(),
                   [&](const std::weak_ptr<job_run>& w) {
                     return w.lock() == run;
                   }))
    starting.push_back(run);
  for (std::uint32_t i = 0; i < k; ++i) {
    auto& p = run->plan[i];
    shard_spec spec;
    if (p.node == st.cfg.node)
      spec.model = run->job.request.model;
    spec.sha256 = run->sha;
    spec.size = run->size;
    spec.first = p.first;
    spec.last = p.last;
    spec.n_ctx = run->job.n_ctx;
    spec.device = p.device;
    spec.source_node = st.cfg.node;
    spec.parts = std::move(parts[i]);
    spec.owner = caf::actor_cast<caf::actor>(self);
    spec.kv_type = run->job.request.kv_type;
    auto attempt = run->attempt;
    auto on_ready = [self, run, i, attempt](shard_ready& r) {
      if (attempt != run->attempt) { // re-placed meanwhile: not needed
        self->send_exit(r.shard, caf::exit_reason::user_shutdown);
        return;
      }
      run->bytes_sent += r.bytes_received;
      run->ready[i] = std::move(r);
      if (run->ended) // ended meanwhile (a member died): stop this one too
        self->send_exit(run->ready[i].shard, caf::exit_reason::user_shutdown);
      if (--run->pending != 0)
        return;
      // The last answer: link the stages, or end the run when another
      // stage failed first (its shards are stopped, the caller told).
      if (run->error.empty())
        link_stages(self, run);
      else
        end_run(self, run, run->error);
    };
    auto on_error = [self, run, i, attempt](caf::error& err) {
      if (attempt != run->attempt)
        return;
      auto& node = run->plan[i].node;
      auto why = "stage " + std::to_string(i) + " on " + node + ": "
                 + render(self, err);
      // Its node went while the stage started, and this answer came before
      // the member event that re-places the run: the gate had dropped it
      // ("no live node named"), or the request was delegated to it and
      // its end answered (request_receiver_down). A loss, placed again
      // without it.
      if (self->state.cfg.gate && node != self->state.cfg.node
          && !run->ended
          && (err == caf::sec::request_receiver_down
              || why.find("no live node named") != std::string::npos)) {
        run->lost_nodes.insert(node);
        replace_run(self, run,
                    "node " + node + " went while its stage started ("
                      + why + ")");
        return;
      }
      if (run->error.empty())
        run->error = why;
      if (--run->pending == 0)
        end_run(self, run, run->error);
    };
    auto msg = caf::make_message(shard_atom::value, std::move(spec));
    if (st.cfg.gate)
      self
        ->request(st.cfg.gate, 600s, service_atom::value, p.node,
                  std::string{"shards"}, std::move(msg))
        .then(on_ready, on_error);
    else
      self->request(st.cfg.shard_host, 600s, std::move(msg))
        .then(on_ready, on_error);
  }
}

/// The alive members of `view` with their devices, this node first.
std::vector<std::pair<std::string, std::vector<device_info>>>
members_of(self_ptr self, const member_view& view) {
  std::vector<std::pair<std::string, std::vector<device_info>>> out;
  auto& node = self->state.cfg.node;
  for (auto& m : view.members)
    if (m.status == member_status::alive && m.name == node)
      out.emplace(out.begin(), m.name, m.devices);
  for (auto& m : view.members)
    if (m.status == member_status::alive && m.name != node)
      out.emplace_back(m.name, m.devices);
  return out;
}

/// The solver's time limit when re-placing a running job after a loss.
constexpr std::uint32_t replan_time_limit_ms = 500;

/// A first placement of a run with a draft model keeps the draft's memory
/// (all its layers, a cache per sequence) free on a device of this node,
/// where start_draft puts it; a re-placement does not (the draft runs on).
void reserve_draft(const job_run& run, const std::string& node,
                   plan_request& r) {
  if (!run.job.draft || run.draft || run.attempt > 0)
    return;
  const auto& hp = run.job.draft->hparams();
  const auto o = model::shard_stage_options(hp);
  const auto mem = model::device_stage_memory(*run.job.draft, 0, hp.n_layer, o);
  r.reserve_node = node;
  r.reserve_bytes
    = mem.weight_bytes() + mem.working_bytes()
      + kv_claim(mem.kv_bytes_per_token, run.job.n_ctx,
                 std::max<std::uint32_t>(run.job.request.sequences, 1), {},
                 o.kv_block_positions);
}

/// The draft's device from a plan's reservation ("NODE/ID" of this node).
std::string draft_device_of(const plan_info& p, const std::string& node) {
  const auto prefix = node + "/";
  return p.reserved_device.rfind(prefix, 0) == 0
           ? p.reserved_device.substr(prefix.size())
           : std::string{};
}

void place_first(self_ptr self, const run_ptr& run);
void place_on_survivors(self_ptr self, const run_ptr& run);

/// How often the runs waiting for memory try again (and as soon as a run
/// ends).
constexpr auto retry_period = std::chrono::milliseconds(500);

/// Whether runs other than `run` may hold memory now (started and not
/// ended, not waiting themselves, or ended less than 2 s ago: their stages
/// may still be stopping).
bool others_hold_memory(self_ptr self, const job_run& run) {
  auto& st = self->state;
  if (std::chrono::steady_clock::now() - st.last_end < std::chrono::seconds{2})
    return true;
  std::size_t idle = run.live ? 1 : 0;
  for (auto& r : st.waiting)
    if (r.get() != &run && r->live && r->waiting)
      ++idle;
  return st.live > idle;
}

void arm_retry(self_ptr self, std::chrono::milliseconds after = retry_period) {
  auto& st = self->state;
  if (st.retry_timer || st.waiting.empty())
    return;
  st.retry_timer = true;
  self->delayed_send(self, after, tick_atom::value, std::uint32_t{0});
}

std::string seconds_text(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f",
                std::chrono::duration<double>(d).count());
  return buf;
}

/// Ends `run`, for which no device has room (`why`), with out_of_memory,
/// saying how long it waited when it did.
void end_without_room(self_ptr self, const run_ptr& run, std::string why,
                      std::chrono::steady_clock::time_point now) {
  run->waiting = false;
  run->end_code = exo_errc::out_of_memory;
  if (run->wait_since != std::chrono::steady_clock::time_point{}
      && now > run->wait_since)
    why += "; waited " + seconds_text(now - run->wait_since)
           + " s for the memory other jobs hold (models.admission_wait_ms)";
  end_run(self, run, std::move(why));
}

/// No plan fits `run` now (`why`): it waits for the memory this
/// coordinator's other runs hold (at most admission_wait, first come first
/// placed), or ends with out_of_memory saying what it waited for.
void no_room(self_ptr self, const run_ptr& run, std::string why) {
  auto& st = self->state;
  if (run->ended)
    return;
  if (st.retrying.lock() == run)
    st.retrying.reset();
  drop_plan(self, run, {}); // no reservation kept for a plan that failed
  if (run->recovery && !run->heat_paused.empty()) {
    // Moved off a device paused for heat, and no other has room: placed
    // back there, it waits for the device to cool as it did before.
    std::string back;
    for (auto& d : run->heat_paused) {
      run->lost_devices.erase(d);
      run->wait_to_cool.insert(d);
      back += (back.empty() ? "" : ", ") + d;
    }
    run->heat_paused.clear();
    exo::text::line(std::cout)
      << "exo-node " << st.cfg.node << ": job " << run->id
      << " stays on " << back << " (paused for heat): no other device has "
      << "room (" << why << ")" << std::endl;
    place_on_survivors(self, run);
    return;
  }
  auto now = std::chrono::steady_clock::now();
  const bool first = run->wait_since == std::chrono::steady_clock::time_point{};
  if (first) {
    run->wait_since = now;
    run->wait_until = now + st.cfg.admission_wait;
  }
  if (st.cfg.admission_wait.count() > 0 && now < run->wait_until
      && others_hold_memory(self, *run)) {
    run->waiting = true;
    run->wait_why = why;
    if (first) {
      st.waiting.push_back(run);
      exo::text::line(std::cout)
        << "exo-node " << st.cfg.node << ": a job waits for memory ("
        << st.waiting.size() << " waiting): " << why << std::endl;
    } else {
      st.waiting.push_front(run); // it keeps its turn
    }
    arm_retry(self);
    return;
  }
  if (first) // it did not wait
    run->wait_since = {};
  end_without_room(self, run, std::move(why), now);
}

/// The retry timer: runs that waited too long end; the first in line is
/// placed again (one at a time: the next waits until its stages stand).
void retry_waiting(self_ptr self) {
  auto& st = self->state;
  st.retry_timer = false;
  auto now = std::chrono::steady_clock::now();
  std::deque<run_ptr> keep;
  std::vector<run_ptr> expired;
  for (auto& r : st.waiting) {
    if (r->ended || !r->waiting)
      continue;
    if (now >= r->wait_until)
      expired.push_back(r);
    else
      keep.push_back(r);
  }
  st.waiting = std::move(keep);
  for (auto& r : expired)
    end_without_room(self, r, r->wait_why, now);
  auto busy = st.retrying.lock();
  if (!busy || busy->ended || busy->waiting) {
    st.retrying.reset();
    if (!st.waiting.empty()) {
      auto run = st.waiting.front();
      st.waiting.pop_front();
      run->waiting = false;
      st.retrying = run;
      // A device its KV cache outgrew may have room now.
      for (auto& d : run->full_devices)
        run->lost_devices.erase(d);
      run->full_devices.clear();
      if (run->attempt == 0)
        place_first(self, run);
      else
        place_on_survivors(self, run);
    }
  }
  arm_retry(self);
}

/// What `run`'s KV caches claim on each stage of `plan` (kv_claim) when
/// its sequences hold `held` positions each (none: its whole caches, every
/// sequence at its full context, as placement counts them).
std::vector<std::uint64_t>
kv_claims_on(const job_run& run, const std::vector<stage_place>& plan,
             const std::vector<std::uint64_t>& held = {}) {
  const auto seqs = std::max<std::uint32_t>(run.job.request.sequences, 1);
  model::device_stage_options o;
  o.kv = kv_type_of(run.job.request);
  std::vector<std::uint64_t> out;
  for (auto& s : plan)
    out.push_back(kv_claim(model::device_stage_memory(*run.job.model,
                                                      s.first, s.last, o)
                             .kv_bytes_per_token,
                           run.job.n_ctx, seqs, held,
                           o.kv_block_positions));
  return out;
}

/// What a running job's KV caches may still claim on each stage of its
/// plan: each sequence holds its prompt and what it generated so far.
std::vector<std::uint64_t> kv_claims_of(const job_run& run) {
  const auto seqs = std::max<std::uint32_t>(run.job.request.sequences, 1);
  std::vector<std::uint64_t> held(seqs, run.job.prompt.size());
  if (run.log) {
    std::lock_guard<std::mutex> guard{run.log->mx};
    for (std::size_t s = 0; s < held.size() && s < run.log->tokens.size();
         ++s)
      held[s] += run.log->tokens[s].size();
  }
  return kv_claims_on(run, run.plan, held);
}

/// What the KV caches of this node's running jobs (but `except`) may still
/// claim, per device ("NODE/ID"): kept out of a new plan's reach
/// (plan_request::kv_claims) and of a job that joins their stages.
std::map<std::string, std::uint64_t> kv_claims(self_ptr self,
                                               const run_ptr& except) {
  std::map<std::string, std::uint64_t> out;
  for (auto& [id, rj] : self->state.running) {
    auto r = rj.run.lock();
    if (!r || r->ended || r == except || r->plan.empty())
      continue;
    try {
      auto claims = kv_claims_of(*r);
      for (std::size_t i = 0; i < claims.size(); ++i)
        out[r->plan[i].node + "/" + r->plan[i].device] += claims[i];
    } catch (const std::exception&) { // a bad range: claims nothing
    }
  }
  return out;
}

/// `view` with the devices of `fresh` (a console "devices" reply: every
/// reachable node's own figures, just read) in place of the gossiped ones.
member_view with_fresh_devices(member_view view,
                               const std::vector<device_info>& fresh) {
  for (auto& m : view.members) {
    std::vector<device_info> mine;
    for (auto& d : fresh)
      if (d.node == m.name && d.id != "?")
        mine.push_back(d);
    if (!mine.empty())
      m.devices = std::move(mine);
  }
  return view;
}

/// The running jobs of `run`'s model that it might join (none with a
/// draft or an even split asked for), and the KV bytes every running job
/// may still claim per device ("NODE/ID": kv_claims).
struct join_candidates {
  std::vector<std::pair<std::uint64_t, run_ptr>> beside;
  std::map<std::string, std::uint64_t> promised;
};

join_candidates candidates_for(self_ptr self, const run_ptr& run) {
  join_candidates out;
  if (run->job.draft || run->job.request.stages != 0)
    return out;
  out.promised = kv_claims(self, run);
  auto same_model = [&](const job_run& r) {
    return run->sha.empty() ? r.job.request.model == run->job.request.model
                            : r.sha == run->sha;
  };
  for (auto& [id, rj] : self->state.running) {
    auto r = rj.run.lock();
    if (!r || r->ended || r == run || r->plan.empty())
      continue;
    bool lost = std::any_of(r->plan.begin(), r->plan.end(),
                            [&](const stage_place& s) {
                              return run->lost_nodes.count(s.node) != 0;
                            });
    if (same_model(*r) && !r->recovery && !lost)
      out.beside.emplace_back(id, r);
  }
  return out;
}

/// No plan of its own fits `run` (`why`): it joins the stages of a running
/// job of the same model when their devices (read afresh) have room for
/// its KV caches beside what the jobs there may still claim, else it
/// waits (no_room). The stages' weights are shared: a shard host runs the
/// jobs of one model, device and layer range on one stage, which batches
/// their steps, so a model that fits a device once serves several
/// requests.
void join_or_wait(self_ptr self, const run_ptr& run, member_view view,
                  std::string after, std::string why) {
  join_candidates c;
  try {
    c = candidates_for(self, run);
  } catch (const std::exception&) { // a bad range: no joining
  }
  if (c.beside.empty()) {
    no_room(self, run, std::move(why));
    return;
  }
  auto attempt = run->attempt;
  auto decide = [self, run, c, after, why, attempt](const member_view& v) {
    if (run->ended || attempt != run->attempt)
      return;
    for (auto& [id, r] : c.beside) {
      if (r->ended)
        continue;
      try {
        if (!fits_beside(r->plan, kv_claims_on(*run, r->plan), v, c.promised,
                         run->lost_devices))
          continue;
      } catch (const std::exception&) {
        continue;
      }
      run->plan = r->plan;
      const auto reason = why.compare(0, after.size(), after) == 0
                            ? why.substr(after.size())
                            : why;
      run->placement_text
        = after + "placement: beside job " + std::to_string(id)
          + " (no plan of its own fits the free memory: it shares that "
            "job's stages and their weights, its KV caches fit beside)\n"
          + "  no plan of its own: " + reason + "\n" + describe(run->plan);
      start_stages(self, run);
      return;
    }
    no_room(self, run, why);
  };
  auto gate = self->state.cfg.gate;
  if (!gate) { // the view is this node's devices, just read
    decide(view);
    return;
  }
  // The member view's figures lag: each device's own, now.
  self
    ->request(gate, 2s, console_atom::value, std::string{"devices"},
              std::string{})
    .then(
      [decide, view](console_reply& devs) {
        decide(with_fresh_devices(view, devs.devices));
      },
      [self, run, why](caf::error&) { no_room(self, run, why); });
}

/// Chooses the stages: an even split with stages K, else the solver's plan
/// (the coordinating node's placement service with a gate, solved here
/// without one).
void place_and_start(self_ptr self, const run_ptr& run,
                     const member_view& view, std::string coordinator) {
  auto& st = self->state;
  auto& req = run->job.request;
  auto n_layer = run->job.model->hparams().n_layer;
  // A re-placement says what it follows.
  auto after = run->attempt == 0 ? std::string{}
                                 : "re-placed after a loss (" + run->lost_why
                                     + ")\n";
  if (req.stages != 0) {
    try {
      run->plan = simple_placement(n_layer, req.stages,
                                   members_of(self, view));
    } catch (const std::exception& e) {
      end_run(self, run, e.what());
      return;
    }
    // Worded as each program always printed it (exo-node run: "stage(s)").
    run->placement_text = after + "placement: even split into "
                          + std::to_string(req.stages)
                          + (st.cfg.gate ? " stages" : " stage(s)")
                          + " (--stages)\n" + describe(run->plan);
    start_stages(self, run);
    return;
  }
  if (!st.cfg.gate || run->attempt > 0 || !run->lost_nodes.empty()) {
    // The solver here: on this node's own devices (the same problem the
    // placement service would build for a cluster of this node alone), or
    // on the survivors of a loss (quickly: the job is waiting).
    try {
      auto preq = run_plan_request(req.model, run->job.n_ctx, req.sequences,
                                   st.cfg.node, {}, kv_type_of(req));
      reserve_draft(*run, st.cfg.node, preq);
      preq.kv_claims = kv_claims(self, run);
      // The stages that survive hold their layers' weights (and their
      // nodes the file parts): of equal plans, the one that keeps them.
      std::vector<placement::resident_layers> resident;
      if (run->attempt > 0) {
        preq.time_limit_ms = replan_time_limit_ms;
        for (const auto& s : run->plan)
          if (s.last > s.first)
            resident.push_back({s.node + "/" + s.device, s.first, s.last - 1});
      }
      auto solved = plan_locally(preq, view, st.cfg.node, resident);
      if (solved.stages.empty() && solved.status == "infeasible") {
        join_or_wait(self, run, view, after,
                     after + no_plan(solved) + " (--stages K splits evenly)");
        return;
      }
      run->plan = stages_of(solved, view, n_layer);
      if (run->attempt == 0)
        run->draft_device = draft_device_of(solved, st.cfg.node);
      run->placement_text = after + "placement (solver):\n"
                            + describe_plan(solved) + describe(run->plan);
    } catch (const std::exception& e) {
      end_run(self, run,
              std::string{e.what()} + " (--stages K splits evenly)");
      return;
    }
    start_stages(self, run);
    return;
  }
  plan_request preq;
  try {
    // Kept as a job of the placement service while the run lasts.
    static std::atomic<std::uint64_t> runs{0};
    preq = run_plan_request(req.model, run->job.n_ctx, req.sequences,
                            st.cfg.node,
                            st.cfg.node + "#" + std::to_string(++runs),
                            kv_type_of(req));
    reserve_draft(*run, st.cfg.node, preq);
    preq.kv_claims = kv_claims(self, run);
  } catch (const std::exception& e) {
    end_run(self, run, e.what());
    return;
  }
  if (coordinator.empty())
    coordinator = st.cfg.node;
  auto limit = std::chrono::milliseconds{preq.time_limit_ms} + 30s;
  self
    ->request(st.cfg.gate, limit, service_atom::value, coordinator,
              std::string{placement::placement_service},
              caf::make_message(plan_atom::value, std::move(preq)))
    .then(
      [self, run, view, coordinator, n_layer](plan_job_info& j) {
              run->plan_job = j.id;
        run->planner = coordinator;
        run->draft_device = draft_device_of(j.plan, self->state.cfg.node);
        if (j.plan.stages.empty() && j.plan.status == "infeasible") {
          drop_plan(self, run, {}); // nothing to keep re-planning
          join_or_wait(self, run, view, "",
                       no_plan(j.plan) + " (--stages K splits evenly)");
          return;
        }
        try {
          run->plan = stages_of(j.plan, view, n_layer);
        } catch (const std::exception& e) {
          end_run(self, run,
                  std::string{e.what()} + " (--stages K splits evenly)");
          return;
        }
        run->placement_text = "placement (solver):\n"
                              + describe_plan(j.plan) + describe(run->plan)
                              + "kept as " + j.id + " by " + coordinator
                              + ": re-planned while the run lasts "
                                "(plans)\n";
        start_stages(self, run);
      },
      [self, run, coordinator](caf::error& err) {
        end_run(self, run,
                "the placement service of " + coordinator
                  + " did not answer: " + render(self, err)
                  + " (--stages K splits evenly without it)");
      });
}

/// `view` without what the run lost: the nodes (dead, or holding a stage
/// that went away) as dead, the devices that failed under a stage (on a
/// node that lives on) left out.
member_view without_lost(const job_run& run, member_view view) {
  for (auto& m : view.members) {
    if (run.lost_nodes.count(m.name) != 0) {
      m.status = member_status::dead;
      continue;
    }
    auto& devs = m.devices;
    devs.erase(std::remove_if(devs.begin(), devs.end(),
                              [&](const device_info& d) {
                                return run.lost_devices.count(m.name + "/"
                                                              + d.id)
                                       != 0;
                              }),
               devs.end());
    for (auto& d : devs) // its stages wait there for the device to cool
      if (d.state == device_state::paused
          && run.wait_to_cool.count(m.name + "/" + d.id) != 0)
        d.state = device_state::busy;
  }
  return view;
}

/// Stops `shards` and answers one (tick_atom) with ok once every one of
/// them is gone (their memory back in their devices' pools), or after
/// `limit`.
caf::behavior stop_all(caf::event_based_actor* self,
                       std::vector<caf::actor> shards,
                       std::chrono::milliseconds limit) {
  struct waiting {
    std::size_t left = 0;
    bool done = false;
    std::optional<caf::response_promise> rp;
  };
  auto w = std::make_shared<waiting>();
  w->left = shards.size();
  auto finish = [self, w] {
    w->done = true;
    if (w->rp) {
      w->rp->deliver(caf::ok_atom::value);
      self->quit();
    }
  };
  self->set_down_handler([w, finish](caf::down_msg&) {
    if (--w->left == 0)
      finish();
  });
  for (auto& s : shards) {
    self->monitor(s);
    self->send_exit(s, caf::exit_reason::user_shutdown);
  }
  if (shards.empty())
    w->done = true;
  self->delayed_send(self, limit, caf::timeout_atom::value);
  return {
    [self, w](tick_atom) -> caf::result<caf::ok_atom> {
      if (w->done) {
        self->quit();
        return caf::ok_atom::value;
      }
      w->rp = self->make_response_promise();
      return caf::delegated<caf::ok_atom>{};
    },
    [finish](caf::timeout_atom) { finish(); },
  };
}

/// How long a re-placement waits for the run's old stages to go.
constexpr auto stop_limit = std::chrono::milliseconds(2000);

/// Reads the cluster afresh (the members, every device's free memory) and
/// places the run on what survives its losses.
void place_on_survivors(self_ptr self, const run_ptr& run) {
  auto attempt = run->attempt;
  auto failed = [self, run, attempt](caf::error& err) {
    if (attempt != run->attempt)
      return;
    end_run(self, run,
            run->lost_why + "; cannot read the cluster to re-place it: "
              + render(self, err));
  };
  auto gate = self->state.cfg.gate;
  self
    ->request(gate, 10s, console_atom::value, std::string{"nodes"},
              std::string{})
    .then(
      [self, run, attempt, failed, gate](console_reply& nodes) {
        if (attempt != run->attempt || run->ended)
          return;
        self
          ->request(gate, 10s, console_atom::value, std::string{"devices"},
                    std::string{})
          .then(
            [self, run, attempt, nodes](console_reply& devs) {
              if (attempt != run->attempt || run->ended)
                return;
              auto view = with_fresh_devices(nodes.nodes, devs.devices);
              place_and_start(self, run, without_lost(*run, view), "");
            },
            failed);
      },
      failed);
}

/// Places the run again, on what survives its losses: its stages so far
/// stop (the new plan may split the layers differently); once they are
/// gone the devices are read afresh (the memory the stages held counts as
/// free), fresh stages start and, once linked, start the job or go to the
/// job that asked (recover_atom). `why` says what was lost.
void replace_run(self_ptr self, const run_ptr& run, std::string why) {
  if (run->ended)
    return;
  // Those on surviving nodes are waited for (their memory is needed);
  // those on lost ones only told (a frozen node never answers).
  std::vector<caf::actor> old;
  for (auto& r : run->ready) {
    if (!r.shard)
      continue;
    if (run->lost_nodes.count(r.node) != 0)
      self->send_exit(r.shard, caf::exit_reason::user_shutdown);
    else
      old.push_back(r.shard);
  }
  auto stopper = self->system().spawn(stop_all, std::move(old), stop_limit);
  run->ready.clear();
  run->error.clear();
  run->pending = 0;
  ++run->attempt;
  // A loss while the last one was being placed again: both are said.
  run->lost_why = run->replacing && !run->lost_why.empty()
                    ? run->lost_why + "; then " + why
                    : why;
  why = run->lost_why;
  run->replacing = true;
  if (run->attempt >= max_placements) {
    end_run(self, run,
            why + " (placed " + std::to_string(max_placements)
              + " times: no more re-placements)");
    return;
  }
  self->request(stopper, stop_limit + 5s, tick_atom::value)
    .then([self, run](caf::ok_atom) { place_on_survivors(self, run); },
          [self, run](caf::error&) { place_on_survivors(self, run); });
}

/// Job `id` lost stages `lost` (indices of its pipeline): re-places it and
/// answers with the new pipeline (recover_atom).
caf::result<job_pipeline> recover_job(self_ptr self, std::uint64_t id,
                                      const std::vector<std::uint32_t>& lost,
                                      std::string why, bool device_only) {
  auto& st = self->state;
  auto it = st.running.find(id);
  auto run = it == st.running.end() ? nullptr : it->second.run.lock();
  if (!run || run->ended || !st.cfg.gate)
    return fail(exo_errc::failed_state,
                "job " + std::to_string(id) + " is not running on "
                  + st.cfg.node);
  if (run->recovery)
    return fail(exo_errc::failed_state,
                "job " + std::to_string(id) + " is being re-placed already");
  // A KV cache that could not grow (job_actor names the shard's code).
  const bool out_of_room
    = why.find(std::string{to_string(exo_errc::out_of_memory)} + ": ")
      != std::string::npos;
  for (auto i : lost)
    if (i < run->plan.size()) {
      auto& p = run->plan[i];
      if (device_only || p.node == st.cfg.node
          || run->heat_paused.count(p.node + "/" + p.device) != 0) {
        // the node lives on
        run->lost_devices.insert(p.node + "/" + p.device);
        if (out_of_room)
          run->full_devices.insert(p.node + "/" + p.device);
      }
      else
        run->lost_nodes.insert(p.node);
    }
  auto rp = self->make_response_promise<job_pipeline>();
  run->recovery = rp;
  if (auto& rj = it->second; !rj.fence.empty()) {
    // This node was paused: the node that backed the job up then may run
    // it now. It is heard first (unfence).
    std::string nodes;
    for (auto& n : rj.fence)
      nodes += (nodes.empty() ? "" : ", ") + n;
    exo::text::line(std::cout)
      << "exo-node " << st.cfg.node << ": job " << id
      << " waits to hear from " << nodes
      << " (it backed the job up when this node was paused) before it is "
         "re-placed after "
      << why << std::endl;
    rj.held_recovery = std::move(why);
    return rp;
  }
  replace_run(self, run, std::move(why));
  return rp;
}

/// Places a run on this node alone: its devices as a one-member view.
void place_locally(self_ptr self, const run_ptr& run) {
  auto& st = self->state;
  self->request(st.cfg.node_actor, 10s, devices_atom::value,
                actors_atom::value)
    .then(
      [self, run](std::vector<device_actor>& hs) {
        struct gather {
          std::vector<device_info> found;
          std::size_t pending = 0;
        };
        auto g = std::make_shared<gather>();
        g->pending = hs.size();
        auto done = [self, run, g] {
          auto view = single_node_view(self->state.cfg.node, g->found);
          place_and_start(self, run, view, self->state.cfg.node);
        };
        if (hs.empty()) {
          done();
          return;
        }
        for (auto& h : hs)
          self->request(h, 10s, info_atom::value)
            .then(
              [g, done](device_info& info) {
                g->found.push_back(std::move(info));
                if (--g->pending == 0)
                  done();
              },
              [g, done](caf::error&) {
                if (--g->pending == 0)
                  done();
              });
      },
      [self, run](caf::error& err) {
        end_run(self, run, "cannot list devices: " + render(self, err));
      });
}

/// The first placement of `run` (and its retries while it waits for
/// memory): on this node's devices without a gate, else through the
/// coordinating node's placement service.
void keep_handed_stages(self_ptr self, const run_ptr& run);

void place_first(self_ptr self, const run_ptr& run) {
  auto& st = self->state;
  if (run->handoff) {
    keep_handed_stages(self, run);
    return;
  }
  if (!st.cfg.gate) {
    place_locally(self, run);
    return;
  }
  self
    ->request(st.cfg.gate, 10s, console_atom::value, std::string{"nodes"},
              std::string{})
    .then(
      [self, run](console_reply& r) {
              if (run->ended)
          return;
        // r.text names the coordinator, whose placement service plans;
        // with nodes drained, this node plans without them.
        place_and_start(self, run, without_lost(*run, r.nodes), r.text);
      },
      [self, run](caf::error& err) {
        end_run(self, run,
                "cannot read the member view: " + render(self, err));
      });
}

/// A job handed over (handoff_atom): its stages stay as they were, with
/// their caches, and the job goes on from each sequence's next token.
/// Stages that do not cover the model's layers are let go and the job is
/// placed again as after a takeover (its tokens re-fed).
void keep_handed_stages(self_ptr self, const run_ptr& run) {
  auto& h = *run->handoff;
  const auto n_layer = run->job.model->hparams().n_layer;
  if (h.bounds.back() != n_layer) {
    for (auto& stage : h.stages)
      self->send_exit(stage, caf::exit_reason::user_shutdown);
    run->resumed_after += "; its stages held " + std::to_string(h.bounds.back())
                          + " layers, the model has "
                          + std::to_string(n_layer) + ": placed again";
    run->handoff.reset();
    place_first(self, run);
    return;
  }
  run->plan.clear();
  run->ready.clear();
  for (std::size_t i = 0; i < h.stages.size(); ++i) {
    run->plan.push_back(
      {h.bounds[i], h.bounds[i + 1], h.nodes[i], h.devices[i], h.devices[i]});
    run->ready.push_back({h.stages[i], h.nodes[i], h.devices[i], h.devices[i],
                          0});
  }
  run->placement_text = "stages kept as " + h.origin
                        + " handed the job over (KV caches in place)\n"
                        + describe(run->plan);
  std::uint64_t held = 0;
  for (auto p : h.pos)
    held += p;
  exo::text::line(std::cout)
    << "exo-node " << self->state.cfg.node << ": job " << run->key
    << " handed over by " << h.origin << ": its " << h.stages.size()
    << " stages kept with " << held << " positions of KV cache, nothing re-fed"
    << std::endl;
  if (run->sink.placed)
    run->sink.placed(job_placed{run->placement_text});
  stages_linked(self, run);
}

/// A job taken over from a coordinating node that died (a backup_job).
struct takeover {
  std::string key; ///< "ORIGIN:ID" of its first coordinator
  std::string taken_from; ///< "ORIGIN:ID" it was backed up as here
  std::vector<std::string> lineage; ///< the copies before, this one's last
  std::string sha; ///< the model's digest (its file is the cache's)
  std::uint64_t size = 0;
  std::vector<std::vector<std::int32_t>> generated;
  std::vector<std::uint64_t> generated_draws; ///< their samplers' draws
  std::vector<std::vector<model::token_logprobs>> generated_logprobs;
  std::vector<job_recovered> recoveries; ///< before the takeover
  std::string why;
  std::uint64_t moved_bytes = 0; ///< KV carried by a move it followed
  std::chrono::steady_clock::time_point since;
  std::chrono::steady_clock::time_point last_token;
  std::vector<caf::typed_response_promise<console_reply>> attached;
  std::vector<follower> followers;
  /// Handed over by its coordinator as it stopped: the stages to keep.
  std::optional<job_handoff> handoff;
};

console_reply run_reply(const job_report& r, const std::string& prompt,
                        std::uint32_t n_gen);

/// Answers `rp` with `r`: its value or its error.
void deliver(caf::typed_response_promise<console_reply>& rp,
             const caf::expected<console_reply>& r) {
  if (r)
    rp.deliver(*r);
  else
    rp.deliver(r.error());
}

void deliver_report(caf::typed_response_promise<job_report>& rp,
                    const caf::expected<job_report>& r) {
  if (r)
    rp.deliver(*r);
  else
    rp.deliver(r.error());
}

/// Ends the follows of a job that cannot go on (`why` names it).
void fail_followers(std::vector<follower>& fs, const std::string& why) {
  for (auto& f : fs)
    f.rp.deliver(fail(exo_errc::failed_state, why));
  fs.clear();
}

/// What an attached client gets when `run` ends: run's reply, or the
/// error naming the job.
caf::expected<console_reply> attach_reply(const job_run& run,
                                          const caf::expected<job_report>& r) {
  if (!r) {
    auto why = error_message(r.error());
    auto named = "job " + run.key;
    return fail(exo_errc::failed_state,
                why.rfind(named, 0) == 0 ? why : named + ": " + why);
  }
  auto reply = run_reply(*r, run.job.request.prompt, run.job.request.n_gen);
  reply.command = "attach";
  reply.text = "attached to job " + run.key + "\n" + reply.text;
  return reply;
}

/// `run` ended: its attached clients get its end, and the node keeps it
/// for a while for those who attach late (a backup passing an end on).
void run_ended(self_ptr self, job_run& run,
               const caf::expected<job_report>& r) {
  auto& st = self->state;
  if (run.live) { // its memory comes back: those waiting try again soon
    run.live = false;
    --st.live;
    st.last_end = std::chrono::steady_clock::now();
    arm_retry(self, std::chrono::milliseconds{200});
  }
  auto reply = attach_reply(run, r);
  auto waiting = std::move(run.attached);
  run.attached.clear();
  for (auto& rp : waiting)
    deliver(rp, reply);
  auto followers = std::move(run.followers);
  run.followers.clear();
  if (run.log) {
    std::lock_guard<std::mutex> guard{run.log->mx};
    run.log->listeners.clear();
  }
  caf::expected<job_report> report{job_report{}};
  if (r)
    report = *r;
  else
    report = reply.error();
  for (auto& f : followers)
    deliver_report(f.rp, report);
  if (run.key.empty()) // it never started
    return;
  std::shared_ptr<ended_stream> stream;
  if (r && run.job.tokenizer) {
    std::size_t n = 0;
    for (auto& t : r->tokens)
      n += t.size();
    if (n <= max_replayed_tokens) {
      stream = std::make_shared<ended_stream>();
      stream->prompt = prompt_identity(run.job.request);
      stream->report = report;
      std::vector<std::vector<model::token_logprobs>> logprobs;
      if (run.log) {
        std::lock_guard<std::mutex> guard{run.log->mx};
        logprobs = run.log->logprobs;
        for (auto& e : run.log->prompt_scores)
          if (e.job != 0) {
            stream->scores.push_back(e);
            stream->scores.back().job = run.id;
          }
      }
      for (std::uint32_t seq = 0; seq < r->tokens.size(); ++seq)
        for (std::uint32_t i = 0; i < r->tokens[seq].size(); ++i)
          stream->tokens.push_back(token_event(run.id, seq, i, r->tokens,
                                               logprobs,
                                               *run.job.tokenizer));
    }
  } else if (!r) {
    stream = std::make_shared<ended_stream>();
    stream->prompt = prompt_identity(run.job.request);
    stream->report = report;
  }
  auto& ended = self->state.ended;
  ended.push_back({run.key, run.job.request.name,
                   run.id == 0 ? std::string{}
                               : self->state.cfg.node + ":"
                                   + std::to_string(run.id),
                   run.taken_from, run.moved_to, std::move(reply),
                   std::move(stream)});
  if (ended.size() > recent_jobs)
    ended.pop_front();
}

/// Validates `req` and starts placing it; the sink hears the rest. Returns
/// the error of a request that breaks a rule (nothing started then).
/// `from`: a job taken over, going on from its replicated tokens.
caf::error start_run(self_ptr self, job_request req, job_sink sink,
                     std::optional<takeover> from = std::nullopt,
                     caf::actor_addr listener = {}) {
  auto& st = self->state;
  auto run = std::make_shared<job_run>();
  run->sink = std::move(sink);
  run->listener = std::move(listener);
  // Attached clients hear the end too, whoever started the run.
  std::weak_ptr<job_run> weak = run;
  run->sink.done = [self, weak, done = std::move(run->sink.done)](
                     caf::expected<job_report> r) {
    if (auto x = weak.lock())
      run_ended(self, *x, r);
    if (done)
      done(std::move(r));
  };
  try {
    run->job = prepare_job(std::move(req));
    if (from) { // the whole file, in this node's cache under its digest
      run->sha = from->sha;
      run->size = from->size;
      run->key = from->key;
      run->taken_from = from->taken_from;
      run->lineage = std::move(from->lineage);
      run->generated = std::move(from->generated);
      run->generated_draws = std::move(from->generated_draws);
      run->generated_logprobs = std::move(from->generated_logprobs);
      run->earlier_recoveries = std::move(from->recoveries);
      run->resumed_after = from->why;
      run->resumed_moved_bytes = from->moved_bytes;
      run->resumed_since = from->since;
      run->resumed_last_token = from->last_token;
      run->attached = std::move(from->attached);
      run->followers = std::move(from->followers);
      run->handoff = std::move(from->handoff);
    } else if (st.cfg.gate) { // peers may need the file: name it by its digest
      run->sha = workload::file_sha256(run->job.request.model);
      run->size = workload::file_size(run->job.request.model);
    }
  } catch (const std::exception& e) {
    if (from) {
      for (auto& rp : from->attached)
        rp.deliver(fail(exo_errc::failed_state,
                        "job " + from->key + " cannot go on: " + e.what()));
      fail_followers(from->followers,
                     "job " + from->key + " cannot go on: " + e.what());
    }
    return fail(exo_errc::invalid_argument, e.what());
  }
  if (st.cfg.gate && !st.offered.count(run->sha)) {
    // Peers without the model fetch it from this node's bulk channel.
    try {
      if (st.cfg.blobs)
        st.cfg.blobs->add_file(run->sha, run->job.request.model);
    } catch (const std::exception& e) {
      return fail(exo_errc::invalid_argument, e.what());
    }
    st.offered[run->sha] = run->job.request.model;
  }
  if (st.cfg.gate && !run->job.request.draft.empty()) {
    // A backup fetches the draft too, from this node's bulk channel.
    try {
      run->draft_sha = workload::file_sha256(run->job.request.draft);
      run->draft_size = workload::file_size(run->job.request.draft);
      if (!st.offered.count(run->draft_sha)) {
        if (st.cfg.blobs)
          st.cfg.blobs->add_file(run->draft_sha, run->job.request.draft);
        st.offered[run->draft_sha] = run->job.request.draft;
      }
    } catch (const std::exception&) {
      run->draft_sha.clear(); // the backup goes on without it
      run->draft_size = 0;
    }
  }
  for (auto it = st.drained.begin(); it != st.drained.end();)
    if (it->second < std::chrono::steady_clock::now()) {
      it = st.drained.erase(it);
    } else {
      run->lost_nodes.insert(it->first);
      ++it;
    }
  run->live = true;
  ++st.live;
  // A job taken over is findable (attach) while it is placed: its backup
  // entry is gone already, and a client whose node died re-attaches now.
  if (from && st.cfg.gate)
    st.starting.push_back(run);
  place_first(self, run);
  return {};
}

/// A sink that sends every event to `listener` (none: no events).
job_sink listener_sink(caf::actor listener,
                       caf::typed_response_promise<job_report> rp) {
  job_sink s;
  if (listener) {
    s.placed = [listener](const job_placed& e) {
      caf::anon_send(listener, e);
    };
    s.started = [listener](const job_started& e) {
      caf::anon_send(listener, e);
    };
    s.token = [listener](const job_token& e) { caf::anon_send(listener, e); };
    s.scores = [listener](const job_prompt_scores& e) {
      caf::anon_send(listener, e);
    };
    s.recovered = [listener](const job_recovered& e) {
      caf::anon_send(listener, e);
    };
  }
  s.done = [rp](caf::expected<job_report> r) mutable {
    if (r)
      rp.deliver(std::move(*r));
    else
      rp.deliver(std::move(r.error()));
  };
  return s;
}

// -- console commands ---------------------------------------------------------

/// One recovery for people: "job 3 recovered from ...: N tokens re-fed,
/// next token X s after the loss was noticed (Y s between tokens)".
std::string recovery_line(const job_recovered& e) {
  char moved[120] = "";
  if (e.moved_bytes > 0) {
    const bool mib = e.moved_bytes >= (1u << 20);
    std::snprintf(moved, sizeof moved,
                  ": KV caches moved (%llu positions, %.1f %s)",
                  static_cast<unsigned long long>(e.moved_positions),
                  static_cast<double>(e.moved_bytes) / (mib ? 1 << 20 : 1 << 10),
                  mib ? "MiB" : "KiB");
  }
  char line[200];
  if (e.recovery_s <= 0 && e.gap_s <= 0) // another loss came first
    std::snprintf(line, sizeof line,
                  "%s %llu tokens re-fed, lost again before its first "
                  "token\n",
                  e.moved_bytes > 0 ? "," : ":",
                  static_cast<unsigned long long>(e.replayed));
  else
    std::snprintf(line, sizeof line,
                  "%s %llu tokens re-fed, next token %.3f s after the loss "
                  "was noticed (%.3f s between tokens)\n",
                  e.moved_bytes > 0 ? "," : ":",
                  static_cast<unsigned long long>(e.replayed), e.recovery_s,
                  e.gap_s);
  return "job " + std::to_string(e.job) + " recovered from " + e.reason
         + moved + line;
}

/// The recoveries of a report, as console JSON.
text::json recoveries_json(const std::vector<job_recovered>& rs) {
  text::json out = text::json::array();
  for (auto& e : rs)
    out.push_back({{"reason", e.reason},
                   {"replayed", e.replayed},
                   {"moved_bytes", e.moved_bytes},
                   {"moved_positions", e.moved_positions},
                   {"recovery_s", text::number(e.recovery_s, 4)},
                   {"gap_s", text::number(e.gap_s, 4)}});
  return out;
}

/// The reply of the console's `run`.
console_reply run_reply(const job_report& r, const std::string& prompt,
                        std::uint32_t n_gen) {
  std::ostringstream out;
  out << "job " << r.job << "\n" << r.placement;
  out << "model " << r.model_sha256.substr(0, 12) << ": " << r.bytes_sent
      << " bytes sent to nodes that lacked it\n";
  for (std::size_t i = 0; i < r.texts.size(); ++i)
    out << (r.texts.size() > 1 ? "sequence " + std::to_string(i) + ": "
                               : std::string{"text: "})
        << prompt << r.texts[i] << "\n";
  char line[256];
  std::snprintf(line, sizeof line,
                "prompt: %llu tokens in %.3f s (%.1f tokens/s)\n"
                "generation: %llu tokens in %.3f s (%.1f tokens/s), "
                "%u sequence(s) in flight\n",
                static_cast<unsigned long long>(r.prompt_tokens), r.prompt_s,
                r.prompt_tps(),
                static_cast<unsigned long long>(r.generated_tokens),
                r.generation_s, r.generation_tps(),
                static_cast<unsigned>(r.tokens.size()));
  out << line << r.sharing_line();
  if (!r.draft.empty())
    out << "draft: " << r.draft << "; " << r.accepted << " of " << r.drafted
        << " proposed tokens kept\n";
  for (auto& e : r.recoveries)
    out << recovery_line(e);
  if (r.cancelled)
    out << "cancelled: job " << r.job << " stopped after "
        << r.generated_tokens << " generated tokens (of " << n_gen
        << " per sequence)\n";
  console_reply reply;
  reply.command = "run";
  reply.text = out.str();
  reply.json = text::spaced(
    {{"tokens", r.tokens.empty() ? text::json::array()
                                 : text::json(r.tokens[0])},
     {"bytes_sent", r.bytes_sent},
     {"prompt_tps", text::number(r.prompt_tps(), 6)},
     {"shared_prompt_tokens", r.shared_prompt_tokens},
     {"cached_prompt_tokens", r.cached_prompt_tokens},
     {"generation_tps", text::number(r.generation_tps(), 6)},
     {"job", r.job},
     {"cancelled", r.cancelled},
     {"drafted", r.drafted},
     {"accepted", r.accepted},
     {"recoveries", recoveries_json(r.recoveries)}});
  return reply;
}

/// The options of a console `run`, parsed and range-checked with the
/// console's command table (the same bounds as exo-node run's).
run_options run_options_of(const console::parsed_command& p) {
  run_options o;
  o.model = p.text("model");
  if (o.model.empty())
    throw std::invalid_argument("run needs --model FILE");
  o.prompt = p.text("prompt");
  o.n_gen = static_cast<std::uint32_t>(p.count("n", o.n_gen));
  o.sampling.seed = p.count("seed", o.sampling.seed);
  o.sampling.temperature = static_cast<float>(
    p.number("temperature", o.sampling.temperature));
  o.sampling.top_k = static_cast<std::uint32_t>(
    p.count("top-k", o.sampling.top_k));
  o.sampling.top_p = static_cast<float>(p.number("top-p", o.sampling.top_p));
  o.stages = static_cast<std::uint32_t>(p.count("stages", o.stages));
  o.sequences = static_cast<std::uint32_t>(p.count("sequences", o.sequences));
  o.batch = static_cast<std::uint32_t>(p.count("batch", o.batch));
  o.no_prompt_sharing = p.has("no-prompt-sharing");
  o.no_prefix_cache = p.has("no-prefix-cache");
  o.draft = p.text("draft");
  o.draft_tokens =
    static_cast<std::uint32_t>(p.count("draft-tokens", o.draft_tokens));
  o.n_ctx = static_cast<std::uint32_t>(p.count("ctx", o.n_ctx));
  o.chat = p.has("chat");
  o.system = p.text("system");
  o.name = p.text("id");
  if (p.has("id"))
    check_job_name(o.name);
  o.kv_type = p.text("kv-type");
  if (!o.system.empty() && !o.chat)
    throw std::invalid_argument("--system goes with --chat");
  return o;
}

/// Console `run`: the job's events go to this node's stdout, its report
/// to the console.
caf::result<console_reply> console_run(self_ptr self, const std::string& arg) {
  job_request req;
  try {
    auto o = run_options_of(console::parse_command("run", arg));
    // A client names a file of the node: only inside its model folders.
    if (self->state.cfg.client_dirs) {
      o.model = text::resolve_client_file(o.model, *self->state.cfg.client_dirs,
                                          "model");
      if (!o.draft.empty())
        o.draft = text::resolve_client_file(
          o.draft, *self->state.cfg.client_dirs, "draft model");
    }
    req = make_job_request(o);
  } catch (const std::exception& e) {
    return fail(exo_errc::invalid_argument, std::string{"run: "} + e.what());
  }
  auto rp = self->make_response_promise<console_reply>();
  auto prompt = req.prompt;
  auto n_gen = req.n_gen;
  auto began = std::make_shared<bool>(false);
  job_sink s;
  s.placed = [](const job_placed& e) { std::cout << e.text << std::flush; };
  s.started = [prompt, began](const job_started& e) {
    *began = true;
    std::cout << "job " << e.job << " started (cancel " << e.job << ")\n"
              << prompt << std::flush;
  };
  s.token = [](const job_token& e) {
    if (e.seq == 0)
      std::cout << e.piece << std::flush;
  };
  s.recovered = [](const job_recovered& e) {
    std::cout << "\n" << recovery_line(e) << e.placement << std::flush;
  };
  s.done = [rp, prompt, n_gen, began](caf::expected<job_report> r) mutable {
    if (*began)
      std::cout << std::endl;
    if (r)
      rp.deliver(run_reply(*r, prompt, n_gen));
    else
      rp.deliver(fail(exo_errc::failed_state,
                      "run: " + error_message(r.error())));
  };
  // The promise owns the request from here: errors go through it too.
  if (auto err = start_run(self, std::move(req), std::move(s)))
    rp.deliver(
      fail(exo_errc::invalid_argument, "run: " + error_message(err)));
  return rp;
}

/// Console `jobs`: the runs this node coordinates.
console_reply list_jobs(self_ptr self) {
  auto& st = self->state;
  console_reply r;
  r.command = "jobs";
  std::ostringstream table;
  text::json jobs = text::json::array();
  if (st.running.empty())
    table << "no running jobs on " << st.cfg.node << "\n";
  else
    table << "JOB  MODEL         TOKENS  SEQS  N     SECONDS  STAGES\n";
  auto now = std::chrono::steady_clock::now();
  for (auto& [id, j] : st.running) {
    auto secs = std::chrono::duration<double>(now - j.started).count();
    auto tokens = j.tokens->load(std::memory_order_relaxed);
    char line[160];
    std::snprintf(line, sizeof line, "%-4llu %-13s %-7llu %-5u %-5u %-8.1f ",
                  static_cast<unsigned long long>(id), j.model.c_str(),
                  static_cast<unsigned long long>(tokens), j.sequences,
                  j.n_gen, secs);
    table << line << j.stages << (j.cancel_requested ? " (cancelling)" : "")
         << "\n";
    jobs.push_back(job_json(id, j, "running"));
  }
  // Runs waiting for memory, in their order: the one being placed again
  // first (it is still waiting until its stages stand).
  std::vector<run_ptr> queue;
  if (auto r = st.retrying.lock();
      r && !r->ended && !r->waiting
      && r->wait_since != std::chrono::steady_clock::time_point{})
    queue.push_back(r);
  for (auto& w : st.waiting)
    if (!w->ended && w->waiting)
      queue.push_back(w);
  text::json waiting = text::json::array();
  for (auto& w : queue) {
    auto since = std::chrono::duration<double>(now - w->wait_since).count();
    auto left = std::max(
      0.0, std::chrono::duration<double>(w->wait_until - now).count());
    // Named as the running ones are (their digest's first 12 digits).
    auto model = w->sha.empty() ? w->job.request.model : w->sha.substr(0, 12);
    char line[200];
    std::snprintf(line, sizeof line,
                  "waiting for memory: %s%s%s, %.1f s so far, at most "
                  "%.1f s more\n",
                  model.c_str(), w->job.request.name.empty() ? "" : " ",
                  w->job.request.name.c_str(), since, left);
    table << line;
    waiting.push_back({{"model", model},
                       {"name", w->job.request.name},
                       {"seconds", since},
                       {"seconds_left", left},
                       {"reason", w->wait_why}});
  }
  text::json backups = text::json::array();
  for (auto& [key, b] : st.backups) {
    std::uint64_t have = 0;
    for (auto& t : b.replica.tokens)
      have += t.size();
    table << "backing up job " << key
          << (b.replica.request.name.empty()
                ? std::string{}
                : " (" + b.replica.request.name + ")")
          << ": " << have << " tokens"
          << (b.path.empty()        ? ", fetching the model"
              : b.draft_pending ? ", fetching the draft model"
                                : ", ready")
          << "\n";
    // Ready: what a takeover would use has arrived.
    backups.push_back({{"job", key},
                       {"name", b.replica.request.name},
                       {"origin", b.replica.origin},
                       {"tokens", have},
                       {"ready", !b.path.empty() && !b.draft_pending}});
  }
  r.text = table.str();
  text::json recent = text::json::array();
  for (auto& j : st.recent)
    recent.push_back(j);
  r.json = text::spaced({{"node", st.cfg.node},
                         {"jobs", jobs},
                         {"recent", recent},
                         {"waiting", waiting},
                         {"backups", backups}});
  return r;
}

/// The longest resume grace a client may ask for (the gateway's
/// resume_grace_ms is at most this).
constexpr std::uint32_t max_resume_grace_ms = 600000;

/// Whether every client of `rj` (the one that asked for it, those that
/// follow it) is among those that left.
bool every_client_left(const running_job& rj) {
  auto run = rj.run.lock();
  if (!run)
    return !rj.left.empty();
  if (run->listener && !rj.left.count(run->listener))
    return false;
  for (auto& f : run->followers)
    if (f.listener && !rj.left.count(f.listener.address()))
      return false;
  return !rj.left.empty();
}

/// Asks job `id` to stop at its next token boundary; `then(bool)` gets
/// whether it was still running. False at once when it is not ours.
template <class F>
void cancel(self_ptr self, std::uint64_t id, F then) {
  auto it = self->state.running.find(id);
  if (it == self->state.running.end()) {
    then(false);
    return;
  }
  it->second.cancel_requested = true;
  self->request(it->second.job, 10s, cancel_atom::value)
    .then([then](bool stopping) mutable { then(stopping); },
          [then](caf::error&) mutable { then(false); });
}

/// Job `id` (KEY) was cancelled at its origin while the origin handed it
/// to this node: it stops here, said on the log.
void cancel_handed(self_ptr self, std::uint64_t id, const std::string& key) {
  exo::text::line(std::cout)
    << "exo-node " << self->state.cfg.node << ": job " << id << " (" << key
    << ") stops: it was cancelled while it was handed over" << std::endl;
  cancel(self, id, [](bool) {});
}

/// A console command's argument parsed with the command table, or the
/// table's error with the command's usage.
caf::expected<console::parsed_command>
parse_args(const char* name, const std::string& arg, const char* usage) {
  try {
    return console::parse_command(name, arg);
  } catch (const console::command_error& e) {
    return fail(exo_errc::invalid_argument,
                std::string{e.what()} + " (" + usage + ")");
  }
}

/// Console `cancel JOB`: the job stops at its next token boundary and its
/// `run` answers with what it produced so far.
caf::result<console_reply> console_cancel(self_ptr self,
                                          const std::string& arg) {
  auto& st = self->state;
  auto parsed = parse_args("cancel", arg, "cancel JOB, the id `jobs` lists");
  if (!parsed)
    return std::move(parsed.error());
  auto& p = *parsed;
  auto& w = p.args[0];
  // The table checked JOB with the strict parser (digits, at most 2^64-1).
  auto id = text::parse_integer<std::uint64_t>(w);
  if (st.running.count(id) == 0)
    return fail(exo_errc::invalid_argument,
                "cancel: no running job " + w + " on " + st.cfg.node
                  + " (jobs lists the runs this node coordinates)");
  auto rp = self->make_response_promise<console_reply>();
  cancel(self, id, [rp, w, id](bool stopping) mutable {
    console_reply r;
    r.command = "cancel";
    r.text = stopping
               ? "cancelling job " + w + ": it stops at the next token\n"
               : "job " + w + " has ended\n";
    r.json = text::spaced({{"job", id}, {"cancelling", stopping}});
    rp.deliver(std::move(r));
  });
  return rp;
}

/// A device paused for heat (its node's thermal service tells every jobs
/// service): each run this node coordinates with a stage there moves off
/// it now, KV caches and all (the job's planned move), to a device that
/// is not paused; when none has room it goes back there (no_room).
void thermal_move(self_ptr self, const thermal_status& s) {
  auto& st = self->state;
  const auto key = s.node + "/" + s.device;
  // Runs placed there whose stages still start (no job yet): remembered,
  // they move once the job runs (start_job), unless it cooled first.
  for (auto& w : st.starting) {
    auto run = w.lock();
    if (!run || run->ended || run->job_handle)
      continue;
    if (s.state != "paused") {
      if (run->heat_paused.erase(key) != 0)
        run->lost_devices.erase(key);
      continue;
    }
    for (auto& p : run->plan)
      if (p.node + "/" + p.device == key) {
        run->heat_paused.insert(key);
        run->lost_devices.insert(key);
        exo::text::line(std::cout)
          << "exo-node " << st.cfg.node << ": a run placed on " << key
          << " moves off it once its job runs (paused for heat)"
          << std::endl;
        break;
      }
  }
  if (s.state != "paused")
    return;
  for (auto& [id, rj] : st.running) {
    auto run = rj.run.lock();
    if (!run || run->ended)
      continue;
    if (run->recovery) { // its new stages move on if placed there
      run->lost_devices.insert(key);
      run->heat_paused.insert(key);
      continue;
    }
    std::vector<std::uint32_t> lost;
    for (std::uint32_t i = 0; i < rj.plan.size(); ++i)
      if (rj.plan[i].node == s.node && rj.plan[i].device == s.device)
        lost.push_back(i);
    if (lost.empty())
      continue;
    run->lost_devices.insert(key);
    run->heat_paused.insert(key);
    exo::text::line(std::cout)
      << "exo-node " << st.cfg.node << ": moving job " << id << " off "
      << key << " (paused for heat)" << std::endl;
    self->send(rj.job, lost_atom::value,
               "device " + key + " paused for heat ("
                 + (s.reason.empty() ? std::string{"thermal limit"}
                                     : s.reason)
                 + ", a planned move)",
               lost, true);
  }
}

/// Moves every run this node coordinates with stages on `node` off it (a
/// planned lost notice to each job: re-placed without the node, KV caches
/// carried); returns their ids.
/// How long a drained node gets no new run (unless it leaves first).
constexpr auto drain_memory = std::chrono::minutes(10);

std::vector<std::uint64_t> drain_here(self_ptr self, const std::string& node) {
  auto& st = self->state;
  std::vector<std::uint64_t> moved;
  // Runs that come later (or wait for memory now) stay off it too.
  st.drained[node] = std::chrono::steady_clock::now() + drain_memory;
  for (auto& r : st.waiting)
    r->lost_nodes.insert(node);
  // Runs whose stages start there: they move once their job runs.
  for (auto& w : st.starting)
    if (auto run = w.lock(); run && !run->ended && !run->job_handle)
      run->lost_nodes.insert(node);
  for (auto& [id, rj] : st.running) {
    auto lost = stages_on(rj.plan, node);
    auto run = rj.run.lock();
    if (!run)
      continue;
    run->lost_nodes.insert(node);
    // One being placed again: its new stages move on once they stand if
    // that placement used NODE (stages_linked).
    if (lost.empty() || run->recovery)
      continue;
    self->send(rj.job, lost_atom::value,
               "node " + node + " is drained (a planned move)", lost, true);
    moved.push_back(id);
  }
  return moved;
}

/// Hands job `id` to its backup (this node stops): the job pauses at its
/// next token boundary (after the planned move of any stage on this
/// node), the backup runs it on the same stages (their caches in place)
/// and becomes their owner, and the job ends here without releasing
/// them. `done` gets a line saying what happened. A backup that refuses or
/// does not answer leaves the job paused here: it takes it over (its
/// replica re-fed) when this node has left — never two jobs on one set of
/// caches.
void hand_off(self_ptr self, std::uint64_t id,
              std::function<void(std::string)> done) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end() || it->second.backup.empty()) {
    done("job " + std::to_string(id) + " has no backup");
    return;
  }
  auto& rj = it->second;
  rj.handing_off = true; // its backup gets the tokens with the handoff
  auto job = rj.job;
  auto backup = rj.backup;
  auto key = rj.key;
  // The node's log says it, as it says a job handed over.
  auto left = [self, id, key, backup](const std::string& why) {
    auto line = "job " + std::to_string(id) + " (" + key + ") is left to "
                + backup + "'s takeover (re-fed): " + why;
    exo::text::line(std::cout)
      << "exo-node " << self->state.cfg.node << ": " << line << std::endl;
    return line;
  };
  // Not paused (it ended, or goes on here): its backup hears from it again
  // (its progress, its end).
  auto replicate_again = [self, id] {
    if (auto it = self->state.running.find(id);
        it != self->state.running.end())
      it->second.handing_off = false;
  };
  // Bounded within the runtime's wait (45 s): the job's pause (after its
  // move off this node), the backup's answer, the stages' adoption.
  self->request(job, 25s, handoff_atom::value)
    .then(
      [self, id, job, backup, key, done, left,
       replicate_again](job_handoff& h) {
        auto& st = self->state;
        auto it = st.running.find(id);
        if (it != st.running.end() && it->second.cancel_requested) {
          // Cancelled while it paused: it stops here at once (the job
          // holds the cancel), nothing is handed over.
          self->send(job, handoff_atom::value, false);
          replicate_again();
          done("job " + std::to_string(id) + " (" + key
               + ") was cancelled while it paused for its handoff: it "
                 "stops here");
          return;
        }
        auto run = it == st.running.end() ? nullptr : it->second.run.lock();
        bool fits = run && run->plan.size() == h.stages.size()
                    && run->ready.size() == h.stages.size();
        for (std::size_t i = 0; fits && i < h.stages.size(); ++i)
          fits = run->plan[i].node != st.cfg.node
                 && h.stages[i] == run->ready[i].shard;
        if (!fits) { // a stage still here, or not the plan's: it goes on
          self->send(job, handoff_atom::value, false);
          replicate_again();
          done(left("its stages were not all off this node"));
          return;
        }
        h.origin = st.cfg.node;
        h.job = id;
        if (run->job.request.logprobs >= 0 && run->log) {
          // Its tokens' log-probabilities, from the log (which holds every
          // token the job gave).
          std::lock_guard<std::mutex> guard{run->log->mx};
          for (std::size_t j = 0; j < h.tokens.size(); ++j)
            h.logprobs.push_back(
              j < run->log->logprobs.size()
                ? logprobs_between(run->log->logprobs[j], 0,
                                   h.tokens[j].size())
                : std::vector<model::token_logprobs>{});
        }
        h.bounds.push_back(run->plan.front().first);
        for (auto& p : run->plan) {
          h.nodes.push_back(p.node);
          h.devices.push_back(p.device);
          h.bounds.push_back(p.last);
        }
        h.placement = run->placement_text;
        auto stages = h.stages;
        std::uint64_t held = 0;
        for (auto p : h.pos)
          held += p;
        exo::text::line(std::cout)
          << "exo-node " << st.cfg.node << ": job " << id << " (" << key
          << ") paused at a token boundary: handing it to " << backup
          << std::endl;
        self
          ->request(st.cfg.gate, 10s, service_atom::value, backup,
                    std::string{"jobs"},
                    caf::make_message(handoff_atom::value, std::move(h)))
          .then(
            [self, id, job, backup, key, done, stages, held,
             run](caf::actor& owner) {
              // The stages follow the backup's coordinator from now on.
              struct adoption {
                std::size_t pending = 0;
                std::string failed;
              };
              auto a = std::make_shared<adoption>();
              a->pending = stages.size();
              auto one = [self, a, id, job, backup, key, done, held, run,
                          owner, n = stages.size()](std::string why) {
                if (!why.empty())
                  a->failed += "; " + why;
                if (--a->pending != 0)
                  return;
                run->handed_off = true;
                self->send(job, handoff_atom::value, true);
                // A cancel that came while the backup took it (the paused
                // job held it): it follows the job to its new owner, which
                // knows it by this node's key for it.
                auto& st = self->state;
                if (auto it = st.running.find(id);
                    it != st.running.end() && it->second.cancel_requested) {
                  // (A request: its answer must not reach a handler-less
                  // actor, nor an error come back as a stray message.)
                  self
                    ->request(owner, 10s, cancel_atom::value,
                              st.cfg.node + ":" + std::to_string(id))
                    .then([](bool) {}, [](caf::error&) {});
                  a->failed += "; cancelled meanwhile: the cancel follows "
                               "it to "
                               + backup;
                }
                auto line = "job " + std::to_string(id) + " (" + key
                            + ") handed to " + backup + ": its "
                            + std::to_string(n) + " stages kept with "
                            + std::to_string(held)
                            + " positions of KV cache, nothing re-fed"
                            + a->failed;
                exo::text::line(std::cout)
                  << "exo-node " << self->state.cfg.node << ": " << line
                  << std::endl;
                done(line);
              };
              for (std::size_t i = 0; i < stages.size(); ++i)
                self
                  ->request(stages[i], 5s, adopt_atom::value, owner)
                  .then([one](caf::ok_atom) mutable { one({}); },
                        [self, one, i](caf::error& err) mutable {
                          one("stage " + std::to_string(i)
                              + " did not follow (it goes with this "
                                "node, the job recovers): "
                              + render(self, err));
                        });
            },
            [self, done, left](caf::error& err) {
              // Paused here until this node leaves; then the backup, if
              // it did not take it, takes it over.
              done(left(render(self, err)));
            });
      },
      [self, done, left, replicate_again](caf::error& err) {
        replicate_again();
        done(left(render(self, err)));
      });
}

/// This node stops: its stages move off it (planned moves), then every
/// job it runs that has a backup is handed to it (hand_off); answers with
/// a line per job once each is handed over or left to its takeover.
caf::result<console_reply> hand_off_all(self_ptr self) {
  auto& st = self->state;
  drain_here(self, st.cfg.node); // the jobs pause once their moves end
  struct gather {
    std::vector<std::string> lines;
    std::size_t pending = 0;
  };
  auto g = std::make_shared<gather>();
  auto rp = self->make_response_promise<console_reply>();
  auto finish = [g, rp]() mutable {
    console_reply r;
    r.command = "handoff";
    text::json lines = text::json::array();
    for (auto& l : g->lines) {
      r.text += l + "\n";
      lines.push_back(l);
    }
    r.json = text::spaced({{"jobs", lines}});
    rp.deliver(std::move(r));
  };
  std::vector<std::uint64_t> ids;
  for (auto& [id, rj] : st.running)
    if (!rj.backup.empty() && !rj.cancel_requested && !rj.handing_off)
      ids.push_back(id);
  g->pending = ids.size();
  if (ids.empty()) {
    finish();
    return rp;
  }
  for (auto id : ids)
    hand_off(self, id, [g, finish](std::string line) mutable {
      g->lines.push_back(std::move(line));
      if (--g->pending == 0)
        finish();
    });
  return rp;
}

/// Console `drain NODE`: every run with stages on NODE moves off it, those
/// this node coordinates and, asked through the gate (drain_atom), those
/// of every other alive node, so that NODE may leave without failing them.
caf::result<console_reply> drain_everywhere(self_ptr self,
                                            const std::string& node,
                                            bool own_runs);

caf::result<console_reply> console_drain(self_ptr self,
                                         const std::string& arg) {
  auto parsed = parse_args("drain", arg, "drain NODE");
  if (!parsed)
    return std::move(parsed.error());
  return drain_everywhere(self, parsed->args[0], true);
}

/// Moves the runs with a stage on `node` off it: this node's (with
/// `own_runs`) and every other alive node's, asked through the gate;
/// answers, once they said which, with what moves.
caf::result<console_reply> drain_everywhere(self_ptr self,
                                            const std::string& node,
                                            bool own_runs) {
  auto& st = self->state;
  struct gather {
    std::vector<std::uint64_t> here;
    std::vector<std::string> elsewhere; ///< "n2:4"
    std::vector<std::string> unanswered;
    std::size_t pending = 0;
  };
  auto g = std::make_shared<gather>();
  if (own_runs)
    g->here = drain_here(self, node);
  auto rp = self->make_response_promise<console_reply>();
  auto done = [self, g, node, rp]() mutable {
    auto& st = self->state;
    console_reply r;
    r.command = "drain";
    std::string ids;
    text::json here = text::json::array(), there = text::json::array();
    for (auto id : g->here) {
      ids += (ids.empty() ? "" : ", ") + std::to_string(id);
      here.push_back(id);
    }
    std::string others;
    for (auto& k : g->elsewhere) {
      others += (others.empty() ? "" : ", ") + k;
      there.push_back(k);
    }
    if (!g->here.empty())
      r.text = "moving job" + std::string{g->here.size() > 1 ? "s " : " "}
               + ids + " off " + node
               + ": re-placed on the other nodes, each goes on from its "
                 "next token (jobs shows where)\n";
    if (!g->elsewhere.empty())
      r.text += "moving " + others
                + " (coordinated by other nodes) off " + node + "\n";
    if (r.text.empty())
      r.text = "no run of " + st.cfg.node + " has a stage on " + node
               + (st.alive.empty() ? std::string{}
                                   : ", nor one of the other nodes")
               + "\n";
    for (auto& n : g->unanswered)
      r.text += "warning: " + n + "\n";
    r.json = text::spaced({{"node", node},
                           {"moving", here},
                           {"moving_elsewhere", there}});
    rp.deliver(std::move(r));
  };
  std::vector<std::string> peers(st.alive.begin(), st.alive.end());
  g->pending = peers.size();
  if (peers.empty() || !st.cfg.gate) {
    done();
    return rp;
  }
  for (auto& peer : peers)
    self
      ->request(st.cfg.gate, 10s, service_atom::value, peer,
                std::string{"jobs"},
                caf::make_message(drain_atom::value, node))
      .then(
        [g, done, peer](std::string& keys) mutable {
          std::size_t at = 0;
          while (!keys.empty() && at != std::string::npos) {
            auto comma = keys.find(", ", at);
            g->elsewhere.push_back(keys.substr(at, comma - at));
            at = comma == std::string::npos ? comma : comma + 2;
          }
          if (--g->pending == 0)
            done();
        },
        [self, g, done, peer](caf::error& err) mutable {
          g->unanswered.push_back(peer + " did not say which of its runs "
                                         "move: "
                                  + render(self, err));
          if (--g->pending == 0)
            done();
        });
  return rp;
}

caf::error take_over(self_ptr self, const std::string& key,
                     const std::string& why,
                     std::optional<job_handoff> handoff = std::nullopt);

/// A member that is no longer alive ends every running job with a stage
/// on it at once (a killed node's stages go away and their jobs see it; a
/// frozen one keeps its connection until the gate declares it dead).
void on_member(self_ptr self, const member_event& e) {
  auto& st = self->state;
  if (e.member.name == st.cfg.node)
    return;
  if (e.member.status == member_status::alive) {
    st.alive.insert(e.member.name);
    st.met_peer = true;
    // A node back from the dead (restarted, thawed) may hold stages and
    // back jobs up again.
    for (auto& [id, rj] : st.running) {
      rj.refused.erase(e.member.name);
      if (auto run = rj.run.lock())
        run->lost_nodes.erase(e.member.name);
    }
    // Jobs that found no backup yet get this one.
    for (auto& [id, rj] : st.running)
      if (rj.backup.empty() && rj.log)
        choose_backup(self, id);
    return;
  }
  st.alive.erase(e.member.name);
  {
    auto now = std::chrono::steady_clock::now();
    for (auto it = st.went_down.begin(); it != st.went_down.end();)
      it = now - it->second > lineage_window ? st.went_down.erase(it)
                                             : std::next(it);
    st.went_down[e.member.name] = now;
  }
  st.drained.erase(e.member.name); // back later: a fresh node
  // Follows streaming from it (or waiting for its answer) look again.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> asked;
  for (auto& [n, f] : st.follows)
    if (f.asked.count(e.member.name))
      asked.emplace_back(n, f.round);
  for (auto& [n, round] : asked)
    follow_missed(self, n, round, e.member.name, caf::error{});
  // Our jobs that it backed up get another backup; it may have taken them
  // over (if this node was the one cut off): it is asked once it is back.
  std::vector<std::uint64_t> orphans;
  for (auto& [id, rj] : st.running)
    if (rj.backup == e.member.name) {
      orphans.push_back(id);
      rj.former_backups.insert(e.member.name);
    }
  for (auto id : orphans)
    choose_backup(self, id);
  // Its jobs that this node backs up go on here.
  std::vector<std::string> theirs;
  for (auto& [key, b] : st.backups)
    if (b.replica.origin == e.member.name)
      theirs.push_back(key);
  auto gone = "coordinator " + e.member.name + " is "
              + to_string(e.member.status)
              + (e.member.status_reason.empty()
                   ? std::string{}
                   : " (" + e.member.status_reason + ")");
  for (auto& key : theirs)
    take_over(self, key, gone);
  auto why = [&](const stage_place& p) {
    return "node " + e.member.name + " is " + to_string(e.member.status)
           + (e.member.status_reason.empty()
                ? std::string{}
                : " (" + e.member.status_reason + ")")
           + ": it held layers [" + std::to_string(p.first) + ", "
           + std::to_string(p.last) + ")";
  };
  for (auto& [id, rj] : self->state.running) {
    auto lost = stages_on(rj.plan, e.member.name);
    if (!lost.empty())
      self->send(rj.job, lost_atom::value, why(rj.plan[lost.front()]),
                 lost);
  }
  // Runs still starting their stages (the first time or after a loss): a
  // request to a dead node would wait for its timeout (600 s, a model
  // download may be long); they are placed again without it.
  auto starting = self->state.starting; // replace_run may add to it
  for (auto& w : starting)
    if (auto run = w.lock(); run && !run->ended && run->pending > 0)
      for (auto& p : run->plan)
        if (p.node == e.member.name) {
          run->lost_nodes.insert(p.node);
          replace_run(self, run, why(p));
          break;
        }
}

// -- backing jobs up and taking them over ------------------------------------

/// Whether this node believes a peer's word that its copy of a job was
/// taken over from the copies `lineage` names (workload::lineage_believed).
bool lineage_believed(const coordinator_state& st,
                      const std::vector<std::string>& lineage) {
  return workload::lineage_believed(st.cfg.node, lineage, st.alive,
                                    st.went_down,
                                    std::chrono::steady_clock::now());
}

/// The node that runs job `key` now, as this node knows, when that is not
/// `asker`, whose copy the job left (`lineage`: the copies the asker's
/// copy was taken over from, as far as this node knows): what one of its
/// runs (running here, or among the ends of its last runs) says
/// (workload::copy_holder), else the origin of a copy this node backs up
/// that descends from `key` (workload::backup_descends) by a lineage it
/// believes. "" when this node knows of no such run.
std::string holder_of(const coordinator_state& st, const std::string& key,
                      const std::string& asker,
                      const std::vector<std::string>& lineage) {
  const auto& self = st.cfg.node;
  for (auto& [id, rj] : st.running)
    if (auto h = workload::copy_holder(self, key, asker, rj.key,
                                       rj.taken_from, rj.moved_to, lineage,
                                       self + ":" + std::to_string(id));
        !h.empty())
      return h;
  // A copy being taken over here, its stages still starting, holds it
  // already.
  for (auto& w : st.starting)
    if (auto run = w.lock(); run && !run->ended)
      if (auto h = workload::copy_holder(
            self, key, asker, run->key, run->taken_from, run->moved_to,
            lineage,
            run->id == 0 ? std::string{} : self + ":" + std::to_string(run->id));
          !h.empty())
        return h;
  for (auto& e : st.ended)
    if (auto h = workload::copy_holder(self, key, asker, e.key, e.taken_from,
                                       e.moved_to);
        !h.empty())
      return h;
  for (auto& [k, b] : st.backups)
    if (workload::backup_descends(key, asker, lineage, k, b.replica.origin,
                                  b.replica.lineage)
        && lineage_believed(st, b.replica.lineage))
      return b.replica.origin;
  return {};
}

/// A job of `r.origin` to back up: checked (a peer sent it), kept, and its
/// model fetched whole into this node's cache before the answer.
caf::result<caf::ok_atom> on_replica(self_ptr self, job_replica& r) {
  auto& st = self->state;
  auto bad = [](std::string what) {
    return fail(exo_errc::invalid_argument, "replicate: " + what);
  };
  if (!st.cfg.gate)
    return bad("this node is not in a cluster");
  if (auto why = workload::replica_problem(r, st.cfg.node); !why.empty())
    return bad(why);
  auto key = r.origin + ":" + std::to_string(r.job);
  // A copy of a job that runs elsewhere now (its node was frozen or cut
  // off, and came back): it ends, it gets no backup.
  for (auto& k : {key, r.lineage.empty() ? key : r.lineage.front()})
    if (auto holder = holder_of(st, k, r.origin, r.lineage); !holder.empty())
      return fail(exo_errc::failed_state,
                  "job " + k + console::job_taken_over + holder);
  if (st.backups.count(key) == 0 && st.backups.size() >= max_backups)
    return bad("this node backs up " + std::to_string(max_backups)
               + " jobs already");
  auto sha = r.model_sha256;
  auto size = r.model_size;
  auto draft_sha = r.draft_sha256;
  auto draft_size = r.draft_size;
  auto origin = r.origin;
  auto& b = st.backups[key];
  b.replica = std::move(r);
  b.path.clear();
  b.draft_path.clear();
  b.draft_pending = !draft_sha.empty();
  b.last_token = std::chrono::steady_clock::now();
  auto rp = self->make_response_promise<caf::ok_atom>();
  // The model and the draft are fetched side by side (a takeover before
  // the draft arrived goes on without it); the replica is answered once
  // the model is here and the draft here or failed, or when the model
  // fails.
  auto left = std::make_shared<int>(draft_sha.empty() ? 1 : 2);
  auto answered = std::make_shared<bool>(false);
  auto one_done = [rp, left, answered]() mutable {
    if (--*left == 0 && !*answered) {
      *answered = true;
      rp.deliver(caf::ok_atom::value);
    }
  };
  self
    ->request(st.cfg.gate, 3600s, service_atom::value, st.cfg.node,
              std::string{"shards"},
              caf::make_message(prefetch_atom::value, sha, size, origin))
    .then(
      [self, key, one_done](std::string& path) mutable {
        auto it = self->state.backups.find(key);
        if (it != self->state.backups.end()) // else: ended meanwhile
          it->second.path = path;
        one_done();
      },
      [self, key, rp, answered](caf::error& err) mutable {
        auto why = render(self, err);
        auto it = self->state.backups.find(key);
        if (it != self->state.backups.end()) {
          for (auto& a : it->second.attached)
            a.deliver(fail(exo_errc::failed_state,
                           "job " + key + ": its backup lacks the model: "
                             + why));
          fail_followers(it->second.followers,
                         "job " + key + ": its backup lacks the model: "
                           + why);
          self->state.backups.erase(it);
        }
        if (*answered)
          return;
        *answered = true;
        rp.deliver(fail(exo_errc::failed_state,
                        self->state.cfg.node
                          + " cannot fetch the model to back job " + key
                          + " up: " + why));
      });
  if (!draft_sha.empty())
    self
      ->request(st.cfg.gate, 3600s, service_atom::value, st.cfg.node,
                std::string{"shards"},
                caf::make_message(prefetch_atom::value, draft_sha, draft_size,
                                  origin))
      .then(
        [self, key, one_done](std::string& draft) mutable {
          auto it = self->state.backups.find(key);
          if (it != self->state.backups.end()) {
            it->second.draft_path = draft;
            it->second.draft_pending = false;
          }
          one_done();
        },
        [self, key, one_done](caf::error& err) mutable {
          auto it = self->state.backups.find(key);
          if (it != self->state.backups.end()) {
            it->second.draft_pending = false;
            // Without it the job would go on all the same.
            exo::text::line(std::cerr)
              << "exo-node " << self->state.cfg.node << ": job " << key
              << " is backed up without its draft model: "
              << render(self, err) << std::endl;
          }
          one_done();
        });
  return rp;
}

/// More tokens of a job this node backs up, or its end.
caf::result<caf::ok_atom> on_progress(self_ptr self, job_progress& p) {
  auto& st = self->state;
  const auto key = p.origin + ":" + std::to_string(p.job);
  auto it = st.backups.find(key);
  // A job that runs elsewhere now, whose origin speaks again: it must stop
  // its copy. So too when this node backs that copy up: the origin came
  // back after it was declared dead and went on, while the node that took
  // its job over backs it up here as well (its replica names the same
  // first key); the copy taken over is the job from then on.
  if (!p.ended && p.origin != st.cfg.node)
    if (auto holder = holder_of(st, key, p.origin,
                                it == st.backups.end()
                                  ? std::vector<std::string>{}
                                  : it->second.replica.lineage);
        !holder.empty()) {
      auto why = "job " + key + console::job_taken_over + holder;
      if (it != st.backups.end()) {
        for (auto& a : it->second.attached)
          a.deliver(fail(exo_errc::failed_state, why));
        fail_followers(it->second.followers, why);
        st.backups.erase(it);
      }
      return fail(exo_errc::failed_state, why);
    }
  if (it == st.backups.end())
    return caf::ok_atom::value;
  auto& b = it->second;
  if (p.ended && !p.moved_to.empty()) {
    if (p.moved_to.size() > max_name_length)
      return fail(exo_errc::invalid_argument,
                  "job " + key + ": a node name of "
                    + std::to_string(p.moved_to.size())
                    + " bytes where the job moved (at most "
                    + std::to_string(max_name_length) + ")");
    auto why = p.moved_to == p.origin
                 ? "job " + key + " is backed up elsewhere now"
                 : "job " + key + console::job_taken_over + p.moved_to;
    exo::text::line(std::cout)
      << "exo-node " << st.cfg.node << ": drops its replica: " << why
      << std::endl;
    if (p.moved_to == p.origin) {
      // It goes on there: the clients attached here wait for its end
      // there, and followers look for it again.
      for (auto& a : b.attached)
        self
          ->request(st.cfg.gate, std::chrono::seconds(24 * 3600),
                    service_atom::value, p.origin, std::string{"jobs"},
                    caf::make_message(attach_atom::value, key))
          .then([a](console_reply& r) mutable { a.deliver(std::move(r)); },
                [a](caf::error& err) mutable { a.deliver(std::move(err)); });
      for (auto& f : b.followers)
        f.rp.deliver(fail(exo_errc::invalid_argument, why));
    } else {
      // Its clients here follow it to the node that took it over.
      for (auto& a : b.attached)
        a.deliver(fail(exo_errc::failed_state, why));
      fail_followers(b.followers, why);
    }
    st.backups.erase(it);
    return caf::ok_atom::value;
  }
  if (p.ended) {
    // It ended on its node: the clients attached here get its end from
    // there (the node keeps the ends of its last runs).
    auto key = it->first;
    for (auto& a : b.attached)
      self
        ->request(st.cfg.gate, 60s, service_atom::value, p.origin,
                  std::string{"jobs"},
                  caf::make_message(attach_atom::value, key))
        .then([a](console_reply& r) mutable { a.deliver(std::move(r)); },
              [self, a, key, origin = p.origin](caf::error& err) mutable {
                a.deliver(fail(exo_errc::failed_state,
                               "job " + key + " ended on " + origin
                                 + ", which did not pass its end on: "
                                 + render(self, err)));
              });
    // Followers ask again: the node that ended it keeps its end.
    for (auto& f : b.followers)
      f.rp.deliver(fail(exo_errc::invalid_argument,
                        "job " + key + " ended on " + p.origin));
    st.backups.erase(it);
    return caf::ok_atom::value;
  }
  auto& tokens = b.replica.tokens;
  auto& draws = b.replica.draws;
  auto n = std::min({p.have.size(), p.more.size(), p.draws.size(),
                     tokens.size(), draws.size()});
  for (std::size_t j = 0; j < n; ++j) {
    // Only what follows what this node holds (a gap or a repeat is left
    // out: those tokens are generated again after a takeover), and draws
    // its tokens can take.
    if (p.have[j] != tokens[j].size()
        || p.more[j].size() > b.replica.request.n_gen - tokens[j].size()
        || p.draws[j] > max_draws(tokens[j].size() + p.more[j].size(),
                                  b.replica.request.draft_tokens))
      continue;
    // Their log-probabilities come with them (as many, well formed), or
    // the tokens are left out too.
    auto& lp = b.replica.logprobs;
    if (b.replica.request.logprobs >= 0) {
      if (j >= p.more_logprobs.size() || j >= lp.size()
          || !logprobs_problem({p.more[j]}, {p.more_logprobs[j]},
                               b.replica.request.logprobs)
                .empty())
        continue;
      lp[j].insert(lp[j].end(), p.more_logprobs[j].begin(),
                   p.more_logprobs[j].end());
    }
    tokens[j].insert(tokens[j].end(), p.more[j].begin(), p.more[j].end());
    draws[j] = p.draws[j];
    if (!p.more[j].empty())
      b.last_token = std::chrono::steady_clock::now();
  }
  auto& rs = b.replica.recoveries;
  for (auto& r : p.recoveries)
    if (rs.size() < max_replicated_recoveries)
      rs.push_back(std::move(r));
  return caf::ok_atom::value;
}

/// The node that coordinated the job `key` this node backs up is gone:
/// the job goes on here, placed on the survivors, from its replicated
/// tokens. Its clients re-attach by its name or key.
caf::error take_over(self_ptr self, const std::string& key,
                     const std::string& why,
                     std::optional<job_handoff> handoff) {
  auto& st = self->state;
  auto it = st.backups.find(key);
  if (it == st.backups.end())
    return fail(exo_errc::invalid_argument,
                "no job " + key + " is backed up on " + st.cfg.node);
  if (handoff && it->second.path.empty()) // its origin keeps it a while
    return fail(exo_errc::failed_state,
                "the model of job " + key + " has not arrived on "
                  + st.cfg.node + " yet");
  auto b = std::move(it->second);
  st.backups.erase(it);
  auto& node = st.cfg.node;
  if (b.path.empty()) {
    exo::text::line(std::cerr) << "exo-node " << node << ": cannot take job " << key
              << " over: its model had not arrived here yet" << std::endl;
    for (auto& a : b.attached)
      a.deliver(fail(exo_errc::failed_state,
                     "job " + key + " is lost: " + why
                       + ", and its backup " + node
                       + " had not received the model yet"));
    fail_followers(b.followers, "job " + key + " is lost: " + why
                                  + ", and its backup " + node
                                  + " had not received the model yet");
    return caf::none;
  }
  takeover from;
  // A job taken over before keeps its first key (attach and the nodes
  // that held it before know it by that); its origin asks by `key`.
  // (A line of copies this node does not believe is left out: the job is
  // the origin's then.)
  from.lineage = workload::extend_lineage(
    lineage_believed(st, b.replica.lineage) ? b.replica.lineage
                                            : std::vector<std::string>{},
    key);
  from.key = from.lineage.front();
  from.taken_from = key;
  from.sha = b.replica.model_sha256;
  from.size = b.replica.model_size;
  from.why = why;
  from.since = std::chrono::steady_clock::now();
  if (handoff) { // its tokens and losses as they were when it paused
    from.generated = std::move(handoff->tokens);
    from.generated_draws = std::move(handoff->draws);
    from.generated_logprobs = std::move(handoff->logprobs);
    from.recoveries = std::move(handoff->recoveries);
    from.last_token = from.since
                      - std::chrono::microseconds{handoff->paused_us};
    if (!handoff->unfinished.empty()) { // a move the handoff followed
      auto& u = handoff->unfinished.front();
      from.why = u.reason + "; then " + why;
      from.moved_bytes = u.moved_bytes;
      from.since -= std::chrono::microseconds{
        std::min<std::uint64_t>(handoff->unfinished_us, 3'600'000'000ULL)};
    }
    from.handoff = std::move(handoff);
  } else {
    std::uint64_t have = 0;
    for (auto& t : b.replica.tokens)
      have += t.size();
    exo::text::line(std::cout)
      << "exo-node " << node << ": taking job " << key << " over (" << why
      << "): " << have << " tokens replicated" << std::endl;
    from.generated = std::move(b.replica.tokens);
    from.generated_draws = std::move(b.replica.draws);
    from.generated_logprobs = std::move(b.replica.logprobs);
    from.recoveries = std::move(b.replica.recoveries);
    from.last_token = b.last_token;
  }
  from.attached = std::move(b.attached);
  from.followers = std::move(b.followers);
  auto req = std::move(b.replica.request);
  req.model = b.path;
  // The draft from this node's cache when it came (speculation changes
  // no token: without it the job goes on all the same). A job handed over
  // gets a fresh draft shard here (its draft ran on the node that left):
  // the draft reads the context again, the model's stages nothing.
  req.draft = b.draft_path;
  job_sink sink;
  // Named by its first key from here on (attach and the console know it
  // by that), as the copies before this one were.
  sink.placed = [node, key = from.key](const job_placed& e) {
    exo::text::line(std::cout) << "exo-node " << node << ": job " << key << " placed:\n"
              << e.text << std::flush;
  };
  sink.done = [node, key = from.key](caf::expected<job_report> r) {
    exo::text::line(std::cout) << "exo-node " << node << ": job " << key << " (taken over) "
              << (r ? (r->cancelled ? "cancelled" : "finished")
                    : "failed: " + error_message(r.error()))
              << std::endl;
  };
  if (auto err = start_run(self, std::move(req), std::move(sink),
                           std::move(from))) {
    exo::text::line(std::cerr) << "exo-node " << node << ": cannot take job " << key
              << " over: " << error_message(err) << std::endl;
    return err;
  }
  return caf::none;
}

/// A job this node backs up, handed over by its coordinator as it stops
/// (handoff_atom): checked (a peer sent it: sizes, layer ranges, alive
/// nodes other than the origin), then run here on the same stages; the
/// answer is this coordinator, which the stages follow from then on.
caf::result<caf::actor> on_handoff(self_ptr self, job_handoff& h) {
  auto& st = self->state;
  auto bad = [](std::string what) {
    return fail(exo_errc::invalid_argument, "handoff: " + what);
  };
  const auto key = h.origin + ":" + std::to_string(h.job);
  auto it = st.backups.find(key);
  if (h.origin.empty() || h.origin == st.cfg.node || it == st.backups.end())
    return bad("no job " + key + " is backed up on " + st.cfg.node);
  if (auto why = handoff_problem(h, it->second.replica.request, st.cfg.node,
                                 st.alive);
      !why.empty())
    return bad(why);
  h.paused_us = std::min<std::uint64_t>(h.paused_us, 3'600'000'000ULL);
  auto why = "coordinator " + h.origin
             + " stopped: the job was handed over with its stages and KV "
               "caches";
  if (auto err = take_over(self, key, why, std::move(h)))
    return err;
  return caf::actor_cast<caf::actor>(self);
}

/// Finds job `key` here — a run of this node (by NODE:ID, its first
/// coordinator's key or its run --id) or a job this node backs up — and
/// attaches `rp` to its end. False when this node has no such job.
bool attach_here(self_ptr self, const std::string& key,
                 caf::typed_response_promise<console_reply>& rp) {
  auto& st = self->state;
  for (auto& [id, rj] : st.running)
    if (key == rj.key || (!rj.name.empty() && key == rj.name)
        || key == st.cfg.node + ":" + std::to_string(id))
      if (auto run = rj.run.lock(); run && !run->ended) {
        run->attached.push_back(rp);
        return true;
      }
  for (auto& w : st.starting) // not running yet (a job being taken over)
    if (auto run = w.lock(); run && !run->ended && !run->key.empty()
                             && (key == run->key
                                 || (!run->job.request.name.empty()
                                     && key == run->job.request.name))) {
      run->attached.push_back(rp);
      return true;
    }
  for (auto& [k, b] : st.backups)
    if (key == k
        || (!b.replica.request.name.empty() && key == b.replica.request.name)) {
      b.attached.push_back(rp);
      return true;
    }
  for (auto it = st.ended.rbegin(); it != st.ended.rend(); ++it)
    if (key == it->key || (!it->name.empty() && key == it->name)
        || (!it->here.empty() && key == it->here)) {
      deliver(rp, it->reply);
      return true;
    }
  return false;
}

/// Console `attach KEY`: waits for job KEY (its run --id, or NODE:ID as
/// `jobs` shows it) wherever it runs — here, or on the node that runs or
/// backs it up, asked through the gate — and answers as its `run` would
/// have. A client whose node died while it waited for a `run` re-attaches
/// this way through any other node.
caf::result<console_reply> console_attach(self_ptr self,
                                          const std::string& arg) {
  auto& st = self->state;
  auto parsed = parse_args("attach", arg, "attach JOB: its --id or NODE:ID");
  if (!parsed)
    return std::move(parsed.error());
  auto& p = *parsed;
  auto key = p.args[0];
  auto rp = self->make_response_promise<console_reply>();
  if (attach_here(self, key, rp))
    return rp;
  std::vector<std::string> others(st.alive.begin(), st.alive.end());
  if (!st.cfg.gate || others.empty()) {
    rp.deliver(fail(exo_errc::invalid_argument,
                    "attach: no job " + key + " on " + st.cfg.node));
    return rp;
  }
  struct asking {
    std::size_t left = 0;
    bool answered = false;
  };
  auto a = std::make_shared<asking>();
  a->left = others.size();
  auto names = st.cfg.node;
  for (auto& n : others)
    names += ", " + n;
  for (auto& n : others)
    self
      ->request(st.cfg.gate, std::chrono::seconds(24 * 3600),
                service_atom::value, n,
                std::string{"jobs"},
                caf::make_message(attach_atom::value, key))
      .then(
        [a, rp](console_reply& r) mutable {
          if (!a->answered) {
            a->answered = true;
            rp.deliver(std::move(r));
          }
        },
        [self, a, rp, key, names](caf::error& err) mutable {
          auto why = render(self, err);
          if (a->answered)
            return;
          // A node that had the job and says how it ended (failed_state)
          // answers for it; "no job" or an unreachable node is a miss, and
          // so is a node whose copy ended because its backup took the job
          // over (frozen, declared dead, back): the backup answers.
          if (err.category() == exo_error_category()
              && err.code()
                   == static_cast<std::uint8_t>(exo_errc::failed_state)
              && !taken_over(err)) {
            a->answered = true;
            rp.deliver(fail(exo_errc::failed_state, "attach: " + why));
            return;
          }
          if (--a->left == 0)
            rp.deliver(fail(exo_errc::invalid_argument,
                            "attach: no job " + key + " on " + names));
        });
  return rp;
}


// -- following a job as a stream (the gateway's resumed completions) ----------

using refollow_atom = caf::atom_constant<caf::atom("refollow")>;

/// How long a follow looks for its job (a node just died: its backup takes
/// the job over within the failure timeout) and how often it asks again.
constexpr auto follow_search = 15s;
constexpr auto follow_retry = 500ms;

/// Whether `key` names a job with this name, key or NODE:ID.
bool names_job(const std::string& key, const std::string& job_key,
               const std::string& name) {
  return key == job_key || (!name.empty() && key == name);
}

/// Follows job `key` if this node runs it, is taking it over, backs it up
/// while its coordinator is gone, or ended it lately: the listener gets
/// its tokens, `rp` its report. Returns false when this node has no such
/// job; an error (a prompt that is not the job's) goes to `rp`.
bool follow_here(self_ptr self, const std::string& key,
                 const std::string& prompt, const caf::actor& listener,
                 caf::typed_response_promise<job_report>& rp) {
  auto& st = self->state;
  auto other_prompt = [&](const std::string& p) {
    if (p == prompt)
      return false;
    rp.deliver(fail(exo_errc::invalid_argument,
                    "job " + key + " was started with another prompt: a "
                    "client resumes only its own request"));
    return true;
  };
  for (auto& [id, rj] : st.running)
    if (names_job(key, rj.key, rj.name)
        || key == st.cfg.node + ":" + std::to_string(id))
      if (auto run = rj.run.lock(); run && !run->ended && run->log) {
        if (other_prompt(prompt_identity(run->job.request)))
          return true;
        self->send(listener, job_started{id});
        {
          // Under the log's lock: no token is sent between the replay and
          // the listener's first live one.
          std::lock_guard<std::mutex> guard{run->log->mx};
          replay(*run->log, *run->job.tokenizer, id, listener);
          run->log->listeners.push_back(listener);
        }
        run->followers.push_back({listener, rp});
        return true;
      }
  for (auto& w : st.starting) // being taken over: replayed when it runs
    if (auto run = w.lock(); run && !run->ended && !run->key.empty()
                             && names_job(key, run->key,
                                          run->job.request.name)) {
      if (other_prompt(prompt_identity(run->job.request)))
        return true;
      run->followers.push_back({listener, rp});
      return true;
    }
  // A backup follows only for a coordinator that is gone (it takes the
  // job over); while that one lives, it answers.
  for (auto& [k, b] : st.backups)
    if (names_job(key, k, b.replica.request.name)
        && !st.alive.count(b.replica.origin)) {
      if (other_prompt(prompt_identity(b.replica.request)))
        return true;
      b.followers.push_back({listener, rp});
      return true;
    }
  for (auto it = st.ended.rbegin(); it != st.ended.rend(); ++it)
    if (names_job(key, it->key, it->name)
        || (!it->here.empty() && key == it->here)) {
      if (!it->stream) {
        rp.deliver(fail(exo_errc::failed_state,
                        "job " + key + " ended and its tokens are not kept "
                        "(more than " + std::to_string(max_replayed_tokens)
                        + ")"));
        return true;
      }
      if (other_prompt(it->stream->prompt))
        return true;
      auto& report = it->stream->report;
      if (report && report->cancelled) {
        // Its text stops where it was cancelled: not an answer to resume.
        rp.deliver(fail(exo_errc::failed_state,
                        "job " + key + " was cancelled before it ended (its "
                        "client left, or someone cancelled it)"));
        return true;
      }
      if (report)
        self->send(listener, job_started{report->job});
      for (auto& e : it->stream->scores)
        caf::anon_send(listener, e);
      for (auto& t : it->stream->tokens)
        caf::anon_send(listener, t);
      deliver_report(rp, report);
      return true;
    }
  return false;
}

/// Asks every other alive node for follow `n` (they do not forward); when
/// all say no, asks again after follow_retry, here first, until its
/// deadline. A node alone answers at once; a seeded one that met no peer
/// yet looks again after follow_retry until it has met one.
void ask_follow(self_ptr self, std::uint64_t n) {
  auto& st = self->state;
  auto it = st.follows.find(n);
  if (it == st.follows.end())
    return;
  auto& f = it->second;
  auto now = std::chrono::steady_clock::now();
  if (follow_here(self, f.key, f.prompt, f.listener, f.rp)) {
    st.follows.erase(it);
    return;
  }
  // Alone: no other member alive, and none to wait for (a node with seeds
  // that met no one yet may be joining them).
  const bool alone = st.alive.empty()
                     && (!st.cfg.seeded || st.met_peer
                         || now >= st.started + follow_search);
  if (alone || now >= f.deadline) {
    f.rp.deliver(fail(exo_errc::unknown_handle,
                      "no node has job " + f.key
                        + (f.misses.empty() ? std::string{}
                                            : " (" + f.misses + ")")));
    st.follows.erase(it);
    return;
  }
  if (st.alive.empty()) { // not met its seeds yet: look again shortly
    self->delayed_send(self, follow_retry, refollow_atom::value, n);
    return;
  }
  ++f.round;
  f.asked = st.alive;
  f.misses.clear();
  auto round = f.round;
  for (auto& node : st.alive)
    self
      ->request(st.cfg.gate, std::chrono::seconds(24 * 3600),
                service_atom::value, node, std::string{"jobs"},
                caf::make_message(attach_atom::value, f.key, f.prompt,
                                  f.listener, false))
      .then(
        [self, n, round](job_report& r) {
          auto it = self->state.follows.find(n);
          if (it == self->state.follows.end() || it->second.round != round)
            return;
          it->second.rp.deliver(std::move(r));
          self->state.follows.erase(it);
        },
        [self, n, round, node](caf::error& err) {
          follow_missed(self, n, round, node, err);
        });
}

/// Node `node` said no to follow `n` (or died while it streamed): a final
/// error (the job failed, the prompt is not its) ends the follow; when no
/// node is left to answer, it is asked again.
void follow_missed(self_ptr self, std::uint64_t n, std::uint32_t round,
                   const std::string& node, const caf::error& err) {
  auto& st = self->state;
  auto it = st.follows.find(n);
  if (it == st.follows.end() || it->second.round != round
      || !it->second.asked.erase(node))
    return;
  auto& f = it->second;
  auto why = err ? render(self, err) : node + " is gone";
  if (err && err.category() == exo_error_category() && !taken_over(err)
      && (err.code() == static_cast<std::uint8_t>(exo_errc::failed_state)
          || why.find("another prompt") != std::string::npos)) {
    f.rp.deliver(err);
    st.follows.erase(it);
    return;
  }
  f.misses += (f.misses.empty() ? "" : "; ") + node + ": " + why;
  if (f.asked.empty())
    self->delayed_send(self, follow_retry, refollow_atom::value, n);
}

/// (attach_atom, key, prompt, listener, forward): see messages/workload.hpp.
caf::result<job_report> follow(self_ptr self, const std::string& key,
                               const std::string& prompt,
                               const caf::actor& listener, bool forward) {
  auto& st = self->state;
  auto rp = self->make_response_promise<job_report>();
  if (!listener) {
    rp.deliver(fail(exo_errc::invalid_argument, "follow: no listener"));
    return rp;
  }
  if (follow_here(self, key, prompt, listener, rp))
    return rp;
  if (!forward || !st.cfg.gate) {
    rp.deliver(fail(exo_errc::unknown_handle,
                    "no job " + key + " on " + st.cfg.node));
    return rp;
  }
  auto n = ++st.next_follow;
  auto& f = st.follows[n];
  f.key = key;
  f.prompt = prompt;
  f.listener = listener;
  f.rp = rp;
  f.deadline = std::chrono::steady_clock::now() + follow_search;
  ask_follow(self, n);
  return rp;
}

caf::behavior coordinator_impl(self_ptr self, job_coordinator_config cfg) {
  self->state.cfg = std::move(cfg);
  self->state.numbers = workload::job_numbers{self->state.cfg.job_numbers_file};
  if (auto note = self->state.numbers.take_note(); !note.empty())
    exo::text::line(std::cerr) << "exo-node " << self->state.cfg.node << ": "
                               << note << std::endl;
  // An error that answers none of its requests (a reply to a send) is
  // said and dropped: by default it would end the actor, silently.
  self->set_error_handler([self](caf::error& err) {
    exo::text::line(std::cerr)
      << "exo-node " << self->state.cfg.node
      << ": the job coordinator dropped an error that answers nothing: "
      << render(self, err) << std::endl;
  });
  self->set_exception_handler(
    [](caf::scheduled_actor* me, std::exception_ptr& eptr) -> caf::error {
      auto* c = static_cast<self_ptr>(me);
      std::string what = "an unknown exception";
      try {
        std::rethrow_exception(eptr);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      exo::text::line(std::cerr)
        << "exo-node " << c->state.cfg.node
        << ": the job coordinator stops on an exception: " << what
        << std::endl;
      return caf::sec::runtime_error;
    });
  // Its jobs are linked to it (they go when it goes); one that fails does
  // not take it along — the job's own end says what happened.
  self->set_exit_handler([self](caf::exit_msg& m) {
    if (self->state.linked_jobs.erase(m.source) != 0
        || m.reason == caf::exit_reason::normal)
      return;
    if (m.reason != caf::exit_reason::user_shutdown) // not the node's stop
      exo::text::line(std::cerr)
        << "exo-node " << self->state.cfg.node
        << ": the job coordinator stops: "
        << self->system().render(m.reason) << std::endl;
    self->quit(m.reason);
  });
  if (self->state.cfg.gate)
    self
      ->request(self->state.cfg.gate, 10s, subscribe_atom::value,
                members_atom::value, caf::actor_cast<caf::actor>(self))
      .then(
        [self](member_view& v) {
          for (auto& m : v.members)
            if (m.status == member_status::alive
                && m.name != self->state.cfg.node) {
              self->state.alive.insert(m.name);
              self->state.met_peer = true;
            }
        },
            [self](caf::error& err) {
              exo::text::line(std::cerr) << "exo-node " << self->state.cfg.node
                        << ": the job coordinator gets no member events: "
                        << render(self, err) << std::endl;
            });
  return {
    [self](member_event& e) { on_member(self, e); },
    [self](replicate_atom, job_replica& r) -> caf::result<caf::ok_atom> {
      return on_replica(self, r);
    },
    [self](replicate_atom, job_progress& p) -> caf::result<caf::ok_atom> {
      return on_progress(self, p);
    },
    [self](drain_atom, std::string& node,
           bool own_runs) -> caf::result<console_reply> {
      // This node's graceful stop (own_runs false: its own runs are taken
      // over by their backups), or a program's drain.
      return drain_everywhere(self, node, own_runs);
    },
    [self](drain_atom, std::string& node) {
      // Another node's `drain NODE`: this node's runs move too.
      std::string keys;
      for (auto id : drain_here(self, node))
        keys += (keys.empty() ? "" : ", ") + self->state.cfg.node + ":"
                + std::to_string(id);
      return keys;
    },
    [self](handoff_atom) -> caf::result<console_reply> {
      // This node's graceful stop, from its runtime (a local sender).
      if (self->current_sender()
          && self->current_sender()->node() != self->node())
        return fail(exo_errc::invalid_argument,
                    "handoff: only this node hands its jobs over");
      return hand_off_all(self);
    },
    [self](handoff_atom, job_handoff& h) -> caf::result<caf::actor> {
      return on_handoff(self, h);
    },
    [self](thermal_atom, thermal_status& s) -> caf::result<caf::atom_value> {
      thermal_move(self, s);
      return caf::ok_atom::value;
    },
    [self](attach_atom, std::string& key, std::string& prompt,
           caf::actor& listener, bool forward) -> caf::result<job_report> {
      return follow(self, key, prompt, listener, forward);
    },
    [self](refollow_atom, std::uint64_t n) {
      if (self->current_sender() == self->ctrl()) // its own timer only
        ask_follow(self, n);
    },
    [self](attach_atom, std::string& key) -> caf::result<console_reply> {
      // From another node's `attach`: this node's own jobs only.
      auto rp = self->make_response_promise<console_reply>();
      if (!attach_here(self, key, rp))
        rp.deliver(fail(exo_errc::invalid_argument,
                        "no job " + key + " on " + self->state.cfg.node));
      return rp;
    },
    [self](tick_atom) {
      if (self->current_sender() == self->ctrl()) // its own timer only
        replicate_tick(self);
    },
    [self](tick_atom, std::uint32_t) {
      if (self->current_sender() == self->ctrl()) // its own timer only
        retry_waiting(self);
    },
    [self](recover_atom, std::uint64_t id, std::vector<std::uint32_t>& lost,
           std::string& why, bool device_only) -> caf::result<job_pipeline> {
      return recover_job(self, id, lost, std::move(why), device_only);
    },
    [self](inspect_atom) {
      auto& st = self->state;
      actor_snapshot s;
      s.name = "jobs";
      s.kind = "jobs";
      s.node = st.cfg.node;
      s.summary = std::to_string(st.running.size()) + " running, "
                  + std::to_string(st.waiting.size())
                  + " waiting for memory, " + std::to_string(st.jobs)
                  + " since start";
      s.fields = {{"running", std::to_string(st.running.size())},
                  {"waiting", std::to_string(st.waiting.size())},
                  {"jobs", std::to_string(st.jobs)}};
      return s;
    },
    [self](run_atom, job_request& req,
           caf::actor& listener) -> caf::result<job_report> {
      auto rp = self->make_response_promise<job_report>();
      auto who = listener.address();
      // The promise owns the request from here: errors go through it too.
      if (auto err = start_run(self, std::move(req),
                               listener_sink(std::move(listener), rp), {},
                               who))
        rp.deliver(std::move(err));
      return rp;
    },
    [self](cancel_atom, caf::actor& listener) {
      // A client that left before its run started (the gateway's bridge):
      // a run waiting for memory ends now instead of when it is placed.
      auto& st = self->state;
      auto it = std::find_if(st.waiting.begin(), st.waiting.end(),
                             [&](const run_ptr& r) {
                               return r->listener == listener.address();
                             });
      if (it == st.waiting.end())
        return;
      auto run = *it;
      st.waiting.erase(it);
      run->waiting = false;
      exo::text::line(std::cout)
        << "exo-node " << st.cfg.node
        << ": a job waiting for memory was withdrawn: its client left ("
        << st.waiting.size() << " waiting)" << std::endl;
      end_run(self, run, "cancelled while it waited for memory: its client "
                         "left");
    },
    [self](cancel_atom, std::uint64_t id) -> caf::result<bool> {
      auto rp = self->make_response_promise<bool>();
      cancel(self, id, [rp](bool stopping) mutable { rp.deliver(stopping); });
      return rp;
    },
    [self](cancel_atom, std::uint64_t id,
           std::uint32_t seq) -> caf::result<bool> {
      // One sequence of a job (a gateway choice whose stop string
      // matched): it stops, the others go on.
      auto it = self->state.running.find(id);
      if (it == self->state.running.end())
        return false;
      auto rp = self->make_response_promise<bool>();
      self->request(it->second.job, 10s, cancel_atom::value, seq)
        .then([rp](bool stopping) mutable { rp.deliver(stopping); },
              [rp](caf::error&) mutable { rp.deliver(false); });
      return rp;
    },
    [self](cancel_atom, std::uint64_t id, caf::actor& listener,
           std::uint32_t grace_ms) -> bool {
      // A streaming client whose connection dropped (the gateway's
      // bridge): the job runs on for the grace, so that the client can
      // resume it through any node, and is cancelled then unless a client
      // follows it again.
      auto& st = self->state;
      auto it = st.running.find(id);
      if (it == st.running.end() || !listener)
        return false;
      it->second.left.insert(listener.address());
      grace_ms = std::min(grace_ms, max_resume_grace_ms);
      self->delayed_send(self, std::chrono::milliseconds{grace_ms},
                         tick_atom::value, cancel_atom::value, id, grace_ms);
      return true;
    },
    [self](cancel_atom, std::string& key) -> bool {
      // A job handed over to this node by its origin ("ORIGIN:ID", the key
      // it has here) that a client cancelled there while the handoff was
      // under way: it stops here, or as soon as its job runs.
      auto& st = self->state;
      for (auto& [id, rj] : st.running)
        if (rj.key == key || rj.taken_from == key) {
          cancel_handed(self, id, key);
          return true;
        }
      for (auto& w : st.starting)
        if (auto run = w.lock(); run && !run->ended
                                 && (run->key == key || run->taken_from == key)) {
          run->cancel_on_start = true;
          return true;
        }
      return false;
    },
    [self](tick_atom, cancel_atom, std::uint64_t id, std::uint32_t grace_ms) {
      if (self->current_sender() != self->ctrl())
        return;
      auto& st = self->state;
      auto it = st.running.find(id);
      if (it == st.running.end() || it->second.cancel_requested
          || !every_client_left(it->second))
        return;
      exo::text::line(std::cout)
        << "exo-node " << st.cfg.node << ": job " << id
        << " cancelled: its client left " << grace_ms
        << " ms ago and none came back" << std::endl;
      cancel(self, id, [](bool) {});
    },
    [self](console_atom, std::string& cmd,
           std::string& arg) -> caf::result<console_reply> {
      if (cmd == "run")
        return console_run(self, arg);
      if (cmd == "jobs")
        return list_jobs(self);
      if (cmd == "cancel")
        return console_cancel(self, arg);
      if (cmd == "drain")
        return console_drain(self, arg);
      if (cmd == "attach")
        return console_attach(self, arg);
      return fail(exo_errc::invalid_argument,
                  "the jobs service has no command " + cmd);
    },
  };
}

} // namespace

caf::actor spawn_job_coordinator(caf::actor_system& sys,
                                 job_coordinator_config cfg) {
  if (!cfg.gate && !cfg.shard_host)
    throw std::invalid_argument(
      "a job coordinator without a gate needs this node's shard host");
  return sys.spawn<caf::detached>(coordinator_impl, std::move(cfg));
}

service spawn_jobs_service(const service_context& ctx) {
  job_coordinator_config cfg;
  cfg.node = ctx.cfg->node.name;
  cfg.node_actor = ctx.node;
  cfg.gate = ctx.gate;
  cfg.audit = ctx.audit;
  cfg.blobs = ctx.blobs;
  cfg.client_dirs = config::client_dirs(*ctx.cfg);
  cfg.backups = ctx.cfg->models.backup_jobs;
  cfg.admission_wait = ctx.cfg->models.admission_wait;
  cfg.failure_timeout = ctx.cfg->network.failure_timeout;
  cfg.seeded = !ctx.cfg->network.seeds.empty();
  cfg.job_numbers_file = ctx.cfg->node.state_dir + "/job-numbers";
  service s;
  s.name = "jobs";
  s.kind = "jobs";
  s.handle = spawn_job_coordinator(*ctx.sys, std::move(cfg));
  s.commands = {"run", "jobs", "cancel", "drain", "attach"};
  return s;
}

} // namespace exo::workload
