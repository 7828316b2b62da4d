#include "core/chat/value.hpp"

#include "core/chat/unicode.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace exo::chat {

// -- call_args and object -----------------------------------------------------

const value* call_args::find(std::string_view name) const {
  for (auto& [k, v] : keyword)
    if (k == name)
      return &v;
  return nullptr;
}

value* object::find(std::string_view key) {
  for (auto& [k, v] : entries)
    if (k == key)
      return &v;
  return nullptr;
}

const value* object::find(std::string_view key) const {
  for (auto& [k, v] : entries)
    if (k == key)
      return &v;
  return nullptr;
}

void object::set(const std::string& key, value v) {
  if (auto* slot = find(key))
    *slot = std::move(v);
  else
    entries.emplace_back(key, std::move(v));
}

// -- construction -------------------------------------------------------------

value value::none() {
  value v;
  v.kind_ = kind::none;
  return v;
}

value value::boolean(bool b) {
  value v;
  v.kind_ = kind::boolean;
  v.b_ = b;
  return v;
}

value value::integer(int64_t i) {
  value v;
  v.kind_ = kind::integer;
  v.i_ = i;
  return v;
}

value value::floating(double d) {
  value v;
  v.kind_ = kind::floating;
  v.d_ = d;
  return v;
}

value value::string(std::string s) {
  value v;
  v.kind_ = kind::string;
  v.s_ = std::move(s);
  return v;
}

namespace {

/// Depth and reference flag of a container of `items`; throws
/// std::length_error past max_value_depth.
template<class Range, class Get>
std::pair<std::uint32_t, bool> measure(const Range& items, Get get) {
  std::uint32_t depth = 0;
  bool refs = false;
  for (auto& item : items) {
    const value& v = get(item);
    depth = std::max(depth, v.depth());
    refs = refs || v.holds_references();
  }
  if (depth + 1 > max_value_depth)
    throw std::length_error("values nest deeper than " +
                            std::to_string(max_value_depth) + " levels");
  return {depth + 1, refs};
}

} // namespace

value value::make_array(array items, bool tuple) {
  value v;
  v.kind_ = tuple ? kind::tuple : kind::array;
  auto [depth, refs] =
      measure(items, [](const value& x) -> const value& { return x; });
  v.depth_ = depth;
  v.refs_ = refs;
  v.arr_ = std::make_shared<array>(std::move(items));
  return v;
}

value value::make_object(object obj) {
  value v;
  v.kind_ = kind::object;
  auto [depth, refs] = measure(
      obj.entries, [](const auto& e) -> const value& { return e.second; });
  obj.depth = depth;
  v.refs_ = refs;
  v.obj_ = std::make_shared<object>(std::move(obj));
  return v;
}

value value::make_namespace(object obj) {
  value v;
  v.kind_ = kind::name_space;
  auto [depth, refs] = measure(
      obj.entries, [](const auto& e) -> const value& { return e.second; });
  if (refs)
    throw std::invalid_argument("a namespace cannot hold a namespace or a "
                                "function, nor a list or mapping with one");
  obj.depth = depth;
  v.obj_ = std::make_shared<object>(std::move(obj));
  return v;
}

std::uint32_t value::depth() const noexcept {
  if (obj_)
    return obj_->depth;
  return depth_;
}

value value::make_function(function fn) {
  value v;
  v.kind_ = kind::function;
  v.fn_ = std::make_shared<function>(std::move(fn));
  return v;
}

namespace {

/// Whether `key` is a canonical array index ("0", "17", not "01").
bool is_array_index(const std::string& key, uint64_t& out) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0'))
    return false;
  uint64_t n = 0;
  for (char c : key) {
    if (c < '0' || c > '9')
      return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (n >= 4294967295ULL)
    return false;
  out = n;
  return true;
}

} // namespace

