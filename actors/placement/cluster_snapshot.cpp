#include "actors/placement/cluster_snapshot.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <utility>

namespace exo::placement {

namespace {

bool usable(device_state s) {
  return s == device_state::ready || s == device_state::busy;
}

const char* state_word(device_state s) {
  return usable(s) ? "ready" : to_string(s);
}

std::string celsius(double c) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f C", c);
  return buf;
}

/// "(71.0 C, predicted 84.0 C, limit 90.0 C)", or "" without a reading.
std::string thermal_figures(const thermal_status& t) {
  if (!t.has_temperature)
    return {};
  return " (" + celsius(t.temp_c) + ", predicted " + celsius(t.predicted_c)
         + ", limit " + celsius(t.limit_c) + ")";
}

} // namespace

thermal_view to_thermal_view(const std::vector<thermal_status>& xs) {
  thermal_view out;
  for (auto& x : xs)
    out[qualified_device_id(x.node, x.device)] = x;
  return out;
}

std::optional<thermal_view> parse_thermal_json(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json).get(doc))
    return std::nullopt;
  simdjson::dom::array devices;
  if (doc["devices"].get_array().get(devices))
    return std::nullopt;
  thermal_view out;
  for (auto e : devices) {
    if (out.size() >= 1024)
      break;
    thermal_status t;
    std::string_view node, device, state;
    if (e["node"].get_string().get(node) || e["device"].get_string().get(device)
        || e["state"].get_string().get(state) || node.empty()
        || device.empty() || node.size() > max_name_length
        || device.size() > 128 || state.size() > 32)
      continue;
    t.node = std::string{node};
    t.device = std::string{device};
    t.state = std::string{state};
    bool has = false;
    if (!e["has_temperature"].get_bool().get(has))
      t.has_temperature = has;
    double x = 0;
    if (!e["temp_c"].get_double().get(x))
      t.temp_c = x;
    if (!e["predicted_c"].get_double().get(x))
      t.predicted_c = x;
    if (!e["limit_c"].get_double().get(x))
      t.limit_c = x;
    if (!e["time_to_limit_s"].get_double().get(x))
      t.time_to_limit_s = x;
    out[qualified_device_id(t.node, t.device)] = std::move(t);
  }
  return out;
}

std::string qualified_device_id(const std::string& node,
                                const std::string& id) {
  return node + "/" + id;
}

namespace {

/// Keeps `bytes` (at most its free memory) of device `it` for `what`,
/// with a note; a device left with nothing leaves the problem.
void keep_on(conversion& c, std::vector<device>::iterator it,
             std::uint64_t bytes, const std::string& what) {
  const auto kept = std::min(bytes, it->memory_bytes);
  c.notes.push_back("device " + it->id + " keeps "
                    + format_bytes(static_cast<double>(kept)) + " for "
                    + what);
  it->memory_bytes -= kept;
  if (it->memory_bytes == 0)
    c.p.devices.erase(it);
}

} // namespace

std::string reserve_memory(conversion& c, const std::string& node,
                           std::uint64_t bytes) {
  if (bytes == 0)
    return {};
  auto& ds = c.p.devices;
  auto best = ds.end();
  for (auto it = ds.begin(); it != ds.end(); ++it)
    if (it->node == node
        && (best == ds.end() || it->memory_bytes > best->memory_bytes))
      best = it;
  if (best == ds.end() || best->memory_bytes < bytes) {
    c.notes.push_back("no device of " + node + " has "
                      + format_bytes(static_cast<double>(bytes))
                      + " free for the draft model");
    return {};
  }
  auto id = best->id;
  keep_on(c, best, bytes, "the draft model");
  return id;
}

std::string reserve_for(conversion& c, const plan_request& r) {
  if (r.kv_claims.size() > max_plan_claims)
    throw problem_error("the request claims memory on "
                        + std::to_string(r.kv_claims.size())
                        + " devices, more than "
                        + std::to_string(max_plan_claims));
  auto& ds = c.p.devices;
  for (const auto& [id, bytes] : r.kv_claims) {
    auto it = std::find_if(ds.begin(), ds.end(),
                           [&](const device& d) { return d.id == id; });
    if (bytes != 0 && it != ds.end())
      keep_on(c, it, bytes, "the KV caches of running jobs");
  }
  return reserve_memory(c, r.reserve_node, r.reserve_bytes);
}

