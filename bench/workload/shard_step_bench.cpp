// One shard's step on the cpu device with one thread: the host engine
// (model::llama_stage, reading the mapped model file), model::device_stage
// straight over the backend device, device_stage hosted by a device actor
// (what a shard runs: one device task per step, asked from another
// thread), and device_stage with its
// weights copied into device buffers instead of read in place from the
// mapped file (device_stage_options::weights_in_place). F32 test model of the
// workload benchmark (12 layers, 512 wide, ff 1536, vocabulary 2048); one
// stage of all layers, single-token decode steps after a 16-token prompt
// (run with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1, as the target does).
//
// All stages are built once and kept side by side; their decode steps
// alternate one by one (the order rotating each time), so a change of the
// machine's speed hits all alike. Two instances of the same stage can
// differ by up to ~10% on this VM (where their memory landed), so each
// device path runs three instances with their own buffers, and a second
// set of direct instances is timed as a control: its distance from the
// first is the noise floor. Printed: the median step of each path, and the
// medians of the paired ratios (each cycle's step over the host's and over
// the direct path's in the same cycle).
//
//   shard_step_bench [STEPS]

#include "actors/device/device_actor.hpp"
#include "actors/device/device_task.hpp"
#include "backends/factory/factory.hpp"
#include "messages/registration.hpp"
#include "core/model/device_stage.hpp"
#include "core/model/llama_model.hpp"
#include "core/model/ops.hpp"
#include "core/model/test_model.hpp"
#include "runtime/system/caf_tls.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>
#include <unistd.h>

using namespace exo;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr std::uint32_t prompt = 16;

std::vector<std::int32_t> prompt_tokens(const model::llama_model& m) {
  std::vector<std::int32_t> toks(prompt);
  for (std::uint32_t i = 0; i < prompt; ++i)
    toks[i] = 1
              + static_cast<std::int32_t>(i * 37 % (m.hparams().n_vocab - 1));
  return toks;
}

/// A stage that decodes one token per call after its prompt.
struct decode_path {
  virtual ~decode_path() = default;
  /// Seconds for decode step `i`, or a negative value on an error.
  virtual double step(std::uint32_t i) = 0;
};

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct device_path : decode_path {
  /// Kept alive by a stage hosted by a device actor (destroyed last).
  std::shared_ptr<model::device_ops> keep_ops;
  std::unique_ptr<model::device_stage> stage;
  model::cache_id cache = 0;
  std::vector<float> x, logits;

  /// Nothing on an error (printed).
  static std::unique_ptr<device_path>
  create(const std::shared_ptr<const model::llama_model>& m,
         model::device_ops& ops, int steps, bool in_place) {
    model::device_stage_options so;
    so.weights_in_place = in_place;
    auto st =
      model::device_stage::create(m, 0, m->hparams().n_layer, ops, so);
    if (!st) {
      std::printf("error: %s\n", st.err().to_string().c_str());
      return nullptr;
    }
    auto p = std::make_unique<device_path>();
    p->stage = std::move(*st);
    auto& hp = m->hparams();
    auto c = p->stage->new_cache(prompt + steps + 1);
    if (!c) {
      std::printf("error: %s\n", c.err().to_string().c_str());
      return nullptr;
    }
    p->cache = *c;
    p->x.resize(prompt * hp.n_embd);
    p->logits.resize(hp.n_vocab);
    auto toks = prompt_tokens(*m);
    (void) p->stage->embed(toks.data(), prompt, p->x.data());
    if (!p->stage->forward(p->cache, 0, p->x.data(), prompt,
                           p->logits.data()))
      return nullptr;
    return p;
  }

  double step(std::uint32_t i) override {
    auto t0 = clock_type::now();
    std::int32_t t = 1 + static_cast<std::int32_t>(i);
    (void) stage->embed(&t, 1, x.data());
    if (!stage->forward(cache, prompt + i, x.data(), 1, logits.data()))
      return -1;
    return seconds_since(t0);
  }
};

struct host_path : decode_path {
  model::llama_stage stage;
  model::kv_cache cache;
  std::vector<float> x, logits;

  host_path(const std::shared_ptr<const model::llama_model>& m, int steps)
    : stage(m, 0, m->hparams().n_layer),
      cache(stage.make_cache(prompt + steps + 1)) {
    auto& hp = m->hparams();
    x.resize(prompt * hp.n_embd);
    logits.resize(hp.n_vocab);
    auto toks = prompt_tokens(*m);
    stage.embed(toks.data(), prompt, x.data());
    stage.forward(x.data(), prompt, cache);
    stage.head(x.data() + (prompt - 1) * hp.n_embd, 1, logits.data());
  }

  double step(std::uint32_t i) override {
    auto t0 = clock_type::now();
    std::int32_t t = 1 + static_cast<std::int32_t>(i);
    stage.embed(&t, 1, x.data());
    stage.forward(x.data(), 1, cache);
    stage.head(x.data(), 1, logits.data());
    return seconds_since(t0);
  }
};

/// A device_stage on a device actor's thread, as a shard keeps it: built
/// by one device task, each decode step one more, asked from this thread
/// (what a shard's step costs beyond the math: two mailboxes and a
/// thread wake-up).
struct task_path : decode_path {
  caf::scoped_actor& self;
  caf::actor dev; ///< untyped: a task's answer is the task's own
  std::shared_ptr<device_path> hosted;

