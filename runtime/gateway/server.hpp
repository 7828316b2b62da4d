#pragma once

/// The gateway's HTTP/1.1 server on Boost.Beast: one io_context on its own
/// threads, every socket operation asynchronous. Serves
///
///   GET  /health               llama-server's body; 503 while not ready
///   GET  /v1/models            the models given in the options
///   POST /v1/completions       through completion_backend
///   POST /v1/chat/completions  through completion_backend
///   GET  /metrics              exo_* metrics of the gateway and the
///                              metrics_source's families
///   GET  /v1/cluster[/PART]    the view_source's snapshot (or one list:
///                              nodes, devices, links, thermal, jobs;
///                              asked now: actors, plans, audit?limit&type
///                              -- audit needs audit_read)
///   POST /v1/cluster/jobs/ID/cancel
///   GET  /v1/events            WebSocket (subprotocol exo.v1): the
///                              view_source's events as text frames
///   GET  /, /app.js, /style.css  the dashboard (embedded at build time)
///
/// with the limits of server_limits, each answered with its status (OpenAI's
/// error object): a header over max_header_bytes 431, a body over
/// max_body_bytes 413 (before reading it), more than max_queued admitted
/// completions 429, more than max_connections connections 503, a request
/// that has not fully arrived within request_timeout (slowloris, idle
/// keep-alive) is closed, and so is a connection whose write makes no
/// progress within write_timeout. A streaming client that reads slower than
/// tokens come gets back-pressure (the backend is told `full`), and one
/// whose buffer still overruns stream_hard_limit is closed. A client that
/// disconnects closes its sink: the backend learns it and cancels.

#include "core/access/permission.hpp"
#include "core/gateway/response.hpp"
#include "runtime/gateway/completion_backend.hpp"
#include "runtime/gateway/view_source.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace exo::gateway {

/// Bounds on what one client can make the server hold.
struct server_limits {
  /// Request line and headers.
  std::size_t max_header_bytes = 16 * 1024;
  /// Request body.
  std::size_t max_body_bytes = 1 << 20;
  /// Open connections; more are answered 503 and closed.
  std::size_t max_connections = 256;
  /// Completions admitted (waiting or running; a request of several
  /// prompts counts each, up to all of them); more are answered 429.
  std::size_t max_queued = 64;
  /// From the start of waiting for a request until it has fully arrived.
  std::chrono::milliseconds request_timeout{10'000};
  /// One write to a client.
  std::chrono::milliseconds write_timeout{30'000};
  /// Unsent stream bytes above which the backend is told `full`.
  std::size_t stream_buffer_bytes = 64 * 1024;
  /// Unsent stream bytes above which the client is dropped.
  std::size_t stream_hard_limit = 1 << 20;
  /// Unsent event bytes of one /v1/events socket above which it is closed
  /// (a client that never reads).
  std::size_t events_hard_limit = 1 << 20;
  /// SO_SNDBUF of accepted sockets (0: the system's): bounds what the
  /// kernel holds for a slow reader.
  int socket_send_buffer = 0;
};

/// HTTPS: the server's certificate (a PEM chain), its key and the key's
/// passphrase. Empty certificate: plain HTTP.
struct tls_files {
  std::string certificate;
  std::string key;
  std::string passphrase;

  bool enabled() const {
    return !certificate.empty();
  }
};

/// What an authorization hook decides about one request.
struct auth_result {
  bool allowed = false;
  /// The refusal as the client sees it (401, 403 or 429).
  api_error error;
};

/// Asks whether `token` (empty when the request has none) may do what
/// `needed` names, for a request to `path` from `peer` ("ADDRESS:PORT").
/// Runs on the server's threads: must not block (a lock and a cached check
/// are fine, a message round trip is not). Refusals are the hook's to
/// audit.
using authorize_fn = std::function<auth_result(
  std::string_view token, access::permission needed, std::string_view path,
  std::string_view peer)>;

/// Everything the server needs.
struct server_options {
  /// Address to listen on.
  std::string host = "127.0.0.1";
  /// 0: any free port (server::start returns it).
  std::uint16_t port = 0;
  /// Threads running the io_context.
  unsigned threads = 2;
  server_limits limits;
  /// max_tokens and message bounds (max_body_bytes comes from limits).
  request_limits requests;
  /// The models served; requests for others are answered 404.
  std::vector<model_entry> models;
  /// Runs completions; without one, completions are answered 503.
  std::shared_ptr<completion_backend> backend;
  /// Extra families for /metrics.
  std::shared_ptr<metrics_source> metrics;
  /// The cluster views and events; without one those endpoints answer 404.
  std::shared_ptr<view_source> views;
  /// Checks the bearer token of every request but /health; empty: no
  /// check (loopback use only). The permissions asked for: /v1/models and
  /// completions job_submit, /metrics monitoring_read.
  authorize_fn authorize;
  /// HTTPS when set; start() throws naming the file that does not load.
  tls_files tls;
  /// Whether /health answers ok; empty: always.
  std::function<bool()> ready;
  /// Told of every request refused by a limit of the server (431 headers,
  /// 413 body, 503 connections, 429 completions admitted): the status, the
  /// error's message, the path (may be empty) and the peer. Runs on the
  /// server's threads: must not block. Token refusals go to `authorize`.
  std::function<void(int status, std::string_view message,
                     std::string_view path, std::string_view peer)>
    on_limit;
};

/// The server's counters, for tests and /metrics.
struct server_stats {
  /// Connections open now.
  std::size_t connections = 0;
  /// Most connections open at once.
  std::size_t peak_connections = 0;
  /// Completions admitted and not finished.
  std::size_t in_flight = 0;
  /// Connections refused for the connection limit.
  std::uint64_t refused_connections = 0;
  /// Requests answered (any status).
  std::uint64_t requests = 0;
  /// Connections closed because a request did not arrive in time.
  std::uint64_t timeouts = 0;
  /// Sinks closed because their client went away.
  std::uint64_t client_disconnects = 0;
  /// Most unsent stream bytes any sink held.
  std::size_t peak_stream_buffer = 0;
  /// /v1/events sockets open now.
  std::size_t event_sockets = 0;
  /// /v1/events sockets closed because their client did not read.
  std::uint64_t slow_event_sockets = 0;
};

/// The HTTP server. Not copyable; stop() (or the destructor) ends it.
class server {
public:
  explicit server(server_options opts);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Binds, listens and starts the threads; returns the port. Throws
  /// std::runtime_error naming the address when it cannot bind.
  std::uint16_t start();

  /// Closes every connection and sink (backends see their sinks close),
  /// joins the threads. Idempotent.
  void stop();

  /// The bound port (0 before start).
  std::uint16_t port() const;

  server_stats stats() const;

  struct state;

private:
  std::shared_ptr<state> state_;
};

} // namespace exo::gateway
