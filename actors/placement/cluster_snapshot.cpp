#include "actors/placement/cluster_snapshot.hpp"

#include <algorithm>
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

std::string json_list(const std::vector<std::string>& xs) {
  std::string out = "[";
  for (std::size_t i = 0; i < xs.size(); ++i)
    out += (i ? ",\"" : "\"") + json_escape(xs[i]) + "\"";
  return out + "]";
}

} // namespace

std::string qualified_device_id(const std::string& node,
                                const std::string& id) {
  return node + "/" + id;
}

conversion to_problem(const member_view& v, const model_spec& m,
                      std::uint64_t context_length, const objective& obj,
                      const conversion_options& opts) {
  conversion out;
  auto& p = out.p;
  p.model_name = m.name;
  p.layers = m.layers;
  p.request.context_length = context_length;
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
      device x;
      x.id = id;
      x.node = mem.name;
      x.memory_bytes = d.free_memory;
      x.flops = d.peak_flops;
      x.memory_bandwidth = d.memory_bandwidth;
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

cluster_state state_of(const member_view& v) {
  cluster_state s;
  for (auto& m : v.members) {
    s.members[m.name] = to_string(m.status);
    if (m.status != member_status::alive)
      continue;
    for (auto& d : m.devices)
      s.devices[qualified_device_id(m.name, d.id)] = state_word(d.state);
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
  return out;
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

std::string render_json(const plan_info& x) {
  std::ostringstream out;
  out << "{\"status\":\"" << json_escape(x.status) << "\",\"plan\":";
  if (x.stages.empty())
    out << "null";
  else
    write_plan_json(out, from_plan_info(x));
  out << ",\"explanation\":" << json_list(x.explanation)
      << ",\"notes\":" << json_list(x.notes) << ",\"planned_by\":\""
      << json_escape(x.planned_by) << "\",\"planned_ns\":" << x.planned_ns
      << "}";
  return out.str();
}

std::string render_text(const plan_job_info& j) {
  std::ostringstream out;
  out << j.id << ": " << j.request.model_path << "  ctx="
      << j.request.context_length << "  objective=" << j.request.objective
      << "  re-plans=" << j.replans << (j.stale ? "  STALE" : "") << "\n";
  if (!j.last_reason.empty())
    out << "last re-plan: " << j.last_reason << "\n";
  out << render_text(j.plan);
  return out.str();
}

std::string render_json(const plan_job_info& j) {
  std::ostringstream out;
  out << "{\"id\":\"" << json_escape(j.id) << "\",\"model\":\""
      << json_escape(j.request.model_path)
      << "\",\"context_length\":" << j.request.context_length
      << ",\"objective\":\"" << json_escape(j.request.objective)
      << "\",\"replans\":" << j.replans << ",\"last_reason\":\""
      << json_escape(j.last_reason)
      << "\",\"last_replan_ns\":" << j.last_replan_ns
      << ",\"stale\":" << (j.stale ? "true" : "false")
      << ",\"result\":" << render_json(j.plan) << "}";
  return out.str();
}

} // namespace exo::placement
