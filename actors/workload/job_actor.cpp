#include "actors/workload/job_actor.hpp"

#include "actors/workload/shard_actor.hpp"
#include "core/workload/job_request.hpp"
#include "core/workload/prefix_key.hpp"
#include "messages/errors.hpp"
#include "messages/workload.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

namespace exo::workload {

namespace {

using clock_type = std::chrono::steady_clock;

/// A row of logits as the last stage returned it: whole (`ids` empty:
/// values[t] is token t's), or its best candidates (stage_step::top_k:
/// ids[i]'s logit is values[i], best first).
struct logit_row {
  std::vector<std::int32_t> ids;
  std::vector<float> values;
  /// With ids: the whole row's model::log_sum_exp, when the job asked for
  /// it (job_setup::logprobs).
  double lse = 0.0;
};

struct sequence {
  std::vector<std::int32_t> prompt;
  /// What the pipeline must read before the next token is sampled: the
  /// prompt, or after a recovery the prompt and the tokens generated so far.
  std::vector<std::int32_t> feed;
  std::size_t fed = 0; ///< tokens of `feed` sent so far
  std::size_t fed_in_flight = 0; ///< of them, in the step in flight
  std::uint32_t pos = 0;
  bool prompt_done = false; ///< its prompt's logits have arrived once
  /// Resumed with its tokens so far: the feed holds all but the last,
  /// which is known; the feed's last row is not sampled, the next step (or
  /// round) reads that token as a running sequence's would.
  bool known_next = false;
  std::unique_ptr<model::sampler> smp;
  /// The numbers its sampler had drawn when its tokens were last whole
  /// (settle): a round's proposals drawn and then dropped (a handoff, a
  /// recovery) do not count, and the sampler goes back there.
  std::uint64_t draws = 0;
  bool in_round = false; ///< verify() is taking a round's tokens
  bool done = false;
  bool waiting = false;        ///< a step is in flight
  clock_type::time_point sent; ///< when it was sent
  /// Speculative decoding: positions the draft's caches hold, the tokens
  /// it proposed this round and, when sampling (temperature above 0), the
  /// distribution each was drawn from.
  std::uint32_t draft_pos = 0;
  std::vector<std::int32_t> drafted;
  std::vector<model::token_distribution> draft_dists;
  /// JSON mode (sampling.json): where its text stands, after its first
  /// `json_fed` generated tokens (a resumed sequence's are fed on first
  /// use); `json_lost` when a token it took could not be fed (then it is
  /// not masked any more).
  model::json_prefix json;
  std::size_t json_fed = 0;
  bool json_lost = false;
  /// Its next step rewinds (a job handed over: rows past pos may be left).
  bool rewind = false;
  /// Its prompt is an earlier sequence's (`source`), which the stages
  /// compute once: it sends nothing until the source's prompt is read,
  /// then samples from the same logits and its first step starts its
  /// caches as a copy of the source's (step_part::fork).
  std::optional<std::uint32_t> source;
  bool fork_pending = false; ///< its next step forks its caches
  /// Sequences whose fork from this one is not done yet: its caches stay
  /// until they are (release_held: it ended meanwhile).
  std::uint32_t holds = 0;
  bool release_held = false;
  /// Its client stopped it ((cancel_atom, seq): a choice whose stop string
  /// matched): it ends at its next token boundary, the others go on.
  bool stop = false;
  /// Its prompt's prefixes (a source of its prompt, with the prefix cache
  /// on), and the one its stages hold for it: its first step starts its
  /// caches as a copy of those rows (step_part::prefix) instead of
  /// computing them (prefix_pending until that step is answered).
  std::vector<workload::prefix_key> prefixes;
  std::uint64_t prefix = 0;
  bool prefix_pending = false;
  /// job_setup::prompt_logprobs: its prompt's scores as the steps that
  /// read it answer (scored[i]: prompt token i + 1's), and whether they
  /// went out (on_prompt_scores).
  std::vector<model::token_logprobs> scored;
  bool scores_out = false;

  /// The positions its stages hold (a sequence whose fork is still to be
  /// sent holds none there).
  std::uint32_t held() const {
    return fork_pending || prefix_pending ? 0 : pos;
  }
};

/// A planned move (drain, a device's thermal pause) that carries the KV
/// caches instead of rebuilding them. The job leaves the old pipeline at
/// once (a new epoch: the answers of steps in flight are dropped and those
/// steps taken back, to be sent again), reads each unfinished sequence's
/// rows [0, pos) out of the old stages (stable whatever its step in flight
/// does: a step only writes from pos on), asks for the new pipeline,
/// writes the rows into the new stages and goes on from where each
/// sequence was. When a read or write fails, every sequence is re-fed as
/// after a loss: the tokens are the same either way.
enum class move_phase { reading, placing, writing };

struct kv_move {
  move_phase phase = move_phase::reading;
  std::vector<std::uint32_t> lost;
  std::string why;
  std::uint64_t epoch = 0; ///< the pipeline it reads from, then writes to
  std::size_t chains = 0;  ///< reads or writes in flight (one per stage)
  std::string failed;      ///< why the caches are not carried after all
  std::uint64_t row_bytes = 0;
  /// Per sequence: carried, the positions carried, and each layer's K and
  /// V rows (row_bytes each) read so far.
  std::vector<bool> carried;
  std::vector<std::uint32_t> rows;
  std::vector<std::vector<std::vector<std::uint8_t>>> k, v;
  std::uint64_t bytes = 0;
  std::vector<std::uint32_t> bounds; ///< the new pipeline's layer ranges

