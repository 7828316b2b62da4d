#include "core/thermal/rc_fitter.hpp"

#include <cmath>
#include <stdexcept>

namespace exo::thermal {

rc_fitter::rc_fitter(double interval_s, std::size_t window)
  : interval_s_(interval_s), window_(window) {
  if (!(interval_s > 0) || !std::isfinite(interval_s))
    throw std::invalid_argument("rc_fitter: interval_s must be positive");
  if (window < 3)
    throw std::invalid_argument("rc_fitter: window must hold >= 3 samples");
}

void rc_fitter::add(const thermal_sample& s) {
  if (!std::isfinite(s.time_s) || !std::isfinite(s.temp_c)
      || !std::isfinite(s.power_w))
    return; // a broken sensor reading must not poison the fit
  samples_.push_back(s);
  while (samples_.size() > window_)
    samples_.pop_front();
}

std::optional<rc_fit> rc_fitter::fit(std::string* why) const {
  auto fail = [&](const char* reason) -> std::optional<rc_fit> {
    if (why)
      *why = reason;
    return std::nullopt;
  };
  auto usable = [&](std::size_t k) {
    auto dt = samples_[k + 1].time_s - samples_[k].time_s;
    return std::abs(dt - interval_s_) <= 0.1 * interval_s_;
  };
  // Means first, then centred sums: better conditioned normal equations.
  double n = 0, mx = 0, mp = 0, my = 0;
  for (std::size_t k = 0; k + 1 < samples_.size(); ++k) {
    if (!usable(k))
      continue;
    n += 1;
    mx += samples_[k].temp_c;
    mp += samples_[k + 1].power_w;
    my += samples_[k + 1].temp_c;
  }
  if (n < 8)
    return fail("fewer than 8 evenly spaced sample pairs");
  mx /= n;
  mp /= n;
  my /= n;
  double sxx = 0, sxp = 0, spp = 0, sxy = 0, spy = 0;
  for (std::size_t k = 0; k + 1 < samples_.size(); ++k) {
    if (!usable(k))
      continue;
    auto x = samples_[k].temp_c - mx;
    auto p = samples_[k + 1].power_w - mp;
    auto y = samples_[k + 1].temp_c - my;
    sxx += x * x;
    sxp += x * p;
    spp += p * p;
    sxy += x * y;
    spy += p * y;
  }
  auto det = sxx * spp - sxp * sxp;
  if (!(spp > 1e-9 * n) || !(sxx > 1e-12 * n) || !(det > 1e-9 * sxx * spp))
    return fail("power or temperature did not vary enough to fit");
  auto a = (sxy * spp - spy * sxp) / det;
  auto b = (spy * sxx - sxy * sxp) / det;
  auto c = my - a * mx - b * mp;
  if (!(a > 0 && a < 1))
    return fail("fitted decay factor outside (0, 1)");
  rc_fit out;
  out.params.tau_s = -interval_s_ / std::log(a);
  out.params.resistance_c_per_w = b / (1 - a);
  out.params.ambient_c = c / (1 - a);
  if (!out.params.valid() || out.params.ambient_c < -60
      || out.params.ambient_c > 150)
    return fail("fitted parameters are not physical");
  double sq = 0;
  for (std::size_t k = 0; k + 1 < samples_.size(); ++k) {
    if (!usable(k))
      continue;
    auto pred = a * samples_[k].temp_c + b * samples_[k + 1].power_w + c;
    auto e = samples_[k + 1].temp_c - pred;
    sq += e * e;
  }
  out.rms_error_c = std::sqrt(sq / n);
  out.pairs = static_cast<std::size_t>(n);
  return out;
}

} // namespace exo::thermal
