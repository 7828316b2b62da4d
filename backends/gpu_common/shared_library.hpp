#pragma once

/// A shared library opened at run time (dlopen), so that exo's binaries
/// start and run on machines without it, and pay for its loading only when
/// it is used: the GPU management libraries (telemetry_loader) and cuBLAS
/// (whose static initializers copy hundreds of MB at every process start
/// when linked).

#include "backends/result.hpp"

#include <memory>
#include <string>
#include <vector>

namespace exo::backend::gpu {

/// An open shared library; dlclose on destruction (the image stays mapped).
class shared_library {
public:
  explicit shared_library(void* handle) : handle_(handle) {
  }
  shared_library(const shared_library&) = delete;
  shared_library& operator=(const shared_library&) = delete;
  ~shared_library();

  /// The symbol `name` as a function pointer of type F, or nullptr.
  template <class F>
  F symbol(const char* name) const {
    return reinterpret_cast<F>(raw_symbol(name));
  }

private:
  void* raw_symbol(const char* name) const;

  void* handle_;
};

/// dlopen (RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE: never unmapped) of the
/// first of `names` that loads, or
/// errc::unsupported naming `what` and every attempt with dlerror's reason.
result<std::unique_ptr<shared_library>>
open_first(const char* what, const std::vector<std::string>& names);

} // namespace exo::backend::gpu
