#include "backends/device_rates.hpp"

#include "backends/backend.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>

namespace exo::backend {

namespace {

/// C[m x n] = A[m x k] * B^T (B stored [n x k], a linear layer's weight)
/// on device `d`, its operands allocated and filled once.
struct product {
  device& d;
  matmul_dims dims;
  std::unique_ptr<buffer> a, b, c;
  bool ok = false;

  product(device& dev, std::size_t m, std::size_t n, std::size_t k)
      : d(dev) {
    dims.m = m;
    dims.n = n;
    dims.k = k;
    dims.transpose_b = true;
    // Small values, written a piece at a time from one host piece.
    std::vector<float> piece(std::min<std::size_t>(std::max(m, n) * k,
                                                   std::size_t{1} << 18));
    for (std::size_t i = 0; i < piece.size(); ++i)
      piece[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.01f;
    auto fill = [&](std::size_t count,
                    std::unique_ptr<buffer>& out) -> bool {
      auto buf = d.allocate(count * sizeof(float));
      if (!buf)
        return false;
      for (std::size_t at = 0; at < count; at += piece.size()) {
        const auto len = std::min(piece.size(), count - at);
        if (!d.write(**buf, at * sizeof(float), piece.data(),
                     len * sizeof(float)))
          return false;
      }
      out = std::move(*buf);
      return true;
    };
    auto c_buf = d.allocate(m * n * sizeof(float));
    ok = fill(m * k, a) && fill(n * k, b) && c_buf.ok()
         && d.synchronize().ok();
    if (ok)
      c = std::move(*c_buf);
  }

  /// Queues the product; false when the device refused it.
  bool queue() {
    return ok && d.matmul({a.get()}, {b.get()}, {c.get()}, dims).ok();
  }
};

/// The median seconds of `runs` rounds of `ops` products of `p` queued
/// back to back, then one wait; 0 when the device refused any of them.
double round_seconds(product& p, int runs, int ops) {
  bool ok = p.ok;
  double s = median_seconds(
    runs,
    [&] {
      for (int i = 0; i < ops && ok; ++i)
        ok = p.queue();
      ok = ok && p.d.synchronize().ok();
    },
    [] {});
  return ok ? s : 0;
}

} // namespace

device_rates measure_device_rates(device& d) {
  device_rates r;
  // A prompt: 64 rows through a 1024 x 1024 matrix.
  {
    product prompt{d, 64, 1024, 1024};
    if (double s = round_seconds(prompt, 3, 1); s > 0)
      r.flops = 2.0 * 64 * 1024 * 1024 / s;
  }
  // A generated token: each weight read once (64 MiB of F32).
  {
    product token{d, 1, 4096, 4096};
    if (double s = round_seconds(token, 3, 1); s > 0)
      r.bytes_per_second = 4096.0 * 4096 * sizeof(float) / s;
  }
  // An operation's own cost: 16 products too small to take time of their
  // own, back to back, then one wait.
  product small{d, 1, 64, 64};
  if (double s = round_seconds(small, 15, 16); s > 0)
    r.launch_seconds = s / 16;
  return r;
}

} // namespace exo::backend
