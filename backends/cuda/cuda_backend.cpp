#include "backends/cuda/cuda_backend.hpp"

#include "backends/cuda/cublas_library.hpp"

#include <cuda_runtime_api.h>

#define EXO_GPU_KERNEL_NS cuda_kernels
#include "backends/gpu_common/kernel_api.hpp"

#define EXO_GPU_IMPL_NS cuda_impl
#include "backends/gpu_common/gpu_backend_impl.hpp"

namespace exo::backend::cuda_impl {

namespace {

error blas_failure(const cuda::cublas_api& api, const char* call,
                   cublasStatus_t st) {
  auto code = st == CUBLAS_STATUS_ALLOC_FAILED ? errc::out_of_memory
              : st == CUBLAS_STATUS_NOT_INITIALIZED ? errc::no_device
              : st == CUBLAS_STATUS_INVALID_VALUE ? errc::invalid_argument
              : st == CUBLAS_STATUS_NOT_SUPPORTED ? errc::unsupported
                                                  : errc::driver_error;
  return fail(code, std::string{call} + ": " + api.status_name(st) + ": "
                      + api.status_string(st));
}

/// NVIDIA specifics for gpu_backend_impl.hpp.
struct cuda_platform : cuda_kernels::launches {
  static constexpr backend_kind kind = backend_kind::cuda;
  static constexpr gpu::api api = gpu::api::cuda;
  static constexpr const char* id_prefix = "cuda";
  static constexpr const char* vendor = "NVIDIA";
  static constexpr const char* no_device_text = "no CUDA device";
  static constexpr bool has_blas = true;

  /// 13000 -> "CUDA 13.0".
  static std::string driver_version(int v) {
    return "CUDA " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  }

  static void describe(int, const cudaDeviceProp& p, device_properties& out) {
    out.architecture = gpu::cuda_architecture(p.major, p.minor);
    auto uuid = gpu::format_uuid(p.uuid.bytes);
    if (!uuid.empty())
      out.id = "cuda:GPU-" + uuid;
    out.peak_flops = gpu::peak_flops(
      out.compute_units, out.clock_mhz.value_or(0),
      gpu::cuda_fp32_flops_per_clock(p.major, p.minor));
    // nvcc 13 builds sm_75 and newer (real code or PTX).
    out.support = p.major * 10 + p.minor >= 75 ? support_level::full
                                                : support_level::unsupported;
  }

  static bool has_kernels(const device_properties& props) {
    return props.support == support_level::full;
  }

  static result<std::shared_ptr<gpu::management_library>> load_telemetry() {
    return gpu::load_nvml();
  }

  /// cuBLAS on the device's stream; row-major through the transposition
  /// trick (gpu::row_major_as_column_major). The library is loaded when
  /// the first device initializes (cublas_library.hpp).
  struct blas {
    std::shared_ptr<const cuda::cublas_api> api;
    cublasHandle_t handle = nullptr;

    status init(cudaStream_t stream) {
      auto loaded = cuda::process_cublas();
      if (!loaded)
        return loaded.err();
      api = *loaded;
      if (auto st = api->create(&handle); st != CUBLAS_STATUS_SUCCESS) {
        handle = nullptr;
        return blas_failure(*api, "cublasCreate", st);
      }
      if (auto st = api->set_stream(handle, stream);
          st != CUBLAS_STATUS_SUCCESS)
        return blas_failure(*api, "cublasSetStream", st);
      return {};
    }

    void destroy() {
      if (handle != nullptr)
        api->destroy(handle);
      handle = nullptr;
    }

    status matmul(const float* a, const float* b, float* c,
                  const matmul_dims& dims) {
      auto g = gpu::row_major_as_column_major(dims);
      const float one = 1.0f;
      const float zero = 0.0f;
      auto st = api->sgemm(handle,
                            g.transpose_first ? CUBLAS_OP_T : CUBLAS_OP_N,
                            CUBLAS_OP_N, g.rows, g.cols, g.inner, &one, b,
                            g.ld_first, a, g.ld_second, &zero, c,
                            g.ld_result);
      if (st != CUBLAS_STATUS_SUCCESS)
        return blas_failure(*api, "cublasSgemm", st);
      return {};
    }
  };
};

} // namespace

} // namespace exo::backend::cuda_impl

namespace exo::backend {

std::unique_ptr<backend> make_cuda_backend(gpu_options opts) {
  return std::make_unique<cuda_impl::gpu_backend<cuda_impl::cuda_platform>>(
    opts);
}

} // namespace exo::backend
