#include "backends/sim/sim_backend.hpp"

#include <cstdio>
#include <cstring>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

namespace exo::backend {

extern const char* const sim_profiles_json; // generated from config/

// -- profiles ----------------------------------------------------------------

result<std::vector<sim_profile>> parse_sim_profiles(const std::string& json) {
  using namespace simdjson;
  dom::parser parser;
  dom::element doc;
  if (auto err = parser.parse(json).get(doc))
    return fail(errc::invalid_argument,
                std::string{"sim profiles: not valid JSON: "}
                  + error_message(err));
  dom::array arr;
  if (doc["profiles"].get_array().get(arr))
    return fail(errc::invalid_argument,
                "sim profiles: \"profiles\" must be an array");
  std::vector<sim_profile> out;
  std::size_t index = 0;
  for (dom::element item : arr) {
    auto path = "profiles[" + std::to_string(index++) + "]";
    dom::object obj;
    if (item.get_object().get(obj))
      return fail(errc::invalid_argument, path + ": must be an object");
    sim_profile p;
    std::map<std::string, double*> numbers{
      {"tflops", &p.flops},
      {"bandwidth_gbs", &p.bandwidth},
      {"idle_power_w", &p.idle_power_w},
      {"peak_power_w", &p.peak_power_w},
      {"thermal_resistance_c_per_w", &p.thermal_resistance},
      {"thermal_capacitance_j_per_c", &p.thermal_capacitance},
      {"ambient_c", &p.ambient_c},
      {"throttle_c", &p.throttle_c}};
    std::map<std::string, std::string*> strings{
      {"name", &p.name},
      {"display_name", &p.display_name},
      {"vendor", &p.vendor},
      {"architecture", &p.architecture}};
    double memory_gib = 0, compute_units = 0;
    numbers["memory_gib"] = &memory_gib;
    numbers["compute_units"] = &compute_units;
    for (auto field : obj) {
      std::string key{field.key};
      auto kpath = path + "." + key;
      if (auto it = numbers.find(key); it != numbers.end()) {
        double v = 0;
        if (field.value.get_double().get(v)) {
          int64_t iv = 0;
          if (field.value.get_int64().get(iv))
            return fail(errc::invalid_argument, kpath + ": must be a number");
          v = static_cast<double>(iv);
        }
        *it->second = v;
      } else if (auto is = strings.find(key); is != strings.end()) {
        std::string_view sv;
        if (field.value.get_string().get(sv))
          return fail(errc::invalid_argument, kpath + ": must be a string");
        *is->second = std::string{sv};
      } else {
        return fail(errc::invalid_argument, kpath + ": unknown key");
      }
    }
    if (p.name.empty())
      return fail(errc::invalid_argument, path + ".name: required");
    auto positive = [&](const char* key, double v) -> status {
      if (!(v > 0) || !std::isfinite(v))
        return fail(errc::invalid_argument,
                    path + "." + key + ": must be a positive number");
      return {};
    };
    EXO_TRY(positive("memory_gib", memory_gib));
    EXO_TRY(positive("tflops", p.flops));
    EXO_TRY(positive("bandwidth_gbs", p.bandwidth));
    EXO_TRY(positive("peak_power_w", p.peak_power_w));
    EXO_TRY(positive("thermal_resistance_c_per_w", p.thermal_resistance));
    EXO_TRY(positive("thermal_capacitance_j_per_c", p.thermal_capacitance));
    if (p.idle_power_w < 0 || p.idle_power_w > p.peak_power_w)
      return fail(errc::invalid_argument,
                  path + ".idle_power_w: must be in [0, peak_power_w]");
    if (p.throttle_c <= p.ambient_c)
      return fail(errc::invalid_argument,
                  path + ".throttle_c: must be above ambient_c");
    if (memory_gib > 1 << 20)
      return fail(errc::invalid_argument, path + ".memory_gib: too large");
    p.memory_bytes = static_cast<std::uint64_t>(memory_gib * 1073741824.0);
    p.compute_units = static_cast<std::uint32_t>(compute_units);
    p.flops *= 1e12;
    p.bandwidth *= 1e9;
    if (p.display_name.empty())
      p.display_name = "Simulated " + p.name;
    if (p.vendor.empty())
      p.vendor = "simulated";
    for (auto& prev : out)
      if (prev.name == p.name)
        return fail(errc::invalid_argument,
                    path + ".name: duplicate profile \"" + p.name + "\"");
    out.push_back(std::move(p));
  }
  return out;
}

const std::vector<sim_profile>& builtin_sim_profiles() {
  static const std::vector<sim_profile> profiles = [] {
    auto r = parse_sim_profiles(sim_profiles_json);
    return r ? *r : std::vector<sim_profile>{};
  }();
  return profiles;
}

// -- device ------------------------------------------------------------------

sim_device::sim_device(sim_profile profile, std::string id, double time_scale)
  : profile_(std::move(profile)),
    time_scale_(time_scale),
    temp_c_(profile_.ambient_c + profile_.idle_power_w
                                   * profile_.thermal_resistance),
    last_power_w_(profile_.idle_power_w),
    wall_start_(std::chrono::steady_clock::now()) {
  props_.id = std::move(id);
  props_.kind = backend_kind::sim;
  props_.name = profile_.display_name;
  props_.vendor = profile_.vendor;
  props_.architecture = profile_.architecture;
  props_.driver_version = "exo-sim 1";
  props_.total_memory = profile_.memory_bytes;
  props_.max_allocation = profile_.memory_bytes;
  props_.compute_units = profile_.compute_units;
  props_.peak_flops = profile_.flops;
  props_.memory_bandwidth = profile_.bandwidth;
  props_.support = support_level::experimental;
  props_.simulated = true;
  props_.capabilities = cap_host_visible | cap_elementwise | cap_matmul
                        | cap_model_ops | cap_temperature | cap_power | cap_utilization
                        | cap_fault_injection;
}

void sim_device::integrate(double power_w, double seconds) {
  if (seconds <= 0)
    return;
  // Exact step of C dT/dt = P - (T - T_amb) / R for constant P; a cooler
  // that works worse (cooling:F) multiplies R.
  double r = profile_.thermal_resistance * cooling_;
  double tau = r * profile_.thermal_capacitance;
  double target = profile_.ambient_c + power_w * r;
  temp_c_ = target + (temp_c_ - target) * std::exp(-seconds / tau);
  now_ += seconds;
  last_power_w_ = power_w;
  energy_since_read_ += power_w * seconds;
}

void sim_device::catch_up_with_wall() {
  if (time_scale_ <= 0)
    return;
  auto wall = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - wall_start_)
                .count()
              / time_scale_;
  if (wall > now_)
    integrate(profile_.idle_power_w, wall - now_);
}