  /// The layers the rows read so far cover (0 to this).
  std::size_t layers() const {
    std::size_t n = 0;
    for (auto& per_seq : k)
      n = std::max(n, per_seq.size());
    return n;
  }
};

struct job_state {
  job_setup cfg;
  std::vector<sequence> seqs;
  /// The sequences in groups: each group's ready sequences go through the
  /// pipeline as one batched step, one step per group in flight. As many
  /// groups as stages (so that every stage has a batch to work on), more
  /// when a step cannot carry them all.
  std::vector<std::vector<std::uint32_t>> groups;
  std::uint32_t step_sequences = 1; ///< the most sequences per step
  /// What the last stage returns of each row of logits: whole rows (0:
  /// setup's keep_logits, or a sampler that reads them), else this many
  /// best candidates (stage_step::top_k).
  std::uint32_t top_k = 0;
  /// The last stage answers with each row's log-sum-exp too (candidates
  /// and job_setup::logprobs).
  bool lse = false;
  /// Sequences that may step now though their groups have no step coming
  /// back (a shared prompt read): their groups step (kick_groups).
  std::vector<std::uint32_t> kicked;
  /// Speculative decoding is on (draft stages, no draft stage failed so
  /// far).
  bool speculative = false;
  job_result result;
  std::size_t prompts_left = 0;
  std::size_t running = 0;
  clock_type::time_point t0, t_prompts;
  caf::response_promise rp;
  bool started = false;
  bool finished = false;
  bool cancelling = false;
  /// Asking the stages for prompt prefixes (claim_prefixes): no step yet.
  bool claiming = false;
  /// Bumped by every recovery: answers of an older pipeline are dropped.
  std::uint64_t epoch = 0;
  /// Waiting for the recoverer's new pipeline.
  bool recovering = false;
  /// Planned moves among the recoveries (drain): not counted against
  /// max_recoveries.
  std::size_t planned_moves = 0;
  /// The recovery whose first token is still to come (its stall unknown).
  std::optional<job_recovered> resumed;
  /// A planned move under way whose KV caches go along (kv_move below).
  std::unique_ptr<kv_move> move;
  /// A planned move asked for while the job was being placed again or
  /// moving already: made once it goes on (lost stages, why).
  std::optional<std::pair<std::vector<std::uint32_t>, std::string>>
    next_move;
  clock_type::time_point lost_at;    ///< when the loss was noticed
  clock_type::time_point last_token; ///< when the last token came
  /// A handoff asked for (handoff_atom): answered at the next token
  /// boundary; then the job is paused until told to end or go on.
  std::optional<caf::typed_response_promise<job_handoff>> handoff;
  bool paused = false;
  static inline const char* name = "exo.job";
};

using self_ptr = caf::stateful_actor<job_state>*;

/// The id its stages keep its caches under.
std::uint64_t stage_job(const job_state& st) {
  return st.cfg.stage_job != 0 ? st.cfg.stage_job : st.cfg.id;
}

void send_step(self_ptr self, std::size_t g);
void send_all(self_ptr self);
void try_pause(self_ptr self);

/// How long a failed step waits for its stage's down message, which makes
/// it a loss (recovered) rather than an error (the job ends).
constexpr auto settle_time = std::chrono::milliseconds(500);

void finish(self_ptr self, std::string error) {
  auto& st = self->state;
  if (st.finished)
    return;
  st.finished = true;
  auto now = clock_type::now();
  if (st.prompts_left > 0)
    st.t_prompts = now;
  st.result.error = std::move(error);
  st.result.total_s = std::chrono::duration<double>(now - st.t0).count();
  st.result.prompt_s
    = std::chrono::duration<double>(st.t_prompts - st.t0).count();
  st.result.generation_s
    = std::chrono::duration<double>(now - st.t_prompts).count();
  for (auto& stage : st.cfg.stages)
    self->send(stage, release_atom::value, stage_job(st));
  for (auto& stage : st.cfg.draft_stages)
    caf::anon_send(stage, release_atom::value, stage_job(st));
  if (st.handoff) {
    st.handoff->deliver(make_exo_error(exo_errc::failed_state,
                                       "the job ended before its handoff"));
    st.handoff.reset();
  }
  if (st.cfg.finish)
    st.rp.deliver(st.cfg.finish(st.result));
  else
    st.rp.deliver(caf::ok_atom::value);
  self->quit();
}

/// Frees sequence j's KV caches on the stages (no answer wanted).
void release_sequence(self_ptr self, std::uint32_t j) {
  auto& st = self->state;
  for (auto& stage : st.cfg.stages)
    caf::anon_send(stage, release_atom::value, stage_job(st), j);
  for (auto& stage : st.cfg.draft_stages)
    caf::anon_send(stage, release_atom::value, stage_job(st), j);
}

void sequence_done(self_ptr self, std::uint32_t j);

/// Sequence j ended before its prompt was read: the sequences that share
/// it feed it themselves (or stop too, when the job is cancelled).
void orphan_sharers(self_ptr self, std::uint32_t j) {
  auto& st = self->state;
  for (std::uint32_t k = 0; k < st.seqs.size() && !st.finished; ++k) {
    auto& q = st.seqs[k];
    if (q.done || q.source != j || q.prompt_done)
      continue;
    q.source.reset();
    if (st.cancelling)
      sequence_done(self, k);
    else
      st.kicked.push_back(k);
  }
}

/// Sequence j has ended: the job ends with the last one; before that
/// its KV caches go at once (memory follows the sequences still running),
/// or once the forks from it are done.
void sequence_done(self_ptr self, std::uint32_t j) {
  auto& st = self->state;
  auto& q = st.seqs[j];
  q.done = true;
  if (--st.running == 0) {
    if (st.cancelling)
      st.result.cancelled = true;
    finish(self, "");
    return;
  }
  if (!q.prompt_done)
    orphan_sharers(self, j);
  if (q.holds > 0)
    q.release_held = true;
  else
    release_sequence(self, j);
}

/// A fork of sequence k from its source is done on every stage.
void fork_done(self_ptr self, std::uint32_t k) {
  auto& st = self->state;
  auto& q = st.seqs[k];
  if (!q.fork_pending)
    return;
  q.fork_pending = false;
  auto& src = st.seqs[*q.source];
  if (--src.holds == 0 && src.release_held) {
    src.release_held = false;
    release_sequence(self, *q.source);
  }
}

/// Forgets every fork (a recovery: sequences not carried re-feed their
/// own prompts); what the stages held back for them goes.
void forget_forks(self_ptr self) {
  auto& st = self->state;
  for (std::uint32_t j = 0; j < st.seqs.size(); ++j) {
    auto& q = st.seqs[j];
    q.source.reset();
    q.fork_pending = false;
    q.prefix_pending = false; // the new stages hold nothing for the job
    q.prefix = 0;
    q.holds = 0;
    if (q.release_held) {
      q.release_held = false;
      release_sequence(self, j);
    }
  }
}

void take_logits(self_ptr self, std::uint32_t j, logit_row&& logits,
                 std::optional<std::int32_t> chosen = std::nullopt);

/// Sequence j's prompt is read: its scores go out, once
/// (job_setup::prompt_logprobs): those of sequence `from` (itself, or the
/// sequence whose prompt it shares).
void send_scores(self_ptr self, std::uint32_t j, std::uint32_t from) {
  auto& st = self->state;
  auto& q = st.seqs[j];
  if (!st.cfg.prompt_logprobs || q.scores_out)
    return;
  q.scores_out = true;
  if (st.cfg.on_prompt_scores)
    st.cfg.on_prompt_scores(j, st.seqs[from].scored);
}

/// Sequence j's n tokens went through: `logits_in` are its last row's.
/// Samples its next token when its feed is read (`chosen`: the token
/// speculative sampling picked from these logits instead).
void on_logits(self_ptr self, std::uint32_t j, std::uint32_t n,
               logit_row&& logits_in,
               std::optional<std::int32_t> chosen = std::nullopt) {
  auto& st = self->state;
  auto& q = st.seqs[j];
  if (st.cancelling || q.stop) { // a token boundary: it stops here
    sequence_done(self, j);
    return;
  }
  q.pos += n;
  if (q.fed < q.feed.size()) // more of the prompt to feed
    return;
  if (q.known_next) { // resumed: its next step reads its last token
    q.known_next = false;
    if (!q.prompt_done) {
      send_scores(self, j, j);
      q.prompt_done = true;
      if (--st.prompts_left == 0)
        st.t_prompts = clock_type::now();
    }
    return;
  }
  auto& out = st.result.tokens[j];
  const bool just_read = !q.prompt_done;
  if (just_read) { // its prompt is read
    send_scores(self, j, j);
    q.prompt_done = true;
    if (--st.prompts_left == 0)
      st.t_prompts = clock_type::now();
  }
  const auto& values = logits_in.values;
  if (auto bad = model::sampler::first_non_finite(values.data(),
                                                   values.size());
      bad != values.size() && out.size() < st.cfg.n_gen) {
    const auto token = logits_in.ids.empty() ? bad : logits_in.ids[bad];
    finish(self, "the model gave a non-finite logit (token "
                   + std::to_string(token) + " of sequence " + std::to_string(j)
                   + " at position " + std::to_string(q.pos)
                   + "): its weights hold NaN or infinity, or its "
                     "activations overflow");
    return;
  }
  // Its prompt's longest prefix stays on the stages for later jobs (the
  // prefix cache), unless that is what it started from.
  if (just_read && !q.source && !q.prefixes.empty()
      && q.prefixes.back().key != q.prefix) {
    prefix_retain r;
    r.job = stage_job(st);
    r.seq = j;
    for (auto& k : q.prefixes) {
      r.lengths.push_back(k.n);
      r.keys.push_back(k.key);
    }
    for (auto& stage : st.cfg.stages)
      self->send(stage, retain_atom::value, r);
  }
  // The sequences that share this prompt read it now: the same logits,
  // their own samplers; their first steps fork the caches.
  if (just_read && !q.source)
    for (std::uint32_t k = 0; k < st.seqs.size() && !st.finished; ++k) {
      auto& s = st.seqs[k];
      if (s.done || s.source != j || s.prompt_done)
        continue;
      s.prompt_done = true;
      if (--st.prompts_left == 0)
        st.t_prompts = clock_type::now();
      s.pos = static_cast<std::uint32_t>(s.prompt.size());
      s.fed = s.feed.size();
      st.result.shared_prompt_tokens += s.prompt.size();
      send_scores(self, k, j);
      take_logits(self, k, logit_row(logits_in));
      if (!s.done) {
        s.fork_pending = true;
        ++q.holds;
        st.kicked.push_back(k);
      }
    }
  if (!st.finished)
    take_logits(self, j, std::move(logits_in), chosen);
}

/// Whether the last stage's answer `r` holds `rows` rows of logits as a
/// step with `top_k` asked for (whole rows of n_vocab when 0): "" or what
/// is wrong (a peer is not trusted with sizes or token ids).
std::string check_answer(const stage_step& r, std::size_t rows,
                         std::uint32_t top_k, std::size_t n_vocab,
                         bool lse = false) {
  const std::size_t width = top_k == 0 ? n_vocab : top_k;
  if (r.x.size() != rows * width)
    return "the last stage sent " + std::to_string(r.x.size())
           + " logits, expected " + std::to_string(rows * width);
  if (top_k == 0)
    return {};
  if (lse && r.lse.size() != rows)
    return "the last stage sent " + std::to_string(r.lse.size())
           + " log-sum-exps, expected " + std::to_string(rows);
  if (r.top_ids.size() != rows * width)
    return "the last stage sent " + std::to_string(r.top_ids.size())
           + " candidate token ids, expected " + std::to_string(rows * width);
  for (auto id : r.top_ids)
    if (id < 0 || static_cast<std::size_t>(id) >= n_vocab)
      return "the last stage sent candidate token " + std::to_string(id)
             + ", outside the vocabulary of " + std::to_string(n_vocab);
  return {};
}

/// Whether the scores in the last stage's answer are those a step asked
/// for: one per scored row, each with `top` alternatives of the
/// vocabulary, finite numbers, a rank within the vocabulary. "" or what
/// is wrong.
std::string check_scores(const step_scores& sc, std::size_t rows,
                         std::size_t top, std::size_t n_vocab) {
  if (sc.rows.size() != rows)
    return "the last stage sent " + std::to_string(sc.rows.size())
           + " prompt scores, expected " + std::to_string(rows);
  for (auto& r : sc.rows) {
    if (r.top_ids.size() != top || r.top_logprobs.size() != top)
      return "the last stage sent a prompt score with "
             + std::to_string(r.top_ids.size()) + " alternatives, expected "
             + std::to_string(top);
    if (!std::isfinite(r.logprob))
      return "the last stage sent a non-finite prompt score";
    if (r.rank == 0 || r.rank > n_vocab)
      return "the last stage sent a prompt score of rank "
             + std::to_string(r.rank) + ", outside the vocabulary of "
             + std::to_string(n_vocab);
    for (std::size_t i = 0; i < top; ++i)
      if (r.top_ids[i] < 0 || static_cast<std::size_t>(r.top_ids[i]) >= n_vocab
          || !std::isfinite(r.top_logprobs[i]))
        return "the last stage sent a prompt score's alternative "
               + std::to_string(r.top_ids[i]) + " outside the vocabulary of "
               + std::to_string(n_vocab) + " or not finite";
  }
  return {};
}

/// Row i of a checked answer (check_answer).
logit_row row_of(const stage_step& r, std::size_t i, std::uint32_t top_k,
                 std::size_t n_vocab) {
  logit_row row;
  const std::size_t width = top_k == 0 ? n_vocab : top_k;
  row.values.assign(r.x.begin() + i * width, r.x.begin() + (i + 1) * width);
  if (top_k != 0)
    row.ids.assign(r.top_ids.begin() + i * width,
                   r.top_ids.begin() + (i + 1) * width);
  if (top_k != 0 && i < r.lse.size())
    row.lse = r.lse[i];
  return row;
}

/// The distribution a sampler draws from for `row` (whole or its
/// candidates; finite values).
model::token_distribution distribution_of(const model::sampler& smp,
                                          const logit_row& row) {
  return row.ids.empty()
           ? smp.distribution(row.values.data(), row.values.size())
           : smp.distribution(row.ids.data(), row.values.data(),
                              row.ids.size());
}

/// A whole row of logits as sequence j samples from it: adjusted by the
/// job's logit bias and penalties for its prompt and the tokens it has
/// generated so far (model::adjust_logits), and in JSON mode with every
/// token masked that would break its JSON (model::mask_json), in
/// `scratch`; `values` itself when nothing adjusts it (rows come whole
/// when something does). `drafted`: tokens proposed after those (the
/// draft's row for its next proposal), counted as generated. `stuck`:
/// JSON mode left no token at all.
const std::vector<float>& adjusted(job_state& st, std::uint32_t j,
                                   const std::vector<float>& values,
                                   std::vector<float>& scratch, bool& stuck,
                                   const std::vector<std::int32_t>& drafted =
                                     {}) {
  stuck = false;
  if (!model::adjusts_logits(st.cfg.sampling))
    return values;
  scratch = values;
  auto& q = st.seqs[j];
  const auto& out = st.result.tokens[j];
  const auto& prompt = q.prompt;
  std::vector<std::int32_t> with_drafted;
  if (!drafted.empty()) {
    with_drafted = out;
    with_drafted.insert(with_drafted.end(), drafted.begin(), drafted.end());
  }
  const auto& gen = drafted.empty() ? out : with_drafted;
  model::adjust_logits(st.cfg.sampling, prompt.data(), prompt.size(),
                       gen.data(), gen.size(), scratch.data(),
                       scratch.size());
  if (st.cfg.sampling.json && st.cfg.vocab && !q.json_lost) {
    const auto& bytes = st.cfg.vocab->bytes;
    auto feed = [&](model::json_prefix& state, std::int32_t id) {
      const auto t = static_cast<std::size_t>(id);
      return t < bytes.size() && state.feed(bytes[t]);
    };
    for (; q.json_fed < out.size() && !q.json_lost; ++q.json_fed)
      q.json_lost = !feed(q.json, out[q.json_fed]);
    auto state = q.json; // (and the proposals', on a copy)
    bool lost = q.json_lost;
    for (std::size_t i = 0; i < drafted.size() && !lost; ++i)
      lost = !feed(state, drafted[i]);
    if (!lost)
      stuck = model::mask_json(state, *st.cfg.vocab, st.cfg.eog,
                               scratch.data(), scratch.size())
              == 0;
  }
  return scratch;
}

/// Why a sequence that JSON mode left without a token ends the job.
std::string no_json_token(std::uint32_t j) {
  return "sequence " + std::to_string(j)
         + ": no token of the model's vocabulary continues its JSON";
}

/// Sequence j's tokens are whole (no round under way past them): their
/// draws are what a takeover or a recovery goes on from (on_settled).
void settle(self_ptr self, std::uint32_t j) {
  auto& st = self->state;
  auto& q = st.seqs[j];
  q.draws = q.smp->draws();
  if (st.cfg.on_settled)
    st.cfg.on_settled(j, st.result.tokens[j].size(), q.draws);
}

/// Samples sequence j's next token from `logits_in` (its last row's), or
/// takes `chosen` (speculative sampling's pick from them).
void take_logits(self_ptr self, std::uint32_t j, logit_row&& logits_in,
                 std::optional<std::int32_t> chosen) {
  auto& st = self->state;
  auto& q = st.seqs[j];
  auto& out = st.result.tokens[j];
  if (q.stop) { // a sharer stopped before its source's prompt was read
    sequence_done(self, j);
    return;
  }
  if (logits_in.ids.empty())
    st.result.logits[j] = std::move(logits_in.values);
  const auto& logits =
    logits_in.ids.empty() ? st.result.logits[j] : logits_in.values;
  if (out.size() >= st.cfg.n_gen) {
    sequence_done(self, j);
    return;
  } else {
    // Sampled from the row adjusted by the bias and penalties; the
    // log-probabilities below are the model's own (vLLM's default).
    std::int32_t id = 0;
    if (chosen) {
      id = *chosen;
    } else if (logits_in.ids.empty()) {
      std::vector<float> scratch;
      bool stuck = false;
      const auto& row = adjusted(st, j, logits, scratch, stuck);
      if (stuck) {
        finish(self, no_json_token(j));
        return;
      }
      id = q.smp->sample(row.data(), row.size());
    } else {
      id = q.smp->sample_top(logits_in.ids.data(), logits.data(),
                             logits.size());
    }
    out.push_back(id);
    ++st.result.generated_tokens;
    // Its log-probabilities, from the row it was chosen from (the logits
    // are finite: on_logits checked them).
    std::optional<model::token_logprobs> lp;
    if (st.cfg.logprobs >= 0) {
      const auto top = static_cast<std::size_t>(st.cfg.logprobs);
      lp = logits_in.ids.empty()
             ? model::logprobs_of(logits.data(), logits.size(), id, top)
             : model::logprobs_of(logits_in.ids.data(), logits.data(),
                                  logits.size(), logits_in.lse, id, top);
    }
    auto now = clock_type::now();
    if (st.resumed) { // the first token after a recovery: its stall known
      auto& r = *st.resumed;
      r.recovery_s = std::chrono::duration<double>(now - st.lost_at).count();
      r.gap_s = std::chrono::duration<double>(now - st.last_token).count();
      st.result.recoveries.push_back(r);
      if (st.cfg.on_recovered)
        st.cfg.on_recovered(r);
      st.resumed.reset();
    }
    st.last_token = now;
    if (st.cfg.on_token)
      st.cfg.on_token(j, id, lp ? &*lp : nullptr);
    if (!q.in_round)
      settle(self, j);
    if (out.size() >= st.cfg.n_gen || st.cfg.eog.count(id) != 0)
      sequence_done(self, j);
    // else it goes on in its group's next step
  }
}

/// Sends group g's next step: each of its sequences that is not done and
/// not in flight contributes its next piece of feed (bounded by the step's
/// token budget) or its last token, up to step_sequences of them.
void speculate(self_ptr self, std::uint32_t j);

/// A step of sequences `seqs` failed (the first named in the error). A
/// stage whose node went away fails the steps through it, and its monitor
/// fires too, in either order: a loss when it does within the settle time,
/// else a plain error. Without a recoverer only a receiver that went down
/// is waited for (the job then ends naming the stage), any other error
/// ends it now.
void lose(self_ptr self, std::vector<std::uint32_t> lost, std::string why,
          bool device_only = false, bool planned = false);

void step_failed(self_ptr self, const std::vector<std::uint32_t>& seqs,
                 std::uint64_t epoch, const caf::error& err) {
  auto& st = self->state;
  if (epoch != st.epoch || st.finished)
    return;
  for (auto j : seqs)
    st.seqs[j].waiting = false;
  auto msg = error_message(err);
  auto why = "sequence " + std::to_string(seqs.front()) + ": "
             + (msg.empty() ? self->system().render(err) : msg);
  if (!st.cfg.recoverer && err != caf::sec::request_receiver_down) {
    finish(self, why);
    return;
  }
  self->delayed_send(self, settle_time, tick_atom::value, epoch,
                     std::move(why));
}

/// The groups of the sequences that may step now (job_state::kicked).
void kick_groups(self_ptr self) {
  auto& st = self->state;
  auto kicked = std::move(st.kicked);
  st.kicked.clear();
  std::vector<bool> seen(st.groups.size(), false);
  for (auto k : kicked)
    for (std::size_t g = 0; g < st.groups.size(); ++g)
      if (!seen[g]
          && std::find(st.groups[g].begin(), st.groups[g].end(), k)
               != st.groups[g].end()) {
        seen[g] = true;
        send_step(self, g);
      }
}

void send_step(self_ptr self, std::size_t g) {
  auto& st = self->state;
  if (st.finished || st.recovering || st.move || st.handoff || st.paused
      || st.claiming)
    return; // no new step while a planned move carries the caches, or
             // while the job stops for its handoff (or asks for prefixes)
  if (st.speculative) { // groups of one: a round once its feed is read
    auto j = st.groups[g].front();
    auto& q = st.seqs[j];
    if (!q.done && !q.waiting && q.fed >= q.feed.size() && q.prompt_done) {
      speculate(self, j);
      return;
    }
  }
  stage_step s;
  s.job = stage_job(st);
  std::size_t budget = workload::max_batch_tokens(st.cfg.n_embd);
  const auto now = clock_type::now();
  // After a recovery the generated tokens are re-fed as they were first
  // computed, one row each (an apart step: each row a one-token forward,
  // bit for bit): a multi-row forward of one sequence differs in the last
  // bits, and a near-tie then flips a later token (the soak found it). A
  // sequence doing so goes alone in its step; the prompt's rows never
  // share a step with them.
  auto refeeds_generated = [&](const sequence& q) {
    return !q.done && !q.waiting && q.fed < q.feed.size()
           && q.fed >= q.prompt.size();
  };
  std::vector<std::uint32_t> order(st.groups[g].begin(), st.groups[g].end());
  for (auto j : order)
    if (refeeds_generated(st.seqs[j])) {
      order = {j};
      s.apart = true;
      break;
    }
  // Prompts first: a prompt's piece is cut where it is cut alone (see
  // below), so a whole piece may need a whole step, which the decoding
  // sequences' tokens would otherwise never leave free.
  std::stable_partition(order.begin(), order.end(), [&](std::uint32_t j) {
    return st.seqs[j].fed < st.seqs[j].prompt.size();
  });
  bool forks = false;
  // Prompt rows to score (prompt_logprobs): an id per row of the step, and
  // where each scored one goes (sequence, prompt index).
  std::vector<std::int32_t> score_ids;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> score_slots;
  for (auto j : order) {
    auto& q = st.seqs[j];
    if (q.done || q.waiting || (q.source && !q.prompt_done))
      continue; // (a shared prompt that is still being read)
    if (budget == 0 || s.parts.size() >= st.step_sequences)
      break;
    std::size_t n = 1;
    if (q.fed < q.prompt.size()) {
      // The prompt's rows alone, in the pieces it is cut into when it is
      // read alone (a whole step's tokens from its start on): a forward's
      // rows depend on the rows they are computed with, so a sequence
      // read in other pieces would get other bits than alone. A piece that
      // does not fit what is left of this step waits for the next.
      const std::size_t piece = workload::max_batch_tokens(st.cfg.n_embd);
      n = std::min(q.prompt.size() - q.fed, piece - q.fed % piece);
      if (n > budget)
        continue;
    } else if (q.fed < q.feed.size()) {
      n = std::min(q.feed.size() - q.fed, budget);
      if (s.apart) // a row of logits each: the last stage's bound
        n = std::min<std::size_t>(
          n, workload::max_step_sequences(st.cfg.n_embd, st.cfg.n_vocab,
                                          st.top_k));
    }
    // Row t reads feed[fed + t]: a prompt token's row scores the next one.
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t i = q.fed + t;
      const bool scores = st.cfg.prompt_logprobs && !q.scores_out
                          && q.fed < q.feed.size() && i + 1 < q.prompt.size();
      score_ids.push_back(scores ? q.prompt[i + 1] : -1);
      if (scores)
        score_slots.emplace_back(j, static_cast<std::uint32_t>(i));
    }
    if (q.fed < q.feed.size()) {
      s.tokens.insert(s.tokens.end(), q.feed.begin() + q.fed,
                      q.feed.begin() + q.fed + n);
      q.fed += n;
      q.fed_in_flight = n;
    } else {
      q.fed_in_flight = 0;
      s.tokens.push_back(st.result.tokens[j].back());
    }
    s.parts.push_back({j, q.pos, static_cast<std::uint32_t>(n)});
    if (q.fork_pending) {
      s.parts.back().fork = true;
      s.parts.back().from = *q.source;
      forks = true;
    } else if (q.prefix_pending) { // its start: the stages' kept rows
      s.parts.back().fork = true;
      s.parts.back().prefix = q.prefix;
      forks = true;
    }
    s.rewind = s.rewind || q.rewind;
    q.rewind = false;
    budget -= n;
    q.waiting = true;
    q.sent = now;
  }
  if (s.parts.empty())
    return;
  s.seq = s.parts.front().seq;
  s.pos = s.parts.front().pos;
  auto parts = s.parts;
  if (s.parts.size() == 1 && !forks)
    s.parts.clear(); // one sequence: the plain form
  s.top_k = st.top_k;
  s.logprobs = st.lse;
  if (!score_slots.empty()) {
    s.scores.ids = std::move(score_ids);
    s.scores.top = static_cast<std::uint32_t>(std::max(0, st.cfg.logprobs));
  }
  const std::size_t score_top = s.scores.top;
  // No timeout on the request itself: the watchdog enforces step_timeout
  // (a CAF request timeout woke the clock thread twice per token).
  auto epoch = st.epoch;
  const bool apart = s.apart;
  const auto top_k = s.top_k;
  const bool lse = s.logprobs;
  self->request(st.cfg.stages.front(), caf::infinite, forward_atom::value,
                std::move(s))
    .then(
      [self, g, parts, epoch, apart, top_k, lse, score_top,
       score_slots = std::move(score_slots)](stage_step& r) {
        auto& st = self->state;
        if (epoch != st.epoch || st.finished)
          return; // from a pipeline the job has left
        for (auto& p : parts)
          st.seqs[p.seq].waiting = false;
        const std::size_t v = st.cfg.n_vocab;
        // An apart step has a row of logits per token: its last one is
        // what the sequence reads.
        std::size_t rows = 0;
        for (auto& p : parts)
          rows += apart ? p.n : 1;
        if (auto why = check_answer(r, rows, top_k, v, lse); !why.empty()) {
          finish(self, why);
          return;
        }
        if (auto why = check_scores(r.scores, score_slots.size(), score_top,
                                    v);
            !why.empty()) {
          finish(self, why);
          return;
        }
        for (std::size_t k = 0; k < score_slots.size(); ++k) {
          auto& q = st.seqs[score_slots[k].first];
          if (score_slots[k].second < q.scored.size())
            q.scored[score_slots[k].second] = std::move(r.scores.rows[k]);
        }
        std::size_t row = 0;
        for (std::size_t i = 0; i < parts.size() && !st.finished; ++i) {
          row += apart ? parts[i].n : 1;
          if (parts[i].fork && parts[i].prefix != 0)
            st.seqs[parts[i].seq].prefix_pending = false;
          else if (parts[i].fork)
            fork_done(self, parts[i].seq);
          on_logits(self, parts[i].seq, parts[i].n,
                    row_of(r, row - 1, top_k, v));
        }
        send_step(self, g);
        kick_groups(self);
        try_pause(self);
      },
      [self, parts, epoch](caf::error& err) {
        std::vector<std::uint32_t> seqs;
        for (auto& p : parts)
          seqs.push_back(p.seq);
        step_failed(self, seqs, epoch, err);
      });
}

// -- speculative decoding -----------------------------------------------------

void verify(self_ptr self, std::uint32_t j);

/// The stage_step::top_k of a step whose rows are read for their `k`
/// best candidates (0: whole rows): k where a stage takes it (below
/// n_vocab, at most max_step_top_k), else 0, whole rows.
std::uint32_t step_top_k(std::size_t k, std::size_t n_vocab) {
  return k >= n_vocab || k > max_step_top_k ? 0
                                            : static_cast<std::uint32_t>(k);
}

/// How many tokens the draft proposes for sequence j this round: a round
/// keeps at most the proposals and one token of the model's, within n_gen.
std::size_t proposals(const job_state& st, std::uint32_t j) {
  const std::size_t room = st.cfg.n_gen - st.result.tokens[j].size();
  return std::min<std::size_t>(st.cfg.draft_tokens, room > 0 ? room - 1 : 0);
}

/// Speculation failed on the draft's side: off for the rest of the job;
/// sequence j goes on with a plain step.
void drop_draft(self_ptr self, std::uint32_t j) {
  auto& st = self->state;
  st.speculative = false;
  st.seqs[j].waiting = false;
  st.seqs[j].drafted.clear();
  st.seqs[j].draft_dists.clear();
  for (std::size_t g = 0; g < st.groups.size(); ++g)
    if (st.groups[g].front() == j)
      send_step(self, g);
  try_pause(self);
}

/// Feeds the draft what it has not read of sequence j (its prompt and
/// tokens so far), then lets it propose tokens one by one; then verify().
void draft_step(self_ptr self, std::uint32_t j) {
  auto& st = self->state;
  auto& q = st.seqs[j];
  const auto& out = st.result.tokens[j];
  const std::size_t known = q.prompt.size() + out.size();
  stage_step s;
  s.job = stage_job(st);
  s.seq = j;
  s.pos = q.draft_pos;
  s.rewind = true; // it may hold rejected proposals
  if (q.draft_pos < known) {
    const std::size_t n = std::min<std::size_t>(
      known - q.draft_pos,
      workload::max_batch_tokens(std::max<std::uint32_t>(st.cfg.draft_n_embd,
                                                         1)));
    for (std::size_t i = q.draft_pos; i < q.draft_pos + n; ++i)
      s.tokens.push_back(i < q.prompt.size() ? q.prompt[i]
                                             : out[i - q.prompt.size()]);
  } else {
    s.tokens.push_back(q.drafted.back()); // its last proposal
  }
  // Greedy, its best candidate is all the draft's answer needs; sampling,
  // the candidates the sampler reads (0: whole rows); whole rows when the
  // job adjusts them (the draft proposes from rows adjusted as the model's
  // will be: a draft that agrees keeps agreeing).
  const bool sampled = st.cfg.sampling.temperature > 0.0f;
  s.top_k = step_top_k(
    model::adjusts_logits(st.cfg.sampling) ? 0
    : sampled ? model::sampler::candidates(st.cfg.sampling, st.cfg.n_vocab)
              : 1,
    st.cfg.n_vocab);
  const auto top_k = s.top_k;
  q.waiting = true;
  q.sent = clock_type::now();
  auto epoch = st.epoch;
  self->request(st.cfg.draft_stages.front(), caf::infinite,
                forward_atom::value, std::move(s))
    .then(
      [self, j, epoch, top_k](stage_step& r) {
        auto& st = self->state;
        if (epoch != st.epoch || st.finished || !st.speculative)
          return;
        auto& q = st.seqs[j];
        if (st.handoff) { // a token boundary: the round is dropped
          q.waiting = false;
          q.drafted.clear();
          q.draft_dists.clear();
          try_pause(self);
          return;
        }
        if (!check_answer(r, 1, top_k, st.cfg.n_vocab).empty())
          return drop_draft(self, j);
        q.draft_pos += static_cast<std::uint32_t>(r.tokens.size());
        const std::size_t known =
          q.prompt.size() + st.result.tokens[j].size();
        if (q.draft_pos < known) // more to read
          return draft_step(self, j);
        // (Rows the job adjusts come whole: adjusted for the tokens so
        // far and the proposals before this one.)
        std::vector<float> scratch;
        bool stuck = false;
        const auto& row =
          top_k != 0 ? r.x
                     : adjusted(st, j, r.x, scratch, stuck, q.drafted);
        if (stuck) // the model's own step will say so
          return drop_draft(self, j);
        if (st.cfg.sampling.temperature <= 0.0f) {
          q.drafted.push_back(top_k != 0 ? r.top_ids.front()
                                         : model::sampler::argmax(
                                             row.data(), row.size()));
        } else {
          // A proposal drawn from the draft's distribution, kept for the
          // model's verdict (a draft that gives non-finite logits is
          // dropped: nothing can be drawn from them).
          if (model::sampler::first_non_finite(r.x.data(), r.x.size())
              != r.x.size())
            return drop_draft(self, j);
          auto d = top_k != 0 ? distribution_of(*q.smp,
                                                row_of(r, 0, top_k,
                                                       st.cfg.n_vocab))
                              : q.smp->distribution(row.data(), row.size());
          q.drafted.push_back(q.smp->draw(d));
          q.draft_dists.push_back(std::move(d));
        }
        // (Nothing is proposed past an end of generation: were it kept,
        // the sequence ends there.)
        if (q.drafted.size() < proposals(st, j)
            && st.cfg.eog.count(q.drafted.back()) == 0)
          return draft_step(self, j);
        verify(self, j);
      },
      [self, j, epoch](caf::error&) {
        auto& st = self->state;
        if (epoch != st.epoch || st.finished || !st.speculative)
          return;
        drop_draft(self, j);
      });
}

/// Starts a round for sequence j: the draft proposes, the model verifies
/// (with no room for a proposal, the model's plain next step).
void speculate(self_ptr self, std::uint32_t j) {
  auto& st = self->state;
  auto& q = st.seqs[j];
  q.drafted.clear();
  q.draft_dists.clear();
  // The draft reads at least the last token again: its logits there are
  // its first proposal's. (A round dropped by a recovery left it past
  // that, its caches holding proposals no one kept: its step rewinds.)
  const auto known =
    static_cast<std::uint32_t>(q.prompt.size() + st.result.tokens[j].size());
  q.draft_pos = std::min(q.draft_pos, known - 1);
  if (proposals(st, j) == 0)
    verify(self, j);
  else
    draft_step(self, j);
}

/// The model reads sequence j's last token and the proposals in one step,
/// each row a step of its own, and answers with every row's logits.
void verify(self_ptr self, std::uint32_t j) {
  auto& st = self->state;
  auto& q = st.seqs[j];
  stage_step s;
  s.job = stage_job(st);
  s.seq = j;
  s.pos = q.pos;
  s.apart = true;
  s.rewind = true; // it may hold rows of rejected proposals
  s.tokens.push_back(st.result.tokens[j].back());
  s.tokens.insert(s.tokens.end(), q.drafted.begin(), q.drafted.end());
  s.top_k = st.top_k;
  s.logprobs = st.lse;
  const auto top_k = s.top_k;
  const bool lse = s.logprobs;
  q.waiting = true;
  q.sent = clock_type::now();
  auto epoch = st.epoch;
  self->request(st.cfg.stages.front(), caf::infinite, forward_atom::value,
                std::move(s))
    .then(
      [self, j, epoch, top_k, lse](stage_step& r) {
        auto& st = self->state;
        if (epoch != st.epoch || st.finished)
          return;
        auto& q = st.seqs[j];
        q.waiting = false;
        const std::size_t v = st.cfg.n_vocab, rows = q.drafted.size() + 1;
        if (auto why = check_answer(r, rows, top_k, v, lse); !why.empty()) {
          finish(self, why);
          return;
        }
        st.result.drafted += q.drafted.size();
        const auto known = static_cast<std::uint32_t>(
          q.prompt.size() + st.result.tokens[j].size());
        // Row i holds the logits after the last token and i proposals.
        // Sampling: proposal i is kept with probability min(1, p/q)
        // (model::keep_proposal), else the model's token there is drawn
        // from the residual and the round ends; after every proposal
        // kept, the last row's token is the model's own draw.
        q.in_round = true;
        if (st.cfg.sampling.temperature > 0.0f) {
          for (std::size_t i = 0; i < rows && !st.finished; ++i) {
            auto row = row_of(r, i, top_k, v);
            std::optional<std::int32_t> chosen;
            bool kept = false;
            if (i < q.drafted.size()
                && model::sampler::first_non_finite(row.values.data(),
                                                    row.values.size())
                     == row.values.size()) { // (else on_logits ends it)
              // (Whole rows when adjusted, by the tokens so far: the
              // ones this round kept included.)
              std::vector<float> scratch;
              bool stuck = false;
              const auto& a = adjusted(st, j, row.values, scratch, stuck);
              if (stuck) {
                finish(self, no_json_token(j));
                break;
              }
              const auto p = row.ids.empty()
                               ? q.smp->distribution(a.data(), a.size())
                               : distribution_of(*q.smp, row);
              const auto x = q.drafted[i];
              kept = model::keep_proposal(p, q.draft_dists[i], x,
                                          q.smp->uniform());
              chosen = kept ? x
                            : q.smp->draw(model::residual(p,
                                                          q.draft_dists[i]));
              if (kept)
                ++st.result.accepted;
            }
            on_logits(self, j, 1, std::move(row), chosen);
            if (q.done || !kept)
              break;
          }
        }
        // Greedy: the model's token there is kept; so is the next row's
        // while it agreed with the proposal it read (a proposal the model
        // agreed with is accepted, the one it ended its sequence at too).
        for (std::size_t i = 0;
             st.cfg.sampling.temperature <= 0.0f && i < rows && !st.finished;
             ++i) {
          const auto& toks = st.result.tokens[j];
          const std::size_t before = toks.size();
          on_logits(self, j, 1, row_of(r, i, top_k, v));
          const bool agreed = i < q.drafted.size() && toks.size() > before
                              && toks.back() == q.drafted[i];
          if (agreed)
            ++st.result.accepted;
          if (q.done || !agreed)
            break;
        }
        // The model read the last token and the proposals it agreed with
        // (on_logits advanced its position row by row); the draft keeps
        // what it read of them (all proposals but its last).
        q.in_round = false;
        const auto emitted = static_cast<std::uint32_t>(
          q.prompt.size() + st.result.tokens[j].size() - known);
        if (emitted > 0)
          settle(self, j);
        q.draft_pos = std::min<std::uint32_t>(
          q.draft_pos, known + emitted - 1);
        if (!st.finished && !q.done)
          for (std::size_t g = 0; g < st.groups.size(); ++g)
            if (st.groups[g].front() == j)
              send_step(self, g);
        try_pause(self);
      },
      [self, j, epoch](caf::error& err) {
        step_failed(self, {j}, epoch, err);
      });
}

/// Sends every group's step (at the start and after a recovery).
void send_all(self_ptr self) {
  for (std::size_t g = 0; g < self->state.groups.size(); ++g)
    send_step(self, g);
}

/// How long a stage may take to say which prompt prefixes it keeps.
constexpr auto claim_timeout = std::chrono::seconds(30);

/// The stages answered the claim (`held`: how many hold each key): each
/// source sequence starts from the longest prefix of its prompt that every
/// stage holds; then every group steps.
void claimed(self_ptr self, std::uint64_t epoch,
             const std::map<std::uint64_t, std::size_t>& held) {
  auto& st = self->state;
  st.claiming = false;
  if (st.finished)
    return;
  if (epoch == st.epoch) // else re-placed meanwhile: nothing held there
    for (auto& q : st.seqs) {
      if (q.done || q.source || q.prompt_done)
        continue;
      for (auto it = q.prefixes.rbegin(); it != q.prefixes.rend(); ++it) {
        auto h = held.find(it->key);
        if (h == held.end() || h->second < st.cfg.stages.size())
          continue;
        q.prefix = it->key;
        q.prefix_pending = true;
        q.pos = it->n;
        q.fed = it->n;
        st.result.cached_prompt_tokens += it->n;
        break;
      }
    }
  send_all(self);
}

/// The prefix cache: asks every stage which prefixes of the sources'
/// prompts (whole pieces, core/workload/prefix_key.hpp) it keeps from
/// earlier jobs (held for this job from then on), and sends the steps
/// once all have answered (a stage that fails to answer holds none).
void claim_prefixes(self_ptr self) {
  auto& st = self->state;
  const auto piece = workload::max_batch_tokens(st.cfg.n_embd);
  prefix_claim c;
  c.job = stage_job(st);
  for (auto& q : st.seqs) {
    if (q.done || q.source)
      continue;
    q.prefixes = workload::prefix_keys(q.prompt, piece);
    for (auto& k : q.prefixes)
      c.keys.push_back(k.key);
  }
  std::sort(c.keys.begin(), c.keys.end());
  c.keys.erase(std::unique(c.keys.begin(), c.keys.end()), c.keys.end());
  if (c.keys.size() > max_prefix_claim)
    c.keys.resize(max_prefix_claim);
  if (c.keys.empty()) {
    send_all(self);
    return;
  }
  st.claiming = true;
  auto held = std::make_shared<std::map<std::uint64_t, std::size_t>>();
  auto left = std::make_shared<std::size_t>(st.cfg.stages.size());
  const auto epoch = st.epoch;
  for (auto& stage : st.cfg.stages)
    self->request(stage, claim_timeout, claim_atom::value, c)
      .then(
        [self, held, left, epoch](prefix_claim& r) {
          // Each key once per stage (a stage's answer is not trusted to
          // name it once).
          std::sort(r.keys.begin(), r.keys.end());
          r.keys.erase(std::unique(r.keys.begin(), r.keys.end()),
                       r.keys.end());
          for (auto k : r.keys)
            ++(*held)[k];
          if (--*left == 0)
            claimed(self, epoch, *held);
        },
        [self, held, left, epoch](caf::error&) {
          if (--*left == 0)
            claimed(self, epoch, *held);
        });
}

/// Sequences with the same prompt as an earlier one read it from that
/// one (sequence::source): the stages compute each prompt once.
void share_prompts(job_state& st) {
  std::map<std::vector<std::int32_t>, std::uint32_t> first;
  for (std::uint32_t j = 0; j < st.seqs.size(); ++j) {
    auto [it, fresh] = first.emplace(st.seqs[j].prompt, j);
    if (!fresh)
      st.seqs[j].source = it->second;
  }
}

/// Splits the job's sequences into groups (job_state::groups): as many as
/// stages, more where a step cannot carry a group, at most one per
/// sequence.
void make_groups(job_state& st) {
  const std::size_t m = st.seqs.size();
  // What the last stage returns of a row: what the sampler reads of it,
  // unless the setup keeps whole rows or the rows are adjusted first (a
  // logit bias, a penalty: whole rows).
  // With log-probabilities, at least the alternatives they name (and the
  // row's log-sum-exp beside them).
  std::size_t read = model::logits_needed(st.cfg.sampling, st.cfg.n_vocab);
  if (read != 0 && st.cfg.logprobs > 0)
    read = std::max<std::size_t>(read,
                                 static_cast<std::size_t>(st.cfg.logprobs));
  st.top_k = st.cfg.keep_logits ? 0 : step_top_k(read, st.cfg.n_vocab);
  st.lse = st.cfg.logprobs >= 0 && st.top_k != 0;
  st.step_sequences = std::max<std::uint32_t>(
    1, workload::max_step_sequences(st.cfg.n_embd, st.cfg.n_vocab, st.top_k));
  if (st.cfg.step_sequences > 0)
    st.step_sequences = std::min(st.step_sequences, st.cfg.step_sequences);
  // Speculative decoding (greedy or sampling), each sequence its own
  // rounds, at most as many proposals as a step may return rows of logits
  // for.
  st.speculative = !st.cfg.draft_stages.empty() && st.cfg.draft_tokens > 0;
  if (st.speculative) {
    st.step_sequences = 1;
    st.cfg.draft_tokens = std::min<std::uint32_t>(
      st.cfg.draft_tokens,
      workload::max_step_sequences(st.cfg.n_embd, st.cfg.n_vocab, st.top_k)
        - 1);
    st.speculative = st.cfg.draft_tokens > 0;
  }
  std::size_t g = std::max<std::size_t>(st.cfg.stages.size(), 1);
  g = std::max(g, (m + st.step_sequences - 1) / st.step_sequences);
  g = std::min(g, m);
  st.groups.assign(g, {});
  for (std::size_t j = 0; j < m; ++j)
    st.groups[j % g].push_back(static_cast<std::uint32_t>(j));
}

/// How often the watchdog looks at the steps in flight.
std::chrono::milliseconds watchdog_period(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds{1},
                    std::chrono::milliseconds{1000});
}

