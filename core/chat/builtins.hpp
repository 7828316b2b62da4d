#pragma once

/// Built-in functions, methods and tests of chat templates, as the
/// reference renderer (@huggingface/jinja) defines them.

#include "core/chat/interpreter.hpp"
#include "core/chat/value.hpp"

#include <string>

namespace exo::chat::builtins {

/// The method or property `name` of a string (`s.strip`, `s.length`...),
/// or undefined.
value string_member(const value& s, const std::string& name);

/// The method `name` of an object (`get`, `items`, `keys`, `values`,
/// `dictsort`), or undefined.
value object_member(const value& obj, const std::string& name);

/// Declares true/false/none (and title case), namespace, range,
/// raise_exception and strftime_now in `env`.
void add_globals(environment& env);

/// Whether a test of this name exists.
bool has_test(const std::string& name);

/// Runs test `name` on `operand` (`other`: the argument of equalto).
bool run_test(interpreter& in, const std::string& name, const value& operand,
              const value* other = nullptr);

/// Orders two values for sort/dictsort (-1, 0, 1); throws for values of
/// kinds that cannot be compared.
int compare(interpreter& in, const value& a, const value& b,
            bool case_sensitive);

/// The value at a dotted path ("a.b.0") inside `item`, or undefined.
value attribute_path(const value& item, const std::string& path);

/// Python's str.replace(old, new, count) as the reference implements it
/// (an empty `old` matches between every two characters). Throws
/// std::length_error when the result would pass `max_bytes`.
std::string replace(const std::string& s, const std::string& old_value,
                    const std::string& new_value, int64_t count,
                    std::size_t max_bytes);

/// String.prototype.at(i) on UTF-16 units; undefined when out of range.
value string_at(const std::string& s, int64_t index);

} // namespace exo::chat::builtins