namespace {

/// Whether the operation takes device memory: an allocation, or a
/// buffer's growth (host_device::resize admits it as "resize").
bool allocates(const char* what) {
  return std::strcmp(what, "allocate") == 0 || std::strcmp(what, "resize") == 0;
}

/// Whether operation `what` (host_device's names) is one of `kind`.
bool is_op(sim_device::op_kind kind, const char* what) {
  using k = sim_device::op_kind;
  if (kind == k::none)
    return false;
  if (kind == k::every)
    return true;
  static const char* const data_ops[] = {
    "allocate", "adopt_host", "resize", "shrink",    "write", "read",
    "copy",     "synchronize", "record", "completed", "wait"};
  if (kind == k::allocations)
    return allocates(what);
  for (auto* op : data_ops) // kernels: every other operation
    if (std::strcmp(what, op) == 0)
      return false;
  return true;
}

} // namespace

status sim_device::admit(const char* what) {
  // vanish_after: this operation may be the one that finds it gone.
  for (auto left = ops_left_.load(); left > 0;)
    if (ops_left_.compare_exchange_weak(left, left - 1)) {
      if (left == 1)
        gone_ = true;
      break;
    }
  // heat_after: this operation may be the one that heats it (the caller
  // holds the device's lock).
  for (auto left = heat_ops_left_.load(); left > 0;)
    if (heat_ops_left_.compare_exchange_weak(left, left - 1)) {
      if (left == 1)
        temp_c_ += heat_c_;
      break;
    }
  // hang_after: this operation may be the first that blocks.
  for (auto left = hang_ops_left_.load(); left > 0;)
    if (hang_ops_left_.compare_exchange_weak(left, left - 1)) {
      if (left == 1)
        hung_ = op_kind::every;
      break;
    }
  if (is_op(vanish_at_.load(), what))
    gone_ = true;
  while (!gone_ && is_op(hung_.load(), what))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (gone_)
    return fail(errc::device_lost,
                std::string{what} + ": simulated device " + props_.id
                  + " has vanished");
  catch_up_with_wall();
  op_began_ = std::chrono::steady_clock::now();
  if (allocates(what) && !fail_next_alloc_.empty()) {
    auto reason = std::move(fail_next_alloc_);
    fail_next_alloc_.clear();
    return fail(errc::out_of_memory,
                std::string{what} + ": injected fault: " + reason);
  }
  if (allocates(what) && fail_allocs_)
    return fail(errc::out_of_memory,
                std::string{what} + ": injected fault: every allocation fails");
  return {};
}

