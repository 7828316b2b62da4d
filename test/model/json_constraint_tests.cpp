#include <catch2/catch.hpp>

#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/model/json_constraint.hpp"
#include "core/model/llama_model.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/model/sampler.hpp"

using namespace exo::model;

namespace {

/// How many bytes of `text` a fresh json_prefix takes (its size: all).
std::size_t taken(const std::string& text) {
  json_prefix p;
  for (std::size_t i = 0; i < text.size(); ++i)
    if (!p.feed(text[i]))
      return i;
  return text.size();
}

bool complete(const std::string& text) {
  json_prefix p;
  return p.feed(text) && p.complete();
}

} // namespace

TEST_CASE("json_prefix takes every byte of a valid object and knows when "
          "it is whole", "[json]") {
  for (const std::string doc :
       {"{}", " {\n} \n", R"({"a":1})",
        R"({"a": [1, -2, 3.25, -0.5e-3, 1E+9, 0, true, false, null],
            "b": {"c": "d\"\\\/\b\f\n\r\t\u00e9x", "": []},
            "e": "caf\u00e9 \u20ac", "f": [[[]]], "g": {}})",
        "{\"utf8\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}",
        R"({"pair": "\uD83D\uDE00 \ud7ff \ue000"})"}) {
    INFO(doc);
    CHECK(taken(doc) == doc.size());
    CHECK(complete(doc));
    // Every proper prefix (that is not the whole object) is incomplete.
    for (std::size_t i = 0; i + 1 < doc.size(); ++i) {
      json_prefix p;
      REQUIRE(p.feed(doc.substr(0, i)));
      if (doc.find('}') != std::string::npos && i < doc.rfind('}'))
        CHECK_FALSE(p.complete());
    }
  }
}

TEST_CASE("json_prefix refuses the byte that breaks JSON", "[json]") {
  struct bad {
    std::string text;
    std::size_t at; // the first byte refused
  };
  for (const auto& b : std::vector<bad>{
         {"[1]", 0},             // the top level is an object
         {"\"x\"", 0},           //
         {"{a:1}", 1},           // keys are strings
         {"{\"a\" 1}", 5},       // a colon first
         {"{\"a\":}", 5},        // a value
         {"{\"a\":1,}", 7},      // no trailing comma
         {"{\"a\":01}", 6},      // no leading zeros
         {"{\"a\":1.}", 7},      // a digit after the dot
         {"{\"a\":-}", 6},       //
         {"{\"a\":1e}", 7},      //
         {"{\"a\":1.5.2}", 8},   //
         {"{\"a\":tru}", 8},     //
         {"{\"a\":nul1}", 8},    //
         {"{\"a\":[1 2]}", 8},   //
         {"{\"a\":[1]]", 8},     //
         {"{\"a\":\"\\x\"}", 7}, // no such escape
         {"{\"a\":\"\\u12g4\"}", 10},
         {"{\"a\":\"\\udc00\"}", 9},       // a lone low surrogate
         {"{\"a\":\"\\ud800x\"}", 12},      // a high one alone
         {"{\"a\":\"\\ud800\\u0041\"}", 14}, // not followed by a low one
         {"{\"a\":\"\\ud800\\udb00\"}", 15},
         {"{\"a\":\"\n\"}", 6},  // control characters go escaped
         {"{\"a\":\"\xc3\x28\"}", 7},     // a continuation byte is due
         {"{\"a\":\"\xc0\xaf\"}", 6},     // overlong
         {"{\"a\":\"\xed\xa0\x80\"}", 7}, // a surrogate
         {"{\"a\":\"\xf4\x90\x80\x80\"}", 7}, // past U+10FFFF
         {"{\"a\":1}x", 7},      // whitespace only after the object
         {"{\"a\":1}{}", 7},
       }) {
    INFO(b.text);
    CHECK(taken(b.text) == b.at);
  }
  // Whitespace outside strings: at most max_json_whitespace bytes in a
  // row (inside strings, any).
  const std::string pad(max_json_whitespace, ' ');
  CHECK(taken(pad + "{" + pad + "\"a\"" + pad + ":" + pad + "\"" + pad + pad
              + "\"" + pad + "}" + pad)
        == 8 * max_json_whitespace + 8);
  CHECK(taken(pad + " {}") == max_json_whitespace);
  CHECK(taken("{\"a\":[1," + pad + "\n2]}") == 8 + max_json_whitespace);
  // Nesting deeper than max_json_depth is refused.
  std::string deep = "{\"a\":";
  for (std::size_t i = 1; i < max_json_depth; ++i)
    deep += "[";
  CHECK(taken(deep) == deep.size());
  CHECK(taken(deep + "[") == deep.size());
}

