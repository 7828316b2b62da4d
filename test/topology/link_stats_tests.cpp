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

TEST_CASE("a bulk phase probes, sizes its chunks to the link and stops in time") {
  bulk_phase::limits l;
  l.probe_bytes = 1000;
  l.min_chunk = 100;
  l.start_chunk = 1000;
  l.max_chunk = 8000;
  l.queue_s = 0.1;
  l.window = 2;
  l.budget_s = 0.2;
  l.max_bytes = 40000;
  l.rtt_s = 0.1;
  // A slow link: 1000 bytes in 0.5 s less a 0.1 s round trip (2500 B/s)
  // -> chunks of 250 bytes (0.1 s of traffic).
  bulk_phase slow{l};
  CHECK(slow.chunk_bytes() == 1000);
  REQUIRE(slow.send_more(0));
  slow.sent();
  CHECK_FALSE(slow.send_more(0)); // the probe goes alone
  slow.arrived(1000, 0.5);
  CHECK_FALSE(slow.done());
  CHECK(slow.chunk_bytes() == 250);
  REQUIRE(slow.send_more(0.5));
  slow.sent();
  REQUIRE(slow.send_more(0.5));
  slow.sent();
  CHECK_FALSE(slow.send_more(0.5)); // the window is full
  slow.arrived(250, 0.6);           // 2500 B/s so far: 2 x 0.1 s = 500
  CHECK(slow.chunk_bytes() == 500);
  CHECK_FALSE(slow.send_more(0.75)); // past the budget (0.25 s into step 2)
  slow.arrived(250, 0.7);
  CHECK(slow.done());
  CHECK(slow.bytes() == 500);
  CHECK(slow.seconds() == Approx(0.2)); // step 2 only: the link's rate
  // A fast link behind a burst: the probe looks instant, yet step 2 starts
  // at start_chunk and doubles while the rate keeps up, to max_chunk; the
  // byte cap ends it.
  bulk_phase fast{l};
  fast.sent();
  fast.arrived(1000, 0.1);
  CHECK(fast.chunk_bytes() == 1000);
  std::vector<std::uint64_t> sizes;
  std::size_t next = 0; // the oldest chunk in flight
  double t = 0.1;
  while (!fast.done()) {
    while (fast.send_more(t)) {
      sizes.push_back(fast.chunk_bytes());
      fast.sent();
    }
    t += 0.001;
    fast.arrived(sizes[next++], t);
  }
  REQUIRE(sizes.size() >= 4);
  CHECK(sizes[0] == 1000);
  CHECK(sizes[2] == 2000); // doubled once it arrived
  CHECK(sizes.back() == 8000);
  CHECK(fast.bytes() <= 40000);
  // A failed probe ends the phase with nothing measured.
  bulk_phase lossy{l};
  lossy.sent();
  lossy.arrived(0, 0.1);
  CHECK(lossy.done());
  CHECK(lossy.bytes() == 0);
  CHECK(summarize({{}, 0, lossy.bytes(), lossy.seconds()}, "a", "b", 0)
          .bandwidth_bps
        == 0);
}
