// The filters (`x | name`, `x | name(args)`), as the reference renderer
// (@huggingface/jinja) dispatches them: by name first for tojson, join,
// int, float and default, then by the operand's kind.

#include "core/chat/builtins.hpp"
#include "core/chat/interpreter.hpp"
#include "core/chat/unicode.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace exo::chat {

namespace {

value arg(const call_args& args, std::size_t i, const char* keyword) {
  if (i < args.positional.size())
    return args.positional[i];
  if (keyword != nullptr)
    if (auto* v = args.find(keyword))
      return *v;
  return value{};
}

/// JavaScript's parseInt(s, 10): leading whitespace, a sign, digits.
bool parse_int(const std::string& s, int64_t& out) {
  auto t = unicode::trim_start(s);
  std::size_t i = 0;
  bool negative = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-'))
    negative = t[i++] == '-';
  std::size_t start = i;
  int64_t v = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') {
    if (v > (INT64_MAX - 9) / 10)
      return false;
    v = v * 10 + (t[i] - '0');
    ++i;
  }
  if (i == start)
    return false;
  out = negative ? -v : v;
  return true;
}

/// JavaScript's parseFloat(s) (decimal forms and Infinity).
bool parse_float(const std::string& s, double& out) {
  auto t = std::string(unicode::trim_start(s));
  std::size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-'))
    ++i;
  if (t.compare(i, 8, "Infinity") == 0) {
    out = t[0] == '-' ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  std::size_t digits = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
    ++i;
    ++digits;
  }
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
      ++i;
      ++digits;
    }
  }
  if (digits == 0)
    return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    std::size_t j = i + 1;
    if (j < t.size() && (t[j] == '+' || t[j] == '-'))
      ++j;
    if (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) {
      while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j])))
        ++j;
      i = j;
    }
  }
  out = std::strtod(t.substr(0, i).c_str(), nullptr);
  return true;
}

/// How Array.prototype.join shows one raw value.
std::string join_part(const value& v) {
  if (v.is_undefined() || v.is_none())
    return "";
  return to_concat(v);
}

std::string indent(const std::string& s, const std::string& pad, bool first,
                   bool blank, std::size_t max_bytes) {
  std::string out;
  std::size_t start = 0;
  bool is_first = true;
  while (true) {
    auto nl = s.find('\n', start);
    auto line = s.substr(start, nl == std::string::npos ? std::string::npos
                                                        : nl - start);
    bool skip = (!first && is_first) || (!blank && line.empty());
    if (!skip)
      out += pad;
    out += line;
    if (out.size() > max_bytes)
      throw std::length_error("indent result exceeds " +
                              std::to_string(max_bytes) + " bytes");
    if (nl == std::string::npos)
      break;
    out += '\n';
    start = nl + 1;
    is_first = false;
  }
  return out;
}

} // namespace

