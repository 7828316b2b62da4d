// The gateway's bridge to the job coordinator (runtime/gateway/
// job_backend.hpp) against a scripted coordinator actor: tokens reach the
// sink as text, the end token ends the answer with finish_reason stop,
// a closed sink cancels the job, and job errors become OpenAI errors.

#include "core/gguf/gguf_writer.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "messages/errors.hpp"
#include "messages/registration.hpp"
#include "messages/workload.hpp"
#include "runtime/gateway/job_backend.hpp"
#include "test/support/process.hpp"

#include <caf/all.hpp>

#include <catch2/catch.hpp>

#include <condition_variable>
#include <map>
#include <thread>
#include <cstdlib>
#include <mutex>

using namespace exo;
using namespace exo::gateway;
using namespace std::chrono_literals;

namespace {

/// Records what the bridge tells it; close() acts as a client leaving.
/// Choice 0's tokens are tokens_, every choice's in choice_tokens_; a
/// choice in done_after_ answers choice_done at that many tokens (its stop
/// string, as the server's sink finds it).
class recording_sink : public token_sink {
public:
  sink_state token(std::uint32_t choice, std::string_view text,
                   const token_logprob* logprob) override {
    std::lock_guard<std::mutex> g{mx_};
    if (closed_)
      return sink_state::closed;
    if (ended_choices_.count(choice) != 0)
      return sink_state::choice_done;
    if (choice == 0) {
      tokens_.emplace_back(text);
      if (logprob)
        logprobs_.push_back(*logprob);
    }
    auto& mine = choice_tokens_[choice];
    mine.emplace_back(text);
    cv_.notify_all();
    if (auto it = done_after_.find(choice);
        it != done_after_.end() && mine.size() == it->second) {
      ended_choices_[choice] = finish_reason::stop;
      return sink_state::choice_done;
    }
    return sink_state::open;
  }
  void prompt_logprobs(std::uint32_t choice,
                       std::vector<token_logprob> tokens) override {
    std::lock_guard<std::mutex> g{mx_};
    // Before the choice's first token, as the bridge must give them.
    CHECK(choice_tokens_[choice].empty());
    prompt_logprobs_[choice] = std::move(tokens);
  }
  std::map<std::uint32_t, std::vector<token_logprob>> prompt_logprobs_;
  void end_choice(std::uint32_t choice, finish_reason r) override {
    std::lock_guard<std::mutex> g{mx_};
    ended_choices_.emplace(choice, r);
    ++end_choice_calls_;
  }
  void finish(finish_reason r, usage u) override {
    std::lock_guard<std::mutex> g{mx_};
    ++ends_;
    // The bridge ends every choice (end_choice) before it finishes.
    CHECK(r == finish_reason::length);
    usage_ = u;
    cv_.notify_all();
  }
  void fail(api_error e) override {
    std::lock_guard<std::mutex> g{mx_};
    ++ends_;
    error_ = std::move(e);
    failed_ = true;
    cv_.notify_all();
  }
  void on_ready(std::function<void()> fn) override {
    fn();
  }
  void on_close(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> g{mx_};
      if (!closed_) {
        close_cbs_.push_back(std::move(fn));
        return;
      }
    }
    fn();
  }
  bool closed() const override {
    std::lock_guard<std::mutex> g{mx_};
    return closed_;
  }
  void close() {
    std::vector<std::function<void()>> cbs;
    {
      std::lock_guard<std::mutex> g{mx_};
      closed_ = true;
      cbs.swap(close_cbs_);
    }
    for (auto& f : cbs)
      f();
  }
  bool wait(const std::function<bool()>& pred) {
    std::unique_lock<std::mutex> l{mx_};
    return cv_.wait_for(l, 30s, pred);
  }
  bool ended() {
    return wait([this] { return ends_ > 0; });
  }

  mutable std::mutex mx_;
  std::condition_variable cv_;
  std::vector<std::string> tokens_;
  std::vector<token_logprob> logprobs_; ///< choice 0's
  std::map<std::uint32_t, std::vector<std::string>> choice_tokens_;
  std::map<std::uint32_t, std::size_t> done_after_;
  std::map<std::uint32_t, finish_reason> ended_choices_;
  int end_choice_calls_ = 0;
  std::vector<std::function<void()>> close_cbs_;
  int ends_ = 0;
  bool closed_ = false;
  bool failed_ = false;
  usage usage_;
  api_error error_;
};

