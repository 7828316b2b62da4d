// Link figures from probe results.

#include "actors/topology/link_stats.hpp"

#include <catch2/catch.hpp>

using namespace exo::topology;

TEST_CASE("quantiles use the nearest rank") {
  CHECK(quantile({}, 0.5) == 0);
  CHECK(quantile({7}, 0.99) == 7);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i)
    v.push_back(101 - i); // unsorted on purpose
  CHECK(quantile(v, 0.5) == 50);
  CHECK(quantile(v, 0.99) == 99);
  CHECK(quantile(v, 1.0) == 100);
}

TEST_CASE("a link summary reports median, p99, jitter, loss and bandwidth") {
  probe_results r;
  r.probes = 5;
  r.rtts_us = {100, 300, 200, 200}; // one probe lost
  r.bulk_bytes = 16u << 20;
  r.bulk_seconds = 0.5;
  auto l = summarize(r, "a", "b", 42);
  CHECK(l.from == "a");
  CHECK(l.to == "b");
  CHECK(l.measured_ns == 42);
  CHECK(l.rtt_p50_us == 200);
  CHECK(l.rtt_p99_us == 300);
  CHECK(l.jitter_us == Approx((200.0 + 100.0 + 0.0) / 3));
  CHECK(l.loss == Approx(0.2));
  CHECK(l.bandwidth_bps == Approx(2.0 * (16u << 20)));
}

TEST_CASE("a link whose probes all failed reports total loss, not garbage") {
  probe_results r;
  r.probes = 20;
  auto l = summarize(r, "a", "b", 0);
  CHECK(l.loss == 1.0);
  CHECK(l.rtt_p50_us == 0);
  CHECK(l.bandwidth_bps == 0);
}
