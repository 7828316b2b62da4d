// step_batcher: when the steps of several jobs waiting for one stage run,
// and which run together (continuous batching across jobs).

#include "core/workload/step_batcher.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iterator>

using exo::workload::step_batcher;

namespace {

step_batcher::step one(std::uint64_t ticket, std::uint64_t job,
                       std::vector<std::uint32_t> seqs,
                       std::uint32_t tokens = 0) {
  step_batcher::step s;
  s.ticket = ticket;
  s.job = job;
  s.sequences = std::move(seqs);
  s.tokens = tokens ? tokens : static_cast<std::uint32_t>(s.sequences.size());
  s.logit_rows = static_cast<std::uint32_t>(s.sequences.size());
  return s;
}

/// Jobs 1 and 2 ran one step each in the last batch.
void both_ran(step_batcher& b) {
  b.add(one(1, 1, {0}));
  b.add(one(2, 2, {0}));
  b.take();
  b.end_round();
  REQUIRE(b.expected() == std::set<std::uint64_t>{1, 2});
}

} // namespace

TEST_CASE("a job alone is never held back", "[workload][batcher]") {
  step_batcher b(64, 8);
  CHECK(b.add(one(1, 7, {0})));
  CHECK(b.take() == std::vector<std::uint64_t>{1});
  b.end_round();
  CHECK(b.expected() == std::set<std::uint64_t>{7});
  // Its next step completes the expected set at once.
  CHECK(b.add(one(2, 7, {0})));
  CHECK(b.take() == std::vector<std::uint64_t>{2});
  CHECK(b.empty());
  CHECK(b.take().empty());
}

TEST_CASE("the jobs of the last batch are waited for, then run together",
          "[workload][batcher]") {
  step_batcher b(64, 8);
  // Two jobs join: the first arrival runs (nothing expected yet), the
  // second waits for nobody either.
  CHECK(b.add(one(1, 1, {0})));
  CHECK(b.add(one(2, 2, {0, 1})));
  CHECK(b.take() == std::vector<std::uint64_t>{1, 2});
  b.end_round();
  CHECK(b.expected() == std::set<std::uint64_t>{1, 2});
  // Job 1 is back first: it waits for job 2.
  CHECK_FALSE(b.add(one(3, 1, {0})));
  CHECK_FALSE(b.ready());
  CHECK(b.add(one(4, 2, {0, 1})));
  CHECK(b.take() == std::vector<std::uint64_t>{3, 4});
  b.end_round();
  // Job 2 ends: no longer waited for.
  b.forget(2);
  CHECK(b.add(one(5, 1, {0})));
}

TEST_CASE("a deadline runs what waits, and the set becomes who ran",
          "[workload][batcher]") {
  step_batcher b(64, 8);
  both_ran(b);
  CHECK_FALSE(b.add(one(3, 1, {0}))); // job 2 does not come back
  // The caller's deadline: flush everything.
  CHECK(b.take() == std::vector<std::uint64_t>{3});
  CHECK(b.take().empty());
  b.end_round();
  CHECK(b.expected() == std::set<std::uint64_t>{1});
  CHECK(b.add(one(4, 1, {0})));
}

TEST_CASE("a batch keeps to the stage's limits and never holds a sequence "
          "twice",
          "[workload][batcher]") {
  step_batcher b(16, 3);
  b.add(one(1, 1, {0, 1}, 2));
  b.add(one(2, 2, {0, 1}, 2)); // 4 rows of logits with the first: waits
  b.add(one(3, 3, {0}, 10));
  b.add(one(4, 1, {1}, 1)); // sequence (1, 1) is in the batch already
  b.add(one(5, 4, {0}, 9)); // 22 tokens with the others: waits
  CHECK(b.take() == std::vector<std::uint64_t>{1, 3});
  CHECK(b.take() == std::vector<std::uint64_t>{2, 4});
  CHECK(b.take() == std::vector<std::uint64_t>{5});
  CHECK(b.empty());
  b.end_round();
  CHECK(b.expected() == std::set<std::uint64_t>{1, 2, 3, 4});
  // A first step larger than the limits still goes (the shard checks
  // steps against them on arrival).
  step_batcher c(4, 0);
  c.add(one(9, 1, {0}, 8));
  CHECK(c.ready()); // it fills a batch by itself
  CHECK(c.take() == std::vector<std::uint64_t>{9});
}

TEST_CASE("steps that fill a batch run without waiting for the others",
          "[workload][batcher]") {
  step_batcher b(8, 0);
  both_ran(b);
  CHECK_FALSE(b.add(one(3, 1, {0}, 4)));
  CHECK(b.add(one(4, 1, {1}, 4))); // 8 tokens: a full batch
}

TEST_CASE("a step's wait for its batch counts in the bucket of the first "
          "bound that holds it",
          "[workload][batcher]") {
  using exo::workload::batch_wait_bounds;
  using exo::workload::batch_wait_bucket;
  using exo::workload::batch_wait_buckets;
  constexpr std::size_t last = batch_wait_buckets - 1;
  STATIC_REQUIRE(batch_wait_buckets == std::size(batch_wait_bounds) + 1);
  for (std::size_t i = 1; i < std::size(batch_wait_bounds); ++i)
    CHECK(batch_wait_bounds[i - 1] < batch_wait_bounds[i]);
  CHECK(batch_wait_bucket(0) == 0);
  CHECK(batch_wait_bucket(0.0001) == 0); // a bound holds its own value
  CHECK(batch_wait_bucket(0.00011) == 1);
  CHECK(batch_wait_bucket(0.002) == 3);  // the default batch_wait
  CHECK(batch_wait_bucket(0.0021) == 4);
  CHECK(batch_wait_bucket(1.0) == last - 1);
  CHECK(batch_wait_bucket(1.5) == last);
  CHECK(batch_wait_bucket(std::nan("")) == last);
}
