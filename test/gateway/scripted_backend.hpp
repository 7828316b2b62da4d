#pragma once

/// Test support for the gateway: a completion_backend that emits a known
/// token sequence (test-only; the server under test is the real one), and
/// a plain-socket HTTP client.

#include "runtime/gateway/completion_backend.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace exo::gateway::testing {

/// Emits `tokens` (at most max_tokens of them) on a thread per request,
/// honouring the sink's back-pressure and closing, and records what it saw.
/// With n choices, choice c's tokens are the script from token c on
/// (cyclically), the choices' tokens taken in turns; a choice that ended
/// by the whole script ends with stop, one cut by max_tokens with length
/// (choices 1 on by end_choice, choice 0 by finish).
class scripted_backend : public completion_backend {
public:
  explicit scripted_backend(std::vector<std::string> tokens,
                            std::int64_t prompt_tokens = 3)
    : tokens_(std::move(tokens)), prompt_tokens_(prompt_tokens) {
  }

  /// false: the prompt's scores are never given (a backend that fails to
  /// send what prompt_logprobs asked for).
  std::atomic<bool> send_prompt_scores{true};

  ~scripted_backend() override {
    release();
    // The last reference may go with a request's thread (its sink holds
    // the server's session, which holds this backend): that thread cannot
    // join itself (std::system_error "Resource deadlock avoided" ended the
    // test binary under load); it is past run() and only ending.
    for (auto& t : threads_) {
      if (t.get_id() == std::this_thread::get_id())
        t.detach();
      else
        t.join();
    }
  }

  /// Requests wait before their first token until release().
  void hold() {
    std::lock_guard<std::mutex> guard{mx_};
    held_ = true;
  }

  void release() {
    {
      std::lock_guard<std::mutex> guard{mx_};
      held_ = false;
    }
    cv_.notify_all();
  }

  void complete(const completion_request& req,
                std::shared_ptr<token_sink> sink) override {
    std::lock_guard<std::mutex> guard{mx_};
    ++started_;
    requests_.push_back(req);
    threads_.emplace_back([this, req, sink] { run(req, sink); });
    cv_.notify_all();
  }

  /// Waits (bounded) until `pred` holds over the counters.
  bool wait_until(const std::function<bool()>& pred,
                  std::chrono::seconds bound = std::chrono::seconds{30}) {
    std::unique_lock<std::mutex> lock{mx_};
    return cv_.wait_for(lock, bound, pred);
  }

