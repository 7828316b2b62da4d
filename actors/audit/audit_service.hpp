#pragma once

/// The node's "audit" service: console `audit query ...` / `audit verify`,
/// forwarded to the audit sink; it also audits member joins and leaves by
/// polling the gate's member view every second.

#include "actors/service/service.hpp"

namespace exo {

/// Spawns the service: name "audit", command "audit".
service spawn_audit_service(const service_context& ctx);

} // namespace exo
