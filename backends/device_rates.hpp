#pragma once

/// What a device achieves with its own operations: the figures placement
/// predicts stage times from (device_properties::peak_flops,
/// memory_bandwidth, launch_seconds) instead of assuming them.

#include <algorithm>
#include <chrono>
#include <vector>

namespace exo::backend {

class device;

/// Measured rates; 0 where nothing was measured.
struct device_rates {
  double flops = 0; ///< FLOP/s of an F32 matrix product (a prompt's)
  /// Weight bytes/s of an F32 matrix-vector product over 64 MiB (a
  /// generated token's).
  double bytes_per_second = 0;
  /// One small operation's own cost (a 64 x 64 matrix-vector product) run
  /// back to back as a decode step runs its operations: dispatch, and
  /// whatever a device does per operation.
  double launch_seconds = 0;
};

/// The rates of any device measured through the device interface
/// (allocate, write, matmul, synchronize; each operation run once before
/// it is timed: a device may build its pipelines on first use): 64 rows
/// through a 1024 x 1024 matrix, one row through 4096 x 4096 (64 MiB,
/// skipped where the device cannot hold it), and 16 products of 64 x 64
/// back to back, then one wait. About 0.1-0.3 s on lavapipe. What the
/// device does not manage stays 0.
device_rates measure_device_rates(device& d);

/// The median of `runs` timings of op() (after one untimed run), each
/// after before().
template <class Op, class Before>
double median_seconds(int runs, Op&& op, Before&& before) {
  using clock = std::chrono::steady_clock;
  std::vector<double> t;
  for (int i = 0; i <= runs; ++i) {
    before();
    auto t0 = clock::now();
    op();
    if (i > 0)
      t.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + runs / 2, t.end());
  return t[static_cast<std::size_t>(runs / 2)];
}

} // namespace exo::backend
