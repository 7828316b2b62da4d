#include "backends/factory/factory.hpp"

#ifdef EXO_HAVE_VULKAN
#  include "backends/vulkan/vulkan_backend.hpp"
#endif
#ifdef EXO_HAVE_CUDA
#  include "backends/cuda/cuda_backend.hpp"
#endif
#ifdef EXO_HAVE_HIP
#  include "backends/hip/hip_backend.hpp"
#endif

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace exo::backend {

const std::vector<backend_kind>& platform_priority() {
  static const std::vector<backend_kind> order{
    backend_kind::cuda, backend_kind::hip, backend_kind::vulkan,
    backend_kind::cpu, backend_kind::sim};
  return order;
}

result<std::unique_ptr<backend>> make_backend(backend_kind kind,
                                              const factory_options& opts) {
  switch (kind) {
    case backend_kind::cpu:
      return make_cpu_backend(opts.cpu);
    case backend_kind::sim:
      return make_sim_backend(opts.sim);
    case backend_kind::vulkan:
#ifdef EXO_HAVE_VULKAN
    {
      vulkan_options v;
      v.measure_rates = opts.vulkan_measure_rates;
      return make_vulkan_backend(v);
    }
#else
      return fail(errc::unsupported, "this build has no Vulkan support");
#endif
    case backend_kind::cuda:
#ifdef EXO_HAVE_CUDA
      return make_cuda_backend(opts.gpu);
#else
      return fail(errc::unsupported, "this build has no CUDA support");
#endif
    case backend_kind::hip:
#ifdef EXO_HAVE_HIP
      return make_hip_backend(opts.gpu);
#else
      return fail(errc::unsupported, "this build has no HIP/ROCm support");
#endif
  }
  return fail(errc::invalid_argument, "unknown backend kind");
}

namespace {

result<std::vector<backend_kind>> parse_list(const std::vector<std::string>& in,
                                             const char* what) {
  std::vector<backend_kind> out;
  for (auto& name : in) {
    auto k = parse_backend_kind(name);
    if (!k)
      return fail(errc::invalid_argument,
                  std::string{what} + ": unknown backend \"" + name
                    + "\" (expected cuda, hip, rocm, vulkan, cpu or sim)");
    out.push_back(*k);
  }
  return out;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in{s};
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty())
      out.push_back(item);
  return out;
}

bool contains(const std::vector<backend_kind>& v, backend_kind k) {
  return std::find(v.begin(), v.end(), k) != v.end();
}

} // namespace

registry::~registry() {
  for (auto& b : backends_)
    b->shutdown();
}

result<registry> registry::create(const factory_options& opts) {
  auto include_names = opts.include;
  const char* what = "include";
  if (opts.use_environment) {
    if (const char* env = std::getenv("EXO_BACKENDS"); env && *env) {
      include_names = split_commas(env);
      what = "EXO_BACKENDS";
    }
  }
  auto include = parse_list(include_names, what);
  if (!include)
    return include.err();
  auto exclude = parse_list(opts.exclude, "exclude");
  if (!exclude)
    return exclude.err();
  registry reg;
  for (auto kind : platform_priority()) {
    backend_report rep;
    rep.kind = kind;
    bool selected = (include->empty() || contains(*include, kind))
                    && !contains(*exclude, kind);
    // Simulated devices exist only when configured.
    if (kind == backend_kind::sim && include->empty()
        && opts.sim.devices.empty())
      selected = false;
    auto made = make_backend(kind, opts);
    rep.built = made.ok();
    if (!selected) {
      rep.reason = made ? "not selected" : made.err().message;
      reg.reports_.push_back(rep);
      continue;
    }
    rep.tried = true;
    if (!made) {
      rep.reason = made.err().message;
      reg.reports_.push_back(rep);
      continue;
    }
    auto be = std::move(*made);
    auto st = be->initialize();
    if (!st.ok()) {
      rep.reason = st.err().message;
    } else if (be->device_count() == 0) {
      rep.reason = "no devices found";
      be->shutdown();
    } else {
      rep.active = true;
      rep.devices = be->device_count();
      reg.backends_.push_back(std::move(be));
    }
    reg.reports_.push_back(rep);
  }
  // Always fall back to the CPU.
  auto has_real = std::any_of(reg.backends_.begin(), reg.backends_.end(),
                              [](auto& b) {
                                return b->kind() != backend_kind::sim;
                              });
  if (!has_real) {
    auto cpu = make_cpu_backend(opts.cpu);
    if (cpu->initialize().ok()) {
      for (auto& rep : reg.reports_)
        if (rep.kind == backend_kind::cpu) {
          rep.tried = rep.active = true;
          rep.devices = cpu->device_count();
          rep.reason = "fallback: no other backend has a device";
        }
      auto pos = std::find_if(reg.backends_.begin(), reg.backends_.end(),
                              [](auto& b) {
                                return b->kind() == backend_kind::sim;
                              });
      reg.backends_.insert(pos, std::move(cpu));
    }
  }
  return reg;
}

std::vector<device*> registry::devices() const {
  std::vector<device*> out;
  for (auto& b : backends_)
    for (std::size_t i = 0; i < b->device_count(); ++i)
      out.push_back(b->device_at(i));
  return out;
}

} // namespace exo::backend
