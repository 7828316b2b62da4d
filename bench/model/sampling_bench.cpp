// What the row adjustments of a job cost its thread, per row of logits:
// model::adjust_logits (a logit bias of 100 tokens, the repetition,
// frequency and presence penalties over a prompt and the tokens so far)
// and JSON mode's model::mask_json at three points of an object, on a
// generated Llama 3 vocabulary (byte-level BPE; asked for 128 256 tokens,
// the generator makes about 100 000 distinct ones) or the size given.
//
//   sampling_bench [ROWS] [VOCAB]
#include "core/model/json_constraint.hpp"
#include "core/model/llama_model.hpp"
#include "core/model/sampler.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

using namespace exo::model;

namespace {

using clock_type = std::chrono::steady_clock;

/// The median of `f`'s times over `rows` runs, in ms.
template <class F>
double median_ms(int rows, F f) {
  std::vector<double> t;
  for (int i = 0; i < rows; ++i) {
    auto a = clock_type::now();
    f();
    t.push_back(
      std::chrono::duration<double, std::milli>(clock_type::now() - a)
        .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 20;
  const std::uint32_t vocab =
    argc > 2 ? static_cast<std::uint32_t>(std::atoi(argv[2])) : 128256;
  const auto path = (std::filesystem::temp_directory_path()
                     / ("exo-sampling-bench-" + std::to_string(::getpid())
                        + ".gguf"))
                      .string();
  test_model_options o;
  o.layers = 1;
  o.dim = 32;
  o.ff = 64;
  o.vocab = vocab;
  o.tokenizer = "llama3";
  make_test_model(o, path);
  auto model = llama_model::load(path);
  auto tok = tokenizer::from_gguf(model->file());
  std::filesystem::remove(path);
  const std::size_t n = model->hparams().n_vocab;

  std::mt19937_64 rng(1);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  std::vector<float> row(n);
  for (auto& v : row)
    v = logit(rng);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<int>(n) - 1);
  std::vector<std::int32_t> prompt(2000), generated(500);
  for (auto& t : prompt)
    t = id(rng);
  for (auto& t : generated)
    t = id(rng);

  sampler_params p;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.5f;
  for (int i = 0; i < 100; ++i)
    p.bias_ids.push_back(static_cast<std::int32_t>(i * (n / 100)));
  p.bias_values.assign(p.bias_ids.size(), 1.0f);
  std::vector<float> scratch;
  std::printf("vocabulary: %zu tokens, %d rows each (median ms a row)\n", n,
              rows);
  std::printf("copy of the row                 %8.3f\n",
              median_ms(rows, [&] { scratch = row; }));
  std::printf("adjust_logits (2000 + 500)      %8.3f\n",
              median_ms(rows, [&] {
                scratch = row;
                adjust_logits(p, prompt.data(), prompt.size(),
                              generated.data(), generated.size(),
                              scratch.data(), n);
              }));
  const auto t0 = clock_type::now();
  const auto bytes = vocab_bytes_of(tok, n);
  std::printf("vocab_bytes_of (once a job)     %8.3f\n",
              std::chrono::duration<double, std::milli>(clock_type::now()
                                                        - t0)
                .count());
  const std::set<std::int32_t> end = tok.eog_ids();
  struct at {
    const char* name;
    const char* text;
  };
  for (const auto& a : {at{"mask_json at the start", ""},
                        at{"mask_json after {\"key\": ", "{\"key\": "},
                        at{"mask_json inside a string", "{\"key\": \"va"}}) {
    json_prefix s;
    s.feed(a.text);
    std::size_t kept = 0;
    const double ms = median_ms(rows, [&] {
      scratch = row;
      kept = mask_json(s, *bytes, end, scratch.data(), n);
    });
    std::printf("%-31s %8.3f  (%zu tokens kept)\n", a.name, ms, kept);
  }
  return 0;
}
