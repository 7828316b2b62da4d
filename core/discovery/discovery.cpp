#include "core/discovery/discovery.hpp"

#include "core/text/json.hpp"

#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace exo::discovery {

using backend::errc;
using backend::fail;

backend::status verify_device(backend::device& dev) {
  constexpr std::size_t n = 64 * 1024;
  auto a = dev.allocate(n);
  if (!a)
    return fail(a.err().code, "verify: allocate: " + a.err().message);
  auto b = dev.allocate(n);
  if (!b)
    return fail(b.err().code, "verify: allocate: " + b.err().message);
  std::vector<std::uint8_t> pattern(n), back(n);
  for (std::size_t i = 0; i < n; ++i)
    pattern[i] = static_cast<std::uint8_t>(i * 131 + 7);
  if (auto s = dev.write(**a, 0, pattern.data(), n); !s)
    return fail(s.err().code, "verify: write: " + s.err().message);
  if (auto s = dev.copy(**a, 0, **b, 0, n); !s)
    return fail(s.err().code, "verify: copy: " + s.err().message);
  if (auto s = dev.synchronize(); !s)
    return fail(s.err().code, "verify: synchronize: " + s.err().message);
  if (auto s = dev.read(**b, 0, back.data(), n); !s)
    return fail(s.err().code, "verify: read: " + s.err().message);
  if (back != pattern)
    return fail(errc::driver_error,
                "verify: the copy round trip returned different bytes");
  return {};
}

// -- registry ----------------------------------------------------------------


const device_record* device_registry::find(const std::string& id) const {
  for (auto& r : records_)
    if (r.id == id)
      return &r;
  return nullptr;
}

void device_registry::update(const std::vector<device_record>& seen,
                             std::int64_t now) {
  for (auto rec : seen) {
    rec.device = nullptr;
    rec.last_seen = now;
    auto it = std::find_if(records_.begin(), records_.end(),
                           [&](auto& r) { return r.id == rec.id; });
    if (it != records_.end()) {
      rec.first_seen = it->first_seen;
      *it = rec;
    } else {
      rec.first_seen = now;
      records_.push_back(rec);
    }
  }
}

std::string device_registry::to_json() const {
  // One device per line: a file people read and diff.
  std::string out = "{\n  \"version\": 1,\n  \"devices\": [";
  for (std::size_t i = 0; i < records_.size(); ++i) {
    auto& r = records_[i];
    out += i ? ",\n    " : "\n    ";
    out += text::spaced({{"id", r.id},
                         {"backend", r.backend},
                         {"name", r.name},
                         {"vendor", r.vendor},
                         {"driver_version", r.driver_version},
                         {"total_memory", r.total_memory},
                         {"simulated", r.simulated},
                         {"verified", r.verified},
                         {"reason", r.reason},
                         {"verify_ms", r.verify_ms},
                         {"first_seen", r.first_seen},
                         {"last_seen", r.last_seen}});
  }
  out += "\n  ]\n}\n";
  return out;
}

device_registry device_registry::from_json(const std::string& json,
                                           std::string& error) {
  using namespace simdjson;
  device_registry reg;
  dom::parser parser;
  dom::element doc;
  if (auto e = parser.parse(json).get(doc)) {
    error = std::string{"not valid JSON: "} + error_message(e);
    return {};
  }
  int64_t version = 0;
  if (doc["version"].get_int64().get(version) || version != 1) {
    error = "unsupported registry version";
    return {};
  }
  dom::array arr;
  if (doc["devices"].get_array().get(arr)) {
    error = "\"devices\" must be an array";
    return {};
  }
  for (dom::element item : arr) {
    device_record r;
    std::string_view sv;
    auto str = [&](const char* key, std::string& out) {
      if (item[key].get_string().get(sv))
        return false;
      out = std::string{sv};
      return true;
    };
    uint64_t mem = 0;
    int64_t first = 0, last = 0;
    double ms = 0;
    bool sim = false, ok = false;
    if (!str("id", r.id) || !str("backend", r.backend) || !str("name", r.name)
        || !str("vendor", r.vendor)
        || !str("driver_version", r.driver_version)
        || !str("reason", r.reason) || item["total_memory"].get_uint64().get(mem)
        || item["simulated"].get_bool().get(sim)
        || item["verified"].get_bool().get(ok)
        || item["verify_ms"].get_double().get(ms)
        || item["first_seen"].get_int64().get(first)
        || item["last_seen"].get_int64().get(last) || r.id.empty()) {
      error = "a device record is incomplete or has wrong types";
      return {};
    }
    r.total_memory = mem;
    r.simulated = sim;
    r.verified = ok;
    r.verify_ms = ms;
    r.first_seen = first;
    r.last_seen = last;
    reg.records_.push_back(std::move(r));
  }
  return reg;
}

device_registry device_registry::load(const std::string& path,
                                      std::string& note) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return {};
  std::stringstream ss;
  ss << in.rdbuf();
  std::string error;
  auto reg = from_json(ss.str(), error);
  if (!error.empty()) {
    note = "ignored corrupt device registry " + path + ": " + error;
    return {};
  }
  return reg;
}