/// Ends the job when a step has been in flight for longer than
/// step_timeout (a stage or device that stopped answering), else looks
/// again a watchdog period later.
void watch(self_ptr self) {
  auto& st = self->state;
  if (st.finished)
    return;
  auto now = clock_type::now();
  for (std::size_t j = 0; j < st.seqs.size(); ++j) {
    auto& q = st.seqs[j];
    if (q.waiting && now - q.sent > st.cfg.step_timeout) {
      finish(self, "sequence " + std::to_string(j)
                     + ": no answer from the pipeline within "
                     + std::to_string(st.cfg.step_timeout.count())
                     + " ms (the step timeout)");
      return;
    }
  }
  self->delayed_send(self, watchdog_period(st.cfg.step_timeout),
                     tick_atom::value);
}

/// How long a step must have been in flight for (lost_atom) to end the job.
constexpr auto lost_grace = std::chrono::milliseconds(1000);

/// "stage 1 (n2/cpu:0)".
std::string stage_name(const job_state& st, std::size_t i) {
  auto s = "stage " + std::to_string(i);
  if (i < st.cfg.stage_names.size() && !st.cfg.stage_names[i].empty())
    s += " (" + st.cfg.stage_names[i] + ")";
  return s;
}

/// How long the coordinator may take to re-place the job (its stages may
/// fetch weights; each of its own waits has a deadline or a monitor).
constexpr auto recovery_timeout = std::chrono::seconds(660);