/// What the scripted coordinator saw.
struct script_log {
  std::mutex mx;
  std::vector<workload::job_request> requests;
  std::vector<std::uint64_t> cancels;
  /// (job, sequence) of each sequence stopped alone.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> seq_cancels;
  std::vector<caf::actor_addr> withdrawn;
  /// (job, grace ms) of each client left to the resume grace.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> left;
  /// (key, prompt) of each followed job (a resumed stream), and what the
  /// script answers: no job has it, another prompt, it cannot go on.
  std::vector<std::pair<std::string, std::string>> follows;
  exo_errc follow_answer = exo_errc::unknown_handle;
};

enum class script {
  tokens_then_eos,
  choices, ///< three sequences: the script's tokens, 8 tokens, 8 tokens
  run_until_cancel,
  refuse,
  fail_early,
  no_room,
  waits_for_room
};

caf::behavior coordinator(caf::event_based_actor* self, script s,
                          std::shared_ptr<script_log> log,
                          std::vector<std::int32_t> ids,
                          std::vector<std::string> pieces) {
  auto pending = std::make_shared<caf::response_promise>();
  return {
    [=](run_atom, workload::job_request& r,
        caf::actor& listener) -> caf::result<job_report> {
      {
        std::lock_guard<std::mutex> g{log->mx};
        log->requests.push_back(r);
      }
      if (s == script::refuse)
        return make_exo_error(exo_errc::invalid_argument, "bad prompt");
      if (s == script::fail_early)
        return make_exo_error(exo_errc::failed_state,
                              "no placement: the model does not fit");
      if (s == script::no_room) // waited models.admission_wait_ms
        return make_exo_error(exo_errc::out_of_memory,
                              "no plan fits; waited 30.0 s for the memory "
                              "other jobs hold");
      if (s == script::waits_for_room) { // nothing placed until withdrawn
        *pending = self->make_response_promise();
        return caf::delegated<job_report>{};
      }
      self->send(listener, job_started{7});
      job_report rep;
      rep.job = 7;
      rep.prompt_tokens = 5;
      if (s == script::choices) { // sequences 1 and 2 run to n_gen
        rep.tokens.resize(3);
        for (std::uint32_t i = 0; i < 8; ++i)
          for (std::uint32_t q = 0; q < 3; ++q) {
            if (q == 0 && i >= ids.size())
              continue;
            auto id = q == 0 ? ids[i] : static_cast<std::int32_t>(20 + i);
            auto piece = q == 0 ? pieces[i]
                                : std::to_string(q) + "." + std::to_string(i)
                                    + " ";
            self->send(listener, job_token{7, q, id, piece, i});
            rep.tokens[q].push_back(id);
          }
        rep.prompt_tokens = 3 * 5; // every copy of the prompt
        return rep;
      }
      rep.tokens.emplace_back();
      if (r.prompt_logprobs) { // as a job sends them, before the tokens
        job_prompt_scores e{7, 0, {1, 10, 11}, {}};
        for (std::int32_t t = 0; t < 2; ++t) {
          model::token_logprobs lp;
          lp.logprob = -1.5f - static_cast<float>(t);
          lp.rank = static_cast<std::uint32_t>(t + 2);
          for (std::int32_t k = 0; k < r.logprobs; ++k) {
            lp.top_ids.push_back(10 + k);
            lp.top_logprobs.push_back(-0.5f - static_cast<float>(k));
          }
          e.scores.push_back(lp);
        }
        if (r.prompt == "bad scores")
          e.scores.pop_back(); // one short of the prompt's tokens
        if (r.prompt == "bad rank")
          e.scores.back().rank = 0;
        self->send(listener, e);
      }
      for (std::size_t i = 0; i < ids.size(); ++i) {
        job_token e{7, 0, ids[i], pieces[i], static_cast<std::uint32_t>(i)};
        if (r.logprobs >= 0) { // as a job that computes them sends them
          e.has_logprobs = true;
          e.logprobs.logprob = -0.25f * static_cast<float>(i + 1);
          for (std::int32_t k = 0; k < r.logprobs; ++k) {
            e.logprobs.top_ids.push_back(k == 0 ? ids[i] : 3 + k);
            e.logprobs.top_logprobs.push_back(-0.25f * (i + 1) - k);
          }
        }
        self->send(listener, e);
        rep.tokens[0].push_back(ids[i]);
      }
      rep.cached_prompt_tokens = 2; // from the stages' prefix cache
      rep.drafted = 6; // as a job with a draft reports (else both 0)
      rep.accepted = 4;
      if (s == script::tokens_then_eos)
        return rep;
      *pending = self->make_response_promise();
      return caf::delegated<job_report>{};
    },
    [=](attach_atom, std::string& key, std::string& prompt, caf::actor&,
        bool forward) -> caf::result<job_report> {
      CHECK(forward); // the gateway's node asks the others
      std::lock_guard<std::mutex> g{log->mx};
      log->follows.emplace_back(key, prompt);
      return make_exo_error(log->follow_answer,
                            log->follow_answer == exo_errc::unknown_handle
                              ? "no node has job " + key
                              : "job " + key + " was cancelled (or another "
                                               "prompt)");
    },
    [=](cancel_atom, caf::actor& listener) {
      std::lock_guard<std::mutex> g{log->mx};
      log->withdrawn.push_back(listener.address());
      if (s == script::waits_for_room)
        pending->deliver(make_exo_error(exo_errc::failed_state,
                                        "cancelled while it waited"));
    },
    [=](cancel_atom, std::uint64_t id, caf::actor&, std::uint32_t grace) {
      // The job runs on; the test ends it as the grace's end would.
      std::lock_guard<std::mutex> g{log->mx};
      log->left.emplace_back(id, grace);
      return true;
    },
    [=](cancel_atom, std::uint64_t id, std::uint32_t seq) {
      std::lock_guard<std::mutex> g{log->mx};
      log->seq_cancels.emplace_back(id, seq);
      return true;
    },
    [=](cancel_atom, std::uint64_t id) {
      {
        std::lock_guard<std::mutex> g{log->mx};
        log->cancels.push_back(id);
      }
      job_report rep;
      rep.job = id;
      rep.prompt_tokens = 5;
      rep.cancelled = true;
      rep.tokens.emplace_back(ids);
      pending->deliver(rep);
      return true;
    },
  };
}

