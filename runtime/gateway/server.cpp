#include "runtime/gateway/server.hpp"

#include "core/gateway/prometheus.hpp"
#include "core/text/json.hpp"
#include "core/text/number.hpp"
#include "runtime/gateway/dashboard_assets.hpp"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <atomic>
#include <cstdio>
#include <deque>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

/// Defined by core/tls/ssl_error_queue_guard.cpp in programs that run
/// CAF's TLS, whose interposed SSL_read follows BASP framing: the gateway's
/// HTTPS connections are exempted from it. Absent elsewhere (weak).
extern "C" void exo_tls_guard_exempt(const SSL* ssl) __attribute__((weak));

namespace exo::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
namespace ssl = net::ssl;
namespace websocket = beast::websocket;
using steady = std::chrono::steady_clock;

// -- the connection's stream --------------------------------------------------

/// A client connection, plain TCP or TLS over it: the async stream every
/// session operation (Beast's reads and writes included) goes through.
class conn_stream {
public:
  using executor_type = net::any_io_executor;

  conn_stream(tcp::socket socket, ssl::context* tls) : sock_(std::move(socket)) {
    if (tls) {
      tls_.emplace(sock_, *tls);
      if (exo_tls_guard_exempt)
        exo_tls_guard_exempt(tls_->native_handle());
    }
  }

  executor_type get_executor() {
    return sock_.get_executor();
  }

  template <class Buffers, class Handler>
  auto async_read_some(const Buffers& b, Handler&& h) {
    if (tls_)
      return tls_->async_read_some(b, std::forward<Handler>(h));
    return sock_.async_read_some(b, std::forward<Handler>(h));
  }

  template <class Buffers, class Handler>
  auto async_write_some(const Buffers& b, Handler&& h) {
    if (tls_)
      return tls_->async_write_some(b, std::forward<Handler>(h));
    return sock_.async_write_some(b, std::forward<Handler>(h));
  }

  bool tls() const {
    return tls_.has_value();
  }

  ssl::stream<tcp::socket&>& tls_stream() {
    return *tls_;
  }

  tcp::socket& socket() {
    return sock_;
  }

  void close(beast::error_code& ec) {
    sock_.close(ec);
  }

  void cancel(beast::error_code& ec) {
    sock_.cancel(ec);
  }

private:
  tcp::socket sock_;
  std::optional<ssl::stream<tcp::socket&>> tls_;
};

/// A WebSocket's end of the connection (Beast finds these by ADL): the
/// socket is closed; TLS's close_notify is not waited for.
void beast_close_socket(conn_stream& s) {
  beast::error_code ec;
  s.close(ec);
}

void teardown(beast::role_type, conn_stream& s, beast::error_code& ec) {
  s.close(ec);
}

template <class Handler>
void async_teardown(beast::role_type, conn_stream& s, Handler&& handler) {
  beast::error_code ec;
  s.close(ec);
  net::post(s.get_executor(),
            [h = std::forward<Handler>(handler), ec]() mutable { h(ec); });
}

class session;
class stream_sink;

/// The text of a prompt of token ids, as /detokenize gives it, from the
/// backend; the error when it cannot give it.
std::optional<api_error> text_of_ids(completion_backend& backend,
                                     const completion_request& r,
                                     const std::vector<std::int32_t>& ids,
                                     std::string& out) {
  tokenize_request t;
  t.model = r.model;
  t.detokenize = true;
  t.tokens = ids;
  auto a = backend.tokenize(t);
  if (a.error)
    return a.error;
  try {
    out = text::json::parse(a.body).at("prompt").get<std::string>();
  } catch (const std::exception& e) {
    return api_error{500,
                     std::string{"The backend's text of the prompt's tokens "
                                 "is not readable: "}
                       + e.what(),
                     "server_error", "echo", "backend_error"};
  }
  return std::nullopt;
}

/// For a request with echo: the text its choices start with, each
/// prompt's (a prompt of token ids: their text, as /detokenize gives it,
/// from the backend). The error when the backend cannot give it.
std::optional<api_error> set_echo_text(completion_backend& backend,
                                       completion_request& r) {
  if (!r.echo)
    return std::nullopt;
  if (r.prompt_ids.empty()) {
    r.echo_text = r.prompt;
    r.more_echo_texts = r.more_prompts;
    return std::nullopt;
  }
  if (auto e = text_of_ids(backend, r, r.prompt_ids, r.echo_text))
    return e;
  r.more_echo_texts.resize(r.more_prompt_ids.size());
  for (std::size_t p = 0; p < r.more_prompt_ids.size(); ++p)
    if (auto e = text_of_ids(backend, r, r.more_prompt_ids[p],
                             r.more_echo_texts[p]))
      return e;
  return std::nullopt;
}

/// The admission slots a completion takes (limits::max_queued counts
/// them): one a prompt (each is a job), at most the whole queue.
std::size_t slots_of(const completion_request& r, std::size_t max_queued) {
  return std::max<std::size_t>(1, std::min(r.prompt_count(), max_queued));
}

/// Prompt `p` of a request with several, as a request of its own: its n
/// choices, its echo text, the part of a resume that is its, its job named
/// "<id>-<p>".
completion_request part_request(const completion_request& r, std::size_t p) {
  completion_request out = r;
  out.more_prompts.clear();
  out.more_prompt_ids.clear();
  out.more_echo_texts.clear();
  if (p > 0) {
    if (!r.more_prompts.empty())
      out.prompt = r.more_prompts[p - 1];
    else
      out.prompt_ids = r.more_prompt_ids[p - 1];
    if (p - 1 < r.more_echo_texts.size())
      out.echo_text = r.more_echo_texts[p - 1];
  }
  out.id = r.id + "-" + std::to_string(p);
  const std::size_t n = std::max<std::uint32_t>(r.n, 1);
  out.resume_after.clear();
  if (r.resume_after.size() >= (p + 1) * n)
    out.resume_after.assign(r.resume_after.begin() + p * n,
                            r.resume_after.begin() + (p + 1) * n);
  return out;
}

class events_session;
struct reply_slot;

// -- server state -------------------------------------------------------------

/// What every session and sink shares. Lives until the last of them.
struct server::state {
  server_options opts;
  std::unique_ptr<net::io_context> ioc;
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  std::uint16_t port = 0;
  /// HTTPS: the server's certificate and key (set by start()).
  std::optional<ssl::context> tls;
  id_generator ids;
  std::atomic<bool> stopping{false};

  std::atomic<std::size_t> connections{0};
  std::atomic<std::size_t> in_flight{0};

