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

TEST_CASE("a bulk phase stops sending after its time budget and byte cap") {
  bulk_phase::limits l;
  l.chunk_bytes = 1000;
  l.window = 2;
  l.budget_s = 0.2;
  l.max_bytes = 5000;
  // A slow link: the first chunks take longer than the budget.
  bulk_phase slow{l};
  CHECK(slow.send_more(0));
  slow.sent();
  CHECK(slow.send_more(0));
  slow.sent();
  CHECK_FALSE(slow.send_more(0)); // the window is full
  slow.arrived(1000, 0.5);
  CHECK_FALSE(slow.send_more(0.5)); // past the budget
  CHECK_FALSE(slow.done());
  slow.arrived(1000, 1.0);
  CHECK(slow.done());
  CHECK(slow.bytes() == 2000);
  CHECK(slow.seconds() == 1.0); // 2000 bytes/s: the link's rate
  // A fast link: the byte cap ends it.
  bulk_phase fast{l};
  int sent = 0;
  double t = 0;
  while (fast.send_more(t)) {
    fast.sent();
    ++sent;
    if (!fast.send_more(t)) {
      t += 0.001;
      fast.arrived(1000, t);
    }
  }
  while (!fast.done()) {
    t += 0.001;
    fast.arrived(1000, t);
  }
  CHECK(sent == 5);
  CHECK(fast.bytes() == 5000);
  // Failed chunks count for nothing.
  bulk_phase lossy{l};
  lossy.sent();
  lossy.arrived(0, 0.1);
  CHECK(lossy.done());
  CHECK(lossy.bytes() == 0);
  CHECK(summarize({{}, 0, lossy.bytes(), lossy.seconds()}, "a", "b", 0)
          .bandwidth_bps
        == 0);
}
