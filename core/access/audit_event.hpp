#pragma once

#include "core/access/access_policy.hpp"
#include "core/audit/event.hpp"

#include <string_view>

namespace exo::access {

/// The audit event recording decision `d` about `p` on `device` (empty: no
/// device): access_granted (debug), access_denied, quota_exceeded or
/// rate_limited (warning), with the code and reason in the details.
audit::event make_audit_event(const decision& d, permission p,
                              std::string_view device = {});

} // namespace exo::access