value value::from_json(const nlohmann::ordered_json& j) {
  using t = nlohmann::ordered_json::value_t;
  switch (j.type()) {
  case t::null:
  case t::discarded:
    return none();
  case t::boolean:
    return boolean(j.get<bool>());
  case t::number_integer:
    return integer(j.get<int64_t>());
  case t::number_unsigned: {
    auto u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX))
      return floating(static_cast<double>(u));
    return integer(static_cast<int64_t>(u));
  }
  case t::number_float: {
    auto d = j.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.2e18)
      return integer(static_cast<int64_t>(d));
    return floating(d);
  }
  case t::string:
    return string(j.get<std::string>());
  case t::array: {
    array items;
    items.reserve(j.size());
    for (auto& e : j)
      items.push_back(from_json(e));
    return make_array(std::move(items));
  }
  case t::object: {
    std::vector<std::pair<uint64_t, std::string>> indexed;
    std::vector<std::string> named;
    for (auto it = j.begin(); it != j.end(); ++it) {
      uint64_t n = 0;
      if (is_array_index(it.key(), n))
        indexed.emplace_back(n, it.key());
      else
        named.push_back(it.key());
    }
    std::sort(indexed.begin(), indexed.end());
    object obj;
    for (auto& [n, key] : indexed)
      obj.set(key, from_json(j.at(key)));
    for (auto& key : named)
      obj.set(key, from_json(j.at(key)));
    return make_object(std::move(obj));
  }
  case t::binary:
    break;
  }
  throw std::invalid_argument("unsupported JSON value (binary)");
}

// -- inspection ---------------------------------------------------------------

const void* value::identity() const noexcept {
  if (arr_)
    return arr_.get();
  if (obj_)
    return obj_.get();
  if (fn_)
    return fn_.get();
  return nullptr;
}

bool value::truthy() const {
  switch (kind_) {
  case kind::undefined:
  case kind::none:
    return false;
  case kind::boolean:
    return b_;
  case kind::integer:
    return i_ != 0;
  case kind::floating:
    return d_ != 0 && !std::isnan(d_);
  case kind::string:
    return !s_.empty();
  case kind::array:
  case kind::tuple:
    return !arr_->empty();
  case kind::object:
    return !obj_->entries.empty();
  case kind::name_space:
  case kind::function:
    return true;
  }
  return false;
}

const char* value::type_name() const noexcept {
  switch (kind_) {
  case kind::undefined:
    return "undefined";
  case kind::none:
    return "none";
  case kind::boolean:
    return "boolean";
  case kind::integer:
    return "integer";
  case kind::floating:
    return "float";
  case kind::string:
    return "string";
  case kind::array:
    return "array";
  case kind::tuple:
    return "tuple";
  case kind::object:
    return "object";
  case kind::name_space:
    return "namespace";
  case kind::function:
    return "function";
  }
  return "value";
}

// -- printing -----------------------------------------------------------------

std::string js_number(double d) {
  if (std::isnan(d))
    return "NaN";
  if (std::isinf(d))
    return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0)
    return "0";
  // Shortest round-trip digits and the decimal exponent.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(d),
                           std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  auto e_pos = sci.find('e');
  std::string digits;
  for (std::size_t i = 0; i < e_pos; ++i)
    if (sci[i] != '.')
      digits += sci[i];
  int exp10 = std::atoi(sci.c_str() + e_pos + 1);
  int k = static_cast<int>(digits.size());
  int n = exp10 + 1; // position of the decimal point
  std::string out = d < 0 ? "-" : "";
  if (k <= n && n <= 21) {
    out += digits + std::string(static_cast<std::size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<std::size_t>(n)) + "." +
           digits.substr(static_cast<std::size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(static_cast<std::size_t>(-n), '0') + digits;
  } else {
    out += digits.substr(0, 1);
    if (k > 1)
      out += "." + digits.substr(1);
    out += "e";
    out += (n - 1 >= 0) ? "+" : "-";
    out += std::to_string(std::abs(n - 1));
  }
  return out;
}

