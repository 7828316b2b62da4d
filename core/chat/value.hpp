#pragma once

/// The values a chat template computes with. They follow the reference
/// renderer (@huggingface/jinja, itself JavaScript): integers and floats are
/// distinct kinds, arrays, objects and namespaces have reference semantics,
/// objects keep their insertion order, `undefined` and `none` are distinct.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace exo::chat {

class value;
class interpreter;
struct environment;

/// Positional and keyword arguments of a call.
struct call_args {
  std::vector<value> positional;
  std::vector<std::pair<std::string, value>> keyword;

  /// The keyword argument `name`, or nullptr.
  const value* find(std::string_view name) const;
};

/// A callable: built-in functions and methods, macros, `caller`.
struct function {
  std::string name;
  std::function<value(interpreter&, call_args&,
                      const std::shared_ptr<environment>&)>
      call;
};

using array = std::vector<value>;

/// An insertion-ordered string-keyed map.
struct object {
  std::vector<std::pair<std::string, value>> entries;
  /// Nesting depth of the values held (kept current for namespaces).
  std::uint32_t depth = 1;

  value* find(std::string_view key);
  const value* find(std::string_view key) const;
  void set(const std::string& key, value v);
};

/// Deepest nesting of lists, mappings and namespaces a value may have;
/// past it the factories throw std::length_error. It bounds the recursion
/// of destroying, comparing and printing values.
constexpr std::uint32_t max_value_depth = 128;

/// One template value.
class value {
 public:
  enum class kind {
    undefined,
    none,
    boolean,
    integer,
    floating,
    string,
    array,
    tuple,
    object,
    name_space,
    function,
  };

  value() = default;
  static value none();
  static value boolean(bool b);
  static value integer(int64_t i);
  static value floating(double d);
  static value string(std::string s);
  static value make_array(array items = {}, bool tuple = false);
  static value make_object(object obj = {});
  static value make_namespace(object obj = {});
  static value make_function(function fn);

  /// Converts JSON as JavaScript's JSON.parse + the reference's conversion
  /// would: integral numbers become integers, object keys that are array
  /// indices come first in ascending order, the rest in document order.
  static value from_json(const nlohmann::ordered_json& j);

  kind type() const noexcept { return kind_; }
  bool is(kind k) const noexcept { return kind_ == k; }
  bool is_undefined() const noexcept { return kind_ == kind::undefined; }
  bool is_none() const noexcept { return kind_ == kind::none; }
  bool is_number() const noexcept {
    return kind_ == kind::integer || kind_ == kind::floating;
  }
  bool is_array() const noexcept {
    return kind_ == kind::array || kind_ == kind::tuple;
  }
  bool is_string() const noexcept { return kind_ == kind::string; }
  /// Objects and namespaces (attribute containers).
  bool is_mapping_like() const noexcept {
    return kind_ == kind::object || kind_ == kind::name_space;
  }

  bool as_bool() const noexcept { return b_; }
  int64_t as_int() const noexcept { return i_; }
  double as_double() const noexcept {
    return kind_ == kind::integer ? static_cast<double>(i_) : d_;
  }
  const std::string& as_string() const noexcept { return s_; }
  array& items() const { return *arr_; }
  object& fields() const { return *obj_; }
  const function& fn() const { return *fn_; }

  /// Nesting depth: 0 for scalars, 1 + the deepest element for containers.
  std::uint32_t depth() const noexcept;

  /// Whether this is, or contains, a namespace or a function: values that
  /// may refer back to scopes, which a namespace attribute may not hold
  /// (so that no reference cycle can form).
  bool holds_references() const noexcept {
    return kind_ == kind::name_space || kind_ == kind::function || refs_;
  }

  /// Identity of the shared container (arrays, objects, functions).
  const void* identity() const noexcept;

  /// Python-style truthiness as the reference computes it.
  bool truthy() const;

  /// A readable kind name for error messages ("string", "array"...).
  const char* type_name() const noexcept;

 private:
  kind kind_ = kind::undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  std::shared_ptr<array> arr_;
  std::shared_ptr<object> obj_;
  std::shared_ptr<function> fn_;
  std::uint32_t depth_ = 0;
  bool refs_ = false;
};

/// JavaScript's Number.prototype.toString for `d`.
std::string js_number(double d);

/// How a value prints in output (`{{ x }}`): floats keep ".0", booleans are
/// "true"/"false", containers are JSON with undefined as "undefined" (the
/// exceptions of to_json, with `max_bytes`).
std::string to_output(const value& v,
                      std::size_t max_bytes = static_cast<std::size_t>(-1));

/// How a value converts when concatenated with `~` or `+` (JavaScript's
/// String(x.value)): floats print without ".0".
std::string to_concat(const value& v);

/// Options of the tojson filter.
struct json_options {
  int indent = 0; ///< 0: compact
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_separators = false;
  std::string item_separator;
  std::string key_separator;
  bool undefined_as_null = true;
  /// Longest output; past it to_json throws std::length_error.
  std::size_t max_bytes = static_cast<std::size_t>(-1);
};

/// Deepest nesting to_json writes (deeper: a circular reference, most
/// likely); past it to_json throws std::invalid_argument.
constexpr int max_json_depth = 256;

/// JSON as the reference's tojson writes it (Python's json.dumps spacing:
/// ", " and ": " by default). Throws std::invalid_argument for functions
/// and nesting deeper than max_json_depth, std::length_error past
/// `opts.max_bytes`.
std::string to_json(const value& v, const json_options& opts = {});

/// Loose equality of two values (JavaScript's `==` on the raw values).
bool loose_equal(const value& a, const value& b);

/// Strict equality (JavaScript's `===` on the raw values; `in` uses it).
bool strict_equal(const value& a, const value& b);

} // namespace exo::chat
