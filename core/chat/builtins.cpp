#include "core/chat/builtins.hpp"

#include "core/chat/unicode.hpp"

#include <algorithm>
#include <ctime>
#include <stdexcept>
#include <utility>

namespace exo::chat::builtins {

namespace {

[[noreturn]] void fail(interpreter& in, const std::string& what) {
  in.fail(in.current(), what);
}

using method = value (*)(interpreter&, const std::string&, call_args&);

value bound(const std::string& name, const std::string& self, method m) {
  function fn;
  fn.name = name;
  fn.call = [self, m](interpreter& in, call_args& args, const env_ptr&) {
    return m(in, self, args);
  };
  return value::make_function(std::move(fn));
}

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_';
}

value arg(call_args& args, std::size_t i, const char* keyword) {
  if (i < args.positional.size())
    return args.positional[i];
  if (keyword != nullptr)
    if (auto* v = args.find(keyword))
      return *v;
  return value{};
}

value starts_or_ends(interpreter& in, const std::string& self, call_args& args,
                     bool starts) {
  const char* name = starts ? "startswith" : "endswith";
  if (args.positional.empty())
    fail(in, std::string(name) + "() needs an argument");
  auto test = [&](const std::string& p) {
    if (p.size() > self.size())
      return false;
    return starts ? self.compare(0, p.size(), p) == 0
                  : self.compare(self.size() - p.size(), p.size(), p) == 0;
  };
  auto& pattern = args.positional[0];
  if (pattern.is_string())
    return value::boolean(test(pattern.as_string()));
  if (pattern.is_array()) {
    for (auto& item : pattern.items()) {
      if (!item.is_string())
        fail(in, std::string(name) + "() tuple elements must be strings");
      if (test(item.as_string()))
        return value::boolean(true);
    }
    return value::boolean(false);
  }
  fail(in, std::string(name) + "() needs a string or a tuple of strings");
}

value split(interpreter& in, const std::string& self, call_args& args) {
  auto sep = arg(args, 0, "sep");
  auto maxsplit_v = arg(args, 1, "maxsplit");
  if (!(sep.is_string() || sep.is_none() || sep.is_undefined()))
    fail(in, "split(): the separator must be a string or none");
  int64_t maxsplit = -1;
  if (!maxsplit_v.is_undefined()) {
    if (!maxsplit_v.is(value::kind::integer))
      fail(in, "split(): maxsplit must be an integer");
    maxsplit = maxsplit_v.as_int();
  }
  array out;
  if (!sep.is_string()) {
    auto text = unicode::trim_start(self);
    std::size_t i = 0;
    while (i < text.size()) {
      while (auto n = unicode::space_at(text, i))
        i += n;
      if (i >= text.size())
        break;
      auto start = i;
      while (i < text.size() && unicode::space_at(text, i) == 0)
        unicode::decode(text, i);
      if (maxsplit != -1 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(value::string(std::string(text.substr(start))));
        break;
      }
      out.push_back(value::string(std::string(text.substr(start, i - start))));
      in.check_items(in.current(), out.size());
    }
    return value::make_array(std::move(out));
  }
  auto& s = sep.as_string();
  if (s.empty())
    fail(in, "split(): empty separator");
  std::size_t start = 0;
  while (true) {
    bool limited =
        maxsplit != -1 && static_cast<int64_t>(out.size()) >= maxsplit;
    auto hit = limited ? std::string::npos : self.find(s, start);
    if (hit == std::string::npos) {
      out.push_back(value::string(self.substr(start)));
      break;
    }
    out.push_back(value::string(self.substr(start, hit - start)));
    in.check_items(in.current(), out.size());
    start = hit + s.size();
  }
  return value::make_array(std::move(out));
}

value replace_method(interpreter& in, const std::string& self,
                     call_args& args) {
  if (args.positional.size() < 2)
    fail(in, "replace() needs two arguments");
  auto& a = args.positional[0];
  auto& b = args.positional[1];
  if (!a.is_string() || !b.is_string())
    fail(in, "replace() arguments must be strings");
  auto count = arg(args, 2, "count");
  int64_t n = -1;
  if (count.is(value::kind::integer))
    n = count.as_int();
  else if (!count.is_none() && !count.is_undefined())
    fail(in, "replace(): count must be an integer or none");
  try {
    return value::string(replace(self, a.as_string(), b.as_string(), n,
                                 in.limit().max_output_bytes));
  } catch (const std::length_error& e) {
    in.fail(in.current(), e.what(), error_kind::limit);
  }
}

std::string title(const std::string& s) {
  std::string out = s;
  for (std::size_t i = 0; i < out.size(); ++i) {
    bool boundary = i == 0 || !is_word(out[i - 1]);
    if (boundary && out[i] >= 'a' && out[i] <= 'z')
      out[i] = static_cast<char>(out[i] - 32);
  }
  return out;
}

std::string capitalize(const std::string& s) {
  if (s.empty())
    return s;
  std::size_t i = 0;
  auto c = unicode::decode(s, i);
  std::string out;
  unicode::append_upper(out, c);
  out += s.substr(i);
  return out;
}

value object_get(interpreter& in, const value& self, call_args& args) {
  auto key = arg(args, 0, nullptr);
  if (!key.is_string())
    fail(in,
         std::string("object key must be a string, got ") + key.type_name());
  if (auto* v = self.fields().find(key.as_string()))
    return *v;
  if (args.positional.size() > 1)
    return args.positional[1];
  return value::none();
}

value items_of(const value& self) {
  array out;
  for (auto& [k, v] : self.fields().entries)
    out.push_back(value::make_array({value::string(k), v}));
  return value::make_array(std::move(out));
}

value dictsort(interpreter& in, const value& self, call_args& args) {
  auto cs = arg(args, 0, "case_sensitive");
  auto by = arg(args, 1, "by");
  auto rev = arg(args, 2, "reverse");
  bool case_sensitive = false;
  bool by_value = false;
  bool reverse = false;
  if (!cs.is_undefined()) {
    if (!cs.is(value::kind::boolean))
      fail(in, "dictsort: case_sensitive must be a boolean");
    case_sensitive = cs.as_bool();
  }
  if (!by.is_undefined()) {
    if (!by.is_string() ||
        (by.as_string() != "key" && by.as_string() != "value"))
      fail(in, "dictsort: by must be 'key' or 'value'");
    by_value = by.as_string() == "value";
  }
  if (!rev.is_undefined()) {
    if (!rev.is(value::kind::boolean))
      fail(in, "dictsort: reverse must be a boolean");
    reverse = rev.as_bool();
  }
  auto pairs = items_of(self);
  auto& list = pairs.items();
  std::stable_sort(list.begin(), list.end(),
                   [&](const value& a, const value& b) {
                     auto& x = a.items()[by_value ? 1 : 0];
                     auto& y = b.items()[by_value ? 1 : 0];
                     int r = compare(in, x, y, case_sensitive);
                     return reverse ? r > 0 : r < 0;
                   });
  return pairs;
}

value object_method(const std::string& name, const value& self) {
  function fn;
  fn.name = name;
  fn.call = [name, self](interpreter& in, call_args& args,
                         const env_ptr&) -> value {
    if (name == "get")
      return object_get(in, self, args);
    if (name == "items")
      return items_of(self);
    if (name == "keys") {
      array out;
      for (auto& e : self.fields().entries)
        out.push_back(value::string(e.first));
      return value::make_array(std::move(out));
    }
    if (name == "values") {
      array out;
      for (auto& e : self.fields().entries)
        out.push_back(e.second);
      return value::make_array(std::move(out));
    }
    return dictsort(in, self, args);
  };
  return value::make_function(std::move(fn));
}

value make_namespace(interpreter& in, call_args& args) {
  if (args.positional.size() > 1)
    fail(in, "namespace() takes at most one positional argument");
  object entries;
  if (args.positional.size() == 1) {
    auto& src = args.positional[0];
    if (src.is(value::kind::object)) {
      for (auto& [k, v] : src.fields().entries)
        entries.set(k, v);
    } else if (src.is_array()) {
      for (auto& pair : src.items()) {
        if (!pair.is_array() || pair.items().size() != 2 ||
            !pair.items()[0].is_string())
          fail(in, "namespace() expects a mapping or [key, value] pairs");
        entries.set(pair.items()[0].as_string(), pair.items()[1]);
      }
    } else {
      fail(in, std::string("namespace(): a ") + src.type_name() +
                   " is not iterable");
    }
  }
  for (auto& [k, v] : args.keyword)
    entries.set(k, v);
  return value::make_namespace(std::move(entries));
}

value range_fn(interpreter& in, call_args& args) {
  if (!args.keyword.empty())
    fail(in, "range() takes no keyword arguments");
  auto& p = args.positional;
  if (p.empty() || p.size() > 3)
    fail(in, "range() takes one to three integer arguments");
  for (auto& v : p)
    if (!v.is(value::kind::integer))
      fail(in, std::string("range() needs integers, got ") + v.type_name());
  int64_t start = 0;
  int64_t stop = p[0].as_int();
  int64_t step = 1;
  if (p.size() >= 2) {
    start = p[0].as_int();
    stop = p[1].as_int();
  }
  if (p.size() == 3)
    step = p[2].as_int();
  if (step == 0)
    fail(in, "range() step must not be zero");
  // Count first so that a huge range is refused before it is built.
  long double span = step > 0 ? static_cast<long double>(stop) - start
                              : static_cast<long double>(start) - stop;
  long double count =
      span <= 0 ? 0
                : (span + std::abs(static_cast<long double>(step)) - 1) /
                      std::abs(static_cast<long double>(step));
  if (count > static_cast<long double>(in.limit().max_items))
    in.check_items(in.current(), in.limit().max_items + 1);
  array out;
  auto n = static_cast<std::size_t>(count);
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(value::integer(start + static_cast<int64_t>(i) * step));
  return value::make_array(std::move(out));
}

std::string strftime_now(const std::string& format) {
  static const char* months_long[] = {
      "January", "February", "March",     "April",   "May",      "June",
      "July",    "August",   "September", "October", "November", "December"};
  static const char* months_short[] = {"Jan", "Feb", "Mar", "Apr",
                                       "May", "Jun", "Jul", "Aug",
                                       "Sep", "Oct", "Nov", "Dec"};
  auto now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  auto pad2 = [](int n) { return (n < 10 ? "0" : "") + std::to_string(n); };
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out += format[i];
      continue;
    }
    char c = format[i + 1];
    switch (c) {
    case 'Y':
      out += std::to_string(tm.tm_year + 1900);
      break;
    case 'm':
      out += pad2(tm.tm_mon + 1);
      break;
    case 'd':
      out += pad2(tm.tm_mday);
      break;
    case 'b':
      out += months_short[tm.tm_mon];
      break;
    case 'B':
      out += months_long[tm.tm_mon];
      break;
    case 'H':
      out += pad2(tm.tm_hour);
      break;
    case 'M':
      out += pad2(tm.tm_min);
      break;
    case '%':
      out += '%';
      break;
    default:
      out += '%';
      out += c;
    }
    ++i;
  }
  return out;
}

