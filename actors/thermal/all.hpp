#pragma once

/// Umbrella header of the thermal library (exo_thermal): the RC model, its
/// online fitter and the pause/resume policy.

#include "actors/thermal/audit_event.hpp"
#include "actors/thermal/rc_fitter.hpp"
#include "actors/thermal/rc_model.hpp"
#include "actors/thermal/thermal_policy.hpp"
