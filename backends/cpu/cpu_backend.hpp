#pragma once

/// The cpu backend: host memory, OpenBLAS for matrix products. Always
/// present; the fallback of every machine.

#include "backends/backend.hpp"

#include <memory>

namespace exo::backend {

/// Settings of the cpu backend.
struct cpu_options {
  /// Most bytes the cpu device may hand out; 0 means "what the OS reports
  /// available at allocation time".
  std::uint64_t memory_limit = 0;
};

std::unique_ptr<backend> make_cpu_backend(cpu_options opts = {});

} // namespace exo::backend
