#include "core/placement/device_score.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace exo::placement {

std::vector<device_score> score_devices(const problem& p) {
  std::vector<device_score> out;
  const auto n = p.devices.size();
  std::vector<double> speed(n), net(n);
  double max_speed = 0, max_mem = 0, max_bw = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double t = 0;
    for (std::size_t l = 0; l < p.layers.size(); ++l)
      t += p.layer_seconds(i, l);
    speed[i] = t > 0 ? 1.0 / t : 0;
    max_speed = std::max(max_speed, speed[i]);
    max_mem = std::max(max_mem,
                       static_cast<double>(p.devices[i].memory_bytes));
    max_bw = std::max(max_bw, p.devices[i].memory_bandwidth);
  }
  // Network: mean time to send 1 MiB to every other node; best node = 1.
  std::set<std::string> nodes;
  for (const auto& d : p.devices)
    nodes.insert(d.node);
  std::map<std::string, double> mean_t;
  const link_index links(p);
  for (const auto& a : nodes) {
    double sum = 0;
    int cnt = 0;
    for (const auto& b : nodes)
      if (a != b) {
        auto s = links.between(a, b);
        sum += s.latency + 1048576.0 / s.bandwidth;
        ++cnt;
      }
    mean_t[a] = cnt ? sum / cnt : 0;
  }
  double best_t = 1e300;
  for (const auto& [k, t] : mean_t)
    best_t = std::min(best_t, t);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& d = p.devices[i];
    device_score s;
    s.device_id = d.id;
    s.compute = max_speed > 0 ? speed[i] / max_speed : 0;
    s.memory = max_mem > 0 ? static_cast<double>(d.memory_bytes) / max_mem
                           : 0;
    double t = mean_t[d.node];
    s.network = t > 0 ? best_t / t : 1.0;
    s.thermal = d.thermal_headroom;
    s.bandwidth = max_bw > 0 ? d.memory_bandwidth / max_bw : 1.0;
    s.total = 0.40 * s.compute + 0.30 * s.memory + 0.15 * s.network
              + 0.10 * s.thermal + 0.05 * s.bandwidth;
    out.push_back(s);
  }
  return out;
}

} // namespace exo::placement
