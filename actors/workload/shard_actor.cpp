#include "actors/workload/shard_actor.hpp"

#include "actors/attachables.hpp"
#include "actors/device/device_task.hpp"
#include "core/model/sampler.hpp"
#include "core/workload/prefix_cache.hpp"
#include "core/workload/step_batcher.hpp"
#include "messages/errors.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace exo::workload {

namespace {

using seq_key = std::pair<std::uint64_t, std::uint32_t>; ///< (job, seq)
using clock_type = std::chrono::steady_clock;

/// A buffer on a device that a sequence's activations are copied into.
struct inbox {
  handle_id buf = 0; ///< 0: none (the host path is used)
  std::uint64_t bytes = 0;
  caf::actor device; ///< the device actor the buffer is on
};

struct shard_slot;

/// A step that waits for its stage's next batch.
struct pending_step {
  std::weak_ptr<shard_slot> slot;
  stage_step s;
  std::vector<model::device_stage::segment> segs;
  caf::response_promise rp;
  caf::actor next;
  bool last = false;
  caf::actor shard;
  clock_type::time_point since; ///< when it reached the stage
};

/// A stage's figures for stage_figures_now(): written on the stage's
/// device thread (publish), read from any; owns nothing of the device, so
/// a reader never keeps a stage alive.
struct stage_gauges {
  stage_figures labels; ///< device, model, layers, kv type: set once
  std::atomic<std::uint64_t> jobs{0}, sequences{0}, kv_bytes{0}, kv_blocks{0},
    kv_blocks_used{0}, kv_blocks_shared{0}, forwards{0}, rows{0},
    merged_steps{0};
  /// How long steps waited for their batch: counts per bucket of
  /// batch_wait_bounds (not cumulative), and the sum in nanoseconds.
  std::array<std::atomic<std::uint64_t>, batch_wait_buckets> wait_counts{};
  std::atomic<std::uint64_t> wait_ns{0};

  /// Counts a step that waited from `since` to `now` (device thread).
  void count_wait(clock_type::time_point since, clock_type::time_point now) {
    const auto ns = std::max<std::int64_t>(
      0, std::chrono::duration_cast<std::chrono::nanoseconds>(now - since)
           .count());
    wait_counts[batch_wait_bucket(static_cast<double>(ns) * 1e-9)]
      .fetch_add(1, std::memory_order_relaxed);
    wait_ns.fetch_add(static_cast<std::uint64_t>(ns),
                      std::memory_order_relaxed);
  }
};

/// The stage of a range of one model's layers on one device, shared by the
/// shards of every job that runs those layers there: the weights are read
/// or uploaded once, each shard's sequences have their own KV caches, and
/// the steps of different jobs that wait at the same time run as one
/// batched forward (continuous batching, core/workload/step_batcher.hpp).
/// Touched only inside device tasks, on the device actor's thread.
struct hosted_stage {
  /// Declared before the stage: the stage frees its buffers through it.
  std::shared_ptr<model::device_ops> ops;
  std::unique_ptr<model::device_stage> stage;
  std::string init_error = "the stage is not set up yet";
  /// Each shard's sequences: (shard slot id, job, seq).
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint32_t>,
           model::cache_id>
    caches;
  double upload_s = 0;
  std::uint64_t users = 0; ///< shards that use it
  std::uint64_t reuses = 0; ///< shards that found it made
  // Continuous batching: the steps waiting, by ticket.
  std::unique_ptr<step_batcher> batcher;
  std::map<std::uint64_t, pending_step> pending;
  std::uint64_t next_ticket = 1;
  bool timer_armed = false;
  std::uint64_t timer_gen = 0;
  std::uint64_t forwards = 0;     ///< batched forwards run
  std::uint64_t rows = 0;         ///< token rows they computed
  std::uint64_t merged_steps = 0; ///< steps that shared one with another job
  /// What stage_figures_now() reads (publish()).
  std::shared_ptr<stage_gauges> gauges = std::make_shared<stage_gauges>();
  /// The prefix cache (messages/workload.hpp retain_atom): prompt rows
  /// kept after the jobs that read them, within a budget (the first
  /// shard's setting); the bookkeeping is plain logic, the rows are
  /// caches of the stage.
  workload::prefix_cache prefixes;
  /// The device keeps the stage after its last shard went (keep_alive):
  /// its ticket (device::task_context::keep), 0 when not kept.
  std::uint64_t keep_ticket = 0;

  /// Frees the caches of dropped prefix-cache entries.
  void drop_caches(const std::vector<model::cache_id>& ids) {
    if (stage)
      for (auto id : ids)
        (void) stage->drop_cache(id);
  }
  /// Drops every entry no job holds (a sequence's cache could not grow);
  /// whether any went.
  bool drop_unheld_prefixes() {
    auto ids = prefixes.drop_unheld();
    drop_caches(ids);
    return !ids.empty();
  }
  /// Its figures for stage_figures_now() (on the device's thread).
  void publish() {
    auto& g = *gauges;
    g.jobs = users;
    g.sequences = caches.size();
    g.forwards = forwards;
    g.rows = rows;
    g.merged_steps = merged_steps;
    if (!stage)
      return;
    g.kv_bytes = stage->cache_bytes();
    if (stage->paged()) {
      const auto kb = stage->kv_blocks();
      g.kv_blocks = kb.total;
      g.kv_blocks_used = kb.used;
      g.kv_blocks_shared = kb.shared;
    }
  }
};

/// What one shard keeps with its (shared) stage, on the device's thread.
struct shard_slot {
  std::uint64_t id = 0; ///< unique in the process
  std::shared_ptr<hosted_stage> h;
  /// How long its steps wait for the other jobs of the stage's last batch.
  std::chrono::microseconds batch_wait{2000};
  /// shard_setup::keep_alive.
  std::chrono::milliseconds keep_alive{0};
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;
  std::uint64_t device_handoffs = 0; ///< steps passed on by device copy
  std::uint64_t host_handoffs = 0;   ///< steps passed on in the message
  std::uint64_t pause_waits = 0;     ///< steps held while the device paused
  std::uint64_t forks = 0; ///< caches started as a copy of another's rows
  /// Caches started as a copy of a retained prompt prefix, and the
  /// positions they did not compute.
  std::uint64_t prefix_forks = 0;
  std::uint64_t prefix_positions = 0;
  double busy_s = 0;
};

/// The stages alive in this process, by (device actor, model, first,
/// last, KV cache type): a shard on the same device for the same layers of
/// the same (mapped) model with the same cache type shares the stage. Read
/// and written on device threads.
using stage_key = std::tuple<caf::actor_id, const void*, std::uint32_t,
                             std::uint32_t, backend::kv_type>;
std::mutex registry_mtx;
std::map<stage_key, std::weak_ptr<hosted_stage>> registry;
/// Every stage's figures (stage_figures_now), also under registry_mtx.
std::vector<std::weak_ptr<stage_gauges>> gauges_registry;
std::atomic<std::uint64_t> next_slot_id{1};
/// batching_totals(): every stage's, for the shard host's snapshot.
std::atomic<std::uint64_t> total_forwards{0};
std::atomic<std::uint64_t> total_merged_steps{0};

struct shard_state {
  shard_setup cfg;
  /// cfg.owner's address, read when the shard ends (demonitor_at_exit).
  std::shared_ptr<caf::actor_addr> owner_cell;
  caf::actor device; ///< cfg.device, dynamically typed: tasks are delegated
  std::shared_ptr<shard_slot> slot;
  /// Buffers on this shard's device that the previous stage (same node)
  /// copies each sequence's activations into.
  std::map<seq_key, inbox> inboxes;
  /// The next stage's inboxes (same node), asked for once per sequence;
  /// buf 0 where it refused.
  std::map<seq_key, inbox> next_inboxes;
  caf::actor next;
  static inline const char* name = "exo.shard";

  bool is_first() const {
    return cfg.first == 0;
  }
  bool is_last() const {
    return cfg.last == cfg.model->hparams().n_layer;
  }
  std::uint64_t row_bytes() const {
    return std::uint64_t{cfg.model->hparams().n_embd} * 4;
  }

