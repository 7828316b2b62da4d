#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/gguf/gguf.hpp"

namespace exo::model {

class pretokenizer;

/// Token types of tokenizer.ggml.token_type (llama.cpp numbering).
enum class token_kind : int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

/// Text <-> token ids from a GGUF vocabulary, token for token as llama.cpp's
/// llama_vocab, which selects the algorithm by `tokenizer.ggml.model`:
/// - "llama": SentencePiece-style (scores, the U+2581 space marker, <0xNN>
///   byte fallback);
/// - "gpt2": byte-level BPE (merge ranks over GPT-2's byte-to-unicode
///   alphabet) after the pre-tokenizer regexes of `tokenizer.ggml.pre`.
///
/// Control and unknown tokens are found in text only when asked
/// (`parse_special`); user-defined tokens always are.
class tokenizer {
 public:
  /// Reads tokenizer.ggml.*; throws gguf_error naming the problem for a
  /// missing or malformed vocabulary, an unknown model or pre-tokenizer,
  /// missing merges, or a token id outside the vocabulary.
  static tokenizer from_gguf(const gguf_file& f);

  tokenizer();
  ~tokenizer();
  tokenizer(tokenizer&&) noexcept;
  tokenizer& operator=(tokenizer&&) noexcept;

  /// "llama" or "gpt2".
  const std::string& kind() const { return kind_; }
  /// The pre-tokenizer name ("default" for "llama").
  const std::string& pre() const { return pre_; }
  size_t size() const { return pieces_.size(); }
  /// Special token ids, or -1 when the vocabulary has none.
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  /// Whether the file asks for a BOS token in front of prompts.
  bool add_bos() const { return add_bos_; }
  /// Whether the file asks for an EOS token after prompts.
  bool add_eos() const { return add_eos_; }

  /// Whether generating `id` ends the generation (EOS, EOT, <|eot_id|>,
  /// <|im_end|>, <|end_of_text|>, ... as llama.cpp derives the set).
  bool is_eog(int32_t id) const { return eog_.count(id) != 0; }
  /// The end-of-generation set, ascending.
  const std::set<int32_t>& eog_ids() const { return eog_; }

  /// The token's type as the file gives it.
  token_kind type(int32_t id) const;

  /// llama_tokenize: BOS/EOS around the text when `add_special` and the file
  /// asks for them; control tokens in the text are recognised only when
  /// `parse_special`.
  std::vector<int32_t> tokenize(const std::string& text, bool add_special,
                                bool parse_special) const;

  /// Encodes text, with a leading BOS when `with_bos` (and the file has one);
  /// special tokens in the text are not parsed.
  std::vector<int32_t> encode(const std::string& text, bool with_bos) const;

  /// The bytes one token stands for (llama_token_to_piece): control and
  /// unknown tokens give their text when `special`, nothing otherwise;
  /// unused tokens give nothing.
  std::string piece(int32_t id, bool special = false) const;

  /// llama_detokenize(remove_special = false, unparse_special = special):
  /// the SPM leading space of the first token removed, BPE's
  /// clean_up_tokenization_spaces applied where the pre-tokenizer asks.
  /// Throws gguf_error for an id outside the vocabulary.
  std::string detokenize(const std::vector<int32_t>& ids, bool special) const;

  /// Decodes generated ids to text for display: special tokens left out and
  /// the leading SPM space of the first piece removed. Throws gguf_error for
  /// an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;

  /// The token's string as stored in the vocabulary.
  const std::string& raw_piece(int32_t id) const;

 private:
  struct pair_hash {
    size_t operator()(const std::pair<std::string, std::string>& p) const {
      return std::hash<std::string>{}(p.first) ^
             (std::hash<std::string>{}(p.second) << 1);
    }
  };

  void check_id(int32_t id) const;
  int32_t byte_token(uint8_t b) const;
  void tokenize_spm(const std::string& text, std::vector<int32_t>& out) const;
  void tokenize_bpe(const std::string& text, std::vector<int32_t>& out) const;
  void bpe_word(const std::string& word, std::vector<int32_t>& out) const;
  std::string piece_text(int32_t id) const;

  std::string kind_;
  std::string pre_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::vector<uint32_t> attrs_; // llama.cpp's llama_token_attr bits
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<std::pair<std::string, std::string>, int32_t, pair_hash>
      merge_rank_;
  std::vector<int32_t> special_cache_; // longest text first
  std::set<int32_t> eog_;
  std::unique_ptr<pretokenizer> pretok_;
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1, unk_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
  bool clean_spaces_ = false;
  bool ignore_merges_ = false;
};

/// GPT-2's byte-to-unicode map: the UTF-8 string standing for byte `b`.
const std::string& gpt2_byte_to_unicode(uint8_t b);

} // namespace exo::model
