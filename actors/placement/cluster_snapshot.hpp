#pragma once

/// From a live cluster to a placement problem, and back to wire plans.
/// Pure functions (no actor system): the placement actor is a thin shell
/// around them.
///
/// Conversion rules (documented in docs/architecture.md, "Placement"):
/// - devices: every device of every alive member whose state is ready or
///   busy; paused, failed and gone devices and dead or departed members are
///   left out with a note. Ids are "NODE/DEVICE-ID" (device ids are only
///   unique within a node).
/// - memory: the device's free memory (the request's safety margin is held
///   back by the solver).
/// - speed: peak_flops and memory_bandwidth as the device reports them
///   (simulated devices report their profile figures and run by the same
///   roofline); a device reporting 0 gets the conservative defaults below
///   and a note.
/// - thermal state (the thermal service's statuses, by "NODE/DEVICE-ID"):
///   a paused device is left out with a note; a warm one stays but its
///   FLOP/s and memory bandwidth are taken at `warm_speed_factor` (and its
///   thermal headroom shown as that factor), so the solver moves work to
///   cooler devices without making a lone warm device unusable. Devices
///   without a status count as normal.
/// - links: each measured link (either direction) gives latency = rtt_p50 / 2
///   (one way) and its bandwidth; of two directions the worse of each figure
///   is kept. Pairs never measured, or measured without a bandwidth, use the
///   conservative default link.

#include "core/placement/model_spec.hpp"
#include "core/placement/plan.hpp"
#include "core/placement/problem.hpp"
#include "core/placement/solve.hpp"
#include "messages/cluster.hpp"
#include "messages/placement.hpp"
#include "messages/thermal.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace exo::placement {

/// Figures used where the cluster does not say.
struct conversion_options {
  /// FLOP/s of a device that reports no peak (a CPU without a profile):
  /// 20 GFLOP/s, a few cores of a laptop CPU without tuned BLAS.
  double default_flops = 20e9;
  /// Bytes/s of a device that reports no memory bandwidth: 20 GB/s, one
  /// DDR4 channel.
  double default_memory_bandwidth = 20e9;
  /// For node pairs without a measurement: 1 ms one way, 100 MB/s.
  link_spec default_link{1e-3, 100e6};
  /// Fraction of each device's free memory held back.
  double safety_margin = 0.05;
  /// Speed (FLOP/s and memory bandwidth) a thermally warm device is taken
  /// at, as a fraction of what it reports, in (0, 1].
  double warm_speed_factor = 0.5;
};

/// Thermal statuses by "NODE/DEVICE-ID".
using thermal_view = std::map<std::string, thermal_status>;

/// Indexes statuses by "NODE/DEVICE-ID".
thermal_view to_thermal_view(const std::vector<thermal_status>& xs);

/// Reads the thermal service's console JSON ({"devices": [{"node",
/// "device", "has_temperature", "temp_c", "predicted_c", "limit_c",
/// "time_to_limit_s", "state"}, ...]}). Malformed entries are skipped; a
/// document that is not such an object gives nothing. At most 1024 entries.
std::optional<thermal_view> parse_thermal_json(const std::string& json);

/// A problem built from a cluster view, with notes for people about what was
/// left out or assumed.
struct conversion {
  problem p;
  std::vector<std::string> notes;
};

/// Keeps `bytes` free on the device of `node` with the most free memory
/// (a run's draft model, which starts there after the plan): that device
/// offers the solver the rest (and leaves the problem when nothing is
/// left). Returns its id, or "" with a note when no device of the node has
/// the room (the run then starts the draft where its node picks, or
/// without it).
std::string reserve_memory(conversion& c, const std::string& node,
                           std::uint64_t bytes);

/// What a request keeps out of the solver's reach, before it solves: the
/// KV claims of running jobs (plan_request::kv_claims: each device offers
/// its free memory less its claim, with a note, and leaves the problem
/// when nothing is left), then the draft model's room (reserve_memory).
/// Returns the draft's device (plan_info::reserved_device). Throws
/// problem_error for more than max_plan_claims claims.
std::string reserve_for(conversion& c, const plan_request& r);

/// "NODE/ID".
std::string qualified_device_id(const std::string& node,
                                const std::string& id);

/// Builds the placement problem of serving `m` with `context_length` tokens
/// on the cluster `v`. Does not validate (solve() does).
conversion to_problem(const member_view& v, const model_spec& m,
                      std::uint64_t context_length, const objective& obj,
                      const conversion_options& opts = {},
                      const thermal_view& thermal = {});

/// What re-planning watches: member statuses, the usable state of every
/// device of an alive member ("ready" stands for ready and busy) and the
/// thermal state of those devices that are not normal.
struct cluster_state {
  std::map<std::string, std::string> members; ///< name -> status
  std::map<std::string, std::string> devices; ///< NODE/ID -> state
  std::map<std::string, std::string> thermal; ///< NODE/ID -> warm | paused
  bool operator==(const cluster_state& o) const {
    return members == o.members && devices == o.devices
           && thermal == o.thermal;
  }
  bool operator!=(const cluster_state& o) const { return !(*this == o); }
};

cluster_state state_of(const member_view& v, const thermal_view& thermal = {});

/// The changes from `before` to `after`, one sentence each ("member b:
/// alive -> dead", "device a/sim0: ready -> paused", "device a/sim1
/// appeared", "device a/sim1 gone", "device a/sim0 thermal: normal ->
/// warm"). Devices of a member that changed status are covered by the
/// member's sentence.
std::vector<std::string> describe_changes(const cluster_state& before,
                                          const cluster_state& after);

/// Puts `m`'s layers into `r` (for a planning node that lacks the file).
void attach_model(plan_request& r, const model_spec& m);

/// The model a request carries in its layers (model_name or the file name,
/// context_train). Throws problem_error when it carries more than
/// max_plan_layers.
model_spec model_of(const plan_request& r);

/// The wire form of a solve result.
plan_info to_plan_info(const solve_result& r);

/// The core plan of a wire plan (for the printing functions of plan.hpp).
plan from_plan_info(const plan_info& x);

/// A plan for people: the stage table and its figures, or the explanation.
std::string render_text(const plan_info& x);

/// A plan as one JSON object.
std::string render_json(const plan_info& x);

/// A job for people (id, model, request, reason of the last re-plan, plan).
std::string render_text(const plan_job_info& j);

/// A job as one JSON object.
std::string render_json(const plan_job_info& j);

} // namespace exo::placement
