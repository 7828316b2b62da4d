#pragma once

#include <optional>

namespace exo::thermal {

/// Parameters of a first-order RC thermal model of one device:
///
///   dT/dt = (P * R - (T - T_amb)) / tau,   tau = R * C
///
/// with T the die temperature (C), P the power drawn (W), R the thermal
/// resistance to ambient (C/W), C the heat capacity (J/C) and T_amb the
/// ambient temperature (C).
struct rc_params {
  double resistance_c_per_w = 0.2;
  double tau_s = 30.0;
  double ambient_c = 25.0;

  /// Heat capacity C = tau / R in J/C.
  double capacitance_j_per_c() const noexcept {
    return tau_s / resistance_c_per_w;
  }

  /// Whether R and tau are positive and finite and ambient is finite.
  bool valid() const noexcept;
};

/// Temperature the device settles at when drawing `power_w` for ever.
double steady_state(const rc_params& p, double power_w) noexcept;

/// dT/dt at temperature `temp_c` and power `power_w`.
double derivative(const rc_params& p, double temp_c, double power_w) noexcept;

/// Exact temperature after `dt_s` seconds at constant `power_w`, starting
/// at `temp_c` (the closed-form solution of the ODE):
///
///   T(dt) = T_ss + (T0 - T_ss) * exp(-dt / tau),   T_ss = T_amb + P * R
double step(const rc_params& p, double temp_c, double power_w,
            double dt_s) noexcept;

/// Highest temperature over [0, horizon_s] at constant `power_w` (the
/// trajectory is monotone, so it is one of the two ends).
double predict_max(const rc_params& p, double temp_c, double power_w,
                   double horizon_s) noexcept;

/// Seconds until the temperature reaches `target_c` at constant `power_w`;
/// 0 when already there, nothing when it never gets there.
std::optional<double> time_to_reach(const rc_params& p, double temp_c,
                                    double power_w, double target_c) noexcept;

} // namespace exo::thermal
