#pragma once

/// Prometheus text exposition format 0.0.4: metric families with their
/// `# HELP` and `# TYPE` lines, samples with escaped label values,
/// histograms as `_bucket{le=...}`, `_sum` and `_count`; and the device
/// gauges under dcgm-exporter's names, so dashboards made for NVIDIA's
/// exporter read exo's devices of every backend.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace exo::gateway::prometheus {

/// The four types of the text format that exo writes (and untyped).
enum class metric_type { counter, gauge, histogram, untyped };

/// Label name/value pairs of one sample, written in this order.
using label_set = std::vector<std::pair<std::string, std::string>>;

/// Observations counted into fixed buckets (upper bounds, ascending).
/// Not thread-safe: the owner serializes observe() and the reads.
class histogram {
public:
  /// `upper_bounds` ascending and finite; +Inf is implicit.
  explicit histogram(std::vector<double> upper_bounds);

  void observe(double v);

  /// Adds what was observed elsewhere with the same bounds: per-bucket
  /// counts as bucket_counts() gives them, and their sum
  /// (std::invalid_argument when the counts do not match the buckets).
  void add(const std::vector<std::uint64_t>& counts, double sum);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  /// Per-bucket counts (not cumulative), one more than upper_bounds():
  /// the last one counts the observations above every bound.
  const std::vector<std::uint64_t>& bucket_counts() const { return counts_; }
  double sum() const { return sum_; }
  std::uint64_t count() const { return count_; }

private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

/// Writes one exposition. Each family is begun once, then its samples
/// follow; names and label names are checked (std::invalid_argument: a
/// programming error, never input from the network).
class text_writer {
public:
  /// Starts a family: `# HELP name help` and `# TYPE name type`. A counter's
  /// name should end in `_total`.
  void family(std::string_view name, std::string_view help, metric_type type);

  /// One sample of the current counter, gauge or untyped family.
  void sample(const label_set& labels, double value);

  /// The current histogram family's buckets, sum and count for `labels`.
  void sample(const label_set& labels, const histogram& h);

  /// The exposition so far.
  const std::string& str() const { return out_; }

  /// The content type to serve it with.
  static constexpr const char* content_type
    = "text/plain; version=0.0.4; charset=utf-8";

private:
  void line(std::string_view suffix, const label_set& labels,
            const std::pair<std::string, std::string>* extra, double value);
  std::string out_;
  std::string name_;
  metric_type type_ = metric_type::untyped;
};

/// A value as the text format writes it: shortest round-trip decimal,
/// `+Inf`, `-Inf`, `NaN`.
std::string format_value(double v);

/// A label value with `\`, `"` and newline escaped.
std::string escape_label_value(std::string_view v);

/// Whether `name` is a valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
bool valid_metric_name(std::string_view name);

/// Whether `name` is a valid label name (`[a-zA-Z_][a-zA-Z0-9_]*`, not
/// starting with `__`).
bool valid_label_name(std::string_view name);

/// The readings of one device, in dcgm-exporter's units. Absent readings
/// are left out of the output (a device without a power sensor has no
/// DCGM_FI_DEV_POWER_USAGE sample), never written as 0.
struct device_reading {
  /// The device index on its node (label `gpu`).
  std::string gpu;
  /// A stable id (label `UUID`).
  std::string uuid;
  /// The device's product name (label `modelName`).
  std::string model_name;
  /// The node's host name (label `Hostname`).
  std::string hostname;
  /// cpu, vulkan, cuda, hip or sim (label `backend`).
  std::string backend;
  std::optional<double> temperature_c; ///< DCGM_FI_DEV_GPU_TEMP
  std::optional<double> power_w;       ///< DCGM_FI_DEV_POWER_USAGE
  std::optional<double> fb_used_mib;   ///< DCGM_FI_DEV_FB_USED
  std::optional<double> fb_free_mib;   ///< DCGM_FI_DEV_FB_FREE
  std::optional<double> util_percent;  ///< DCGM_FI_DEV_GPU_UTIL
  std::optional<double> sm_clock_mhz;  ///< DCGM_FI_DEV_SM_CLOCK
};

/// Writes the DCGM_FI_DEV_* gauge families for `devices` (a family with no
/// reading on any device is left out).
void write_device_gauges(text_writer& w,
                         const std::vector<device_reading>& devices);

} // namespace exo::gateway::prometheus
