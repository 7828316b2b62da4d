#pragma once

/// exo's one JSON writer for everything it prints or sends as JSON
/// (console output, device lists, plans, scenario reports): values are
/// built as nlohmann::ordered_json (keys keep the order they were added
/// in) and written by one of two styles.
///
/// The audit log's records and the access tokens are the exception: they
/// are hashed and signed, so their byte form is a specification of its own
/// (core/audit/record.cpp, core/access/token.cpp), never left to a
/// library's formatting choices.

#include <nlohmann/json.hpp>

#include <string>

namespace exo::text {

using json = nlohmann::ordered_json;

/// Compact: `{"a":1,"b":[1,2]}`. Invalid UTF-8 in strings is replaced by
/// U+FFFD, never an exception.
std::string compact(const json& v);

/// One line for people and line-oriented tools: `{"a": 1, "b": [1, 2]}`.
/// Same escaping as compact().
std::string spaced(const json& v);

/// `v` rounded to `digits` significant digits (printed that way by both
/// styles: a measured time is not worth 17 digits).
double round_significant(double v, int digits = 9);

/// `v` as a JSON number written the way people write it: an integral value
/// without a fraction ("1", not "1.0"), others rounded like
/// round_significant.
json number(double v, int digits = 9);

} // namespace exo::text