value global(const char* name, value (*body)(interpreter&, call_args&)) {
  function fn;
  fn.name = name;
  fn.call = [body](interpreter& in, call_args& args, const env_ptr&) {
    return body(in, args);
  };
  return value::make_function(std::move(fn));
}

} // namespace

value string_at(const std::string& s, int64_t index) {
  auto len = static_cast<int64_t>(unicode::utf16_length(s));
  if (index < 0)
    index += len;
  if (index < 0 || index >= len)
    return value{};
  int64_t unit = 0;
  for (std::size_t i = 0; i < s.size();) {
    auto start = i;
    auto c = unicode::decode(s, i);
    int64_t width = c >= 0x10000 ? 2 : 1;
    if (index < unit + width) {
      if (width == 2) // half of a surrogate pair
        return value::string("\xEF\xBF\xBD");
      return value::string(s.substr(start, i - start));
    }
    unit += width;
  }
  return value{};
}

std::string replace(const std::string& s, const std::string& old_value,
                    const std::string& new_value, int64_t count,
                    std::size_t max_bytes) {
  if (count == 0)
    return s;
  auto remaining = count < 0 ? INT64_MAX : count;
  std::string out;
  auto check = [&] {
    if (out.size() > max_bytes)
      throw std::length_error("replace() result exceeds " +
                              std::to_string(max_bytes) + " bytes");
  };
  if (old_value.empty()) {
    auto points = unicode::code_points(s);
    for (std::size_t i = 0; i <= points.size(); ++i) {
      if (remaining > 0) {
        out += new_value;
        --remaining;
        check();
      }
      if (i < points.size())
        out += points[i];
    }
    return out;
  }
  std::size_t start = 0;
  while (remaining > 0) {
    auto hit = s.find(old_value, start);
    if (hit == std::string::npos)
      break;
    out.append(s, start, hit - start);
    out += new_value;
    check();
    start = hit + old_value.size();
    --remaining;
  }
  out.append(s, start, std::string::npos);
  return out;
}

