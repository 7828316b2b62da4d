#pragma once

/// Typed handles to a node's actors, for programs that embed exo
/// (docs/embedding.md). exo's actors are dynamically typed inside; these
/// interfaces list what an application may ask of them, so that CAF checks
/// at compile time every request and every handler of its answer:
///
///   self->request(rt.jobs(), caf::infinite, exo::run_atom::value, req, me)
///     .receive([](exo::job_report& r) { ... }, [](caf::error& e) { ... });
///
/// runtime::node(), gate(), jobs() and placement() give them; the devices
/// are exo::device_actor (messages/device.hpp), listed by the node.

#include "messages/cluster.hpp"
#include "messages/device.hpp"
#include "messages/placement.hpp"
#include "messages/workload.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace exo {

/// A node: its devices (as information or as device actors), inspection.
using node_actor = caf::typed_actor<
  caf::replies_to<devices_atom>::with<std::vector<device_info>>,
  caf::replies_to<devices_atom, actors_atom>::with<std::vector<device_actor>>,
  caf::replies_to<inspect_atom>::with<actor_snapshot>>;

/// The node's gate: the cluster as this node sees it.
///   (subscribe_atom, members_atom, listener) -> member_view now; then
///       `listener` receives a member_event for every change (local
///       actors only);
///   (console_atom, command, argument) -> console_reply: the console's
///       commands ("nodes", "devices", "links", "run ...", ...; see
///       docs/console.md);
///   (devices_atom) -> this node's devices.
using gate_actor = caf::typed_actor<
  caf::replies_to<subscribe_atom, members_atom, caf::actor>::with<member_view>,
  caf::replies_to<console_atom, std::string, std::string>::with<console_reply>,
  caf::replies_to<devices_atom>::with<std::vector<device_info>>>;

/// The node's job coordinator (actors/workload/job_coordinator.hpp):
///   (run_atom, request, listener) -> job_report when the job ends; before
///       that `listener` receives job_placed, job_started and each
///       job_token as it is produced, and a job_recovered after each loss
///       the job survived (its stages re-placed, the stream goes on);
///   (cancel_atom, job id) -> bool: the job stops at its next token.
using jobs_actor = caf::typed_actor<
  caf::replies_to<run_atom, workload::job_request,
                  caf::actor>::with<job_report>,
  caf::replies_to<cancel_atom, std::uint64_t>::with<bool>>;

/// The node's placement service (actors/placement/placement_actor.hpp):
/// plans a model on the live cluster.
using placement_actor = caf::typed_actor<
  caf::replies_to<plan_atom, plan_request>::with<plan_job_info>,
  caf::replies_to<plans_atom>::with<std::vector<plan_job_info>>,
  caf::replies_to<unplan_atom, std::uint64_t>::with<bool>>;

} // namespace exo
