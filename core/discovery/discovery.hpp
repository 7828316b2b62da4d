#pragma once

/// Discovery: every device the backends offer is verified (allocate, copy
/// round trip, synchronize, free) before it is offered; the results are kept
/// in a persistent registry (JSON in the node's state directory) keyed by the
/// device's stable id, so a restart notices devices that appeared or
/// disappeared.

#include "backends/factory/factory.hpp"
#include "core/text/json_escape.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace exo::discovery {

/// One device as discovery saw it.
struct device_record {
  std::string id;
  std::string backend;
  std::string name;
  std::string vendor;
  std::string driver_version;
  std::uint64_t total_memory = 0;
  bool simulated = false;
  bool verified = false;
  std::string reason;          ///< why verification failed
  double verify_ms = 0;
  std::int64_t first_seen = 0; ///< unix seconds
  std::int64_t last_seen = 0;
  backend::device* device = nullptr; ///< live device (not persisted)
};

/// The outcome of one discovery pass.
struct discovery_result {
  std::vector<device_record> devices;         ///< in priority order
  std::vector<backend::backend_report> backends;
  std::vector<std::string> appeared;    ///< ids not in the registry before
  std::vector<std::string> disappeared; ///< ids in the registry, gone now
  bool warm = false;                    ///< a registry was loaded
  std::string registry_note;            ///< e.g. why a registry was ignored
  double elapsed_ms = 0;
};

/// Allocates, writes a pattern, copies it within the device, reads it back,
/// synchronizes and frees. An error value says what failed.
backend::status verify_device(backend::device& dev);

/// The persistent registry: the last known record of every device.
class device_registry {
public:
  /// Loads `path`; a missing file is an empty registry, a corrupt one is
  /// ignored with a note (never fatal).
  static device_registry load(const std::string& path, std::string& note);

  /// Writes atomically (temp file + rename). Returns false with `error` set.
  bool save(const std::string& path, std::string& error) const;

  const std::vector<device_record>& records() const noexcept {
    return records_;
  }
  const device_record* find(const std::string& id) const;
  bool empty() const noexcept {
    return records_.empty();
  }

  /// Merges a pass's records, keeping first_seen of known devices.
  void update(const std::vector<device_record>& seen, std::int64_t now);

  /// Serialises to / parses from JSON (exposed for tests).
  std::string to_json() const;
  static device_registry from_json(const std::string& json,
                                   std::string& error);

private:
  std::vector<device_record> records_;
};

/// Runs discovery over the devices of `reg`, verifying each, comparing with
/// and updating `registry`.
discovery_result discover(backend::registry& reg, device_registry& registry,
                          bool warm);

/// Human-readable and JSON renderings of a discovery result.
std::string format_table(const discovery_result& r);
std::string format_json(const discovery_result& r);

using text::json_escape;

} // namespace exo::discovery
