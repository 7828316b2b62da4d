#pragma once

/// The strict JSON reading shared by exo's declarative files (node configs,
/// scenarios): every key known, every value of the right type and range,
/// and every error naming the path of the bad value ("network.port: must
/// be an integer in [0, 65535], got 99999").
///
/// Errors are thrown as json_error; each file format's parse() catches it
/// and rethrows its own error type with the same text.

#include <simdjson.h>

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace exo::config::json {

using simdjson::dom::element;
using simdjson::dom::element_type;

class json_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Throws json_error "<path>: <what>".
[[noreturn]] void bad(const std::string& path, const std::string& what);

/// "a.b" from "a" and "b" ("b" from "" and "b").
std::string join(const std::string& path, const std::string& key);

/// "a[3]".
std::string at(const std::string& path, std::size_t i);

using handler = std::function<void(element, const std::string&)>;

/// Calls the handler of each key of the object `obj`; a key without a
/// handler is an error that lists the known ones.
void walk(element obj, const std::string& path,
          const std::map<std::string, handler>& handlers);

std::string as_string(element e, const std::string& path);
std::string as_nonempty_string(element e, const std::string& path);
bool as_bool(element e, const std::string& path);
/// An integer in [lo, hi].
std::int64_t as_integer(element e, const std::string& path, std::int64_t lo,
                        std::int64_t hi);
/// A number (integer or not) in [lo, hi].
double as_number(element e, const std::string& path, double lo, double hi);
/// A duration key counted in milliseconds (`heartbeat_ms`): an integer
/// count, or a string with a unit parsed by core/text/number ("1s",
/// "250ms", "2m"; a whole number of ms), in [lo, hi] ms.
std::int64_t as_milliseconds(element e, const std::string& path,
                             std::int64_t lo, std::int64_t hi);
/// As as_milliseconds, counted in seconds (`rescan_interval_s`: 3600, "1h").
std::int64_t as_seconds(element e, const std::string& path, std::int64_t lo,
                        std::int64_t hi);
/// A size key counted in MiB (`cpu_memory_limit_mib`): an integer count, or
/// a string with a unit ("64GiB", "512MiB"; a whole number of MiB), in
/// [lo, hi] MiB.
std::int64_t as_mebibytes(element e, const std::string& path, std::int64_t lo,
                          std::int64_t hi);
/// A size key counted in bytes (`max_node_message_bytes`): an integer
/// count, or a string with a unit ("64MiB", "1GiB"), in [lo, hi] bytes.
std::int64_t as_bytes(element e, const std::string& path, std::int64_t lo,
                      std::int64_t hi);
/// An array; `of` says of what, for the error.
simdjson::dom::array as_array(element e, const std::string& path,
                              const char* of);
/// An array of non-empty strings.
std::vector<std::string> as_string_list(element e, const std::string& path);

} // namespace exo::config::json
