#include "backends/host_info.hpp"

#include <sys/utsname.h>

#include <dirent.h>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

namespace exo::backend::host_info {

namespace {

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\n");
  auto e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string{} : s.substr(b, e - b + 1);
}

/// The value of the first "key : value" line of /proc/cpuinfo.
std::string cpuinfo_field(const std::string& key) {
  std::ifstream in{"/proc/cpuinfo"};
  std::string line;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == key)
      return trim(line.substr(colon + 1));
  }
  return {};
}

std::uint64_t meminfo_kib(const std::string& key) {
  std::ifstream in{"/proc/meminfo"};
  std::string name;
  std::uint64_t value = 0;
  std::string unit;
  while (in >> name >> value) {
    std::getline(in, unit);
    if (name == key + ":")
      return value;
  }
  return 0;
}

std::optional<std::string> read_line(const std::string& path) {
  std::ifstream in{path};
  std::string s;
  if (!in || !std::getline(in, s))
    return std::nullopt;
  return trim(s);
}

} // namespace

cpu_identity read_cpu_identity() {
  cpu_identity id;
  id.model_name = cpuinfo_field("model name");
  if (id.model_name.empty())
    id.model_name = "host CPU";
  auto vendor = cpuinfo_field("vendor_id");
  if (vendor == "AuthenticAMD")
    id.vendor = "AMD";
  else if (vendor == "GenuineIntel")
    id.vendor = "Intel";
  else
    id.vendor = vendor.empty() ? "unknown" : vendor;
  utsname u{};
  if (uname(&u) == 0)
    id.architecture = u.machine;
  id.logical_cores = std::thread::hardware_concurrency();
  return id;
}

std::uint64_t total_memory() {
  return meminfo_kib("MemTotal") * 1024;
}

std::uint64_t available_memory() {
  return meminfo_kib("MemAvailable") * 1024;
}

std::optional<std::uint32_t> cpu_clock_mhz() {
  if (auto s = read_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"))
    return static_cast<std::uint32_t>(std::stoul(*s) / 1000);
  auto mhz = cpuinfo_field("cpu MHz");
  if (mhz.empty())
    return std::nullopt;
  return static_cast<std::uint32_t>(std::stod(mhz));
}

std::optional<double> cpu_temperature_c() {
  std::optional<double> best;
  DIR* dir = opendir("/sys/class/thermal");
  if (dir == nullptr)
    return std::nullopt;
  while (auto* ent = readdir(dir)) {
    std::string name = ent->d_name;
    if (name.rfind("thermal_zone", 0) != 0)
      continue;
    auto base = "/sys/class/thermal/" + name;
    auto type = read_line(base + "/type");
    auto temp = read_line(base + "/temp");
    if (!type || !temp)
      continue;
    if (type->find("pkg") == std::string::npos
        && type->find("cpu") == std::string::npos
        && type->find("k10temp") == std::string::npos
        && type->find("acpitz") == std::string::npos)
      continue;
    try {
      double c = std::stod(*temp) / 1000.0;
      if (!best || c > *best)
        best = c;
    } catch (...) {
    }
  }
  closedir(dir);
  return best;
}

std::optional<double> cpu_utilization() {
  static std::mutex mtx;
  static std::uint64_t last_busy = 0, last_total = 0;
  std::ifstream in{"/proc/stat"};
  std::string cpu;
  std::uint64_t v[8] = {};
  if (!(in >> cpu) || cpu != "cpu")
    return std::nullopt;
  for (auto& x : v)
    in >> x;
  std::uint64_t idle = v[3] + v[4];
  std::uint64_t total = 0;
  for (auto x : v)
    total += x;
  std::lock_guard<std::mutex> guard{mtx};
  auto dt = total - last_total;
  auto db = (total - idle) - last_busy;
  last_total = total;
  last_busy = total - idle;
  if (dt == 0)
    return 0.0;
  return static_cast<double>(db) / static_cast<double>(dt);
}

std::string kernel_release() {
  utsname u{};
  if (uname(&u) != 0)
    return "unknown";
  return std::string{u.sysname} + " " + u.release;
}

} // namespace exo::backend::host_info