struct fixture {
  std::string dir = test::temp_dir("exo-job-backend");
  model_source model;
  std::int32_t eos = -1;
  fixture() {
    model::test_model_options o;
    auto w = model::build_test_model(o);
    w.write(dir + "/m.gguf");
    model = load_model_source("m", dir + "/m.gguf");
    eos = model.tokenizer->eos();
  }
  ~fixture() {
    std::system(("rm -rf " + dir).c_str());
  }
};

caf::actor_system_config& config() {
  static caf::actor_system_config cfg = [] {
    caf::actor_system_config c;
    register_messages(c);
    return c;
  }();
  return cfg;
}

/// The scripted coordinator most tests use: "Hel", "lo", then the end of
/// text, and the job's report.
caf::actor hello_coordinator(caf::actor_system& sys, const fixture& fx,
                             std::shared_ptr<script_log> log) {
  return sys.spawn(coordinator, script::tokens_then_eos, std::move(log),
                   std::vector<std::int32_t>{10, 11, fx.eos},
                   std::vector<std::string>{"Hel", "lo", ""});
}

completion_request request(const std::string& prompt) {
  completion_request r;
  r.model = "m";
  r.prompt = prompt;
  r.max_tokens = 8;
  r.temperature = 0;
  return r;
}

} // namespace

TEST_CASE("the bridge streams a job's tokens and ends at its end token") {
  fixture fx;
  caf::actor_system sys{config()};
  auto log = std::make_shared<script_log>();
  auto coord = hello_coordinator(sys, fx, log);
  {
    job_backend be{sys, coord, {fx.model}};
    CHECK(be.entries().size() == 1);
    auto sink = std::make_shared<recording_sink>();
    be.complete(request("Once upon a time"), sink);
    REQUIRE(sink->ended());
    CHECK_FALSE(sink->failed_);
    CHECK(sink->tokens_ == std::vector<std::string>{"Hel", "lo"});
    CHECK(sink->ended_choices_.at(0) == finish_reason::stop);
    // The prompt's tokens as the gateway maps it (BOS and the text).
    CHECK(sink->usage_.prompt_tokens
          == static_cast<std::int64_t>(
            fx.model.tokenizer
              ->encode("Once upon a time", fx.model.tokenizer->add_bos())
              .size()));
    CHECK(sink->usage_.cached_tokens == 2);
    std::lock_guard<std::mutex> g{log->mx};
    REQUIRE(log->requests.size() == 1);
    CHECK(log->requests[0].prompt == "Once upon a time");
    CHECK(log->requests[0].n_gen == 8);
    CHECK(log->requests[0].sampling.temperature == 0.0f);
    CHECK(log->cancels.empty());
  }
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
}