void sim_device::account(double bytes, double flops) {
  double seconds = std::max(flops / profile_.flops, bytes / profile_.bandwidth);
  // On a clock that follows the wall, the device was busy while the host
  // computed its results too (since admit): it can be no faster than the
  // host that stands in for it. Without that a decode on a simulated GPU
  // showed it idle most of the time, and exo's own work never heated it.
  double busy = seconds;
  if (time_scale_ > 0)
    busy += std::chrono::duration<double>(std::chrono::steady_clock::now()
                                          - op_began_)
              .count()
            / time_scale_;
  integrate(profile_.peak_power_w, busy);
  busy_since_read_ += busy;
  if (time_scale_ <= 0)
    return;
  if (const double s = pacer_.owe(seconds * time_scale_); s > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
    pacer_.slept(std::chrono::duration<double>(
                   std::chrono::steady_clock::now() - t0)
                   .count());
  }
}

telemetry sim_device::read_telemetry() {
  telemetry t;
  t.memory = memory();
  std::lock_guard<std::mutex> guard{mtx_};
  if (gone_)
    return t;
  catch_up_with_wall();
  t.temperature_c = temp_c_;
  double span = now_ - time_at_read_;
  // The mean power since the last reading (as NVML and ROCm SMI report
  // it), not the draw of whichever operation came last.
  t.power_w = span > 0 ? energy_since_read_ / span : last_power_w_;
  energy_since_read_ = 0;
  t.utilization = span > 0 ? std::min(1.0, busy_since_read_ / span) : 0.0;
  busy_since_read_ = 0;
  time_at_read_ = now_;
  return t;
}

void sim_device::fail_next_allocation(std::string reason) {
  std::lock_guard<std::mutex> guard{mtx_};
  fail_next_alloc_ = reason.empty() ? "simulated allocation failure" : reason;
}

void sim_device::fail_allocations(bool on) {
  fail_allocs_ = on;
}