  mutable std::mutex mx; // guards everything below
  std::map<const session*, std::weak_ptr<session>> sessions;
  std::map<const stream_sink*, std::weak_ptr<stream_sink>> sinks;
  /// Sessions waiting for an answer from the actors (reply_slot).
  std::vector<std::weak_ptr<reply_slot>> replies;
  server_stats stats;
  std::map<std::pair<std::string, int>, std::uint64_t> requests;
  std::uint64_t tokens = 0;
  prometheus::histogram request_seconds{
    {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60}};
  prometheus::histogram ttft_seconds{
    {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  prometheus::histogram token_seconds{
    {0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};

  explicit state(server_options o) : opts(std::move(o)) {
  }

  void count_request(const std::string& endpoint, int status,
                     double seconds) {
    std::lock_guard<std::mutex> guard{mx};
    ++requests[{endpoint, status}];
    ++stats.requests;
    request_seconds.observe(seconds);
  }

  bool known_model(const std::string& id) const {
    for (auto& m : opts.models)
      if (m.id == id)
        return true;
    return false;
  }

  std::string metrics_text();
};

// -- answers from the actors ----------------------------------------------------

/// A session waiting for an answer from the actors' side (a view's `ask`,
/// a job's cancel): the callback holds this, not the session. The session
/// is held until the answer comes or the server stops, never after: the
/// callback lives in an actor (cluster_watch's one-shot asker) that may
/// end, and destroy it, on a CAF thread after the server destroyed its
/// io_context, and the session's timer and socket would then be destroyed
/// against freed services (ASan found it at a node's SIGTERM).
struct reply_slot {
  std::mutex mx;
  std::shared_ptr<session> waiting; ///< null once answered or stopped
};

// -- the sink -----------------------------------------------------------------

/// The token_sink of one admitted completion: collects text under a mutex
/// and asks its session (on the session's strand) to write it.
class stream_sink : public token_sink,
                    public std::enable_shared_from_this<stream_sink> {
public:
  using flush_fn = std::function<void()>;

  /// `io` is the io_context's plain executor, not the session's strand: a
  /// backend may hold the sink after the server stopped and destroyed its
  /// io_context, and a strand executor's destructor would then touch the
  /// freed strand service (ASan found it); this one is a bare handle. What
  /// is posted hops onto the session's strand itself.
  stream_sink(std::shared_ptr<server::state> st, completion_request req,
              response_head head, net::io_context::executor_type io,
              std::weak_ptr<session> owner)
    : st_(std::move(st)),
      req_(std::move(req)),
      head_(std::move(head)),
      io_(std::move(io)),
      owner_(std::move(owner)),
      started_(steady::now()),
      last_token_(started_) {
    const std::uint32_t n = std::max<std::uint32_t>(req_.n, 1);
    const std::size_t parts = req_.prompt_count();
    for (std::uint32_t i = 0; i < n * parts; ++i) {
      choices_.emplace_back(req_.stop);
      if (i < req_.resume_after.size())
        choices_.back().skip = req_.resume_after[i];
      const std::size_t p = i / n;
      if (p == 0)
        choices_.back().echo_text = req_.echo_text;
      else if (p - 1 < req_.more_echo_texts.size())
        choices_.back().echo_text = req_.more_echo_texts[p - 1];
    }
    open_choices_ = choices_.size();
    ready_cbs_.resize(parts);
    parts_done_.assign(parts, false);
  }

  sink_state token(std::uint32_t choice, std::string_view text,
                   const token_logprob* logprob) override;
  void prompt_logprobs(std::uint32_t choice,
                       std::vector<token_logprob> tokens) override;
  void end_choice(std::uint32_t choice, finish_reason reason) override;
  void finish(finish_reason reason, usage u) override;
  /// Part `part`'s backend finished (a request of several prompts: one
  /// request a prompt, part_sink): its choices end with `reason`; when
  /// every part finished, the answer, the usage their sum.
  void finish_part(std::size_t part, finish_reason reason, usage u);
  void fail(api_error e) override;
  void on_ready(std::function<void()> fn) override;
  /// on_ready of part `part`'s backend.
  void on_ready_part(std::size_t part, std::function<void()> fn);
  void on_close(std::function<void()> fn) override;
  bool closed() const override {
    std::lock_guard<std::mutex> guard{mx_};
    return closed_;
  }

  /// Closes the sink (client gone, server stopping); runs the callbacks.
  void close(bool client_gone);

  /// Detaches from the io_context: nothing is posted any more.
  void detach() {
    {
      std::lock_guard<std::mutex> guard{mx_};
      detached_ = true;
    }
    close(false);
  }

  /// Takes the bytes to write (called on the strand). `done` is set when
  /// they are the last of the answer.
  struct batch {
    std::string bytes;
    bool done = false;
    bool error_before_start = false;
    api_error error;
  };
  batch take();

  /// A write of `n` bytes completed (on the strand): may fire on_ready.
  void written();

  bool streaming() const {
    return req_.stream;
  }

private:
  /// One choice of the answer: its own stop strings and text.
  struct choice {
    explicit choice(std::vector<std::string> stops)
      : filter(std::move(stops)) {
    }
    stop_filter filter;
    bool echoed = false;          // echo: the prompt's text went out
    std::string echo_text;        // echo: its prompt's text
    /// echo with logprobs: the prompt's tokens (prompt_logprobs), which
    /// go out with the echo.
    std::optional<std::vector<token_logprob>> prompt_lps;
    /// vLLM's prompt_logprobs (the request's): the prompt's tokens, cut
    /// to the alternatives it asked for.
    std::optional<std::vector<token_logprob>> prompt_scores;
    std::uint64_t skip = 0;       // text bytes the resumed client has
    std::uint64_t text_bytes = 0; // text bytes produced so far, skipped too
    std::string text;             // non-stream: the answer so far
    /// Log-probabilities (the request's logprobs): of tokens whose text
    /// the filter still holds (with the bytes fed to it up to their end),
    /// of tokens whose text is out but not yet in a chunk, and (not
    /// streamed) of every token in the answer.
    std::deque<std::pair<std::uint64_t, token_logprob>> held_logprobs;
    std::vector<token_logprob> ready_logprobs;
    std::vector<token_logprob> logprobs;
    std::uint64_t fed = 0;      // bytes fed to the filter
    std::uint64_t released = 0; // of them, let through
    bool first = true;            // stream: no chunk of it sent yet
    bool ended = false;
    finish_reason reason = finish_reason::length;
  };

  void schedule_locked(); // mx_ held
  /// Moves every part's ready callback into `out` (mx_ held).
  void take_ready_locked(std::vector<std::function<void()>>& out);
  void release_slot();
  /// Counts `out` in choice c's text sent so far and leaves out what a
  /// resumed stream's client already has (mx_ held).
  std::string visible(choice& c, std::string out);
  /// A stream's text chunk of choice i, with the text's end as its SSE id
  /// (every choice's end, joined by commas, when there are several) and
  /// the log-probabilities of the tokens it completes (mx_ held).
  std::string chunk(std::uint32_t i, const std::string& text);
  /// Moves choice c's held log-probabilities whose tokens' text the filter
  /// let through to its ready ones (mx_ held).
  void release_logprobs(choice& c);
  /// Ends choice i: the text its filter held back, and in a stream its
  /// finish chunk (mx_ held).
  void end_locked(std::uint32_t i, finish_reason reason);
  /// echo: choice i's text starts with the prompt's, once (before its
  /// first token, or as it ends without one), with its tokens'
  /// log-probabilities when the request asks for them (mx_ held).
  void echo_locked(std::uint32_t i);

  std::shared_ptr<server::state> st_;
  completion_request req_;
  response_head head_;
  mutable std::mutex mx_;
  std::vector<choice> choices_;
  std::size_t open_choices_ = 0;
  std::string pending_;  // stream: SSE bytes not yet taken
  std::int64_t tokens_ = 0; // of every choice
  bool sent_any_ = false; // stream: a chunk was produced
  bool closed_ = false;
  bool finished_ = false;
  bool detached_ = false;
  bool flush_posted_ = false;
  bool full_ = false;
  bool done_ = false; // the last bytes are in pending_ / the answer is ready
  std::optional<api_error> early_error_;
  /// on_ready's callback of each part (a prompt of the request: its
  /// backend's request, part_sink), run when there is room again.
  std::vector<std::function<void()>> ready_cbs_;
  /// Which parts finished (finish_part), and the usage they gave.
  std::vector<bool> parts_done_;
  std::size_t parts_finished_ = 0;
  usage parts_usage_;
  std::vector<std::function<void()>> close_cbs_;
  net::io_context::executor_type io_;
  std::weak_ptr<session> owner_;
  steady::time_point started_;
  steady::time_point last_token_;
};

// -- the session --------------------------------------------------------------

/// One connection: reads requests one at a time, answers them.
class session : public std::enable_shared_from_this<session> {
public:
  session(tcp::socket socket, std::shared_ptr<server::state> st)
    : socket_(std::move(socket), st->tls ? &*st->tls : nullptr),
      timer_(socket_.get_executor()), st_(std::move(st)) {
    beast::error_code ec;
    auto ep = socket_.socket().remote_endpoint(ec);
    if (!ec)
      peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  ~session() {
    st_->connections.fetch_sub(1);
    std::lock_guard<std::mutex> guard{st_->mx};
    st_->sessions.erase(this);
    st_->stats.connections = st_->connections.load();
  }

  void start() {
    if (!socket_.tls())
      return read_request();
    // The handshake counts against the request's time: a client that
    // opens a connection and stays silent holds it no longer than one that
    // sends half a request.
    arm(st_->opts.limits.request_timeout, true);
    socket_.tls_stream().async_handshake(
      ssl::stream_base::server,
      [self = shared_from_this()](beast::error_code ec) {
        self->timer_.cancel();
        if (ec)
          return self->close_now();
        self->read_request();
      });
  }

  net::any_io_executor get_executor() {
    return socket_.get_executor();
  }

  /// Answers 503 (too many connections) and closes; over HTTPS closes at
  /// once (a handshake is the cost the limit bounds).
  void refuse() {
    auto e = unavailable("Too many connections: the limit of "
                         + std::to_string(st_->opts.limits.max_connections)
                         + " is reached; retry later");
    limit_hit(e);
    if (socket_.tls())
      return close_now();
    send_error(e, false);
  }

  /// Closes the socket (server stopping); runs on the strand.
  void shutdown() {
    beast::error_code ec;
    socket_.close(ec);
    timer_.cancel();
  }

  /// The sink has bytes (or the end) for this connection.
  void flush();

  /// The client is gone or the server stops: drop the connection.
  void abort_stream() {
    beast::error_code ec;
    socket_.close(ec);
  }

  const std::string& peer() const {
    return peer_;
  }

private:
  void arm(std::chrono::milliseconds d, bool count_timeout) {
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(),
                       count_timeout](beast::error_code ec) {
      if (ec)
        return;
      if (count_timeout) {
        std::lock_guard<std::mutex> guard{self->st_->mx};
        ++self->st_->stats.timeouts;
      }
      beast::error_code ignored;
      self->socket_.close(ignored);
    });
  }

  void read_request() {
    parser_.emplace();
    parser_->header_limit(
      static_cast<std::uint32_t>(st_->opts.limits.max_header_bytes));
    parser_->body_limit(st_->opts.limits.max_body_bytes);
    arm(st_->opts.limits.request_timeout, true);
    http::async_read_header(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) {
        self->on_header(ec);
      });
  }

  /// Whether `ec` is a parse error answered with a status (then answers).
  bool answer_read_error(beast::error_code ec) {
    if (ec == http::error::header_limit) {
      send_limit_error(headers_too_large(st_->opts.limits.max_header_bytes));
      return true;
    }
    if (ec == http::error::body_limit) {
      send_limit_error(body_too_large(st_->opts.limits.max_body_bytes));
      return true;
    }
    if (ec.category()
          == http::make_error_code(http::error::end_of_stream).category()
        && ec != http::error::end_of_stream
        && ec != http::error::partial_message) {
      send_error(invalid_request("Malformed HTTP request: " + ec.message(),
                                 {}, "bad_request"),
                 false);
      return true;
    }
    return false;
  }

  void on_header(beast::error_code ec) {
    if (ec) {
      timer_.cancel();
      if (!answer_read_error(ec))
        close_now();
      return;
    }
    started_ = steady::now();
    auto& req = parser_->get();
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      auto cont = std::make_shared<std::string>(
        "HTTP/1.1 100 Continue\r\n\r\n");
      net::async_write(socket_, net::buffer(*cont),
                       [self = shared_from_this(),
                        cont](beast::error_code ec, std::size_t) {
                         if (ec)
                           return self->close_now();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    if (parser_->is_done())
      return on_read({});
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec,
                                                 std::size_t) {
                       self->on_read(ec);
                     });
  }

  void on_read(beast::error_code ec) {
    timer_.cancel();
    if (ec) {
      if (!answer_read_error(ec))
        close_now();
      return;
    }
    keep_alive_ = parser_->get().keep_alive();
    handle();
  }

  void handle();
  void handle_completion(endpoint_kind kind);
  void handle_tokenize(bool detokenize);

  /// The request parsers' bounds: the server's request limits and body
  /// limit.
  request_limits request_limits_of() const {
    request_limits limits = st_->opts.requests;
    limits.max_body_bytes = st_->opts.limits.max_body_bytes;
    return limits;
  }
  /// The parsers' model check: a model this server serves.
  model_filter known_model() const {
    return [st = st_](const std::string& id) { return st->known_model(id); };
  }
  void handle_cluster(const std::string& path, http::verb method,
                      const std::string& method_name);
  void start_events();

  /// Whether the request may do what `needed` names; answers the refusal
  /// when not.
  bool authorized(access::permission needed) {
    if (!st_->opts.authorize)
      return true;
    auto h = parser_->get()[http::field::authorization];
    std::string_view v{h.data(), h.size()};
    std::string_view token;
    bool bearer = v.size() >= 7
                  && beast::iequals(beast::string_view{v.data(), 7},
                                    "Bearer ");
    if (bearer)
      token = v.substr(7);
    std::string offered;
    if (!bearer && endpoint_ == "/v1/events") {
      // Browsers cannot set headers on a WebSocket: the token may come as
      // the subprotocol "bearer.<token>".
      auto p = parser_->get()[http::field::sec_websocket_protocol];
      offered.assign(p.data(), p.size());
      std::size_t pos = 0;
      while (pos < offered.size()) {
        auto end = offered.find(',', pos);
        if (end == std::string::npos)
          end = offered.size();
        auto item = std::string_view{offered}.substr(pos, end - pos);
        while (!item.empty() && item.front() == ' ')
          item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ')
          item.remove_suffix(1);
        if (item.substr(0, 7) == "bearer.") {
          token = item.substr(7);
          bearer = true;
        }
        pos = end + 1;
      }
    }
    auto r = st_->opts.authorize(token, needed, endpoint_, peer_);
    if (r.allowed)
      return true;
    if (!bearer && r.error.status == 401)
      r.error.message = "Missing bearer token: send 'Authorization: Bearer "
                        "<token>'";
    send_error(r.error, keep_alive_);
    return false;
  }

  using header_list = std::vector<std::pair<std::string, std::string>>;

  void send(int status, std::string body, const char* content_type,
            bool keep_alive, const char* retry_after = nullptr,
            const header_list& extra = {}) {
    auto res = std::make_shared<http::response<http::string_body>>(
      static_cast<http::status>(status), 11);
    res->set(http::field::server, "exo");
    res->set(http::field::content_type, content_type);
    if (retry_after)
      res->set(http::field::retry_after, retry_after);
    for (auto& [f, v] : extra)
      res->set(f, v);
    res->keep_alive(keep_alive);
    res->body() = std::move(body);
    res->prepare_payload();
    if (!endpoint_.empty())
      st_->count_request(endpoint_, status,
                         std::chrono::duration<double>(steady::now()
                                                       - started_)
                           .count());
    arm(st_->opts.limits.write_timeout, false);
    http::async_write(socket_, *res,
                      [self = shared_from_this(), res,
                       keep_alive](beast::error_code ec, std::size_t) {
                        self->timer_.cancel();
                        if (ec)
                          return self->close_now();
                        if (self->watching_) {
                          // A completion's answer: the watch's handler
                          // goes on once the cancel reaches it.
                          self->answer_done_ = true;
                          beast::error_code ignored;
                          self->socket_.cancel(ignored);
                          return;
                        }
                        self->after_response(keep_alive);
                      });
  }

  /// Tells the server's owner (on_limit) of a refusal by a limit.
  void limit_hit(const api_error& e) {
    if (st_->opts.on_limit)
      st_->opts.on_limit(e.status, e.message, endpoint_, peer_);
  }

  void send_limit_error(const api_error& e) {
    limit_hit(e);
    send_error(e, false);
  }

  void send_error(const api_error& e, bool keep_alive) {
    send(e.status, to_json(e), "application/json", keep_alive,
         e.status == 429 || e.status == 503 ? "1" : nullptr);
  }

  void after_response(bool keep_alive) {
    endpoint_.clear();
    if (keep_alive && !st_->stopping)
      return read_request();
    linger_close();
  }

  /// Half-closes and discards what the client still sends (a refused
  /// body), for at most one second and into a fixed buffer, so the client
  /// reads the answer instead of a reset.
  void linger_close() {
    beast::error_code ec;
    if (socket_.tls()) {
      // close_notify, then (Asio waits for the peer's) within the second.
      arm(std::chrono::milliseconds{1000}, false);
      socket_.tls_stream().async_shutdown(
        [self = shared_from_this()](beast::error_code) { self->close_now(); });
      return;
    }
    socket_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec)
      return close_now();
    arm(std::chrono::milliseconds{1000}, false);
    drain();
  }

