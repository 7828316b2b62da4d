#include "core/placement/plan.hpp"

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <set>

namespace exo::placement {

plan make_plan(const cost_model& m, const assignment& a) {
  const auto& p = m.source();
  plan x;
  x.objective = m.kind();
  for (std::size_t s = 0; s < a.size(); ++s) {
    stage st;
    st.device_index = m.problem_device(a[s].device);
    const auto& d = p.devices[st.device_index];
    st.device_id = d.id;
    st.node = d.node;
    st.first_layer = static_cast<std::size_t>(a[s].first);
    st.end_layer = static_cast<std::size_t>(a[s].end);
    st.compute_seconds = static_cast<double>(
                           m.stage_time(a[s].device, a[s].first, a[s].end))
                         * m.tick_seconds();
    if (s + 1 < a.size())
      st.transfer_seconds = static_cast<double>(m.transfer(
                              a[s].device, a[s + 1].device, a[s].end))
                            * m.tick_seconds();
    st.memory_used_bytes = p.stage_memory(st.first_layer, st.end_layer);
    st.memory_left_bytes = static_cast<std::int64_t>(d.memory_bytes)
                           - static_cast<std::int64_t>(st.memory_used_bytes);
    x.stages.push_back(std::move(st));
  }
  auto ev = m.evaluate(a);
  x.objective_units = ev.objective;
  x.objective_seconds = m.to_seconds(ev.objective);
  x.latency_seconds = static_cast<double>(ev.latency) * m.tick_seconds();
  x.bottleneck_seconds = static_cast<double>(ev.bottleneck) * m.tick_seconds();
  x.nodes_used = ev.nodes_used;
  x.moved_bytes = ev.moved_bytes;
  x.moving_us = ev.moved;
  x.moving_seconds = static_cast<double>(ev.moved) * 1e-6;
  if (!m.has_resident())
    for (const auto& y : p.layers)
      x.moved_bytes += static_cast<std::int64_t>(y.weight_bytes);
  return x;
}

std::vector<std::string> check_plan(const problem& p, const plan& x) {
  std::vector<std::string> out;
  const auto L = p.layers.size();
  if (x.stages.empty()) {
    out.push_back("the plan has no stages");
    return out;
  }
  std::set<std::size_t> used;
  std::size_t next = 0;
  for (std::size_t s = 0; s < x.stages.size(); ++s) {
    const auto& st = x.stages[s];
    auto name = "stage " + std::to_string(s);
    if (st.first_layer != next)
      out.push_back(name + " starts at layer " + std::to_string(st.first_layer)
                    + ", expected " + std::to_string(next));
    if (st.end_layer <= st.first_layer || st.end_layer > L) {
      out.push_back(name + " has an empty or out-of-range layer range");
      return out;
    }
    next = st.end_layer;
    if (st.device_index >= p.devices.size()
        || p.devices[st.device_index].id != st.device_id) {
      out.push_back(name + " names an unknown device \"" + st.device_id
                    + "\"");
      continue;
    }
    const auto& d = p.devices[st.device_index];
    name += " on " + d.id;
    if (!used.insert(st.device_index).second)
      out.push_back(name + ": the device is used twice");
    if (d.excluded)
      out.push_back(name + ": the device is excluded");
    if (d.drained)
      out.push_back(name + ": the device is drained");
    const std::uint64_t mem = p.stage_memory(st.first_layer, st.end_layer);
    double fl = 0;
    for (auto l = st.first_layer; l < st.end_layer; ++l)
      fl += p.layers[l].flops_per_token;
    auto cap = p.usable_memory(st.device_index);
    if (mem > cap) {
      auto over = p.stage_overhead(st.first_layer, st.end_layer);
      out.push_back(name + " needs " + format_bytes(static_cast<double>(mem))
                    + (over > 0 ? " (" + format_bytes(static_cast<double>(over))
                                    + " of it working memory)"
                                : std::string{})
                    + " but only " + format_bytes(static_cast<double>(cap))
                    + " is usable");
    }
    if (d.max_flops_per_token > 0 && fl > d.max_flops_per_token) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%.3g FLOPs per token, over its "
                    "thermal cap of %.3g", fl, d.max_flops_per_token);
      out.push_back(name + " needs " + buf);
    }
    for (const auto& pin : p.constraints.pins)
      if (pin.device != d.id)
        for (auto l = pin.first_layer; l <= pin.last_layer; ++l)
          if (l >= st.first_layer && l < st.end_layer) {
            out.push_back(name + " runs layer " + std::to_string(l)
                          + ", which is pinned to " + pin.device);
            break;
          }
  }
  if (next != L)
    out.push_back("the plan ends at layer " + std::to_string(next) + " of "
                  + std::to_string(L));
  for (std::size_t i = 0; i < p.devices.size(); ++i)
    if (p.devices[i].pinned && !used.count(i))
      out.push_back("pinned device " + p.devices[i].id + " is not used");
  if (p.constraints.max_stages > 0
      && x.stages.size() > p.constraints.max_stages)
    out.push_back("the plan has " + std::to_string(x.stages.size())
                  + " stages, more than max_stages "
                  + std::to_string(p.constraints.max_stages));
  return out;
}

