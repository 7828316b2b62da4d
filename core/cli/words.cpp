#include "core/cli/words.hpp"

#include <stdexcept>

namespace exo::cli {

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote != 0) {
      if (c == quote)
        quote = 0;
      else if (c == '\\' && quote == '"' && i + 1 < text.size())
        cur += text[++i];
      else
        cur += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word)
        out.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (quote != 0)
    throw std::invalid_argument("unterminated quote");
  if (in_word)
    out.push_back(cur);
  return out;
}

std::string quote_word(const std::string& word) {
  if (!word.empty()
      && word.find_first_of(" \t\n\r\"'\\") == std::string::npos)
    return word;
  std::string out = "\"";
  for (char c : word) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

} // namespace exo::cli
