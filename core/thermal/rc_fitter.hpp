#pragma once

#include "core/thermal/rc_model.hpp"

#include <cstddef>
#include <deque>
#include <optional>
#include <string>

namespace exo::thermal {

/// One telemetry sample.
struct thermal_sample {
  double time_s = 0;
  double temp_c = 0;
  /// Power drawn since the previous sample (held constant until the next).
  double power_w = 0;
};

/// Result of a fit: the parameters and how well they explain the samples.
struct rc_fit {
  rc_params params;
  /// Root-mean-square one-step prediction error in C.
  double rms_error_c = 0;
  /// Sample pairs used.
  std::size_t pairs = 0;
};

/// Fits an RC model online by least squares over a sliding window of samples.
///
/// Samples taken every `interval_s` obey the exact discrete form of the model
///
///   T[k+1] = a T[k] + b P[k+1] + c,
///   a = exp(-dt/tau),  b = R (1 - a),  c = T_amb (1 - a)
///
/// (P[k+1] is the power reported with sample k+1, drawn since sample k),
/// so an ordinary linear regression of T[k+1] on (T[k], P[k]) recovers
/// tau = -dt / ln a, R = b / (1 - a) and T_amb = c / (1 - a). Pairs whose
/// spacing is more than 10% off the interval are skipped. The power must
/// have varied within the window, otherwise R and T_amb cannot be told
/// apart and `fit` gives nothing.
class rc_fitter {
public:
  /// Throws `std::invalid_argument` unless interval_s > 0 and window >= 3.
  explicit rc_fitter(double interval_s, std::size_t window = 600);

  /// Adds a sample; the oldest falls out when the window is full.
  void add(const thermal_sample& s);

  /// Fits the window; nothing when the data do not determine the model
  /// (too few pairs, constant power, or a non-physical result). `why`, when
  /// given, receives the reason.
  std::optional<rc_fit> fit(std::string* why = nullptr) const;

  std::size_t size() const noexcept { return samples_.size(); }

  void clear() noexcept { samples_.clear(); }

private:
  double interval_s_;
  std::size_t window_;
  std::deque<thermal_sample> samples_;
};

} // namespace exo::thermal
