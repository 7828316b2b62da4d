#include "core/thermal/thermal_policy.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace exo::thermal {

namespace {

void require(bool ok, const char* what) {
  if (!ok)
    throw std::invalid_argument(std::string{"thermal config: "} + what);
}

std::string fmt(const char* format, double a, double b = 0, double c = 0,
                double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, a, b, c, d);
  return buf;
}

/// The least-squares slope of (time, temperature) pairs, C/s (0 when the
/// times do not spread).
double slope_of(const std::deque<std::pair<double, double>>& xs) {
  double n = static_cast<double>(xs.size());
  double mt = 0, mx = 0;
  for (auto& [t, x] : xs) {
    mt += t;
    mx += x;
  }
  mt /= n;
  mx /= n;
  double num = 0, den = 0;
  for (auto& [t, x] : xs) {
    num += (t - mt) * (x - mx);
    den += (t - mt) * (t - mt);
  }
  return den > 0 ? num / den : 0;
}

int severity(thermal_state s) noexcept {
  return static_cast<int>(s);
}

} // namespace

void thermal_config::validate() const {
  require(std::isfinite(limit_c), "limit_c must be finite");
  require(std::isfinite(margin_c) && margin_c > 0, "margin_c must be > 0");
  require(std::isfinite(hysteresis_c) && hysteresis_c > margin_c,
          "hysteresis_c must exceed margin_c (resume below the pause point)");
  require(std::isfinite(warm_band_c) && warm_band_c >= 0,
          "warm_band_c must be >= 0");
  require(std::isfinite(warm_exit_c) && warm_exit_c >= 0,
          "warm_exit_c must be >= 0");
  require(std::isfinite(interval_s) && interval_s > 0,
          "interval_s must be > 0");
  require(std::isfinite(horizon_s) && horizon_s >= interval_s,
          "horizon_s must be at least interval_s");
  require(std::isfinite(min_dwell_s) && min_dwell_s >= 0,
          "min_dwell_s must be >= 0");
  require(fit_window >= 3, "fit_window must be >= 3");
  require(std::isfinite(trend_window_s) && trend_window_s >= 0,
          "trend_window_s must be >= 0");
  require(std::isfinite(trend_tolerance_c_per_s)
            && trend_tolerance_c_per_s >= 0,
          "trend_tolerance_c_per_s must be >= 0");
  require(prior.valid(), "prior model needs R > 0, tau > 0, finite ambient");
}

std::string_view to_string(thermal_state s) noexcept {
  switch (s) {
    case thermal_state::normal: return "normal";
    case thermal_state::warm: return "warm";
    case thermal_state::paused: return "paused";
  }
  return "unknown";
}

thermal_policy::thermal_policy(thermal_config cfg)
  : cfg_((cfg.validate(), cfg)),
    fitter_(cfg_.interval_s, cfg_.fit_window),
    model_(cfg_.prior) {
  // Validated above, before the fitter is built.
}

thermal_state thermal_policy::target(double temp,
                                     double predicted) const noexcept {
  if (temp >= cfg_.pause_at() || predicted >= cfg_.pause_at())
    return thermal_state::paused;
  if (state_ == thermal_state::paused && temp >= cfg_.resume_below())
    return thermal_state::paused;
  auto warm_line = cfg_.warm_at();
  if (state_ != thermal_state::normal)
    warm_line -= cfg_.warm_exit_c; // hysteresis on the way down
  return predicted >= warm_line ? thermal_state::warm : thermal_state::normal;
}