TEST_CASE("the bridge passes each token's log-probabilities on with the "
          "texts of it and its alternatives") {
  fixture fx;
  caf::actor_system sys{config()};
  auto log = std::make_shared<script_log>();
  auto coord = hello_coordinator(sys, fx, log);
  {
    job_backend be{sys, coord, {fx.model}};
    auto r = request("Once upon a time");
    r.logprobs = 2;
    auto sink = std::make_shared<recording_sink>();
    be.complete(r, sink);
    REQUIRE(sink->ended());
    CHECK(sink->tokens_ == std::vector<std::string>{"Hel", "lo"});
    REQUIRE(sink->logprobs_.size() == 2);
    auto& tok = *fx.model.tokenizer;
    for (std::size_t i = 0; i < 2; ++i) {
      auto& l = sink->logprobs_[i];
      CHECK(l.token == tok.piece(10 + static_cast<std::int32_t>(i), true));
      CHECK(l.logprob == -0.25f * static_cast<float>(i + 1));
      REQUIRE(l.top.size() == 2);
      CHECK(l.top[0].token == l.token);
      CHECK(l.top[1].token == tok.piece(4, true));
      CHECK(l.top[1].logprob == -0.25f * (i + 1) - 1);
    }
    std::lock_guard<std::mutex> g{log->mx};
    REQUIRE(log->requests.size() == 1);
    CHECK(log->requests[0].logprobs == 2); // the job computes them
  }
  {
    // Not asked for: none (the request's -1 is the job's).
    job_backend be{sys, coord, {fx.model}};
    auto sink = std::make_shared<recording_sink>();
    be.complete(request("Once upon a time"), sink);
    REQUIRE(sink->ended());
    CHECK(sink->logprobs_.empty());
    std::lock_guard<std::mutex> g{log->mx};
    CHECK(log->requests.back().logprobs == -1);
  }
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
}