  ~shard_state();
};

caf::error bad(std::string what) {
  return make_exo_error(exo_errc::invalid_argument, std::move(what));
}

caf::error device_failed(const backend::error& err) {
  auto e = err;
  e.message = "shard: " + e.message;
  return to_caf_error(e);
}

/// A device that is gone, or that has no room left for a sequence's KV
/// cache (it could not grow, or a new one could not be made), takes the
/// shard with it: whoever monitors the shard (its job) sees the stage go
/// with device_lost or out_of_memory as the reason, and re-places it
/// without the device (re-feeding its sequences: the same tokens). The
/// other jobs that share the stage go on.
void quit_if_lost(const caf::actor& shard, const caf::error& err) {
  if (err.category() == exo_error_category()
      && (err.code() == static_cast<std::uint8_t>(exo_errc::device_lost)
          || err.code()
               == static_cast<std::uint8_t>(exo_errc::out_of_memory)))
    caf::anon_send(shard, caf::exit_msg{caf::actor_addr{}, err});
}

/// Answers a computed step (last stage), or passes it to the next stage
/// with the job still waiting on the answer.
void pass_on(shard_slot& slot, stage_step& s, const caf::actor& next,
             bool last, caf::response_promise& rp) {
  if (last) {
    rp.deliver(std::move(s));
    return;
  }
  if (!next) {
    rp.deliver(make_exo_error(exo_errc::failed_state,
                              "shard: no next stage set"));
    return;
  }
  ++(s.on_device ? slot.device_handoffs : slot.host_handoffs);
  rp.delegate(next, forward_atom::value, std::move(s));
}

/// Counts a step that ran for `busy` seconds of its device.
void count_step(shard_slot& slot, const stage_step& s, double busy) {
  slot.busy_s += busy;
  ++slot.steps;
  slot.tokens += s.tokens.size();
}

void run_batch(hosted_stage& h, std::vector<pending_step> batch);

/// Runs every waiting step of the stage, in batches, and starts a new
/// round (the jobs that ran are the ones expected back).
void flush_all(hosted_stage& h) {
  if (!h.batcher)
    return;
  h.timer_armed = false;
  ++h.timer_gen; // a deadline already sent finds nothing to do
  while (!h.batcher->empty()) {
    std::vector<pending_step> batch;
    const auto now = clock_type::now();
    for (auto ticket : h.batcher->take()) {
      auto it = h.pending.find(ticket);
      if (it == h.pending.end())
        continue;
      h.gauges->count_wait(it->second.since, now);
      batch.push_back(std::move(it->second));
      h.pending.erase(it);
    }
    if (!batch.empty())
      run_batch(h, std::move(batch));
  }
  h.batcher->end_round();
}

/// Frees buffers of a device on its thread, and lets go of a shard's
/// place in its stage: its sequences' caches are dropped (after the steps
/// that wait, which run first) and the stage goes when its last shard
/// does, or the device keeps it for the shard's keep_alive (the next job
/// of these layers finds it in the registry). A task with no answer.
device_task free_task(std::vector<handle_id> bufs,
                      std::shared_ptr<shard_slot> slot = nullptr) {
  device_task t;
  t.run = [bufs = std::move(bufs), slot = std::move(slot)](
            device::task_context& ctx, caf::response_promise&) mutable {
    auto ops = ctx.ops();
    for (auto b : bufs)
      (void) ops->free(b);
    if (!slot || !slot->h)
      return;
    auto& h = *slot->h;
    flush_all(h);
    for (auto it = h.caches.begin(); it != h.caches.end();) {
      if (std::get<0>(it->first) != slot->id) {
        ++it;
        continue;
      }
      if (h.stage)
        (void) h.stage->drop_cache(it->second);
      it = h.caches.erase(it);
    }
    if (h.batcher)
      h.batcher->forget(slot->id);
    h.prefixes.let_go_slot(slot->id);
    if (--h.users == 0 && h.stage && slot->keep_alive.count() > 0)
      h.keep_ticket = ctx.keep(slot->h, h.stage->footprint(),
                               slot->keep_alive);
    h.publish();
    slot.reset();
  };
  return t;
}

shard_state::~shard_state() {
  if (!device)
    return;
  // The shard's place in the stage is given up on its device's thread (the
  // stage frees its buffers through the device's pool); if the device
  // actor is gone, wherever the message is dropped (the pool has released
  // everything by then).
  std::vector<handle_id> bufs;
  for (auto& kv : inboxes)
    bufs.push_back(kv.second.buf);
  caf::anon_send(device, task_atom::value,
                 free_task(std::move(bufs), std::move(slot)));
}

using self_ptr = caf::stateful_actor<shard_state>*;

/// What is wrong with a step's parts ("" when nothing): distinct
/// sequences, at least one token each, adding up to its tokens, the first
/// one (seq, pos), at most `most` of them.
std::string check_parts(const stage_step& s, std::uint32_t most) {
  if (s.parts.empty())
    return {};
  if (s.parts.size() > most)
    return "a step carries at most " + std::to_string(most)
           + " sequences, not " + std::to_string(s.parts.size());
  if (s.parts.front().seq != s.seq || s.parts.front().pos != s.pos)
    return "a batched step's first part must be its own sequence and "
           "position";
  std::uint64_t rows = 0;
  for (std::size_t i = 0; i < s.parts.size(); ++i) {
    auto& p = s.parts[i];
    if (p.n == 0)
      return "sequence " + std::to_string(p.seq) + " has no tokens in the "
             "step";
    for (std::size_t j = 0; j < i; ++j)
      if (s.parts[j].seq == p.seq)
        return "sequence " + std::to_string(p.seq)
               + " appears twice in one step";
    rows += p.n;
  }
  if (rows != s.tokens.size())
    return "the parts of a step hold " + std::to_string(rows)
           + " tokens, the step " + std::to_string(s.tokens.size());
  return {};
}

/// The sequences of a step in row order (one, (seq, pos) with every
/// token, when it lists none).
std::vector<step_part> parts_of(const stage_step& s) {
  if (!s.parts.empty())
    return s.parts;
  return {step_part{s.seq, s.pos, static_cast<std::uint32_t>(s.tokens.size())}};
}

/// The cache of (job, seq) in a shard's slot of stage h (which has its
/// stage), made for a sequence that starts here (`pos` 0: its first step,
/// or the first of its rows a planned move brings).
caf::error cache_of(hosted_stage& h, const shard_slot& slot,
                    std::uint64_t job, std::uint32_t seq, std::uint32_t pos,
                    std::uint32_t n_ctx, model::cache_id& id) {
  auto key = std::make_tuple(slot.id, job, seq);
  auto it = h.caches.find(key);
  if (it == h.caches.end()) {
    if (pos != 0)
      return bad("shard: sequence " + std::to_string(seq)
                 + " starts at position " + std::to_string(pos));
    if (h.caches.size() >= max_sequences_per_shard)
      return make_exo_error(exo_errc::out_of_memory,
                            "shard: too many sequences");
    auto c = h.stage->new_cache(n_ctx);
    if (!c)
      return device_failed(c.err());
    it = h.caches.emplace(key, *c).first;
  }
  id = it->second;
  return {};
}

/// The cache of (job, seq) for a part that forks it from sequence `from`
/// (step_part::fork): a copy of from's first `pos` positions, made here;
/// the cache itself when the sequence has one already.
caf::error fork_of(hosted_stage& h, shard_slot& slot, std::uint64_t job,
                   const step_part& p, std::uint32_t n_ctx,
                   model::cache_id& id) {
  auto key = std::make_tuple(slot.id, job, p.seq);
  if (auto it = h.caches.find(key); it != h.caches.end()) {
    id = it->second;
    return {};
  }
  if (p.prefix != 0) { // a kept prompt prefix the job claimed
    auto kept = h.prefixes.claimed(p.prefix, p.pos, {slot.id, job});
    if (!kept)
      return bad("shard: sequence " + std::to_string(p.seq)
                 + " starts from a prompt prefix of "
                 + std::to_string(p.pos)
                 + " positions that its job does not hold here");
    if (h.caches.size() >= max_sequences_per_shard)
      return make_exo_error(exo_errc::out_of_memory,
                            "shard: too many sequences");
    auto c = h.stage->fork_cache(*kept, p.pos, n_ctx);
    // Entries no job holds give way (this one is held).
    if (!c && c.err().code == backend::errc::out_of_memory
        && h.drop_unheld_prefixes())
      c = h.stage->fork_cache(*kept, p.pos, n_ctx);
    if (!c)
      return device_failed(c.err());
    id = h.caches.emplace(key, *c).first->second;
    ++slot.prefix_forks;
    slot.prefix_positions += p.pos;
    return {};
  }
  auto src = h.caches.find(std::make_tuple(slot.id, job, p.from));
  if (p.from == p.seq || src == h.caches.end())
    return bad("shard: sequence " + std::to_string(p.seq)
               + " forks from sequence " + std::to_string(p.from)
               + ", which has no cache here");
  if (h.caches.size() >= max_sequences_per_shard)
    return make_exo_error(exo_errc::out_of_memory,
                          "shard: too many sequences");
  auto c = h.stage->fork_cache(src->second, p.pos);
  if (!c)
    return device_failed(c.err());
  id = h.caches.emplace(key, *c).first->second;
  ++slot.forks;
  return {};
}

/// Checks a step against its sequences' caches (made on a sequence's
/// first step) and forgets what a rewinding step writes over: the
/// segments of its forward.
caf::error prepare(hosted_stage& h, shard_slot& slot, std::uint32_t n_ctx,
                   const stage_step& s,
                   std::vector<model::device_stage::segment>& segs) {
  if (!h.stage)
    return make_exo_error(exo_errc::failed_state, "shard: " + h.init_error);
  auto& stage = *h.stage;
  if (stage.is_first()) // checked here: a batch embeds several jobs' tokens
    for (auto tok : s.tokens)
      if (tok < 0
          || static_cast<std::uint32_t>(tok)
               >= stage.model().hparams().n_vocab)
        return bad("shard: token id " + std::to_string(tok)
                   + " is outside the vocabulary of "
                   + std::to_string(stage.model().hparams().n_vocab));
  const auto parts = parts_of(s);
  segs.clear();
  segs.reserve(parts.size());
  for (auto& p : parts) {
    model::cache_id id = 0;
    if (auto err = p.fork ? fork_of(h, slot, s.job, p, n_ctx, id)
                          : cache_of(h, slot, s.job, p.seq, p.pos, n_ctx, id))
      return err;
    auto past = stage.n_past(id);
    auto cap = stage.capacity(id);
    if (!past || !cap)
      return device_failed(!past ? past.err() : cap.err());
    if (p.pos != *past && !(s.rewind && p.pos < *past))
      return bad("shard: sequence " + std::to_string(p.seq)
                 + ": step at position " + std::to_string(p.pos)
                 + ", cache holds " + std::to_string(*past));
    if (std::uint64_t{p.pos} + p.n > *cap)
      return bad("shard: sequence " + std::to_string(p.seq) + ": context of "
                 + std::to_string(*cap) + " tokens exceeded");
    segs.push_back({id, p.pos, p.n, s.apart});
  }
  if (s.rewind) // checked: forget what the step writes over
    for (auto& sg : segs)
      if (auto past = stage.n_past(sg.cache); past && *past > sg.pos)
        (void) stage.truncate(sg.cache, sg.pos);
  return caf::none;
}

/// Rows of logits the last stage returns for these segments.
std::size_t logit_rows(const std::vector<model::device_stage::segment>& segs) {
  std::size_t rows = 0;
  for (auto& sg : segs)
    rows += sg.apart ? sg.n : 1;
  return rows;
}

/// The last stage's answer to step s from its `rows` rows of logits
/// (n_vocab floats each, at `logits`): whole rows in x, or each reduced
/// to its s.top_k candidates (stage_step::top_k), with each row's
/// log-sum-exp when s.logprobs asks for it.
void answer_logits(stage_step& s, const float* logits, std::size_t rows,
                   std::size_t n_vocab) {
  s.lse.clear();
  if (s.top_k == 0) {
    s.x.assign(logits, logits + rows * n_vocab);
    s.top_ids.clear();
    return;
  }
  const std::size_t k = s.top_k;
  s.x.resize(rows * k);
  s.top_ids.resize(rows * k);
  if (s.logprobs)
    s.lse.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = logits + r * n_vocab;
    auto* ids = s.top_ids.data() + r * k;
    auto* values = s.x.data() + r * k;
    if (auto bad = model::sampler::first_non_finite(row, n_vocab);
        bad != n_vocab) { // the job names it
      std::fill(ids, ids + k, static_cast<std::int32_t>(bad));
      std::fill(values, values + k, row[bad]);
      if (s.logprobs)
        s.lse[r] = row[bad];
      continue;
    }
    model::sampler::top_candidates(row, n_vocab, k, ids, values);
    if (s.logprobs)
      s.lse[r] = model::log_sum_exp(row, n_vocab);
  }
}