void resume(self_ptr self, const std::string& why, job_pipeline& p);

/// Stages `lost` of the pipeline are gone (or stalled): asks the recoverer
/// for a new pipeline, or ends the job with `why` when it cannot.
/// `device_only`: their devices failed, their nodes live on.
void lose(self_ptr self, std::vector<std::uint32_t> lost, std::string why,
          bool device_only, bool planned) {
  auto& st = self->state;
  if (st.finished || st.recovering)
    return;
  if (st.cancelling && st.started) { // it was stopping anyway
    st.result.cancelled = true;
    finish(self, "");
    return;
  }
  if (st.resumed) { // lost again before the last recovery's first token
    st.result.recoveries.push_back(*st.resumed);
    st.resumed.reset();
  }
  auto tried = st.result.recoveries.size() - st.planned_moves;
  if (!st.cfg.recoverer || (!planned && tried >= st.cfg.max_recoveries)) {
    if (tried > 0)
      why += " (after " + std::to_string(tried) + " recover"
             + (tried == 1 ? "y" : "ies") + ", at most "
             + std::to_string(st.cfg.max_recoveries) + ")";
    finish(self, why);
    return;
  }
  if (planned)
    ++st.planned_moves;
  if (st.move && st.move->phase != move_phase::placing)
    st.move.reset(); // lost before its caches were read: re-fed instead
  st.recovering = true;
  ++st.epoch;
  if (!st.move) // a planned move counts from its start (start_move)
    st.lost_at = clock_type::now();
  for (auto& q : st.seqs)
    q.waiting = false;
  for (auto& a : st.cfg.stages) // the coordinator stops the survivors
    self->demonitor(a);
  self
    ->request(st.cfg.recoverer, recovery_timeout, recover_atom::value,
              st.cfg.id, std::move(lost), why, device_only)
    .then([self, why](job_pipeline& p) { resume(self, why, p); },
          [self, why](caf::error& err) {
            auto msg = error_message(err);
            finish(self, why + "; the job could not be re-placed: "
                           + (msg.empty() ? self->system().render(err)
                                          : msg));
          });
}