TEST_CASE("the bridge passes a scored prompt's tokens on before the first "
          "token, and fails a job whose scores do not fit its prompt") {
  fixture fx;
  caf::actor_system sys{config()};
  auto log = std::make_shared<script_log>();
  auto coord = hello_coordinator(sys, fx, log);
  auto& tok = *fx.model.tokenizer;
  // Runs `r` through a bridge to its end: what the sink recorded.
  auto complete = [&](const completion_request& r) {
    job_backend be{sys, coord, {fx.model}};
    auto sink = std::make_shared<recording_sink>();
    be.complete(r, sink);
    REQUIRE(sink->ended());
    return sink;
  };
  {
    auto r = request("Once upon a time");
    r.logprobs = 1;
    r.echo = true;
    auto sink = complete(r);
    CHECK_FALSE(sink->failed_);
    CHECK(sink->tokens_ == std::vector<std::string>{"Hel", "lo"});
    REQUIRE(sink->prompt_logprobs_.count(0) == 1);
    auto& p = sink->prompt_logprobs_[0];
    REQUIRE(p.size() == 3);
    CHECK(p[0].token == tok.piece(1, true));
    CHECK_FALSE(p[0].scored);
    CHECK(p[0].id == 1);
    for (std::size_t i = 1; i < 3; ++i) {
      CHECK(p[i].scored);
      CHECK(p[i].token == tok.piece(9 + static_cast<std::int32_t>(i), true));
      CHECK(p[i].id == 9 + static_cast<std::int32_t>(i));
      CHECK(p[i].rank == i + 1);
      CHECK(p[i].logprob == -0.5f - static_cast<float>(i));
      REQUIRE(p[i].top.size() == 1);
      CHECK(p[i].top[0].token == tok.piece(10, true));
      CHECK(p[i].top[0].id == 10);
    }
    CHECK(sink->logprobs_.size() == 2);
    std::lock_guard<std::mutex> g{log->mx};
    CHECK(log->requests.back().prompt_logprobs);
  }
  {
    // vLLM's prompt_logprobs without logprobs: the job scores with 3
    // alternatives (and so computes the generated tokens' too), the sink
    // gets the prompt's and no generated token's.
    auto r = request("Once upon a time");
    r.prompt_logprobs = 3;
    auto sink = complete(r);
    CHECK_FALSE(sink->failed_);
    REQUIRE(sink->prompt_logprobs_.count(0) == 1);
    CHECK(sink->prompt_logprobs_[0][1].top.size() == 3);
    CHECK(sink->tokens_ == std::vector<std::string>{"Hel", "lo"});
    CHECK(sink->logprobs_.empty());
    std::lock_guard<std::mutex> g{log->mx};
    CHECK(log->requests.back().prompt_logprobs);
    CHECK(log->requests.back().logprobs == 3);
  }
  {
    // logprobs 1 and prompt_logprobs 2: the generated tokens' cut to 1.
    auto r = request("Once upon a time");
    r.logprobs = 1;
    r.prompt_logprobs = 2;
    auto sink = complete(r);
    REQUIRE(sink->logprobs_.size() == 2);
    CHECK(sink->logprobs_[0].top.size() == 1);
    CHECK(sink->prompt_logprobs_[0][1].top.size() == 2);
  }
  {
    auto r = request("bad rank");
    r.prompt_logprobs = 0;
    auto sink = complete(r);
    CHECK(sink->failed_);
    CHECK_THAT(sink->error_.message, Catch::Contains("of rank 0"));
  }
  {
    auto r = request("bad scores");
    r.logprobs = 1;
    r.echo = true;
    auto sink = complete(r);
    CHECK(sink->failed_);
    CHECK_THAT(sink->error_.message,
               Catch::Contains("1 prompt scores for a prompt of 3 tokens"));
    CHECK(sink->prompt_logprobs_.empty());
  }
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
}

TEST_CASE("a served model's draft: /metrics counts the tokens it proposed "
          "and those the model kept") {
  fixture fx;
  caf::actor_system sys{config()};
  auto log = std::make_shared<script_log>();
  auto coord = sys.spawn(coordinator, script::tokens_then_eos, log,
                         std::vector<std::int32_t>{10, fx.eos},
                         std::vector<std::string>{"Hi", ""});
  {
    auto plain = fx.model;
    plain.id = "plain";
    auto drafted = fx.model;
    drafted.draft = fx.dir + "/m.gguf"; // the coordinator is scripted
    job_backend be{sys, coord, {drafted, plain}};
    auto scrape = [&] {
      prometheus::text_writer w;
      be.collect(w);
      return w.str();
    };
    // Only the model with a draft, at 0 before any job.
    auto before = scrape();
    INFO(before);
    CHECK(before.find("exo_speculative_proposed_tokens_total{model=\"m\"} 0")
          != std::string::npos);
    CHECK(before.find("model=\"plain\"") == std::string::npos);
    for (const char* model : {"m", "m", "plain"}) {
      auto r = request("Once upon a time");
      r.model = model;
      auto sink = std::make_shared<recording_sink>();
      be.complete(r, sink);
      REQUIRE(sink->ended());
      CHECK(sink->tokens_ == std::vector<std::string>{"Hi"});
    }
    // Two jobs of m at 6 proposed, 4 kept each; plain's are not counted.
    auto after = scrape();
    INFO(after);
    CHECK(after.find("exo_speculative_proposed_tokens_total{model=\"m\"} 12")
          != std::string::npos);
    CHECK(after.find("exo_speculative_accepted_tokens_total{model=\"m\"} 8")
          != std::string::npos);
    CHECK(after.find("model=\"plain\"") == std::string::npos);
    // A backend whose models have no draft adds nothing.
    job_backend none{sys, coord, {plain}};
    prometheus::text_writer w;
    none.collect(w);
    CHECK(w.str().empty());
  }
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
}

