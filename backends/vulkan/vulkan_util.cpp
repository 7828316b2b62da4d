#include "backends/vulkan/vulkan_util.hpp"

#include <cstdio>

namespace exo::backend::vk {

const char* result_name(VkResult r) noexcept {
  switch (r) {
#define EXO_VK_NAME(x)                                                         \
  case x:                                                                      \
    return #x;
    EXO_VK_NAME(VK_SUCCESS)
    EXO_VK_NAME(VK_NOT_READY)
    EXO_VK_NAME(VK_TIMEOUT)
    EXO_VK_NAME(VK_EVENT_SET)
    EXO_VK_NAME(VK_EVENT_RESET)
    EXO_VK_NAME(VK_INCOMPLETE)
    EXO_VK_NAME(VK_ERROR_OUT_OF_HOST_MEMORY)
    EXO_VK_NAME(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    EXO_VK_NAME(VK_ERROR_INITIALIZATION_FAILED)
    EXO_VK_NAME(VK_ERROR_DEVICE_LOST)
    EXO_VK_NAME(VK_ERROR_MEMORY_MAP_FAILED)
    EXO_VK_NAME(VK_ERROR_LAYER_NOT_PRESENT)
    EXO_VK_NAME(VK_ERROR_EXTENSION_NOT_PRESENT)
    EXO_VK_NAME(VK_ERROR_FEATURE_NOT_PRESENT)
    EXO_VK_NAME(VK_ERROR_INCOMPATIBLE_DRIVER)
    EXO_VK_NAME(VK_ERROR_TOO_MANY_OBJECTS)
    EXO_VK_NAME(VK_ERROR_FORMAT_NOT_SUPPORTED)
    EXO_VK_NAME(VK_ERROR_FRAGMENTED_POOL)
    EXO_VK_NAME(VK_ERROR_UNKNOWN)
    EXO_VK_NAME(VK_ERROR_OUT_OF_POOL_MEMORY)
    EXO_VK_NAME(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    EXO_VK_NAME(VK_ERROR_FRAGMENTATION)
    EXO_VK_NAME(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
#undef EXO_VK_NAME
  default:
    return "VK_ERROR_(unnamed)";
  }
}

errc to_errc(VkResult r) noexcept {
  switch (r) {
  case VK_ERROR_OUT_OF_DEVICE_MEMORY:
  case VK_ERROR_OUT_OF_HOST_MEMORY:
    return errc::out_of_memory;
  case VK_ERROR_DEVICE_LOST:
    return errc::device_lost;
  default:
    return errc::driver_error;
  }
}

error to_error(VkResult r, const std::string& what) {
  std::string name = result_name(r);
  if (name == "VK_ERROR_(unnamed)")
    name = "VkResult " + std::to_string(static_cast<int>(r));
  return fail(to_errc(r), what + " failed: " + name);
}

std::string vendor_name(std::uint32_t id) {
  switch (id) {
  case 0x10DE:
    return "NVIDIA";
  case 0x1002:
    return "AMD";
  case 0x1022:
    return "AMD";
  case 0x8086:
    return "Intel";
  case 0x13B5:
    return "ARM";
  case 0x5143:
    return "Qualcomm";
  case 0x1010:
    return "Imagination";
  case 0x106B:
    return "Apple";
  case 0x14E4:
    return "Broadcom";
  case 0x10002:
    return "VeriSilicon";
  case 0x10003:
    return "Kazan";
  case 0x10004:
    return "Codeplay";
  case 0x10005:
    return "Mesa";
  case 0x10006:
    return "PoCL";
  case 0x10007:
    return "MoltenVK";
  default:
    break;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "vendor 0x%X", id);
  return buf;
}

const char* device_type_name(VkPhysicalDeviceType type) noexcept {
  switch (type) {
  case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
    return "discrete GPU";
  case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
    return "integrated GPU";
  case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
    return "virtual GPU";
  case VK_PHYSICAL_DEVICE_TYPE_CPU:
    return "CPU";
  default:
    return "other";
  }
}

} // namespace exo::backend::vk