value interpreter::apply_filter(const node& at, const value& operand,
                                const node& filter, const env_ptr& env) {
  using k = value::kind;
  bool is_call = filter.kind == node_kind::call;
  const std::string& name = is_call ? filter.a->name : filter.name;
  call_args args;
  if (is_call)
    args = eval_args(filter.args, env);
  auto unknown = [&]() -> value {
    fail(at, "unknown filter '" + name + "' for a " + operand.type_name());
  };

  // -- by name, whatever the operand ----------------------------------------
  if (name == "safe")
    return operand;
  if (name == "tojson") {
    json_options opts;
    auto ind = arg(args, 0, "indent");
    if (ind.is(k::integer))
      opts.indent = static_cast<int>(std::clamp<int64_t>(ind.as_int(), 0, 64));
    else if (!ind.is_undefined() && !ind.is_none())
      fail(at, "tojson: indent must be an integer");
    auto ascii = arg(args, 99, "ensure_ascii");
    if (ascii.is(k::boolean))
      opts.ensure_ascii = ascii.as_bool();
    else if (!ascii.is_undefined())
      fail(at, "tojson: ensure_ascii must be a boolean");
    auto sort = arg(args, 99, "sort_keys");
    if (sort.is(k::boolean))
      opts.sort_keys = sort.as_bool();
    else if (!sort.is_undefined())
      fail(at, "tojson: sort_keys must be a boolean");
    auto seps = arg(args, 99, "separators");
    if (seps.is_array()) {
      auto& s = seps.items();
      if (s.size() != 2 || !s[0].is_string() || !s[1].is_string())
        fail(at, "tojson: separators must be two strings");
      opts.has_separators = true;
      opts.item_separator = s[0].as_string();
      opts.key_separator = s[1].as_string();
    } else if (!seps.is_undefined() && !seps.is_none()) {
      fail(at, "tojson: separators must be two strings");
    }
    return value::string(json_text(at, operand, opts));
  }
  if (name == "default") {
    auto fallback = arg(args, 0, "default_value");
    if (fallback.is_undefined())
      fallback = value::string("");
    auto flag = arg(args, 1, "boolean");
    bool boolean = false;
    if (flag.is(k::boolean))
      boolean = flag.as_bool();
    else if (!flag.is_undefined())
      fail(at, "default: the boolean flag must be a boolean");
    if (operand.is_undefined() || (boolean && !operand.truthy()))
      return fallback;
    return operand;
  }
  if (is_call && name == "join") {
    auto sep = arg(args, 0, "d");
    if (sep.is_undefined())
      sep = arg(args, 99, "separator");
    if (sep.is_undefined())
      sep = value::string("");
    if (!sep.is_string())
      fail(at, "join: the separator must be a string");
    std::string out;
    if (operand.is_string()) {
      auto points = unicode::code_points(operand.as_string());
      for (std::size_t i = 0; i < points.size(); ++i) {
        if (i > 0)
          out += sep.as_string();
        out += points[i];
        check_size(at, out);
      }
    } else if (operand.is_array()) {
      auto& items = operand.items();
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0)
          out += sep.as_string();
        out += join_part(items[i]);
        check_size(at, out);
      }
    } else {
      return unknown();
    }
    return value::string(std::move(out));
  }
  if (is_call && (name == "int" || name == "float")) {
    auto fallback = arg(args, 0, "default");
    if (fallback.is_undefined())
      fallback = name == "int" ? value::integer(0) : value::floating(0);
    if (operand.is_string()) {
      if (name == "int") {
        int64_t v = 0;
        return parse_int(operand.as_string(), v) ? value::integer(v) : fallback;
      }
      double d = 0;
      return parse_float(operand.as_string(), d) ? value::floating(d)
                                                 : fallback;
    }
    if (operand.is_number())
      return operand;
    if (operand.is(k::boolean))
      return name == "int" ? value::integer(operand.as_bool() ? 1 : 0)
                           : value::floating(operand.as_bool() ? 1 : 0);
    return unknown();
  }

  // -- by the operand's kind --------------------------------------------------
  if (operand.is_array()) {
    auto& items = operand.items();
    if (!is_call) {
      if (name == "list")
        return operand;
      if (name == "first")
        return items.empty() ? value{} : items.front();
      if (name == "last")
        return items.empty() ? value{} : items.back();
      if (name == "length" || name == "count")
        return value::integer(static_cast<int64_t>(items.size()));
      if (name == "reverse")
        return value::make_array(array(items.rbegin(), items.rend()));
      if (name == "join") {
        std::string out;
        for (auto& item : items) {
          out += join_part(item);
          check_size(at, out);
        }
        return value::string(std::move(out));
      }
      if (name == "string") {
        json_options opts;
        opts.undefined_as_null = false;
        return value::string(json_text(at, operand, opts));
      }
      if (name == "unique") {
        array out;
        for (auto& item : items) {
          bool seen = std::any_of(out.begin(), out.end(), [&](auto& x) {
            return strict_equal(x, item);
          });
          if (!seen)
            out.push_back(item);
        }
        return value::make_array(std::move(out));
      }
      if (name != "sort")
        return unknown();
    }
    if (name == "sort") {
      auto rev = arg(args, 0, "reverse");
      auto cs = arg(args, 1, "case_sensitive");
      auto attr = arg(args, 2, "attribute");
      bool reverse = rev.is(k::boolean) && rev.as_bool();
      bool case_sensitive = cs.is(k::boolean) && cs.as_bool();
      std::string path;
      if (attr.is_string())
        path = attr.as_string();
      else if (attr.is(k::integer))
        path = std::to_string(attr.as_int());
      array out = items;
      std::stable_sort(
          out.begin(), out.end(), [&](const value& a, const value& b) {
            auto x = path.empty() ? a : builtins::attribute_path(a, path);
            auto y = path.empty() ? b : builtins::attribute_path(b, path);
            int r = builtins::compare(*this, x, y, case_sensitive);
            return reverse ? r > 0 : r < 0;
          });
      return value::make_array(std::move(out));
    }
    if (name == "selectattr" || name == "rejectattr") {
      bool select = name == "selectattr";
      for (auto& item : items)
        if (!item.is_mapping_like())
          fail(at, name + " works only on a list of mappings");
      for (auto& a : filter.args)
        if (a->kind != node_kind::string)
          fail(at, name + " takes string literal arguments");
      if (args.positional.empty())
        fail(at, name + " needs an attribute name");
      auto attr = args.positional[0].as_string();
      std::string test = args.positional.size() > 1
                             ? args.positional[1].as_string()
                             : std::string();
      if (!test.empty() && !builtins::has_test(test))
        fail(at, "unknown test '" + test + "'");
      value other = args.positional.size() > 2 ? args.positional[2] : value{};
      array out;
      for (auto& item : items) {
        auto* v = item.fields().find(attr);
        bool r = false;
        if (v != nullptr)
          r = test.empty() ? v->truthy()
                           : builtins::run_test(*this, test, *v, &other);
        if (r == select)
          out.push_back(item);
      }
      return value::make_array(std::move(out));
    }
    if (name == "map") {
      auto* attr = args.find("attribute");
      if (attr == nullptr)
        fail(at, "map is supported only with attribute=...");
      if (!attr->is_string())
        fail(at, "map: attribute must be a string");
      auto* fallback = args.find("default");
      array out;
      for (auto& item : items) {
        if (!item.is_mapping_like())
          fail(at, "map: the items must be mappings");
        auto v = builtins::attribute_path(item, attr->as_string());
        out.push_back(v.is_undefined() && fallback != nullptr ? *fallback : v);
      }
      return value::make_array(std::move(out));
    }
    return unknown();
  }
  if (operand.is_string()) {
    auto& s = operand.as_string();
    if (name == "indent") {
      auto width = arg(args, 0, "width");
      std::string pad(4, ' ');
      if (width.is(k::integer))
        pad.assign(static_cast<std::size_t>(
                       std::clamp<int64_t>(width.as_int(), 0, 1024)),
                   ' ');
      else if (width.is_string())
        pad = width.as_string();
      else if (!width.is_undefined())
        fail(at, "indent: width must be an integer");
      auto first = arg(args, 1, "first");
      auto blank = arg(args, 2, "blank");
      try {
        return value::string(indent(s, pad, first.truthy(), blank.truthy(),
                                    limits_.max_output_bytes));
      } catch (const std::length_error& e) {
        fail(at, e.what(), error_kind::limit);
      }
    }
    if (name == "replace") {
      auto method = builtins::string_member(operand, "replace");
      return method.fn().call(*this, args, env);
    }
    if (is_call)
      return unknown();
    if (name == "length")
      return value::integer(static_cast<int64_t>(unicode::utf16_length(s)));
    if (name == "upper" || name == "lower" || name == "title" ||
        name == "capitalize") {
      auto method = builtins::string_member(operand, name);
      call_args none;
      return method.fn().call(*this, none, env);
    }
    if (name == "trim")
      return value::string(std::string(unicode::trim(s)));
    if (name == "indent")
      try {
        return value::string(
            indent(s, "    ", false, false, limits_.max_output_bytes));
      } catch (const std::length_error& e) {
        fail(at, e.what(), error_kind::limit);
      }
    if (name == "join" || name == "string")
      return operand;
    if (name == "int") {
      int64_t v = 0;
      return value::integer(parse_int(s, v) ? v : 0);
    }
    if (name == "float") {
      double d = 0;
      return value::floating(parse_float(s, d) ? d : 0);
    }
    if (name == "first" || name == "last") {
      auto points = unicode::code_points(s);
      if (points.empty())
        return value{};
      return value::string(
          std::string(name == "first" ? points.front() : points.back()));
    }
    return unknown();
  }
  if (operand.is_number()) {
    if (is_call)
      return unknown();
    if (name == "abs")
      return operand.is(k::integer)
                 ? value::integer(operand.as_int() < 0 ? -operand.as_int()
                                                       : operand.as_int())
                 : value::floating(std::fabs(operand.as_double()));
    if (name == "int") {
      if (operand.is(k::integer))
        return operand;
      double f = std::floor(operand.as_double());
      if (!std::isfinite(f) || std::fabs(f) >= 9.2e18)
        fail(at, "int: the number does not fit an integer");
      return value::integer(static_cast<int64_t>(f));
    }
    if (name == "float")
      return value::floating(operand.as_double());
    if (name == "string")
      return value::string(to_output(operand));
    return unknown();
  }
  if (operand.is(k::object)) {
    if (!is_call && name == "items") {
      array out;
      for (auto& [key, v] : operand.fields().entries)
        out.push_back(value::make_array({value::string(key), v}));
      return value::make_array(std::move(out));
    }
    if (!is_call && name == "length")
      return value::integer(
          static_cast<int64_t>(operand.fields().entries.size()));
    auto method = builtins::object_member(operand, name);
    if (method.is(k::function))
      return method.fn().call(*this, args, env);
    return unknown();
  }
  if (operand.is(k::boolean) && !is_call) {
    if (name == "bool")
      return operand;
    if (name == "int")
      return value::integer(operand.as_bool() ? 1 : 0);
    if (name == "float")
      return value::floating(operand.as_bool() ? 1 : 0);
    if (name == "string")
      return value::string(operand.as_bool() ? "true" : "false");
  }
  return unknown();
}

} // namespace exo::chat
