#pragma once

/// The gateway's side of the contract with whatever runs completions (the
/// job coordinator, or a test backend): the server parses and admits a
/// request, hands it to completion_backend::complete with a token_sink,
/// and turns what the sink receives into the HTTP answer (one JSON object,
/// or server-sent events).
///
/// ```
///  client --POST--> server --complete(req, sink)--> backend
///                     ^                               |
///                     |   token(i, text) ...          |  any thread,
///                     |   end_choice(i, reason) ...   |  never blocks
///                     '-- finish(reason, usage) ------'
///
///  token() answers: open        go on
///                   full        the client reads slower than tokens come:
///                               pause until the on_ready callback runs
///                   choice_done this choice is over (its stop string
///                               matched): stop generating it, the others
///                               go on
///                   closed      stop (client gone, every choice's stop
///                               string matched, server stopping), then
///                               call finish or fail
/// ```
///
/// A request has req.n choices (0 to n - 1); a backend that generates them
/// as it goes ends each with end_choice() when it is over (its end token,
/// all the tokens it may have), so that a stream says so at once;
/// finish() ends the choices not ended yet.
///
/// Rules: complete() returns without waiting for generation; exactly one
/// of finish() or fail() follows every complete(), from any thread, also
/// after the sink closed (that is when the admission slot is given back);
/// the sink's calls never block and may be made from any thread.

#include "core/gateway/api_error.hpp"
#include "core/gateway/prometheus.hpp"
#include "core/gateway/request.hpp"
#include "core/gateway/response.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

namespace exo::gateway {

/// What token() tells the backend.
enum class sink_state {
  open,        ///< Go on.
  full,        ///< Pause until on_ready's callback runs.
  choice_done, ///< Stop generating this choice; the others go on.
  closed,      ///< Stop generating; then call finish() or fail().
};

/// Receives the output of one completion. Thread-safe.
class token_sink {
public:
  virtual ~token_sink() = default;

  /// One generated token's text for choice `choice` (may end inside a
  /// UTF-8 character: the gateway holds incomplete characters back), with
  /// its log-probabilities when the request asked for them (else
  /// nullptr): they go out with the chunk that completes the token's text,
  /// and not when a stop string cut it. A token of a choice that ended, or
  /// of no choice of the request, is dropped (choice_done).
  virtual sink_state token(std::uint32_t choice, std::string_view text,
                           const token_logprob* logprob = nullptr) = 0;

  /// The prompt's tokens with their log-probabilities (ids, ranks, and
  /// the larger of the request's two counts of alternatives), for a
  /// request with echo and logprobs or with prompt_logprobs (the first
  /// token's `scored` false): with echo they go out with the echoed
  /// prompt, before choice `choice`'s first token, cut to `logprobs`
  /// alternatives; as prompt_logprobs with the whole answer, cut to
  /// `prompt_logprobs`. A backend gives them before the choice's first
  /// token (or its end); later ones, and a second time, are dropped.
  virtual void prompt_logprobs(std::uint32_t choice,
                               std::vector<token_logprob> tokens) {
    (void) choice;
    (void) tokens;
  }

  /// Choice `choice` is over with `reason` (a stop string the sink found
  /// makes it stop): nothing more of it is sent; a stream sends its
  /// finish_reason now.
  virtual void end_choice(std::uint32_t choice, finish_reason reason) = 0;

  /// Generation ended; the choices not ended yet end with `reason`.
  /// `u.prompt_tokens` is the prompt's length in tokens (once, whatever
  /// n); the gateway counts the completion tokens itself (the tokens it
  /// was given for each choice before it ended).
  virtual void finish(finish_reason reason, usage u) = 0;

  /// Generation failed (e.g. unavailable() when no device can take it).
  /// Before the first token this is the HTTP answer (status and error
  /// object); in a started stream an error event ends it.
  virtual void fail(api_error e) = 0;

  /// Runs `fn` once, on a gateway thread, when there is room again after
  /// token() answered full, or when the sink closes. Replaces an earlier
  /// callback; runs at once on the caller's thread if there is room.
  virtual void on_ready(std::function<void()> fn) = 0;

  /// Runs `fn` once when the sink closes (client disconnected, every
  /// choice's stop string matched, a slow client overran its buffer, the
  /// server stops):
  /// the backend cancels the job and frees its KV cache. Runs at once if
  /// already closed.
  virtual void on_close(std::function<void()> fn) = 0;

  /// Whether the sink is closed.
  virtual bool closed() const = 0;
};

/// Runs completions; what the job coordinator implements.
class completion_backend {
public:
  virtual ~completion_backend() = default;

  /// Starts `req` (validated: the model is one of the server's models);
  /// returns at once. See the rules above.
  virtual void complete(const completion_request& req,
                        std::shared_ptr<token_sink> sink) = 0;

  /// Answers /tokenize or /detokenize (`req` validated: the model is one
  /// of the server's models), on the server's thread: the vocabulary's
  /// work only, never waiting on the cluster. A backend without
  /// vocabularies answers 501.
  virtual tokenize_answer tokenize(const tokenize_request& req) {
    (void) req;
    return {{}, api_error{501, "This server's backend does not tokenize.",
                          "not_implemented_error", "", "not_implemented"}};
  }
};

/// Adds metric families to each `/metrics` scrape (device gauges with
/// prometheus::write_device_gauges, cluster counters).
class metrics_source {
public:
  virtual ~metrics_source() = default;

  /// Appends families to `w`; called on a gateway thread per scrape, so it
  /// answers from what it already has and never waits on the cluster.
  virtual void collect(prometheus::text_writer& w) = 0;
};

/// Several metrics sources as one (server_options::metrics), in order.
class metrics_sources : public metrics_source {
public:
  explicit metrics_sources(std::vector<std::shared_ptr<metrics_source>> s)
    : sources_(std::move(s)) {
  }
  void collect(prometheus::text_writer& w) override {
    for (auto& s : sources_)
      if (s)
        s->collect(w);
  }

private:
  std::vector<std::shared_ptr<metrics_source>> sources_;
};

} // namespace exo::gateway