  void drain() {
    socket_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec,
                                                        std::size_t) {
                              if (ec)
                                return self->close_now();
                              self->drain();
                            });
  }

  void close_now() {
    timer_.cancel();
    beast::error_code ec;
    socket_.close(ec);
  }

  /// While a completion runs: a read that notices the client leaving.
  /// Pipelined bytes are kept for the next request (up to the header
  /// limit; beyond it the watch stops).
  void watch() {
    if (buffer_.size() >= st_->opts.limits.max_header_bytes)
      return;
    watching_ = true;
    auto room = st_->opts.limits.max_header_bytes - buffer_.size();
    socket_.async_read_some(
      buffer_.prepare(room),
      [self = shared_from_this()](beast::error_code ec, std::size_t n) {
        self->watching_ = false;
        if (!ec) {
          self->buffer_.commit(n);
          if (!self->answer_done_)
            return self->watch();
        }
        if (self->answer_done_) {
          // The answer is out and the watch was cancelled for the next
          // request (or ended by the client).
          if (ec && ec != net::error::operation_aborted)
            return self->close_now();
          return self->after_response(self->keep_alive_);
        }
        // The client went away in the middle of its answer.
        {
          std::lock_guard<std::mutex> guard{self->st_->mx};
          ++self->st_->stats.client_disconnects;
        }
        if (auto sink = self->sink_)
          sink->close(true);
        self->close_now();
      });
  }

  void write_stream(std::string bytes, bool done);
  void answer_finished();

  /// The callback for an answer from the actors (status, JSON body): sends
  /// it on this session's executor, through a reply_slot.
  std::function<void(int, std::string)> answer_from_actors(bool keep) {
    auto slot = std::make_shared<reply_slot>();
    {
      std::lock_guard<std::mutex> guard{st_->mx};
      // stop() sets `stopping`, then empties the slots under this mutex:
      // a slot made after that holds nothing (no answer while stopping).
      if (st_->stopping)
        return [slot](int, std::string) {};
      slot->waiting = shared_from_this();
      auto& rs = st_->replies;
      rs.erase(std::remove_if(rs.begin(), rs.end(),
                              [](const std::weak_ptr<reply_slot>& w) {
                                return w.expired();
                              }),
               rs.end());
      rs.push_back(slot);
    }
    return [slot, keep](int status, std::string body) {
      // Held while posting: stop() empties the slot under this mutex
      // before it destroys the io_context.
      std::lock_guard<std::mutex> guard{slot->mx};
      auto self = std::move(slot->waiting);
      if (!self)
        return;
      auto ex = self->get_executor();
      net::post(ex, [self = std::move(self), keep, status,
                     body = std::move(body)]() mutable {
        self->send(status, std::move(body), "application/json", keep);
      });
    };
  }

  conn_stream socket_;
  net::steady_timer timer_;
  std::shared_ptr<server::state> st_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::array<char, 4096> scratch_{};
  bool keep_alive_ = false;
  steady::time_point started_;
  std::string endpoint_;
  std::string peer_; // ADDRESS:PORT of the client

  // The completion in progress.
  std::shared_ptr<stream_sink> sink_;
  bool watching_ = false;
  bool writing_ = false;
  bool header_sent_ = false;
  bool answer_done_ = false;
  std::optional<http::response<http::empty_body>> stream_res_;
  std::optional<http::response_serializer<http::empty_body>> stream_sr_;
  std::string write_buf_;
};

