#pragma once

/// Continuous batching across jobs (issue 22): when the steps waiting for
/// one device stage run, and which run together as one batched forward.
///
/// Jobs that run the same layers of the same model on one device share
/// that device's stage (its weights); each step a job sends is added here
/// and runs with the steps of the other jobs that are waiting then. The
/// rule that decides *when*: the jobs whose steps ran in the stage's last
/// batch are expected back (each samples its next token and sends its
/// next step); once every one of them has a step waiting, the batch runs
/// at once. A job alone is never held back (its own step completes the
/// set). When one of them does not come back in time (its sequence ended,
/// its job waits on something else), a deadline the caller arms runs
/// whatever is waiting (flush_all) and the set becomes the jobs that ran.
/// A job that joins (a new request's prompt) is added to the next batch;
/// one that leaves (forget) is no longer waited for.
///
/// *Which*: steps in arrival order, as many as fit the stage's limits
/// (tokens, rows of logits), never two steps of one sequence in a batch
/// (the later waits for the next batch); the first step always fits (a
/// step is checked against the same limits on arrival). Pure logic: the
/// shard (actors/workload/shard_actor.cpp) holds the steps and runs them.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>
#include <utility>
#include <vector>

namespace exo::workload {

/// Upper bounds, in seconds, of the buckets that count how long a step
/// waited for its stage's batch (from its arrival at the stage to the
/// forward that ran it: the latency continuous batching costs; the
/// shards' figures and the gateway's exo_stage_batch_wait_seconds). The
/// default batch_wait is 2 ms; a stage that waits for a job that does not
/// come back waits batch_wait whole.
inline constexpr double batch_wait_bounds[] = {
  0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
inline constexpr std::size_t batch_wait_buckets =
  sizeof batch_wait_bounds / sizeof batch_wait_bounds[0] + 1;

/// The bucket a wait of `seconds` counts in (the first whose bound is >=
/// it; the last, past every bound, for longer waits).
std::size_t batch_wait_bucket(double seconds) noexcept;

class step_batcher {
public:
  /// A sequence of a job: (job, sequence).
  using sequence = std::pair<std::uint64_t, std::uint32_t>;

  /// A waiting step.
  struct step {
    std::uint64_t ticket = 0; ///< the caller's name for it
    std::uint64_t job = 0;
    std::vector<std::uint32_t> sequences;
    std::uint32_t tokens = 0;
    std::uint32_t logit_rows = 0;
  };

  /// Limits of one batch: its tokens, and its rows of logits (0: none,
  /// a stage that returns activations).
  step_batcher(std::uint32_t max_tokens, std::uint32_t max_logit_rows);

  /// Adds a step. Returns whether the waiting steps should run now (see
  /// ready()).
  bool add(step s);

  /// Every job of the last batch has a step waiting (or there was no last
  /// batch), or the waiting steps fill a batch already.
  bool ready() const;

  /// Whether no step waits.
  bool empty() const {
    return waiting_.empty();
  }
  std::size_t waiting() const {
    return waiting_.size();
  }

  /// Takes the next batch (tickets in arrival order; empty when none
  /// waits) and counts its jobs among the last batch's.
  std::vector<std::uint64_t> take();

  /// Ends a round: the jobs of the batches taken since the last call are
  /// the ones expected back. Call after running every batch of a flush.
  void end_round();

  /// A job is no longer expected (it ended or was released).
  void forget(std::uint64_t job);

  /// The jobs expected back.
  const std::set<std::uint64_t>& expected() const {
    return expected_;
  }

private:
  std::uint32_t max_tokens_;
  std::uint32_t max_logit_rows_;
  std::deque<step> waiting_;
  std::set<std::uint64_t> expected_;
  std::set<std::uint64_t> round_; ///< jobs taken since end_round()
};

} // namespace exo::workload
