#include "backends/gpu_common/telemetry_loader.hpp"

#include "backends/gpu_common/gpu_errors.hpp"
#include "backends/gpu_common/gpu_properties.hpp"
#include "backends/gpu_common/shared_library.hpp"

namespace exo::backend::gpu {

double millidegrees_to_celsius(std::int64_t millidegrees) noexcept {
  return static_cast<double>(millidegrees) / 1000.0;
}

double microwatts_to_watts(std::uint64_t microwatts) noexcept {
  return static_cast<double>(microwatts) / 1e6;
}

double milliwatts_to_watts(std::uint64_t milliwatts) noexcept {
  return static_cast<double>(milliwatts) / 1e3;
}

double percent_to_fraction(std::uint32_t percent) noexcept {
  return percent > 100 ? 1.0 : static_cast<double>(percent) / 100.0;
}

telemetry_probe::~telemetry_probe() = default;

management_library::~management_library() = default;

const std::vector<std::string>& nvml_library_names() {
  static const std::vector<std::string> names{"libnvidia-ml.so.1",
                                              "libnvidia-ml.so"};
  return names;
}

const std::vector<std::string>& rocm_smi_library_names() {
  static const std::vector<std::string> names{
    "librocm_smi64.so", "librocm_smi64.so.5", "librocm_smi64.so.6",
    "librocm_smi64.so.1"};
  return names;
}

namespace {

// -- NVML --------------------------------------------------------------------

// The few NVML declarations exo needs (nvml.h ships with the driver's
// development files, not with the CUDA toolkit). Signatures and enum values
// as documented in the NVML API reference.
using nvml_return = int;
struct nvml_device_st;
using nvml_device = nvml_device_st*;
struct nvml_utilization {
  unsigned int gpu;
  unsigned int memory;
};
constexpr int nvml_temperature_gpu = 0; // NVML_TEMPERATURE_GPU
constexpr int nvml_clock_sm = 1;        // NVML_CLOCK_SM

class nvml_library final
  : public management_library,
    public std::enable_shared_from_this<nvml_library> {
public:
  using init_fn = nvml_return (*)();
  using shutdown_fn = nvml_return (*)();
  using error_string_fn = const char* (*)(nvml_return);
  using by_bus_id_fn = nvml_return (*)(const char*, nvml_device*);
  using temperature_fn = nvml_return (*)(nvml_device, int, unsigned int*);
  using power_fn = nvml_return (*)(nvml_device, unsigned int*);
  using clock_fn = nvml_return (*)(nvml_device, int, unsigned int*);
  using utilization_fn = nvml_return (*)(nvml_device, nvml_utilization*);

  static result<std::shared_ptr<management_library>>
  load(const std::vector<std::string>& names) {
    auto lib = open_first("NVML", names);
    if (!lib)
      return lib.err();
    auto self = std::shared_ptr<nvml_library>(new nvml_library);
    self->lib_ = std::move(*lib);
    auto& l = *self->lib_;
    self->init_ = l.symbol<init_fn>("nvmlInit_v2");
    self->shutdown_ = l.symbol<shutdown_fn>("nvmlShutdown");
    self->error_string_ = l.symbol<error_string_fn>("nvmlErrorString");
    self->by_bus_id_
      = l.symbol<by_bus_id_fn>("nvmlDeviceGetHandleByPciBusId_v2");
    self->temperature_ = l.symbol<temperature_fn>("nvmlDeviceGetTemperature");
    self->power_ = l.symbol<power_fn>("nvmlDeviceGetPowerUsage");
    self->clock_ = l.symbol<clock_fn>("nvmlDeviceGetClockInfo");
    self->utilization_
      = l.symbol<utilization_fn>("nvmlDeviceGetUtilizationRates");
    if (!self->init_ || !self->shutdown_ || !self->by_bus_id_)
      return fail(errc::unsupported,
                  "NVML not available (the library lacks nvmlInit_v2, "
                  "nvmlShutdown or nvmlDeviceGetHandleByPciBusId_v2)");
    if (auto rc = self->init_(); rc != 0)
      return self->failure("nvmlInit_v2", rc);
    self->initialized_ = true;
    return std::shared_ptr<management_library>{std::move(self)};
  }

  ~nvml_library() override {
    if (initialized_)
      shutdown_();
  }

  result<std::unique_ptr<telemetry_probe>>
  probe(const std::string& pci_bus_id) override;

  exo::backend::error failure(const char* call, nvml_return rc) const {
    return api_error(api::nvml, call, rc,
                     error_string_ != nullptr ? error_string_(rc) : nullptr);
  }

  sensor_sample sample(nvml_device dev) const {
    sensor_sample s;
    unsigned int v = 0;
    if (temperature_ && temperature_(dev, nvml_temperature_gpu, &v) == 0)
      s.temperature_c = static_cast<double>(v);
    if (power_ && power_(dev, &v) == 0)
      s.power_w = milliwatts_to_watts(v);
    if (clock_ && clock_(dev, nvml_clock_sm, &v) == 0)
      s.clock_mhz = v;
    nvml_utilization u{};
    if (utilization_ && utilization_(dev, &u) == 0)
      s.utilization = percent_to_fraction(u.gpu);
    return s;
  }

private:
  nvml_library() = default;

  std::unique_ptr<shared_library> lib_;
  bool initialized_ = false;
  init_fn init_ = nullptr;
  shutdown_fn shutdown_ = nullptr;
  error_string_fn error_string_ = nullptr;
  by_bus_id_fn by_bus_id_ = nullptr;
  temperature_fn temperature_ = nullptr;
  power_fn power_ = nullptr;
  clock_fn clock_ = nullptr;
  utilization_fn utilization_ = nullptr;
};

/// Capabilities shown by one sample.
std::uint32_t capabilities_of(const sensor_sample& s) {
  std::uint32_t caps = 0;
  if (s.temperature_c)
    caps |= cap_temperature;
  if (s.power_w)
    caps |= cap_power;
  if (s.clock_mhz)
    caps |= cap_clock;
  if (s.utilization)
    caps |= cap_utilization;
  return caps;
}

class nvml_probe final : public telemetry_probe {
public:
  nvml_probe(std::shared_ptr<nvml_library> lib, nvml_device dev)
    : lib_(std::move(lib)), dev_(dev) {
    caps_ = capabilities_of(lib_->sample(dev_));
  }

