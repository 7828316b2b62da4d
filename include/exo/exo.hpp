#pragma once

/// exo for CAF applications (docs/embedding.md): link exo::runtime (or
/// exo::runtime_static, or pkg-config's exo). Everything of exo/core.hpp,
/// and
///
///   exo::prepare_system(cfg, node)  readies an application's
///                                   caf::actor_system_config in one call
///   exo::runtime                    one exo node in the application's actor
///                                   system: joins the cluster of its seeds
///   exo::node_actor, gate_actor, jobs_actor, placement_actor,
///   exo::device_actor               typed handles (runtime/node/handles.hpp)
///   exo::job_request, job_token, job_report, member_event, ...
///                                   the messages they exchange (messages/)
///   exo::error_message(err)         the text of an exo error

#include "exo/core.hpp"

#include "messages/errors.hpp"
#include "messages/registration.hpp"
#include "runtime/node/handles.hpp"
#include "runtime/node/runtime.hpp"