value string_member(const value& s, const std::string& name) {
  auto& self = s.as_string();
  if (name == "length")
    return value::integer(static_cast<int64_t>(unicode::utf16_length(self)));
  if (name == "upper")
    return bound(name, self,
                 [](interpreter&, const std::string& x, call_args&) {
                   return value::string(unicode::to_upper(x));
                 });
  if (name == "lower")
    return bound(name, self,
                 [](interpreter&, const std::string& x, call_args&) {
                   return value::string(unicode::to_lower(x));
                 });
  // The reference ignores the characters argument of strip/lstrip/rstrip
  // and always strips whitespace; so does exo, to render identically.
  if (name == "strip")
    return bound(name, self,
                 [](interpreter&, const std::string& x, call_args&) {
                   return value::string(std::string(unicode::trim(x)));
                 });
  if (name == "lstrip")
    return bound(name, self,
                 [](interpreter&, const std::string& x, call_args&) {
                   return value::string(std::string(unicode::trim_start(x)));
                 });
  if (name == "rstrip")
    return bound(name, self,
                 [](interpreter&, const std::string& x, call_args&) {
                   return value::string(std::string(unicode::trim_end(x)));
                 });
  if (name == "title")
    return bound(name, self,
                 [](interpreter&, const std::string& x, call_args&) {
                   return value::string(title(x));
                 });
  if (name == "capitalize")
    return bound(name, self,
                 [](interpreter&, const std::string& x, call_args&) {
                   return value::string(capitalize(x));
                 });
  if (name == "startswith")
    return bound(name, self,
                 [](interpreter& in, const std::string& x, call_args& a) {
                   return starts_or_ends(in, x, a, true);
                 });
  if (name == "endswith")
    return bound(name, self,
                 [](interpreter& in, const std::string& x, call_args& a) {
                   return starts_or_ends(in, x, a, false);
                 });
  if (name == "split")
    return bound(name, self, split);
  if (name == "replace")
    return bound(name, self, replace_method);
  return value{};
}

