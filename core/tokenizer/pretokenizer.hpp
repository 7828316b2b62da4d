#pragma once

#include <memory>
#include <string>
#include <vector>

namespace exo::model {

/// Splits text into words before byte-level BPE, as llama.cpp does for a
/// `tokenizer.ggml.pre` name: a list of regexes (PCRE2 with Unicode
/// properties) applied one after the other, each to the pieces the previous
/// one left. Text between two matches stays a piece of its own, so no byte
/// is ever lost.
class pretokenizer {
 public:
  /// Compiles `regexes`; throws gguf_error naming the regex that does not
  /// compile.
  explicit pretokenizer(const std::vector<std::string>& regexes);
  ~pretokenizer();
  pretokenizer(pretokenizer&&) noexcept;
  pretokenizer& operator=(pretokenizer&&) noexcept;

  /// The regexes llama.cpp uses for the pre-tokenizer called `pre` ("default",
  /// "llama-bpe", "qwen2", "gpt-2", "smollm", ...); throws gguf_error naming
  /// an unknown one.
  static std::vector<std::string> regexes_for(const std::string& pre);

  /// Splits `text` (valid UTF-8, see sanitize_utf8) into words.
  std::vector<std::string> split(const std::string& text) const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Replaces every byte that does not start a well-formed UTF-8 sequence by
/// U+FFFD, as llama.cpp's BPE path does before pre-tokenizing.
std::string sanitize_utf8(const std::string& text);

} // namespace exo::model