// -- planned moves that carry the KV caches (kv_move) ------------------------

/// The deadline of one read or write of KV rows (a stage on a node that
/// froze meanwhile: the sequences are re-fed instead).
constexpr auto kv_timeout = std::chrono::seconds(30);
/// The most layers a stage may say it holds (rows from a peer).
constexpr std::uint32_t max_kv_layers = 1u << 16;

void start_move(self_ptr self, std::vector<std::uint32_t> lost,
                std::string why);

/// After a recovery: every unfinished sequence that was not carried re-feeds
/// its prompt and the tokens generated so far; those carried go on from
/// where they were. Then every group steps.
void go_on(self_ptr self) {
  auto& st = self->state;
  auto& r = *st.resumed;
  forget_forks(self);
  st.kicked.clear();
  for (std::size_t j = 0; j < st.seqs.size(); ++j) {
    auto& q = st.seqs[j];
    if (q.done)
      continue;
    // Where its tokens were last whole: the proposals of a round taken
    // back are drawn again.
    q.smp->restart(q.draws);
    if (st.move && st.move->carried[j]) {
      r.moved_positions += st.move->rows[j];
      continue;
    }
    // Its prompt and tokens but the last, which its next step (or round)
    // reads, as a running sequence's.
    auto& out = st.result.tokens[j];
    q.feed = q.prompt;
    if (!out.empty())
      q.feed.insert(q.feed.end(), out.begin(), out.end() - 1);
    q.known_next = !out.empty();
    q.fed = 0;
    q.pos = 0;
    r.replayed += q.feed.size();
  }
  if (st.move) {
    r.moved_bytes = st.move->bytes;
    if (!st.move->failed.empty())
      r.reason += "; its KV caches were re-fed, not moved ("
                  + st.move->failed + ")";
  }
  st.move.reset();
  if (st.next_move) { // asked for meanwhile: its stages move on at once
    auto [lost, why] = std::move(*st.next_move);
    st.next_move.reset();
    start_move(self, std::move(lost), std::move(why));
    return;
  }
  if (st.handoff) { // asked for during the move: nothing in flight now
    try_pause(self);
    return;
  }
  send_all(self);
}

