#include "backends/hip/hip_backend.hpp"

#include "backends/gpu_common/hip_runtime_compat.hpp"

#define EXO_GPU_KERNEL_NS hip_kernels
#include "backends/gpu_common/kernel_api.hpp"

#define EXO_GPU_IMPL_NS hip_impl
#include "backends/gpu_common/gpu_backend_impl.hpp"

#include <sstream>

namespace exo::backend::hip_impl {

namespace {

/// The offload targets hipcc compiled the kernels for (EXO_HIP_ARCHS, from
/// CMake, separated by ';').
bool compiled_for(const std::string& arch) {
  std::stringstream in{EXO_HIP_ARCHS};
  std::string item;
  while (std::getline(in, item, ';'))
    if (item == arch)
      return true;
  return false;
}

/// AMD specifics for gpu_backend_impl.hpp.
struct hip_platform : hip_kernels::launches {
  static constexpr backend_kind kind = backend_kind::hip;
  static constexpr gpu::api api = gpu::api::hip;
  static constexpr const char* id_prefix = "hip";
  static constexpr const char* vendor = "AMD";
  static constexpr const char* no_device_text = "no ROCm device";
  static constexpr bool has_blas = false;

  static std::string driver_version(int v) {
    return "HIP driver " + std::to_string(v);
  }

  static void describe(int ordinal, const hipDeviceProp_t& p,
                       device_properties& out) {
    out.architecture = gpu::hip_architecture(p.gcnArchName);
    hipUUID uuid{};
    if (hipDeviceGetUuid(&uuid, ordinal) == hipSuccess) {
      auto text = gpu::format_uuid(uuid.bytes);
      if (!text.empty())
        out.id = "hip:" + text;
    }
    (void)hipGetLastError();
    out.peak_flops = gpu::peak_flops(
      out.compute_units, out.clock_mhz.value_or(0),
      gpu::hip_fp32_flops_per_clock(out.architecture));
    // Without kernels for its target the device still works: compute falls
    // back to the host through the generic paths.
    out.support = compiled_for(out.architecture) ? support_level::full
                                                  : support_level::partial;
    if (out.support != support_level::full)
      out.capabilities &= ~(cap_elementwise | cap_matmul | cap_model_ops);
  }

  static bool has_kernels(const device_properties& props) {
    return props.support == support_level::full;
  }

  static result<std::shared_ptr<gpu::management_library>> load_telemetry() {
    return gpu::load_rocm_smi();
  }

  /// No vendor BLAS: gpu_device uses the tiled kernel (has_blas = false).
  struct blas {
    status init(hipStream_t) {
      return {};
    }
    void destroy() {
    }
    status matmul(const float*, const float*, float*, const matmul_dims&) {
      return fail(errc::unsupported, "no BLAS in the HIP backend");
    }
  };
};

} // namespace

} // namespace exo::backend::hip_impl

namespace exo::backend {

std::unique_ptr<backend> make_hip_backend(gpu_options opts) {
  return std::make_unique<hip_impl::gpu_backend<hip_impl::hip_platform>>(
    opts);
}

} // namespace exo::backend
