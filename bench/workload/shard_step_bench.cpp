// One shard's step, three ways, on the cpu device with one thread: the host
// engine (model::llama_stage, what shards ran before), model::device_stage
// straight over the backend device, and device_stage through a device
// actor (what a shard runs: one write, one batched compute request, one
// read per step). F32 test model of the workload benchmark (12 layers, 512
// wide, ff 1536, vocabulary 2048); one stage of all layers, single-token
// decode steps after a 16-token prompt (run with OMP_NUM_THREADS=1
// OPENBLAS_NUM_THREADS=1, as the target does). Rounds interleave the three so
// that machine load hits them alike; the best round of each is printed.
//
//   shard_step_bench [STEPS]

#include "actors/device/device_actor.hpp"
#include "actors/shard/actor_device_ops.hpp"
#include "backends/factory.hpp"
#include "messages/registration.hpp"
#include "runtime/model/device_stage.hpp"
#include "runtime/model/llama_model.hpp"
#include "runtime/model/ops.hpp"
#include "runtime/model/test_model.hpp"
#include "runtime/tls/caf_tls.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <unistd.h>

using namespace exo;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr std::uint32_t prompt = 16;

/// Seconds per decode step of `stage` over `ops` (prompt, then `steps`
/// single tokens), or -1 on an error.
double time_device(const std::shared_ptr<const model::llama_model>& m,
                   model::device_ops& ops, int steps) {
  auto st = model::device_stage::create(m, 0, m->hparams().n_layer, ops);
  if (!st) {
    std::printf("error: %s\n", st.err().to_string().c_str());
    return -1;
  }
  auto& s = **st;
  auto& hp = m->hparams();
  auto c = s.new_cache(prompt + steps + 1);
  std::vector<std::int32_t> toks(prompt);
  for (std::uint32_t i = 0; i < prompt; ++i)
    toks[i] = 1 + static_cast<std::int32_t>(i * 37 % (hp.n_vocab - 1));
  std::vector<float> x(prompt * hp.n_embd), logits(hp.n_vocab);
  (void) s.embed(toks.data(), prompt, x.data());
  if (!s.forward(*c, 0, x.data(), prompt, logits.data()))
    return -1;
  auto t0 = clock_type::now();
  for (int i = 0; i < steps; ++i) {
    std::int32_t t = 1 + i;
    (void) s.embed(&t, 1, x.data());
    if (!s.forward(*c, prompt + i, x.data(), 1, logits.data()))
      return -1;
  }
  return std::chrono::duration<double>(clock_type::now() - t0).count()
         / steps;
}

double time_host(const std::shared_ptr<const model::llama_model>& m,
                 int steps) {
  model::llama_stage s(m, 0, m->hparams().n_layer);
  auto& hp = m->hparams();
  auto c = s.make_cache(prompt + steps + 1);
  std::vector<std::int32_t> toks(prompt);
  for (std::uint32_t i = 0; i < prompt; ++i)
    toks[i] = 1 + static_cast<std::int32_t>(i * 37 % (hp.n_vocab - 1));
  std::vector<float> x(prompt * hp.n_embd), logits(hp.n_vocab);
  s.embed(toks.data(), prompt, x.data());
  s.forward(x.data(), prompt, c);
  s.head(x.data() + (prompt - 1) * hp.n_embd, 1, logits.data());
  auto t0 = clock_type::now();
  for (int i = 0; i < steps; ++i) {
    std::int32_t t = 1 + i;
    s.embed(&t, 1, x.data());
    s.forward(x.data(), 1, c);
    s.head(x.data(), 1, logits.data());
  }
  return std::chrono::duration<double>(clock_type::now() - t0).count()
         / steps;
}

} // namespace

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 48;
  model::ops::set_threads(1);
  auto path = (std::filesystem::temp_directory_path()
               / ("exo-shard-step-" + std::to_string(::getpid()) + ".gguf"))
                .string();
  model::test_model_options o;
  o.layers = 12;
  o.dim = 512;
  o.ff = 1536;
  o.heads = 8;
  o.kv_heads = 4;
  o.vocab = 2048;
  o.ctx = 512;
  model::make_test_model(o, path);
  std::shared_ptr<const model::llama_model> m = model::llama_model::load(path);
  std::filesystem::remove(path);

  backend::factory_options fo;
  fo.use_environment = false;
  fo.include = {"cpu"};
  auto reg = backend::registry::create(fo);
  if (!reg || reg->devices().empty()) {
    std::printf("no cpu device\n");
    return 1;
  }
  auto& dev = *reg->devices().front();
  caf::actor_system_config cfg;
  register_messages(cfg);
  // The settings exo-node runs its actor system with: idle scheduler
  // workers wait instead of polling every 50 us, which on one core took
  // 5-15% of the device actor's compute time.
  tls::apply_transport_settings(cfg);
  double best[3] = {1e30, 1e30, 1e30};
  {
    caf::actor_system sys{cfg};
    device::device_actor_config dc;
    dc.node = "bench";
    auto da = device::spawn_device_actor(sys, dev, dc);
    for (int round = 0; round < 3; ++round) {
      best[0] = std::min(best[0], time_host(m, steps));
      model::backend_ops direct(dev);
      best[1] = std::min(best[1], time_device(m, direct, steps));
      shard::actor_device_ops via(sys, da, dev.properties().id);
      best[2] = std::min(best[2], time_device(m, via, steps));
    }
    caf::anon_send_exit(da, caf::exit_reason::user_shutdown);
  }
  std::printf("model: 12 layers, 512 wide, ff 1536, F32, vocabulary 2048; "
              "cpu device, 1 thread; %d decode steps after %u prompt "
              "tokens, best of 3 rounds\n",
              steps, prompt);
  const char* names[3] = {"host engine (llama_stage)",
                          "device_stage on the cpu device",
                          "device_stage through the device actor"};
  for (int i = 0; i < 3; ++i)
    std::printf("%-40s %8.3f ms/token %8.1f tokens/s %+6.1f%%\n", names[i],
                best[i] * 1e3, 1.0 / best[i],
                (best[i] / best[0] - 1.0) * 100.0);
  return 0;
}
