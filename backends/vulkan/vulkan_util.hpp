#pragma once

/// Small helpers of the Vulkan backend: VkResult names and their mapping to
/// error values.

#include "backends/result.hpp"

#include <vulkan/vulkan.h>

#include <string>

namespace exo::backend::vk {

/// The name of a VkResult ("VK_ERROR_DEVICE_LOST").
const char* result_name(VkResult r) noexcept;

/// The error code a VkResult maps to: out_of_memory for the two
/// out-of-memory results, device_lost, driver_error for the rest.
errc to_errc(VkResult r) noexcept;

/// An error value "<what> failed: <VkResult name>".
error to_error(VkResult r, const std::string& what);

/// A human name for a PCI vendor id ("NVIDIA", "Mesa", ...).
std::string vendor_name(std::uint32_t vendor_id);

/// A human name for a device type ("discrete GPU", "CPU", ...).
const char* device_type_name(VkPhysicalDeviceType type) noexcept;

} // namespace exo::backend::vk
