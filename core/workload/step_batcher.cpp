#include "core/workload/step_batcher.hpp"

#include <algorithm>
#include <iterator>

namespace exo::workload {

std::size_t batch_wait_bucket(double seconds) noexcept {
  const auto* end = std::end(batch_wait_bounds);
  // NaN (never a wait) counts past every bound.
  const auto* it = std::find_if(std::begin(batch_wait_bounds), end,
                                [&](double b) { return seconds <= b; });
  return static_cast<std::size_t>(it - std::begin(batch_wait_bounds));
}

step_batcher::step_batcher(std::uint32_t max_tokens,
                           std::uint32_t max_logit_rows)
    : max_tokens_(std::max<std::uint32_t>(1, max_tokens)),
      max_logit_rows_(max_logit_rows) {
}

bool step_batcher::add(step s) {
  waiting_.push_back(std::move(s));
  return ready();
}

bool step_batcher::ready() const {
  if (waiting_.empty())
    return false;
  std::uint64_t tokens = 0;
  for (auto& s : waiting_)
    tokens += s.tokens;
  if (tokens >= max_tokens_)
    return true;
  for (auto job : expected_) {
    auto has = std::any_of(waiting_.begin(), waiting_.end(),
                           [&](const step& s) { return s.job == job; });
    if (!has)
      return false;
  }
  return true;
}

std::vector<std::uint64_t> step_batcher::take() {
  std::vector<std::uint64_t> out;
  std::set<sequence> in_batch;
  std::uint64_t tokens = 0, rows = 0;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    auto& s = *it;
    const bool first = out.empty();
    bool fits = first
                || (tokens + s.tokens <= max_tokens_
                    && (max_logit_rows_ == 0
                        || rows + s.logit_rows <= max_logit_rows_));
    for (auto q : s.sequences)
      if (in_batch.count({s.job, q}))
        fits = false;
    if (!fits) {
      ++it;
      continue;
    }
    for (auto q : s.sequences)
      in_batch.insert({s.job, q});
    tokens += s.tokens;
    rows += s.logit_rows;
    round_.insert(s.job);
    out.push_back(s.ticket);
    it = waiting_.erase(it);
  }
  return out;
}

void step_batcher::end_round() {
  expected_ = std::move(round_);
  round_.clear();
}

void step_batcher::forget(std::uint64_t job) {
  expected_.erase(job);
  round_.erase(job);
}

} // namespace exo::workload
