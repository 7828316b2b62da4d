#pragma once

/// The gateway's view_source and metrics_source over a live node: a small
/// actor polls the node's gate every `interval` (console nodes, devices,
/// links, thermal, jobs and the audit log's new records, all asked at once
/// and none waited on by the server), builds the snapshot with
/// core/gateway/cluster_view.hpp, and pushes the events that tell it from
/// the last one to every /v1/events subscriber. The server's threads read
/// only the last snapshot (a copy under a mutex): a cluster that answers
/// slowly makes the views older, never the HTTP answers slower.

#include "core/gateway/response.hpp"
#include "runtime/gateway/completion_backend.hpp"
#include "runtime/gateway/view_source.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace exo::gateway {

class cluster_watch : public view_source, public metrics_source {
public:
  /// Starts polling `gate` (the node's gate actor) in `sys`.
  cluster_watch(caf::actor_system& sys, caf::actor gate, std::string node,
                std::vector<model_entry> models,
                std::chrono::milliseconds interval
                = std::chrono::milliseconds{1000});
  /// Stops the poller; subscribers get nothing more.
  ~cluster_watch() override;

  std::optional<std::string> view(const std::string& name) override;
  std::uint64_t subscribe(std::function<void(std::string)> push) override;
  void unsubscribe(std::uint64_t id) override;
  void cancel_job(std::uint64_t id,
                  std::function<void(int, std::string)> done) override;
  bool ask(const std::string& name, std::size_t limit,
           const std::string& type,
           std::function<void(int, std::string)> done) override;
  void collect(prometheus::text_writer& w) override;

  /// Whether a first snapshot has arrived.
  bool ready() const;

  struct shared;

private:
  std::shared_ptr<shared> sh_;
  caf::actor gate_;
  caf::actor poller_;
};

} // namespace exo::gateway
