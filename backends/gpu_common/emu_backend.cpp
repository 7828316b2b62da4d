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
struct emu_platform {
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

  static int launch_binary(binary_op op, const float* a, const float* b,
                           float* out, std::size_t count,
                           gpu::emu::stream_t stream) {
    return emu_kernels::launch_binary(op, a, b, out, count, stream);
  }

  static int launch_matmul_tiled(const float* a, const float* b, float* c,
                                 const matmul_dims& dims,
                                 gpu::emu::stream_t stream) {
    return emu_kernels::launch_matmul_tiled(a, b, c, dims, stream);
  }

  static int launch_rmsnorm(const float* x, const float* w, float* out,
                            std::size_t rows, std::size_t cols, float eps,
                            gpu::emu::stream_t stream) {
    return emu_kernels::launch_rmsnorm(x, w, out, rows, cols, eps, stream);
  }

  static int launch_silu_mul(const float* gate, const float* up, float* out,
                             std::size_t count, gpu::emu::stream_t stream) {
    return emu_kernels::launch_silu_mul(gate, up, out, count, stream);
  }

  static int launch_rope_rows(float* x, const std::int32_t* positions,
                              const float* freq_factors,
                              const rope_dims& dims,
                              gpu::emu::stream_t stream) {
    return emu_kernels::launch_rope_rows(x, positions, freq_factors, dims,
                                         stream);
  }

  static int launch_attention(const float* q, const void* k, const void* v,
                              float* out, const attention_dims& dims,
                              gpu::emu::stream_t stream) {
    return emu_kernels::launch_attention(q, k, v, out, dims, stream);
  }

  static int launch_to_f16(const float* a, std::uint16_t* out,
                           std::size_t count, gpu::emu::stream_t stream) {
    return emu_kernels::launch_to_f16(a, out, count, stream);
  }

  static int launch_to_q8_0(const float* a, std::uint8_t* out,
                            std::size_t count, gpu::emu::stream_t stream) {
    return emu_kernels::launch_to_q8_0(a, out, count, stream);
  }

  static int launch_hadamard(const float* a, float* out, std::size_t count,
                             std::size_t n, gpu::emu::stream_t stream) {
    return emu_kernels::launch_hadamard(a, out, count, n, stream);
  }

  static int launch_store_kv_rows(const float* a, const std::int32_t* tables,
                                  void* kv, const kv_rows_dims& dims,
                                  gpu::emu::stream_t stream) {
    return emu_kernels::launch_store_kv_rows(a, tables, kv, dims, stream);
  }

  static int launch_dequant_rows(const void* w, weight_type type, float* out,
                                 std::size_t rows, std::size_t k,
                                 gpu::emu::stream_t stream) {
    return emu_kernels::launch_dequant_rows(w, type, out, rows, k, stream);
  }

  static int launch_matmul_weights(const float* a, const void* w,
                                   weight_type type, float* c,
                                   const matmul_dims& dims, void* scratch,
                                   std::size_t q4_k_pair_tokens,
                                   gpu::emu::stream_t stream) {
    return emu_kernels::launch_matmul_weights(a, w, type, c, dims, scratch,
                                              q4_k_pair_tokens, stream);
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
