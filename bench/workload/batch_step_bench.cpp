// Batched decoding on one device stage (issue 22): the aggregate tokens/s
// of decode steps that carry B sequences at once (one forward, every
// matrix read once for all of them), against B = 1, on the cpu device with
// one thread. One stage of all layers of a test model (12 layers, 512
// wide, ff 1536, vocabulary 2048, as the workload benchmark), each
// sequence after its own 16-token prompt, for F32 and Q4_K_M weights.
// Batch sizes alternate step by step (rotating), so a change of the
// machine's speed hits all alike; printed: the median step of each and
// its aggregate tokens/s, and the speed-up over one sequence. On any
// device but the cpu one, also how much of the median step went into
// handing its operations over (device_stage::submit_seconds: a GPU's
// launches; close to the whole step, the host bounds the step).
//
//   batch_step_bench [STEPS [B...]]
//
// Environment: EXO_BENCH_TYPE=f32|q4_k_m|q8_0|... (one type only: any
// that exo-model make-test writes; default f32 and q4_k_m), EXO_BENCH_KV=
// f16|q8_0|f32 (the KV cache's type, default the shards' f16),
// EXO_BENCH_PROMPT=N (each sequence's prompt, default 16 tokens: a longer
// one makes attention over the cache a larger part of a step),
// EXO_BENCH_CTX=N (each sequence's context, default what it uses: the KV
// memory printed shows what the sequences hold against their contexts),
// EXO_BENCH_SHAPE=1b (a Llama-3.2-1B-shaped model instead: 16 layers,
// 2048 wide, ff 8192, 32/8 heads, vocabulary 128256; weights far larger
// than the caches, as any real model's), EXO_BENCH_AMX=both (each batch
// size also without AMX tiles, alternating with it step by step; where
// the CPU has none both rows are the same path), EXO_BENCH_PREFILL=N
// (also times an N-token prompt into a fresh cache, 5 times, with AMX
// tiles and, with EXO_BENCH_AMX=both, without), EXO_BENCH_MODEL_DIR=DIR
// (keeps the generated model there and loads it on the next run),
// EXO_BENCH_BURST=K,L (also times K fresh L-token prompts read as one
// step, against one K x L-token prompt and the K prompts one by one: what
// a burst of requests costs, 5 times each, alternating), EXO_BENCH_ISA=
// avx2|scalar (the host kernels no wider than that, as on a CPU without
// AVX-512: host::limit_isa), EXO_BENCH_DEVICE=gpu-emulator (the stage on
// the GPU emulator's device instead of the cpu device: the CUDA kernels on
// the host, far slower than either; printed per batch size, what the last
// step asked of the GPU: kernel launches, barrier phases, copies and host
// waits, from gpu::emu::stats), EXO_BENCH_DEVICE=vulkan (the stage on the
// first Vulkan device: Mesa's lavapipe here), EXO_BENCH_DEVICE=cuda|hip
// (the first device of that backend: a GPU machine's; scripts/gpu-check.sh
// runs it), EXO_BENCH_FILE=F (that GGUF file's layers instead of a
// generated model; EXO_BENCH_TYPE and EXO_BENCH_SHAPE are then ignored).

#include "backends/factory/factory.hpp"
#include "backends/gpu_common/gpu_emulator.hpp"
#include "backends/gpu_common/gpu_emulator_backend.hpp"
#include "backends/host_kernels.hpp"
#include "core/model/device_stage.hpp"
#include "core/model/llama_model.hpp"
#include "core/model/test_model.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

using namespace exo;
using clock_type = std::chrono::steady_clock;

