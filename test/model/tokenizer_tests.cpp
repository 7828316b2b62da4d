#include <catch2/catch.hpp>

#include "core/gguf/gguf.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/tokenizer.hpp"

using namespace exo::model;

namespace {

tokenizer make(const std::string& kind, uint32_t vocab = 600) {
  test_model_options o;
  o.layers = 1;
  o.dim = 32;
  o.ff = 32;
  o.heads = 2;
  o.kv_heads = 1;
  o.vocab = vocab;
  o.tokenizer = kind;
  auto b = build_test_model(o).bytes();
  auto f = gguf_file::parse(b.data(), b.size());
  return tokenizer::from_gguf(*f);
}

const std::vector<std::string> samples = {
  "hello world",
  "The cluster runs the model on every device.",
  "  leading spaces and\ttabs\nnew lines  ",
  "numbers 12345 and punctuation!?; it's done",
  "unicode: h\xC3\xA9llo \xE2\x98\x83 \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87",
  "x",
  " ",
};

} // namespace

TEST_CASE("llama tokenizer round-trips text through ids", "[tokenizer]") {
  auto t = make("llama");
  CHECK(t.kind() == "llama");
  CHECK(t.size() == 600);
  for (auto& s : samples) {
    auto ids = t.encode(s, true);
    REQUIRE(ids.front() == t.bos());
    CHECK(t.decode(ids) == s);
  }
}

TEST_CASE("llama tokenizer merges known words into single pieces",
          "[tokenizer]") {
  auto t = make("llama");
  auto ids = t.encode("hello world", false);
  REQUIRE(ids.size() == 2);
  CHECK(t.raw_piece(ids[0]) == "\xE2\x96\x81hello");
  CHECK(t.raw_piece(ids[1]) == "\xE2\x96\x81world");
}

TEST_CASE("llama tokenizer falls back to byte tokens for unknown "
          "characters",
          "[tokenizer]") {
  auto t = make("llama");
  auto ids = t.encode("\xE2\x98\x83", false); // a snowman
  // "▁" then three byte tokens
  REQUIRE(ids.size() == 4);
  CHECK(t.raw_piece(ids[1]) == "<0xE2>");
  CHECK(t.raw_piece(ids[2]) == "<0x98>");
  CHECK(t.raw_piece(ids[3]) == "<0x83>");
}

TEST_CASE("gpt2 tokenizer round-trips text through ids", "[tokenizer]") {
  auto t = make("gpt2");
  CHECK(t.kind() == "gpt2");
  CHECK_FALSE(t.add_bos());
  for (auto& s : samples)
    CHECK(t.decode(t.encode(s, false)) == s);
}

TEST_CASE("gpt2 tokenizer applies merges by rank", "[tokenizer]") {
  auto t = make("gpt2");
  auto ids = t.encode("hello world", false);
  REQUIRE(ids.size() == 2);
  CHECK(t.raw_piece(ids[0]) == "hello");
  CHECK(t.raw_piece(ids[1]) == "\xC4\xA0world"); // "Ġworld"
  CHECK(t.piece(ids[1]) == " world");
}

TEST_CASE("control tokens decode to nothing and bad ids are refused",
          "[tokenizer]") {
  auto t = make("llama");
  CHECK(t.piece(t.bos()).empty());
  CHECK(t.piece(t.eos()).empty());
  CHECK_THROWS_WITH(t.decode({1, 5000}),
                    Catch::Contains("token id 5000 is outside"));
}

TEST_CASE("a vocabulary too small for the tokenizer is refused",
          "[tokenizer]") {
  CHECK_THROWS_WITH(make("llama", 100), Catch::Contains("needs at least"));
  CHECK_THROWS_WITH(make("gpt2", 100), Catch::Contains("needs at least"));
}
