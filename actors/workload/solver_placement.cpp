#include "actors/workload/solver_placement.hpp"

#include "actors/placement/cluster_snapshot.hpp"
#include "core/placement/model_spec.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace exo::workload {

plan_request run_plan_request(const std::string& model, std::uint32_t n_ctx,
                              std::uint32_t sequences,
                              const std::string& origin,
                              const std::string& run, backend::kv_type kv) {
  plan_request r;
  r.model_path = model;
  r.context_length = n_ctx;
  r.sequences = sequences == 0 ? 1 : sequences;
  r.objective = sequences > 1 ? "throughput" : "latency";
  r.keep = !run.empty();
  r.run = run;
  r.origin = origin;
  try {
    placement::attach_model(r, placement::load_model_spec(model, n_ctx, kv));
  } catch (const placement::problem_error& e) {
    throw std::invalid_argument(e.what());
  }
  return r;
}

member_view single_node_view(const std::string& node,
                             const std::vector<device_info>& devices) {
  member_view v;
  v.from = node;
  member_info m;
  m.name = node;
  m.status = member_status::alive;
  m.devices = devices;
  v.members.push_back(std::move(m));
  return v;
}

plan_info plan_locally(
  const plan_request& r, const member_view& view, const std::string& node,
  const std::vector<placement::resident_layers>& resident) {
  plan_info out;
  try {
    auto m = r.layers.empty()
               ? placement::load_model_spec(r.model_path, r.context_length)
               : placement::model_of(r);
    placement::objective obj;
    obj.kind = placement::parse_objective_kind(r.objective)
                 .value_or(placement::objective_kind::latency);
    obj.blend_weight = r.blend_weight;
    const std::uint64_t ctx = r.context_length ? r.context_length
                                               : m.context_train;
    auto conv = placement::to_problem(view, m, ctx, obj);
    conv.p.request.sequences = std::max<std::uint32_t>(r.sequences, 1);
    const auto reserved = placement::reserve_for(conv, r);
    for (const auto& x : resident)
      if (conv.p.find_device(x.device) && x.last_layer < conv.p.layers.size()
          && x.first_layer <= x.last_layer)
        conv.p.resident.push_back(x);
    placement::solve_options opts;
    opts.time_limit = std::chrono::milliseconds{r.time_limit_ms};
    out = placement::to_plan_info(placement::solve(conv.p, opts));
    out.notes.insert(out.notes.begin(), conv.notes.begin(),
                     conv.notes.end());
    if (!out.stages.empty())
      out.reserved_device = reserved;
  } catch (const placement::problem_error& e) {
    out.status = "error";
    out.explanation.push_back(e.what());
  }
  if (out.objective.empty())
    out.objective = r.objective;
  out.planned_by = node;
  out.planned_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  return out;
}

std::uint64_t kv_claim(std::uint64_t kv_bytes_per_token, std::uint32_t n_ctx,
                       std::uint32_t sequences,
                       const std::vector<std::uint64_t>& held,
                       std::uint32_t block_positions) {
  // In whole blocks: a cache takes a block at its first position.
  const std::uint64_t full
    = placement::whole_kv_blocks(n_ctx, block_positions);
  std::uint64_t positions = 0;
  for (std::uint32_t s = 0; s < sequences; ++s) {
    const std::uint64_t h = s < held.size() ? held[s] : 0;
    positions += full
                 - std::min(placement::whole_kv_blocks(h, block_positions),
                            full);
  }
  return positions * kv_bytes_per_token;
}

bool fits_beside(const std::vector<stage_place>& plan,
                 const std::vector<std::uint64_t>& kv,
                 const member_view& view,
                 const std::map<std::string, std::uint64_t>& promised,
                 const std::set<std::string>& excluded) {
  if (plan.empty() || kv.size() != plan.size())
    return false;
  // Several stages on one device add up.
  std::map<std::string, std::uint64_t> need;
  for (std::size_t i = 0; i < plan.size(); ++i)
    need[plan[i].node + "/" + plan[i].device] += kv[i];
  for (auto& [dev, bytes] : need) {
    if (excluded.count(dev) != 0)
      return false;
    const device_info* found = nullptr;
    for (auto& m : view.members)
      if (m.status == member_status::alive
          && dev.compare(0, m.name.size() + 1, m.name + "/") == 0)
        for (auto& d : m.devices)
          if (d.id == dev.substr(m.name.size() + 1)
              && (d.state == device_state::ready
                  || d.state == device_state::busy))
            found = &d;
    if (!found)
      return false;
    auto it = promised.find(dev);
    auto claimed = it == promised.end() ? 0 : it->second;
    auto with_margin = static_cast<long double>(bytes + claimed) * 1.05L;
    if (with_margin > static_cast<long double>(found->free_memory))
      return false;
  }
  return true;
}

std::string no_plan(const plan_info& p) {
  std::string why = "the placement solver found no plan (" + p.status + ")";
  for (auto& e : p.explanation)
    why += "; " + e;
  // The memory it kept out of reach (reserve_for's notes) is part of why.
  for (auto& n : p.notes)
    if (n.find(" keeps ") != std::string::npos)
      why += "; " + n;
  return why;
}

std::vector<stage_place> stages_of(const plan_info& p,
                                   const member_view& view,
                                   std::uint32_t n_layer) {
  if (p.stages.empty())
    throw std::invalid_argument(no_plan(p));
  std::vector<stage_place> out;
  std::uint32_t next = 0;
  for (auto& s : p.stages) {
    auto prefix = s.node + "/";
    if (s.device.rfind(prefix, 0) != 0)
      throw std::invalid_argument("plan: device \"" + s.device
                                  + "\" is not on node \"" + s.node + "\"");
    auto id = s.device.substr(prefix.size());
    const device_info* found = nullptr;
    for (auto& m : view.members)
      if (m.name == s.node && m.status == member_status::alive)
        for (auto& d : m.devices)
          if (d.id == id)
            found = &d;
    if (!found)
      throw std::invalid_argument("plan: no device " + s.device
                                  + " on an alive member");
    if (s.first_layer != next || s.end_layer <= s.first_layer
        || s.end_layer > n_layer)
      throw std::invalid_argument(
        "plan: stage layers [" + std::to_string(s.first_layer) + ", "
        + std::to_string(s.end_layer) + ") do not continue at layer "
        + std::to_string(next) + " of " + std::to_string(n_layer));
    next = s.end_layer;
    out.push_back({s.first_layer, s.end_layer, s.node, id, found->name});
  }
  if (next != n_layer)
    throw std::invalid_argument("plan: the stages end at layer "
                                + std::to_string(next) + " of "
                                + std::to_string(n_layer));
  return out;
}

std::string describe_plan(const plan_info& p) {
  return placement::render_text(p);
}

} // namespace exo::workload