namespace {

std::uint32_t prompt = 16;
std::uint32_t n_ctx = 0; ///< 0: prompt + steps + 1
backend::kv_type kv = backend::kv_type::f16;
/// EXO_BENCH_KV_BLOCK: positions per block of a paged cache (0: contiguous);
/// -1: the stage's default.
int kv_block = -1;
/// EXO_BENCH_SHARED_PROMPT: every sequence of a step forks the first's
/// prompt instead of reading its own.
bool shared_prompt = false;
std::vector<std::uint32_t> batches = {1, 2, 4, 8, 16};
/// EXO_BENCH_AMX=both: every batch size with and without AMX tiles.
bool amx_both = false;
/// EXO_BENCH_PREFILL: tokens of the timed prompt (0: none).
std::uint32_t prefill = 0;
/// EXO_BENCH_BURST=K,L: K prompts of L tokens (0: none).
std::uint32_t burst_k = 0, burst_l = 0;
/// EXO_BENCH_DEVICE=gpu-emulator: the stage on the GPU emulator.
bool on_emulator = false;
/// EXO_BENCH_DEVICE=vulkan|cuda|hip|cpu: the stage on the first device of
/// that backend.
std::string device_kind = "cpu";
/// EXO_BENCH_FILE: the model to load instead of a generated one.
const char* model_file = nullptr;

struct batch_path {
  std::uint32_t b = 1;
  bool amx = true; ///< AMX tiles allowed (where the CPU has them)
  std::vector<model::cache_id> caches;
  std::vector<model::device_stage::segment> segs;
  std::vector<float> x, logits;
  std::vector<double> times;
  std::vector<double> submits; ///< of each step: device_ops::run's seconds
  backend::gpu::emu::runtime_stats last; ///< on the emulator: last step
};

/// One line of what a step asked of the emulated GPU.
void print_emulated(const batch_path& p) {
  const auto& s = p.last;
  std::uint64_t launches = 0, phases = 0;
  for (auto& [name, k] : s.kernels) {
    launches += k.launches;
    phases += k.phases;
  }
  std::printf("  %2u sequences, one step on the emulated GPU: %llu launches, "
              "%llu barrier phases, %llu host waits, %llu copies to the "
              "device (%llu B), %llu back (%llu B), %llu on it, %llu "
              "allocations\n   ",
              p.b, static_cast<unsigned long long>(launches),
              static_cast<unsigned long long>(phases),
              static_cast<unsigned long long>(s.host_waits),
              static_cast<unsigned long long>(s.to_device),
              static_cast<unsigned long long>(s.to_device_bytes),
              static_cast<unsigned long long>(s.to_host),
              static_cast<unsigned long long>(s.to_host_bytes),
              static_cast<unsigned long long>(s.on_device),
              static_cast<unsigned long long>(s.allocations));
  for (auto& [name, k] : s.kernels)
    std::printf(" %s %llu/%llu", name.c_str(),
                static_cast<unsigned long long>(k.launches),
                static_cast<unsigned long long>(k.phases));
  std::printf(" (launches/phases)\n");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int run_type(const char* type, int steps) {
  auto path = (std::filesystem::temp_directory_path()
               / ("exo-batch-bench-" + std::to_string(::getpid()) + "-"
                  + type + ".gguf"))
                .string();
  model::test_model_options o;
  o.layers = 12;
  o.dim = 512;
  o.ff = 1536;
  o.heads = 8;
  o.kv_heads = 4;
  o.vocab = 2048;
  o.ctx = 1024;
  if (const char* shape = std::getenv("EXO_BENCH_SHAPE");
      shape && std::string{shape} == "1b") {
    o.layers = 16;
    o.dim = 2048;
    o.ff = 8192;
    o.heads = 32;
    o.kv_heads = 8;
    o.vocab = 128256;
    o.ctx = 4096;
  }
  model::file_type ft;
  if (!model_file) {
    if (!model::parse_file_type(type, ft)) {
      std::printf("error: unknown type %s\n", type);
      return 1;
    }
    o.type = ft.base;
    o.mix = ft.kind;
  }
  // EXO_BENCH_MODEL_DIR: keep the generated file there and use it again
  // (the 1B shape takes minutes to make); by shape and type.
  const char* keep = std::getenv("EXO_BENCH_MODEL_DIR");
  if (keep && !model_file)
    path = (std::filesystem::path(keep)
            / ("batch-bench-" + std::to_string(o.layers) + "x"
               + std::to_string(o.dim) + "-" + type + ".gguf"))
             .string();
  if (model_file)
    path = model_file;
  else if (!keep || !std::filesystem::exists(path))
    model::make_test_model(o, path);
  auto m = model::llama_model::load(path);
  if (!keep && !model_file)
    std::filesystem::remove(path); // mapped: the pages stay
  auto& hp = m->hparams();
  backend::factory_options fo;
  fo.use_environment = false;
  fo.include = {device_kind};
  auto reg = backend::registry::create(fo);
  // (The registry falls back to the CPU: a GPU asked for must be there.)
  if (!reg || reg->devices().empty()
      || backend::to_string(reg->devices().front()->properties().kind)
           != device_kind) {
    std::printf("error: no %s device\n", device_kind.c_str());
    return 1;
  }
  if (device_kind != "cpu")
    std::printf("device: %s (%s)\n",
                reg->devices().front()->properties().id.c_str(),
                reg->devices().front()->properties().name.c_str());
  std::unique_ptr<backend::backend> emulator;
  if (on_emulator) {
    emulator = backend::make_gpu_emulator_backend();
    if (auto e = emulator->initialize(); !e) {
      std::printf("error: %s\n", e.err().to_string().c_str());
      return 1;
    }
  }
  model::backend_ops ops(on_emulator ? *emulator->device_at(0)
                                     : *reg->devices().front());
  model::device_stage_options so = model::shard_stage_options(hp);
  so.kv = kv;
  if (kv_block >= 0)
    so.kv_block_positions = static_cast<std::uint32_t>(kv_block);
  auto st = model::device_stage::create(m, 0, hp.n_layer, ops, so);
  if (!st) {
    std::printf("error: %s\n", st.err().to_string().c_str());
    return 1;
  }
  auto& stage = **st;
  std::vector<batch_path> paths;
  for (std::size_t bi = 0; bi < batches.size() * (amx_both ? 2 : 1); ++bi) {
    const auto b = batches[bi % batches.size()];
    batch_path p;
    p.b = b;
    p.amx = bi < batches.size();
    for (std::uint32_t s = 0; s < b; ++s) {
      if (shared_prompt && s > 0) {
        // The first sequence's prompt, forked (shared blocks when paged).
        auto c = stage.fork_cache(p.caches.front(), prompt);
        if (!c) {
          std::printf("error: %s\n", c.err().to_string().c_str());
          return 1;
        }
        p.caches.push_back(*c);
        p.segs.push_back({*c, prompt, 1});
        continue;
      }
      auto c = stage.new_cache(n_ctx ? n_ctx : prompt + steps + 1);
      if (!c) {
        std::printf("error: %s\n", c.err().to_string().c_str());
        return 1;
      }
      p.caches.push_back(*c);
      std::vector<std::int32_t> toks(prompt);
      for (std::uint32_t i = 0; i < prompt; ++i)
        toks[i] = static_cast<std::int32_t>((7 * i + 13 * s + 1) % hp.n_vocab);
      // In pieces of a step's most tokens.
      for (std::uint32_t p0 = 0; p0 < prompt; p0 += so.max_tokens) {
        const std::uint32_t n = std::min(so.max_tokens, prompt - p0);
        std::vector<float> x(std::size_t{n} * hp.n_embd), logits(hp.n_vocab);
        (void)stage.embed(toks.data() + p0, n, x.data());
        if (!stage.forward(*c, p0, x.data(), n, logits.data()))
          return 1;
      }
      p.segs.push_back({*c, prompt, 1});
    }
    p.x.resize(std::size_t{b} * hp.n_embd);
    p.logits.resize(std::size_t{b} * hp.n_vocab);
    paths.push_back(std::move(p));
  }
  {
    std::uint64_t seqs = 0;
    for (auto& p : paths)
      seqs += p.b;
    const auto ctx = n_ctx ? n_ctx : prompt + steps + 1;
    const auto whole = model::device_stage_memory(*m, 0, hp.n_layer, so)
                         .kv_bytes_per_token
                       * ctx * seqs;
    std::printf("KV caches after the prompts: %.1f MiB for %llu sequences "
                "of a %u-token context (%.1f MiB if each held its whole "
                "context)\n",
                static_cast<double>(stage.cache_bytes()) / (1 << 20),
                static_cast<unsigned long long>(seqs), ctx,
                static_cast<double>(whole) / (1 << 20));
    if (stage.paged()) {
      const auto kb = stage.kv_blocks();
      std::printf("paged KV cache: blocks of %u positions, %u of %u in use "
                  "(%u shared, %llu copied on write)\n",
                  stage.block_positions(), kb.used, kb.total, kb.shared,
                  static_cast<unsigned long long>(kb.copies));
    } else {
      std::printf("contiguous KV caches (one run of rows per sequence)\n");
    }
  }
  for (int i = 0; i < steps; ++i)
    for (std::size_t k = 0; k < paths.size(); ++k) {
      auto& p = paths[(k + static_cast<std::size_t>(i)) % paths.size()];
      std::vector<std::int32_t> toks(p.b);
      for (std::uint32_t s = 0; s < p.b; ++s)
        toks[s] = static_cast<std::int32_t>((31 * i + 5 * s + 3) % hp.n_vocab);
      backend::host::allow_amx(p.amx);
      backend::gpu::emu::reset_stats();
      auto t0 = clock_type::now();
      const double s0 = stage.submit_seconds();
      (void)stage.embed(toks.data(), p.b, p.x.data());
      auto ok = p.b == 1 ? stage.forward(p.caches[0], p.segs[0].pos,
                                         p.x.data(), 1, p.logits.data())
                         : stage.forward(p.segs, p.x.data(), p.logits.data());
      if (!ok) {
        std::printf("error: %s\n", ok.err().to_string().c_str());
        return 1;
      }
      p.times.push_back(
        std::chrono::duration<double>(clock_type::now() - t0).count());
      p.submits.push_back(stage.submit_seconds() - s0);
      p.last = backend::gpu::emu::stats();
      for (auto& sg : p.segs)
        ++sg.pos;
    }
  std::printf("%s (%u layers, %u wide, ff %u), %s KV cache, %u-token "
              "prompts, %d steps each, 1 thread:\n",
              type, hp.n_layer, hp.n_embd, hp.n_ff, backend::to_string(kv),
              prompt, steps);
  const double one = median(paths.front().times);
  for (auto& p : paths) {
    const double t = median(p.times);
    std::printf("  %2u sequences per step: %7.3f ms per step, %7.1f tokens/s "
                "(%.2fx one sequence)%s\n",
                p.b, t * 1e3, p.b / t, (p.b / t) / (1.0 / one),
                !amx_both ? "" : p.amx ? ", AMX" : ", no AMX");
  }
  if (on_emulator || device_kind != "cpu")
    // A device that runs its operations after they are handed over: how
    // much of a step the host spends handing them over (the launches).
    // Close to the whole step, the host bounds it.
    for (auto& p : paths) {
      const double t = median(p.times), sub = median(p.submits);
      std::printf("  %2u sequences per step: operations handed over in "
                  "%7.3f ms of the step (%.0f%%)\n",
                  p.b, sub * 1e3, 100.0 * sub / t);
    }
  if (on_emulator)
    for (auto& p : paths)
      print_emulated(p);
  backend::host::allow_amx(true);
  if (prefill > 0) {
    // An N-token prompt into a fresh cache, in pieces of a step's most
    // tokens; with and without AMX alternating.
    std::vector<std::int32_t> toks(prefill);
    for (std::uint32_t i = 0; i < prefill; ++i)
      toks[i] = static_cast<std::int32_t>((11 * i + 7) % hp.n_vocab);
    std::vector<double> t_amx, t_no;
    for (int rep = 0; rep < 5; ++rep)
      for (int with = 1; with >= (amx_both ? 0 : 1); --with) {
        backend::host::allow_amx(with != 0);
        auto c = stage.new_cache(prefill + 1);
        if (!c) {
          std::printf("error: %s\n", c.err().to_string().c_str());
          return 1;
        }
        auto t0 = clock_type::now();
        for (std::uint32_t p0 = 0; p0 < prefill; p0 += so.max_tokens) {
          const std::uint32_t n = std::min(so.max_tokens, prefill - p0);
          std::vector<float> x(std::size_t{n} * hp.n_embd),
            logits(hp.n_vocab);
          (void)stage.embed(toks.data() + p0, n, x.data());
          if (!stage.forward(*c, p0, x.data(), n, logits.data()))
            return 1;
        }
        (with ? t_amx : t_no)
          .push_back(std::chrono::duration<double>(clock_type::now() - t0)
                       .count());
        (void)stage.drop_cache(*c);
      }
    backend::host::allow_amx(true);
    std::printf("  %u-token prompt (pieces of %u): %.1f ms, %.1f tokens/s%s\n",
                prefill, so.max_tokens, median(t_amx) * 1e3,
                prefill / median(t_amx), amx_both ? ", AMX" : "");
    if (amx_both)
      std::printf("  %u-token prompt (pieces of %u): %.1f ms, %.1f tokens/s, "
                  "no AMX\n",
                  prefill, so.max_tokens, median(t_no) * 1e3,
                  prefill / median(t_no));
  }
  if (burst_k > 0 && burst_l > 0) {
    // K prompts of L tokens: as one step of K segments, as one prompt of
    // K x L tokens, and one by one. Within one step's tokens.
    const std::uint32_t total = std::min(burst_k * burst_l, so.max_tokens);
    const std::uint32_t k = total / burst_l;
    std::vector<std::int32_t> toks(std::size_t{k} * burst_l);
    for (std::size_t i = 0; i < toks.size(); ++i)
      toks[i] = static_cast<std::int32_t>((13 * i + 5) % hp.n_vocab);
    std::vector<float> x(toks.size() * hp.n_embd),
      logits(std::size_t{k} * hp.n_vocab);
    std::vector<double> t_seg, t_one, t_each;
    for (int rep = 0; rep < 5; ++rep)
      for (int how = 0; how < 3; ++how) {
        std::vector<model::cache_id> cs;
        for (std::uint32_t s = 0; s < (how == 1 ? 1 : k); ++s) {
          auto c = stage.new_cache(how == 1 ? k * burst_l + 1 : burst_l + 1);
          if (!c) {
            std::printf("error: %s\n", c.err().to_string().c_str());
            return 1;
          }
          cs.push_back(*c);
        }
        auto t0 = clock_type::now();
        (void)stage.embed(toks.data(), k * burst_l, x.data());
        if (how == 0) {
          std::vector<model::device_stage::segment> segs;
          for (auto c : cs)
            segs.push_back({c, 0, burst_l});
          if (!stage.forward(segs, x.data(), logits.data()))
            return 1;
        } else if (how == 1) {
          if (!stage.forward(cs[0], 0, x.data(), k * burst_l, logits.data()))
            return 1;
        } else {
          for (std::uint32_t s = 0; s < k; ++s)
            if (!stage.forward(cs[s], 0,
                               x.data() + std::size_t{s} * burst_l * hp.n_embd,
                               burst_l, logits.data()))
              return 1;
        }
        (how == 0 ? t_seg : how == 1 ? t_one : t_each)
          .push_back(std::chrono::duration<double>(clock_type::now() - t0)
                       .count());
        for (auto c : cs)
          (void)stage.drop_cache(c);
      }
    std::printf("  %u prompts of %u tokens: one step %.1f ms, one %u-token "
                "prompt %.1f ms, one by one %.1f ms\n",
                k, burst_l, median(t_seg) * 1e3, k * burst_l,
                median(t_one) * 1e3, median(t_each) * 1e3);
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(3, std::atoi(argv[1])) : 40;
  if (argc > 2) // only these batch sizes (profiling)
    batches.clear();
  for (int i = 2; i < argc; ++i)
    batches.push_back(static_cast<std::uint32_t>(std::max(1, std::atoi(argv[i]))));
  int rc = 0;
  const char* only = std::getenv("EXO_BENCH_TYPE"); // one type only
  if (const char* k = std::getenv("EXO_BENCH_KV")) {
    auto t = backend::parse_kv_type(k);
    if (!t) {
      std::printf("error: EXO_BENCH_KV must be f16, q8_0 or f32, not %s\n", k);
      return 2;
    }
    kv = *t;
  }
  if (const char* n = std::getenv("EXO_BENCH_PROMPT"))
    prompt = static_cast<std::uint32_t>(std::max(1, std::atoi(n)));
  if (const char* n = std::getenv("EXO_BENCH_KV_BLOCK")) // 0: contiguous
    kv_block = std::max(0, std::atoi(n));
  shared_prompt = std::getenv("EXO_BENCH_SHARED_PROMPT") != nullptr;
  if (const char* a = std::getenv("EXO_BENCH_AMX"))
    amx_both = std::string{a} == "both";
  if (const char* w = std::getenv("EXO_BENCH_ISA")) {
    const std::string isa{w};
    if (isa != "avx2" && isa != "scalar" && isa != "avx512") {
      std::printf("error: EXO_BENCH_ISA must be avx512, avx2 or scalar, "
                  "not %s\n", w);
      return 2;
    }
    namespace host = backend::host;
    host::limit_isa(isa == "avx2"     ? host::isa::avx2
                    : isa == "scalar" ? host::isa::scalar
                                      : host::isa::avx512);
  }
  if (const char* n = std::getenv("EXO_BENCH_PREFILL"))
    prefill = static_cast<std::uint32_t>(std::max(0, std::atoi(n)));
  if (const char* b = std::getenv("EXO_BENCH_BURST")) {
    unsigned k = 0, l = 0;
    if (std::sscanf(b, "%u,%u", &k, &l) != 2 || k == 0 || l == 0) {
      std::printf("error: EXO_BENCH_BURST must be K,L, not %s\n", b);
      return 2;
    }
    burst_k = k;
    burst_l = l;
  }
  if (const char* n = std::getenv("EXO_BENCH_CTX"))
    n_ctx = static_cast<std::uint32_t>(std::max(1, std::atoi(n)));
  if (const char* d = std::getenv("EXO_BENCH_DEVICE")) {
    const std::string dev{d};
    if (dev != "cpu" && dev != "gpu-emulator" && dev != "vulkan"
        && dev != "cuda" && dev != "hip") {
      std::printf("error: EXO_BENCH_DEVICE must be cpu, gpu-emulator, "
                  "vulkan, cuda or hip, not %s\n", d);
      return 2;
    }
    on_emulator = dev == "gpu-emulator";
    if (!on_emulator)
      device_kind = dev;
  }
  model_file = std::getenv("EXO_BENCH_FILE");
  if (model_file) {
    const std::string name =
      std::filesystem::path(model_file).filename().string();
    return run_type(name.c_str(), steps);
  }
  if (only) // any file type exo-model make-test writes (q8_0, q5_k_m, ...)
    return run_type(only, steps);
  for (const char* t : {"f32", "q4_k_m"})
    rc |= run_type(t, steps);
  return rc;
}
