// Every GGUF weight format against llama.cpp itself: a small generated
// model per format (and a Q4_K_M mix), the same prompt, 64 greedy tokens
// from exo's CPU engine and from node-llama-cpp (one thread each). Without
// the test tools the test is skipped (exit 77), never passed.
//
// Where a format does not agree throughout, the test prints how many
// leading tokens agree and exo's top-2 logit margin at the first
// difference. exo's shared kernels (RMSNorm, rope, attention, F32 sums)
// give the bits of llama.cpp's AVX-512 build; on an AVX2-only machine
// llama.cpp loads its "haswell" variant, whose 8-lane sums differ in the
// last bits, and every format that rounds activations to 8 bits can turn
// such a difference into a step of about 0.01 in a logit. So a generation
// may part late at a near-tie: accepted when it agrees for at least
// `min_same` tokens and exo's margin there is under `near_tie` (logits
// here spread over about +-3). An arithmetic difference in a format (Q4_K
// before its repacked order: 22 tokens) fails.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/gguf/gguf.hpp"
#include "core/model/llama_model.hpp"
#include "core/model/ops.hpp"
#include "core/model/quant_mix.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "test/support/process.hpp"
#include "test/support/tools.hpp"

using namespace exo::model;
using json = nlohmann::json;

namespace {

const char* const prompt =
  "The model token was the first layer of the cluster, and the device said "
  "hello to the world";
constexpr size_t n_gen = 64;
constexpr size_t min_same = 48;
constexpr float near_tie = 0.03f;

std::string find_node() {
  return exo::test::require_node();
}

struct exo_run {
  std::vector<int32_t> prompt, generated;
  std::vector<float> margins; ///< top-1 minus top-2 logit per step
};

exo_run run_exo(const std::string& path, bool one_by_one) {
  auto model = llama_model::load(path);
  auto tok = tokenizer::from_gguf(model->file());
  exo_run r;
  if (tok.add_bos())
    r.prompt.push_back(tok.bos());
  auto body = tok.tokenize(prompt, false, false);
  r.prompt.insert(r.prompt.end(), body.begin(), body.end());
  llama_pipeline pipe(model, {0, model->hparams().n_layer});
  auto seq = pipe.new_sequence(512);
  std::vector<float> logits;
  if (one_by_one)
    for (auto t : r.prompt)
      logits = pipe.eval(seq, {t});
  else
    logits = pipe.eval(seq, r.prompt);
  const size_t nv = model->hparams().n_vocab;
  for (size_t i = 0; i < n_gen; ++i) {
    size_t best = 0;
    for (size_t v = 1; v < nv; ++v)
      if (logits[v] > logits[best])
        best = v;
    float second = -1e30f;
    for (size_t v = 0; v < nv; ++v)
      if (v != best)
        second = std::max(second, logits[v]);
    r.generated.push_back(static_cast<int32_t>(best));
    r.margins.push_back(logits[best] - second);
    if (i + 1 < n_gen)
      logits = pipe.eval(seq, {r.generated.back()});
  }
  return r;
}

} // namespace

TEST_CASE("every weight format generates llama.cpp's 64 greedy tokens",
          "[quant][oracle]") {
  exo::test::require_tool("node-llama-cpp");
  const std::string node = find_node();
  std::vector<std::string> formats = {
    "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k",
    "q4_k", "q5_k", "q6_k", "bf16", "f16",  "q4_k_m",
    // FORMAT@SEED: another seed's model. Seed 4's Q4_K_M parted from
    // llama.cpp after 44 tokens on AVX-512 machines while exo summed
    // batches of Q4_K in the AVX2 gemm's order (seed 1 agreed by chance).
    "q4_k_m@4", "q4_k@4"};
  // For investigations: EXO_ORACLE_FORMATS=q4_1,q8_0 EXO_ORACLE_SEED=3.
  if (const char* f = std::getenv("EXO_ORACLE_FORMATS")) {
    formats.clear();
    std::string list = f;
    for (size_t i = 0; i <= list.size();) {
      auto end = std::min(list.find(',', i), list.size());
      if (end > i)
        formats.push_back(list.substr(i, end - i));
      i = end + 1;
    }
  }
  uint64_t seed = 1;
  // EXO_ORACLE_ONE_BY_ONE=1: both engines take the prompt a token at a time.
  const bool one_by_one = std::getenv("EXO_ORACLE_ONE_BY_ONE") != nullptr;
  if (const char* s = std::getenv("EXO_ORACLE_SEED"))
    seed = std::strtoull(s, nullptr, 10);
  auto tmp = exo::test::temp_dir("exo-quant-oracle");
  json jobs = json::array();
  std::vector<std::string> paths;
  for (auto& entry : formats) {
    const auto at = entry.find('@');
    const std::string name = entry.substr(0, at);
    file_type ft;
    REQUIRE(parse_file_type(name, ft));
    test_model_options o;
    o.layers = 2;
    o.dim = 256;
    o.ff = 512;
    o.heads = 4;
    o.kv_heads = 2;
    o.vocab = 1024;
    o.ctx = 512;
    o.type = ft.base;
    o.mix = ft.kind;
    o.seed = at == std::string::npos
               ? seed
               : std::strtoull(entry.c_str() + at + 1, nullptr, 10);
    auto path = tmp + "/" + name + "-" + std::to_string(o.seed) + ".gguf";
    make_test_model(o, path);
    paths.push_back(path);
    jobs.push_back({{"model", path},
                    {"prompt", prompt},
                    {"n", n_gen},
                    {"batch", one_by_one ? 1 : 512}});
  }
  exo::test::write_file(tmp + "/jobs.json", jobs.dump());
  exo::test::process p(
    {node, std::string(EXO_SOURCE_DIR) + "/test/model/llama_generate.mjs",
     exo::test::tools_dir(), tmp + "/jobs.json", tmp + "/out.json"});
  int rc = p.wait(std::chrono::minutes(8));
  INFO("node stderr: " << p.err());
  REQUIRE(rc == 0);
  auto want = json::parse(exo::test::read_file(tmp + "/out.json"));
  REQUIRE(want.size() == formats.size());

  ops::set_threads(1);
  ops::set_llama_threads(1);
  for (size_t i = 0; i < formats.size(); ++i) {
    auto got = run_exo(paths[i], one_by_one);
    auto w_prompt = want[i]["prompt"].get<std::vector<int32_t>>();
    auto w_gen = want[i]["generated"].get<std::vector<int32_t>>();
    size_t same = 0;
    while (same < w_gen.size() && same < got.generated.size()
           && w_gen[same] == got.generated[same])
      ++same;
    std::printf("  %-7s %zu/%zu greedy tokens as llama.cpp's", 
                formats[i].c_str(), same, n_gen);
    if (same < n_gen && same < got.margins.size()) {
      std::printf(" (exo's top-2 margin there: %.4g; smallest before: ",
                  got.margins[same]);
      float least = 1e30f;
      for (size_t j = 0; j < same; ++j)
        least = std::min(least, got.margins[j]);
      std::printf("%.4g)", least);
    }
    std::printf("\n");
    INFO(formats[i]);
    CHECK(got.prompt == w_prompt);
    const bool tie = same >= min_same && same < got.margins.size()
                     && got.margins[same] < near_tie;
    if (same < n_gen)
      WARN(formats[i] << " parts from llama.cpp after " << same
                      << " tokens at a near-tie (exo's margin "
                      << got.margins[std::min(same, n_gen - 1)] << ")");
    CHECK((same == n_gen || tie));
    std::remove(paths[i].c_str());
  }
}