/// What is wrong with the scores a step asks for (a peer is not trusted
/// with sizes or token ids), "" when nothing.
std::string scores_problem(const step_scores& sc, std::size_t n,
                           std::size_t n_vocab) {
  if (!sc.rows.empty())
    return "a step carries no scores on its way in";
  if (sc.ids.empty())
    return sc.top == 0 ? std::string{}
                       : std::string{"a step asks for scores' best tokens "
                                     "without ids to score"};
  if (sc.ids.size() != n)
    return "a step asks for " + std::to_string(sc.ids.size())
           + " scores of its " + std::to_string(n) + " rows";
  if (sc.top > model::max_top_logprobs)
    return "a step asks for at most "
           + std::to_string(model::max_top_logprobs)
           + " best tokens a scored row, not " + std::to_string(sc.top);
  for (auto id : sc.ids)
    if (id < -1 || (id >= 0 && static_cast<std::size_t>(id) >= n_vocab))
      return "a step asks for the score of token " + std::to_string(id)
             + ", outside the vocabulary of " + std::to_string(n_vocab);
  return {};
}

/// The last stage, right after the forward that computed step s's rows
/// (from row `row0` of it): each row with a score id gets its
/// log-probabilities (stage_step::scores), from its logits computed again
/// in pieces of at most max_logit_rows rows (device_stage::row_logits).
caf::error score_rows(model::device_stage& stage, stage_step& s,
                      std::size_t row0) {
  auto& sc = s.scores;
  sc.rows.clear();
  if (sc.ids.empty())
    return caf::none;
  const std::size_t v = stage.model().hparams().n_vocab;
  const std::size_t piece = std::max<std::size_t>(
    1, stage.options().max_logit_rows);
  std::vector<float> logits;
  const std::size_t n = sc.ids.size();
  for (std::size_t r = 0; r < n;) {
    if (sc.ids[r] < 0) {
      ++r;
      continue;
    }
    // A run of rows to score, at most `piece` of them.
    std::size_t e = r;
    while (e < n && e - r < piece && sc.ids[e] >= 0)
      ++e;
    logits.resize((e - r) * v);
    if (auto f = stage.row_logits(row0 + r, e - r, logits.data()); !f)
      return device_failed(f.err());
    for (std::size_t i = r; i < e; ++i) {
      const float* row = logits.data() + (i - r) * v;
      if (auto bad_at = model::sampler::first_non_finite(row, v);
          bad_at != v)
        return bad("shard: the model gave a non-finite logit (token "
                   + std::to_string(bad_at) + ") for row "
                   + std::to_string(i) + " of a scored step: its weights "
                   "hold NaN or infinity, or its activations overflow");
      sc.rows.push_back(model::logprobs_of(row, v, sc.ids[i], sc.top));
    }
    r = e;
  }
  return caf::none;
}

