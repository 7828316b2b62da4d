// exo-model quantize's engine (core/model/quantize): re-encoding an F32
// file gives, tensor for tensor, what make-test writes for the same seed
// (the same floats through the same ggml reference quantizers and the same
// per-tensor rules), keeps the metadata, and refuses quantized input.

#include <catch2/catch.hpp>

#include <cstring>

#include "core/gguf/gguf.hpp"
#include "core/model/model_info.hpp"
#include "core/model/quantize.hpp"
#include "core/model/test_model.hpp"

using namespace exo::model;

namespace {

test_model_options shape(tensor_type t, file_type::mix mix, bool tied) {
  test_model_options o;
  o.layers = 8;
  o.dim = 256;
  o.ff = 512;
  o.heads = 4;
  o.kv_heads = 2;
  o.vocab = 400;
  o.type = t;
  o.mix = mix;
  o.tied = tied;
  o.seed = 3;
  return o;
}

std::shared_ptr<gguf_file> parse(const gguf_writer& w) {
  auto b = w.bytes();
  return gguf_file::parse(b.data(), b.size());
}

} // namespace

TEST_CASE("quantize re-encodes an F32 model as make-test encodes it",
          "[quantize]") {
  for (const char* name : {"q4_k_m", "q5_k_m", "q3_k_m", "q8_0", "q4_0",
                           "q6_k", "f16", "bf16"})
    for (bool tied : {false, true}) {
      file_type ft;
      REQUIRE(parse_file_type(name, ft));
      INFO(name << (tied ? ", tied" : ""));
      auto f32 = parse(build_test_model(
        shape(tensor_type::f32, file_type::mix::none, tied)));
      auto got = parse(quantize_model(*f32, ft));
      // make-test puts one format on every matrix unless it is a mix;
      // quantize follows llama.cpp, whose output head is Q6_K for every
      // quantized type but Q8_0.
      auto want_o = shape(ft.base, ft.kind, tied);
      auto want = parse(build_test_model(want_o));
      REQUIRE(got->tensors().size() == want->tensors().size());
      for (auto& t : want->tensors()) {
        INFO(t.name);
        auto& g = got->tensor(t.name);
        const bool head = t.name == "output.weight"
                          || (tied && t.name == "token_embd.weight");
        const bool quantized = ft.base != tensor_type::f32
                               && ft.base != tensor_type::f16
                               && ft.base != tensor_type::bf16;
        if (head && quantized && ft.kind == file_type::mix::none
            && ft.base != tensor_type::q8_0) {
          CHECK(g.type == tensor_type::q6_k);
          continue;
        }
        CHECK(g.type == t.type);
        CHECK(g.ne == t.ne);
        REQUIRE(g.n_bytes == t.n_bytes);
        CHECK(std::memcmp(g.data, t.data, t.n_bytes) == 0);
      }
      CHECK(got->get_uint("general.file_type") == llama_ftype(ft));
      CHECK(got->get_array("tokenizer.ggml.tokens").values.size() == 400);
      CHECK(got->get_string("tokenizer.ggml.model")
            == f32->get_string("tokenizer.ggml.model"));
      CHECK(got->metadata().size() == f32->metadata().size());
    }
}

TEST_CASE("quantize refuses weights that are already quantized", "[quantize]") {
  auto q = parse(build_test_model(
    shape(tensor_type::q8_0, file_type::mix::none, false)));
  file_type ft;
  REQUIRE(parse_file_type("q4_k_m", ft));
  CHECK_THROWS_WITH(quantize_model(*q, ft),
                    Catch::Contains("tensor 'token_embd.weight' is already "
                                    "Q8_0"));
}

TEST_CASE("quantize falls back as llama.cpp does for rows that are not "
          "whole K-quant blocks",
          "[quantize]") {
  auto o = shape(tensor_type::f32, file_type::mix::none, false);
  o.dim = 64; // 64-wide rows: no K-quant fits
  o.ff = 128;
  auto f32 = parse(build_test_model(o));
  file_type ft;
  REQUIRE(parse_file_type("q4_k_m", ft));
  auto got = parse(quantize_model(*f32, ft));
  CHECK(got->tensor("blk.1.attn_q.weight").type == tensor_type::q5_0);
  CHECK(got->tensor("blk.0.attn_v.weight").type == tensor_type::q8_0);
  CHECK(got->tensor("output.weight").type == tensor_type::q8_0);
}

TEST_CASE("the model summary names architecture, size, types and "
          "tokenizer",
          "[info]") {
  auto o = shape(tensor_type::q4_k, file_type::mix::q4_k_m, false);
  auto f = parse(build_test_model(o));
  auto s = summarize(*f);
  CHECK(s.architecture == "llama");
  const uint64_t e = 256, ff = 512, kv = 128, v = 400;
  const uint64_t layer = 2 * e + e * e * 2 + 2 * e * kv + 3 * e * ff;
  CHECK(s.parameters == 8 * layer + e + 2 * e * v);
  REQUIRE(s.types.size() == 3);
  CHECK(s.types[0].type == tensor_type::q4_k); // the largest share first
  CHECK(s.types[1].type == tensor_type::q6_k);
  CHECK(s.types[2].type == tensor_type::f32);
  CHECK(s.types[2].tensors == 2 * 8 + 1);
  double total = 0;
  for (auto& t : s.types)
    total += t.share;
  CHECK(total == Approx(1.0));
  CHECK(s.tokenizer_model == "llama");
  CHECK(s.vocab_size == 400);
  CHECK_FALSE(s.has_chat_template);
  CHECK(s.context_length == 256);
  auto lines = summary_lines(s);
  REQUIRE(lines.size() == 6);
  CHECK(lines[0] == "architecture: llama (exo test model)");
  CHECK(lines[2].rfind("tensor types: Q4_K ", 0) == 0);
  CHECK(lines[4] == "chat template: no");
}
