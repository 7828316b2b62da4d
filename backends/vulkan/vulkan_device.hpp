#pragma once

/// One Vulkan physical device opened as an exo device (see vulkan_device.cpp
/// for how the queue, batches and memory work).

#include "backends/backend.hpp"
#include "backends/vulkan/vulkan_backend.hpp"

#include <vulkan/vulkan.h>

#include <memory>
#include <string>
#include <vector>

namespace exo::backend::vk {

/// Opens `physical` (its VkInstance must outlive the device). An error says
/// why it cannot be used: too old, no compute queue, no timeline semaphores,
/// or the driver refused. `taken_ids` are the ids of devices opened before:
/// a device whose UUID repeats one of them gets a "#n" suffix.
result<std::unique_ptr<device>>
open_device(VkPhysicalDevice physical, const vulkan_options& opts,
            const std::vector<std::string>& taken_ids);

} // namespace exo::backend::vk
