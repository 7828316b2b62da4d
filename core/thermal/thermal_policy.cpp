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
  predicted_ = predict_max(model_, s.temp_c, planned_power_w, cfg_.horizon_s);
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
                    : fmt("predicted %.1f C within %.0f s at %.0f W reaches "
                          "the pause point %.1f C",
                          predicted_, cfg_.horizon_s, planned_power_w,
                          cfg_.pause_at());
      tr.reason += std::string{" ("} + source + " model)";
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
  return time_to_reach(model_, temp_, planned_, cfg_.limit_c);
}

} // namespace exo::thermal
