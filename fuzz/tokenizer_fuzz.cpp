// Tokenizer files and text: the first byte picks what the rest is.
//   even: a tokenizer.json (hf_vocab_from_json: a vocabulary or a
//         gguf_error naming the problem)
//   odd:  text for the pre-tokenizers of Llama 3 and Qwen 2 (after
//         sanitize_utf8, as the tokenizer does)
#include "core/gguf/gguf.hpp"
#include "core/tokenizer/hf_vocab.hpp"
#include "core/tokenizer/pretokenizer.hpp"
#include "fuzz/fuzz_target.hpp"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0)
    return 0;
  std::string rest{reinterpret_cast<const char*>(data) + 1, size - 1};
  if (data[0] % 2 == 0) {
    try {
      auto v = exo::model::hf_vocab_from_json(rest, "");
      (void) v;
    } catch (const exo::model::gguf_error&) {
    }
    return 0;
  }
  static const exo::model::pretokenizer llama3{
    exo::model::pretokenizer::regexes_for("llama-bpe")};
  static const exo::model::pretokenizer qwen2{
    exo::model::pretokenizer::regexes_for("qwen2")};
  auto text = exo::model::sanitize_utf8(rest);
  std::size_t total = 0;
  for (auto& w : llama3.split(text))
    total += w.size();
  if (total != text.size())
    __builtin_trap(); // the words must cover the text exactly
  total = 0;
  for (auto& w : qwen2.split(text))
    total += w.size();
  if (total != text.size())
    __builtin_trap();
  return 0;
}
