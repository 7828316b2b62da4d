#include "actors/workload/simple_placement.hpp"

#include "actors/workload/job_actor.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace exo::workload {

namespace {

int backend_rank(const std::string& b) {
  static const char* order[] = {"cpu", "vulkan", "cuda", "hip", "sim"};
  for (int i = 0; i < 5; ++i)
    if (b == order[i])
      return i;
  return 5;
}

} // namespace

std::vector<device_info> stage_order(std::vector<device_info> devices) {
  devices.erase(std::remove_if(devices.begin(), devices.end(),
                               [](const device_info& d) {
                                 return d.state != device_state::ready
                                        && d.state != device_state::busy;
                               }),
                devices.end());
  std::stable_sort(devices.begin(), devices.end(),
                   [](const device_info& a, const device_info& b) {
                     auto ra = backend_rank(a.backend);
                     auto rb = backend_rank(b.backend);
                     return ra != rb ? ra < rb : a.id < b.id;
                   });
  // One of every backend first, then the second of every backend, ...
  std::map<std::string, int> seen;
  std::vector<std::pair<int, std::size_t>> keyed;
  for (std::size_t i = 0; i < devices.size(); ++i)
    keyed.emplace_back(seen[devices[i].backend]++, i);
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<device_info> out;
  for (auto& [round, i] : keyed)
    out.push_back(devices[i]);
  return out;
}

std::vector<stage_place> simple_placement(
  std::uint32_t n_layer, std::uint32_t k,
  const std::vector<std::pair<std::string, std::vector<device_info>>>&
    members) {
  if (members.empty())
    throw std::invalid_argument("no member to place stages on");
  auto bounds = even_split(n_layer, k);
  // Members without a usable device (all paused, lost or gone) take no
  // stage; with none usable anywhere, the first is named.
  std::vector<std::vector<device_info>> usable;
  std::vector<std::string> names;
  for (auto& [name, devs] : members) {
    auto ok = stage_order(devs);
    if (ok.empty())
      continue;
    usable.push_back(std::move(ok));
    names.push_back(name);
  }
  if (usable.empty())
    throw std::invalid_argument("node " + members.front().first
                                + " has no usable device");
  std::vector<std::size_t> next(usable.size(), 0);
  std::vector<stage_place> plan;
  for (std::uint32_t i = 0; i < k; ++i) {
    auto m = i % usable.size();
    auto& d = usable[m][next[m]++ % usable[m].size()];
    plan.push_back({bounds[i], bounds[i + 1], names[m], d.id, d.name});
  }
  return plan;
}

std::string describe(const std::vector<stage_place>& plan) {
  std::string out;
  for (std::size_t i = 0; i < plan.size(); ++i)
    out += "stage " + std::to_string(i) + ": layers ["
           + std::to_string(plan[i].first) + ", "
           + std::to_string(plan[i].last) + ") on " + plan[i].node + " "
           + plan[i].device + " (" + plan[i].device_name + ")\n";
  return out;
}

} // namespace exo::workload
