#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace exo::model {

/// A GGUF vocabulary (the tokenizer.ggml.* keys) as llama.cpp's
/// convert_hf_to_gguf.py writes it for a Hugging Face tokenizer.
struct hf_vocab {
  std::string model; ///< "gpt2" or "llama"
  std::string pre;   ///< "llama-bpe", "qwen2", ... ("default")
  std::vector<std::string> tokens;
  std::vector<float> scores;                      ///< Empty for "gpt2".
  std::vector<int32_t> types;                     ///< token_kind values.
  std::vector<std::string> merges;                ///< "a b"; empty for "llama".
  int64_t bos = -1, eos = -1, unk = -1, pad = -1; ///< -1: not written.
  std::optional<bool> add_bos, add_eos;           ///< Unset: not written.
  std::string chat_template;                      ///< Empty: not written.
};

/// The most tokens a converted vocabulary may have (16x the largest real
/// one, Gemma's 262144): a larger `vocab_size` or token id is refused.
inline constexpr uint32_t max_hf_vocab_tokens = 1u << 22;

/// Converts the text of a tokenizer.json (and of its tokenizer_config.json,
/// "" when there is none) the way convert_hf_to_gguf.py does:
/// - byte-level BPE (Llama 3, Qwen, GPT-2, SmolLM) becomes "gpt2" with the
///   pre-tokenizer named after its regexes; added tokens are control tokens
///   when special (or looking like <|...|>), user-defined otherwise; ids
///   missing up to `vocab_size` become "[PADn]" unused tokens (Qwen's
///   embedding has more rows than its tokenizer has tokens);
/// - a BPE with byte fallback converted from SentencePiece (Llama 2) becomes
///   "llama" with scores -1000 and <0xNN> byte tokens, as the script's
///   LlamaHfVocab does;
/// - bos/eos/unk/pad, add_bos/add_eos and the chat template come from
///   tokenizer_config.json.
/// `vocab_size` 0 keeps the tokenizer's own count (its ids then contiguous
/// from 0); `pre` overrides the pre-tokenizer name found. Throws gguf_error
/// naming the problem for JSON that does not parse or a tokenizer it cannot
/// convert.
hf_vocab hf_vocab_from_json(const std::string& tokenizer_json,
                            const std::string& tokenizer_config_json,
                            uint32_t vocab_size = 0,
                            const std::string& pre = "");

/// hf_vocab_from_json on the files at the paths (`config_path` may be "").
hf_vocab load_hf_vocab(const std::string& tokenizer_path,
                       const std::string& config_path, uint32_t vocab_size = 0);

} // namespace exo::model
