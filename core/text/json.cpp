#include "core/text/json.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace exo::text {

namespace {

std::string dump(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

void write_spaced(std::string& out, const json& v) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto& [key, value] : v.items()) {
      if (!first)
        out += ", ";
      first = false;
      out += dump(json(key));
      out += ": ";
      write_spaced(out, value);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0)
        out += ", ";
      write_spaced(out, v[i]);
    }
    out += ']';
  } else {
    out += dump(v);
  }
}

} // namespace

double round_significant(double v, int digits) {
  if (!std::isfinite(v))
    return v;
  char b[64];
  std::snprintf(b, sizeof(b), "%.*g", digits, v);
  return std::strtod(b, nullptr);
}

json number(double v, int digits) {
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 9.0e15)
    return static_cast<std::int64_t>(v);
  return round_significant(v, digits);
}

std::string compact(const json& v) {
  return dump(v);
}

std::string spaced(const json& v) {
  std::string out;
  write_spaced(out, v);
  return out;
}

} // namespace exo::text
