#pragma once

/// Umbrella header of the thermal library (exo_thermal): the RC model, its
/// online fitter and the pause/resume policy.

#include "core/thermal/audit_event.hpp"
#include "core/thermal/rc_fitter.hpp"
#include "core/thermal/rc_model.hpp"
#include "core/thermal/thermal_policy.hpp"