  sensor_sample sample() override {
    return lib_->sample(dev_);
  }

  std::uint32_t capabilities() const override {
    return caps_;
  }

private:
  std::shared_ptr<nvml_library> lib_;
  nvml_device dev_;
  std::uint32_t caps_ = 0;
};

result<std::unique_ptr<telemetry_probe>>
nvml_library::probe(const std::string& pci_bus_id) {
  auto id = normalize_pci_bus_id(pci_bus_id);
  if (!id)
    return fail(errc::invalid_argument,
                "NVML: malformed PCI bus id \"" + pci_bus_id + "\"");
  nvml_device dev = nullptr;
  if (auto rc = by_bus_id_(id->c_str(), &dev); rc != 0)
    return failure("nvmlDeviceGetHandleByPciBusId_v2", rc);
  return std::unique_ptr<telemetry_probe>{
    std::make_unique<nvml_probe>(shared_from_this(), dev)};
}

// -- rocm_smi ----------------------------------------------------------------

// The few rocm_smi declarations exo needs, as in rocm_smi.h (declared here so
// that the build does not depend on librocm-smi-dev).
using rsmi_status = int;
constexpr std::uint32_t rsmi_temp_type_edge = 0; // RSMI_TEMP_TYPE_EDGE
constexpr int rsmi_temp_current = 0;             // RSMI_TEMP_CURRENT

class rocm_smi_library final
  : public management_library,
    public std::enable_shared_from_this<rocm_smi_library> {
public:
  using init_fn = rsmi_status (*)(std::uint64_t);
  using shutdown_fn = rsmi_status (*)();
  using status_string_fn = rsmi_status (*)(rsmi_status, const char**);
  using count_fn = rsmi_status (*)(std::uint32_t*);
  using pci_id_fn = rsmi_status (*)(std::uint32_t, std::uint64_t*);
  using temperature_fn
    = rsmi_status (*)(std::uint32_t, std::uint32_t, int, std::int64_t*);
  using power_fn = rsmi_status (*)(std::uint32_t, std::uint32_t,
                                   std::uint64_t*);
  using busy_fn = rsmi_status (*)(std::uint32_t, std::uint32_t*);

  static result<std::shared_ptr<management_library>>
  load(const std::vector<std::string>& names) {
    auto lib = open_first("rocm_smi", names);
    if (!lib)
      return lib.err();
    auto self = std::shared_ptr<rocm_smi_library>(new rocm_smi_library);
    self->lib_ = std::move(*lib);
    auto& l = *self->lib_;
    self->init_ = l.symbol<init_fn>("rsmi_init");
    self->shutdown_ = l.symbol<shutdown_fn>("rsmi_shut_down");
    self->status_string_ = l.symbol<status_string_fn>("rsmi_status_string");
    self->count_ = l.symbol<count_fn>("rsmi_num_monitor_devices");
    self->pci_id_ = l.symbol<pci_id_fn>("rsmi_dev_pci_id_get");
    self->temperature_ = l.symbol<temperature_fn>("rsmi_dev_temp_metric_get");
    self->power_ = l.symbol<power_fn>("rsmi_dev_power_ave_get");
    self->busy_ = l.symbol<busy_fn>("rsmi_dev_busy_percent_get");
    if (!self->init_ || !self->shutdown_ || !self->count_ || !self->pci_id_)
      return fail(errc::unsupported,
                  "rocm_smi not available (the library lacks rsmi_init, "
                  "rsmi_shut_down, rsmi_num_monitor_devices or "
                  "rsmi_dev_pci_id_get)");
    if (auto rc = self->init_(0); rc != 0)
      return self->failure("rsmi_init", rc);
    self->initialized_ = true;
    return std::shared_ptr<management_library>{std::move(self)};
  }

  ~rocm_smi_library() override {
    if (initialized_)
      shutdown_();
  }

  result<std::unique_ptr<telemetry_probe>>
  probe(const std::string& pci_bus_id) override;

  exo::backend::error failure(const char* call, rsmi_status rc) const {
    const char* text = nullptr;
    if (status_string_ == nullptr || status_string_(rc, &text) != 0)
      text = nullptr;
    return api_error(api::rocm_smi, call, rc, text);
  }

  sensor_sample sample(std::uint32_t index) const {
    sensor_sample s;
    std::int64_t milli = 0;
    if (temperature_
        && temperature_(index, rsmi_temp_type_edge, rsmi_temp_current, &milli)
             == 0)
      s.temperature_c = millidegrees_to_celsius(milli);
    std::uint64_t micro = 0;
    if (power_ && power_(index, 0, &micro) == 0)
      s.power_w = microwatts_to_watts(micro);
    std::uint32_t busy = 0;
    if (busy_ && busy_(index, &busy) == 0)
      s.utilization = percent_to_fraction(busy);
    return s;
  }

private:
  rocm_smi_library() = default;

  std::unique_ptr<shared_library> lib_;
  bool initialized_ = false;
  init_fn init_ = nullptr;
  shutdown_fn shutdown_ = nullptr;
  status_string_fn status_string_ = nullptr;
  count_fn count_ = nullptr;
  pci_id_fn pci_id_ = nullptr;
  temperature_fn temperature_ = nullptr;
  power_fn power_ = nullptr;
  busy_fn busy_ = nullptr;
};

class rocm_smi_probe final : public telemetry_probe {
public:
  rocm_smi_probe(std::shared_ptr<rocm_smi_library> lib, std::uint32_t index)
    : lib_(std::move(lib)), index_(index) {
    caps_ = capabilities_of(lib_->sample(index_));
  }

