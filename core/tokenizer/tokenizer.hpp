#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/gguf/gguf.hpp"

namespace exo::model {

/// Token types of tokenizer.ggml.token_type (llama.cpp numbering).
enum class token_kind : int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

/// Text <-> token ids from a GGUF vocabulary: SentencePiece-style "llama"
/// (scores, the U+2581 space marker, <0xNN> byte fallback) or GPT-2 BPE
/// "gpt2" (merge ranks over the byte-to-unicode alphabet).
class tokenizer {
public:
  /// Reads tokenizer.ggml.*; throws gguf_error for a missing or malformed
  /// vocabulary or an unsupported model kind.
  static tokenizer from_gguf(const gguf_file& f);

  /// "llama" or "gpt2".
  const std::string& kind() const {
    return kind_;
  }
  size_t size() const {
    return pieces_.size();
  }
  int32_t bos() const {
    return bos_;
  }
  int32_t eos() const {
    return eos_;
  }
  /// Whether the file asks for a BOS token in front of prompts.
  bool add_bos() const {
    return add_bos_;
  }

  /// Encodes text, with a leading BOS when `with_bos` (and the file has one).
  std::vector<int32_t> encode(const std::string& text, bool with_bos) const;

  /// The bytes one token stands for (empty for control tokens).
  std::string piece(int32_t id) const;

  /// Decodes ids to text; for "llama" the space added in front by encode is
  /// removed again. Throws gguf_error for an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;

  /// The token's string as stored in the vocabulary.
  const std::string& raw_piece(int32_t id) const;

private:
  std::vector<int32_t> encode_spm(const std::string& text) const;
  std::vector<int32_t> encode_bpe(const std::string& text) const;
  void bpe_word(const std::string& word, std::vector<int32_t>& out) const;

  std::string kind_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::unordered_map<std::string, int32_t> ids_;
  std::map<std::pair<std::string, std::string>, int32_t> merge_rank_;
  int32_t byte_tokens_[256];
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false;
  bool add_space_prefix_ = true;
};

/// GPT-2's byte-to-unicode map: the UTF-8 string standing for byte `b`.
const std::string& gpt2_byte_to_unicode(uint8_t b);

} // namespace exo::model
