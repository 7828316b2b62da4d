#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace exo::access {

/// Encodes bytes as unpadded base64url (RFC 4648 section 5).
std::string base64url_encode(std::string_view bytes);

/// Decodes unpadded base64url strictly: any other character, an impossible
/// length or non-zero spare bits give nothing.
std::optional<std::string> base64url_decode(std::string_view text);

} // namespace exo::access
