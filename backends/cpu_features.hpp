#pragma once

namespace exo::backend::host {

/// Whether the CPU has F16C (CPUID leaf 1, ECX bit 29); asked of CPUID
/// because clang's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() noexcept;

/// Whether the CPU has CLFLUSHOPT (CPUID leaf 7, EBX bit 23): a cache
/// line flush that is not ordered against the others, so a run of them
/// pipelines (64 MiB here: 3 ms against 150 for CLFLUSH).
bool cpu_has_clflushopt() noexcept;

} // namespace exo::backend::host