/// Runs one step's prepared segments on the device (inside a device
/// task); returns an error, or none with `s` updated (x: the activations
/// out, unless io.keep_out leaves them on the device; on the last stage
/// the logits of each sequence's last row).
caf::error compute(hosted_stage& h, const model::llama_model& m,
                   stage_step& s,
                   const std::vector<model::device_stage::segment>& segs,
                   const model::device_stage::device_io& io) {
  auto& hp = m.hparams();
  auto& stage = *h.stage;
  const std::size_t n = s.tokens.size();
  if (stage.is_first()) {
    s.x.resize(n * hp.n_embd);
    if (auto e = stage.embed(s.tokens.data(), n, s.x.data()); !e)
      return bad("shard: " + e.err().message);
  } else if (s.on_device && !io.keep_out && !stage.is_last()) {
    s.x.resize(n * hp.n_embd); // the activations out come to the host
  }
  float* x = s.x.empty() ? nullptr : s.x.data();
  ++h.forwards;
  ++total_forwards;
  h.rows += n;
  caf::error err;
  if (stage.is_last()) {
    const std::size_t rows = logit_rows(segs);
    std::vector<float> logits(rows * std::size_t{hp.n_vocab});
    if (auto f = stage.forward(segs, x, logits.data(), io); !f)
      err = device_failed(f.err());
    else
      err = score_rows(stage, s, 0);
    if (!err && s.top_k == 0)
      s.x = std::move(logits);
    else if (!err)
      answer_logits(s, logits.data(), rows, hp.n_vocab);
  } else if (auto f = stage.forward(segs, x, nullptr, io); !f) {
    err = device_failed(f.err());
  }
  h.publish();
  return err;
}

/// Runs waiting steps (of one or several jobs) as one forward: their rows
/// side by side, each sequence at its own position over its own cache, so
/// each gets what it gets alone; then each step goes on as it would
/// alone. A failure answers every step of the batch.
void run_batch(hosted_stage& h, std::vector<pending_step> batch) {
  auto& stage = *h.stage;
  // Each step's caches get their room first: a step whose cache cannot
  // grow fails alone (its shard goes, its job moves), the others run.
  for (auto it = batch.begin(); it != batch.end();) {
    caf::error err;
    for (auto& sg : it->segs) {
      auto r = stage.reserve(sg.cache, sg.pos + sg.n);
      // Kept prompt prefixes give way to a running sequence.
      if (!r && r.err().code == backend::errc::out_of_memory
          && h.drop_unheld_prefixes())
        r = stage.reserve(sg.cache, sg.pos + sg.n);
      if (!r) {
        err = device_failed(r.err());
        break;
      }
    }
    if (!err) {
      ++it;
      continue;
    }
    quit_if_lost(it->shard, err);
    it->rp.deliver(std::move(err));
    it = batch.erase(it);
  }
  if (batch.empty())
    return;
  auto t0 = clock_type::now();
  const auto& hp = stage.model().hparams();
  std::vector<model::device_stage::segment> segs;
  std::vector<std::int32_t> tokens;
  std::vector<float> x;
  std::size_t rows = 0;
  for (auto& p : batch) {
    segs.insert(segs.end(), p.segs.begin(), p.segs.end());
    if (stage.is_first())
      tokens.insert(tokens.end(), p.s.tokens.begin(), p.s.tokens.end());
    else
      x.insert(x.end(), p.s.x.begin(), p.s.x.end());
    rows += p.s.tokens.size();
  }
  caf::error err;
  std::vector<float> logits;
  if (stage.is_first()) {
    x.resize(rows * hp.n_embd);
    if (auto e = stage.embed(tokens.data(), rows, x.data()); !e)
      err = bad("shard: " + e.err().message);
  }
  if (!err) {
    ++h.forwards;
    ++total_forwards;
    h.rows += rows;
    if (stage.is_last())
      logits.resize(logit_rows(segs) * std::size_t{hp.n_vocab});
    auto f = stage.forward(segs, x.data(),
                           stage.is_last() ? logits.data() : nullptr);
    if (!f)
      err = device_failed(f.err());
  }
  const double busy =
    std::chrono::duration<double>(clock_type::now() - t0).count();
  std::set<std::uint64_t> slots;
  for (auto& p : batch)
    if (auto sl = p.slot.lock())
      slots.insert(sl->id);
  if (slots.size() > 1) {
    h.merged_steps += batch.size();
    total_merged_steps += batch.size();
  }
  h.publish();
  std::size_t row0 = 0, logit0 = 0;
  for (auto& p : batch) {
    const std::size_t n = p.s.tokens.size();
    auto slot = p.slot.lock();
    if (err || !slot) {
      auto e = err ? err
                   : make_exo_error(exo_errc::failed_state,
                                    "shard: the shard is gone");
      quit_if_lost(p.shard, e);
      p.rp.deliver(std::move(e));
      row0 += n;
      continue;
    }
    if (stage.is_last()) {
      const std::size_t r = logit_rows(p.segs);
      if (auto e = score_rows(stage, p.s, row0)) {
        quit_if_lost(p.shard, e);
        p.rp.deliver(std::move(e));
        row0 += n;
        logit0 += r;
        continue;
      }
      answer_logits(p.s, logits.data() + logit0 * hp.n_vocab, r, hp.n_vocab);
      logit0 += r;
    } else {
      p.s.x.assign(x.begin() + row0 * hp.n_embd,
                   x.begin() + (row0 + n) * hp.n_embd);
    }
    row0 += n;
    p.s.on_device = false;
    // Each step's share of the device's time, by its rows.
    count_step(*slot, p.s, busy * static_cast<double>(n)
                             / static_cast<double>(rows));
    pass_on(*slot, p.s, p.next, p.last, p.rp);
  }
}

/// Answers every waiting step with `err` (the device refused the
/// deadline's task: it failed or is gone).
void fail_pending(hosted_stage& h, const caf::error& err) {
  h.timer_armed = false;
  auto pending = std::move(h.pending);
  h.pending.clear();
  if (h.batcher)
    while (!h.batcher->empty())
      (void) h.batcher->take();
  for (auto& kv : pending) {
    quit_if_lost(kv.second.shard, err);
    kv.second.rp.deliver(err);
  }
}

/// Arms the deadline after which the waiting steps run without the jobs
/// that have not come back.
void arm_deadline(device::task_context& ctx,
                  const std::shared_ptr<hosted_stage>& hp,
                  std::chrono::microseconds wait) {
  if (hp->timer_armed)
    return;
  hp->timer_armed = true;
  const auto gen = ++hp->timer_gen;
  device_task t;
  t.kind = task_kind::compute; // held while the device is paused
  std::weak_ptr<hosted_stage> w = hp;
  t.run = [w, gen](device::task_context&, caf::response_promise&) {
    auto h = w.lock();
    if (!h || h->timer_gen != gen)
      return;
    flush_all(*h);
  };
  t.refused = [w](const caf::error& err) {
    if (auto h = w.lock())
      fail_pending(*h, err);
  };
  caf::delayed_anon_send(ctx.device(), wait, task_atom::value, std::move(t));
}

