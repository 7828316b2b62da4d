#pragma once

/// The node's OpenAI-compatible gateway: the HTTP server
/// (runtime/gateway/server.hpp) over the node's job coordinator (the
/// "jobs" service, through runtime/gateway/job_backend.hpp), serving the
/// models of the config's `gateway` section. Started after the runtime,
/// stopped before it (its sinks close: running jobs are cancelled).

#include "core/config/node_config.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace exo {

class runtime;

class gateway_service {
public:
  /// Reads every model's header and hashes the file (a model that cannot
  /// be read, or two models with one id, throw startup_error naming it),
  /// binds and starts
  /// the server (startup_error naming the address when it cannot bind).
  gateway_service(runtime& rt, const config::gateway_section& g);
  ~gateway_service();

  gateway_service(const gateway_service&) = delete;
  gateway_service& operator=(const gateway_service&) = delete;

  /// The bound port.
  std::uint16_t port() const;
  /// The served model ids, in the config's order.
  const std::vector<std::string>& model_ids() const;
  /// Closes every connection (cancelling their jobs). Idempotent.
  void stop();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace exo
