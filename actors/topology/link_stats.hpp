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

/// The bulk phase of a measurement, bounded so that it never hogs a slow
/// link: chunks of `chunk_bytes`, `window` in flight, and no new chunk once
/// `budget_s` have passed or `max_bytes` were sent (the chunks in flight
/// still count). The bandwidth is the bytes that arrived over the time to
/// the last arrival. At 5 Mbit/s that is 4 chunks of 256 KiB (1.7 s), at
/// 1 Gbit/s about 6 MiB in 0.2 s, at loopback speed max_bytes. (The
/// topology actor stretches the budget to 20 round trips on long links.)
class bulk_phase {
public:
  struct limits {
    std::uint64_t chunk_bytes = 256 * 1024;
    int window = 4;
    double budget_s = 0.2;
    std::uint64_t max_bytes = 16u << 20;
  };

  explicit bulk_phase(limits l) : l_(l) {
  }

  const limits& bounds() const noexcept {
    return l_;
  }

  /// Whether to send another chunk `elapsed_s` after the start.
  bool send_more(double elapsed_s) const noexcept {
    if (in_flight_ >= l_.window)
      return false;
    if (sent_ == 0)
      return true;
    return elapsed_s < l_.budget_s && sent_ + l_.chunk_bytes <= l_.max_bytes;
  }
  /// A chunk was sent.
  void sent() noexcept {
    sent_ += l_.chunk_bytes;
    ++in_flight_;
  }
  /// A chunk came back `elapsed_s` after the start with `bytes` acknowledged
  /// (0 when it failed).
  void arrived(std::uint64_t bytes, double elapsed_s) noexcept {
    --in_flight_;
    if (bytes > 0) {
      got_ += bytes;
      last_s_ = elapsed_s;
    }
  }
  bool done() const noexcept {
    return sent_ > 0 && in_flight_ == 0;
  }
  std::uint64_t bytes() const noexcept {
    return got_;
  }
  double seconds() const noexcept {
    return last_s_;
  }

private:
  limits l_;
  std::uint64_t sent_ = 0, got_ = 0;
  int in_flight_ = 0;
  double last_s_ = 0;
};

} // namespace exo::topology
