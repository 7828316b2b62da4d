#include "core/gateway/prometheus.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace exo::gateway::prometheus {

namespace {

bool name_char(char c, bool first, bool colon) {
  bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
               || (colon && c == ':');
  return alpha || (!first && c >= '0' && c <= '9');
}

const char* type_name(metric_type t) {
  switch (t) {
    case metric_type::counter:
      return "counter";
    case metric_type::gauge:
      return "gauge";
    case metric_type::histogram:
      return "histogram";
    default:
      return "untyped";
  }
}

std::string escape_help(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

} // namespace

histogram::histogram(std::vector<double> upper_bounds)
  : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  for (std::size_t i = 0; i < bounds_.size(); ++i)
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1]))
      throw std::invalid_argument(
        "histogram bounds must be finite and strictly ascending");
}

void histogram::observe(double v) {
  auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  ++counts_[static_cast<std::size_t>(it - bounds_.begin())];
  sum_ += v;
  ++count_;
}

void histogram::add(const std::vector<std::uint64_t>& counts, double sum) {
  if (counts.size() != counts_.size())
    throw std::invalid_argument("histogram::add: " + std::to_string(counts.size())
                                + " counts for "
                                + std::to_string(counts_.size())
                                + " buckets");
  for (std::size_t i = 0; i < counts.size(); ++i) {
    counts_[i] += counts[i];
    count_ += counts[i];
  }
  sum_ += sum;
}

bool valid_metric_name(std::string_view name) {
  if (name.empty())
    return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0, true))
      return false;
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__")
    return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0, false))
      return false;
  return true;
}

std::string format_value(double v) {
  if (std::isnan(v))
    return "NaN";
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void text_writer::family(std::string_view name, std::string_view help,
                         metric_type type) {
  if (!valid_metric_name(name))
    throw std::invalid_argument("invalid metric name: " + std::string{name});
  name_ = std::string{name};
  type_ = type;
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += escape_help(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type_name(type);
  out_ += '\n';
}

void text_writer::line(std::string_view suffix, const label_set& labels,
                       const std::pair<std::string, std::string>* extra,
                       double value) {
  out_ += name_;
  out_ += suffix;
  if (!labels.empty() || extra) {
    out_ += '{';
    bool first = true;
    auto put = [&](const std::string& k, const std::string& v) {
      if (!valid_label_name(k))
        throw std::invalid_argument("invalid label name: " + k);
      if (!first)
        out_ += ',';
      first = false;
      out_ += k;
      out_ += "=\"";
      out_ += escape_label_value(v);
      out_ += '"';
    };
    for (auto& [k, v] : labels)
      put(k, v);
    if (extra)
      put(extra->first, extra->second);
    out_ += '}';
  }
  out_ += ' ';
  out_ += format_value(value);
  out_ += '\n';
}

void text_writer::sample(const label_set& labels, double value) {
  if (name_.empty() || type_ == metric_type::histogram)
    throw std::logic_error("sample(value) outside a counter/gauge family");
  line({}, labels, nullptr, value);
}

void text_writer::sample(const label_set& labels, const histogram& h) {
  if (name_.empty() || type_ != metric_type::histogram)
    throw std::logic_error("sample(histogram) outside a histogram family");
  std::uint64_t cumulative = 0;
  auto& counts = h.bucket_counts();
  for (std::size_t i = 0; i < h.upper_bounds().size(); ++i) {
    cumulative += counts[i];
    std::pair<std::string, std::string> le{"le",
                                           format_value(h.upper_bounds()[i])};
    line("_bucket", labels, &le, static_cast<double>(cumulative));
  }
  std::pair<std::string, std::string> inf{"le", "+Inf"};
  line("_bucket", labels, &inf, static_cast<double>(h.count()));
  line("_sum", labels, nullptr, h.sum());
  line("_count", labels, nullptr, static_cast<double>(h.count()));
}

void write_device_gauges(text_writer& w,
                         const std::vector<device_reading>& devices) {
  struct gauge {
    const char* name;
    const char* help;
    std::optional<double> device_reading::*field;
  };
  static const gauge gauges[] = {
    {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).",
     &device_reading::temperature_c},
    {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).",
     &device_reading::power_w},
    {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
     &device_reading::fb_used_mib},
    {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
     &device_reading::fb_free_mib},
    {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).",
     &device_reading::util_percent},
    {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).",
     &device_reading::sm_clock_mhz},
  };
  for (auto& g : gauges) {
    bool any = std::any_of(devices.begin(), devices.end(),
                           [&](auto& d) { return (d.*g.field).has_value(); });
    if (!any)
      continue;
    w.family(g.name, g.help, metric_type::gauge);
    for (auto& d : devices)
      if (auto v = d.*g.field)
        w.sample({{"gpu", d.gpu},
                  {"UUID", d.uuid},
                  {"modelName", d.model_name},
                  {"Hostname", d.hostname},
                  {"backend", d.backend}},
                 *v);
  }
}

} // namespace exo::gateway::prometheus
