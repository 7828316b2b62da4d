#include "actors/topology/link_stats.hpp"

#include <algorithm>
#include <cmath>

namespace exo::topology {

double quantile(std::vector<double> values, double q) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  auto rank = static_cast<std::size_t>(
    std::ceil(q * static_cast<double>(values.size())));
  rank = std::clamp<std::size_t>(rank, 1, values.size());
  return values[rank - 1];
}

link_info summarize(const probe_results& r, const std::string& from,
                    const std::string& to, std::int64_t measured_ns) {
  link_info l;
  l.from = from;
  l.to = to;
  l.measured_ns = measured_ns;
  l.rtt_p50_us = quantile(r.rtts_us, 0.5);
  l.rtt_p99_us = quantile(r.rtts_us, 0.99);
  if (r.rtts_us.size() > 1) {
    double sum = 0;
    for (std::size_t i = 1; i < r.rtts_us.size(); ++i)
      sum += std::abs(r.rtts_us[i] - r.rtts_us[i - 1]);
    l.jitter_us = sum / static_cast<double>(r.rtts_us.size() - 1);
  }
  if (r.probes > 0)
    l.loss = 1.0
             - static_cast<double>(r.rtts_us.size())
                 / static_cast<double>(r.probes);
  if (r.bulk_seconds > 0)
    l.bandwidth_bps = static_cast<double>(r.bulk_bytes) / r.bulk_seconds;
  return l;
}

} // namespace exo::topology