value object_member(const value& obj, const std::string& name) {
  if (name == "get" || name == "items" || name == "keys" || name == "values" ||
      name == "dictsort")
    return object_method(name, obj);
  return value{};
}

void add_globals(environment& env) {
  env.set("true", value::boolean(true));
  env.set("false", value::boolean(false));
  env.set("none", value::none());
  env.set("True", value::boolean(true));
  env.set("False", value::boolean(false));
  env.set("None", value::none());
  env.set("namespace", global("namespace", make_namespace));
  env.set("range", global("range", range_fn));
  env.set(
      "raise_exception",
      global("raise_exception", [](interpreter& in, call_args& args) -> value {
        std::string message = args.positional.empty()
                                  ? "undefined"
                                  : to_concat(args.positional[0]);
        in.fail(in.current(), message, error_kind::raised);
      }));
  env.set("strftime_now",
          global("strftime_now", [](interpreter& in, call_args& args) {
            if (args.positional.empty() || !args.positional[0].is_string())
              fail(in, "strftime_now() needs a format string");
            return value::string(strftime_now(args.positional[0].as_string()));
          }));
}

namespace {

const char* const test_names[] = {
    "boolean",  "callable",  "odd",      "even",   "false",
    "true",     "none",      "string",   "number", "integer",
    "iterable", "mapping",   "sequence", "lower",  "upper",
    "defined",  "undefined", "equalto",  "eq"};

} // namespace

