#include "backends/vulkan/vulkan_backend.hpp"

#include "backends/vulkan/vulkan_device.hpp"
#include "backends/vulkan/vulkan_util.hpp"

#include <vulkan/vulkan.h>

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace exo::backend {

namespace {

/// Keeps the Vulkan drivers (ICDs, libvulkan_*.so) the loader opened loaded
/// for the rest of the process. The loader unloads them with the last
/// instance; their one-time allocations (Mesa's lavapipe: 128-512 bytes
/// under pthread_once) then show up in LeakSanitizer as leaks "in <unknown
/// module>" that nothing can name or suppress. Pinned, they stay reachable
/// (no report), and a backend created again does not reload the driver.
void pin_vulkan_drivers() {
  std::vector<std::string> names;
  dl_iterate_phdr(
    [](dl_phdr_info* info, std::size_t, void* out) -> int {
      const char* name = info->dlpi_name;
      if (name != nullptr && std::strstr(name, "/libvulkan_") != nullptr)
        static_cast<std::vector<std::string>*>(out)->push_back(name);
      return 0;
    },
    &names);
  for (auto& n : names)
    (void)dlopen(n.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

/// One VkInstance (API 1.2, no layers) and a device per usable physical
/// device.
class vulkan_backend final : public backend {
 public:
  explicit vulkan_backend(vulkan_options opts) : opts_(opts) {}

  ~vulkan_backend() override { shutdown(); }

  backend_kind kind() const override { return backend_kind::vulkan; }

  status initialize() override {
    if (instance_ != VK_NULL_HANDLE)
      return {};
    std::uint32_t version = 0;
    if (auto r = vkEnumerateInstanceVersion(&version); r != VK_SUCCESS)
      return vk::to_error(r, "Vulkan loader: vkEnumerateInstanceVersion");
    if (version < VK_API_VERSION_1_2)
      return fail(errc::unsupported,
                  "Vulkan loader: instance version " +
                      std::to_string(VK_API_VERSION_MAJOR(version)) + "." +
                      std::to_string(VK_API_VERSION_MINOR(version)) +
                      " is older than 1.2");
    std::uint32_t next = 0;
    vkEnumerateInstanceExtensionProperties(nullptr, &next, nullptr);
    std::vector<VkExtensionProperties> exts(next);
    vkEnumerateInstanceExtensionProperties(nullptr, &next, exts.data());
    std::vector<const char*> enabled;
    VkInstanceCreateInfo ici{};
    ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    for (auto& e : exts)
      if (std::strcmp(e.extensionName,
                      VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME) == 0) {
        // Lists devices of portability drivers (MoltenVK) too.
        enabled.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
        ici.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
      }
    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "exo";
    app.applicationVersion = VK_MAKE_API_VERSION(0, 0, 1, 0);
    app.pEngineName = "exo";
    app.engineVersion = VK_MAKE_API_VERSION(0, 0, 1, 0);
    app.apiVersion = VK_API_VERSION_1_2;
    ici.pApplicationInfo = &app;
    ici.enabledExtensionCount = static_cast<std::uint32_t>(enabled.size());
    ici.ppEnabledExtensionNames = enabled.data();
    if (auto r = vkCreateInstance(&ici, nullptr, &instance_); r != VK_SUCCESS) {
      instance_ = VK_NULL_HANDLE;
      auto err = vk::to_error(r, "Vulkan loader: vkCreateInstance");
      if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
        err.code = errc::no_device; // no driver (ICD) at all
      return err;
    }
    pin_vulkan_drivers();
    std::uint32_t count = 0;
    auto r = vkEnumeratePhysicalDevices(instance_, &count, nullptr);
    std::vector<VkPhysicalDevice> phys(count);
    if (r == VK_SUCCESS && count > 0)
      r = vkEnumeratePhysicalDevices(instance_, &count, phys.data());
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
      shutdown();
      return vk::to_error(r, "vkEnumeratePhysicalDevices");
    }
    phys.resize(count);
    if (phys.empty()) {
      shutdown();
      return fail(errc::no_device, "no Vulkan devices found");
    }
    std::string reasons;
    std::vector<std::string> taken;
    for (auto pd : phys) {
      auto dev = vk::open_device(pd, opts_, taken);
      if (!dev) {
        reasons += (reasons.empty() ? "" : "; ") + dev.err().message;
        continue;
      }
      taken.push_back((*dev)->properties().id);
      devices_.push_back(std::move(*dev));
    }
    if (devices_.empty()) {
      shutdown();
      return fail(errc::no_device, "no usable Vulkan device: " + reasons);
    }
    return {};
  }

  void shutdown() override {
    devices_.clear();
    if (instance_ != VK_NULL_HANDLE)
      vkDestroyInstance(instance_, nullptr);
    instance_ = VK_NULL_HANDLE;
  }

  std::size_t device_count() const override { return devices_.size(); }

  device* device_at(std::size_t index) override {
    return index < devices_.size() ? devices_[index].get() : nullptr;
  }

 private:
  vulkan_options opts_;
  VkInstance instance_ = VK_NULL_HANDLE;
  std::vector<std::unique_ptr<device>> devices_;
};

} // namespace

std::unique_ptr<backend> make_vulkan_backend(vulkan_options opts) {
  return std::make_unique<vulkan_backend>(opts);
}

} // namespace exo::backend