TEST_CASE("n choices are the job's sequences, each ends on its own, a "
          "choice whose stop string matched stops its sequence alone") {
  fixture fx;
  caf::actor_system sys{config()};
  auto log = std::make_shared<script_log>();
  auto coord = sys.spawn(coordinator, script::choices, log,
                         std::vector<std::int32_t>{10, 11, fx.eos},
                         std::vector<std::string>{"Hel", "lo", ""});
  {
    job_backend be{sys, coord, {fx.model}};
    auto sink = std::make_shared<recording_sink>();
    sink->done_after_[2] = 2; // choice 2's stop string after 2 tokens
    auto req = request("Once upon a time");
    req.n = 3;
    be.complete(req, sink);
    REQUIRE(sink->ended());
    CHECK_FALSE(sink->failed_);
    std::lock_guard<std::mutex> g{sink->mx_};
    // Choice 0 ends at its end token, choice 1 with all its 8 tokens,
    // choice 2 at its stop string: none by the job's end.
    CHECK(sink->choice_tokens_[0] == std::vector<std::string>{"Hel", "lo"});
    CHECK(sink->choice_tokens_[1].size() == 8);
    CHECK(sink->choice_tokens_[1].front() == "1.0 ");
    CHECK(sink->choice_tokens_[2]
          == std::vector<std::string>{"2.0 ", "2.1 "});
    CHECK(sink->ended_choices_[0] == finish_reason::stop);
    CHECK(sink->ended_choices_[1] == finish_reason::length);
    CHECK(sink->ended_choices_[2] == finish_reason::stop);
    // The prompt counts once, not once per sequence.
    CHECK(sink->usage_.prompt_tokens
          == static_cast<std::int64_t>(
            fx.model.tokenizer
              ->encode("Once upon a time", fx.model.tokenizer->add_bos())
              .size()));
    // The stop reaches the coordinator after the sink ended (the scripted
    // job answered at once): wait for it, bounded.
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard<std::mutex> lg{log->mx};
        if (!log->seq_cancels.empty())
          break;
      }
      std::this_thread::sleep_for(10ms);
    }
    std::lock_guard<std::mutex> lg{log->mx};
    REQUIRE(log->requests.size() == 1);
    CHECK(log->requests[0].sequences == 3);
    using stop = std::pair<std::uint64_t, std::uint32_t>;
    CHECK(log->seq_cancels == std::vector<stop>{{7, 2}});
    CHECK(log->cancels.empty()); // the job itself is not cancelled
  }
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
}

TEST_CASE("a job that generated all it may ends with length") {
  fixture fx;
  caf::actor_system sys{config()};
  auto log = std::make_shared<script_log>();
  auto coord = sys.spawn(coordinator, script::tokens_then_eos, log,
                         std::vector<std::int32_t>{10, 11},
                         std::vector<std::string>{"a", "b"});
  {
    job_backend be{sys, coord, {fx.model}};
    auto sink = std::make_shared<recording_sink>();
    be.complete(request("x"), sink);
    REQUIRE(sink->ended());
    CHECK(sink->ended_choices_.at(0) == finish_reason::length);
  }
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
}

TEST_CASE("a client that leaves cancels its job") {
  fixture fx;
  caf::actor_system sys{config()};
  auto log = std::make_shared<script_log>();
  auto coord = sys.spawn(coordinator, script::run_until_cancel, log,
                         std::vector<std::int32_t>{10},
                         std::vector<std::string>{"a"});
  {
    // A resume grace applies to streams only: this request is not one.
    job_backend be{sys, coord, {fx.model}, {}, 1500ms};
    auto sink = std::make_shared<recording_sink>();
    be.complete(request("x"), sink);
    REQUIRE(sink->wait([&] { return !sink->tokens_.empty(); }));
    sink->close();
    REQUIRE(sink->ended());
    CHECK(sink->ended_choices_.at(0) == finish_reason::stop);
    std::lock_guard<std::mutex> g{log->mx};
    CHECK(log->cancels == std::vector<std::uint64_t>{7});
    CHECK(log->left.empty());
  }
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
}