TEST_CASE("mask_json keeps the tokens that continue the object, then only "
          "the end", "[json]") {
  // A vocabulary: 0 end of text (a control token: no bytes), 1 "{", 2
  // "{\"", 3 "}", 4 "a", 5 "\"a\":", 6 " ", 7 "1}", 8 "x", 9 (unused).
  const auto bytes = make_vocab_bytes({"", "{", "{\"", "}", "a", "\"a\":",
                                       " ", "1}", "x", ""});
  const std::set<std::int32_t> end = {0};
  auto allowed = [&](const json_prefix& p, const std::set<std::int32_t>& e) {
    std::vector<float> row(bytes.bytes.size(), 1.0f);
    auto kept = mask_json(p, bytes, e, row.data(), row.size());
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i < row.size(); ++i)
      if (row[i] != masked_logit)
        ids.push_back(static_cast<std::int32_t>(i));
    CHECK(kept == ids.size());
    return ids;
  };
  json_prefix p;
  CHECK(allowed(p, end) == std::vector<std::int32_t>{1, 2, 6});
  REQUIRE(p.feed("{"));
  CHECK(allowed(p, end) == std::vector<std::int32_t>{3, 5, 6});
  REQUIRE(p.feed("\"a\":"));
  CHECK(allowed(p, end) == std::vector<std::int32_t>{1, 2, 6, 7});
  REQUIRE(p.feed(" 1}"));
  REQUIRE(p.complete());
  // Whole: only the end of text; without end tokens, whitespace.
  CHECK(allowed(p, end) == std::vector<std::int32_t>{0});
  CHECK(allowed(p, {}) == std::vector<std::int32_t>{6});
  // A sampler never draws a masked token, whatever the draw.
  std::vector<float> row(bytes.bytes.size(), 0.0f);
  json_prefix fresh;
  mask_json(fresh, bytes, end, row.data(), row.size());
  sampler_params sp;
  sp.temperature = 2.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.seed = 1;
  sampler s(sp);
  const auto d = s.distribution(row.data(), row.size());
  CHECK(d.ids == std::vector<std::int32_t>{1, 2, 6});
  for (int i = 0; i < 300; ++i) {
    auto t = s.sample(row.data(), row.size());
    CHECK((t == 1 || t == 2 || t == 6));
  }
}

TEST_CASE("mask_json's walk of the sorted vocabulary keeps exactly the "
          "tokens a check of each would keep", "[json]") {
  // Random tokens over JSON's bytes (duplicates, prefixes of each other,
  // a UTF-8 lead and continuation byte among them), and states at every
  // prefix of a few documents.
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\":, \n1-0.eE+tfnrulas\\x\xc3\xa9";
  std::uniform_int_distribution<std::size_t> letter(0, alphabet.size() - 1),
    length(1, 6);
  std::vector<std::string> tokens = {"", "ab", "ab", "a"};
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    for (std::size_t k = length(rng); k > 0; --k)
      t += alphabet[letter(rng)];
    tokens.push_back(t);
  }
  const auto vocab = make_vocab_bytes(tokens);
  const std::set<std::int32_t> end = {0};
  std::size_t states = 0;
  for (const std::string doc :
       {R"( {"a": [1, -2.5e+3, true, null, "x\n\u00e9"], "b" : {"c":[]}})",
        "{\"caf\xc3\xa9\":\"\\ud83d\\ude00\"}"}) {
    json_prefix p;
    for (std::size_t i = 0; i <= doc.size(); ++i) {
      std::vector<float> row(tokens.size(), 1.0f);
      const auto kept = mask_json(p, vocab, end, row.data(), row.size());
      std::size_t want = 0;
      for (std::size_t id = 0; id < tokens.size(); ++id) {
        bool ok = false;
        if (id == 0)
          ok = p.complete();
        else if (!tokens[id].empty() && !p.complete()) {
          json_prefix s = p;
          ok = s.feed(tokens[id]);
        }
        want += ok;
        INFO("after " << doc.substr(0, i) << " token '" << tokens[id] << "'");
        CHECK((row[id] != masked_logit) == ok);
      }
      CHECK(kept == want);
      ++states;
      if (i < doc.size())
        REQUIRE(p.feed(doc[i]));
    }
  }
  CHECK(states > 80);
}

TEST_CASE("a loaded tokenizer's vocabulary bytes are made once and shared",
          "[json]") {
  // A vocabulary of a generated model: its tokenizer loaded twice.
  const auto path = std::string{"/tmp/exo-json-vocab-"}
                    + std::to_string(::getpid()) + ".gguf";
  test_model_options o;
  o.vocab = 400;
  make_test_model(o, path);
  auto model = llama_model::load(path);
  std::remove(path.c_str());
  auto a = std::make_shared<const tokenizer>(
    tokenizer::from_gguf(model->file()));
  auto b = std::make_shared<const tokenizer>(
    tokenizer::from_gguf(model->file()));
  const auto va = shared_vocab_bytes(a, 400);
  CHECK(shared_vocab_bytes(a, 400) == va); // the same, not made again
  const auto vb = shared_vocab_bytes(b, 400);
  CHECK(vb != va); // another tokenizer: its own
  CHECK(vb->order == va->order);
  CHECK(va->bytes == vocab_bytes_of(*a, 400)->bytes);
  // Released and loaded again: made anew for the new one.
  a.reset();
  auto c = std::make_shared<const tokenizer>(
    tokenizer::from_gguf(model->file()));
  const auto vc = shared_vocab_bytes(c, 400);
  CHECK(vc != va);
  CHECK(vc->bytes == va->bytes);
  CHECK(shared_vocab_bytes(b, 400) == vb);
}
