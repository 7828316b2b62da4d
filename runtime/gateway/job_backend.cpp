#include "runtime/gateway/job_backend.hpp"

#include "actors/attachables.hpp"
#include "core/text/line.hpp"
#include "messages/errors.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "messages/workload.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <iostream>
#include <optional>

namespace exo::gateway {

namespace {

/// Sent by the sink's on_close callback (a gateway thread) to its bridge.
using sink_closed_atom = caf::atom_constant<caf::atom("gwclosed")>;

} // namespace

struct job_backend::state {
  caf::actor_system* sys = nullptr;
  caf::actor coordinator;
  std::map<std::string, model_source> models;
  std::vector<model_entry> entries;
  mapping_limits limits;
  std::chrono::milliseconds resume_grace{0};
  std::string node; ///< its name, in log lines
  std::mutex mx;
  /// Speculative decoding, by model id: tokens proposed, and kept.
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> drafts;

  void count_draft(const std::string& model, std::uint64_t proposed,
                   std::uint64_t kept) {
    std::lock_guard<std::mutex> guard{mx};
    auto it = drafts.find(model);
    if (it == drafts.end())
      return; // a model without a draft
    it->second.first += proposed;
    it->second.second += kept;
  }
};

namespace {

/// One choice of the request: sequence i of the job.
struct choice_state {
  /// The index of its sequence's next token (a followed job's tokens are
  /// replayed: those already passed on are dropped).
  std::uint32_t next_index = 0;
  bool ended = false;
  std::unique_ptr<stop_filter> filter; ///< the template's text markers
};

struct bridge_state {
  std::shared_ptr<token_sink> sink;
  mapped_job mapped;
  /// The model's vocabulary: the texts of the tokens log-probabilities
  /// name.
  std::shared_ptr<const model::tokenizer> tokenizer;
  std::uint64_t job = 0;   ///< the coordinator's id, once started
  /// The coordinator that runs it, when not this node's (a resumed stream
  /// follows the job wherever it went): cancels go there.
  caf::actor runner;
  std::vector<choice_state> choices;
  std::size_t open_choices = 0;
  bool started = false;
  bool stream = false;     ///< streamed: a client that drops may resume
  std::chrono::milliseconds resume_grace{0};
  bool cancel_sent = false;
  bool closed = false;     ///< the sink closed, or we stopped
  bool ended = false;      ///< finish() or fail() was called
  /// The request's logprobs: the alternatives of each generated token (-1:
  /// none). The job's count may be larger (prompt_logprobs asks for more).
  std::int32_t token_top = -1;
  static inline const char* name = "exo.gateway_bridge";
};

using bridge_ptr = caf::stateful_actor<bridge_state>*;

void cancel_job(bridge_ptr self, const caf::actor& coordinator) {
  auto& st = self->state;
  bool was_closed = st.closed;
  st.closed = true;
  if (!st.started) {
    // A run waiting for memory ends now; one being placed is cancelled
    // when job_started arrives.
    if (!was_closed)
      self->send(coordinator, cancel_atom::value,
                 caf::actor_cast<caf::actor>(self));
    return;
  }
  if (st.cancel_sent)
    return;
  st.cancel_sent = true;
  self->request(st.runner ? st.runner : coordinator, std::chrono::seconds{10},
                cancel_atom::value, st.job)
    .then([](bool) {}, [](caf::error&) {});
}

/// The client's connection dropped: a streamed job that runs is left to
/// the coordinator for the resume grace (it cancels the job then, unless a
/// client follows it again); anything else is cancelled now.
void leave_job(bridge_ptr self, const caf::actor& coordinator) {
  auto& st = self->state;
  if (!st.stream || st.resume_grace.count() <= 0 || !st.started) {
    cancel_job(self, coordinator);
    return;
  }
  st.closed = true;
  if (st.cancel_sent)
    return;
  st.cancel_sent = true;
  self
    ->request(st.runner ? st.runner : coordinator, std::chrono::seconds{10},
              cancel_atom::value, st.job, caf::actor_cast<caf::actor>(self),
              static_cast<std::uint32_t>(st.resume_grace.count()))
    .then([](bool) {}, [](caf::error&) {});
}

api_error job_failure(const caf::error& err, bool started) {
  auto msg = error_message(err);
  if (msg.empty())
    msg = "the job failed (" + std::to_string(err.code()) + ")";
  if (err.category() == exo_error_category()
      && err.code() == static_cast<std::uint8_t>(exo_errc::invalid_argument))
    return invalid_request(msg);
  if (!started && err.category() == exo_error_category()
      && err.code() == static_cast<std::uint8_t>(exo_errc::out_of_memory))
    return no_room(msg);
  if (!started)
    return unavailable("no device can take this request now: " + msg);
  api_error e;
  e.status = 500;
  e.type = "server_error";
  e.code = "job_failed";
  e.message = msg;
  return e;
}

/// A resumed stream that found no job to follow (or one started with
/// another prompt), or one that cannot go on (it ended cancelled, failed):
/// 404 for the first, 409 for the others.
api_error resume_failure(const caf::error& err) {
  auto msg = error_message(err);
  if (msg.empty())
    msg = "the stream cannot be resumed (" + std::to_string(err.code()) + ")";
  if (err.category() == exo_error_category()
      && (err.code() == static_cast<std::uint8_t>(exo_errc::invalid_argument)
          || err.code()
               == static_cast<std::uint8_t>(exo_errc::unknown_handle)))
    return {404, msg, "not_found_error", "X-Exo-Resume", "job_not_found"};
  return {409, msg, "invalid_request_error", "X-Exo-Resume", "resume_failed"};
}

/// Choice i is over with `reason`: the text its filter held back, then its
/// end (the sink sends its finish_reason).
void end_choice(bridge_ptr self, std::uint32_t i, finish_reason reason) {
  auto& st = self->state;
  auto& c = st.choices[i];
  if (c.ended)
    return;
  c.ended = true;
  --st.open_choices;
  if (c.filter) { // text held back by the end-of-turn filter
    auto tail = c.filter->flush();
    if (!tail.empty() && !c.filter->stopped())
      st.sink->token(i, tail);
  }
  st.sink->end_choice(i, reason);
}

/// Choice i stops before its sequence ends (a stop string matched): its
/// sequence alone is stopped, or the job when it was the last choice.
void stop_choice(bridge_ptr self, std::uint32_t i,
                 const caf::actor& coordinator) {
  auto& st = self->state;
  end_choice(self, i, finish_reason::stop);
  if (st.open_choices == 0) {
    cancel_job(self, coordinator);
    return;
  }
  self->request(st.runner ? st.runner : coordinator, std::chrono::seconds{10},
                cancel_atom::value, st.job, i)
    .then([](bool) {}, [](caf::error&) {});
}

/// The job ended: each choice not over yet ends as its tokens say.
void end_with(bridge_ptr self, const job_report& r) {
  auto& st = self->state;
  if (st.ended)
    return;
  static const std::vector<std::int32_t> none;
  for (std::uint32_t i = 0; i < st.choices.size(); ++i)
    end_choice(self, i,
               finish_of(i < r.tokens.size() ? r.tokens[i] : none,
                         st.mapped.stop_ids, r.cancelled || st.closed));
  st.ended = true;
  usage u; // the prompt once, whatever n (the job counts every copy)
  u.prompt_tokens = st.mapped.prompt_tokens;
  u.cached_tokens = std::min<std::int64_t>(
    static_cast<std::int64_t>(r.cached_prompt_tokens), u.prompt_tokens);
  st.sink->finish(finish_reason::length, u);
}

/// A token's log-probabilities as the response shows them: the texts of
/// it and its first `top` alternatives (control tokens by name; an id
/// outside the vocabulary, which no job gives, by none).
token_logprob logprob_of(const job_token& e, const model::tokenizer& tok,
                         std::size_t top) {
  auto text = [&](std::int32_t id) {
    return id >= 0 && static_cast<std::size_t>(id) < tok.size()
             ? tok.piece(id, true)
             : std::string{};
  };
  token_logprob out;
  out.token = text(e.token);
  out.logprob = e.logprobs.logprob;
  const auto n = std::min({e.logprobs.top_ids.size(),
                           e.logprobs.top_logprobs.size(), top});
  for (std::size_t i = 0; i < n; ++i)
    out.top.push_back({text(e.logprobs.top_ids[i]),
                       e.logprobs.top_logprobs[i], e.logprobs.top_ids[i]});
  return out;
}

/// A prompt's scores as an echo's log-probabilities show them: every
/// token's text, the first one's without a log-probability. "" or what
/// is wrong with them (a peer's message: counts, ids and at most `top`
/// alternatives checked).
std::string prompt_logprobs_of(const job_prompt_scores& e,
                               const model::tokenizer& tok, std::size_t top,
                               std::vector<token_logprob>& out) {
  if (e.tokens.empty() || e.scores.size() + 1 != e.tokens.size())
    return "the job sent " + std::to_string(e.scores.size())
           + " prompt scores for a prompt of "
           + std::to_string(e.tokens.size()) + " tokens";
  for (auto& sc : e.scores) {
    if (sc.top_ids.size() > top || sc.top_logprobs.size() > top)
      return "the job sent a prompt score with more than "
             + std::to_string(top) + " alternatives";
    if (sc.rank == 0 || sc.rank > tok.size())
      return "the job sent a prompt score of rank " + std::to_string(sc.rank)
             + ", outside the vocabulary of " + std::to_string(tok.size());
  }
  auto text = [&](std::int32_t id, std::string& t) {
    if (id < 0 || static_cast<std::size_t>(id) >= tok.size())
      return false;
    t = tok.piece(id, true);
    return true;
  };
  out.clear();
  out.reserve(e.tokens.size());
  for (std::size_t i = 0; i < e.tokens.size(); ++i) {
    token_logprob lp;
    if (!text(e.tokens[i], lp.token))
      return "the job sent prompt token " + std::to_string(e.tokens[i])
             + ", outside the vocabulary";
    lp.id = e.tokens[i];
    if (i == 0) {
      lp.scored = false;
    } else {
      auto& sc = e.scores[i - 1];
      lp.logprob = sc.logprob;
      lp.rank = sc.rank;
      const auto n = std::min(sc.top_ids.size(), sc.top_logprobs.size());
      for (std::size_t k = 0; k < n; ++k) {
        token_logprob::alternative a;
        if (!text(sc.top_ids[k], a.token))
          return "the job sent prompt alternative "
                 + std::to_string(sc.top_ids[k]) + ", outside the vocabulary";
        a.logprob = sc.top_logprobs[k];
        a.id = sc.top_ids[k];
        lp.top.push_back(std::move(a));
      }
    }
    out.push_back(std::move(lp));
  }
  return {};
}

void fail_with(bridge_ptr self, api_error e) {
  auto& st = self->state;
  if (st.ended)
    return;
  st.ended = true;
  st.sink->fail(std::move(e));
}

/// Whether `err` says that no node holds the followed job (any more): a
/// node that died before a backup held it, a job that ended so long ago
/// that its tokens are not kept, a node that restarted.
bool no_node_has(const caf::error& err) {
  return err.category() == exo_error_category()
         && err.code() == static_cast<std::uint8_t>(exo_errc::unknown_handle);
}

/// Sends the job to the coordinator: run it, or with `follow` (a resumed
/// stream) follow it wherever it runs. A followed job that no node holds
/// runs again here, once, under the same id: the same request with the
/// same seed (the request's, or seed_of_id of its id) draws the same
/// tokens on the same kinds of devices (a row's bits depend neither on
/// its batch nor on the split), and the sink leaves out the bytes the
/// client has, as for a followed job. Its tokens come from index 0: those
/// a follow passed on already are dropped (choice_state::next_index).
void submit(bridge_ptr self, std::shared_ptr<job_backend::state> be,
            std::string model, bool follow) {
  auto& st = self->state;
  auto me = caf::actor_cast<caf::actor>(self);
  auto asked = follow ? self->request(be->coordinator, caf::infinite,
                                      attach_atom::value, st.mapped.job.name,
                                      workload::prompt_identity(st.mapped.job),
                                      me, true)
                      : self->request(be->coordinator, caf::infinite,
                                      run_atom::value, st.mapped.job, me);
  std::move(asked).then(
      [self, be, model](job_report& r) {
        be->count_draft(model, r.drafted, r.accepted);
        end_with(self, r);
        self->quit();
      },
      [self, be, model, follow](caf::error& err) {
        auto& st = self->state;
        if (follow && no_node_has(err) && !st.closed && !st.ended) {
          exo::text::line(std::cout)
            << "exo-node " << be->node << ": " << error_message(err)
            << ": running it again for its resumed stream" << std::endl;
          st.started = false;
          st.job = 0;
          st.runner = caf::actor{};
          st.cancel_sent = false;
          submit(self, be, model, false);
          return;
        }
        fail_with(self, follow && !st.started ? resume_failure(err)
                                              : job_failure(err, st.started));
        self->quit();
      });
}

caf::behavior bridge(bridge_ptr self, std::shared_ptr<job_backend::state> be,
                     std::shared_ptr<token_sink> sink,
                     completion_request req) {
  auto& st = self->state;
  st.sink = std::move(sink);
  st.stream = req.stream;
  st.token_top = req.logprobs;
  st.resume_grace = be->resume_grace;
  auto coordinator = be->coordinator;
  auto it = be->models.find(req.model);
  if (it == be->models.end()) { // the server checked; a stale id
    fail_with(self, model_not_found(req.model));
    self->quit();
    return {};
  }
  // No seed given: the id's, so that a node that runs the job again (a
  // resumed stream whose job no node has) draws the same numbers.
  st.mapped = map_request(it->second, req, be->limits, seed_of_id(req.id));
  st.tokenizer = it->second.tokenizer;
  if (st.mapped.error) {
    fail_with(self, *st.mapped.error);
    self->quit();
    return {};
  }
  st.choices.resize(st.mapped.job.sequences);
  st.open_choices = st.choices.size();
  if (!st.mapped.stop_strings.empty())
    for (auto& c : st.choices)
      c.filter = std::make_unique<stop_filter>(st.mapped.stop_strings);
  // The completion's id names the job: a client whose node dies resumes
  // the stream by it through another node.
  st.mapped.job.name = req.id;
  // A coordinator that goes away (the node stopping) may never answer.
  // The coordinator outlives every request: the monitor goes with the
  // bridge, or the coordinator would keep each bridge's memory.
  self->monitor(coordinator);
  demonitor_at_exit(self,
                    std::make_shared<caf::actor_addr>(coordinator.address()));
  self->set_down_handler([self](caf::down_msg&) {
    fail_with(self, unavailable("the node is stopping"));
    self->quit();
  });
  submit(self, be, req.model, req.resume);
  return {
    [](job_placed&) {},
    [](job_recovered&) {}, // the stream goes on: nothing to tell the client
    [self, coordinator](job_started& e) {
      auto& st = self->state;
      st.started = true;
      st.job = e.job;
      // A followed job's coordinator says so itself (another node's).
      if (auto from = caf::actor_cast<caf::actor>(self->current_sender());
          from && from != coordinator)
        st.runner = from;
      if (st.closed) // the client left while the job was placed
        leave_job(self, coordinator);
    },
    [self, coordinator](job_prompt_scores& e) {
      auto& st = self->state;
      if (e.seq >= st.choices.size() || st.closed || st.ended
          || !st.mapped.job.prompt_logprobs)
        return;
      std::vector<token_logprob> lps;
      const auto top = static_cast<std::size_t>(
        std::max(0, st.mapped.job.logprobs));
      if (auto why = prompt_logprobs_of(e, *st.tokenizer, top, lps);
          !why.empty()) {
        fail_with(self, job_failure(make_exo_error(exo_errc::failed_state,
                                                   why),
                                    true));
        cancel_job(self, coordinator);
        return;
      }
      st.sink->prompt_logprobs(e.seq, std::move(lps));
    },
    [self, coordinator](job_token& e) {
      auto& st = self->state;
      if (e.seq >= st.choices.size() || st.closed || st.ended)
        return;
      auto& c = st.choices[e.seq];
      if (c.ended || e.index < c.next_index)
        return;
      if (e.index > c.next_index) { // never silently: the text has a hole
        fail_with(self, job_failure(
                          make_exo_error(exo_errc::failed_state,
                                         "tokens " + std::to_string(
                                           c.next_index)
                                           + " to "
                                           + std::to_string(e.index - 1)
                                           + " of sequence "
                                           + std::to_string(e.seq)
                                           + " of the job did not arrive"),
                          true));
        cancel_job(self, coordinator);
        return;
      }
      ++c.next_index;
      if (st.mapped.stop_ids.count(e.token) != 0) {
        end_choice(self, e.seq, finish_reason::stop); // not its text
        return;
      }
      std::string text = std::move(e.piece);
      std::optional<token_logprob> lp;
      if (e.has_logprobs && st.token_top >= 0)
        lp = logprob_of(e, *st.tokenizer,
                        static_cast<std::size_t>(st.token_top));
      if (c.filter) {
        text = c.filter->feed(text);
        if (c.filter->stopped()) {
          if (!text.empty())
            st.sink->token(e.seq, text, lp ? &*lp : nullptr);
          stop_choice(self, e.seq, coordinator);
          return;
        }
      }
      // An empty piece (a control token) still counts as a token.
      switch (st.sink->token(e.seq, text, lp ? &*lp : nullptr)) {
        case sink_state::closed:
          leave_job(self, coordinator);
          return;
        case sink_state::choice_done: // the request's stop string
          stop_choice(self, e.seq, coordinator);
          return;
        default:
          break;
      }
      if (c.next_index >= st.mapped.job.n_gen) // all it may have
        end_choice(self, e.seq, finish_reason::length);
    },
    [self, coordinator](sink_closed_atom) {
      if (!self->state.closed)
        leave_job(self, coordinator);
    },
  };
}

} // namespace

job_backend::job_backend(caf::actor_system& sys, caf::actor coordinator,
                         std::vector<model_source> models,
                         mapping_limits limits,
                         std::chrono::milliseconds resume_grace,
                         std::string node)
  : state_(std::make_shared<state>()) {
  state_->node = std::move(node);
  state_->sys = &sys;
  state_->coordinator = std::move(coordinator);
  state_->limits = limits;
  state_->resume_grace = resume_grace;
  auto now = std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  for (auto& m : models) {
    state_->entries.push_back({m.id, now, "exo"});
    if (!m.draft.empty())
      state_->drafts[m.id] = {0, 0};
    auto id = m.id;
    state_->models.emplace(std::move(id), std::move(m));
  }
}

job_backend::~job_backend() = default;

void job_backend::complete(const completion_request& req,
                           std::shared_ptr<token_sink> sink) {
  auto a = state_->sys->spawn(bridge, state_, sink, req);
  // Runs on a gateway thread (or here, when already closed): a message,
  // never a wait.
  sink->on_close([a] { caf::anon_send(a, sink_closed_atom::value); });
}

tokenize_answer job_backend::tokenize(const tokenize_request& req) {
  // The models never change after construction: read without the lock.
  auto it = state_->models.find(req.model);
  if (it == state_->models.end()) // the server checked; a stale id
    return {{}, model_not_found(req.model)};
  return answer_tokenize(it->second, req, state_->limits);
}

std::vector<model_entry> job_backend::entries() const {
  return state_->entries;
}

void job_backend::collect(prometheus::text_writer& w) {
  std::lock_guard<std::mutex> guard{state_->mx};
  if (state_->drafts.empty())
    return;
  w.family("exo_speculative_proposed_tokens_total",
           "Tokens a served model's draft proposed (speculative decoding), "
           "over the jobs that ended.",
           prometheus::metric_type::counter);
  for (auto& [id, n] : state_->drafts)
    w.sample({{"model", id}}, static_cast<double>(n.first));
  w.family("exo_speculative_accepted_tokens_total",
           "Of them, those the model kept.",
           prometheus::metric_type::counter);
  for (auto& [id, n] : state_->drafts)
    w.sample({{"model", id}}, static_cast<double>(n.second));
}

} // namespace exo::gateway
