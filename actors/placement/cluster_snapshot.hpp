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
/// - links: each measured link (either direction) gives latency = rtt_p50 / 2
///   (one way) and its bandwidth; of two directions the worse of each figure
///   is kept. Pairs never measured, or measured without a bandwidth, use the
///   conservative default link.

#include "actors/placement/model_spec.hpp"
#include "actors/placement/plan.hpp"
#include "actors/placement/problem.hpp"
#include "actors/placement/solve.hpp"
#include "messages/cluster.hpp"
#include "messages/placement.hpp"

#include <cstdint>
#include <map>
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
};

/// A problem built from a cluster view, with notes for people about what was
/// left out or assumed.
struct conversion {
  problem p;
  std::vector<std::string> notes;
};

/// "NODE/ID".
std::string qualified_device_id(const std::string& node,
                                const std::string& id);

/// Builds the placement problem of serving `m` with `context_length` tokens
/// on the cluster `v`. Does not validate (solve() does).
conversion to_problem(const member_view& v, const model_spec& m,
                      std::uint64_t context_length, const objective& obj,
                      const conversion_options& opts = {});

/// What re-planning watches: member statuses and the usable state of every
/// device of an alive member ("ready" stands for ready and busy).
struct cluster_state {
  std::map<std::string, std::string> members; ///< name -> status
  std::map<std::string, std::string> devices; ///< NODE/ID -> state
  bool operator==(const cluster_state& o) const {
    return members == o.members && devices == o.devices;
  }
  bool operator!=(const cluster_state& o) const { return !(*this == o); }
};

cluster_state state_of(const member_view& v);

/// The changes from `before` to `after`, one sentence each ("member b:
/// alive -> dead", "device a/sim0: ready -> paused", "device a/sim1
/// appeared", "device a/sim1 gone"). Devices of a member that changed status
/// are covered by the member's sentence.
std::vector<std::string> describe_changes(const cluster_state& before,
                                          const cluster_state& after);

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
