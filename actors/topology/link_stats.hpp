#pragma once

/// The topology's pure core: turns probe results into link figures.

#include "messages/cluster.hpp"

#include <cstdint>
#include <vector>

namespace exo::topology {

/// What one measurement of a link observed.
struct probe_results {
  std::vector<double> rtts_us; ///< round trips that came back, in order
  int probes = 0;              ///< round trips sent
  std::uint64_t bulk_bytes = 0;
  double bulk_seconds = 0;
};

/// Median and 99th percentile of the round trips, jitter as the mean
/// absolute difference of consecutive round trips (RFC 3550 style), loss as
/// the fraction of probes that never came back, bandwidth as bytes per
/// second of the bulk phase.
link_info summarize(const probe_results& r, const std::string& from,
                    const std::string& to, std::int64_t measured_ns);

/// The q-quantile (0..1) of values, by nearest rank; 0 when empty.
double quantile(std::vector<double> values, double q);

} // namespace exo::topology