/// A step as a device task. Host in, host out (the first stage, or
/// activations in the message, going on in a message or as logits): it
/// waits for its stage's next batch with the other jobs' steps. On
/// device (activations in an inbox or out to the next stage's): it runs
/// alone, then hands the activations to the next stage (into its inbox by
/// a device copy when it has one on this node, else in the message) or
/// answers with the logits.
device_task step_task(self_ptr self, stage_step s,
                      model::device_stage::device_io io, inbox out) {
  auto& st = self->state;
  device_task t;
  t.kind = task_kind::compute;
  t.run = [slot = st.slot, model = st.cfg.model, n_ctx = st.cfg.n_ctx,
           s = std::move(s), io, out = std::move(out), next = st.next,
           last = st.is_last(),
           shard = caf::actor_cast<caf::actor>(self)](
            device::task_context& ctx, caf::response_promise& rp) mutable {
    auto t0 = clock_type::now();
    if (ctx.waited_for_resume())
      ++slot->pause_waits;
    if (!slot->h) {
      rp.deliver(make_exo_error(exo_errc::failed_state,
                                "shard: the stage was never set up"));
      return;
    }
    auto& h = *slot->h;
    std::vector<model::device_stage::segment> segs;
    if (auto err = prepare(h, *slot, n_ctx, s, segs)) {
      quit_if_lost(shard, err);
      rp.deliver(std::move(err));
      return;
    }
    if (io.in.buf == 0 && out.buf == 0 && h.batcher) {
      const auto ticket = h.next_ticket++;
      step_batcher::step b;
      b.ticket = ticket;
      b.job = slot->id;
      for (auto& p : parts_of(s))
        b.sequences.push_back(p.seq);
      b.tokens = static_cast<std::uint32_t>(s.tokens.size());
      b.logit_rows = static_cast<std::uint32_t>(logit_rows(segs));
      h.pending.emplace(ticket, pending_step{slot, std::move(s),
                                             std::move(segs), rp, next, last,
                                             shard, t0});
      // Only the first stage waits for the other jobs (their next steps
      // come from their samplers): a later stage that waited could wait
      // for a job whose step waits at the first stage for this one.
      if (h.batcher->add(std::move(b)) || !h.stage->is_first()
          || slot->batch_wait.count() <= 0)
        flush_all(h);
      else
        arm_deadline(ctx, slot->h, slot->batch_wait);
      return;
    }
    // Alone: what waits runs first (steps keep their order).
    flush_all(h);
    if (auto err = compute(h, *model, s, segs, io)) {
      quit_if_lost(shard, err);
      rp.deliver(std::move(err));
      return;
    }
    auto done = [&] {
      count_step(*slot, s,
                 std::chrono::duration<double>(clock_type::now() - t0)
                   .count());
    };
    s.on_device = false;
    if (out.buf == 0) {
      done();
      pass_on(*slot, s, next, last, rp);
      return;
    }
    // The activations stayed on this device: copy them into the next
    // stage's inbox, or send them in the message if that fails.
    const std::uint64_t bytes =
      s.tokens.size() * std::uint64_t{model->hparams().n_embd} * 4;
    auto act = h.stage->activations();
    if (out.device == ctx.device()) {
      if (ctx.copy(act.buf, act.offset, out.buf, 0, bytes)) {
        s.x.clear();
        s.on_device = true;
        done();
        pass_on(*slot, s, next, last, rp);
        return;
      }
    }
    s.x.resize(bytes / 4);
    if (auto r = ctx.ops()->read(act.buf, act.offset, s.x.data(), bytes); !r) {
      rp.deliver(device_failed(r.err()));
      return;
    }
    done();
    if (out.device == ctx.device()) { // the copy failed: the host path
      pass_on(*slot, s, next, last, rp);
      return;
    }
    // Another device of this node: one write into its inbox (a step's
    // activations fit one chunk), then the step goes on without them.
    chunk c;
    c.bytes.resize(bytes);
    std::memcpy(c.bytes.data(), s.x.data(), bytes);
    ctx.write_to_peer(
      out.device, out.buf, 0, std::move(c),
      [slot, s = std::move(s), next, rp](const caf::error& err) mutable {
        if (!err) {
          s.x.clear();
          s.on_device = true;
        }
        pass_on(*slot, s, next, false, rp);
      });
  };
  t.refused = [shard = caf::actor_cast<caf::actor>(self)](
                const caf::error& err) { quit_if_lost(shard, err); };
  return t;
}

/// Sends the step to the device as a task; the answer (or the next
/// stage's) goes to whoever asked.
caf::result<caf::message> dispatch(self_ptr self, stage_step s,
                                   model::device_stage::device_io io,
                                   inbox out, caf::response_promise rp) {
  auto& st = self->state;
  io.keep_out = out.buf != 0;
  rp.delegate(st.device, task_atom::value,
              step_task(self, std::move(s), io, std::move(out)));
  return rp;
}