std::optional<thermal_transition>
thermal_policy::observe(const thermal_sample& s, double planned_power_w) {
  if (!std::isfinite(s.temp_c) || !std::isfinite(s.time_s))
    return std::nullopt; // a broken reading changes nothing
  if (!std::isfinite(planned_power_w) || planned_power_w < 0)
    planned_power_w = 0;
  fitter_.add(s);
  if (auto fit = fitter_.fit()) {
    model_ = fit->params;
    fitted_ = true;
  }
  temp_ = s.temp_c;
  planned_ = planned_power_w;
  const double by_model
    = predict_max(model_, s.temp_c, planned_power_w, cfg_.horizon_s);
  predicted_ = by_model;
  // The trend: the slope of the last trend_window_s (least squares). When
  // the device heats faster than the model says it should at this power
  // (a cooler that failed: the fit still has the old one), the measured
  // slope predicts, on the model's time constant.
  slope_ = 0;
  by_trend_ = false;
  if (cfg_.trend_window_s > 0) {
    while (!recent_.empty() && recent_.back().first >= s.time_s)
      recent_.pop_back(); // a clock that went back: start again from here
    recent_.emplace_back(s.time_s, s.temp_c);
    while (recent_.front().first < s.time_s - cfg_.trend_window_s)
      recent_.pop_front();
    if (recent_.size() >= 3) {
      double measured = slope_of(recent_);
      double tau = model_.tau_s;
      double expected = (steady_state(model_, planned_power_w) - s.temp_c) / tau;
      if (measured > std::max(expected, 0.0) + cfg_.trend_tolerance_c_per_s) {
        slope_ = measured;
        // A first-order rise that starts at this slope: never more than
        // the straight line.
        double by_slope = s.temp_c
                          + measured * tau
                              * (1 - std::exp(-cfg_.horizon_s / tau));
        if (by_slope > predicted_) {
          predicted_ = by_slope;
          by_trend_ = true;
        }
      }
    }
  }
  auto next = target(s.temp_c, predicted_);
  if (next == state_) {
    calm_since_.reset();
    return std::nullopt;
  }
  if (severity(next) < severity(state_)) {
    // Step down only after the calmer condition held for min_dwell_s.
    if (!calm_since_)
      calm_since_ = s.time_s;
    if (s.time_s - *calm_since_ < cfg_.min_dwell_s
        || s.time_s - entered_at_ < cfg_.min_dwell_s)
      return std::nullopt;
  }
  thermal_transition tr;
  tr.from = state_;
  tr.to = next;
  tr.time_s = s.time_s;
  tr.temp_c = s.temp_c;
  tr.predicted_c = predicted_;
  const char* source = fitted_ ? "fitted" : "prior";
  switch (next) {
    case thermal_state::paused:
      tr.reason = s.temp_c >= cfg_.pause_at()
                    ? fmt("temperature %.1f C reached the pause point %.1f C "
                          "(limit %.1f C - margin %.1f C)",
                          s.temp_c, cfg_.pause_at(), cfg_.limit_c,
                          cfg_.margin_c)
                    : by_trend_
                      ? fmt("rising %.2f C/s: predicted %.1f C within %.0f s "
                            "reaches the pause point %.1f C",
                            slope_, predicted_, cfg_.horizon_s,
                            cfg_.pause_at())
                      : fmt("predicted %.1f C within %.0f s at %.0f W reaches "
                            "the pause point %.1f C",
                            predicted_, cfg_.horizon_s, planned_power_w,
                            cfg_.pause_at());
      tr.reason += by_trend_ && s.temp_c < cfg_.pause_at()
                     ? std::string{" (trend; the "} + source
                         + " model said " + fmt("%.1f C)", by_model)
                     : std::string{" ("} + source + " model)";
      break;
    case thermal_state::warm:
      tr.reason = state_ == thermal_state::paused
                    ? fmt("resumed: %.1f C is below %.1f C (limit - "
                          "hysteresis); predicted %.1f C is in the warm band, "
                          "reduce precision or load",
                          s.temp_c, cfg_.resume_below(), predicted_)
                    : fmt("predicted %.1f C within %.0f s reaches the warm "
                          "point %.1f C: reduce precision or load",
                          predicted_, cfg_.horizon_s, cfg_.warm_at());
      break;
    case thermal_state::normal:
      tr.reason = state_ == thermal_state::paused
                    ? fmt("resumed: %.1f C is below %.1f C (limit - "
                          "hysteresis) and predicted %.1f C is below the warm "
                          "point",
                          s.temp_c, cfg_.resume_below(), predicted_)
                    : fmt("cooled: predicted %.1f C is below %.1f C",
                          predicted_, cfg_.warm_at() - cfg_.warm_exit_c);
      break;
  }
  state_ = next;
  entered_at_ = s.time_s;
  calm_since_.reset();
  return tr;
}

std::optional<double> thermal_policy::time_to_limit() const noexcept {
  auto by_model = time_to_reach(model_, temp_, planned_, cfg_.limit_c);
  if (!by_trend_ || slope_ <= 0 || temp_ >= cfg_.limit_c)
    return by_model;
  // The measured slope on the model's time constant (as predicted).
  rc_params p = model_;
  p.ambient_c = temp_ + slope_ * p.tau_s - planned_ * p.resistance_c_per_w;
  auto by_trend = time_to_reach(p, temp_, planned_, cfg_.limit_c);
  if (!by_model || !by_trend)
    return by_model ? by_model : by_trend;
  return std::min(*by_model, *by_trend);
}

} // namespace exo::thermal
