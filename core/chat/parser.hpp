#pragma once

/// The chat-template parser: tokens to a syntax tree, with the reference
/// renderer's grammar and operator precedence (lowest first): `x if c else
/// y`, `or`, `and`, `not`, comparisons and `in`, `+ - ~`, `* / // %`, `**`,
/// `is` tests, `|` filters, unary signs, calls/members/slices, primaries.

#include "core/chat/ast.hpp"
#include "core/chat/lexer.hpp"

#include <string_view>
#include <vector>

namespace exo::chat {

/// Most nested brackets, blocks and operators a template may use.
constexpr std::size_t max_parse_depth = 200;

/// Parses `tokens` (from `source`, for error positions) into the list of
/// top-level statements. Throws template_error (syntax) with line and column.
std::vector<node_ptr> parse(std::string_view source,
                            const std::vector<token>& tokens);

} // namespace exo::chat
