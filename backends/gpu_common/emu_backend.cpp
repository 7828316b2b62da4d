// gpu_backend_impl.hpp over the GPU emulator's runtime (gpu_emulator.hpp).

#include "backends/gpu_common/gpu_emulator_backend.hpp"

#include "backends/gpu_common/emu_runtime_compat.hpp"

#define EXO_GPU_KERNEL_NS emu_kernels
#include "backends/gpu_common/kernel_api.hpp"

#define EXO_GPU_IMPL_NS emu_impl
#include "backends/gpu_common/gpu_backend_impl.hpp"

namespace exo::backend::emu_impl {

namespace {

/// The emulator's specifics for gpu_backend_impl.hpp: CUDA's error codes
/// and kernels, no BLAS (the tiled kernel), no management library.
struct emu_platform : emu_kernels::launches {
  static constexpr backend_kind kind = backend_kind::cuda;
  static constexpr gpu::api api = gpu::api::cuda;
  static constexpr const char* id_prefix = "cuda-emu";
  static constexpr const char* vendor = "exo (emulated)";
  static constexpr const char* no_device_text = "no emulated GPU configured";
  static constexpr bool has_blas = false;

  static std::string driver_version(int) {
    return "exo GPU emulator";
  }

  static void describe(int, const gpu::emu::device_prop&,
                       device_properties& out) {
    out.architecture = "emulated";
    out.peak_flops = 1e9;
    out.support = support_level::full;
  }

  static bool has_kernels(const device_properties& props) {
    return props.support == support_level::full;
  }

  static result<std::shared_ptr<gpu::management_library>> load_telemetry() {
    return fail(errc::unsupported,
                "the GPU emulator has no management library");
  }

  /// Never called: has_blas is false, so products take the tiled kernel.
  struct blas {
    status init(gpu::emu::stream_t) {
      return {};
    }
    void destroy() {
    }
    status matmul(const float*, const float*, float*, const matmul_dims&) {
      return fail(errc::unsupported, "the GPU emulator has no BLAS");
    }
  };
};

} // namespace

} // namespace exo::backend::emu_impl

namespace exo::backend {

std::unique_ptr<backend> make_gpu_emulator_backend(gpu_options opts) {
  return std::make_unique<emu_impl::gpu_backend<emu_impl::emu_platform>>(
    opts);
}

} // namespace exo::backend