bool has_test(const std::string& name) {
  return std::find(std::begin(test_names), std::end(test_names), name) !=
         std::end(test_names);
}

bool run_test(interpreter& in, const std::string& name, const value& v,
              const value* other) {
  using k = value::kind;
  if (name == "boolean")
    return v.is(k::boolean);
  if (name == "callable")
    return v.is(k::function);
  if (name == "odd" || name == "even") {
    if (!v.is(k::integer))
      fail(in, "cannot test " + name + " on a " + v.type_name());
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "false")
    return v.is(k::boolean) && !v.as_bool();
  if (name == "true")
    return v.is(k::boolean) && v.as_bool();
  if (name == "none")
    return v.is_none();
  if (name == "string")
    return v.is_string();
  if (name == "number")
    return v.is_number();
  if (name == "integer")
    return v.is(k::integer);
  if (name == "iterable")
    return v.is(k::array) || v.is_string();
  if (name == "mapping")
    return v.is(k::object);
  if (name == "sequence")
    return v.is_array() || v.is(k::object) || v.is_string();
  if (name == "lower")
    return v.is_string() && v.as_string() == unicode::to_lower(v.as_string());
  if (name == "upper")
    return v.is_string() && v.as_string() == unicode::to_upper(v.as_string());
  if (name == "defined")
    return !v.is_undefined();
  if (name == "undefined")
    return v.is_undefined();
  if (name == "equalto" || name == "eq") {
    if (other == nullptr)
      fail(in, "test " + name + " needs a value to compare with");
    return strict_equal(v, *other);
  }
  fail(in, "unknown test '" + name + "'");
}

int compare(interpreter& in, const value& a, const value& b,
            bool case_sensitive) {
  using k = value::kind;
  if (a.is_none() && b.is_none())
    return 0;
  if (a.is_undefined() && b.is_undefined())
    return 0;
  auto numeric = [](const value& v) {
    return v.is_number() || v.is(k::boolean);
  };
  auto number = [](const value& v) {
    return v.is(k::boolean) ? (v.as_bool() ? 1.0 : 0.0) : v.as_double();
  };
  if (numeric(a) && numeric(b)) {
    auto x = number(a);
    auto y = number(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    auto x = case_sensitive ? a.as_string() : unicode::to_lower(a.as_string());
    auto y = case_sensitive ? b.as_string() : unicode::to_lower(b.as_string());
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  fail(in, std::string("cannot compare a ") + a.type_name() + " with a " +
               b.type_name());
}

value attribute_path(const value& item, const std::string& path) {
  value cur = item;
  std::size_t start = 0;
  while (true) {
    auto dot = path.find('.', start);
    auto part = path.substr(start, dot == std::string::npos ? std::string::npos
                                                            : dot - start);
    if (cur.is_mapping_like()) {
      auto* v = cur.fields().find(part);
      cur = v != nullptr ? *v : value{};
    } else if (cur.is_array()) {
      char* end = nullptr;
      long idx = std::strtol(part.c_str(), &end, 10);
      if (end == part.c_str() || idx < 0 ||
          static_cast<std::size_t>(idx) >= cur.items().size())
        return value{};
      cur = cur.items()[static_cast<std::size_t>(idx)];
    } else {
      return value{};
    }
    if (dot == std::string::npos)
      return cur;
    start = dot + 1;
  }
}

} // namespace exo::chat::builtins
