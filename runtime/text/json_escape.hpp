#pragma once

#include <string>

namespace exo::text {

/// `s` escaped for the inside of a JSON string literal (no quotes added):
/// quotes, backslashes and control characters; bytes >= 0x80 are copied
/// as they are (UTF-8 stays UTF-8).
std::string json_escape(const std::string& s);

} // namespace exo::text