conversion to_problem(const member_view& v, const model_spec& m,
                      std::uint64_t context_length, const objective& obj,
                      const conversion_options& opts,
                      const thermal_view& thermal) {
  conversion out;
  auto& p = out.p;
  p.model_name = m.name;
  p.layers = m.layers;
  p.stage_memory_extra = m.extras;
  p.request.context_length = context_length;
  p.request.kv_block_positions = stage_kv_block_positions;
  if (p.request.kv_positions() != context_length)
    out.notes.push_back(
      "KV caches counted in whole blocks of "
      + std::to_string(stage_kv_block_positions) + " positions: "
      + std::to_string(p.request.kv_positions()) + " per sequence for a "
      + std::to_string(context_length) + "-token context");
  p.request.safety_margin = opts.safety_margin;
  p.objective = obj;
  p.default_link = opts.default_link;
  std::set<std::string> alive;
  for (auto& mem : v.members) {
    if (mem.status != member_status::alive) {
      out.notes.push_back("member " + mem.name + " left out: "
                          + to_string(mem.status));
      continue;
    }
    alive.insert(mem.name);
    for (auto& d : mem.devices) {
      auto id = qualified_device_id(mem.name, d.id);
      if (!usable(d.state)) {
        out.notes.push_back("device " + id + " left out: "
                            + to_string(d.state)
                            + (d.state_reason.empty()
                                 ? std::string{}
                                 : " (" + d.state_reason + ")"));
        continue;
      }
      if (d.free_memory == 0) {
        out.notes.push_back("device " + id + " left out: no free memory");
        continue;
      }
      auto th = thermal.find(id);
      if (th != thermal.end() && th->second.state == "paused") {
        out.notes.push_back("device " + id + " left out: thermally paused"
                            + thermal_figures(th->second));
        continue;
      }
      device x;
      x.id = id;
      x.node = mem.name;
      x.memory_bytes = d.free_memory;
      x.flops = d.peak_flops;
      x.memory_bandwidth = d.memory_bandwidth;
      if (d.launch_seconds > 0 && d.launch_seconds <= 1)
        x.launch_seconds = d.launch_seconds;
      if (!(x.flops > 0)) {
        x.flops = opts.default_flops;
        out.notes.push_back("device " + id
                            + ": no peak FLOP/s reported, assumed "
                            + std::to_string(opts.default_flops / 1e9)
                                .substr(0, 5)
                            + " GFLOP/s");
      }
      if (!(x.memory_bandwidth > 0))
        x.memory_bandwidth = opts.default_memory_bandwidth;
      if (th != thermal.end() && th->second.state == "warm") {
        auto f = std::clamp(opts.warm_speed_factor, 1e-3, 1.0);
        x.flops *= f;
        x.memory_bandwidth *= f;
        x.thermal_headroom = f;
        out.notes.push_back("device " + id + ": thermally warm"
                            + thermal_figures(th->second)
                            + ", speed taken at "
                            + std::to_string(static_cast<int>(f * 100 + 0.5))
                            + "%");
      }
      p.devices.push_back(std::move(x));
    }
  }
  // Links: one per unordered pair of alive nodes; the worse direction wins.
  std::map<std::pair<std::string, std::string>, link_spec> links;
  for (auto& mem : v.members) {
    if (mem.status != member_status::alive)
      continue;
    for (auto& li : mem.links) {
      if (li.from == li.to || !alive.count(li.from) || !alive.count(li.to))
        continue;
      if (!(li.rtt_p50_us > 0) || !(li.bandwidth_bps > 0))
        continue;
      auto key = std::minmax(li.from, li.to);
      link_spec s{li.rtt_p50_us * 1e-6 / 2, li.bandwidth_bps};
      auto [it, fresh] = links.emplace(key, s);
      if (!fresh) {
        it->second.latency = std::max(it->second.latency, s.latency);
        it->second.bandwidth = std::min(it->second.bandwidth, s.bandwidth);
      }
    }
  }
  for (auto& [key, s] : links)
    p.links.push_back(link{key.first, key.second, s});
  return out;
}

