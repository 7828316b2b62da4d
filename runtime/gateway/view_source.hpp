#pragma once

/// What the gateway's cluster endpoints read: the latest snapshot of the
/// cluster (core/gateway/cluster_view.hpp) and a stream of events. The
/// server calls these on its own threads; they answer from what the source
/// already holds and never wait on the cluster.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace exo::gateway {

class view_source {
public:
  virtual ~view_source() = default;

  /// The JSON of `name` ("cluster" for the whole snapshot, or "nodes",
  /// "devices", "links", "thermal", "jobs"); nullopt for another name.
  virtual std::optional<std::string> view(const std::string& name) = 0;

  /// Calls `push` with each event (a JSON text) from now on, on any thread,
  /// until unsubscribe(id), which waits for a call in progress; `push` must
  /// not block nor subscribe or unsubscribe.
  virtual std::uint64_t subscribe(std::function<void(std::string)> push) = 0;

  virtual void unsubscribe(std::uint64_t id) = 0;

  /// Asks to cancel job `id` of this node; calls `done` once, on any
  /// thread, with an HTTP status (200, 404, 503) and a JSON body.
  virtual void cancel_job(std::uint64_t id,
                          std::function<void(int, std::string)> done) = 0;

  /// A view asked of the cluster when it is requested (too large or too
  /// rare to poll): "actors" (the actors of node `type`, this node when
  /// empty), "plans" (the placement service's plans per job), "audit"
  /// (this node's audit log: the newest `limit` records, of `type` when
  /// not empty). Calls `done` once, on any
  /// thread, with an HTTP status and a JSON body; false (and no call) for
  /// another name.
  virtual bool ask(const std::string& name, std::size_t limit,
                   const std::string& type,
                   std::function<void(int, std::string)> done) = 0;
};

} // namespace exo::gateway
