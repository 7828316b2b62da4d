#pragma once

/// The topology's pure core: turns probe results into link figures.

#include "messages/cluster.hpp"

#include <algorithm>
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
/// link nor holds back the heartbeats that share its connection:
///
/// 1. one probe chunk of `probe_bytes` alone: its time less the link's
///    round trip (`rtt_s`, the smallest ping's) gives a first estimate of
///    the rate (high when a shaper's burst lets the probe through at once);
/// 2. then `window` chunks in flight, the first sized to `queue_s` of
///    traffic at the probe's rate but at most `start_chunk`, each next one
///    at most twice the last and at most 2 x `queue_s` of the rate seen so
///    far in this step (between `min_chunk` and `max_chunk`), until
///    `budget_s` have passed or `max_bytes` were sent (the chunks in
///    flight still count). A slow link keeps about window x queue_s x 2 of
///    data queued; a long fast one grows to max_chunk within a few round
///    trips, enough to fill it.
///
/// The bandwidth is the bytes of step 2 over the time from its start to
/// its last arrival. The topology actor stretches the budget to 20 round
/// trips on long links, for TCP's window to open.
class bulk_phase {
public:
  struct limits {
    std::uint64_t probe_bytes = 32 * 1024;
    std::uint64_t min_chunk = 8 * 1024;
    std::uint64_t start_chunk = 32 * 1024;
    std::uint64_t max_chunk = 256 * 1024;
    double queue_s = 0.025; ///< of traffic per chunk
    int window = 4;
    double budget_s = 0.2; ///< of step 2
    std::uint64_t max_bytes = 16u << 20;
    double rtt_s = 0; ///< the link's round trip (the probe's includes it)
  };

  explicit bulk_phase(limits l) : l_(l) {
  }

  /// The size of the next chunk to send.
  std::uint64_t chunk_bytes() const noexcept {
    return probing() ? l_.probe_bytes : chunk_;
  }

  /// Whether to send another chunk `elapsed_s` after the start.
  bool send_more(double elapsed_s) const noexcept {
    if (probing())
      return in_flight_ == 0 && !probe_sent_;
    if (in_flight_ >= l_.window)
      return false;
    if (sent_ == 0)
      return true;
    return elapsed_s - start_s_ < l_.budget_s
           && sent_ + chunk_ <= l_.max_bytes;
  }
  /// A chunk of chunk_bytes() was sent.
  void sent() noexcept {
    if (probing())
      probe_sent_ = true;
    else
      sent_ += chunk_;
    ++in_flight_;
  }
  /// A chunk came back `elapsed_s` after the start with `bytes` acknowledged
  /// (0 when it failed).
  void arrived(std::uint64_t bytes, double elapsed_s) noexcept {
    --in_flight_;
    if (probing()) {
      probed_ = true;
      start_s_ = elapsed_s;
      last_s_ = elapsed_s;
      const double rate = static_cast<double>(bytes)
                          / std::max(elapsed_s - l_.rtt_s, 1e-4);
      chunk_ = clamp(std::min(static_cast<double>(l_.start_chunk),
                              rate * l_.queue_s));
      failed_ = bytes == 0;
      return;
    }
    if (bytes > 0) {
      got_ += bytes;
      last_s_ = elapsed_s;
      const double rate = static_cast<double>(got_)
                          / std::max(elapsed_s - start_s_, 1e-4);
      chunk_ = clamp(std::min(2.0 * static_cast<double>(chunk_),
                              2 * rate * l_.queue_s));
    }
  }
  bool done() const noexcept {
    return probed_ && (failed_ || (sent_ > 0 && in_flight_ == 0));
  }
  /// The bytes of step 2 that arrived, and the seconds they took.
  std::uint64_t bytes() const noexcept {
    return got_;
  }
  double seconds() const noexcept {
    return last_s_ - start_s_;
  }

private:
  bool probing() const noexcept {
    return !probed_;
  }
  std::uint64_t clamp(double c) const noexcept {
    return c < static_cast<double>(l_.min_chunk)   ? l_.min_chunk
           : c > static_cast<double>(l_.max_chunk) ? l_.max_chunk
                                                   : static_cast<std::uint64_t>(c);
  }

  limits l_;
  bool probe_sent_ = false, probed_ = false, failed_ = false;
  std::uint64_t chunk_ = 0, sent_ = 0, got_ = 0;
  int in_flight_ = 0;
  double start_s_ = 0, last_s_ = 0;
};

} // namespace exo::topology