// -- events: the /v1/events WebSocket ----------------------------------------

/// One /v1/events socket over a session's connection: the view_source's
/// events, queued on the connection's strand and written one frame at a
/// time; a client whose unsent frames pass events_hard_limit is dropped.
/// Reads only to answer pings and notice the close.
class events_session : public std::enable_shared_from_this<events_session> {
public:
  events_session(std::shared_ptr<session> owner, conn_stream& stream,
                 std::shared_ptr<server::state> st)
    : owner_(std::move(owner)), ws_(stream), st_(std::move(st)) {
  }

  ~events_session() {
    unsubscribe();
  }

  void run(http::request<http::string_body> req) {
    ws_.set_option(
      websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.read_message_max(4096);
    bool exo_protocol = false;
    auto offered = req[http::field::sec_websocket_protocol];
    std::string_view o{offered.data(), offered.size()};
    for (std::size_t pos = 0; pos < o.size();) {
      auto end = o.find(',', pos);
      if (end == std::string_view::npos)
        end = o.size();
      auto item = o.substr(pos, end - pos);
      while (!item.empty() && item.front() == ' ')
        item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ')
        item.remove_suffix(1);
      exo_protocol = exo_protocol || item == "exo.v1";
      pos = end + 1;
    }
    ws_.set_option(websocket::stream_base::decorator(
      [exo_protocol](websocket::response_type& res) {
        res.set(http::field::server, "exo");
        if (exo_protocol)
          res.set(http::field::sec_websocket_protocol, "exo.v1");
      }));
    ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
      if (ec)
        return self->finish();
      self->on_accept();
    });
  }

private:
  void on_accept() {
    {
      std::lock_guard<std::mutex> guard{st_->mx};
      ++st_->stats.event_sockets;
    }
    counted_ = true;
    // The view source keeps this function: it holds only an inbox (the
    // events in their order) and the io_context's bare executor (no
    // strand, see stream_sink); one drain at a time hops onto the
    // connection's strand from the live session, so order is kept.
    auto box = inbox_;
    box->session = weak_from_this();
    net::io_context::executor_type io = st_->ioc->get_executor();
    sub_ = st_->opts.views->subscribe([box, io](std::string m) {
      std::lock_guard<std::mutex> guard{box->mx};
      box->events.push_back(std::move(m));
      if (box->drain_posted)
        return;
      box->drain_posted = true;
      net::post(io, [box] {
        if (auto self = box->session.lock()) {
          auto exec = self->owner_->get_executor();
          net::dispatch(exec, [self] { self->drain(); });
        }
      });
    });
    subscribed_ = true;
    read_loop();
  }

  /// Events pushed by the view source, in order, until a drain takes them.
  struct inbox {
    std::mutex mx;
    std::vector<std::string> events;
    bool drain_posted = false;
    std::weak_ptr<events_session> session;
  };

  void drain() {
    std::vector<std::string> got;
    {
      std::lock_guard<std::mutex> guard{inbox_->mx};
      got.swap(inbox_->events);
      inbox_->drain_posted = false;
    }
    for (auto& m : got)
      enqueue(std::move(m));
  }

  void enqueue(std::string m) {
    if (closed_)
      return;
    queued_ += m.size();
    if (queued_ > st_->opts.limits.events_hard_limit) {
      {
        std::lock_guard<std::mutex> guard{st_->mx};
        ++st_->stats.slow_event_sockets;
      }
      return finish();
    }
    queue_.push_back(std::move(m));
    if (!writing_)
      write_next();
  }

  void write_next() {
    writing_ = true;
    ws_.text(true);
    ws_.async_write(net::buffer(queue_.front()),
                    [self = shared_from_this()](beast::error_code ec,
                                                std::size_t) {
                      self->queued_ -= self->queue_.front().size();
                      self->queue_.pop_front();
                      if (ec)
                        return self->finish();
                      if (self->queue_.empty())
                        self->writing_ = false;
                      else
                        self->write_next();
                    });
  }

  void read_loop() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec,
                                                        std::size_t) {
      if (ec)
        return self->finish();
      self->buffer_.consume(self->buffer_.size());
      self->read_loop();
    });
  }

  void unsubscribe() {
    if (subscribed_) {
      subscribed_ = false;
      st_->opts.views->unsubscribe(sub_);
    }
    if (counted_) {
      counted_ = false;
      std::lock_guard<std::mutex> guard{st_->mx};
      --st_->stats.event_sockets;
    }
  }

  void finish() {
    if (closed_)
      return;
    closed_ = true;
    unsubscribe();
    owner_->abort_stream();
  }

  std::shared_ptr<session> owner_;
  websocket::stream<conn_stream&> ws_;
  std::shared_ptr<server::state> st_;
  beast::flat_buffer buffer_;
  std::deque<std::string> queue_;
  std::size_t queued_ = 0;
  std::shared_ptr<inbox> inbox_ = std::make_shared<inbox>();
  std::uint64_t sub_ = 0;
  bool subscribed_ = false;
  bool counted_ = false;
  bool writing_ = false;
  bool closed_ = false;
};

void session::start_events() {
  timer_.cancel();
  st_->count_request(endpoint_, 101,
                     std::chrono::duration<double>(steady::now() - started_)
                       .count());
  endpoint_.clear();
  auto ev = std::make_shared<events_session>(shared_from_this(), socket_, st_);
  ev->run(parser_->release());
}

// -- stream_sink --------------------------------------------------------------

void stream_sink::schedule_locked() {
  if (flush_posted_ || detached_)
    return;
  flush_posted_ = true;
  net::post(io_, [owner = owner_] {
    if (auto s = owner.lock())
      net::dispatch(s->get_executor(), [s] { s->flush(); });
  });
}

/// The sink of one prompt's request when a request has several
/// (completion_request::more_prompts): its choices are the answer's
/// part * n .. part * n + n - 1; its finish ends them (the answer goes
/// when every part finished), its failure fails the answer and closes it
/// (the other prompts' jobs stop).
class part_sink : public token_sink {
public:
  part_sink(std::shared_ptr<stream_sink> parent, std::size_t part,
            std::uint32_t n)
    : parent_(std::move(parent)),
      part_(part),
      n_(n),
      first_(static_cast<std::uint32_t>(part) * n) {
  }
  sink_state token(std::uint32_t choice, std::string_view text,
                   const token_logprob* logprob) override {
    if (choice >= n_)
      return sink_state::choice_done;
    return parent_->token(first_ + choice, text, logprob);
  }
  void prompt_logprobs(std::uint32_t choice,
                       std::vector<token_logprob> tokens) override {
    if (choice < n_)
      parent_->prompt_logprobs(first_ + choice, std::move(tokens));
  }
  void end_choice(std::uint32_t choice, finish_reason reason) override {
    if (choice < n_)
      parent_->end_choice(first_ + choice, reason);
  }
  void finish(finish_reason reason, usage u) override {
    parent_->finish_part(part_, reason, u);
  }
  void fail(api_error e) override {
    parent_->fail(std::move(e));
    parent_->close(false);
  }
  void on_ready(std::function<void()> fn) override {
    parent_->on_ready_part(part_, std::move(fn));
  }
  void on_close(std::function<void()> fn) override {
    parent_->on_close(std::move(fn));
  }
  bool closed() const override {
    return parent_->closed();
  }

private:
  std::shared_ptr<stream_sink> parent_;
  std::size_t part_;
  std::uint32_t n_;
  std::uint32_t first_;
};

