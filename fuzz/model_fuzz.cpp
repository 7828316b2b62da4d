// A GGUF file as a model (what `exo-model run` loads): the Llama model's
// hyperparameters and tensors, the tokenizer it selects, a few words
// through it, and the chat template rendered for a short conversation.
// Documented errors: gguf_error (the file, the vocabulary), model_error
// (shapes, hyperparameters), chat::template_error (the template).
#include "core/chat/chat.hpp"
#include "core/chat/error.hpp"
#include "core/gguf/gguf.hpp"
#include "core/model/llama_model.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "fuzz/fuzz_target.hpp"

#include <memory>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  using namespace exo;
  try {
    std::shared_ptr<model::gguf_file> f = model::gguf_file::parse(data, size);
    const model::llama_model m(f);
    (void) m.hparams();
    const auto tok = model::tokenizer::from_gguf(*f);
    auto ids = tok.encode("Hello world, it's 2026! 日本語 🤖", true);
    (void) tok.detokenize(ids, true);
    if (const auto* kv = f->find("tokenizer.chat_template")) {
      (void) kv;
      chat::options o;
      o.add_generation_prompt = true;
      o.bos_token = tok.bos() >= 0 ? tok.piece(tok.bos(), true) : "";
      auto text = chat::render(f->get_string("tokenizer.chat_template"),
                               chat::to_json({{"system", "Be brief."},
                                              {"user", "Hello"}}),
                               o);
      (void) tok.encode(text, false);
    }
  } catch (const model::gguf_error&) {
  } catch (const model::model_error&) {
  } catch (const chat::template_error&) {
  }
  return 0;
}
