#include "backends/gpu_common/shared_library.hpp"

#include <dlfcn.h>

#include <mutex>

namespace exo::backend::gpu {

shared_library::~shared_library() {
  if (handle_ != nullptr)
    dlclose(handle_);
}

void* shared_library::raw_symbol(const char* name) const {
  return dlsym(handle_, name);
}

result<std::unique_ptr<shared_library>>
open_first(const char* what, const std::vector<std::string>& names) {
  std::string tried;
  // dlerror() is process-global; serialize our use of it.
  static std::mutex mtx;
  std::lock_guard<std::mutex> guard{mtx};
  for (auto& name : names) {
    dlerror();
    // RTLD_NODELETE: a vendor library is never unmapped. Unloading one
    // (cuBLAS links its own libstdc++) leaves memory that its static
    // initializers allocated pointing into nothing, and its atexit work
    // would run from an unmapped image.
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE))
      return std::make_unique<shared_library>(h);
    const char* why = dlerror();
    if (!tried.empty())
      tried += "; ";
    tried += "dlopen " + name + ": " + (why != nullptr ? why : "failed");
  }
  if (names.empty())
    tried = "no library names given";
  return fail(errc::unsupported,
              std::string{what} + " not available (" + tried + ")");
}

} // namespace exo::backend::gpu