void stream_sink::release_logprobs(choice& c) {
  while (!c.held_logprobs.empty()
         && c.held_logprobs.front().first <= c.released) {
    c.ready_logprobs.push_back(std::move(c.held_logprobs.front().second));
    c.held_logprobs.pop_front();
  }
}

sink_state stream_sink::token(std::uint32_t choice, std::string_view text,
                              const token_logprob* logprob) {
  std::vector<std::function<void()>> cbs;
  sink_state result = sink_state::open;
  {
    std::lock_guard<std::mutex> guard{mx_};
    if (closed_ || finished_)
      return sink_state::closed;
    if (choice >= choices_.size() || choices_[choice].ended)
      return sink_state::choice_done;
    echo_locked(choice);
    auto& c = choices_[choice];
    ++tokens_;
    auto now = steady::now();
    {
      std::lock_guard<std::mutex> stats_guard{st_->mx};
      ++st_->tokens;
      std::chrono::duration<double> d = now - (tokens_ == 1 ? started_
                                                            : last_token_);
      (tokens_ == 1 ? st_->ttft_seconds : st_->token_seconds)
        .observe(d.count());
    }
    last_token_ = now;
    if (logprob && req_.logprobs >= 0) {
      c.held_logprobs.emplace_back(c.fed + text.size(), *logprob);
      // Offsets count the echoed prompt's text before the completion's.
      c.held_logprobs.back().second.text_offset = c.echo_text.size() + c.fed;
    }
    c.fed += text.size();
    auto raw = c.filter.feed(text);
    c.released += raw.size();
    release_logprobs(c);
    const bool resumed_part = c.skip > 0;
    auto out = visible(c, std::move(raw));
    if (resumed_part && out.empty()) // what the resumed client has
      c.ready_logprobs.clear();
    if (req_.stream) {
      if (!out.empty())
        pending_ += chunk(choice, out);
      {
        std::lock_guard<std::mutex> stats_guard{st_->mx};
        if (pending_.size() > st_->stats.peak_stream_buffer)
          st_->stats.peak_stream_buffer = pending_.size();
      }
      if (pending_.size() > st_->opts.limits.stream_hard_limit) {
        // The backend ignored `full`: the slow client is dropped.
        closed_ = true;
        cbs.swap(close_cbs_);
        take_ready_locked(cbs);
        if (!detached_)
          net::post(io_, [owner = owner_] {
            if (auto s = owner.lock())
              net::dispatch(s->get_executor(), [s] { s->abort_stream(); });
          });
        result = sink_state::closed;
      } else {
        if (!pending_.empty())
          schedule_locked();
        if (pending_.size() >= st_->opts.limits.stream_buffer_bytes) {
          full_ = true;
          result = sink_state::full;
        }
      }
    } else {
      c.text += out;
      for (auto& l : c.ready_logprobs)
        c.logprobs.push_back(std::move(l));
      c.ready_logprobs.clear();
    }
    if (c.filter.stopped() && !closed_) {
      // Its stop string: this choice is over (the others go on); with the
      // last one, the answer.
      end_locked(choice, finish_reason::stop);
      if (open_choices_ == 0) {
        closed_ = true;
        cbs.swap(close_cbs_);
        take_ready_locked(cbs);
        result = sink_state::closed;
      } else {
        result = sink_state::choice_done;
      }
    }
  }
  for (auto& f : cbs)
    f();
  return result;
}

std::string stream_sink::visible(choice& c, std::string out) {
  out = valid_utf8(out);
  c.text_bytes += out.size();
  if (c.skip > 0) {
    auto n = static_cast<std::size_t>(
      std::min<std::uint64_t>(c.skip, out.size()));
    out.erase(0, n);
    c.skip -= n;
  }
  return out;
}

std::string stream_sink::chunk(std::uint32_t i, const std::string& text) {
  std::string id;
  for (auto& c : choices_)
    id += (id.empty() ? "" : ",") + std::to_string(c.text_bytes);
  auto& c = choices_[i];
  const bool with_logprobs = req_.logprobs >= 0;
  auto out = "id: " + id + "\n"
             + text_chunk(req_.kind, head_, i, text, c.first,
                          req_.include_usage,
                          with_logprobs ? &c.ready_logprobs : nullptr);
  c.ready_logprobs.clear();
  c.first = false;
  sent_any_ = true;
  return out;
}

void stream_sink::prompt_logprobs(std::uint32_t choice,
                                  std::vector<token_logprob> tokens) {
  std::lock_guard<std::mutex> guard{mx_};
  if (closed_ || finished_ || choice >= choices_.size())
    return;
  auto& c = choices_[choice];
  // Each part of the answer with the alternatives it asked for (the job
  // scores with the larger count).
  auto cut = [&tokens](std::int32_t top) {
    auto out = tokens;
    for (auto& t : out)
      if (t.top.size() > static_cast<std::size_t>(top))
        t.top.resize(static_cast<std::size_t>(top));
    return out;
  };
  // Later ones, or a second time (a job taken over scores it again), are
  // dropped.
  if (req_.prompt_logprobs >= 0 && !c.prompt_scores)
    c.prompt_scores = cut(req_.prompt_logprobs);
  if (!req_.echo || req_.logprobs < 0 || c.echoed || c.prompt_lps)
    return;
  // Each token's offset: the bytes of the tokens before it (a prompt's
  // text need not be its tokens' joined: a BOS token, a leading space).
  auto lps = cut(req_.logprobs);
  std::uint64_t offset = 0;
  for (auto& t : lps) {
    t.text_offset = offset;
    offset += t.token.size();
  }
  c.prompt_lps = std::move(lps);
}

void stream_sink::echo_locked(std::uint32_t i) {
  auto& c = choices_[i];
  if (c.echoed || c.echo_text.empty())
    return;
  c.echoed = true;
  // Not fed to the stop filter (a stop string is looked for in what is
  // generated) and not a token; its bytes count like the completion's.
  auto out = visible(c, c.echo_text);
  // With logprobs, the prompt's tokens' go with it (and not to a resumed
  // client that has it).
  std::vector<token_logprob> lps;
  if (c.prompt_lps && req_.logprobs >= 0 && !out.empty())
    lps = std::move(*c.prompt_lps);
  c.prompt_lps.reset();
  if (!req_.stream) {
    c.text += out;
    c.logprobs.insert(c.logprobs.end(), std::make_move_iterator(lps.begin()),
                      std::make_move_iterator(lps.end()));
  } else if (!out.empty()) {
    c.ready_logprobs.insert(c.ready_logprobs.begin(),
                            std::make_move_iterator(lps.begin()),
                            std::make_move_iterator(lps.end()));
    pending_ += chunk(i, out);
  }
}

void stream_sink::end_locked(std::uint32_t i, finish_reason reason) {
  auto& c = choices_[i];
  if (c.ended)
    return;
  echo_locked(i);
  c.ended = true;
  --open_choices_;
  if (c.filter.stopped())
    reason = finish_reason::stop;
  c.reason = reason;
  auto raw = c.filter.flush();
  c.released += raw.size();
  // Past a stop string the tokens held back are not part of the answer.
  if (!c.filter.stopped())
    release_logprobs(c);
  c.held_logprobs.clear();
  auto tail = visible(c, std::move(raw));
  if (!req_.stream) {
    c.text += tail;
    for (auto& l : c.ready_logprobs)
      c.logprobs.push_back(std::move(l));
    c.ready_logprobs.clear();
    return;
  }
  if (!tail.empty() || !c.ready_logprobs.empty())
    pending_ += chunk(i, tail);
  if (c.first) { // an empty answer still names the role
    pending_ += text_chunk(req_.kind, head_, i, "", true, req_.include_usage);
    c.first = false;
    sent_any_ = true;
  }
  pending_ += finish_chunk(req_.kind, head_, i, reason, req_.include_usage);
  schedule_locked();
}

void stream_sink::end_choice(std::uint32_t choice, finish_reason reason) {
  std::lock_guard<std::mutex> guard{mx_};
  if (finished_ || choice >= choices_.size())
    return;
  end_locked(choice, reason);
}

void stream_sink::release_slot() {
  st_->in_flight.fetch_sub(slots_of(req_, st_->opts.limits.max_queued));
}

void stream_sink::finish(finish_reason reason, usage u) {
  finish_part(0, reason, u);
}