  int started() const {
    return started_;
  }
  int closes_seen() const {
    return closes_seen_;
  }
  int pauses() const {
    return pauses_;
  }
  int finished() const {
    return finished_;
  }
  /// Tokens the sink answered choice_done to.
  int choices_done() const {
    return choices_done_;
  }
  std::vector<completion_request> requests() {
    std::lock_guard<std::mutex> guard{mx_};
    return requests_;
  }

private:
  void run(completion_request req, std::shared_ptr<token_sink> sink) {
    // Shared with the callbacks, which may run after this function ends.
    auto flags = std::make_shared<std::pair<bool, bool>>(true, false);
    bool& ready = flags->first;
    bool& closed = flags->second;
    sink->on_close([this, flags] {
      std::lock_guard<std::mutex> guard{mx_};
      flags->second = true;
      ++closes_seen_;
      cv_.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock{mx_};
      cv_.wait(lock, [&] { return !held_ || closed; });
    }
    if (req.prompt == "<fail>") { // a backend that cannot run it
      sink->fail(api_error{503, "scripted failure", "server_error", {},
                           "unavailable"});
      std::lock_guard<std::mutex> guard{mx_};
      ++finished_;
      cv_.notify_all();
      return;
    }
    std::size_t n = tokens_.size();
    if (req.max_tokens && std::size_t(*req.max_tokens) < n)
      n = std::size_t(*req.max_tokens);
    const std::uint32_t choices = std::max<std::uint32_t>(req.n, 1);
    std::vector<bool> done(choices, false);
    bool stopped = false;
    // echo with logprobs, or prompt_logprobs: the prompt's tokens first
    // (prompt_tokens_of), the first unscored.
    if (((req.echo && req.logprobs >= 0) || req.prompt_logprobs >= 0)
        && send_prompt_scores)
      for (std::uint32_t c = 0; c < choices; ++c)
        sink->prompt_logprobs(c, prompt_tokens_of(req));
    for (std::size_t i = 0; i < n && !stopped; ++i)
      for (std::uint32_t c = 0; c < choices && !stopped; ++c) {
        if (done[c])
          continue;
        // Asked for log-probabilities: token i's is -(i + 1) / 8, its
        // alternatives the token itself and "alt" j, each 1 lower.
        const auto& text = tokens_[(i + c) % tokens_.size()];
        token_logprob lp;
        lp.token = text;
        lp.logprob = -static_cast<float>(i + 1) / 8;
        for (std::int32_t j = 0; j < req.logprobs; ++j)
          lp.top.push_back({j == 0 ? text : "alt" + std::to_string(j),
                            lp.logprob - static_cast<float>(j)});
        auto s = sink->token(c, text, req.logprobs >= 0 ? &lp : nullptr);
        if (s == sink_state::closed) {
          stopped = true;
          break;
        }
        if (s == sink_state::choice_done) {
          done[c] = true;
          std::lock_guard<std::mutex> guard{mx_};
          ++choices_done_;
          continue;
        }
        if (s == sink_state::full) {
          {
            std::lock_guard<std::mutex> guard{mx_};
            ++pauses_;
            ready = false;
            cv_.notify_all();
          }
          sink->on_ready([this, flags] {
            std::lock_guard<std::mutex> guard{mx_};
            flags->first = true;
            cv_.notify_all();
          });
          std::unique_lock<std::mutex> lock{mx_};
          cv_.wait(lock, [&] { return ready || closed; });
        }
      }
    auto reason = !stopped && n < tokens_.size() ? finish_reason::length
                                                 : finish_reason::stop;
    for (std::uint32_t c = 1; c < choices; ++c)
      if (!done[c])
        sink->end_choice(c, reason);
    sink->finish(reason, usage{prompt_tokens_, 0});
    std::lock_guard<std::mutex> guard{mx_};
    ++finished_;
    cv_.notify_all();
  }

public:
  /// The prompt's tokens as this backend scores them (as a job does, with
  /// the larger of logprobs and prompt_logprobs alternatives): "<s>" (id
  /// 1, no log-probability), then the prompt's text in pieces of 4 bytes,
  /// piece k id 100 + k, rank k + 2, log-probability -(k + 1) / 4, its
  /// alternatives "p" j ids 1000 + j, each 1 lower.
  static std::vector<token_logprob> prompt_tokens_of(
    const completion_request& req) {
    std::vector<token_logprob> out(1);
    out[0].token = "<s>";
    out[0].id = 1;
    out[0].scored = false;
    const auto top = std::max(req.logprobs, req.prompt_logprobs);
    for (std::size_t at = 0, k = 0; at < req.prompt.size(); at += 4, ++k) {
      token_logprob t;
      t.token = req.prompt.substr(at, 4);
      t.id = static_cast<std::int32_t>(100 + k);
      t.rank = static_cast<std::uint32_t>(k + 2);
      t.logprob = -static_cast<float>(k + 1) / 4;
      for (std::int32_t j = 0; j < top; ++j)
        t.top.push_back({"p" + std::to_string(j),
                         t.logprob - static_cast<float>(j), 1000 + j});
      out.push_back(std::move(t));
    }
    return out;
  }

private:
  std::vector<std::string> tokens_;
  std::int64_t prompt_tokens_;
  std::mutex mx_;
  std::condition_variable cv_;
  bool held_ = false;
  int started_ = 0;
  int closes_seen_ = 0;
  int pauses_ = 0;
  int finished_ = 0;
  int choices_done_ = 0;
  std::vector<completion_request> requests_;
  std::vector<std::thread> threads_;
};

/// A parsed HTTP response.
struct http_reply {
  int status = 0;
  std::map<std::string, std::string> headers; // lower-case names
  std::string body;                           // de-chunked
};

/// A blocking client socket on 127.0.0.1.
class client_socket {
public:
  explicit client_socket(std::uint16_t port, int rcvbuf = 0);
  ~client_socket();
  client_socket(const client_socket&) = delete;
  client_socket& operator=(const client_socket&) = delete;

  bool send(const std::string& bytes);
  /// Reads until the peer closes or `bound` passes; returns what came.
  std::string read_all(std::chrono::milliseconds bound
                       = std::chrono::seconds{30});
  /// Reads until what came contains `needle` (then returns it all; ""
  /// never does), the peer closes or `bound` passes.
  std::string read_until(const std::string& needle,
                         std::chrono::milliseconds bound);
  /// Whether the peer closed (read returns 0 or an error) within `bound`.
  bool closed_within(std::chrono::milliseconds bound);
  void close();
  int fd() const {
    return fd_;
  }

private:
  int fd_ = -1;
};

/// Parses a whole response (status line, headers, body by length or
/// chunks).
http_reply parse_reply(const std::string& raw);

/// Sends `raw` on a new connection and reads the reply (the request should
/// say Connection: close).
http_reply http_exchange(std::uint16_t port, const std::string& raw);

/// `raw` over HTTPS on a new connection to 127.0.0.1:port: the server's
/// chain is verified against `cafile` and must name IP 127.0.0.1. Throws
/// std::runtime_error naming what failed (the handshake's verify result).
http_reply https_exchange(std::uint16_t port, const std::string& raw,
                          const std::string& cafile);

/// A request with a JSON body.
std::string post(const std::string& path, const std::string& body,
                 const std::string& extra_headers = {});

/// The `data:` payloads of an SSE body, in order.
std::vector<std::string> sse_payloads(const std::string& body);

/// The text of a streamed completion's SSE body: its first choice's text
/// of every chunk up to [DONE], joined; `id` (optional) gets the
/// completion's id.
std::string sse_text(const std::string& body, std::string* id = nullptr);

/// The lines of promtool's `check metrics` output (stdout and stderr)
/// other than its one allowed complaint: dcgm-exporter's own label names
/// (UUID, modelName, Hostname) are not snake_case. Empty: nothing else.
std::vector<std::string> promtool_complaints(const std::string& out,
                                             const std::string& err);

} // namespace exo::gateway::testing
