#pragma once

#include <string>
#include <string_view>

namespace exo::text {

/// Appends `s` escaped for the inside of a JSON string literal: quotes,
/// backslashes and every control character (\n \r \t \b \f by name, the
/// rest as \u00XX). Bytes >= 0x80 are copied as they are (UTF-8 stays
/// UTF-8). The audit log hashes this exact output: do not change it.
void append_json_escaped(std::string& out, std::string_view s);

/// `s` as a JSON string literal, with the quotes, appended to `out`.
void append_json_string(std::string& out, std::string_view s);

/// `s` escaped for the inside of a JSON string literal (no quotes added).
std::string json_escape(std::string_view s);

} // namespace exo::text