void stream_sink::finish_part(std::size_t part, finish_reason reason,
                              usage u) {
  {
    std::lock_guard<std::mutex> guard{mx_};
    if (finished_ || part >= parts_done_.size() || parts_done_[part])
      return;
    parts_done_[part] = true;
    // The part's choices not ended yet end with its reason.
    const std::size_t n = choices_.size() / parts_done_.size();
    for (std::size_t i = part * n; i < (part + 1) * n; ++i)
      end_locked(static_cast<std::uint32_t>(i), reason);
    parts_usage_.prompt_tokens += u.prompt_tokens;
    parts_usage_.cached_tokens += u.cached_tokens;
    if (++parts_finished_ < parts_done_.size())
      return; // the other prompts' go on
    finished_ = true;
    u = parts_usage_;
    u.completion_tokens = tokens_;
    if (req_.stream) {
      if (req_.include_usage)
        pending_ += usage_chunk(req_.kind, head_, u);
      pending_ += sse_done();
    } else if (req_.prompt_logprobs >= 0
               && std::any_of(choices_.begin(), choices_.end(),
                              [](const choice& c) {
                                return !c.prompt_scores;
                              })) {
      // Never an answer that silently lacks what was asked for.
      early_error_ = api_error{500,
                               "The job ended without its prompt's "
                               "log-probabilities (prompt_logprobs).",
                               "server_error", "", "job_failed"};
    } else {
      std::vector<choice_result> out;
      for (auto& c : choices_)
        out.push_back({std::move(c.text), c.reason, req_.logprobs >= 0,
                       std::move(c.logprobs), std::move(c.prompt_scores)});
      pending_ = completion_body(req_.kind, head_, out, u);
    }
    done_ = true;
    // The slot is free before the answer's last byte can leave: a client
    // that sends its next request on reading this one is never refused
    // for the slot this one still held.
    release_slot();
    schedule_locked();
  }
}

void stream_sink::fail(api_error e) {
  {
    std::lock_guard<std::mutex> guard{mx_};
    if (finished_)
      return;
    finished_ = true;
    if (req_.stream && sent_any_) {
      pending_ += error_event(e);
      pending_ += sse_done();
    } else {
      early_error_ = std::move(e);
    }
    done_ = true;
    release_slot(); // before the answer can leave, as in finish_part
    schedule_locked();
  }
}

void stream_sink::on_ready(std::function<void()> fn) {
  on_ready_part(0, std::move(fn));
}

void stream_sink::on_ready_part(std::size_t part, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> guard{mx_};
    if (full_ && !closed_ && part < ready_cbs_.size()) {
      ready_cbs_[part] = std::move(fn);
      return;
    }
  }
  fn();
}