  sensor_sample sample() override {
    return lib_->sample(index_);
  }

  std::uint32_t capabilities() const override {
    return caps_;
  }

private:
  std::shared_ptr<rocm_smi_library> lib_;
  std::uint32_t index_;
  std::uint32_t caps_ = 0;
};

result<std::unique_ptr<telemetry_probe>>
rocm_smi_library::probe(const std::string& pci_bus_id) {
  auto want = normalize_pci_bus_id(pci_bus_id);
  if (!want)
    return fail(errc::invalid_argument,
                "rocm_smi: malformed PCI bus id \"" + pci_bus_id + "\"");
  std::uint32_t n = 0;
  if (auto rc = count_(&n); rc != 0)
    return failure("rsmi_num_monitor_devices", rc);
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint64_t bdfid = 0;
    if (pci_id_(i, &bdfid) != 0)
      continue;
    if (format_pci_bus_id(pci_address_from_bdfid(bdfid)) == *want)
      return std::unique_ptr<telemetry_probe>{
        std::make_unique<rocm_smi_probe>(shared_from_this(), i)};
  }
  return fail(errc::no_device,
              "rocm_smi: no monitored device at PCI bus id " + *want);
}

} // namespace

result<std::shared_ptr<management_library>>
load_nvml(const std::vector<std::string>& names) {
  return nvml_library::load(names);
}

result<std::shared_ptr<management_library>>
load_rocm_smi(const std::vector<std::string>& names) {
  return rocm_smi_library::load(names);
}

} // namespace exo::backend::gpu
