#pragma once

#include "core/audit/event.hpp"
#include "core/thermal/thermal_policy.hpp"

#include <string_view>

namespace exo::thermal {

/// The audit event recording transition `tr` of `device`: thermal_pause
/// (warning), thermal_resume (info, leaving paused) or thermal_warn (info,
/// entering or leaving the warm band), with temperatures and the reason.
audit::event make_audit_event(const thermal_transition& tr,
                              std::string_view device);

} // namespace exo::thermal