cluster_state state_of(const member_view& v, const thermal_view& thermal) {
  cluster_state s;
  for (auto& m : v.members) {
    s.members[m.name] = to_string(m.status);
    if (m.status != member_status::alive)
      continue;
    for (auto& d : m.devices) {
      auto id = qualified_device_id(m.name, d.id);
      s.devices[id] = state_word(d.state);
      auto th = thermal.find(id);
      // Only the states that change the problem; anything else the
      // thermal service says ("normal", a device without a sensor) is
      // normal here.
      if (th != thermal.end()
          && (th->second.state == "warm" || th->second.state == "paused"))
        s.thermal[id] = th->second.state;
    }
  }
  return s;
}

std::vector<std::string> describe_changes(const cluster_state& before,
                                          const cluster_state& after) {
  std::vector<std::string> out;
  std::set<std::string> changed_members;
  for (auto& [name, status] : after.members) {
    auto it = before.members.find(name);
    if (it == before.members.end()) {
      out.push_back("member " + name + " joined (" + status + ")");
      changed_members.insert(name);
    } else if (it->second != status) {
      out.push_back("member " + name + ": " + it->second + " -> " + status);
      changed_members.insert(name);
    }
  }
  for (auto& [name, status] : before.members)
    if (!after.members.count(name)) {
      out.push_back("member " + name + " removed");
      changed_members.insert(name);
    }
  auto node_of = [](const std::string& id) {
    return id.substr(0, id.find('/'));
  };
  for (auto& [id, state] : after.devices) {
    if (changed_members.count(node_of(id)))
      continue;
    auto it = before.devices.find(id);
    if (it == before.devices.end())
      out.push_back("device " + id + " appeared (" + state + ")");
    else if (it->second != state)
      out.push_back("device " + id + ": " + it->second + " -> " + state);
  }
  for (auto& [id, state] : before.devices)
    if (!after.devices.count(id) && !changed_members.count(node_of(id)))
      out.push_back("device " + id + " gone");
  // Thermal transitions of devices present before and after (absent from
  // the map: normal).
  auto thermal_of = [](const cluster_state& s, const std::string& id) {
    auto it = s.thermal.find(id);
    return it == s.thermal.end() ? std::string{"normal"} : it->second;
  };
  for (auto& [id, state] : after.devices) {
    if (changed_members.count(node_of(id)) || !before.devices.count(id))
      continue;
    auto was = thermal_of(before, id), now = thermal_of(after, id);
    if (was != now)
      out.push_back("device " + id + " thermal: " + was + " -> " + now);
  }
  return out;
}

void attach_model(plan_request& r, const model_spec& m) {
  r.layers.clear();
  r.layers.reserve(m.layers.size());
  for (auto& l : m.layers)
    r.layers.push_back(plan_layer_info{
      l.weight_bytes, l.kv_bytes_per_token, l.flops_per_token,
      l.activation_bytes, static_cast<std::uint32_t>(l.operations)});
  r.model_name = m.name;
  r.context_train = m.context_train;
  r.stage_bytes = m.extras.every_stage;
  r.first_stage_bytes = m.extras.first_stage;
  r.last_stage_bytes = m.extras.last_stage;
}

model_spec model_of(const plan_request& r) {
  if (r.layers.size() > max_plan_layers)
    throw problem_error("the request carries "
                        + std::to_string(r.layers.size())
                        + " layers, more than "
                        + std::to_string(max_plan_layers));
  model_spec m;
  if (!r.model_name.empty())
    m.name = r.model_name;
  else
    m.name = r.model_path.substr(r.model_path.find_last_of('/') + 1);
  m.context_train = r.context_train;
  m.extras.every_stage = r.stage_bytes;
  m.extras.first_stage = r.first_stage_bytes;
  m.extras.last_stage = r.last_stage_bytes;
  for (auto& l : r.layers) {
    layer x;
    x.weight_bytes = l.weight_bytes;
    x.kv_bytes_per_token = l.kv_bytes_per_token;
    x.flops_per_token = l.flops_per_token;
    x.activation_bytes = l.activation_bytes;
    x.operations = l.operations;
    m.layers.push_back(x);
  }
  return m;
}

