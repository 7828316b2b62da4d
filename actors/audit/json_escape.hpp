#pragma once

#include <string>
#include <string_view>

namespace exo::audit {

/// Appends `s` to `out` as a JSON string literal (with the quotes), escaping
/// quotes, backslashes and every control character. Bytes >= 0x80 are copied
/// as they are (the input is expected to be UTF-8).
void append_json_string(std::string& out, std::string_view s);

} // namespace exo::audit