  task_path(caf::scoped_actor& s, const device_actor& d)
    : self(s), dev(caf::actor_cast<caf::actor>(d)) {
  }

  /// Runs `f(ctx)` on the device's thread; false on an error (printed).
  template <class F>
  bool ask(F f) {
    device_task t;
    t.kind = task_kind::compute;
    t.run = [f](device::task_context& ctx, caf::response_promise& rp) {
      if (f(ctx))
        rp.deliver(caf::ok_atom::value);
      else
        rp.deliver(caf::make_error(caf::sec::runtime_error, "task failed"));
    };
    bool ok = false;
    self->request(dev, caf::infinite, task_atom::value, std::move(t))
      .receive([&](caf::ok_atom) { ok = true; },
               [&](caf::error& e) {
                 std::printf("error: %s\n", caf::to_string(e).c_str());
               });
    return ok;
  }

  static std::unique_ptr<task_path>
  create(caf::scoped_actor& s, const device_actor& d,
         const std::shared_ptr<const model::llama_model>& m, int steps) {
    auto p = std::make_unique<task_path>(s, d);
    auto* raw = p.get();
    if (!p->ask([raw, m, steps](device::task_context& ctx) {
          auto ops = ctx.ops();
          auto r = device_path::create(m, *ops, steps, true);
          if (!r)
            return false;
          r->keep_ops = std::move(ops);
          raw->hosted = std::move(r);
          return true;
        }))
      return nullptr;
    return p;
  }

  double step(std::uint32_t i) override {
    auto t0 = clock_type::now();
    auto h = hosted;
    if (!ask([h, i](device::task_context&) { return h->step(i) >= 0; }))
      return -1;
    return seconds_since(t0);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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
  constexpr int empty_steps = 2000;
  double empty_us = 0;
  // Five paths; each device path has `copies` instances, each with its own
  // buffers (weights read in place from the mapped file, but for path 4,
  // which copies them into device buffers). times[p][i]: the mean of path
  // p's instances at decode step i.
  constexpr int n_paths = 5;
  constexpr int copies = 3;
  std::vector<std::vector<double>> times(n_paths,
                                         std::vector<double>(steps));
  {
    caf::actor_system sys{cfg};
    device::device_actor_config dc;
    dc.node = "bench";
    auto da = device::spawn_device_actor(sys, dev, dc);
    model::backend_ops direct(dev);
    caf::scoped_actor self{sys};
    // (path, instance), built in an interleaved order so that no path gets
    // all the early or all the late memory.
    std::vector<std::pair<int, std::unique_ptr<decode_path>>> runs;
    runs.emplace_back(0, std::make_unique<host_path>(m, steps));
    for (int c = 0; c < copies; ++c)
      for (int p = 1; p < n_paths; ++p) {
        std::unique_ptr<decode_path> r;
        if (p == 3)
          r = task_path::create(self, da, m, steps);
        else
          r = device_path::create(m, direct, steps, p != 4);
        if (!r)
          return 1;
        runs.emplace_back(p, std::move(r));
      }
    const auto n = runs.size();
    for (int i = 0; i < steps; ++i) {
      double sum[n_paths] = {};
      for (std::size_t k = 0; k < n; ++k) {
        auto& [p, run] = runs[(static_cast<std::size_t>(i) + k) % n];
        auto t = run->step(static_cast<std::uint32_t>(i));
        if (t < 0) {
          std::printf("error: decode step %d failed\n", i);
          return 1;
        }
        sum[p] += t;
      }
      for (int p = 0; p < n_paths; ++p)
        times[p][i] = p == 0 ? sum[p] : sum[p] / copies;
    }
    // The fixed cost of a step's task: one that computes nothing.
    task_path empty{self, da};
    auto t0 = clock_type::now();
    for (int i = 0; i < empty_steps; ++i)
      if (!empty.ask([](device::task_context&) { return true; }))
        return 1;
    empty_us = seconds_since(t0) / empty_steps * 1e6;
    runs.clear();
    caf::anon_send_exit(da, caf::exit_reason::user_shutdown);
  }
  std::printf("model: 12 layers, 512 wide, ff 1536, F32, vocabulary 2048; "
              "cpu device, 1 thread; %d decode steps after %u prompt "
              "tokens; %d instances of each device path, all alternating "
              "step by step\n",
              steps, prompt, copies);
  const char* names[n_paths] = {
    "host engine (llama_stage)", "device_stage on the cpu device",
    "the same, other instances (control)",
    "device_stage hosted by the device actor",
    "device_stage, weights copied to the device"};
  std::printf("%-40s %14s %11s %16s %16s\n", "path", "median ms/tok",
              "tokens/s", "paired vs host", "paired vs direct");
  for (int p = 0; p < n_paths; ++p) {
    std::vector<double> vs_host(steps), vs_direct(steps);
    for (int i = 0; i < steps; ++i) {
      vs_host[i] = times[p][i] / times[0][i];
      vs_direct[i] = times[p][i] / times[1][i];
    }
    auto med = median(times[p]);
    std::printf("%-40s %14.3f %11.1f %+15.1f%% %+15.1f%%\n", names[p],
                med * 1e3, 1.0 / med, (median(vs_host) - 1) * 100,
                (median(vs_direct) - 1) * 100);
  }
  std::printf("one empty device task, asked and answered: %.1f us (mean "
              "of %d)\n",
              empty_us, empty_steps);
  return 0;
}
