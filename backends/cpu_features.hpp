#pragma once

namespace exo::backend::host {

/// Whether the CPU has F16C (CPUID leaf 1, ECX bit 29); asked of CPUID
/// because clang's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() noexcept;

} // namespace exo::backend::host
