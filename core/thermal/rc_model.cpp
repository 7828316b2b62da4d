#include "core/thermal/rc_model.hpp"

#include <algorithm>
#include <cmath>

namespace exo::thermal {

bool rc_params::valid() const noexcept {
  return std::isfinite(resistance_c_per_w) && resistance_c_per_w > 0
         && std::isfinite(tau_s) && tau_s > 0 && std::isfinite(ambient_c);
}

double steady_state(const rc_params& p, double power_w) noexcept {
  return p.ambient_c + power_w * p.resistance_c_per_w;
}

double derivative(const rc_params& p, double temp_c, double power_w) noexcept {
  return (power_w * p.resistance_c_per_w - (temp_c - p.ambient_c)) / p.tau_s;
}

double step(const rc_params& p, double temp_c, double power_w,
            double dt_s) noexcept {
  auto ss = steady_state(p, power_w);
  return ss + (temp_c - ss) * std::exp(-dt_s / p.tau_s);
}

double predict_max(const rc_params& p, double temp_c, double power_w,
                   double horizon_s) noexcept {
  return std::max(temp_c, step(p, temp_c, power_w, horizon_s));
}

std::optional<double> time_to_reach(const rc_params& p, double temp_c,
                                    double power_w, double target_c) noexcept {
  if (temp_c >= target_c)
    return 0.0;
  auto ss = steady_state(p, power_w);
  if (ss <= target_c)
    return std::nullopt;
  // target = ss + (T0 - ss) e^{-t/tau}  =>  t = tau ln((ss - T0)/(ss - target))
  return p.tau_s * std::log((ss - temp_c) / (ss - target_c));
}

} // namespace exo::thermal
