#include "actors/workload/handoff_check.hpp"

namespace exo::workload {

std::string handoff_problem(const job_handoff& h, const job_request& req,
                            const std::string& here,
                            const std::set<std::string>& alive) {
  const auto k = h.stages.size();
  if (k == 0 || k > max_handoff_stages || h.nodes.size() != k
      || h.devices.size() != k || h.bounds.size() != k + 1
      || h.bounds.front() != 0)
    return "its " + std::to_string(k)
           + " stages do not match their nodes, devices and layer bounds";
  for (std::size_t i = 0; i < k; ++i) {
    auto where = "stage " + std::to_string(i);
    if (!h.stages[i] || h.bounds[i] >= h.bounds[i + 1])
      return where + " has no actor or no layers";
    if (h.nodes[i] == h.origin)
      return where + " is still on " + h.origin;
    if (h.nodes[i] != here && alive.count(h.nodes[i]) == 0)
      return where + " is on " + h.nodes[i] + ", not an alive member";
  }
  if (h.tokens.size() != req.sequences || h.pos.size() != req.sequences
      || h.draws.size() != req.sequences)
    return "its sequences do not match the request";
  for (std::size_t j = 0; j < h.tokens.size(); ++j) {
    if (h.tokens[j].size() > req.n_gen)
      return "a sequence has more tokens than the request allows";
    if (h.draws[j] > max_draws(h.tokens[j].size(), req.draft_tokens))
      return "sequence " + std::to_string(j) + "'s sampler drew "
             + std::to_string(h.draws[j]) + " numbers, more than its "
             + std::to_string(h.tokens[j].size()) + " tokens take";
  }
  if (auto why = logprobs_problem(h.tokens, h.logprobs, req.logprobs);
      !why.empty())
    return why;
  if (h.recoveries.size() > max_replicated_recoveries
      || h.unfinished.size() > 1)
    return "too many recoveries";
  return {};
}

std::string replica_problem(const job_replica& r, const std::string& here) {
  if (r.origin.empty() || r.origin == here)
    return "the origin must be another node";
  if (!is_sha256(r.model_sha256) || r.model_size == 0
      || r.model_size > max_model_bytes)
    return "the model's digest or size is malformed";
  if (r.request.sequences < 1 || r.request.sequences > max_job_sequences
      || r.tokens.size() != r.request.sequences
      || r.draws.size() != r.request.sequences)
    return "the sequences do not match the request";
  for (std::size_t j = 0; j < r.tokens.size(); ++j) {
    if (r.tokens[j].size() > r.request.n_gen)
      return "a sequence holds more tokens than -n";
    if (r.draws[j] > max_draws(r.tokens[j].size(), r.request.draft_tokens))
      return "sequence " + std::to_string(j)
             + "'s sampler drew more numbers than its tokens take";
  }
  if (r.recoveries.size() > max_replicated_recoveries)
    return "more than " + std::to_string(max_replicated_recoveries)
           + " recoveries";
  if (auto why = logprobs_problem(r.tokens, r.logprobs, r.request.logprobs);
      !why.empty())
    return why;
  if (!r.draft_sha256.empty()
      && (!is_sha256(r.draft_sha256) || r.draft_size == 0
          || r.draft_size > max_model_bytes))
    return "the draft model's digest or size is malformed";
  if (r.lineage.size() > max_job_lineage)
    return "the job's line of copies names more than "
           + std::to_string(max_job_lineage);
  for (auto& k : r.lineage)
    if (auto why = job_key_problem(k); !why.empty())
      return why;
  return {};
}

} // namespace exo::workload
