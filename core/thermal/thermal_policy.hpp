#pragma once

#include "core/thermal/rc_fitter.hpp"
#include "core/thermal/rc_model.hpp"

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace exo::thermal {

/// Settings of a thermal policy. `validate` names the first bad field.
struct thermal_config {
  /// The device's temperature limit in C.
  double limit_c = 90;
  /// Pause when the prediction reaches limit - margin.
  double margin_c = 5;
  /// Resume only below limit - hysteresis (must exceed the margin).
  double hysteresis_c = 10;
  /// Warm (ask for reduced precision / lighter load) when the prediction
  /// reaches limit - margin - warm_band.
  double warm_band_c = 10;
  /// Leave warm only when the prediction is this far below the warm point.
  double warm_exit_c = 2;
  /// Sampling interval in seconds.
  double interval_s = 0.5;
  /// How far ahead the prediction looks; at least one interval.
  double horizon_s = 10;
  /// A less severe state is entered only after its condition held this long
  /// (damps oscillation); more severe states are entered at once.
  double min_dwell_s = 5;
  /// Samples in the fitter's sliding window.
  std::size_t fit_window = 600;
  /// The trend: the slope of the temperatures read over the last this
  /// many seconds (least squares, at least three readings). When it is
  /// steeper than the model's slope at the planned power by more than
  /// trend_tolerance_c_per_s, the device heats faster than the model
  /// knows (a fan that fails: the fit needs minutes of the new data to
  /// follow), and the prediction is the rise that starts at the measured
  /// slope, on the model's time constant. 0: off.
  double trend_window_s = 5;
  /// How much steeper than the model's the measured slope must be (noise,
  /// a sensor's whole degrees, stay below it), C/s.
  double trend_tolerance_c_per_s = 0.2;
  /// Model used until the fitter has enough data (e.g. the device profile).
  rc_params prior;

  /// Throws `std::invalid_argument` naming the first invalid setting.
  void validate() const;

  double pause_at() const noexcept { return limit_c - margin_c; }
  double resume_below() const noexcept { return limit_c - hysteresis_c; }
  double warm_at() const noexcept { return pause_at() - warm_band_c; }
};

/// What the device should do.
///
///   normal --(prediction >= warm point)--> warm --(>= pause point)--> paused
///   normal --(prediction >= pause point)--------------------------> paused
///   paused --(T < limit - hysteresis, for min_dwell)--> warm or normal
///   warm   --(prediction < warm point - warm_exit, for min_dwell)--> normal
enum class thermal_state : unsigned char {
  normal, ///< run as planned
  warm,   ///< run, but reduce precision or load if possible
  paused, ///< accept no new compute; work in flight completes
};

std::string_view to_string(thermal_state s) noexcept;

/// A change of state, to be told to the jobs and the audit sink.
struct thermal_transition {
  thermal_state from = thermal_state::normal;
  thermal_state to = thermal_state::normal;
  double time_s = 0;
  double temp_c = 0;
  /// Highest predicted temperature over the horizon at the planned power.
  double predicted_c = 0;
  /// Human-readable cause, with the numbers that led to it.
  std::string reason;

  /// The device asks jobs for reduced precision or a lighter load.
  bool reduce_precision() const noexcept { return to == thermal_state::warm; }
};

/// Thermal policy of one device: fits the RC model online from telemetry,
/// predicts the temperature for the planned power and decides normal / warm /
/// paused with hysteresis. Plain synchronous logic; the thermal actor calls
/// `observe` at every sample and forwards transitions.
class thermal_policy {
public:
  /// Throws `std::invalid_argument` when `cfg` is invalid.
  explicit thermal_policy(thermal_config cfg);

  /// Feeds one sample: the measured temperature, the power drawn since the
  /// previous sample and the power the device is about to draw. Returns the
  /// transition it caused, if any.
  std::optional<thermal_transition> observe(const thermal_sample& s,
                                            double planned_power_w);

  thermal_state state() const noexcept { return state_; }

  /// The model in use: the latest good fit, or the prior.
  const rc_params& model() const noexcept { return model_; }

  /// Whether `model()` comes from the fitter (rather than the prior).
  bool fitted() const noexcept { return fitted_; }

  /// The prediction of the latest sample.
  double predicted_c() const noexcept { return predicted_; }

  /// The trend's slope in C/s (0 when unknown or falling).
  double trend_c_per_s() const noexcept { return slope_; }

  /// Seconds until the limit at the planned power, from the latest sample;
  /// nothing when it is never reached.
  std::optional<double> time_to_limit() const noexcept;

  const thermal_config& config() const noexcept { return cfg_; }

private:
  thermal_state target(double temp, double predicted) const noexcept;

  thermal_config cfg_;
  rc_fitter fitter_;
  rc_params model_;
  bool fitted_ = false;
  thermal_state state_ = thermal_state::normal;
  std::optional<double> calm_since_;
  double entered_at_ = 0;
  double temp_ = 0;
  double planned_ = 0;
  double predicted_ = 0;
  double slope_ = 0;          ///< the trend, C/s (>= 0)
  bool by_trend_ = false;     ///< the trend, not the model, predicted
  std::deque<std::pair<double, double>> recent_; ///< (time, temperature)
};

} // namespace exo::thermal