/// The move carries no cache after all (`why` for the node's log); the
/// sequences are re-fed.
void drop_carried(kv_move& m, const std::string& why) {
  if (m.failed.empty())
    m.failed = why;
  m.carried.assign(m.carried.size(), false);
  m.k.clear();
  m.v.clear();
  m.bytes = 0;
}

/// Takes rows a stage read for sequence j from position p (checked: a
/// peer's sizes and layers are never trusted). "" or what is wrong.
std::string take_rows(job_state& st, std::uint32_t j, std::uint32_t p,
                      kv_rows& r) {
  auto& m = *st.move;
  const auto asked = m.rows[j] - p;
  if (r.job != stage_job(st) || r.seq != j || r.pos != p || r.n == 0
      || r.n > asked)
    return "the stage answered positions " + std::to_string(r.pos) + " + "
           + std::to_string(r.n) + " of sequence " + std::to_string(r.seq)
           + ", asked for " + std::to_string(p) + " + "
           + std::to_string(asked) + " of " + std::to_string(j);
  // Never more than the model's own caches hold: its layers, rows of
  // n_embd_kv halves or floats.
  const auto& c = st.cfg;
  const bool width_ok = c.n_embd_kv == 0
                        || r.row_bytes == std::uint64_t{c.n_embd_kv} * 2
                        || r.row_bytes == std::uint64_t{c.n_embd_kv} * 4;
  if (r.first >= r.last || r.last > max_kv_layers
      || (c.n_layer != 0 && r.last > c.n_layer) || !width_ok
      || r.row_bytes == 0 || r.row_bytes > max_chunk_bytes
      || (m.row_bytes != 0 && r.row_bytes != m.row_bytes))
    return "the stage sent rows of layers [" + std::to_string(r.first) + ", "
           + std::to_string(r.last) + ") of " + std::to_string(r.row_bytes)
           + " bytes";
  const std::uint64_t run = std::uint64_t{r.n} * r.row_bytes;
  if (r.data.size() != std::uint64_t{r.last - r.first} * 2 * run)
    return "the stage sent " + std::to_string(r.data.size())
           + " bytes of KV rows, expected "
           + std::to_string(std::uint64_t{r.last - r.first} * 2 * run);
  m.row_bytes = r.row_bytes;
  auto& k = m.k[j];
  auto& v = m.v[j];
  if (k.size() < r.last) {
    k.resize(r.last);
    v.resize(r.last);
  }
  const auto* at = r.data.data();
  for (auto l = r.first; l < r.last; ++l) {
    if (k[l].size() != std::uint64_t{p} * r.row_bytes)
      return "the stages sent layer " + std::to_string(l) + " twice";
    for (auto* dst : {&k[l], &v[l]}) {
      dst->insert(dst->end(), at, at + run);
      at += run;
    }
  }
  m.bytes += r.data.size();
  return {};
}

/// Whether a move's answer still counts: the move of `epoch` is still in
/// `phase` (neither ended, nor replaced by a loss).
bool move_live(self_ptr self, std::uint64_t epoch, move_phase phase) {
  auto& st = self->state;
  return st.move && st.move->epoch == epoch && st.move->phase == phase
         && !st.finished;
}

/// A move's read or write at stage i failed: nothing is carried (the
/// sequences are re-fed) and that stage's chain ends; `done` once every
/// chain has.
void chain_failed(self_ptr self, std::size_t i, const caf::error& err,
                  void (*done)(self_ptr)) {
  auto& st = self->state;
  auto msg = error_message(err);
  drop_carried(*st.move,
               stage_name(st, i) + ": "
                 + (msg.empty() ? self->system().render(err) : msg));
  if (--st.move->chains == 0)
    done(self);
}

/// A chain's next piece: the first carried sequence from (j, p) on with
/// rows left. False when there is none (or the move failed): the chain
/// ends then, `done` once every chain has.
bool next_piece(self_ptr self, std::uint32_t& j, std::uint32_t& p,
                void (*done)(self_ptr)) {
  auto& m = *self->state.move;
  while (j < m.carried.size() && (!m.carried[j] || p >= m.rows[j])) {
    ++j;
    p = 0;
  }
  if (j < m.carried.size() && m.failed.empty())
    return true;
  if (--m.chains == 0)
    done(self);
  return false;
}

void read_done(self_ptr self);

/// Reads stage i's rows of the carried sequences from sequence j,
/// position p on, one answer at a time.
void read_next(self_ptr self, std::size_t i, std::uint32_t j,
               std::uint32_t p) {
  if (!next_piece(self, j, p, read_done))
    return;
  auto& st = self->state;
  auto& m = *st.move;
  auto epoch = m.epoch;
  self
    ->request(st.cfg.stages[i], kv_timeout, kv_read_atom::value, stage_job(st),
              j, p, m.rows[j] - p)
    .then(
      [self, i, j, p, epoch](kv_rows& r) {
        if (!move_live(self, epoch, move_phase::reading))
          return;
        auto& st = self->state;
        if (auto why = take_rows(st, j, p, r); !why.empty())
          drop_carried(*st.move, stage_name(st, i) + ": " + why);
        read_next(self, i, j, p + r.n);
      },
      [self, i, epoch](caf::error& err) {
        if (move_live(self, epoch, move_phase::reading))
          chain_failed(self, i, err, read_done);
      });
}

