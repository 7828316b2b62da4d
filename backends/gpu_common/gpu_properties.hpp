#pragma once

/// Parsing and formatting of GPU properties shared by the CUDA and HIP
/// backends: architecture names, PCI bus ids, UUIDs, peak FLOP/s estimates.
/// Plain C++, tested without a GPU.

#include <cstdint>
#include <optional>
#include <string>

namespace exo::backend::gpu {

/// "sm_90" for compute capability 9.0; empty for a nonsensical capability.
std::string cuda_architecture(int major, int minor);

/// The base target of an AMD gcnArchName: "gfx90a:sramecc+:xnack-" ->
/// "gfx90a". Empty when the name does not start with "gfx".
std::string hip_architecture(const std::string& gcn_arch_name);

/// A PCI address in the canonical form "0000:65:00.0" (lower-case hex,
/// domain at least four digits).
struct pci_address {
  std::uint32_t domain = 0;
  std::uint32_t bus = 0;
  std::uint32_t device = 0;
  std::uint32_t function = 0;
};

/// Formats an address as "dddd:bb:dd.f".
std::string format_pci_bus_id(const pci_address& addr);

/// Parses "domain:bus:device.function" (any domain width, as CUDA's
/// "0000:65:00.0" and NVML's "00000000:65:00.0") or "bus:device.function".
std::optional<pci_address> parse_pci_bus_id(const std::string& text);

/// The canonical form of a bus id, so that ids from different libraries
/// compare equal; nullopt when it does not parse.
std::optional<std::string> normalize_pci_bus_id(const std::string& text);

/// Decodes rocm_smi's BDFID: domain << 32 | bus << 8 | device << 3 | fn.
pci_address pci_address_from_bdfid(std::uint64_t bdfid);

/// Formats 16 UUID bytes as "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". Empty
/// when all bytes are zero (the runtime did not report one).
std::string format_uuid(const unsigned char (&bytes)[16]);
std::string format_uuid(const char (&bytes)[16]);

/// FP32 FLOPs per clock of one NVIDIA SM (an FMA counts as two), where
/// known for that compute capability.
std::optional<double> cuda_fp32_flops_per_clock(int major, int minor);

/// FP32 FLOPs per clock of one AMD compute unit, where known for that target
/// ("gfx90a": packed FP32 doubles the rate).
std::optional<double> hip_fp32_flops_per_clock(const std::string& arch);

/// units x clock x per_clock, or nullopt where an input is unknown or zero.
std::optional<double> peak_flops(std::uint32_t units, std::uint32_t clock_mhz,
                                 std::optional<double> per_clock);

/// Memory bandwidth in bytes/s from the memory clock and bus width (double
/// data rate), or nullopt where an input is zero.
std::optional<double> memory_bandwidth(std::uint32_t memory_clock_mhz,
                                       std::uint32_t bus_width_bits);

} // namespace exo::backend::gpu
