#include "core/gateway/cluster_view.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace exo::gateway {

using text::json;

namespace {

/// The objects of `list` (an array), at most max_view_entries.
json objects(const json& list) {
  json out = json::array();
  if (!list.is_array())
    return out;
  for (auto& x : list) {
    if (out.size() >= max_view_entries)
      break;
    if (x.is_object())
      out.push_back(x);
  }
  return out;
}

json member(const json& doc, const char* key) {
  if (doc.is_object() && doc.contains(key))
    return doc[key];
  return json{};
}

std::string str(const json& o, const char* key) {
  if (o.is_object() && o.contains(key) && o[key].is_string())
    return o[key].get<std::string>();
  return {};
}

double num(const json& o, const char* key, double fallback = 0) {
  if (o.is_object() && o.contains(key) && o[key].is_number())
    return o[key].get<double>();
  return fallback;
}

/// Entries of `list` by a key made of their fields.
template <class KeyFn>
std::map<std::string, json> index(const json& list, KeyFn key) {
  std::map<std::string, json> out;
  if (list.is_array())
    for (auto& x : list)
      out.emplace(key(x), x);
  return out;
}

std::string job_key(const json& j) {
  return member(j, "job").dump();
}

std::string device_key(const json& d) {
  return str(d, "node") + "/" + str(d, "id");
}

std::string thermal_key(const json& t) {
  return str(t, "node") + "/" + str(t, "device");
}

json event(const char* type, std::int64_t time_ms, json data) {
  return {{"type", type}, {"time_ms", time_ms}, {"data", std::move(data)}};
}

bool has_stages(const json& job) {
  auto s = member(job, "stages");
  return s.is_array() && !s.empty();
}

} // namespace

json make_snapshot(const cluster_parts& parts) {
  // Running jobs, then the ones that ended lately (a job shorter than a
  // poll is still seen, with its outcome).
  json jobs = objects(member(parts.jobs, "jobs"));
  for (auto& j : jobs)
    if (!j.contains("state"))
      j["state"] = "running";
  for (auto& j : objects(member(parts.jobs, "recent")))
    if (jobs.size() < max_view_entries) {
      if (!j.contains("state"))
        j["state"] = "finished";
      jobs.push_back(j);
    }
  return {{"node", parts.node},
          {"coordinator", str(parts.nodes, "coordinator")},
          {"nodes", objects(member(parts.nodes, "nodes"))},
          {"devices", objects(parts.devices)},
          {"links", objects(parts.links)},
          {"thermal", objects(member(parts.thermal, "devices"))},
          {"jobs", jobs},
          {"models", objects(parts.models)},
          {"jobs_waiting", objects(member(parts.jobs, "waiting")).size()},
          {"stages", objects(parts.stages)}};
}

job_counts count_jobs(const json& snapshot) {
  job_counts c;
  auto jobs = member(snapshot, "jobs");
  if (jobs.is_array())
    for (auto& j : jobs)
      c.running += str(j, "state") == "running";
  auto w = member(snapshot, "jobs_waiting");
  if (w.is_number_unsigned())
    c.waiting = w.get<std::size_t>();
  return c;
}

json snapshot_part(const json& snapshot, const std::string& name) {
  for (auto* key : {"nodes", "devices", "links", "thermal", "jobs"})
    if (name == key)
      return member(snapshot, key).is_null() ? json::array()
                                             : member(snapshot, key);
  return json{};
}

