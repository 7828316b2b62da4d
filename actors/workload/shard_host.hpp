#pragma once

/// The shard host: the "shards" node service, on every node (detached: it
/// maps and hashes model files). It hosts the shards job coordinators ask
/// for (actors/workload/job_coordinator.hpp) and fetches the weights this
/// node lacks. Through the gate it answers, from any node:
///
///   (shard_atom, shard_spec)   -> shard_ready: a shard for the layer range
///       on one of this node's devices (spec.device, or the first usable
///       one). The model comes from spec.model (requests from this node
///       only), else from the model cache
///       <state_dir>/models/<sha256>/model.gguf, else the parts it misses
///       (spec.parts, each SHA-256-verified) are fetched from the bulk
///       channel of member spec.source_node (core/tls/bulk_channel.hpp)
///       and cached: a second run sends nothing. Shards asking for a model
///       whose download is under way wait for it.
///
/// The shards it spawns are linked to it and stop with their owner
/// (spec.owner, the job's coordinator).
///
/// Console command:
///   shards  -> the shards running on this node.

#include "actors/service/service.hpp"

namespace exo::workload {

/// Spawns the service: name "shards", command "shards".
service spawn_shard_host(const service_context& ctx);

} // namespace exo::workload
