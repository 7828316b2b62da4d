#include "backends/gpu_common/gpu_errors.hpp"

#include <algorithm>
#include <iterator>

namespace exo::backend::gpu {

namespace {

struct entry {
  std::int64_t value;
  errc code;
  const char* name;
};

// Values from the CUDA 13 runtime headers (driver_types.h).
constexpr entry cuda_table[] = {
  {0, errc::driver_error, "cudaSuccess"},
  {1, errc::invalid_argument, "cudaErrorInvalidValue"},
  {2, errc::out_of_memory, "cudaErrorMemoryAllocation"},
  {3, errc::no_device, "cudaErrorInitializationError"},
  {4, errc::device_lost, "cudaErrorCudartUnloading"},
  {9, errc::invalid_argument, "cudaErrorInvalidConfiguration"},
  {17, errc::invalid_argument, "cudaErrorInvalidDevicePointer"},
  {34, errc::no_device, "cudaErrorStubLibrary"},
  {35, errc::no_device, "cudaErrorInsufficientDriver"},
  {36, errc::unsupported, "cudaErrorCallRequiresNewerDriver"},
  {46, errc::device_lost, "cudaErrorDevicesUnavailable"},
  {100, errc::no_device, "cudaErrorNoDevice"},
  {101, errc::no_device, "cudaErrorInvalidDevice"},
  {102, errc::unsupported, "cudaErrorDeviceNotLicensed"},
  {201, errc::driver_error, "cudaErrorDeviceUninitialized"},
  {209, errc::unsupported, "cudaErrorNoKernelImageForDevice"},
  {214, errc::device_lost, "cudaErrorECCUncorrectable"},
  {217, errc::unsupported, "cudaErrorPeerAccessUnsupported"},
  {218, errc::unsupported, "cudaErrorInvalidPtx"},
  {220, errc::device_lost, "cudaErrorNvlinkUncorrectable"},
  {222, errc::unsupported, "cudaErrorUnsupportedPtxVersion"},
  {226, errc::device_lost, "cudaErrorContained"},
  {304, errc::driver_error, "cudaErrorOperatingSystem"},
  {400, errc::invalid_argument, "cudaErrorInvalidResourceHandle"},
  {600, errc::timeout, "cudaErrorNotReady"},
  {700, errc::device_lost, "cudaErrorIllegalAddress"},
  {701, errc::out_of_memory, "cudaErrorLaunchOutOfResources"},
  {702, errc::timeout, "cudaErrorLaunchTimeout"},
  {704, errc::driver_error, "cudaErrorPeerAccessAlreadyEnabled"},
  {705, errc::unsupported, "cudaErrorPeerAccessNotEnabled"},
  {714, errc::device_lost, "cudaErrorHardwareStackError"},
  {715, errc::device_lost, "cudaErrorIllegalInstruction"},
  {716, errc::device_lost, "cudaErrorMisalignedAddress"},
  {718, errc::device_lost, "cudaErrorInvalidPc"},
  {719, errc::device_lost, "cudaErrorLaunchFailure"},
  {800, errc::unsupported, "cudaErrorNotPermitted"},
  {801, errc::unsupported, "cudaErrorNotSupported"},
  {802, errc::no_device, "cudaErrorSystemNotReady"},
  {803, errc::no_device, "cudaErrorSystemDriverMismatch"},
  {804, errc::unsupported, "cudaErrorCompatNotSupportedOnDevice"},
  {999, errc::driver_error, "cudaErrorUnknown"},
};

// Values from ROCm 5.2's hip_runtime_api.h.
constexpr entry hip_table[] = {
  {0, errc::driver_error, "hipSuccess"},
  {1, errc::invalid_argument, "hipErrorInvalidValue"},
  {2, errc::out_of_memory, "hipErrorOutOfMemory"},
  {3, errc::no_device, "hipErrorNotInitialized"},
  {4, errc::device_lost, "hipErrorDeinitialized"},
  {9, errc::invalid_argument, "hipErrorInvalidConfiguration"},
  {17, errc::invalid_argument, "hipErrorInvalidDevicePointer"},
  {21, errc::invalid_argument, "hipErrorInvalidMemcpyDirection"},
  {35, errc::no_device, "hipErrorInsufficientDriver"},
  {98, errc::unsupported, "hipErrorInvalidDeviceFunction"},
  {100, errc::no_device, "hipErrorNoDevice"},
  {101, errc::no_device, "hipErrorInvalidDevice"},
  {200, errc::unsupported, "hipErrorInvalidImage"},
  {209, errc::unsupported, "hipErrorNoBinaryForGpu"},
  {214, errc::device_lost, "hipErrorECCNotCorrectable"},
  {217, errc::unsupported, "hipErrorPeerAccessUnsupported"},
  {304, errc::driver_error, "hipErrorOperatingSystem"},
  {400, errc::invalid_argument, "hipErrorInvalidHandle"},
  {500, errc::invalid_argument, "hipErrorNotFound"},
  {600, errc::timeout, "hipErrorNotReady"},
  {700, errc::device_lost, "hipErrorIllegalAddress"},
  {701, errc::out_of_memory, "hipErrorLaunchOutOfResources"},
  {702, errc::timeout, "hipErrorLaunchTimeOut"},
  {704, errc::driver_error, "hipErrorPeerAccessAlreadyEnabled"},
  {705, errc::unsupported, "hipErrorPeerAccessNotEnabled"},
  {719, errc::device_lost, "hipErrorLaunchFailure"},
  {801, errc::unsupported, "hipErrorNotSupported"},
  {999, errc::driver_error, "hipErrorUnknown"},
  {1052, errc::device_lost, "hipErrorRuntimeMemory"},
  {1053, errc::driver_error, "hipErrorRuntimeOther"},
};

// nvmlReturn_t, as documented in the NVML API reference.
constexpr entry nvml_table[] = {
  {0, errc::driver_error, "NVML_SUCCESS"},
  {1, errc::driver_error, "NVML_ERROR_UNINITIALIZED"},
  {2, errc::invalid_argument, "NVML_ERROR_INVALID_ARGUMENT"},
  {3, errc::unsupported, "NVML_ERROR_NOT_SUPPORTED"},
  {4, errc::unsupported, "NVML_ERROR_NO_PERMISSION"},
  {5, errc::driver_error, "NVML_ERROR_ALREADY_INITIALIZED"},
  {6, errc::no_device, "NVML_ERROR_NOT_FOUND"},
  {7, errc::invalid_argument, "NVML_ERROR_INSUFFICIENT_SIZE"},
  {8, errc::device_lost, "NVML_ERROR_INSUFFICIENT_POWER"},
  {9, errc::no_device, "NVML_ERROR_DRIVER_NOT_LOADED"},
  {10, errc::timeout, "NVML_ERROR_TIMEOUT"},
  {11, errc::driver_error, "NVML_ERROR_IRQ_ISSUE"},
  {12, errc::unsupported, "NVML_ERROR_LIBRARY_NOT_FOUND"},
  {13, errc::unsupported, "NVML_ERROR_FUNCTION_NOT_FOUND"},
  {14, errc::driver_error, "NVML_ERROR_CORRUPTED_INFOROM"},
  {15, errc::device_lost, "NVML_ERROR_GPU_IS_LOST"},
  {16, errc::device_lost, "NVML_ERROR_RESET_REQUIRED"},
  {17, errc::driver_error, "NVML_ERROR_OPERATING_SYSTEM"},
  {18, errc::no_device, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"},
  {19, errc::driver_error, "NVML_ERROR_IN_USE"},
  {20, errc::out_of_memory, "NVML_ERROR_MEMORY"},
  {21, errc::unsupported, "NVML_ERROR_NO_DATA"},
  {22, errc::unsupported, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED"},
  {23, errc::out_of_memory, "NVML_ERROR_INSUFFICIENT_RESOURCES"},
  {24, errc::unsupported, "NVML_ERROR_FREQ_NOT_SUPPORTED"},
  {25, errc::unsupported, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"},
  {26, errc::unsupported, "NVML_ERROR_DEPRECATED"},
  {27, errc::timeout, "NVML_ERROR_NOT_READY"},
  {28, errc::no_device, "NVML_ERROR_GPU_NOT_FOUND"},
  {29, errc::driver_error, "NVML_ERROR_INVALID_STATE"},
  {999, errc::driver_error, "NVML_ERROR_UNKNOWN"},
};

// rsmi_status_t, from rocm_smi.h.
constexpr entry rocm_smi_table[] = {
  {0, errc::driver_error, "RSMI_STATUS_SUCCESS"},
  {1, errc::invalid_argument, "RSMI_STATUS_INVALID_ARGS"},
  {2, errc::unsupported, "RSMI_STATUS_NOT_SUPPORTED"},
  {3, errc::driver_error, "RSMI_STATUS_FILE_ERROR"},
  {4, errc::unsupported, "RSMI_STATUS_PERMISSION"},
  {5, errc::out_of_memory, "RSMI_STATUS_OUT_OF_RESOURCES"},
  {6, errc::driver_error, "RSMI_STATUS_INTERNAL_EXCEPTION"},
  {7, errc::out_of_range, "RSMI_STATUS_INPUT_OUT_OF_BOUNDS"},
  {8, errc::no_device, "RSMI_STATUS_INIT_ERROR"},
  {9, errc::unsupported, "RSMI_STATUS_NOT_YET_IMPLEMENTED"},
  {10, errc::no_device, "RSMI_STATUS_NOT_FOUND"},
  {11, errc::invalid_argument, "RSMI_STATUS_INSUFFICIENT_SIZE"},
  {12, errc::timeout, "RSMI_STATUS_INTERRUPT"},
  {13, errc::driver_error, "RSMI_STATUS_UNEXPECTED_SIZE"},
  {14, errc::unsupported, "RSMI_STATUS_NO_DATA"},
  {15, errc::driver_error, "RSMI_STATUS_UNEXPECTED_DATA"},
  {16, errc::timeout, "RSMI_STATUS_BUSY"},
  {17, errc::driver_error, "RSMI_STATUS_REFCOUNT_OVERFLOW"},
  {0xFFFFFFFF, errc::driver_error, "RSMI_STATUS_UNKNOWN_ERROR"},
};

template <std::size_t N>
code_info look_up(const entry (&table)[N], std::int64_t value) noexcept {
  auto it = std::find_if(std::begin(table), std::end(table),
                         [value](const entry& e) { return e.value == value; });
  if (it == std::end(table))
    return {errc::driver_error, "unknown"};
  return {it->code, it->name};
}

} // namespace

const char* to_string(api which) noexcept {
  switch (which) {
    case api::cuda: return "CUDA";
    case api::hip: return "HIP";
    case api::nvml: return "NVML";
    case api::rocm_smi: return "rocm_smi";
  }
  return "unknown";
}

code_info classify(api which, std::int64_t code) noexcept {
  switch (which) {
    case api::cuda: return look_up(cuda_table, code);
    case api::hip: return look_up(hip_table, code);
    case api::nvml: return look_up(nvml_table, code);
    case api::rocm_smi: return look_up(rocm_smi_table, code);
  }
  return {errc::driver_error, "unknown"};
}

bool means_absent(api which, std::int64_t code) noexcept {
  switch (which) {
    case api::cuda:
      return code == 3 || code == 34 || code == 35 || code == 100
             || code == 802 || code == 803;
    case api::hip: return code == 3 || code == 35 || code == 100;
    case api::nvml: return code == 9 || code == 12 || code == 18;
    case api::rocm_smi: return code == 8 || code == 10;
  }
  return false;
}

error api_error(api which, const char* call, std::int64_t code,
                const char* description) {
  auto info = classify(which, code);
  std::string msg = std::string{call} + ": error " + std::to_string(code)
                    + " (" + info.name + ")";
  if (description != nullptr && *description != '\0')
    msg += std::string{": "} + description;
  return fail(info.code, std::move(msg));
}

error absent_error(api which, const char* call, std::int64_t code,
                   const char* description) {
  auto info = classify(which, code);
  std::string detail = std::string{call} + ": ";
  std::string head;
  if (which == api::cuda) {
    // The CUDA runtime's texts are informative; HIP's are terse names.
    head = code == 100 ? "no CUDA device" : "CUDA driver not found";
    detail += "error " + std::to_string(code) + ": "
              + (description != nullptr && *description != '\0'
                   ? std::string{description}
                   : std::string{info.name});
  } else if (which == api::hip) {
    head = code == 35 ? "ROCm driver not found" : "no ROCm device";
    detail += info.name;
    if (std::string{info.name} == "unknown")
      detail += " error " + std::to_string(code);
  } else {
    head = std::string{to_string(which)} + " not available";
    detail += info.name;
  }
  return fail(errc::no_device, head + " (" + detail + ")");
}

} // namespace exo::backend::gpu
