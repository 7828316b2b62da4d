#pragma once

/// Umbrella header of the access library (exo_access): roles and
/// permissions, signed bearer tokens and the access policy.

#include "actors/access/audit_event.hpp"
#include "actors/access/access_policy.hpp"
#include "actors/access/base64url.hpp"
#include "actors/access/permission.hpp"
#include "actors/access/token.hpp"