namespace {

std::string float_output(double d) {
  if (d == 0 && std::signbit(d))
    return "-0.0";
  if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 1e21) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.1f", d);
    return buf;
  }
  return js_number(d);
}

void append_json_string(std::string& out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (c < 0x20) {
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
      } else {
        out += ch;
      }
    }
  }
  out += '"';
}

/// Escapes every UTF-16 unit >= 0x7F as \uXXXX (ensure_ascii).
std::string ascii_safe(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  auto unit = [&](unsigned u) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4)
      out += hex[(u >> shift) & 15];
  };
  for (std::size_t i = 0; i < s.size();) {
    auto c = unicode::decode(s, i);
    if (c < 0x7F) {
      out += static_cast<char>(c);
    } else if (c < 0x10000) {
      unit(c);
    } else {
      auto v = c - 0x10000;
      unit(0xD800 + (v >> 10));
      unit(0xDC00 + (v & 0x3FF));
    }
  }
  return out;
}

bool locale_less(const std::string& a, const std::string& b) {
  auto la = unicode::to_lower(a);
  auto lb = unicode::to_lower(b);
  if (la != lb)
    return la < lb;
  return a > b; // lower case first, as a collation would
}

void write_json(std::string& out, const value& v, const json_options& opts,
                int depth) {
  using k = value::kind;
  if (depth > max_json_depth)
    throw std::invalid_argument("values nest deeper than " +
                                std::to_string(max_json_depth) +
                                " levels (a circular reference?)");
  if (out.size() > opts.max_bytes)
    throw std::length_error("JSON text exceeds " +
                            std::to_string(opts.max_bytes) + " bytes");
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  if (opts.has_separators) {
    item_sep = opts.item_separator;
    key_sep = opts.key_separator;
  } else if (opts.indent > 0) {
    item_sep = ",";
  }
  switch (v.type()) {
  case k::none:
    out += "null";
    return;
  case k::undefined:
    out += opts.undefined_as_null ? "null" : "undefined";
    return;
  case k::boolean:
    out += v.as_bool() ? "true" : "false";
    return;
  case k::integer:
    out += std::to_string(v.as_int());
    return;
  case k::floating:
    out += std::isfinite(v.as_double()) ? js_number(v.as_double()) : "null";
    return;
  case k::string:
    if (opts.ensure_ascii) {
      std::string tmp;
      append_json_string(tmp, v.as_string());
      out += ascii_safe(tmp);
    } else {
      append_json_string(out, v.as_string());
    }
    return;
  case k::array:
  case k::tuple:
  case k::object:
  case k::name_space: {
    std::string indent_unit(static_cast<std::size_t>(std::max(0, opts.indent)),
                            ' ');
    std::string base = "\n";
    for (int i = 0; i < depth; ++i)
      base += indent_unit;
    std::string child = base + indent_unit;
    bool pretty = opts.indent > 0;
    if (v.is_array()) {
      auto& items = v.items();
      out += '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0)
          out += item_sep;
        if (pretty)
          out += child;
        write_json(out, items[i], opts, depth + 1);
      }
      if (pretty && !items.empty())
        out += base;
      out += ']';
      return;
    }
    std::vector<const std::pair<std::string, value>*> entries;
    for (auto& e : v.fields().entries)
      entries.push_back(&e);
    if (opts.sort_keys)
      std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) {
        return locale_less(a->first, b->first);
      });
    out += '{';
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i > 0)
        out += item_sep;
      if (pretty)
        out += child;
      if (opts.ensure_ascii) {
        std::string tmp;
        append_json_string(tmp, entries[i]->first);
        out += ascii_safe(tmp);
      } else {
        append_json_string(out, entries[i]->first);
      }
      out += key_sep;
      write_json(out, entries[i]->second, opts, depth + 1);
    }
    if (pretty && !entries.empty())
      out += base;
    out += '}';
    return;
  }
  case k::function:
    break;
  }
  throw std::invalid_argument("cannot convert a function to JSON");
}

} // namespace

