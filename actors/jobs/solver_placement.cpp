#include "actors/jobs/solver_placement.hpp"

#include "actors/placement/cluster_snapshot.hpp"
#include "actors/placement/model_spec.hpp"

#include <stdexcept>

namespace exo::jobs {

plan_request run_plan_request(const std::string& model, std::uint32_t n_ctx,
                              std::uint32_t sequences,
                              const std::string& origin) {
  plan_request r;
  r.model_path = model;
  r.context_length = n_ctx;
  r.objective = sequences > 1 ? "throughput" : "latency";
  r.keep = false;
  r.origin = origin;
  try {
    placement::attach_model(r, placement::load_model_spec(model, n_ctx));
  } catch (const placement::problem_error& e) {
    throw std::invalid_argument(e.what());
  }
  return r;
}

std::vector<stage_place> stages_of(const plan_info& p,
                                   const member_view& view,
                                   std::uint32_t n_layer) {
  if (p.stages.empty()) {
    std::string why = "the placement service found no plan (" + p.status
                      + ")";
    for (auto& e : p.explanation)
      why += "; " + e;
    throw std::invalid_argument(why);
  }
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

} // namespace exo::jobs