plan_info to_plan_info(const solve_result& r) {
  plan_info x;
  x.status = to_string(r.status);
  x.explanation = r.explanation;
  x.notes = r.notes;
  x.lower_bound_seconds = r.lower_bound_seconds;
  x.solve_seconds = r.solve_seconds;
  if (!r.best)
    return x;
  const auto& b = *r.best;
  x.objective = to_string(b.objective);
  x.objective_seconds = b.objective_seconds;
  x.latency_seconds = b.latency_seconds;
  x.bottleneck_seconds = b.bottleneck_seconds;
  x.lower_bound_seconds = b.lower_bound_seconds;
  x.proven_optimal = b.proven_optimal;
  x.solver = b.solver;
  for (auto& s : b.stages) {
    plan_stage_info y;
    y.device = s.device_id;
    y.node = s.node;
    y.first_layer = static_cast<std::uint32_t>(s.first_layer);
    y.end_layer = static_cast<std::uint32_t>(s.end_layer);
    y.compute_seconds = s.compute_seconds;
    y.transfer_seconds = s.transfer_seconds;
    y.memory_used_bytes = s.memory_used_bytes;
    y.memory_left_bytes = s.memory_left_bytes;
    x.stages.push_back(std::move(y));
  }
  return x;
}

plan from_plan_info(const plan_info& x) {
  plan p;
  p.objective = parse_objective_kind(x.objective)
                  .value_or(objective_kind::latency);
  p.objective_seconds = x.objective_seconds;
  p.latency_seconds = x.latency_seconds;
  p.bottleneck_seconds = x.bottleneck_seconds;
  p.lower_bound_seconds = x.lower_bound_seconds;
  p.proven_optimal = x.proven_optimal;
  p.solve_seconds = x.solve_seconds;
  p.solver = x.solver;
  std::set<std::string> nodes;
  for (auto& s : x.stages) {
    stage y;
    y.device_id = s.device;
    y.node = s.node;
    y.first_layer = s.first_layer;
    y.end_layer = s.end_layer;
    y.compute_seconds = s.compute_seconds;
    y.transfer_seconds = s.transfer_seconds;
    y.memory_used_bytes = s.memory_used_bytes;
    y.memory_left_bytes = s.memory_left_bytes;
    nodes.insert(s.node);
    p.stages.push_back(std::move(y));
  }
  p.nodes_used = static_cast<int>(nodes.size());
  return p;
}

std::string render_text(const plan_info& x) {
  std::ostringstream out;
  if (x.stages.empty()) {
    out << "no plan (" << x.status << ")\n";
    for (auto& e : x.explanation)
      out << "  " << e << "\n";
  } else {
    print_plan_table(out, from_plan_info(x));
  }
  if (!x.planned_by.empty())
    out << "planned by " << x.planned_by << "\n";
  for (auto& n : x.notes)
    out << "note: " << n << "\n";
  return out.str();
}

namespace {

text::json to_json(const plan_info& x) {
  return {{"status", x.status},
          {"plan", x.stages.empty() ? text::json(nullptr)
                                    : plan_to_json(from_plan_info(x))},
          {"explanation", x.explanation},
          {"notes", x.notes},
          {"planned_by", x.planned_by},
          {"planned_ns", x.planned_ns}};
}

} // namespace

std::string render_json(const plan_info& x) {
  return text::compact(to_json(x));
}

std::string render_text(const plan_job_info& j) {
  std::ostringstream out;
  out << j.id << ": " << j.request.model_path << "  ctx="
      << j.request.context_length << "  objective=" << j.request.objective
      << "  re-plans=" << j.replans << (j.stale ? "  STALE" : "")
      << (j.request.sequences > 1
            ? "  sequences=" + std::to_string(j.request.sequences)
            : std::string{})
      << (j.request.run.empty() ? "" : "  run=" + j.request.run)
      << (j.request.origin.empty() ? "" : "  asked-on=" + j.request.origin)
      << "\n";
  if (!j.last_reason.empty())
    out << "last re-plan: " << j.last_reason << "\n";
  out << render_text(j.plan);
  return out.str();
}

std::string render_json(const plan_job_info& j) {
  return text::compact({{"id", j.id},
                        {"model", j.request.model_path},
                        {"context_length", j.request.context_length},
                        {"sequences", j.request.sequences},
                        {"run", j.request.run},
                        {"objective", j.request.objective},
                        {"replans", j.replans},
                        {"last_reason", j.last_reason},
                        {"last_replan_ns", j.last_replan_ns},
                        {"stale", j.stale},
                        {"result", to_json(j.plan)}});
}

} // namespace exo::placement