std::string to_json(const value& v, const json_options& opts) {
  std::string out;
  write_json(out, v, opts, 0);
  if (out.size() > opts.max_bytes)
    throw std::length_error("JSON text exceeds " +
                            std::to_string(opts.max_bytes) + " bytes");
  return out;
}

std::string to_output(const value& v, std::size_t max_bytes) {
  using k = value::kind;
  switch (v.type()) {
  case k::undefined:
  case k::none:
    return "";
  case k::boolean:
    return v.as_bool() ? "true" : "false";
  case k::integer:
    return std::to_string(v.as_int());
  case k::floating:
    return float_output(v.as_double());
  case k::string:
    return v.as_string();
  case k::array:
  case k::tuple:
  case k::object:
  case k::name_space: {
    json_options opts;
    opts.undefined_as_null = false;
    opts.max_bytes = max_bytes;
    return to_json(v, opts);
  }
  case k::function:
    return "[function " + v.fn().name + "]";
  }
  return "";
}

std::string to_concat(const value& v) {
  using k = value::kind;
  switch (v.type()) {
  case k::undefined:
    return "undefined";
  case k::none:
    return "null";
  case k::floating:
    return js_number(v.as_double());
  case k::array:
  case k::tuple: {
    std::string out;
    for (std::size_t i = 0; i < v.items().size(); ++i)
      out += i == 0 ? "[object Object]" : ",[object Object]";
    return out;
  }
  case k::object:
  case k::name_space:
    return "[object Map]";
  default:
    return to_output(v);
  }
}

// -- equality -----------------------------------------------------------------

namespace {

double js_to_number(const value& v) {
  using k = value::kind;
  switch (v.type()) {
  case k::boolean:
    return v.as_bool() ? 1 : 0;
  case k::integer:
  case k::floating:
    return v.as_double();
  case k::string: {
    auto t = std::string(unicode::trim(v.as_string()));
    if (t.empty())
      return 0;
    if (t == "Infinity" || t == "+Infinity")
      return HUGE_VAL;
    if (t == "-Infinity")
      return -HUGE_VAL;
    for (char c : t)
      if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' ||
            c == 'e' || c == 'E' || c == '+' || c == '-' || c == 'x' ||
            c == 'X' || std::isxdigit(static_cast<unsigned char>(c))))
        return NAN;
    char* end = nullptr;
    double d = std::strtod(t.c_str(), &end);
    return (end == t.c_str() + t.size()) ? d : NAN;
  }
  default:
    return NAN;
  }
}

bool is_container(const value& v) {
  return v.is_array() || v.is_mapping_like() || v.is(value::kind::function);
}

} // namespace

bool strict_equal(const value& a, const value& b) {
  using k = value::kind;
  if (a.is_number() && b.is_number())
    return a.as_double() == b.as_double();
  if (is_container(a) || is_container(b))
    return a.identity() == b.identity() && a.identity() != nullptr;
  if (a.type() != b.type())
    return false;
  switch (a.type()) {
  case k::undefined:
  case k::none:
    return true;
  case k::boolean:
    return a.as_bool() == b.as_bool();
  case k::string:
    return a.as_string() == b.as_string();
  default:
    return false;
  }
}

bool loose_equal(const value& a, const value& b) {
  bool an = a.is_undefined() || a.is_none();
  bool bn = b.is_undefined() || b.is_none();
  if (an || bn)
    return an && bn;
  if (is_container(a) || is_container(b))
    return a.identity() == b.identity();
  if (a.is_string() && b.is_string())
    return a.as_string() == b.as_string();
  if (a.is(value::kind::boolean) && b.is(value::kind::boolean))
    return a.as_bool() == b.as_bool();
  return js_to_number(a) == js_to_number(b);
}

} // namespace exo::chat
