#pragma once

/// The "shards" node service, on every node (detached: it maps and hashes
/// model files). Through the gate it answers, from any node:
///
///   (shard_atom, shard_spec)   -> shard_ready: a shard for the layer range
///       on one of this node's devices. The model comes from spec.model
///       (requests from this node only), else from the model cache
///       <state_dir>/models/<sha256>/model.gguf, else it is fetched from
///       the bulk channel of member spec.source_node (core/tls/
///       bulk_channel.hpp; whole file SHA-256-verified, then cached: a
///       second run sends nothing). The node's bulk channel serves the
///       models offered in runs this node coordinates, nothing else.
///
/// Console commands:
///   run --model FILE --prompt TEXT [-n N] [--seed S] [--temperature T]
///       [--stages K] [--sequences M]
///       asks the coordinator's placement service (through the gates) for
///       a plan of the model on the live cluster (free memory, measured
///       links, device speed, thermal state; objective latency, or
///       throughput with M > 1) and uses its stages (device, layer range);
///       with --stages K it splits the layers evenly instead
///       (simple_placement). It starts the shards through the gates, links
///       them, runs the job and replies with the placement (the solver's
///       table: per stage device, layers, compute and transfer time, proven
///       optimal or not, planned by), the text, the bytes of model sent and
///       tokens/s. The node that receives the command coordinates the job;
///       its stdout shows "job N started" and the tokens as they come. The
///       reply starts with "job N".
///   jobs    -> the runs this node coordinates: id, model, tokens so far.
///   cancel N -> job N stops at its next token boundary (in-flight steps
///       are awaited, no new token is sampled), releases its stages' KV
///       caches, and its `run` replies with the text so far and a
///       "cancelled: job N stopped after T generated tokens" line;
///       audited job_finished with outcome "cancelled". The gate checks
///       job_cancel (jobs: monitoring_read). Job ids are per coordinating
///       node: cancel on the node the run was sent to.
///   shards  -> the shards running on this node.

#include "actors/service/service.hpp"

namespace exo::workload {

/// Spawns the service: name "shards", commands "shards", "run", "jobs",
/// "cancel".
service spawn_shards_service(const service_context& ctx);

} // namespace exo::workload
