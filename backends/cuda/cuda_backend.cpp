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
struct cuda_platform {
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

  static int launch_binary(binary_op op, const float* a, const float* b,
                           float* out, std::size_t count,
                           cudaStream_t stream) {
    return cuda_kernels::launch_binary(op, a, b, out, count, stream);
  }

  static int launch_matmul_tiled(const float* a, const float* b, float* c,
                                 const matmul_dims& dims,
                                 cudaStream_t stream) {
    return cuda_kernels::launch_matmul_tiled(a, b, c, dims, stream);
  }

  static int launch_rmsnorm(const float* x, const float* w, float* out,
                            std::size_t rows, std::size_t cols, float eps,
                            cudaStream_t stream) {
    return cuda_kernels::launch_rmsnorm(x, w, out, rows, cols, eps, stream);
  }

  static int launch_silu_mul(const float* gate, const float* up, float* out,
                             std::size_t count, cudaStream_t stream) {
    return cuda_kernels::launch_silu_mul(gate, up, out, count, stream);
  }

  static int launch_rope_rows(float* x, const std::int32_t* positions,
                              const float* freq_factors,
                              const rope_dims& dims, cudaStream_t stream) {
    return cuda_kernels::launch_rope_rows(x, positions, freq_factors, dims,
                                  stream);
  }

  static int launch_attention(const float* q, const void* k, const void* v,
                              float* out, const attention_dims& dims,
                              cudaStream_t stream) {
    return cuda_kernels::launch_attention(q, k, v, out, dims, stream);
  }

  static int launch_to_f16(const float* a, std::uint16_t* out,
                           std::size_t count, cudaStream_t stream) {
    return cuda_kernels::launch_to_f16(a, out, count, stream);
  }

  static int launch_to_q8_0(const float* a, std::uint8_t* out,
                            std::size_t count, cudaStream_t stream) {
    return cuda_kernels::launch_to_q8_0(a, out, count, stream);
  }

  static int launch_hadamard(const float* a, float* out, std::size_t count,
                             std::size_t n, cudaStream_t stream) {
    return cuda_kernels::launch_hadamard(a, out, count, n, stream);
  }

  static int launch_store_kv_rows(const float* a, const std::int32_t* tables,
                                  void* kv, const kv_rows_dims& dims,
                                  cudaStream_t stream) {
    return cuda_kernels::launch_store_kv_rows(a, tables, kv, dims, stream);
  }

  static int launch_dequant_rows(const void* w, weight_type type, float* out,
                                 std::size_t rows, std::size_t k,
                                 cudaStream_t stream) {
    return cuda_kernels::launch_dequant_rows(w, type, out, rows, k, stream);
  }

  static int launch_matmul_weights(const float* a, const void* w,
                                   weight_type type, float* c,
                                   const matmul_dims& dims, void* scratch,
                                   std::size_t q4_k_pair_tokens,
                                   cudaStream_t stream) {
    return cuda_kernels::launch_matmul_weights(a, w, type, c, dims, scratch,
                                               q4_k_pair_tokens, stream);
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