void stream_sink::on_close(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> guard{mx_};
    if (!closed_) {
      close_cbs_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void stream_sink::close(bool client_gone) {
  std::vector<std::function<void()>> cbs;
  {
    std::lock_guard<std::mutex> guard{mx_};
    if (closed_)
      return;
    closed_ = true;
    cbs.swap(close_cbs_);
    take_ready_locked(cbs);
  }
  (void) client_gone;
  for (auto& f : cbs)
    f();
}

stream_sink::batch stream_sink::take() {
  std::lock_guard<std::mutex> guard{mx_};
  flush_posted_ = false;
  batch b;
  if (early_error_) {
    b.error_before_start = true;
    b.error = *early_error_;
    b.done = true;
    return b;
  }
  if (!req_.stream && !done_)
    return b; // the whole answer goes at once
  b.bytes.swap(pending_);
  b.done = done_;
  return b;
}

void stream_sink::written() {
  std::vector<std::function<void()>> cbs;
  {
    std::lock_guard<std::mutex> guard{mx_};
    if (full_ && pending_.size() < st_->opts.limits.stream_buffer_bytes / 2) {
      full_ = false;
      take_ready_locked(cbs);
    }
  }
  for (auto& f : cbs)
    f();
}

void stream_sink::take_ready_locked(std::vector<std::function<void()>>& out) {
  for (auto& f : ready_cbs_)
    if (f) {
      out.push_back(std::move(f));
      f = nullptr;
    }
}

// -- session: routes ----------------------------------------------------------

void session::handle() {
  auto& req = parser_->get();
  std::string target{req.target().data(), req.target().size()};
  auto path = target.substr(0, target.find('?'));
  auto method = req.method();
  std::string method_name{req.method_string().data(),
                          req.method_string().size()};
  auto only = [&](http::verb v) {
    if (method == v)
      return true;
    endpoint_ = path;
    send_error(method_not_allowed(method_name, path), keep_alive_);
    return false;
  };
  if (path == "/health") {
    if (!only(http::verb::get))
      return;
    endpoint_ = path;
    bool ready = !st_->opts.ready || st_->opts.ready();
    return send(ready ? 200 : 503, health_body(ready), "application/json",
                keep_alive_);
  }
  if (path == "/v1/models") {
    if (!only(http::verb::get))
      return;
    endpoint_ = path;
    if (!authorized(access::permission::job_submit))
      return;
    return send(200, models_body(st_->opts.models), "application/json",
                keep_alive_);
  }
  if (path == "/metrics") {
    if (!only(http::verb::get))
      return;
    endpoint_ = path;
    if (!authorized(access::permission::monitoring_read))
      return;
    return send(200, st_->metrics_text(),
                prometheus::text_writer::content_type, keep_alive_);
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (!only(http::verb::post))
      return;
    endpoint_ = path;
    if (!authorized(access::permission::job_submit))
      return;
    return handle_completion(path == "/v1/completions"
                               ? endpoint_kind::completions
                               : endpoint_kind::chat_completions);
  }
  if (path == "/tokenize" || path == "/detokenize") {
    if (!only(http::verb::post))
      return;
    endpoint_ = path;
    if (!authorized(access::permission::job_submit))
      return;
    return handle_tokenize(path == "/detokenize");
  }
  if (auto* a = find_asset(path)) {
    if (!only(http::verb::get))
      return;
    endpoint_ = "/";
    return send(200, std::string{a->body}, a->content_type, keep_alive_,
                nullptr,
                {{"Content-Security-Policy",
                  "default-src 'self'; connect-src 'self' ws: wss:; "
                  "img-src 'self' data:; frame-ancestors 'none'"},
                 {"Cache-Control", "no-cache"},
                 {"X-Content-Type-Options", "nosniff"},
                 {"X-Frame-Options", "DENY"},
                 {"Referrer-Policy", "no-referrer"}});
  }
  if (st_->opts.views
      && (path == "/v1/cluster" || path.rfind("/v1/cluster/", 0) == 0
          || path == "/v1/events"))
    return handle_cluster(path, method, method_name);
  endpoint_ = "other";
  send_error(unknown_endpoint(method_name, path), keep_alive_);
}

void session::handle_cluster(const std::string& path, http::verb method,
                             const std::string& method_name) {
  auto& req = parser_->get();
  if (path == "/v1/events") {
    endpoint_ = path;
    if (method != http::verb::get)
      return send_error(method_not_allowed(method_name, path), keep_alive_);
    if (!websocket::is_upgrade(req))
      return send_error(invalid_request("/v1/events is a WebSocket: "
                                        "connect with 'Upgrade: websocket'",
                                        {}, "upgrade_required"),
                        keep_alive_);
    if (!authorized(access::permission::monitoring_read))
      return;
    return start_events();
  }
  // POST /v1/cluster/jobs/ID/cancel
  static const std::string jobs_prefix = "/v1/cluster/jobs/";
  static const std::string cancel_suffix = "/cancel";
  if (path.size() > jobs_prefix.size() + cancel_suffix.size()
      && path.rfind(jobs_prefix, 0) == 0
      && path.compare(path.size() - cancel_suffix.size(),
                      cancel_suffix.size(), cancel_suffix)
           == 0) {
    endpoint_ = "/v1/cluster/jobs/cancel";
    if (method != http::verb::post)
      return send_error(method_not_allowed(method_name, path), keep_alive_);
    auto digits = path.substr(jobs_prefix.size(),
                              path.size() - jobs_prefix.size()
                                - cancel_suffix.size());
    // The one strict parser: digits, up to 2^64-1 (as the console's
    // cancel JOB takes them).
    std::uint64_t id = 0;
    try {
      id = text::parse_integer<std::uint64_t>(digits);
    } catch (const text::number_error& e) {
      return send_error(invalid_request(std::string{"Not a job id: "}
                                          + e.what()
                                          + " (as GET /v1/cluster/jobs "
                                            "lists them)",
                                        "job"),
                        keep_alive_);
    }
    if (!authorized(access::permission::job_cancel))
      return;
    auto keep = keep_alive_;
    st_->opts.views->cancel_job(id, answer_from_actors(keep));
    return;
  }
  auto name = path == "/v1/cluster" ? std::string{"cluster"}
                                    : path.substr(12);
  endpoint_ = path == "/v1/cluster" ? path : "/v1/cluster/part";
  if (method != http::verb::get)
    return send_error(method_not_allowed(method_name, path), keep_alive_);
  if (name == "actors" || name == "plans" || name == "audit") {
    // Asked of the cluster now: ?limit=N (1..1000, default 100), ?type=T
    // for the audit tail, ?node=NAME for the actors of another node.
    std::string target{req.target().data(), req.target().size()};
    auto query = target.find('?') == std::string::npos
                   ? std::string{}
                   : target.substr(target.find('?') + 1);
    std::size_t limit = 100;
    std::string type;
    std::size_t pos = 0;
    while (pos < query.size()) {
      auto end = query.find('&', pos);
      if (end == std::string::npos)
        end = query.size();
      auto kv = query.substr(pos, end - pos);
      auto eq = kv.find('=');
      auto key = kv.substr(0, eq);
      auto value = eq == std::string::npos ? std::string{} : kv.substr(eq + 1);
      if (key == "limit") {
        try {
          limit = text::parse_integer<std::size_t>(value, 1, 1000, "limit");
        } catch (const text::number_error& e) {
          return send_error(invalid_request(std::string{"limit must be "
                                                        "1..1000: "}
                                              + e.what(),
                                            "limit"),
                            keep_alive_);
        }
      } else if (key == "node" && name == "actors") {
        bool ok = !value.empty() && value.size() <= 64;
        for (char c : value)
          ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.'
                      || c == '_' || c == '-');
        if (!ok)
          return send_error(invalid_request("node must be a node name",
                                            "node"),
                            keep_alive_);
        type = value;
      } else if (key == "type" && name == "audit") {
        bool ok = !value.empty() && value.size() <= 64;
        for (char c : value)
          ok = ok && ((c >= 'a' && c <= 'z') || c == '_');
        if (!ok)
          return send_error(invalid_request("type must be an audit event "
                                            "type (a-z and _)",
                                            "type"),
                            keep_alive_);
        type = value;
      } else {
        return send_error(invalid_request("Unknown query parameter '" + key
                                            + "' (limit; audit: type; "
                                              "actors: node)",
                                          key),
                          keep_alive_);
      }
      pos = end + 1;
    }
    if (name == "audit")
      endpoint_ = "/v1/cluster/audit";
    if (!authorized(name == "audit" ? access::permission::audit_read
                                    : access::permission::monitoring_read))
      return;
    auto keep = keep_alive_;
    st_->opts.views->ask(name, limit, type, answer_from_actors(keep));
    return;
  }
  if (!authorized(access::permission::monitoring_read))
    return;
  auto body = st_->opts.views->view(name);
  if (!body)
    return send_error(unknown_endpoint(method_name, path), keep_alive_);
  send(200, std::move(*body), "application/json", keep_alive_);
}

void session::handle_tokenize(bool detokenize) {
  auto parsed = parse_tokenize(detokenize, parser_->get().body(),
                               request_limits_of(), known_model());
  if (!parsed)
    return send_error(parsed.error, keep_alive_);
  if (!st_->opts.backend)
    return send_error(unavailable("No backend runs completions on this "
                                  "server"),
                      keep_alive_);
  auto answer = st_->opts.backend->tokenize(*parsed.request);
  if (answer.error)
    return send_error(*answer.error, keep_alive_);
  send(200, std::move(answer.body), "application/json", keep_alive_);
}

void session::handle_completion(endpoint_kind kind) {
  auto parsed = parse_request(kind, parser_->get().body(),
                              request_limits_of(), known_model());
  if (!parsed)
    return send_error(parsed.error, keep_alive_);
  // A client whose gateway node died resumes its stream here.
  api_error resume_error;
  auto& headers = parser_->get();
  auto header = [&](const char* name) {
    auto v = headers[name];
    return std::string_view{v.data(), v.size()};
  };
  auto resume = parse_resume(header("X-Exo-Resume"), header("Last-Event-ID"),
                             resume_error);
  if (resume_error.status != 0)
    return send_error(resume_error, keep_alive_);
  if (resume && !resume->after.empty()
      && resume->after.size() != parsed.request->total_choices())
    return send_error(
      invalid_request("Last-Event-ID names "
                        + std::to_string(resume->after.size())
                        + " byte counts; the request has "
                        + std::to_string(parsed.request->total_choices())
                        + " choices (n for each prompt): one count per "
                          "choice, joined by commas, as the stream's id: "
                          "lines give them",
                      "Last-Event-ID"),
      keep_alive_);
  if (!st_->opts.backend)
    return send_error(unavailable("No backend runs completions on this "
                                  "server"),
                      keep_alive_);
  if (auto e = set_echo_text(*st_->opts.backend, *parsed.request))
    return send_error(*e, keep_alive_);
  // Each prompt is a job: it takes a slot of its own.
  const auto slots = slots_of(*parsed.request, st_->opts.limits.max_queued);
  if (st_->in_flight.fetch_add(slots) + slots
      > st_->opts.limits.max_queued) {
    st_->in_flight.fetch_sub(slots);
    auto e = queue_full(st_->opts.limits.max_queued);
    limit_hit(e);
    return send_error(e, keep_alive_);
  }
  response_head head{resume ? resume->id : st_->ids.next(kind),
                     std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count(),
                     parsed.request->model};
  parsed.request->id = head.id;
  if (resume) {
    parsed.request->resume = true;
    parsed.request->resume_after = resume->after;
  }
  sink_ = std::make_shared<stream_sink>(st_, *parsed.request, std::move(head),
                                        st_->ioc->get_executor(),
                                        weak_from_this());
  {
    std::lock_guard<std::mutex> guard{st_->mx};
    st_->sinks[sink_.get()] = sink_;
  }
  header_sent_ = false;
  answer_done_ = false;
  writing_ = false;
  watch();
  try {
    const auto parts = parsed.request->prompt_count();
    if (parts == 1) {
      st_->opts.backend->complete(*parsed.request, sink_);
    } else { // each prompt a request of its own, into one answer
      const auto n = std::max<std::uint32_t>(parsed.request->n, 1);
      // (Every part starts, closed or not: each one's finish or failure
      // counts toward the answer's end.)
      for (std::size_t p = 0; p < parts; ++p)
        st_->opts.backend->complete(part_request(*parsed.request, p),
                                    std::make_shared<part_sink>(sink_, p, n));
    }
  } catch (const std::exception& e) {
    sink_->fail(api_error{500, std::string{"The backend failed: "} + e.what(),
                          "server_error", {}, "backend_error"});
    sink_->close(false);
  }
}

void session::flush() {
  if (!sink_ || writing_ || answer_done_)
    return;
  auto b = sink_->take();
  if (b.error_before_start) {
    answer_finished();
    return send_error(b.error, keep_alive_);
  }
  if (!sink_->streaming()) {
    if (!b.done)
      return;
    answer_finished();
    return send(200, std::move(b.bytes), "application/json", keep_alive_);
  }
  if (b.bytes.empty() && !b.done)
    return;
  write_stream(std::move(b.bytes), b.done);
}

void session::answer_finished() {
  std::lock_guard<std::mutex> guard{st_->mx};
  st_->sinks.erase(sink_.get());
  // sink_ stays referenced until the next request: its backend may still
  // hold it, and the watch's handler reads it.
}

void session::write_stream(std::string bytes, bool done) {
  writing_ = true;
  write_buf_ = std::move(bytes);
  auto self = shared_from_this();
  auto after = [self, done](beast::error_code ec, std::size_t) {
    self->timer_.cancel();
    self->writing_ = false;
    if (ec) {
      if (self->sink_)
        self->sink_->close(true);
      return self->close_now();
    }
    self->sink_->written();
    if (!done)
      return self->flush();
    // The last chunk.
    self->writing_ = true;
    self->arm(self->st_->opts.limits.write_timeout, false);
    net::async_write(self->socket_, http::make_chunk_last(),
                     [self](beast::error_code ec, std::size_t) {
                       self->timer_.cancel();
                       self->writing_ = false;
                       self->answer_finished();
                       self->answer_done_ = true;
                       self->st_->count_request(
                         self->endpoint_, 200,
                         std::chrono::duration<double>(steady::now()
                                                       - self->started_)
                           .count());
                       if (ec)
                         return self->close_now();
                       if (self->watching_) {
                         // The watch's handler continues with the next
                         // request once the cancel reaches it.
                         beast::error_code ignored;
                         self->socket_.cancel(ignored);
                         return;
                       }
                       self->after_response(self->keep_alive_);
                     });
  };
  arm(st_->opts.limits.write_timeout, false);
  if (!header_sent_) {
    header_sent_ = true;
    stream_res_.emplace(http::status::ok, 11);
    stream_res_->set(http::field::server, "exo");
    stream_res_->set(http::field::content_type, "text/event-stream");
    stream_res_->set(http::field::cache_control, "no-cache");
    stream_res_->keep_alive(keep_alive_);
    stream_res_->chunked(true);
    stream_sr_.emplace(*stream_res_);
    http::async_write_header(
      socket_, *stream_sr_,
      [self, after](beast::error_code ec, std::size_t) {
        if (ec)
          return after(ec, 0);
        if (self->write_buf_.empty())
          return after({}, 0);
        net::async_write(self->socket_,
                         http::make_chunk(net::buffer(self->write_buf_)),
                         after);
      });
    return;
  }
  if (write_buf_.empty())
    return after({}, 0);
  net::async_write(socket_, http::make_chunk(net::buffer(write_buf_)), after);
}

// -- metrics ------------------------------------------------------------------

std::string server::state::metrics_text() {
  prometheus::text_writer w;
  {
    std::lock_guard<std::mutex> guard{mx};
    w.family("exo_http_requests_total", "HTTP requests answered, by "
             "endpoint and status.", prometheus::metric_type::counter);
    for (auto& [key, n] : requests)
      w.sample({{"endpoint", key.first}, {"status", std::to_string(key.second)}},
               static_cast<double>(n));
    w.family("exo_http_request_duration_seconds", "Time from a request's "
             "arrival to the end of its answer.",
             prometheus::metric_type::histogram);
    w.sample({}, request_seconds);
    w.family("exo_tokens_generated_total", "Tokens delivered to clients.",
             prometheus::metric_type::counter);
    w.sample({}, static_cast<double>(tokens));
    w.family("exo_time_to_first_token_seconds", "Time from admission to a "
             "completion's first token.",
             prometheus::metric_type::histogram);
    w.sample({}, ttft_seconds);
    w.family("exo_token_latency_seconds", "Time between consecutive tokens "
             "of a completion.", prometheus::metric_type::histogram);
    w.sample({}, token_seconds);
    w.family("exo_gateway_connections", "HTTP connections open.",
             prometheus::metric_type::gauge);
    w.sample({}, static_cast<double>(connections.load()));
    w.family("exo_gateway_queue_depth", "Completions admitted and not "
             "finished (waiting or running).",
             prometheus::metric_type::gauge);
    w.sample({}, static_cast<double>(in_flight.load()));
    w.family("exo_gateway_refused_connections_total", "Connections refused "
             "at the connection limit.", prometheus::metric_type::counter);
    w.sample({}, static_cast<double>(stats.refused_connections));
    w.family("exo_gateway_client_disconnects_total", "Completions whose "
             "client went away before the end.",
             prometheus::metric_type::counter);
    w.sample({}, static_cast<double>(stats.client_disconnects));
  }
  if (opts.metrics)
    opts.metrics->collect(w);
  return w.str();
}

// -- server -------------------------------------------------------------------

namespace {

/// The server side of HTTPS: TLS 1.2 or newer, the certificate chain and
/// key of `f`. Throws std::runtime_error naming the file that fails.
ssl::context make_tls_context(const tls_files& f) {
  ssl::context ctx{ssl::context::tls_server};
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2
                  | ssl::context::no_sslv3 | ssl::context::no_tlsv1
                  | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  auto pass = f.passphrase;
  ctx.set_password_callback(
    [pass](std::size_t, ssl::context::password_purpose) { return pass; });
  beast::error_code ec;
  ctx.use_certificate_chain_file(f.certificate, ec);
  if (ec)
    throw std::runtime_error("gateway: cannot load the HTTPS certificate "
                             + f.certificate + ": " + ec.message());
  ctx.use_private_key_file(f.key, ssl::context::pem, ec);
  if (ec)
    throw std::runtime_error("gateway: cannot load the HTTPS key " + f.key
                             + ": " + ec.message()
                             + " (wrong passphrase, or not the "
                               "certificate's key?)");
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1)
    throw std::runtime_error("gateway: the HTTPS key " + f.key
                             + " does not belong to the certificate "
                             + f.certificate);
  return ctx;
}

void do_accept(const std::shared_ptr<server::state>& st) {
  st->acceptor->async_accept(
    net::make_strand(*st->ioc),
    [st](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ec == net::error::operation_aborted || st->stopping)
          return;
        // EMFILE and friends: try again on the next turn, not in a loop.
        auto t = std::make_shared<net::steady_timer>(*st->ioc);
        t->expires_after(std::chrono::milliseconds{50});
        t->async_wait([st, t](beast::error_code) {
          if (!st->stopping)
            do_accept(st);
        });
        return;
      }
      if (st->opts.limits.socket_send_buffer > 0) {
        beast::error_code ignored;
        socket.set_option(net::socket_base::send_buffer_size(
                            st->opts.limits.socket_send_buffer),
                          ignored);
      }
      bool over = st->connections.fetch_add(1)
                  >= st->opts.limits.max_connections;
      auto s = std::make_shared<session>(std::move(socket), st);
      {
        std::lock_guard<std::mutex> guard{st->mx};
        st->sessions[s.get()] = s;
        st->stats.connections = st->connections.load();
        if (!over && st->stats.connections > st->stats.peak_connections)
          st->stats.peak_connections = st->stats.connections;
        if (over)
          ++st->stats.refused_connections;
      }
      if (over)
        s->refuse();
      else
        s->start();
      do_accept(st);
    });
}

} // namespace

