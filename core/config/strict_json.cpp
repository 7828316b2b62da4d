#include "core/config/strict_json.hpp"

#include "core/text/number.hpp"

#include <cstdint>
#include <sstream>

namespace exo::config::json {

namespace {

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

} // namespace

void bad(const std::string& path, const std::string& what) {
  throw json_error(path + ": " + what);
}

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string at(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

void walk(element obj, const std::string& path,
          const std::map<std::string, handler>& handlers) {
  simdjson::dom::object fields;
  if (obj.type() != element_type::OBJECT || obj.get_object().get(fields))
    bad(path.empty() ? "<document>" : path, "must be an object");
  for (auto field : fields) {
    std::string key{field.key};
    auto it = handlers.find(key);
    if (it == handlers.end()) {
      std::string known;
      for (auto& [k, _] : handlers)
        known += (known.empty() ? "" : ", ") + k;
      bad(join(path, key), "unknown key (expected one of: " + known + ")");
    }
    it->second(field.value, join(path, key));
  }
}

std::string as_string(element e, const std::string& path) {
  std::string_view sv;
  if (e.type() != element_type::STRING || e.get_string().get(sv))
    bad(path, "must be a string");
  return std::string{sv};
}

std::string as_nonempty_string(element e, const std::string& path) {
  auto s = as_string(e, path);
  if (s.empty())
    bad(path, "must not be empty");
  return s;
}

bool as_bool(element e, const std::string& path) {
  bool b = false;
  if (e.type() != element_type::BOOL || e.get_bool().get(b))
    bad(path, "must be true or false");
  return b;
}

std::int64_t as_integer(element e, const std::string& path, std::int64_t lo,
                        std::int64_t hi) {
  auto range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  std::int64_t v = 0;
  if (e.type() == element_type::INT64)
    v = e.get_int64().value_unsafe();
  else if (e.type() == element_type::UINT64)
    bad(path, "must be an integer in " + range + ", got "
                + std::to_string(e.get_uint64().value_unsafe()));
  else
    bad(path, "must be an integer in " + range);
  if (v < lo || v > hi)
    bad(path, "must be an integer in " + range + ", got " + std::to_string(v));
  return v;
}

double as_number(element e, const std::string& path, double lo, double hi) {
  double v = 0;
  switch (e.type()) {
    case element_type::INT64: v = double(e.get_int64().value_unsafe()); break;
    case element_type::UINT64: v = double(e.get_uint64().value_unsafe()); break;
    case element_type::DOUBLE: v = e.get_double().value_unsafe(); break;
    default: bad(path, "must be a number in [" + fmt(lo) + ", " + fmt(hi) + "]");
  }
  if (!(v >= lo && v <= hi))
    bad(path, "must be a number in [" + fmt(lo) + ", " + fmt(hi) + "], got "
                + fmt(v));
  return v;
}

namespace {

/// A unit-counted key given as a string: `parse` gives the count (or throws
/// number_error), checked against [lo, hi] with `fmt` naming the bounds.
template <class Parse, class Format>
std::int64_t counted_string(element e, const std::string& path,
                            std::int64_t lo, std::int64_t hi, Parse parse,
                            Format fmt, const char* integer_of) {
  if (e.type() != element_type::STRING)
    return as_integer(e, path, lo, hi);
  auto text = as_string(e, path);
  auto range = "[" + fmt(lo) + ", " + fmt(hi) + "]";
  std::int64_t v = 0;
  try {
    v = parse(text);
  } catch (const exo::text::number_error& err) {
    bad(path, "must be an integer in [" + std::to_string(lo) + ", "
                + std::to_string(hi) + "] (" + integer_of
                + ") or a string with a unit in " + range + ": " + err.what());
  }
  if (v < lo || v > hi)
    bad(path, "must be in " + range + ", got \"" + text.substr(0, 64)
                + "\"");
  return v;
}

std::string ms_text(std::int64_t v) {
  return exo::text::format_duration(std::chrono::milliseconds{v});
}

std::string s_text(std::int64_t v) {
  return exo::text::format_duration(std::chrono::seconds{v});
}

std::string mib_text(std::int64_t v) {
  return exo::text::format_size(static_cast<std::uint64_t>(v) << 20);
}

} // namespace

std::int64_t as_milliseconds(element e, const std::string& path,
                             std::int64_t lo, std::int64_t hi) {
  return counted_string(
    e, path, lo, hi,
    [](const std::string& t) {
      return static_cast<std::int64_t>(
        exo::text::parse_duration_as<std::chrono::milliseconds>(t).count());
    },
    ms_text, "milliseconds");
}

std::int64_t as_seconds(element e, const std::string& path, std::int64_t lo,
                        std::int64_t hi) {
  return counted_string(
    e, path, lo, hi,
    [](const std::string& t) {
      return static_cast<std::int64_t>(
        exo::text::parse_duration_as<std::chrono::seconds>(t).count());
    },
    s_text, "seconds");
}

std::int64_t as_mebibytes(element e, const std::string& path,
                          std::int64_t lo, std::int64_t hi) {
  return counted_string(
    e, path, lo, hi,
    [](const std::string& t) -> std::int64_t {
      auto bytes = exo::text::parse_size(t);
      if (bytes % (1u << 20) != 0)
        throw exo::text::number_error("'" + t.substr(0, 64)
                                      + "' is not a whole number of MiB");
      return static_cast<std::int64_t>(bytes >> 20);
    },
    mib_text, "MiB");
}

std::int64_t as_bytes(element e, const std::string& path, std::int64_t lo,
                      std::int64_t hi) {
  return counted_string(
    e, path, lo, hi,
    [](const std::string& t) -> std::int64_t {
      auto bytes = exo::text::parse_size(t);
      if (bytes > static_cast<std::uint64_t>(INT64_MAX))
        throw exo::text::number_error("'" + t.substr(0, 64)
                                      + "' is too large");
      return static_cast<std::int64_t>(bytes);
    },
    [](std::int64_t v) {
      return exo::text::format_size(static_cast<std::uint64_t>(v));
    },
    "bytes");
}

simdjson::dom::array as_array(element e, const std::string& path,
                              const char* of) {
  simdjson::dom::array items;
  if (e.type() != element_type::ARRAY || e.get_array().get(items))
    bad(path, std::string{"must be an array of "} + of);
  return items;
}

std::vector<std::string> as_string_list(element e, const std::string& path) {
  std::vector<std::string> out;
  std::size_t i = 0;
  for (auto item : as_array(e, path, "strings"))
    out.push_back(as_nonempty_string(item, at(path, i++)));
  return out;
}

} // namespace exo::config::json
