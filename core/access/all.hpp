#pragma once

/// Umbrella header of the access library (exo_access): roles and
/// permissions, signed bearer tokens and the access policy.

#include "core/access/audit_event.hpp"
#include "core/access/access_policy.hpp"
#include "core/access/base64url.hpp"
#include "core/access/permission.hpp"
#include "core/access/token.hpp"