namespace {

/// N of "PREFIX:N" (`prefix` with its colon), 0 when `fault` is not of
/// that form or N is out of [1, 10^9].
std::uint64_t count_after(const std::string& fault,
                          const std::string& prefix) {
  if (fault.rfind(prefix, 0) != 0 || fault.size() == prefix.size()
      || fault.size() > prefix.size() + 10)
    return 0;
  std::uint64_t n = 0;
  for (auto c : fault.substr(prefix.size())) {
    if (c < '0' || c > '9')
      return 0;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return n <= 1000000000 ? n : 0;
}

/// N of "vanish_after:N" (0: not one).
std::uint64_t vanish_after_count(const std::string& fault) {
  return count_after(fault, "vanish_after:");
}

/// N of "hang_after:N" (0: not one).
std::uint64_t hang_after_count(const std::string& fault) {
  return count_after(fault, "hang_after:");
}

/// The hang or vanish a fault names ("hang", "hang:allocate",
/// "hang:compute", "hang:off", "vanish_at:allocate", "vanish_at:compute");
/// false when it names none. Injected at run time only: a node verifies
/// its devices as it starts (an allocation, a kernel).
bool op_fault_of(const std::string& fault, bool& vanish,
                 sim_device::op_kind& kind) {
  using k = sim_device::op_kind;
  static const std::map<std::string, std::pair<bool, k>> faults = {
    {"hang", {false, k::every}},
    {"hang:allocate", {false, k::allocations}},
    {"hang:compute", {false, k::kernels}},
    {"hang:off", {false, k::none}},
    {"vanish_at:allocate", {true, k::allocations}},
    {"vanish_at:compute", {true, k::kernels}}};
  auto it = faults.find(fault);
  if (it == faults.end())
    return false;
  vanish = it->second.first;
  kind = it->second.second;
  return true;
}

} // namespace

/// N and C of "heat_after:N:C"; false when `fault` is not of that form or
/// a number is out of range (N in [1, 10^9], C in [1, 500]).
bool heat_after_of(const std::string& fault, std::uint64_t& n, double& c) {
  static const std::string prefix = "heat_after:";
  if (fault.rfind(prefix, 0) != 0)
    return false;
  unsigned long long ops = 0;
  double deg = 0;
  char tail = 0;
  if (std::sscanf(fault.c_str() + prefix.size(), "%llu:%lf%c", &ops, &deg,
                  &tail)
        != 2
      || ops < 1 || ops > 1000000000ull || !(deg >= 1 && deg <= 500))
    return false;
  n = ops;
  c = deg;
  return true;
}

/// F of "cooling:F" (F in [0.1, 20]); false when not of that form.
bool cooling_of(const std::string& fault, double& f) {
  static const std::string prefix = "cooling:";
  if (fault.rfind(prefix, 0) != 0)
    return false;
  double x = 0;
  char tail = 0;
  if (std::sscanf(fault.c_str() + prefix.size(), "%lf%c", &x, &tail) != 1
      || !(x >= 0.1 && x <= 20))
    return false;
  f = x;
  return true;
}

std::string sim_fault_error(const std::string& fault) {
  std::uint64_t n = 0;
  double c = 0;
  if (fault == "fail_allocations" || fault == "vanished"
      || vanish_after_count(fault) > 0 || heat_after_of(fault, n, c)
      || cooling_of(fault, c))
    return {};
  return "unknown fault \"" + fault
         + "\" (expected fail_allocations, vanished, vanish_after:N, "
           "heat_after:N:C or cooling:F, N operations in [1, 1000000000], "
           "C degrees in [1, 500], F in [0.1, 20])";
}

namespace {

/// `v` with one decimal ("110.5").
std::string text_of(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

/// C of "heat:C" (C in [-500, 500], not 0); false when not of that form.
bool heat_now_of(const std::string& fault, double& c) {
  static const std::string prefix = "heat:";
  if (fault.rfind(prefix, 0) != 0)
    return false;
  double deg = 0;
  char tail = 0;
  if (std::sscanf(fault.c_str() + prefix.size(), "%lf%c", &deg, &tail) != 1
      || !(deg >= -500 && deg <= 500) || deg == 0)
    return false;
  c = deg;
  return true;
}

} // namespace

std::string sim_runtime_fault_error(const std::string& fault) {
  double c = 0;
  sim_device::op_kind kind{};
  bool vanish = false;
  if (fault == "fail_allocations:off" || fault == "fail_next_allocation"
      || heat_now_of(fault, c) || op_fault_of(fault, vanish, kind)
      || hang_after_count(fault) > 0 || sim_fault_error(fault).empty())
    return {};
  return "unknown fault \"" + fault
         + "\" (expected fail_allocations, fail_allocations:off, "
           "fail_next_allocation, vanished, vanish_after:N, heat:C, "
           "heat_after:N:C, cooling:F, hang, hang:allocate, hang:compute, "
           "hang_after:N, hang:off, vanish_at:allocate or vanish_at:compute; "
           "N operations in [1, 1000000000], C degrees in [1, 500], for "
           "heat:C in [-500, 500] and not 0, F in [0.1, 20])";
}

result<std::string> sim_device::inject_fault(const std::string& spec) {
  if (auto why = sim_runtime_fault_error(spec); !why.empty())
    return fail(errc::invalid_argument, why);
  std::uint64_t n = 0;
  double c = 0;
  if (spec == "fail_allocations") {
    fail_allocations(true);
    return std::string{"every allocation of " + props_.id + " fails"};
  }
  if (spec == "fail_allocations:off") {
    fail_allocations(false);
    return std::string{"allocations of " + props_.id + " succeed again"};
  }
  if (spec == "fail_next_allocation") {
    fail_next_allocation("injected at run time");
    return std::string{"the next allocation of " + props_.id + " fails"};
  }
  bool vanish_later = false;
  if (op_kind kind{}; op_fault_of(spec, vanish_later, kind)) {
    const auto i = static_cast<int>(kind);
    if (vanish_later) {
      vanish_at(kind);
      return std::string{props_.id + " vanishes at its next "
                         + (kind == op_kind::allocations ? "allocation"
                                                         : "kernel")};
    }
    static const char* const hang[] = {
      "operations go on", "every operation blocks", "every allocation blocks",
      "every kernel blocks"};
    hang_at(kind);
    return std::string{props_.id + ": " + hang[i]};
  }
  if ((n = hang_after_count(spec)) > 0) {
    hang_after(n);
    return std::string{props_.id + " hangs from its "} + std::to_string(n)
           + "th operation from now";
  }
  if (spec == "vanished") {
    vanish();
    return std::string{props_.id + " has vanished"};
  }
  if ((n = vanish_after_count(spec)) > 0) {
    vanish_after(n);
    return std::string{props_.id + " vanishes at its "} + std::to_string(n)
           + "th operation from now";
  }
  if (heat_after_of(spec, n, c)) {
    heat_after(n, c);
    return std::string{props_.id + " heats by "} + text_of(c)
           + " C at its " + std::to_string(n) + "th operation from now";
  }
  if (cooling_of(spec, c)) {
    double idle = 0, busy = 0;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      catch_up_with_wall(); // the time so far at the former cooling
      cooling_ = c;
      auto r = profile_.thermal_resistance * c;
      idle = profile_.ambient_c + profile_.idle_power_w * r;
      busy = profile_.ambient_c + profile_.peak_power_w * r;
    }
    return std::string{props_.id + "'s cooler works at 1/"} + text_of(c)
           + ": it heads for " + text_of(busy) + " C busy, " + text_of(idle)
           + " C idle";
  }
  heat_now_of(spec, c);
  double now = 0;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    temp_c_ += c;
    now = temp_c_;
  }
  return std::string{props_.id + " is now at "} + text_of(now) + " C";
}