TEST_CASE("a streaming client that leaves hands its job to the resume "
          "grace, and without a grace it cancels") {
  fixture fx;
  for (auto grace : {1500ms, 0ms}) {
    INFO("grace " << grace.count() << " ms");
    caf::actor_system sys{config()};
    auto log = std::make_shared<script_log>();
    auto coord = sys.spawn(coordinator, script::run_until_cancel, log,
                           std::vector<std::int32_t>{10},
                           std::vector<std::string>{"a"});
    {
      job_backend be{sys, coord, {fx.model}, {}, grace};
      auto sink = std::make_shared<recording_sink>();
      auto req = request("x");
      req.stream = true;
      be.complete(req, sink);
      REQUIRE(sink->wait([&] { return !sink->tokens_.empty(); }));
      sink->close();
      sink->close(); // once
      if (grace.count() > 0) {
        for (int i = 0; i < 500; ++i) {
          {
            std::lock_guard<std::mutex> g{log->mx};
            if (!log->left.empty())
              break;
          }
          std::this_thread::sleep_for(10ms);
        }
        {
          std::lock_guard<std::mutex> g{log->mx};
          using left = std::pair<std::uint64_t, std::uint32_t>;
          CHECK(log->left == std::vector<left>{{7, 1500}});
          CHECK(log->cancels.empty());
        }
        // The grace ends with nobody back: the coordinator cancels it.
        caf::anon_send(coord, cancel_atom::value, std::uint64_t{7});
      }
      REQUIRE(sink->ended());
      std::lock_guard<std::mutex> g{log->mx};
      CHECK(log->cancels == std::vector<std::uint64_t>{7});
      if (grace.count() == 0)
        CHECK(log->left.empty());
    }
    caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
  }
}

TEST_CASE("a client that leaves before its job starts withdraws it, once") {
  fixture fx;
  caf::actor_system sys{config()};
  auto log = std::make_shared<script_log>();
  auto coord = sys.spawn(coordinator, script::waits_for_room, log,
                         std::vector<std::int32_t>{},
                         std::vector<std::string>{});
  {
    job_backend be{sys, coord, {fx.model}};
    auto sink = std::make_shared<recording_sink>();
    be.complete(request("x"), sink);
    // The request reaches the coordinator, which keeps it waiting.
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard<std::mutex> g{log->mx};
        if (!log->requests.empty())
          break;
      }
      std::this_thread::sleep_for(10ms);
    }
    sink->close();
    sink->close(); // a second close sends nothing more
    REQUIRE(sink->ended());
    std::lock_guard<std::mutex> g{log->mx};
    CHECK(log->withdrawn.size() == 1);
    CHECK(log->cancels.empty());
  }
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
}

