// bench_model_cpu: prompt-processing and generation speed of the CPU llama
// engine on a generated mid-size model (12 layers, 768 wide, ff 2048,
// 12 heads / 4 KV heads, 32000-token vocabulary), F16 and F32, 1 and 2
// threads. Generation reads every weight once per token, so it is bound by
// memory bandwidth: the table shows the bytes read per token and the GB/s.
//
//   bench_model_cpu [--prompt N] [--gen N] [--layers N]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/model/llama_model.hpp"
#include "core/model/ops.hpp"
#include "core/model/sampler.hpp"
#include "core/model/test_model.hpp"

using namespace exo::model;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct result {
  double prompt_tps, gen_tps;
};

result run(const std::shared_ptr<llama_model>& m, int threads,
           size_t n_prompt, size_t n_gen) {
  ops::set_threads(threads);
  llama_pipeline pipe(m, {0, m->hparams().n_layer});
  std::vector<int32_t> prompt(n_prompt);
  for (size_t i = 0; i < n_prompt; ++i)
    prompt[i] = static_cast<int32_t>(1 + (i * 7919) % 30000);
  // Warm-up: touch every page of the mapping once.
  {
    auto s = pipe.new_sequence(8);
    pipe.eval(s, {1});
  }
  auto seq = pipe.new_sequence(static_cast<uint32_t>(n_prompt + n_gen + 1));
  auto t0 = clock_type::now();
  auto logits = pipe.eval(seq, prompt);
  double tp = seconds_since(t0);
  t0 = clock_type::now();
  for (size_t i = 0; i < n_gen; ++i) {
    auto id = sampler::argmax(logits.data(), logits.size());
    logits = pipe.eval(seq, {id});
  }
  double tg = seconds_since(t0);
  return {n_prompt / tp, n_gen / tg};
}

} // namespace

int main(int argc, char** argv) {
  size_t n_prompt = 64, n_gen = 32;
  uint32_t layers = 12;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--prompt"))
      n_prompt = std::strtoul(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--gen"))
      n_gen = std::strtoul(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--layers"))
      layers = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
  }
  std::printf("CPU llama engine: %u layers, dim 768, ff 2048, heads 12/4, "
              "vocab 32000; prompt %zu tokens, generation %zu tokens\n\n",
              layers, n_prompt, n_gen);
  std::printf("| type | threads | prompt tok/s | gen tok/s | MB/token | "
              "GB/s |\n");
  std::printf("|------|---------|--------------|-----------|----------|"
              "------|\n");
  for (auto type : {tensor_type::f16, tensor_type::f32}) {
    test_model_options o;
    o.layers = layers;
    o.dim = 768;
    o.ff = 2048;
    o.heads = 12;
    o.kv_heads = 4;
    o.vocab = 32000;
    o.ctx = 1024;
    o.type = type;
    auto path = (std::filesystem::temp_directory_path()
                 / ("exo-bench-model-" + std::to_string(::getpid()) + "-"
                    + to_string(type) + ".gguf"))
                  .string();
    make_test_model(o, path);
    auto m = llama_model::load(path);
    // Bytes read per generated token: every tensor but the embedding (one
    // row of it is read), plus the head (which is output.weight).
    uint64_t bytes = 0;
    for (auto& t : m->file().tensors())
      if (t.name != "token_embd.weight")
        bytes += t.n_bytes;
    for (int threads : {1, 2}) {
      auto r = run(m, threads, n_prompt, n_gen);
      std::printf("| %s | %d | %.1f | %.2f | %.1f | %.2f |\n", to_string(type),
                  threads, r.prompt_tps, r.gen_tps, bytes / 1e6,
                  bytes * r.gen_tps / 1e9);
      std::fflush(stdout);
    }
    m.reset();
    std::filesystem::remove(path);
  }
  return 0;
}
