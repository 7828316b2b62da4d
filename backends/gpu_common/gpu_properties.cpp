#include "backends/gpu_common/gpu_properties.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace exo::backend::gpu {

std::string cuda_architecture(int major, int minor) {
  if (major <= 0 || minor < 0 || minor > 9)
    return {};
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

std::string hip_architecture(const std::string& gcn_arch_name) {
  auto base = gcn_arch_name.substr(0, gcn_arch_name.find(':'));
  if (base.size() <= 3 || base.compare(0, 3, "gfx") != 0)
    return {};
  for (auto c : base.substr(3))
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      return {};
  return base;
}

std::string format_pci_bus_id(const pci_address& a) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", a.domain, a.bus,
                a.device, a.function);
  return buf;
}

namespace {

/// Parses hex digits up to `stop` (or the end); advances pos.
std::optional<std::uint32_t> hex_field(const std::string& s, std::size_t& pos,
                                       char stop, std::size_t max_digits) {
  std::uint64_t v = 0;
  std::size_t digits = 0;
  while (pos < s.size() && s[pos] != stop) {
    auto c = static_cast<unsigned char>(s[pos]);
    if (!std::isxdigit(c) || ++digits > max_digits)
      return std::nullopt;
    v = v * 16 + static_cast<std::uint64_t>(
          std::isdigit(c) ? c - '0' : std::tolower(c) - 'a' + 10);
    ++pos;
  }
  if (digits == 0)
    return std::nullopt;
  return static_cast<std::uint32_t>(v);
}

} // namespace

std::optional<pci_address> parse_pci_bus_id(const std::string& text) {
  auto colons = std::count_if(text.begin(), text.end(),
                              [](char c) { return c == ':'; });
  if (colons != 1 && colons != 2)
    return std::nullopt;
  pci_address a;
  std::size_t pos = 0;
  if (colons == 2) {
    auto d = hex_field(text, pos, ':', 8);
    if (!d)
      return std::nullopt;
    a.domain = *d;
    ++pos;
  }
  auto bus = hex_field(text, pos, ':', 2);
  if (!bus || pos >= text.size())
    return std::nullopt;
  ++pos;
  auto dev = hex_field(text, pos, '.', 2);
  if (!dev || pos >= text.size() || *dev > 0x1f)
    return std::nullopt;
  ++pos;
  auto fn = hex_field(text, pos, '\0', 1);
  if (!fn || pos != text.size() || *fn > 7)
    return std::nullopt;
  a.bus = *bus;
  a.device = *dev;
  a.function = *fn;
  return a;
}

std::optional<std::string> normalize_pci_bus_id(const std::string& text) {
  auto a = parse_pci_bus_id(text);
  if (!a)
    return std::nullopt;
  return format_pci_bus_id(*a);
}

pci_address pci_address_from_bdfid(std::uint64_t id) {
  pci_address a;
  a.domain = static_cast<std::uint32_t>(id >> 32);
  a.bus = static_cast<std::uint32_t>((id >> 8) & 0xff);
  a.device = static_cast<std::uint32_t>((id >> 3) & 0x1f);
  a.function = static_cast<std::uint32_t>(id & 0x7);
  return a;
}

std::string format_uuid(const unsigned char (&b)[16]) {
  bool all_zero = true;
  for (auto x : b)
    all_zero = all_zero && x == 0;
  if (all_zero)
    return {};
  std::string out;
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      out += '-';
    std::snprintf(hex, sizeof(hex), "%02x", b[i]);
    out += hex;
  }
  return out;
}

std::string format_uuid(const char (&bytes)[16]) {
  unsigned char u[16];
  for (int i = 0; i < 16; ++i)
    u[i] = static_cast<unsigned char>(bytes[i]);
  return format_uuid(u);
}

std::optional<double> cuda_fp32_flops_per_clock(int major, int minor) {
  // FP32 lanes per SM x 2 (fused multiply-add).
  int lanes = 0;
  switch (major) {
    case 7: lanes = 64; break;                     // Volta, Turing
    case 8: lanes = minor == 0 ? 64 : 128; break;  // A100 vs. GA10x, Ada
    case 9: lanes = 128; break;                    // Hopper
    case 10: case 11: case 12: lanes = 128; break; // Blackwell
    default: return std::nullopt;
  }
  return 2.0 * lanes;
}

std::optional<double> hip_fp32_flops_per_clock(const std::string& arch) {
  if (arch == "gfx90a")
    return 256.0; // CDNA2: packed FP32
  if (arch.rfind("gfx94", 0) == 0 || arch.rfind("gfx95", 0) == 0
      || arch.rfind("gfx11", 0) == 0 || arch.rfind("gfx12", 0) == 0)
    return 256.0; // packed FP32 / dual issue
  if (arch.rfind("gfx9", 0) == 0 || arch.rfind("gfx10", 0) == 0
      || arch.rfind("gfx8", 0) == 0)
    return 128.0; // 64 lanes x FMA
  return std::nullopt;
}

std::optional<double> peak_flops(std::uint32_t units, std::uint32_t clock_mhz,
                                 std::optional<double> per_clock) {
  if (units == 0 || clock_mhz == 0 || !per_clock)
    return std::nullopt;
  return static_cast<double>(units) * clock_mhz * 1e6 * *per_clock;
}

std::optional<double> memory_bandwidth(std::uint32_t memory_clock_mhz,
                                       std::uint32_t bus_width_bits) {
  if (memory_clock_mhz == 0 || bus_width_bits == 0)
    return std::nullopt;
  return 2.0 * memory_clock_mhz * 1e6 * (bus_width_bits / 8.0);
}

} // namespace exo::backend::gpu