bool device_registry::save(const std::string& path, std::string& error) const {
  auto tmp = path + ".tmp";
  {
    std::ofstream out{tmp, std::ios::binary | std::ios::trunc};
    if (!out) {
      error = "cannot write " + tmp;
      return false;
    }
    out << to_json();
    out.flush();
    if (!out) {
      error = "cannot write " + tmp;
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot rename " + tmp + " to " + path;
    return false;
  }
  return true;
}

// -- discovery ---------------------------------------------------------------

discovery_result discover(backend::registry& reg, device_registry& registry,
                          bool warm) {
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  discovery_result out;
  out.warm = warm && !registry.empty();
  out.backends = reg.reports();
  for (auto* dev : reg.devices()) {
    auto& p = dev->properties();
    device_record r;
    r.id = p.id;
    r.backend = backend::to_string(p.kind);
    r.name = p.name;
    r.vendor = p.vendor;
    r.driver_version = p.driver_version;
    r.total_memory = p.total_memory;
    r.simulated = p.simulated;
    r.device = dev;
    auto t0 = clock::now();
    auto st = verify_device(*dev);
    r.verify_ms
      = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    r.verified = st.ok();
    if (!st.ok())
      r.reason = st.err().to_string();
    if (out.warm && registry.find(r.id) == nullptr)
      out.appeared.push_back(r.id);
    out.devices.push_back(std::move(r));
  }
  if (out.warm)
    for (auto& old : registry.records())
      if (std::none_of(out.devices.begin(), out.devices.end(),
                       [&](auto& r) { return r.id == old.id; }))
        out.disappeared.push_back(old.id);
  registry.update(out.devices, static_cast<std::int64_t>(std::time(nullptr)));
  out.elapsed_ms
    = std::chrono::duration<double, std::milli>(clock::now() - start).count();
  return out;
}

// -- rendering ---------------------------------------------------------------

namespace {

std::string human_bytes(std::uint64_t b) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  if (b >= (1ull << 30))
    out << double(b) / double(1ull << 30) << " GiB";
  else
    out << double(b) / double(1ull << 20) << " MiB";
  return out.str();
}

} // namespace

std::string format_table(const discovery_result& r) {
  std::ostringstream out;
  out << "Backends:\n";
  for (auto& b : r.backends) {
    out << "  " << std::left << std::setw(8) << backend::to_string(b.kind)
        << (b.active ? "active" : (b.built ? "present" : "absent")) << "  "
        << (b.active ? std::to_string(b.devices) + " device(s)" : "")
        << (b.reason.empty() ? "" : (b.active ? "  (" : "") + b.reason
                                      + (b.active ? ")" : ""))
        << "\n";
  }
  out << "Devices:\n";
  // Vulkan ids carry the 32-hex-digit device UUID: widen the column to fit.
  int id_width = 28;
  for (auto& d : r.devices)
    id_width = std::max(id_width, static_cast<int>(d.id.size()) + 2);
  out << "  " << std::left << std::setw(id_width) << "ID" << std::setw(8)
      << "BACKEND" << std::setw(12) << "MEMORY" << std::setw(10) << "STATUS"
      << "NAME\n";
  for (auto& d : r.devices) {
    out << "  " << std::left << std::setw(id_width) << d.id << std::setw(8)
        << d.backend << std::setw(12) << human_bytes(d.total_memory)
        << std::setw(10) << (d.verified ? "verified" : "FAILED") << d.name
        << (d.simulated && d.name.find("imulated") == std::string::npos
              ? " [simulated]"
              : "")
        << "\n";
    if (!d.verified)
      out << "    reason: " << d.reason << "\n";
  }
  for (auto& id : r.appeared)
    out << "  new since last start: " << id << "\n";
  for (auto& id : r.disappeared)
    out << "  gone since last start: " << id << "\n";
  if (!r.registry_note.empty())
    out << "  note: " << r.registry_note << "\n";
  out << std::fixed << std::setprecision(1) << "Discovery took "
      << r.elapsed_ms << " ms (" << (r.warm ? "warm" : "cold")
      << " registry)\n";
  return out.str();
}

std::string format_json(const discovery_result& r) {
  text::json backends = text::json::array();
  for (auto& b : r.backends)
    backends.push_back({{"name", backend::to_string(b.kind)},
                        {"built", b.built},
                        {"active", b.active},
                        {"devices", b.devices},
                        {"reason", b.reason}});
  text::json devices = text::json::array();
  for (auto& d : r.devices)
    devices.push_back({{"id", d.id},
                       {"backend", d.backend},
                       {"name", d.name},
                       {"vendor", d.vendor},
                       {"driver_version", d.driver_version},
                       {"total_memory", d.total_memory},
                       {"simulated", d.simulated},
                       {"verified", d.verified},
                       {"reason", d.reason},
                       {"verify_ms", d.verify_ms}});
  return text::spaced({{"backends", backends},
                       {"devices", devices},
                       {"appeared", r.appeared},
                       {"disappeared", r.disappeared},
                       {"warm", r.warm},
                       {"elapsed_ms", r.elapsed_ms}})
         + "\n";
}

} // namespace exo::discovery