TEST_CASE("job errors become OpenAI errors, so do refused mappings") {
  fixture fx;
  caf::actor_system sys{config()};
  auto log = std::make_shared<script_log>();
  auto refuse = sys.spawn(coordinator, script::refuse, log,
                          std::vector<std::int32_t>{},
                          std::vector<std::string>{});
  auto early = sys.spawn(coordinator, script::fail_early, log,
                         std::vector<std::int32_t>{},
                         std::vector<std::string>{});
  auto full = sys.spawn(coordinator, script::no_room, log,
                        std::vector<std::int32_t>{},
                        std::vector<std::string>{});
  {
    // No room while other jobs hold the memory: 429 (the server adds
    // Retry-After), a client retries later.
    job_backend c{sys, full, {fx.model}};
    auto sink = std::make_shared<recording_sink>();
    c.complete(request("x"), sink);
    REQUIRE(sink->ended());
    CHECK(sink->error_.status == 429);
    CHECK(sink->error_.code == "insufficient_capacity");
    CHECK(sink->error_.message.find("waited 30.0 s") != std::string::npos);
  }
  caf::anon_send_exit(full, caf::exit_reason::user_shutdown);
  {
    job_backend a{sys, refuse, {fx.model}};
    auto sink = std::make_shared<recording_sink>();
    a.complete(request("x"), sink);
    REQUIRE(sink->ended());
    CHECK(sink->failed_);
    CHECK(sink->error_.status == 400);
    CHECK(sink->error_.message == "bad prompt");

    job_backend b{sys, early, {fx.model}};
    sink = std::make_shared<recording_sink>();
    b.complete(request("x"), sink);
    REQUIRE(sink->ended());
    CHECK(sink->error_.status == 503);
    CHECK(sink->error_.message.find("does not fit") != std::string::npos);

    // A chat on a model without a template never reaches the coordinator.
    sink = std::make_shared<recording_sink>();
    auto chat = request("");
    chat.kind = endpoint_kind::chat_completions;
    chat.messages = {{"user", "hi", ""}};
    b.complete(chat, sink);
    REQUIRE(sink->ended());
    CHECK(sink->error_.status == 400);
    CHECK(sink->error_.code == "no_chat_template");
    std::lock_guard<std::mutex> g{log->mx};
    CHECK(log->requests.size() == 3);
  }
  caf::anon_send_exit(refuse, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(early, caf::exit_reason::user_shutdown);
}

TEST_CASE("a resumed stream whose job no node has runs it again under its "
          "id, seeded by it, but not a job that cannot go on or another "
          "prompt") {
  fixture fx;
  caf::actor_system sys{config()};
  auto log = std::make_shared<script_log>();
  auto coord = hello_coordinator(sys, fx, log);
  auto sampled = [](const std::string& id, bool resume) {
    auto r = request("Once upon a time");
    r.id = id;
    r.temperature = 0.8;
    r.stream = true;
    r.resume = resume;
    return r;
  };
  // The seed of a request that gives none is its id's: the same wherever
  // the id is run, another for another id (the counter's next).
  CHECK(seed_of_id("cmpl-0123456789abcdef-1")
        == seed_of_id(std::string{"cmpl-0123456789abcdef-1"}));
  CHECK(seed_of_id("cmpl-0123456789abcdef-1")
        != seed_of_id("cmpl-0123456789abcdef-2"));
  // Pinned: nodes of one cluster must agree on it (a change of the hash is
  // a change of the wire).
  CHECK(seed_of_id("cmpl-0123456789abcdef-1") == 0xf5e29090012e0752ull);
  {
    job_backend be{sys, coord, {fx.model}};
    // First run: the job is named by the id, seeded by it.
    auto first = std::make_shared<recording_sink>();
    be.complete(sampled("cmpl-0123456789abcdef-1", false), first);
    REQUIRE(first->ended());
    // Resumed after its node died, no node having it: followed first,
    // then run again, the same request with the same seed.
    auto again = std::make_shared<recording_sink>();
    be.complete(sampled("cmpl-0123456789abcdef-1", true), again);
    REQUIRE(again->ended());
    CHECK_FALSE(again->failed_);
    CHECK(again->tokens_ == std::vector<std::string>{"Hel", "lo"});
    CHECK(again->ended_choices_.at(0) == finish_reason::stop);
    // A request that gives its seed keeps it.
    auto seeded = sampled("cmpl-0123456789abcdef-3", true);
    seeded.seed = 42;
    auto third = std::make_shared<recording_sink>();
    be.complete(seeded, third);
    REQUIRE(third->ended());
    CHECK_FALSE(third->failed_);
    {
      std::lock_guard<std::mutex> g{log->mx};
      REQUIRE(log->requests.size() == 3);
      CHECK(log->requests[0].name == "cmpl-0123456789abcdef-1");
      CHECK(log->requests[0].sampling.seed
            == seed_of_id("cmpl-0123456789abcdef-1"));
      CHECK(log->requests[1].name == log->requests[0].name);
      CHECK(log->requests[1].sampling.seed == log->requests[0].sampling.seed);
      CHECK(log->requests[1].prompt == log->requests[0].prompt);
      CHECK(log->requests[2].sampling.seed == 42u);
      REQUIRE(log->follows.size() == 2);
      CHECK(log->follows[0].first == "cmpl-0123456789abcdef-1");
      CHECK(log->follows[0].second
            == workload::prompt_identity(log->requests[0]));
    }
    // A job that ended cancelled (or failed): 409, nothing runs; another
    // prompt than the job's: 404, nothing runs.
    for (auto [answer, status] :
         {std::pair{exo_errc::failed_state, 409},
          std::pair{exo_errc::invalid_argument, 404}}) {
      {
        std::lock_guard<std::mutex> g{log->mx};
        log->follow_answer = answer;
      }
      auto refused = std::make_shared<recording_sink>();
      be.complete(sampled("cmpl-0123456789abcdef-4", true), refused);
      REQUIRE(refused->ended());
      CHECK(refused->failed_);
      CHECK(refused->error_.status == status);
      CHECK(refused->tokens_.empty());
      std::lock_guard<std::mutex> g{log->mx};
      CHECK(log->requests.size() == 3);
    }
  }
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
}