std::vector<json> diff_events(const json& before, const json& after,
                              std::int64_t time_ms) {
  std::vector<json> out;
  auto name_key = [](const json& n) { return str(n, "name"); };
  // Nodes: joined, changed status, left.
  auto old_nodes = index(member(before, "nodes"), name_key);
  auto new_nodes = index(member(after, "nodes"), name_key);
  for (auto& [name, n] : new_nodes) {
    auto it = old_nodes.find(name);
    if (it == old_nodes.end()) {
      auto d = n;
      d["change"] = "joined";
      out.push_back(event("node", time_ms, std::move(d)));
    } else if (str(it->second, "status") != str(n, "status")
               || member(it->second, "incarnation")
                    != member(n, "incarnation")) {
      auto d = n;
      d["change"] = "status";
      out.push_back(event("node", time_ms, std::move(d)));
    }
  }
  for (auto& [name, n] : old_nodes)
    if (!new_nodes.count(name)) {
      auto d = n;
      d["change"] = "left";
      d["status"] = "left";
      out.push_back(event("node", time_ms, std::move(d)));
    }
  // Devices: a new one, or one whose state changed or whose free memory
  // moved by a step worth showing (1% of the device, at least 1 MiB: a
  // CPU's free memory is the system's and moves on every poll).
  auto old_devices = index(member(before, "devices"), device_key);
  for (auto& [key, d] : index(member(after, "devices"), device_key)) {
    auto it = old_devices.find(key);
    double step = std::max(num(d, "total_memory") / 100, 1048576.0);
    if (it == old_devices.end()
        || str(it->second, "state") != str(d, "state")
        || std::abs(num(it->second, "free_memory") - num(d, "free_memory"))
             >= step)
      out.push_back(event("device", time_ms, d));
  }
  // Thermal: a new entry or a new state.
  auto old_thermal = index(member(before, "thermal"), thermal_key);
  for (auto& [key, t] : index(member(after, "thermal"), thermal_key)) {
    auto it = old_thermal.find(key);
    if (it == old_thermal.end()
        || str(it->second, "state") != str(t, "state"))
      out.push_back(event("thermal", time_ms, t));
  }
  // Jobs: started (with its placement), progressed, finished.
  auto old_jobs = index(member(before, "jobs"), job_key);
  auto new_jobs = index(member(after, "jobs"), job_key);
  for (auto& [key, j] : new_jobs) {
    auto it = old_jobs.find(key);
    bool fresh = it == old_jobs.end();
    if (fresh || member(it->second, "tokens") != member(j, "tokens")
        || member(it->second, "state") != member(j, "state")
        || member(it->second, "cancelling") != member(j, "cancelling"))
      out.push_back(event("job", time_ms, j));
    if (has_stages(j) && (fresh || !has_stages(it->second)))
      out.push_back(event("placement", time_ms,
                          {{"job", member(j, "job")},
                           {"stages", member(j, "stages")}}));
  }
  for (auto& [key, j] : old_jobs)
    if (!new_jobs.count(key) && str(j, "state") == "running") {
      auto d = j;
      d["state"] = "finished";
      out.push_back(event("job", time_ms, std::move(d)));
    }
  return out;
}

json audit_event(const json& record, std::int64_t time_ms) {
  if (!record.is_object() || !record.contains("seq")
      || !record["seq"].is_number_integer() || record["seq"].get<double>() < 0
      || !record.contains("type")
      || !record["type"].is_string())
    return json{};
  // Debug records (every buffer freed, every access granted) would bury
  // what people watch for.
  if (str(record, "severity") == "debug")
    return json{};
  std::string detail;
  auto details = member(record, "details");
  if (details.is_object())
    for (auto& [k, v] : details.items())
      if (v.is_string())
        detail += (detail.empty() ? "" : " ") + k + "=" + v.get<std::string>();
  return event("audit", time_ms,
               {{"seq", record["seq"]},
                {"event", record["type"]},
                {"node", str(record, "node")},
                {"principal", str(record, "principal")},
                {"detail", detail}});
}

