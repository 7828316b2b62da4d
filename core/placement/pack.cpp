#include "core/placement/pack.hpp"

#include <map>

namespace exo::placement {

std::vector<packed_job> pack_jobs(const std::vector<problem>& jobs,
                                  const solve_options& opts) {
  std::vector<packed_job> out;
  // Bytes the plans so far hold on each device, and which jobs hold them.
  std::map<std::string, std::uint64_t> held;
  std::map<std::string, std::vector<std::size_t>> holders;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    packed_job pj;
    pj.placed_on = jobs[j];
    for (auto& d : pj.placed_on.devices) {
      auto it = held.find(d.id);
      if (it == held.end())
        continue;
      if (it->second >= d.memory_bytes) {
        d.excluded = true; // nothing left; keeps the memory figure valid
      } else {
        d.memory_bytes -= it->second;
      }
    }
    try {
      pj.result = solve(pj.placed_on, opts);
    } catch (const problem_error& e) {
      throw problem_error("job " + std::to_string(j + 1) + ": " + e.what());
    }
    if (pj.result.best && pj.result.status != solve_status::infeasible) {
      for (const auto& s : pj.result.best->stages) {
        held[s.device_id] += s.memory_used_bytes;
        auto& h = holders[s.device_id];
        if (h.empty() || h.back() != j)
          h.push_back(j);
      }
    } else {
      pj.refused = pj.result.explanation;
      if (pj.refused.empty())
        pj.refused.push_back(std::string("no plan (")
                             + to_string(pj.result.status) + ")");
      std::uint64_t total = 0;
      for (const auto& [id, bytes] : held)
        total += bytes;
      if (total > 0) {
        std::string who;
        for (std::size_t k = 0; k < j; ++k)
          if (out[k].refused.empty())
            who += (who.empty() ? "" : ", ") + std::to_string(k + 1)
                   + (jobs[k].model_name.empty()
                        ? std::string{}
                        : " (" + jobs[k].model_name + ")");
        pj.refused.push_back("the jobs placed before it (" + who + ") hold "
                             + format_bytes(static_cast<double>(total))
                             + " on " + std::to_string(held.size())
                             + " device(s)");
      }
    }
    out.push_back(std::move(pj));
  }
  return out;
}

} // namespace exo::placement