/// Every old stage answered: each carried sequence must have rows of every
/// layer; then the job asks for its new pipeline (lose, planned).
void read_done(self_ptr self) {
  auto& st = self->state;
  auto& m = *st.move;
  const auto layers = m.layers();
  for (std::size_t j = 0; j < m.carried.size() && m.failed.empty(); ++j)
    if (m.carried[j] && m.rows[j] > 0)
      for (std::size_t l = 0; l < layers; ++l)
        if (m.k[j].size() != layers
            || m.k[j][l].size() != std::uint64_t{m.rows[j]} * m.row_bytes) {
          drop_carried(m, "no stage sent layer " + std::to_string(l)
                            + " of sequence " + std::to_string(j));
          break;
        }
  m.phase = move_phase::placing;
  lose(self, m.lost, m.why, false, true);
}

/// A planned move (drain, thermal pause): carry the caches if the job
/// runs, else the plain re-placement.
void start_move(self_ptr self, std::vector<std::uint32_t> lost,
                std::string why) {
  auto& st = self->state;
  if (st.finished)
    return;
  if (st.recovering || st.move) { // the new pipeline's stages (indices)
    st.next_move.emplace(std::move(lost), std::move(why));
    return;
  }
  if (!st.started || !st.cfg.recoverer || st.cfg.stages.empty()) {
    lose(self, std::move(lost), std::move(why), false, true);
    return;
  }
  // The old pipeline's answers are dropped from now on; the steps in
  // flight are taken back (sent again after the move).
  ++st.epoch;
  st.lost_at = clock_type::now();
  auto m = std::make_unique<kv_move>();
  m->lost = std::move(lost);
  m->why = std::move(why);
  m->epoch = st.epoch;
  const auto n = st.seqs.size();
  m->carried.assign(n, false);
  m->rows.assign(n, 0);
  m->k.assign(n, {});
  m->v.assign(n, {});
  for (std::size_t j = 0; j < n; ++j) {
    auto& q = st.seqs[j];
    if (q.waiting) {
      q.fed -= q.fed_in_flight;
      q.fed_in_flight = 0;
      q.waiting = false;
      q.drafted.clear();
      q.draft_dists.clear();
    }
    m->carried[j] = !q.done && !q.fork_pending && !q.prefix_pending;
    m->rows[j] = q.held();
  }
  m->chains = st.cfg.stages.size();
  st.move = std::move(m);
  for (std::size_t i = 0; i < st.cfg.stages.size(); ++i)
    read_next(self, i, 0, 0);
}

void write_done(self_ptr self);

/// Writes the carried sequences' rows into new stage i, from sequence j,
/// position p on, in pieces within max_chunk_bytes, one at a time.
void write_next(self_ptr self, std::size_t i, std::uint32_t j,
                std::uint32_t p) {
  if (!next_piece(self, j, p, write_done))
    return;
  auto& st = self->state;
  auto& m = *st.move;
  const auto a = m.bounds[i], b = m.bounds[i + 1];
  const std::uint64_t per_position = std::uint64_t{b - a} * 2 * m.row_bytes;
  if (per_position > max_chunk_bytes) {
    drop_carried(m, "one position of layers [" + std::to_string(a) + ", "
                      + std::to_string(b) + ") is larger than a message");
    if (--m.chains == 0)
      write_done(self);
    return;
  }
  kv_rows r;
  r.job = stage_job(st);
  r.seq = j;
  r.first = a;
  r.last = b;
  r.pos = p;
  r.n = static_cast<std::uint32_t>(std::min<std::uint64_t>(
    m.rows[j] - p, max_chunk_bytes / per_position));
  r.row_bytes = m.row_bytes;
  const std::uint64_t from = std::uint64_t{p} * m.row_bytes,
                      run = std::uint64_t{r.n} * m.row_bytes;
  r.data.reserve(per_position * r.n);
  for (auto l = a; l < b; ++l)
    for (auto* src : {&m.k[j][l], &m.v[j][l]})
      r.data.insert(r.data.end(), src->begin() + from,
                    src->begin() + from + run);
  const auto next = p + r.n;
  auto epoch = m.epoch;
  self->request(st.cfg.stages[i], kv_timeout, kv_write_atom::value,
                std::move(r))
    .then(
      [self, i, j, next, epoch](caf::ok_atom) {
        if (move_live(self, epoch, move_phase::writing))
          write_next(self, i, j, next);
      },
      [self, i, epoch](caf::error& err) {
        if (move_live(self, epoch, move_phase::writing))
          chain_failed(self, i, err, write_done);
      });
}

/// Every new stage has its rows (or the move failed: what was written is
/// released and every sequence is re-fed); the job goes on.
void write_done(self_ptr self) {
  auto& st = self->state;
  auto& m = *st.move;
  if (!m.failed.empty()) {
    for (std::uint32_t j = 0; j < st.seqs.size(); ++j)
      if (!st.seqs[j].done)
        for (auto& stage : st.cfg.stages) // before the re-fed steps
          caf::anon_send(stage, release_atom::value, stage_job(st), j);
    drop_carried(m, m.failed);
  }
  go_on(self);
}

/// The new pipeline is up: the carried rows go to its stages (their
/// layer ranges must cover the layers carried), then the job goes on.
void write_kv(self_ptr self) {
  auto& st = self->state;
  auto& m = *st.move;
  m.phase = move_phase::writing;
  m.epoch = st.epoch;
  const auto layers = m.layers();
  auto& b = m.bounds;
  bool fits = b.size() == st.cfg.stages.size() + 1 && b.front() == 0
              && b.back() == layers
              && std::adjacent_find(b.begin(), b.end(),
                                    std::greater_equal<>{})
                   == b.end();
  if (m.bytes > 0 && !fits)
    drop_carried(m, "the new stages' layer ranges do not cover the "
                    + std::to_string(layers) + " layers carried");
  if (m.bytes == 0) { // nothing to write
    go_on(self);
    return;
  }
  m.chains = st.cfg.stages.size();
  for (std::size_t i = 0; i < st.cfg.stages.size(); ++i)
    write_next(self, i, 0, 0);
}

/// Goes on with the new pipeline `p`: a planned move writes the caches it
/// carries into the new stages first (write_kv); every other unfinished
/// sequence re-feeds its prompt and the tokens generated so far, then
/// samples its next token from the logits that come back (its sampler
/// untouched by the loss).
void resume(self_ptr self, const std::string& why, job_pipeline& p) {
  auto& st = self->state;
  if (st.finished) // its coordinator stops the new stages with the run
    return;
  st.recovering = false;
  if (p.stages.empty() || std::any_of(p.stages.begin(), p.stages.end(),
                                      [](const caf::actor& a) { return !a; })) {
    finish(self, why + "; the new pipeline has no stages");
    return;
  }
  st.cfg.stages = std::move(p.stages);
  st.cfg.stage_names = std::move(p.names);
  for (auto& a : st.cfg.stages)
    self->monitor(a);
  if (st.cancelling && st.started) {
    st.result.cancelled = true;
    finish(self, "");
    return;
  }
  job_recovered r;
  r.job = st.cfg.id;
  r.reason = p.lost.empty() ? why : std::move(p.lost);
  r.placement = std::move(p.placement);
  st.resumed = std::move(r);
  if (st.move && st.move->phase == move_phase::placing) {
    st.move->bounds = std::move(p.bounds);
    write_kv(self);
    return;
  }
  st.move.reset();
  go_on(self);
}

/// Takes the tokens the sequences generated before this job (setup's
/// `generated`): each is fed after its prompt, its sampler skips their
/// draws, a sequence that had ended stays ended. Returns what is wrong with
/// them ("" when nothing).
std::string take_generated(self_ptr self) {
  auto& st = self->state;
  auto& gen = st.cfg.generated;
  if (gen.empty())
    return {};
  if (gen.size() != st.seqs.size())
    return "the job resumes " + std::to_string(gen.size())
           + " sequences, it has " + std::to_string(st.seqs.size());
  auto& held = st.cfg.resident;
  if (!held.empty() && held.size() != gen.size())
    return "the job resumes the caches of " + std::to_string(held.size())
           + " sequences, it has " + std::to_string(gen.size());
  auto& draws = st.cfg.generated_draws;
  if (!draws.empty() && draws.size() != gen.size())
    return "the job resumes the draws of " + std::to_string(draws.size())
           + " sequences, it has " + std::to_string(gen.size());
  job_recovered r;
  r.job = st.cfg.id;
  r.reason = st.cfg.resumed_after;
  r.placement = st.cfg.resumed_placement;
  r.moved_bytes = st.cfg.resumed_moved_bytes;
  st.result.recoveries = st.cfg.earlier_recoveries;
  for (std::size_t j = 0; j < gen.size(); ++j) {
    auto& q = st.seqs[j];
    auto& got = gen[j];
    if (got.size() > st.cfg.n_gen)
      return "sequence " + std::to_string(j) + " resumes "
             + std::to_string(got.size()) + " tokens, more than the "
             + std::to_string(st.cfg.n_gen) + " it may generate";
    for (auto t : got)
      if (t < 0 || static_cast<std::uint32_t>(t) >= st.cfg.n_vocab)
        return "sequence " + std::to_string(j) + " resumes token "
               + std::to_string(t) + ", outside the vocabulary of "
               + std::to_string(st.cfg.n_vocab);
    st.result.tokens[j] = got;
    if (draws.empty()) {
      q.smp->skip(got.size());
    } else {
      const auto most = max_draws(got.size(), st.cfg.draft_tokens);
      if (draws[j] > most)
        return "sequence " + std::to_string(j) + " resumes after "
               + std::to_string(draws[j]) + " draws of its sampler, more "
               + "than its " + std::to_string(got.size()) + " tokens take ("
               + std::to_string(most) + ")";
      q.smp->restart(draws[j]);
    }
    q.draws = q.smp->draws();
    if (!got.empty()
        && (got.size() >= st.cfg.n_gen || st.cfg.eog.count(got.back()) != 0)) {
      q.done = true;
      q.prompt_done = true;
      --st.running;
      if (--st.prompts_left == 0)
        st.t_prompts = st.t0;
      continue;
    }
    // All but the last token: the next step (or round) reads that one, as
    // a running sequence's.
    const std::size_t total = q.prompt.size() + got.size();
    if (!got.empty()) {
      q.feed.insert(q.feed.end(), got.begin(), got.end() - 1);
      q.known_next = true;
    }
    if (held.empty()) {
      r.replayed += q.feed.size();
      continue;
    }
    // Handed over: its stages hold the first held[j] positions of the
    // prompt and tokens (at most all but the last); it goes on from there.
    if (held[j] >= total)
      return "sequence " + std::to_string(j) + ": its caches hold "
             + std::to_string(held[j]) + " positions, it has "
             + std::to_string(total) + " tokens";
    if (held[j] == q.feed.size())
      q.known_next = false; // nothing left to feed
    q.fed = q.pos = held[j];
    q.rewind = st.cfg.rewind_first;
    r.moved_positions += held[j];
    if (!got.empty()) { // its prompt's logits came before the handoff
      q.prompt_done = true;
      if (--st.prompts_left == 0)
        st.t_prompts = st.t0;
    }
  }
  if (!r.reason.empty()) {
    st.resumed = std::move(r);
    st.lost_at = st.cfg.resumed_since == clock_type::time_point{}
                   ? st.t0
                   : st.cfg.resumed_since;
    st.last_token = st.cfg.resumed_last_token == clock_type::time_point{}
                      ? st.lost_at
                      : st.cfg.resumed_last_token;
  }
  return {};
}