server::server(server_options opts)
  : state_(std::make_shared<state>(std::move(opts))) {
}

server::~server() {
  stop();
}

std::uint16_t server::start() {
  auto& st = *state_;
  if (st.opts.tls.enabled())
    st.tls.emplace(make_tls_context(st.opts.tls));
  st.ioc = std::make_unique<net::io_context>(
    static_cast<int>(std::max(1u, st.opts.threads)));
  beast::error_code ec;
  auto addr = net::ip::make_address(st.opts.host, ec);
  if (ec)
    throw std::runtime_error("gateway: invalid listen address '"
                             + st.opts.host + "': " + ec.message());
  tcp::endpoint ep{addr, st.opts.port};
  st.acceptor.emplace(*st.ioc);
  auto fail = [&](const char* what) {
    throw std::runtime_error("gateway: cannot " + std::string{what} + " "
                             + st.opts.host + ":"
                             + std::to_string(st.opts.port) + ": "
                             + ec.message());
  };
  st.acceptor->open(ep.protocol(), ec);
  if (ec)
    fail("open");
  st.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  st.acceptor->bind(ep, ec);
  if (ec)
    fail("bind");
  st.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    fail("listen on");
  st.port = st.acceptor->local_endpoint().port();
  do_accept(state_);
  for (unsigned i = 0; i < std::max(1u, st.opts.threads); ++i)
    st.threads.emplace_back([ioc = st.ioc.get()] {
      // A handler that throws must not end the process (the server's
      // threads are ours, not the caller's): say so and go on.
      for (;;) {
        try {
          ioc->run();
          return;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "exo gateway: a request handler failed: %s\n",
                       e.what());
        }
      }
    });
  return st.port;
}

void server::stop() {
  auto& st = *state_;
  if (st.stopping.exchange(true) || !st.ioc)
    return;
  net::post(*st.ioc, [s = state_] {
    beast::error_code ignored;
    s->acceptor->close(ignored);
  });
  std::vector<std::shared_ptr<session>> sessions;
  std::vector<std::shared_ptr<stream_sink>> sinks;
  // Sessions waiting for the actors are let go of by their callbacks,
  // which may outlive the io_context (reply_slot): held here until no
  // handler runs, and released before the io_context goes.
  std::vector<std::shared_ptr<session>> waiting;
  std::vector<std::shared_ptr<reply_slot>> replies;
  {
    std::lock_guard<std::mutex> guard{st.mx};
    for (auto& w : st.replies)
      if (auto r = w.lock())
        replies.push_back(std::move(r));
    st.replies.clear();
  }
  // Not under st.mx: a session destroyed under a slot's mutex takes it.
  for (auto& r : replies) {
    std::lock_guard<std::mutex> guard{r->mx};
    if (r->waiting)
      waiting.push_back(std::move(r->waiting));
  }
  replies.clear();
  {
    std::lock_guard<std::mutex> guard{st.mx};
    for (auto& [_, w] : st.sessions)
      if (auto s = w.lock())
        sessions.push_back(std::move(s));
    for (auto& [_, w] : st.sinks)
      if (auto s = w.lock())
        sinks.push_back(std::move(s));
  }
  for (auto& s : sessions)
    net::post(s->get_executor(), [s] { s->shutdown(); });
  sessions.clear();
  st.ioc->stop();
  for (auto& t : st.threads)
    t.join();
  st.threads.clear();
  // No handler runs any more: sinks stop posting, backends see them close.
  {
    std::lock_guard<std::mutex> guard{st.mx};
    for (auto& [_, w] : st.sinks)
      if (auto s = w.lock())
        sinks.push_back(std::move(s));
  }
  for (auto& s : sinks)
    s->detach();
  sinks.clear();
  st.acceptor.reset();
  waiting.clear();
  // Destroys the handlers still queued and with them the sessions.
  st.ioc.reset();
}

std::uint16_t server::port() const {
  return state_->port;
}

server_stats server::stats() const {
  std::lock_guard<std::mutex> guard{state_->mx};
  auto s = state_->stats;
  s.connections = state_->connections.load();
  s.in_flight = state_->in_flight.load();
  return s;
}

} // namespace exo::gateway