void sim_device::vanish_after(std::uint64_t ops) {
  ops_left_ = ops;
}

void sim_device::vanish() {
  gone_ = true;
}

void sim_device::hang(bool on) {
  hang_at(on ? op_kind::every : op_kind::none);
}

void sim_device::hang_at(op_kind kind) {
  if (kind == op_kind::none)
    hang_ops_left_ = 0;
  hung_ = kind;
}

void sim_device::hang_after(std::uint64_t ops) {
  hang_ops_left_ = ops;
}

void sim_device::vanish_at(op_kind kind) {
  vanish_at_ = kind;
}

void sim_device::jump_temperature(double delta_c) {
  std::lock_guard<std::mutex> guard{mtx_};
  temp_c_ += delta_c;
}

void sim_device::heat_after(std::uint64_t ops, double delta_c) {
  std::lock_guard<std::mutex> guard{mtx_};
  heat_c_ = delta_c;
  heat_ops_left_ = ops;
}

void sim_device::advance(double seconds) {
  std::lock_guard<std::mutex> guard{mtx_};
  integrate(profile_.idle_power_w, seconds);
}

void sim_device::run_load(double power_w, double seconds) {
  std::lock_guard<std::mutex> guard{mtx_};
  integrate(power_w, seconds);
  busy_since_read_ += seconds;
}

double sim_device::now() const {
  std::lock_guard<std::mutex> guard{const_cast<std::mutex&>(mtx_)};
  return now_;
}

double sim_device::temperature() const {
  std::lock_guard<std::mutex> guard{const_cast<std::mutex&>(mtx_)};
  return temp_c_;
}

// -- backend -----------------------------------------------------------------

namespace {

class sim_backend final : public backend {
public:
  explicit sim_backend(sim_options opts) : opts_(std::move(opts)) {
  }

  backend_kind kind() const override {
    return backend_kind::sim;
  }

  status initialize() override {
    if (!devices_.empty())
      return {};
    const auto& profiles
      = opts_.profiles.empty() ? builtin_sim_profiles() : opts_.profiles;
    if (opts_.devices.empty())
      return fail(errc::no_device, "no simulated devices configured");
    std::map<std::string, int> counts;
    for (auto& spec : opts_.devices) {
      auto it = std::find_if(profiles.begin(), profiles.end(),
                             [&](auto& p) { return p.name == spec.profile; });
      if (it == profiles.end()) {
        devices_.clear();
        return fail(errc::invalid_argument,
                    "unknown simulated device profile \"" + spec.profile
                      + "\"");
      }
      auto id = spec.id.empty() ? "sim:" + spec.profile + ":"
                                    + std::to_string(counts[spec.profile]++)
                                : spec.id;
      if (!spec.fault.empty()) {
        if (auto why = sim_fault_error(spec.fault); !why.empty()) {
          devices_.clear();
          return fail(errc::invalid_argument, "simulated device: " + why);
        }
      }
      auto dev = std::make_unique<sim_device>(*it, id, opts_.time_scale);
      // A configured fault is one injected before the first operation (its
      // name was checked above against the configurable ones).
      if (!spec.fault.empty())
        (void) dev->inject_fault(spec.fault);
      devices_.push_back(std::move(dev));
    }
    return {};
  }

  void shutdown() override {
    devices_.clear();
  }

  std::size_t device_count() const override {
    return devices_.size();
  }

  device* device_at(std::size_t index) override {
    return index < devices_.size() ? devices_[index].get() : nullptr;
  }

private:
  sim_options opts_;
  std::vector<std::unique_ptr<sim_device>> devices_;
};

} // namespace

std::unique_ptr<backend> make_sim_backend(sim_options opts) {
  return std::make_unique<sim_backend>(std::move(opts));
}

} // namespace exo::backend
