#pragma once

#include "core/placement/cost_model.hpp"

namespace exo::placement {

/// exo's memory-proportional split, kept for comparison only: every
/// eligible device, largest free memory first, gets a share of the layers
/// proportional to its free memory (largest remainder rounding; devices
/// whose share rounds to zero are left out). It ignores device speed,
/// links, pins, stage limits and whether the layers fit.
assignment baseline_assignment(const cost_model& m);

} // namespace exo::placement