std::vector<json> audit_events(const json& records, std::int64_t time_ms,
                               std::size_t max_same) {
  std::vector<json> singles;
  std::vector<std::string> order;
  std::map<std::string, std::vector<json>> by_type;
  if (!records.is_array())
    return singles;
  for (auto& r : records) {
    auto e = audit_event(r, time_ms);
    if (e.is_null())
      continue;
    auto type = e["data"]["event"].get<std::string>();
    if (!by_type.count(type))
      order.push_back(type);
    by_type[type].push_back(std::move(e));
  }
  std::vector<json> out;
  for (auto& type : order) {
    auto& es = by_type[type];
    if (es.size() <= max_same) {
      for (auto& e : es)
        out.push_back(std::move(e));
      continue;
    }
    auto first = es.front()["data"]["seq"], last = es.back()["data"]["seq"];
    auto e = es.back();
    e["data"]["count"] = es.size();
    e["data"]["detail"] = std::to_string(es.size()) + " records, seq "
                          + first.dump() + " to " + last.dump();
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<prometheus::device_reading> device_readings(const json& snapshot) {
  auto thermal = index(member(snapshot, "thermal"), thermal_key);
  std::map<std::string, int> rank;
  std::vector<prometheus::device_reading> out;
  auto devices = member(snapshot, "devices");
  if (!devices.is_array())
    return out;
  constexpr double mib = 1024.0 * 1024.0;
  for (auto& d : devices) {
    prometheus::device_reading r;
    auto node = str(d, "node");
    r.gpu = std::to_string(rank[node]++);
    r.uuid = device_key(d);
    r.model_name = str(d, "name");
    r.hostname = node;
    r.backend = str(d, "backend");
    double total = num(d, "total_memory", -1), free = num(d, "free_memory", -1);
    if (total >= 0 && free >= 0 && free <= total) {
      r.fb_used_mib = (total - free) / mib;
      r.fb_free_mib = free / mib;
    }
    if (num(d, "clock_mhz") > 0)
      r.sm_clock_mhz = num(d, "clock_mhz");
    auto it = thermal.find(r.uuid);
    if (it != thermal.end()) {
      // Load and the current clock come with the thermal monitor's
      // samples, with or without a sensor.
      if (num(it->second, "utilization", -1) >= 0)
        r.util_percent = 100 * num(it->second, "utilization");
      if (num(it->second, "clock_mhz") > 0)
        r.sm_clock_mhz = num(it->second, "clock_mhz");
    }
    if (it != thermal.end() && member(it->second, "has_temperature") == true) {
      r.temperature_c = num(it->second, "temp_c");
      if (num(it->second, "power_w", -1) >= 0)
        r.power_w = num(it->second, "power_w");
    }
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

const char* const stage_strings[] = {"device", "model", "kv_type"};
const char* const stage_counts[] = {
  "first",          "last",          "jobs",
  "sequences",      "kv_bytes",      "kv_blocks",
  "kv_blocks_used", "kv_blocks_shared", "kv_block_positions",
  "forwards",       "rows",          "merged_steps"};

/// A stage entry's `layers` label: its first and last layer, both
/// included, as the dashboard, a job's stages (first_layer, last_layer)
/// and the placement's texts write them ("0-15"); a stage of no layers
/// (the entries say [first, last)) is its first alone. Read as integers:
/// a peer's 2^64 - 1 through a double would not convert back.
std::string layers_label(const json& e) {
  auto count = [&](const char* key) {
    return e.contains(key) && e[key].is_number_unsigned()
             ? e[key].get<std::uint64_t>()
             : std::uint64_t{0};
  };
  const auto a = count("first");
  const auto b = count("last");
  return b > a ? std::to_string(a) + "-" + std::to_string(b - 1)
               : std::to_string(a);
}

/// Most buckets a stage's wait histogram may have (a peer's input).
constexpr std::size_t max_wait_bounds = 32;

/// A stage entry's batch-wait histogram (wait_le: bounds, finite and
/// ascending; wait_counts: one unsigned count per bucket and one past the
/// last bound; wait_sum_s: finite, >= 0), copied into `entry`. An entry
/// without any of the three (a node of an earlier version) has none;
/// false when they are there but malformed.
bool copy_wait_histogram(const json& e, json& entry) {
  const bool any = e.contains("wait_le") || e.contains("wait_counts")
                   || e.contains("wait_sum_s");
  if (!any)
    return true;
  if (!e.contains("wait_le") || !e.contains("wait_counts")
      || !e.contains("wait_sum_s"))
    return false;
  const auto& le = e["wait_le"];
  const auto& counts = e["wait_counts"];
  const auto& sum = e["wait_sum_s"];
  if (!le.is_array() || le.empty() || le.size() > max_wait_bounds
      || !counts.is_array() || counts.size() != le.size() + 1
      || !sum.is_number() || !std::isfinite(sum.get<double>())
      || sum.get<double>() < 0)
    return false;
  for (std::size_t i = 0; i < le.size(); ++i)
    if (!le[i].is_number() || !std::isfinite(le[i].get<double>())
        || (i > 0 && le[i].get<double>() <= le[i - 1].get<double>()))
      return false;
  for (auto& c : counts)
    if (!c.is_number_unsigned())
      return false;
  entry["wait_le"] = le;
  entry["wait_counts"] = counts;
  entry["wait_sum_s"] = sum;
  return true;
}

} // namespace

json stage_entries(const std::string& node,
                   const std::map<std::string, std::string>& fields) {
  json out = json::array();
  for (auto& [key, value] : fields) {
    if (key.rfind("stage ", 0) != 0)
      continue;
    if (out.size() >= max_view_entries)
      break;
    auto e = json::parse(value, nullptr, false);
    if (e.is_discarded() || !e.is_object())
      continue;
    json entry = json::object();
    bool ok = true;
    for (auto* k : stage_strings) {
      ok = ok && e.contains(k) && e[k].is_string()
           && e[k].get_ref<const std::string&>().size() <= 256;
      if (ok)
        entry[k] = e[k];
    }
    for (auto* k : stage_counts) {
      ok = ok && e.contains(k) && e[k].is_number_unsigned();
      if (ok)
        entry[k] = e[k];
    }
    if (!ok || !copy_wait_histogram(e, entry))
      continue;
    entry["node"] = node;
    out.push_back(std::move(entry));
  }
  return out;
}

void write_stage_metrics(prometheus::text_writer& w, const json& stages) {
  using prometheus::metric_type;
  // By label set, in a stable order; entries with the same labels summed.
  struct figures {
    prometheus::label_set labels;
    double jobs = 0, sequences = 0, kv_bytes = 0, blocks = 0, used = 0,
           shared = 0, forwards = 0, rows = 0, merged = 0, ratio = 0;
    bool paged = false;
    /// The steps' waits for their batch: entries with other bounds than
    /// the first's are left out of it.
    std::optional<prometheus::histogram> wait;
  };
  std::map<std::string, figures> by;
  if (stages.is_array())
    for (auto& e : stages) {
      if (!e.is_object())
        continue;
      prometheus::label_set labels{
        {"node", str(e, "node")},
        {"device", str(e, "device")},
        {"model", str(e, "model")},
        {"layers", layers_label(e)},
        {"kv_type", str(e, "kv_type")}};
      std::string key;
      for (auto& [_, v] : labels)
        key += v + '\n';
      auto& f = by[key];
      f.labels = std::move(labels);
      f.jobs += num(e, "jobs");
      f.sequences += num(e, "sequences");
      f.kv_bytes += num(e, "kv_bytes");
      f.paged = f.paged || num(e, "kv_block_positions") > 0;
      f.blocks += num(e, "kv_blocks");
      f.used += num(e, "kv_blocks_used");
      f.shared += num(e, "kv_blocks_shared");
      f.forwards += num(e, "forwards");
      f.rows += num(e, "rows");
      f.merged += num(e, "merged_steps");
      if (json wait; e.contains("wait_le") && copy_wait_histogram(e, wait)) {
        const auto bounds = wait["wait_le"].get<std::vector<double>>();
        const auto counts =
          wait["wait_counts"].get<std::vector<std::uint64_t>>();
        if (!f.wait)
          f.wait.emplace(bounds);
        if (f.wait->upper_bounds() == bounds)
          f.wait->add(counts, wait["wait_sum_s"].get<double>());
      }
    }
  if (by.empty())
    return;
  for (auto& [_, f] : by)
    f.ratio = f.blocks > 0 ? f.used / f.blocks : 0.0;
  auto family = [&](const char* name, const char* help, metric_type type,
                    double figures::*value, bool paged_only) {
    bool any = false;
    for (auto& [_, f] : by)
      any = any || !paged_only || f.paged;
    if (!any)
      return;
    w.family(name, help, type);
    for (auto& [_, f] : by)
      if (!paged_only || f.paged)
        w.sample(f.labels, f.*value);
  };
  family("exo_stage_jobs", "Jobs whose shard uses the device stage now",
         metric_type::gauge, &figures::jobs, false);
  family("exo_stage_sequences",
         "Sequences whose KV cache the device stage holds",
         metric_type::gauge, &figures::sequences, false);
  family("exo_kv_cache_bytes", "KV cache memory of the device stage",
         metric_type::gauge, &figures::kv_bytes, false);
  family("exo_kv_cache_blocks", "Blocks in the device stage's paged KV pool",
         metric_type::gauge, &figures::blocks, true);
  family("exo_kv_cache_blocks_used",
         "Blocks of the paged KV pool held by sequences or kept prefixes",
         metric_type::gauge, &figures::used, true);
  family("exo_kv_cache_blocks_shared",
         "Blocks of the paged KV pool held by more than one sequence",
         metric_type::gauge, &figures::shared, true);
  family("exo_kv_cache_usage_ratio",
         "Used blocks of the paged KV pool over its blocks (0 when empty)",
         metric_type::gauge, &figures::ratio, true);
  family("exo_stage_forwards_total",
         "Forwards the device stage ran (each a batch of steps)",
         metric_type::counter, &figures::forwards, false);
  family("exo_stage_rows_total",
         "Token rows the device stage's forwards computed",
         metric_type::counter, &figures::rows, false);
  family("exo_stage_merged_steps_total",
         "Steps that ran in one forward with another job's",
         metric_type::counter, &figures::merged, false);
  bool waits = false;
  for (auto& [_, f] : by)
    waits = waits || f.wait;
  if (!waits)
    return;
  w.family("exo_stage_batch_wait_seconds",
           "How long steps waited at the device stage for their batch",
           metric_type::histogram);
  for (auto& [_, f] : by)
    if (f.wait)
      w.sample(f.labels, *f.wait);
}

} // namespace exo::gateway
