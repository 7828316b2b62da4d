#pragma once

/// The cluster as the gateway shows it: one snapshot document built from
/// the node's console answers (nodes, devices, links, thermal, jobs), the
/// events that tell one snapshot from the next, and the device gauges of
/// /metrics. Pure functions on JSON (no actors, no sockets): the gateway's
/// watcher (runtime/gateway/cluster_watch) polls and calls them.
///
/// The snapshot (GET /v1/cluster):
///
///   {"node", "coordinator", "nodes": [...], "devices": [...],
///    "links": [...], "thermal": [...], "jobs": [...], "models": [...],
///    "jobs_waiting": N,   (runs waiting for memory to be admitted)
///    "stages": [...]}     (every node's device stages: stage_entries)
///
/// Events (WebSocket /v1/events), each {"type", "time_ms", "data"}:
///   node       a nodes[] entry + "change": joined | status | left
///   device     a devices[] entry whose state or free memory changed
///   thermal    a thermal[] entry whose state changed (or that is new)
///   job        a jobs[] entry with its "state" (running, finished,
///              cancelled, failed): when first seen, when its token count
///              or state moved, and "finished" when a running job left
///              the lists
///   placement  {"job", "stages"} when a job first shows its stages
///   audit      {"seq", "event", "principal", "detail"}

#include "core/gateway/prometheus.hpp"
#include "core/text/json.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace exo::gateway {

/// What the node's console answered, each as parsed JSON (null when the
/// answer did not come: the part is left empty).
struct cluster_parts {
  std::string node;          ///< the node serving
  text::json nodes;          ///< {"coordinator", "nodes": [...]}
  text::json devices;        ///< [...]
  text::json links;          ///< [...]
  text::json thermal;        ///< {"devices": [...]}
  text::json jobs;           ///< {"node", "jobs": [...], "recent": [...],
                             ///<  "waiting": [...]}
  text::json models;         ///< [{"id", "object", "owned_by"}, ...]
  text::json stages;         ///< stage_entries of every node, [...]
};

/// At most this many entries of each list are kept (a cluster view from
/// the network is bounded before the gateway holds it).
inline constexpr std::size_t max_view_entries = 4096;

/// The snapshot document. Entries that are not objects are dropped; lists
/// are cut at max_view_entries.
text::json make_snapshot(const cluster_parts& parts);

/// One list of the snapshot by name ("nodes", "devices", "links",
/// "thermal", "jobs"), or null for another name.
text::json snapshot_part(const text::json& snapshot, const std::string& name);

/// The events from `before` to `after` (both snapshots; `before` null on
/// the first poll: every node and job is new), stamped `time_ms`.
std::vector<text::json> diff_events(const text::json& before,
                                    const text::json& after,
                                    std::int64_t time_ms);

/// An audit record of the console's `audit query` JSON as an event, or
/// null when it is not one or only a debug record.
text::json audit_event(const text::json& record, std::int64_t time_ms);

/// The audit records of one poll as events: one per record, except that
/// more than `max_same` records of one type (a job frees a buffer per
/// tensor) are one event counting them ("count", "detail": "N records,
/// seq A to B").
std::vector<text::json> audit_events(const text::json& records,
                                     std::int64_t time_ms,
                                     std::size_t max_same = 3);

/// The devices of a snapshot as dcgm-exporter readings: memory used and
/// free in MiB; from the thermal entry (the device's telemetry) its load
/// in percent and clock when reported (else the device's nominal clock),
/// temperature and power when it has a sensor; `gpu` is the device's rank
/// on its node, `UUID` "NODE/ID", `Hostname` the node.
std::vector<prometheus::device_reading>
device_readings(const text::json& snapshot);

/// The jobs of a snapshot this node coordinates now (state "running"; the
/// snapshot's jobs also hold the ones that ended lately) and the runs
/// waiting for memory to be admitted ("jobs_waiting").
struct job_counts {
  std::size_t running = 0;
  std::size_t waiting = 0;
};
job_counts count_jobs(const text::json& snapshot);

/// The device stages a node's shard host lists in its inspection (fields
/// "stage N", each one JSON object: workload::stage_figures), each with
/// "node" added. The fields come from a peer: an entry that does not
/// parse, or lacks a field or has one of the wrong type (strings of at
/// most 256 bytes, counts as non-negative integers), is left out, and so
/// is everything past max_view_entries. The batch-wait histogram
/// (wait_le: at most 32 finite ascending bounds, wait_counts: one count
/// per bucket and one past the last bound, wait_sum_s) may be missing
/// (a node of an earlier version), never malformed.
text::json stage_entries(const std::string& node,
                         const std::map<std::string, std::string>& fields);

/// Writes the serving families of `stages` (stage_entries of every
/// node), each labelled node, device, model (12 hex digits of its sha256),
/// layers ("first-last") and kv_type: gauges exo_stage_jobs,
/// exo_stage_sequences, exo_kv_cache_bytes and, for paged caches,
/// exo_kv_cache_blocks, exo_kv_cache_blocks_used,
/// exo_kv_cache_blocks_shared, exo_kv_cache_usage_ratio; counters
/// exo_stage_forwards_total, exo_stage_rows_total (token rows computed:
/// rows / forwards is the mean batch) and exo_stage_merged_steps_total
/// (steps that ran with another job's: continuous batching); the
/// histogram exo_stage_batch_wait_seconds (how long steps waited for
/// their batch: what continuous batching costs in latency). Entries with
/// the same labels are summed (wait histograms with the first one's
/// bounds). Nothing is written without stages.
void write_stage_metrics(prometheus::text_writer& w, const text::json& stages);

} // namespace exo::gateway
