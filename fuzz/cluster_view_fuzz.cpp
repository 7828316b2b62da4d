// The gateway's cluster views on whatever a peer or a service answers: the
// input is JSON for the five console answers, the audit records and a
// shard host's stage entry (split at 0x00 bytes); the snapshot, the events
// against an empty snapshot and against itself, the dcgm readings, the
// audit events and the stage metrics must all come out without a crash.
#include "core/gateway/cluster_view.hpp"
#include "fuzz/fuzz_target.hpp"

#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  using exo::text::json;
  std::vector<std::string> parts(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && parts.size() < 7)
      parts.emplace_back();
    else
      parts.back().push_back(static_cast<char>(data[i]));
  }
  parts.resize(7);
  auto parsed = [](const std::string& s) {
    auto j = json::parse(s, nullptr, false);
    return j.is_discarded() ? json{} : j;
  };
  exo::gateway::cluster_parts p;
  p.node = "fuzz";
  p.nodes = parsed(parts[0]);
  p.devices = parsed(parts[1]);
  p.links = parsed(parts[2]);
  p.thermal = parsed(parts[3]);
  p.jobs = parsed(parts[4]);
  auto snap = exo::gateway::make_snapshot(p);
  (void) exo::gateway::diff_events(json{}, snap, 1);
  if (!exo::gateway::diff_events(snap, snap, 2).empty())
    __builtin_trap(); // a snapshot does not differ from itself
  (void) exo::gateway::device_readings(snap);
  (void) exo::gateway::audit_events(parsed(parts[5]), 3);
  (void) exo::text::compact(snap);
  // A shard host's inspection fields: its stages as a peer sends them.
  auto stages = exo::gateway::stage_entries(
    "fuzz", {{"stage 0", parts[6]}, {"stage 1", parts[5]}, {"other", parts[6]}});
  exo::gateway::prometheus::text_writer w;
  exo::gateway::write_stage_metrics(w, stages);
  return 0;
}