/// A handoff was asked for (handoff_atom): once the job is at a token
/// boundary (no step in flight, no re-placement or move under way) it
/// answers with its stages and what they hold, and pauses.
void try_pause(self_ptr self) {
  auto& st = self->state;
  if (!st.handoff || st.finished || st.recovering || st.move || st.next_move)
    return;
  if (st.cancelling) { // it stops anyway: no handoff
    st.handoff->deliver(make_exo_error(exo_errc::failed_state,
                                       "the job is being cancelled"));
    st.handoff.reset();
    send_all(self);
    return;
  }
  for (auto& q : st.seqs)
    if (q.waiting)
      return;
  job_handoff h;
  h.stage_job = stage_job(st);
  h.stages = st.cfg.stages;
  h.tokens = st.result.tokens;
  for (auto& q : st.seqs) {
    h.pos.push_back(q.held());
    h.draws.push_back(q.draws);
  }
  h.recoveries = st.result.recoveries;
  if (st.resumed) { // a move whose first token is still to come
    h.unfinished.push_back(*st.resumed);
    h.unfinished_us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now()
                                                            - st.lost_at)
        .count());
  }
  h.rewind = !st.cfg.draft_stages.empty();
  h.paused_us = static_cast<std::uint64_t>(
    std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now()
                                                          - st.last_token)
      .count());
  st.paused = true;
  auto rp = std::move(*st.handoff);
  st.handoff.reset();
  rp.deliver(std::move(h));
}

caf::behavior job_impl(self_ptr self, job_setup cfg) {
  self->state.cfg = std::move(cfg);
  for (auto& stage : self->state.cfg.stages)
    self->monitor(stage);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.finished || st.paused) // paused: its stages are handed over
      return;
    for (std::size_t i = 0; i < st.cfg.stages.size(); ++i)
      if (st.cfg.stages[i].address() == dm.source) {
        // Its device went away or has no room left for its KV caches (the
        // shard quit with device_lost or out_of_memory): only the device
        // is lost, its node lives on.
        const bool exo_reason = dm.reason.category() == exo_error_category();
        const auto code = static_cast<exo_errc>(dm.reason.code());
        auto device_only = exo_reason
                           && (code == exo_errc::device_lost
                               || code == exo_errc::out_of_memory);
        auto msg = error_message(dm.reason);
        lose(self, {static_cast<std::uint32_t>(i)},
             stage_name(st, i) + " is gone: "
               + (msg.empty() ? self->system().render(dm.reason)
                  : std::string{device_only ? to_string(code)
                                            : "device_lost"}
                      + ": " + msg),
             device_only);
        return;
      }
  });
  return {
    [self](lost_atom, std::string& why, std::vector<std::uint32_t>& lost) {
      // A node declared dead whose stage still answers (a false verdict
      // under load, a node that came back) does not end a job whose tokens
      // flow: only a pipeline that has stalled for a while.
      auto& st = self->state;
      if (st.finished || st.paused)
        return;
      auto now = clock_type::now();
      bool stalled = !st.started
                     || std::any_of(st.seqs.begin(), st.seqs.end(),
                                    [&](const sequence& q) {
                                      return q.waiting
                                             && now - q.sent >= lost_grace;
                                    });
      if (stalled)
        lose(self, std::move(lost), std::move(why));
    },
    [self](lost_atom, std::string& why, std::vector<std::uint32_t>& lost,
           bool planned) {
      // A planned move (drain): the stages still answer, but their node is
      // about to go; re-placed now, whatever the pipeline does.
      if (planned)
        start_move(self, std::move(lost), std::move(why));
    },

    [self](tick_atom, std::uint64_t epoch, std::string& why) {
      // A step failed settle_time ago and no stage went away since.
      auto& st = self->state;
      if (self->current_sender() == self->ctrl() && epoch == st.epoch
          && !st.finished && !st.recovering)
        finish(self, why);
    },
    [self](run_atom) -> caf::result<caf::message> {
      auto& st = self->state;
      if (st.started)
        return make_exo_error(exo_errc::failed_state, "job already started");
      st.started = true;
      st.rp = self->make_response_promise();
      st.t0 = clock_type::now();
      if (st.cancelling) { // cancelled before it started
        st.result.tokens.resize(st.cfg.prompts.size());
        st.result.logits.resize(st.cfg.prompts.size());
        st.result.cancelled = true;
        finish(self, "");
        return st.rp;
      }
      auto m = st.cfg.prompts.size();
      st.result.tokens.resize(m);
      st.result.logits.resize(m);
      st.seqs.resize(m);
      if (m == 0 || st.cfg.stages.empty()) {
        finish(self, "a job needs at least one sequence and one stage");
        return st.rp;
      }
      for (std::size_t j = 0; j < m; ++j) {
        auto& q = st.seqs[j];
        q.prompt = st.cfg.prompts[j];
        q.feed = q.prompt;
        if (q.prompt.empty()) {
          finish(self, "sequence " + std::to_string(j) + " has no tokens");
          return st.rp;
        }
        st.result.prompt_tokens += q.prompt.size();
        if (st.cfg.prompt_logprobs) {
          q.scored.resize(q.prompt.size() - 1);
          // Resident caches: its first job read and scored the prompt.
          q.scores_out = !st.cfg.resident.empty();
        }
        auto sp = st.cfg.sampling;
        sp.seed += j;
        q.smp = std::make_unique<model::sampler>(sp);
      }
      st.prompts_left = m;
      st.running = m;
      st.last_token = st.t0;
      if (auto why = take_generated(self); !why.empty()) {
        finish(self, why);
        return st.rp;
      }
      if (st.running == 0) { // every sequence had ended before
        finish(self, "");
        return st.rp;
      }
      if (st.cfg.share_prompts && st.cfg.generated.empty()
          && st.cfg.draft_stages.empty())
        share_prompts(st);
      make_groups(st);
      if (st.cfg.prefix_cache && st.cfg.generated.empty()
          && st.cfg.draft_stages.empty() && !st.cfg.prompt_logprobs)
        claim_prefixes(self); // the steps go once the stages answered
      else if (!st.recovering) // else the new pipeline starts them (resume)
        send_all(self);
      self->delayed_send(self, watchdog_period(st.cfg.step_timeout),
                         tick_atom::value);
      return st.rp;
    },
    [self](tick_atom) {
      if (self->current_sender() == self->ctrl()) // its own timer only
        watch(self);
    },
    [self](handoff_atom) -> caf::result<job_handoff> {
      auto& st = self->state;
      if (!st.started || st.finished || st.cancelling || st.handoff
          || st.paused)
        return make_exo_error(exo_errc::failed_state,
                              "the job cannot be handed over now");
      // A prompt being scored goes on here (its scores so far are not
      // handed over; a takeover re-feeds and scores it again).
      if (st.cfg.prompt_logprobs)
        for (auto& q : st.seqs)
          if (!q.done && !q.scores_out)
            return make_exo_error(exo_errc::failed_state,
                                  "the job cannot be handed over while a "
                                  "prompt is being scored");
      st.handoff = self->make_response_promise<job_handoff>();
      auto rp = *st.handoff;
      try_pause(self);
      return rp;
    },
    [self](handoff_atom, bool commit) {
      auto& st = self->state;
      if (!st.paused || st.finished)
        return;
      st.paused = false;
      if (!commit) { // the backup did not take it: it goes on here
        send_all(self);
        return;
      }
      // Handed over: its stages and their caches go on under another
      // coordinator's job. Nothing is released.
      st.finished = true;
      st.rp.deliver(make_exo_error(exo_errc::failed_state,
                                   "the job was handed over"));
      self->quit();
    },
    [self](cancel_atom) {
      auto& st = self->state;
      if (st.finished || st.cancelling)
        return false;
      st.cancelling = true;
      return true;
    },
    [self](cancel_atom, std::uint32_t j) {
      auto& st = self->state;
      if (!st.started || st.finished || st.cancelling || j >= st.seqs.size()
          || st.seqs[j].done || st.seqs[j].stop)
        return false;
      st.seqs[j].stop = true;
      return true;
    },
  };
}

} // namespace

caf::actor spawn_job(caf::actor_system& sys, job_setup setup) {
  return sys.spawn(job_impl, std::move(setup));
}

job_result run_job(caf::actor_system& sys, job_setup setup) {
  auto out = std::make_shared<job_result>();
  setup.finish = [out](job_result& r) {
    *out = r;
    return caf::make_message(caf::ok_atom::value);
  };
  auto job = spawn_job(sys, std::move(setup));
  caf::scoped_actor self{sys};
  bool ok = false;
  std::string why;
  self->request(job, caf::infinite, run_atom::value)
    .receive([&](caf::ok_atom) { ok = true; },
             [&](caf::error& err) { why = sys.render(err); });
  if (!ok && out->error.empty())
    out->error = why.empty() ? "the job ended without a result" : why;
  return *out;
}

std::vector<std::uint32_t> even_split(std::uint32_t n_layer,
                                      std::uint32_t k) {
  if (k == 0 || k > n_layer)
    throw std::invalid_argument(
      "cannot split " + std::to_string(n_layer) + " layers into "
      + std::to_string(k) + " stages");
  std::vector<std::uint32_t> bounds{0};
  for (std::uint32_t i = 1; i <= k; ++i)
    bounds.push_back(static_cast<std::uint32_t>(
      static_cast<std::uint64_t>(n_layer) * i / k));
  return bounds;
}

} // namespace exo::workload