/// Allocates (or finds) the inbox of a sequence on this shard's device.
caf::result<handle_id, caf::actor>
open_inbox(self_ptr self, std::uint64_t job, std::uint32_t seq,
           std::uint64_t bytes) {
  auto& st = self->state;
  auto sender = self->current_sender();
  if (!sender || sender->node() != self->node())
    return make_exo_error(exo_errc::access_denied,
                          "shard: inboxes are for stages of this node");
  const auto& hp = st.cfg.model->hparams();
  const std::uint64_t most = std::uint64_t{max_batch_tokens(hp.n_embd)}
                             * hp.n_embd * 4;
  if (st.is_first())
    return bad("shard: the first stage takes tokens, not activations");
  if (bytes == 0 || bytes > most || bytes % (std::uint64_t{hp.n_embd} * 4))
    return bad("shard: an inbox holds whole rows of at most "
               + std::to_string(most) + " bytes, not "
               + std::to_string(bytes));
  auto key = seq_key{job, seq};
  auto it = st.inboxes.find(key);
  if (it != st.inboxes.end() && it->second.bytes >= bytes)
    return caf::make_result(handle_id{it->second.buf}, it->second.device);
  if (it == st.inboxes.end() && st.inboxes.size() >= max_sequences_per_shard)
    return make_exo_error(exo_errc::out_of_memory,
                          "shard: too many sequences");
  auto rp = self->make_response_promise();
  self->request(st.cfg.device, std::chrono::minutes(5), allocate_atom::value,
                bytes)
    .then(
      [self, key, bytes, rp](handle_id h) mutable {
        auto& st = self->state;
        auto old = st.inboxes.find(key);
        if (old != st.inboxes.end())
          self->send(st.device, task_atom::value,
                     free_task({old->second.buf}));
        st.inboxes[key] = inbox{h, bytes, st.device};
        rp.deliver(h, st.device);
      },
      [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

/// Finds the stage of these layers on this device (another job's shard
/// made it) or creates it on the device's thread: its weights read in
/// place or uploaded there directly. A failure is kept and answered to
/// every step.
void set_up(self_ptr self) {
  auto& st = self->state;
  st.slot = std::make_shared<shard_slot>();
  st.slot->id = next_slot_id++;
  st.slot->batch_wait = st.cfg.batch_wait;
  st.slot->keep_alive = st.cfg.keep_alive;
  device_task t;
  t.run = [slot = st.slot, cfg = st.cfg](device::task_context& ctx,
                                         caf::response_promise&) {
    const stage_key key{ctx.device().id(), cfg.model.get(), cfg.first,
                        cfg.last, cfg.kv};
    {
      std::lock_guard<std::mutex> guard{registry_mtx};
      auto it = registry.find(key);
      if (it != registry.end()) {
        if (auto h = it->second.lock(); h && h->stage) {
          slot->h = std::move(h);
          if (slot->h->users++ == 0 && slot->h->keep_ticket != 0) {
            // Kept after its last job: in use again, no longer free room.
            ctx.let_go(slot->h->keep_ticket);
            slot->h->keep_ticket = 0;
          }
          ++slot->h->reuses;
          slot->h->publish();
          return;
        }
        registry.erase(it);
      }
    }
    auto h = std::make_shared<hosted_stage>();
    auto t0 = clock_type::now();
    h->ops = ctx.ops();
    // The options placement counts with (model::device_stage_memory).
    auto o = model::shard_stage_options(cfg.model->hparams());
    o.upload_chunk_bytes = max_chunk_bytes;
    o.kv = cfg.kv;
    auto stage = model::device_stage::create(cfg.model, cfg.first, cfg.last,
                                             *h->ops, o);
    if (stage) {
      h->stage = std::move(*stage);
      const auto& so = h->stage->options();
      h->batcher = std::make_unique<step_batcher>(
        so.max_tokens, h->stage->is_last() ? so.max_logit_rows : 0);
    } else {
      h->init_error = stage.err().to_string();
    }
    h->upload_s =
      std::chrono::duration<double>(clock_type::now() - t0).count();
    h->users = 1;
    h->prefixes = workload::prefix_cache{cfg.prefix_cache_bytes};
    slot->h = h;
    if (h->stage) {
      auto& l = h->gauges->labels;
      l.device = cfg.device_id;
      l.model = cfg.model_sha256.substr(0, 12);
      l.first = cfg.first;
      l.last = cfg.last;
      l.kv_type = backend::to_string(cfg.kv);
      l.kv_block_positions =
        h->stage->paged() ? h->stage->block_positions() : 0;
      h->publish();
      std::lock_guard<std::mutex> guard{registry_mtx};
      registry[key] = h;
      gauges_registry.push_back(h->gauges);
    }
  };
  // Tasks run in the order they are sent: every step comes after this.
  self->send(st.cfg.device, task_atom::value, std::move(t));
}

/// Frees the KV caches and inboxes of a job's sequences (all, or `seq`):
/// the caches on the device's thread, after the steps sent before.
caf::result<caf::message> release(self_ptr self, std::uint64_t job,
                                  std::optional<std::uint32_t> seq) {
  auto& st = self->state;
  auto mine = [&](const seq_key& k) {
    return k.first == job && (!seq || k.second == *seq);
  };
  std::vector<handle_id> bufs;
  for (auto it = st.inboxes.begin(); it != st.inboxes.end();) {
    if (!mine(it->first)) {
      ++it;
      continue;
    }
    bufs.push_back(it->second.buf);
    it = st.inboxes.erase(it);
  }
  for (auto it = st.next_inboxes.begin(); it != st.next_inboxes.end();)
    it = mine(it->first) ? st.next_inboxes.erase(it) : ++it;
  device_task t;
  t.run = [slot = st.slot, job, seq, bufs = std::move(bufs)](
            device::task_context& ctx, caf::response_promise& rp) {
    auto ops = ctx.ops();
    for (auto b : bufs)
      (void) ops->free(b);
    if (!slot->h) {
      rp.deliver(caf::ok_atom::value);
      return;
    }
    auto& h = *slot->h;
    flush_all(h); // the steps sent before run first
    for (auto it = h.caches.begin(); it != h.caches.end();) {
      auto& [id, j, q] = it->first;
      if (id != slot->id || j != job || (seq && q != *seq)) {
        ++it;
        continue;
      }
      if (h.stage)
        (void) h.stage->drop_cache(it->second);
      it = h.caches.erase(it);
    }
    if (!seq && h.batcher) // the job is done here: not waited for
      h.batcher->forget(slot->id);
    if (!seq)
      h.prefixes.let_go({slot->id, job});
    h.publish();
    rp.deliver(caf::ok_atom::value);
  };
  return self->delegate(st.device, task_atom::value, std::move(t));
}

/// Why a shard's slot has no stage to compute on, or none.
caf::error no_stage(const shard_slot& slot) {
  if (slot.h && slot.h->stage)
    return {};
  return make_exo_error(exo_errc::failed_state,
                        "shard: "
                          + (slot.h ? slot.h->init_error
                                    : std::string{"the stage was never set "
                                                  "up"}));
}

/// The cache of (job, seq) in a shard's slot, or an error naming what is
/// missing (on the device's thread).
caf::error find_kv(shard_slot& slot, std::uint64_t job, std::uint32_t seq,
                   model::cache_id& id) {
  if (auto err = no_stage(slot))
    return err;
  auto it = slot.h->caches.find(std::make_tuple(slot.id, job, seq));
  if (it == slot.h->caches.end())
    return bad("shard: job " + std::to_string(job) + " has no KV cache for "
               "sequence " + std::to_string(seq) + " here");
  id = it->second;
  return {};
}

/// (kv_read_atom, job, seq, pos, n): positions [pos, pos + n) of the
/// sequence's cache (fewer when they do not fit one message: the asker
/// goes on from where the answer ends), read on the device's thread (a
/// planned move: the job asks only for positions that no step of its
/// writes any more).
caf::result<caf::message> read_kv_rows(self_ptr self, std::uint64_t job,
                                       std::uint32_t seq, std::uint32_t pos,
                                       std::uint32_t n) {
  auto& st = self->state;
  device_task t;
  // At once, also while the device is paused (a thermal pause moves the
  // job away): rows [0, pos) are stable whatever steps wait there.
  t.kind = task_kind::immediate;
  t.run = [slot = st.slot, job, seq, pos, n](device::task_context&,
                                             caf::response_promise& rp) mutable {
    model::cache_id id = 0;
    if (auto err = find_kv(*slot, job, seq, id)) {
      rp.deliver(std::move(err));
      return;
    }
    auto& stage = *slot->h->stage;
    // At most what one message carries: the job asks for the rest next.
    const auto fit = max_chunk_bytes / stage.kv_bytes(1);
    if (n == 0 || fit == 0) {
      rp.deliver(bad("shard: a KV read of " + std::to_string(n)
                     + " positions (one position of this stage is "
                     + std::to_string(stage.kv_bytes(1)) + " bytes)"));
      return;
    }
    n = static_cast<std::uint32_t>(std::min<std::uint64_t>(n, fit));
    kv_rows r;
    r.job = job;
    r.seq = seq;
    r.first = stage.first();
    r.last = stage.last();
    r.pos = pos;
    r.n = n;
    r.row_bytes = stage.kv_row_bytes();
    r.data.resize(stage.kv_bytes(n));
    if (auto ok = stage.read_kv(id, pos, n, r.data.data()); !ok) {
      rp.deliver(device_failed(ok.err()));
      return;
    }
    rp.deliver(std::move(r));
  };
  return self->delegate(st.device, task_atom::value, std::move(t));
}

/// (kv_write_atom, rows): appends a moved sequence's rows to its cache
/// here (made by the rows at position 0), on the device's thread before
/// the steps sent after. Everything a peer says is checked: the layers
/// are this stage's, the sizes are the stage's, the positions follow on.
caf::result<caf::message> write_kv_rows(self_ptr self, kv_rows rows) {
  auto& st = self->state;
  if (rows.first != st.cfg.first || rows.last != st.cfg.last)
    return bad("shard: KV rows of layers [" + std::to_string(rows.first)
               + ", " + std::to_string(rows.last) + ") for a stage of ["
               + std::to_string(st.cfg.first) + ", "
               + std::to_string(st.cfg.last) + ")");
  if (rows.n == 0 || std::uint64_t{rows.pos} + rows.n > st.cfg.n_ctx)
    return bad("shard: KV rows of positions " + std::to_string(rows.pos)
               + " + " + std::to_string(rows.n) + " for a context of "
               + std::to_string(st.cfg.n_ctx));
  device_task t;
  t.run = [slot = st.slot, n_ctx = st.cfg.n_ctx, rows = std::move(rows)](
            device::task_context&, caf::response_promise& rp) {
    if (auto err = no_stage(*slot)) {
      rp.deliver(std::move(err));
      return;
    }
    auto& h = *slot->h;
    auto& stage = *h.stage;
    if (rows.row_bytes != stage.kv_row_bytes()) {
      rp.deliver(bad("shard: KV rows of " + std::to_string(rows.row_bytes)
                     + " bytes, this stage's are "
                     + std::to_string(stage.kv_row_bytes())));
      return;
    }
    model::cache_id id = 0;
    if (auto err = cache_of(h, *slot, rows.job, rows.seq, rows.pos, n_ctx,
                            id)) {
      rp.deliver(std::move(err));
      return;
    }
    if (auto ok = stage.write_kv(id, rows.pos, rows.n,
                                 rows.data.data(), rows.data.size());
        !ok) {
      rp.deliver(device_failed(ok.err()));
      return;
    }
    rp.deliver(caf::ok_atom::value);
  };
  return self->delegate(st.device, task_atom::value, std::move(t));
}

/// (retain_atom, prefix_retain): keeps a copy of the sequence's rows up to
/// its longest prefix in the stage's prefix cache, found by each prefix's
/// key (on the device's thread, after the steps sent before; no answer).
void retain_prefix(self_ptr self, prefix_retain r) {
  auto& st = self->state;
  if (st.cfg.prefix_cache_bytes == 0 || r.keys.empty()
      || r.keys.size() != r.lengths.size() || r.keys.size() > max_prefix_claim
      || r.lengths.back() > st.cfg.n_ctx || r.lengths.front() == 0
      || !std::is_sorted(r.lengths.begin(), r.lengths.end())
      || std::find(r.keys.begin(), r.keys.end(), 0) != r.keys.end())
    return; // nothing kept for a request that is not one
  device_task t;
  t.run = [slot = st.slot, r = std::move(r)](device::task_context&,
                                             caf::response_promise&) {
    if (no_stage(*slot))
      return;
    auto& h = *slot->h;
    const auto n = r.lengths.back();
    if (h.prefixes.touch(r.keys.back()))
      return; // kept already
    auto c = h.caches.find(std::make_tuple(slot->id, r.job, r.seq));
    if (c == h.caches.end())
      return; // released already: nothing to keep
    auto& stage = *h.stage;
    auto past = stage.n_past(c->second);
    if (!past || *past < n)
      return;
    // Its rows alone (capacity n), within the budget.
    std::vector<model::cache_id> dropped;
    const bool room = h.prefixes.make_room(stage.kv_bytes(n), dropped);
    h.drop_caches(dropped);
    if (!room)
      return;
    auto copy = stage.fork_cache(c->second, n, n);
    if (!copy)
      return; // no room on the device: the running sequences come first
    auto bytes = stage.cache_bytes(*copy);
    std::vector<workload::prefix_key> keys;
    for (std::size_t i = 0; i < r.keys.size(); ++i)
      keys.push_back({r.lengths[i], r.keys[i]});
    h.prefixes.add(*copy, bytes ? *bytes : stage.kv_bytes(n), keys);
  };
  self->send(st.device, task_atom::value, std::move(t));
}

/// (claim_atom, prefix_claim) -> prefix_claim: the keys this stage keeps,
/// each held for the job (not dropped) until it releases its caches.
caf::result<caf::message> claim_prefixes(self_ptr self, prefix_claim& c) {
  auto& st = self->state;
  if (c.keys.size() > max_prefix_claim)
    return bad("shard: a claim of " + std::to_string(c.keys.size())
               + " prompt prefixes (at most "
               + std::to_string(max_prefix_claim) + ")");
  device_task t;
  t.run = [slot = st.slot, c = std::move(c)](device::task_context&,
                                             caf::response_promise& rp) {
    prefix_claim held;
    held.job = c.job;
    if (slot->h)
      held.keys = slot->h->prefixes.claim(c.keys, {slot->id, c.job});
    rp.deliver(std::move(held));
  };
  return self->delegate(st.device, task_atom::value, std::move(t));
}

caf::behavior shard_impl(self_ptr self, shard_setup cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.device = caf::actor_cast<caf::actor>(st.cfg.device);
  set_up(self);
  // The owner (a coordinator) outlives its shards: each stops monitoring
  // it when it ends (actors/attachables.hpp), whichever owner it has then.
  st.owner_cell = std::make_shared<caf::actor_addr>(st.cfg.owner.address());
  demonitor_at_exit(self, st.owner_cell);
  if (st.cfg.owner) {
    self->monitor(st.cfg.owner);
    self->set_down_handler([self](caf::down_msg& dm) {
      if (dm.source == self->state.cfg.owner)
        self->quit(caf::exit_reason::user_shutdown);
    });
  }
  return {
    [self](forward_atom, stage_step& s) -> caf::result<caf::message> {
      auto& st = self->state;
      const auto& hp = st.cfg.model->hparams();
      const std::size_t n = s.tokens.size();
      if (n == 0 || n > max_batch_tokens(hp.n_embd))
        return bad("shard: a step needs 1 to "
                   + std::to_string(max_batch_tokens(hp.n_embd))
                   + " tokens");
      if (!st.is_first() && !s.on_device && s.x.size() != n * hp.n_embd)
        return bad("shard: expected " + std::to_string(n * hp.n_embd)
                   + " activations, got " + std::to_string(s.x.size()));
      if (s.top_k > max_step_top_k || s.top_k >= hp.n_vocab)
        return bad("shard: a step may ask for at most "
                   + std::to_string(std::min<std::uint64_t>(
                     max_step_top_k, hp.n_vocab - 1))
                   + " candidates a row (top_k), not "
                   + std::to_string(s.top_k));
      if (!s.top_ids.empty() || !s.lse.empty())
        return bad("shard: a step carries no candidates (top_ids, lse) on "
                   "its way in");
      if (auto why = scores_problem(s.scores, n, hp.n_vocab); !why.empty())
        return bad("shard: " + why);
      const auto most = max_step_sequences(hp.n_embd, hp.n_vocab, s.top_k);
      if (auto why = check_parts(s, most); !why.empty())
        return bad("shard: " + why);
      if (s.apart && n > most) // a row of logits per token
        return bad("shard: a step whose rows are apart returns at most "
                   + std::to_string(most) + " rows of logits, not "
                   + std::to_string(n));
      const std::uint64_t bytes = n * st.row_bytes();
      model::device_stage::device_io io;
      if (s.on_device) { // the previous stage copied x into our inbox
        auto ib = st.inboxes.find(seq_key{s.job, s.seq});
        if (ib == st.inboxes.end() || !s.x.empty())
          return bad("shard: sequence " + std::to_string(s.seq)
                     + " has no activations on this device");
        if (bytes > ib->second.bytes)
          return bad("shard: the step is larger than its inbox");
        io.in = {ib->second.buf, 0};
      }
      auto rp = self->make_response_promise();
      // The next stage's inbox, when it is on this node: asked for once
      // per sequence (refused: the activations go in the message).
      if (!st.next || st.next.node() != self->node() || st.is_last())
        return dispatch(self, std::move(s), io, inbox{}, rp);
      auto key = seq_key{s.job, s.seq};
      if (auto it = st.next_inboxes.find(key); it != st.next_inboxes.end()) {
        auto& ib = it->second;
        bool fits = ib.buf != 0 && ib.device && bytes <= ib.bytes;
        return dispatch(self, std::move(s), io, fits ? ib : inbox{}, rp);
      }
      self
        ->request(st.next, std::chrono::minutes(5), inbox_atom::value, s.job,
                  s.seq, bytes)
        .then(
          [self, key, bytes, s, io, rp](handle_id h, caf::actor& dev) mutable {
            inbox ib{h, bytes, std::move(dev)};
            self->state.next_inboxes[key] = ib;
            dispatch(self, std::move(s), io, ib, rp);
          },
          [self, key, s, io, rp](caf::error&) mutable {
            self->state.next_inboxes[key] = inbox{};
            dispatch(self, std::move(s), io, inbox{}, rp);
          });
      return rp;
    },
    [self](inbox_atom, std::uint64_t job, std::uint32_t seq,
           std::uint64_t bytes) { return open_inbox(self, job, seq, bytes); },
    [self](next_atom, caf::actor& next) {
      self->state.next = std::move(next);
      self->state.next_inboxes.clear(); // they were the old next stage's
      return caf::ok_atom::value;
    },
    [self](release_atom, std::uint64_t job) {
      return release(self, job, std::nullopt);
    },
    [self](adopt_atom, caf::actor& owner) -> caf::result<caf::ok_atom> {
      // A job handed to another coordinator: only the owner gives it away.
      auto& st = self->state;
      if (!owner || !st.cfg.owner
          || self->current_sender() != st.cfg.owner.address())
        return make_exo_error(exo_errc::invalid_argument,
                              "shard: only its owner hands it over");
      self->demonitor(st.cfg.owner);
      st.cfg.owner = std::move(owner);
      self->monitor(st.cfg.owner);
      *st.owner_cell = st.cfg.owner.address();
      if (st.cfg.host)
        self->send(st.cfg.host, adopt_atom::value,
                   caf::actor_cast<caf::actor>(self),
                   st.cfg.owner.node() != self->node());
      return caf::ok_atom::value;
    },
    [self](kv_read_atom, std::uint64_t job, std::uint32_t seq,
           std::uint32_t pos, std::uint32_t n) {
      return read_kv_rows(self, job, seq, pos, n);
    },
    [self](kv_write_atom, kv_rows& rows) {
      return write_kv_rows(self, std::move(rows));
    },
    [self](release_atom, std::uint64_t job, std::uint32_t seq) {
      return release(self, job, seq);
    },
    [self](retain_atom, prefix_retain& r) {
      retain_prefix(self, std::move(r));
    },
    [self](claim_atom, prefix_claim& c) {
      return claim_prefixes(self, c);
    },
    [self](inspect_atom) -> caf::result<actor_snapshot> {
      auto& st = self->state;
      actor_snapshot snap;
      snap.name = "shard-" + std::to_string(st.cfg.first) + "-"
                  + std::to_string(st.cfg.last);
      snap.kind = "shard";
      snap.node = st.cfg.node;
      snap.summary = "layers [" + std::to_string(st.cfg.first) + ", "
                     + std::to_string(st.cfg.last) + ") on "
                     + st.cfg.device_id;
      snap.fields["device"] = st.cfg.device_id;
      snap.fields["inboxes"] = std::to_string(st.inboxes.size());
      // The rest lives with the stage, on the device's thread.
      device_task t;
      t.kind = task_kind::immediate; // answers while the device is paused
      t.run = [slot = st.slot, snap](device::task_context&,
                                     caf::response_promise& rp) mutable {
        // The shard's own counters and sequences; the stage's figures are
        // those of every job that shares it.
        snap.fields["steps"] = std::to_string(slot->steps);
        snap.fields["tokens"] = std::to_string(slot->tokens);
        snap.fields["busy_s"] = std::to_string(slot->busy_s);
        snap.fields["device_handoffs"] = std::to_string(slot->device_handoffs);
        snap.fields["host_handoffs"] = std::to_string(slot->host_handoffs);
        snap.fields["pause_waits"] = std::to_string(slot->pause_waits);
        snap.fields["forks"] = std::to_string(slot->forks);
        snap.fields["prefix_forks"] = std::to_string(slot->prefix_forks);
        snap.fields["prefix_positions"] =
          std::to_string(slot->prefix_positions);
        if (!slot->h) {
          snap.fields["compute"] = "none: the stage was never set up";
          rp.deliver(std::move(snap));
          return;
        }
        auto& h = *slot->h;
        snap.fields["compute"] = h.stage ? "device" : "none: " + h.init_error;
        snap.fields["upload_s"] = std::to_string(h.upload_s);
        snap.fields["shared_by"] = std::to_string(h.users);
        snap.fields["stage_reuses"] = std::to_string(h.reuses);
        snap.fields["stage_forwards"] = std::to_string(h.forwards);
        snap.fields["merged_steps"] = std::to_string(h.merged_steps);
        // The stage's prefix cache (every job's).
        snap.fields["prefixes"] = std::to_string(h.prefixes.entries());
        snap.fields["prefix_keys"] = std::to_string(h.prefixes.keys());
        snap.fields["prefix_bytes"] = std::to_string(h.prefixes.bytes());
        snap.fields["prefixes_dropped"] =
          std::to_string(h.prefixes.dropped());
        std::uint64_t sequences = 0, kv = 0;
        for (auto& [key, id] : h.caches) {
          if (std::get<0>(key) != slot->id)
            continue;
          ++sequences;
          if (h.stage)
            if (auto b = h.stage->cache_bytes(id))
              kv += *b;
        }
        snap.fields["sequences"] = std::to_string(sequences);
        if (h.stage) {
          auto& stage = *h.stage;
          snap.fields["weight_bytes"] = std::to_string(stage.weight_bytes());
          snap.fields["weight_bytes_in_place"] =
            std::to_string(stage.weight_bytes_in_place());
          snap.fields["kv_cache_bytes"] = std::to_string(kv);
          snap.fields["device_ops"] = std::to_string(stage.ops_run());
          // The stage's KV cache (every job's): paged blocks, or one run
          // of rows per sequence.
          snap.fields["stage_kv_bytes"] = std::to_string(stage.cache_bytes());
          if (stage.paged()) {
            const auto kb = stage.kv_blocks();
            snap.fields["kv_block_positions"] =
              std::to_string(stage.block_positions());
            snap.fields["kv_blocks"] = std::to_string(kb.total);
            snap.fields["kv_blocks_used"] = std::to_string(kb.used);
            snap.fields["kv_blocks_shared"] = std::to_string(kb.shared);
            snap.fields["kv_blocks_copied"] = std::to_string(kb.copies);
          } else {
            snap.fields["kv_block_positions"] = "0 (contiguous)";
          }
        }
        rp.deliver(std::move(snap));
      };
      auto rp = self->make_response_promise();
      self->request(st.device, std::chrono::seconds(30), task_atom::value,
                    std::move(t))
        .then([rp](actor_snapshot& full) mutable { rp.deliver(full); },
              [rp, snap](caf::error& err) mutable {
                // The device actor is gone or stuck: what the shard knows.
                snap.fields["compute"] = "unknown: the device actor did "
                                         "not answer ("
                                         + caf::to_string(err) + ")";
                rp.deliver(snap);
              });
      return rp;
    },
  };
}

} // namespace

// Placement sizes a stage's scratch with model::shard_stage_options(),
// which cannot see the wire's limit.
static_assert(max_chunk_bytes == model::default_upload_chunk_bytes,
              "model::default_upload_chunk_bytes must be max_chunk_bytes");

stage_batching_totals batching_totals() noexcept {
  return {total_forwards.load(), total_merged_steps.load()};
}

std::vector<stage_figures> stage_figures_now() {
  std::vector<stage_figures> out;
  std::lock_guard<std::mutex> guard{registry_mtx};
  for (auto it = gauges_registry.begin(); it != gauges_registry.end();) {
    auto g = it->lock();
    if (!g) {
      it = gauges_registry.erase(it);
      continue;
    }
    stage_figures f = g->labels;
    f.jobs = g->jobs;
    f.sequences = g->sequences;
    f.kv_bytes = g->kv_bytes;
    f.kv_blocks = g->kv_blocks;
    f.kv_blocks_used = g->kv_blocks_used;
    f.kv_blocks_shared = g->kv_blocks_shared;
    f.forwards = g->forwards;
    f.rows = g->rows;
    f.merged_steps = g->merged_steps;
    f.wait_counts.reserve(g->wait_counts.size());
    for (auto& c : g->wait_counts)
      f.wait_counts.push_back(c.load(std::memory_order_relaxed));
    f.wait_sum_s = static_cast<double>(g->wait_ns.load()) * 1e-9;
    out.push_back(std::move(f));
    ++it;
  }
  return out;
}

std::uint32_t max_batch_tokens(std::uint32_t n_embd) {
  return model::batch_tokens_for(n_embd, max_chunk_bytes);
}

std::uint32_t max_step_sequences(std::uint32_t n_embd, std::uint32_t n_vocab,
                                 std::uint32_t top_k) {
  return model::batch_sequences_for(n_embd, n_vocab, max_chunk_bytes, top_k);
}

caf::actor spawn_shard(caf::actor_system& sys, shard_setup setup) {
  if (!setup.model)
    throw model::model_error("shard: no model");
  auto n_layer = setup.model->hparams().n_layer;
  if (setup.first >= setup.last || setup.last > n_layer)
    throw model::model_error("shard: layer range [" + std::to_string(setup.first)
                             + ", " + std::to_string(setup.last)
                             + ") is not inside [0, "
                             + std::to_string(n_layer) + ")");
  if (!setup.device)
    throw model::model_error("shard: no device to compute on");
  if (setup.n_ctx == 0)
    setup.n_ctx = setup.model->hparams().n_ctx_train;
  return sys.spawn(shard_impl, std::move(setup));
}

} // namespace exo::workload