void print_plan_table(std::ostream& out, const plan& x) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%-5s %-20s %-12s %-11s %12s %12s %12s %12s\n", "stage", "device", "node", "layers", "compute", "transfer",
                "memory", "left");
  out << buf;
  for (std::size_t s = 0; s < x.stages.size(); ++s) {
    const auto& st = x.stages[s];
    auto range = std::to_string(st.first_layer) + "-"
                 + std::to_string(st.end_layer - 1);
    std::snprintf(buf, sizeof(buf),
                  "%-5zu %-20s %-12s %-11s %12s %12s %12s %12s\n", s,
                  st.device_id.c_str(), st.node.c_str(), range.c_str(),
                  format_seconds(st.compute_seconds).c_str(),
                  format_seconds(st.transfer_seconds).c_str(),
                  format_bytes(static_cast<double>(st.memory_used_bytes))
                    .c_str(),
                  format_bytes(static_cast<double>(st.memory_left_bytes))
                    .c_str());
    out << buf;
  }
  out << "objective (" << to_string(x.objective)
      << "): " << format_seconds(x.objective_seconds)
      << "   latency: " << format_seconds(x.latency_seconds)
      << "   bottleneck: " << format_seconds(x.bottleneck_seconds)
      << "   nodes: " << x.nodes_used << "\n";
  if (!x.stages.empty())
    out << "weights to move: "
        << format_bytes(static_cast<double>(x.moved_bytes))
        << (x.moving_us > 0
              ? " (" + format_seconds(x.moving_seconds) + " over the links)"
              : std::string{})
        << "\n";
  out << "lower bound: " << format_seconds(x.lower_bound_seconds)
      << "   proven optimal: " << (x.proven_optimal ? "yes" : "no");
  if (auto g = certified_gap(x); !x.proven_optimal && g) {
    // No plan is better than the bound: the plan is within this of the
    // optimum.
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f%%", *g * 100);
    out << " (certified gap " << buf << ")";
  }
  out << "   solver: " << x.solver
      << "   solve time: " << format_seconds(x.solve_seconds) << "\n";
}


std::optional<double> certified_gap(const plan& x) {
  if (x.proven_optimal)
    return 0.0;
  if (!(x.lower_bound_seconds > 0) || !(x.objective_seconds >= 0))
    return std::nullopt;
  return std::max(0.0, x.objective_seconds / x.lower_bound_seconds - 1);
}

text::json plan_to_json(const plan& x) {
  auto num = [](double v) { return text::number(v); };
  text::json stages = text::json::array();
  for (const auto& st : x.stages)
    stages.push_back({{"device", st.device_id},
                      {"node", st.node},
                      {"first_layer", st.first_layer},
                      {"last_layer", st.end_layer - 1},
                      {"compute_seconds", num(st.compute_seconds)},
                      {"transfer_seconds", num(st.transfer_seconds)},
                      {"memory_used_bytes", st.memory_used_bytes},
                      {"memory_left_bytes", st.memory_left_bytes}});
  return {{"objective", to_string(x.objective)},
          {"objective_seconds", num(x.objective_seconds)},
          {"latency_seconds", num(x.latency_seconds)},
          {"bottleneck_seconds", num(x.bottleneck_seconds)},
          {"nodes_used", x.nodes_used},
          {"moved_bytes", x.moved_bytes},
          {"moving_seconds", num(x.moving_seconds)},
          {"lower_bound_seconds", num(x.lower_bound_seconds)},
          {"proven_optimal", x.proven_optimal},
          {"gap", certified_gap(x) ? num(*certified_gap(x)) : text::json()},
          {"solve_seconds", num(x.solve_seconds)},
          {"solver", x.solver},
          {"stages", stages}};
}

void write_plan_json(std::ostream& out, const plan& x) {
  out << text::compact(plan_to_json(x));
}

} // namespace exo::placement
