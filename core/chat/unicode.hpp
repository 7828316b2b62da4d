#pragma once

/// UTF-8 helpers that reproduce JavaScript's string semantics, which the
/// reference renderer (@huggingface/jinja) inherits: whitespace is the
/// ECMAScript WhiteSpace + LineTerminator set, lengths and indexes count
/// UTF-16 code units, slices count code points.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace exo::chat::unicode {

/// Decodes the code point at `s[i]` and advances `i`; a malformed byte reads
/// as U+FFFD and advances by one.
char32_t decode(std::string_view s, std::size_t& i);

/// Appends `c` as UTF-8 (surrogates and values past U+10FFFF as U+FFFD).
void append(std::string& out, char32_t c);

/// Whether `c` is JavaScript whitespace (`\s`, String.prototype.trim).
bool is_space(char32_t c);

/// Number of bytes of the whitespace character starting at `s[i]`, or 0.
std::size_t space_at(std::string_view s, std::size_t i);

/// String.prototype.trim / trimStart / trimEnd.
std::string_view trim(std::string_view s);
std::string_view trim_start(std::string_view s);
std::string_view trim_end(std::string_view s);

/// The length in UTF-16 code units (String.prototype.length).
std::size_t utf16_length(std::string_view s);

/// The code points of `s`, each as its UTF-8 bytes (Array.from(string)).
std::vector<std::string_view> code_points(std::string_view s);

/// String.prototype.toUpperCase / toLowerCase for ASCII, Latin-1, Latin
/// Extended-A, Greek and Cyrillic; other characters are kept as they are.
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);

/// Upper-cases one code point (same coverage), appending the result.
void append_upper(std::string& out, char32_t c);

} // namespace exo::chat::unicode
