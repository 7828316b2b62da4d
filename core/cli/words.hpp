#pragma once

#include <string>
#include <vector>

namespace exo::cli {

/// Splits a command line into words: blanks separate, "double" and 'single'
/// quotes group (an empty "" is a word), a backslash escapes the next
/// character inside double quotes. Throws std::invalid_argument on an
/// unterminated quote.
std::vector<std::string> split_words(const std::string& text);

/// Quotes `word` so that split_words gives it back as one word (unchanged
/// when it needs no quotes).
std::string quote_word(const std::string& word);

} // namespace exo::cli
