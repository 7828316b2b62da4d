// Jobs through pipelines of shard actors in one process: the same tokens
// and logits on one stage and on three, several sequences in flight equal
// to running them one by one, and bad steps refused with a message. Shards
// compute on device actors: stage i on the i-th of this machine's devices
// (cpu, Vulkan where present, a simulated A100), round robin.

#include "actors/device/device_actor.hpp"
#include "actors/workload/handoff_check.hpp"
#include "actors/workload/job_actor.hpp"
#include "actors/workload/shard_actor.hpp"
#include "actors/workload/simple_placement.hpp"
#include "backends/factory/factory.hpp"
#include "backends/sim/sim_backend.hpp"
#include "messages/errors.hpp"
#include "messages/registration.hpp"
#include "messages/workload.hpp"
#include "core/model/device_stage.hpp"
#include "core/model/json_constraint.hpp"
#include "core/model/llama_model.hpp"
#include "core/model/sampler.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/workload/prefix_key.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <optional>

#include <thread>

#include <caf/all.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <functional>
#include <unistd.h>

using namespace exo;

/// What job_setup::on_token is given beside a token (its log-probabilities).
using lp_ptr = const exo::model::token_logprobs*;

namespace {

backend::registry& registry() {
  static backend::registry reg = [] {
    backend::factory_options opts;
    opts.use_environment = false;
    opts.include = {"cpu", "vulkan", "sim"};
    opts.sim.devices = {{"a100-40g", ""}};
    auto r = backend::registry::create(opts);
    REQUIRE(r.ok());
    return std::move(*r);
  }();
  return reg;
}

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::string path;
  std::shared_ptr<const model::llama_model> model;
  std::vector<backend::device*> devs;
  std::vector<device_actor> dev_actors;
  /// The shards' wait for the other jobs of a shared stage.
  std::chrono::microseconds batch_wait{2000};
  /// The context of the shards' sequences.
  std::uint32_t n_ctx = 128;
  /// The shards' prefix cache (none unless a test asks).
  std::uint64_t prefix_cache_bytes = 0;
  /// How long a device keeps a stage after its last shard (none unless a
  /// test asks).
  std::chrono::milliseconds keep_alive{0};

  fixture() {
    register_messages(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    devs = registry().devices();
    for (auto* d : devs) {
      device::device_actor_config dc;
      dc.node = "test";
      dev_actors.push_back(device::spawn_device_actor(*sys, *d, dc));
    }
    path = (std::filesystem::temp_directory_path()
            / ("exo-job-test-" + std::to_string(::getpid()) + ".gguf"))
             .string();
    model::test_model_options o;
    o.layers = 4;
    o.dim = 64;
    o.ff = 128;
    o.vocab = 400;
    o.seed = 7;
    model::make_test_model(o, path);
    model = model::llama_model::load(path);
  }
  ~fixture() {
    caf::scoped_actor self{*sys};
    for (auto& d : dev_actors) {
      self->send_exit(d, caf::exit_reason::user_shutdown);
      self->wait_for(d);
    }
    std::filesystem::remove(path);
  }

  /// The device actor of the first device of `kind`, or of the first one.
  std::size_t device_index(const std::string& kind) const {
    for (std::size_t i = 0; i < devs.size(); ++i)
      if (kind == backend::to_string(devs[i]->properties().kind))
        return i;
    return 0;
  }

  std::vector<caf::actor> pipeline(const std::vector<std::uint32_t>& b,
                                   std::vector<std::size_t> on = {}) {
    std::vector<caf::actor> stages;
    for (std::size_t i = 0; i + 1 < b.size(); ++i) {
      workload::shard_setup s;
      s.model = model;
      s.first = b[i];
      s.last = b[i + 1];
      s.n_ctx = n_ctx;
      auto d = i < on.size() ? on[i] : i % devs.size();
      s.device = dev_actors[d];
      s.device_id = devs[d]->properties().id;
      s.node = "test";
      s.batch_wait = batch_wait;
      s.prefix_cache_bytes = prefix_cache_bytes;
      s.keep_alive = keep_alive;
      stages.push_back(workload::spawn_shard(*sys, std::move(s)));
    }
    caf::scoped_actor self{*sys};
    for (std::size_t i = 0; i + 1 < stages.size(); ++i)
      self->request(stages[i], std::chrono::seconds(10), next_atom::value,
                    stages[i + 1])
        .receive([](caf::ok_atom) {},
                 [](caf::error& e) { FAIL(caf::to_string(e)); });
    return stages;
  }

  /// Stops the stages. Every job through them has ended by then, so a
  /// stage that still answers holds no KV cache (checked: the KV
  /// accounting never leaks), unless `held` says the test keeps some.
  void stop(std::vector<caf::actor>& stages, bool held = false,
            int line = __builtin_LINE()) { // (the caller's line)
    caf::scoped_actor self{*sys};
    for (auto& s : stages) {
      // A job's release follows its last step: give it a moment.
      std::string kv;
      for (int i = 0; i < 200 && !held; ++i) {
        kv.clear();
        self->request(s, std::chrono::seconds(5), inspect_atom::value)
          .receive(
            [&](actor_snapshot& snap) {
              auto it = snap.fields.find("kv_cache_bytes");
              kv = it == snap.fields.end() ? "0" : it->second;
            },
            [&](caf::error&) { kv = "0"; }); // gone already
        if (kv == "0")
          break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      INFO("a stage still holds KV caches when it is stopped (line "
           << line << ")");
      CHECK((held || kv == "0"));
      self->send_exit(s, caf::exit_reason::user_shutdown);
      self->wait_for(s);
    }
  }

  /// A job of this model over `stages`.
  workload::job_setup job(std::uint64_t id, std::vector<caf::actor> stages,
                          std::vector<std::vector<std::int32_t>> prompts,
                          std::uint32_t n_gen, float temperature,
                          std::uint64_t seed = 3) const {
    workload::job_setup j;
    j.id = id;
    j.stages = std::move(stages);
    j.n_embd = model->hparams().n_embd;
    j.n_vocab = model->hparams().n_vocab;
    j.n_layer = model->hparams().n_layer;
    j.n_embd_kv = model->hparams().n_embd_kv();
    j.prompts = std::move(prompts);
    j.n_gen = n_gen;
    j.sampling.temperature = temperature;
    j.sampling.seed = seed;
    return j;
  }

  /// What a test recoverer was asked, and the stages it made.
  struct recovery_seen {
    std::vector<std::uint32_t> lost;
    std::string why;
    bool device_only = false;
    std::vector<caf::actor> made;
  };

  /// A recoverer (the coordinator's part in a recovery) that records
  /// what it is asked in `got`, runs `before` (optional), and answers with
  /// a fresh pipeline of `bounds` on devices `on`, named `names`. (An
  /// argument besides self: CAF 0.17 binds a null empty tuple otherwise,
  /// which UBSan reports.)
  caf::actor recoverer(std::shared_ptr<recovery_seen> got,
                       std::vector<std::uint32_t> bounds,
                       std::vector<std::size_t> on,
                       std::vector<std::string> names,
                       std::function<void()> before = {},
                       bool tell_bounds = true) {
    return sys->spawn<caf::detached>(
      [this, got, bounds, on, names, before,
       tell_bounds](caf::event_based_actor*, int) -> caf::behavior {
        return {
          [=](recover_atom, std::uint64_t, std::vector<std::uint32_t>& lost,
              std::string& why, bool device_only) -> caf::result<job_pipeline> {
            got->lost = lost;
            got->why = why;
            got->device_only = device_only;
            if (before)
              before();
            got->made = pipeline(bounds, on);
            job_pipeline p;
            p.stages = got->made;
            p.names = names;
            if (tell_bounds)
              p.bounds = bounds;
            return p;
          },
        };
      },
      0);
  }

  workload::job_result run(const std::vector<std::uint32_t>& bounds,
                       std::vector<std::vector<std::int32_t>> prompts,
                       std::uint32_t n_gen, float temperature,
                       std::uint64_t seed = 3) {
    auto stages = pipeline(bounds);
    auto r = workload::run_job(
      *sys, job(1, stages, std::move(prompts), n_gen, temperature, seed));
    stop(stages);
    return r;
  }
};

std::vector<std::vector<std::int32_t>> prompts() {
  return {{1, 17, 42, 99, 5}, {1, 200, 3}, {1, 7, 7, 7, 7, 7, 7}, {1, 250}};
}

float max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i])
                              / std::max(1.0f, std::abs(b[i])));
  return worst;
}

/// A generated model beside the fixture's file (`suffix` names it),
/// loaded; the file goes at once (mapped: the pages stay).
std::shared_ptr<const model::llama_model>
generated(const fixture& f, const std::string& suffix,
          const model::test_model_options& o) {
  auto path = f.path + suffix;
  model::make_test_model(o, path);
  auto m = model::llama_model::load(path);
  std::filesystem::remove(path);
  return m;
}

namespace {

/// Shards of `m` (layers split at `bounds`) on the fixture's cpu device,
/// linked in order.
std::vector<caf::actor>
shards_of(fixture& f, std::shared_ptr<const model::llama_model> m,
          const std::vector<std::uint32_t>& bounds) {
  std::vector<caf::actor> stages;
  auto d = f.device_index("cpu");
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    workload::shard_setup s;
    s.model = m;
    s.first = bounds[i];
    s.last = bounds[i + 1];
    s.n_ctx = 128;
    s.device = f.dev_actors[d];
    s.device_id = f.devs[d]->properties().id;
    s.node = "test";
    stages.push_back(workload::spawn_shard(*f.sys, std::move(s)));
  }
  caf::scoped_actor self{*f.sys};
  for (std::size_t i = 0; i + 1 < stages.size(); ++i)
    self->request(stages[i], std::chrono::seconds(10), next_atom::value,
                  stages[i + 1])
      .receive([](caf::ok_atom) {},
               [](caf::error& e) { FAIL(caf::to_string(e)); });
  return stages;
}

} // namespace

/// A draft for the fixture's model: another seed, two layers, the same
/// vocabulary (it rarely agrees with the model).
std::shared_ptr<const model::llama_model> other_draft(fixture& f) {
  model::test_model_options o;
  o.layers = 2;
  o.dim = 64;
  o.ff = 128;
  o.vocab = 400;
  o.seed = 99;
  return generated(f, ".draft", o);
}

/// A draft model and the bounds of its stages.
struct draft_case {
  const char* name;
  std::shared_ptr<const model::llama_model> m;
  std::vector<std::uint32_t> bounds;
};

/// A 4-layer, 256-wide Q4_K model for the fixture (a step carries 512
/// tokens of it): Q4_K matrices' products over 4 rows or more take
/// llama.cpp's batched kernels, whose sums depend on how many rows go
/// together, so a prompt read in other pieces would get other bits.
void use_q4k_model(fixture& f) {
  model::test_model_options o;
  o.layers = 4;
  o.dim = 256;
  o.ff = 512;
  o.vocab = 400;
  o.seed = 7;
  o.type = model::tensor_type::q4_k;
  f.model = generated(f, ".q4k", o);
  REQUIRE(workload::max_batch_tokens(256) == 512);
}

/// n tokens of a 400-token vocabulary, in a pattern set by `mul`.
std::vector<std::int32_t> pattern(std::size_t n, std::int32_t mul) {
  std::vector<std::int32_t> p(n);
  for (std::size_t i = 0; i < n; ++i)
    p[i] = static_cast<std::int32_t>((mul * i + 1) % 400);
  return p;
}

/// Where a job's stages run: one stage on the cpu device, two on cpu and
/// sim (host devices only: the same bits as alone), three on cpu, Vulkan
/// and sim.
struct layout {
  std::vector<std::uint32_t> bounds;
  std::vector<std::size_t> on;
  bool host; ///< host devices only: the same bits
};

std::vector<layout> layouts_of(const fixture& f) {
  auto cpu = f.device_index("cpu");
  auto sim = f.device_index("sim");
  return {{{0, 4}, {cpu}, true},
          {{0, 2, 4}, {cpu, sim}, true},
          {{0, 2, 3, 4}, {0, 1, 2}, false}};
}

/// An actor's counters for the console (inspect_atom).
actor_snapshot snapshot_of(caf::scoped_actor& self, const caf::actor& a) {
  actor_snapshot out;
  self->request(a, std::chrono::seconds(10), inspect_atom::value)
    .receive([&](actor_snapshot& s) { out = std::move(s); },
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  return out;
}

/// A numeric field of a snapshot.
std::uint64_t num(const actor_snapshot& s, const char* k) {
  auto it = s.fields.find(k);
  INFO(s.name << " has no field " << k);
  REQUIRE(it != s.fields.end());
  return std::stoull(it->second);
}

/// The snapshot of stage `a` once it holds no KV cache (a job's release
/// follows its last steps), or after two seconds.
actor_snapshot released(caf::scoped_actor& self, const caf::actor& a) {
  for (int i = 0; i < 200; ++i) {
    auto snap = snapshot_of(self, a);
    if (num(snap, "kv_cache_bytes") == 0)
      return snap;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return snapshot_of(self, a);
}

} // namespace

TEST_CASE("the even split skips members without a usable device, and "
          "names one when none has any",
          "[workload]") {
  auto dev = [](std::string node, std::string id, device_state s) {
    device_info d;
    d.node = node;
    d.id = id;
    d.name = id;
    d.backend = "sim";
    d.state = s;
    return d;
  };
  using members = std::vector<std::pair<std::string, std::vector<device_info>>>;
  members m{{"coord", {dev("coord", "cpu:0", device_state::ready)}},
            {"lost", {}}, // its only device failed under a stage
            {"paused", {dev("paused", "sim:0", device_state::paused)}},
            {"peer", {dev("peer", "sim:1", device_state::busy)}}};
  auto plan = exo::workload::simple_placement(6, 3, m);
  REQUIRE(plan.size() == 3);
  CHECK(plan[0].node == "coord");
  CHECK(plan[1].node == "peer");
  CHECK(plan[1].device == "sim:1");
  CHECK(plan[2].node == "coord");
  CHECK(plan[0].first == 0);
  CHECK(plan[2].last == 6);
  members none{{"lost", {}},
               {"paused", {dev("paused", "sim:0", device_state::paused)}}};
  CHECK_THROWS_WITH(exo::workload::simple_placement(6, 2, none),
                    Catch::Contains("node lost has no usable device"));
}

TEST_CASE("one stage and three stages give the same tokens and logits",
          "[workload]") {
  fixture f;
  for (float temperature : {0.0f, 0.8f}) {
    auto one = f.run({0, 4}, {prompts()[0]}, 12, temperature);
    auto three = f.run({0, 1, 3, 4}, {prompts()[0]}, 12, temperature);
    REQUIRE(one.error.empty());
    REQUIRE(three.error.empty());
    CHECK(one.tokens[0].size() == 12);
    CHECK(one.tokens == three.tokens);
    // Stages sit on cpu, Vulkan and sim devices: GPU attention sums in F32
    // where the host computes llama.cpp's half accumulator (1.3e-3 seen).
    CHECK(max_rel_diff(three.logits[0], one.logits[0]) <= 5e-3f);
  }
}

TEST_CASE("stages of one node pass activations by device copy",
          "[workload]") {
  fixture f;
  auto job = [&](std::vector<caf::actor>& stages) {
    workload::job_setup j;
    j.id = 5;
    j.stages = stages;
    j.n_embd = f.model->hparams().n_embd;
    j.n_vocab = f.model->hparams().n_vocab;
    j.prompts = {prompts()[0], prompts()[1]};
    j.n_gen = 8;
    auto r = workload::run_job(*f.sys, std::move(j));
    REQUIRE(r.error.empty());
    return r;
  };
  auto cpu = f.device_index("cpu");
  auto lone = f.pipeline({0, 4}, {cpu});
  auto one = job(lone);
  f.stop(lone);
  // Three stages on one device (a device copy on it): bit for bit the one
  // stage's logits. Then on three devices of this node (the step's task
  // writes the activations into the peer device's inbox): GPU attention
  // sums in F32 where the host kernel keeps llama.cpp's half accumulator.
  std::vector<std::vector<std::size_t>> layouts{
    {cpu, cpu, cpu}, {0, 1 % f.devs.size(), 2 % f.devs.size()}};
  for (auto& on : layouts) {
    auto stages = f.pipeline({0, 1, 3, 4}, on);
    auto r = job(stages);
    CHECK(r.tokens == one.tokens);
    const bool same_device = on[0] == on[1] && on[1] == on[2];
    for (std::size_t k = 0; k < 2; ++k) {
      if (same_device)
        CHECK(r.logits[k] == one.logits[k]);
      else
        CHECK(max_rel_diff(r.logits[k], one.logits[k]) <= 5e-3f);
    }
    caf::scoped_actor self{*f.sys};
    for (std::size_t i = 0; i + 1 < stages.size(); ++i)
      self->request(stages[i], std::chrono::seconds(10), inspect_atom::value)
        .receive(
          [&](actor_snapshot& snap) {
            // Every step of both sequences went on by device copy.
            CHECK(snap.fields["host_handoffs"] == "0");
            CHECK(snap.fields["device_handoffs"] == snap.fields["steps"]);
            CHECK(snap.fields["device_handoffs"] != "0");
          },
          [](caf::error& e) { FAIL(caf::to_string(e)); });
    // Stage 2 and 3 hold one inbox per sequence until the job releases
    // them (run_job's end sent the release; ask after it is processed).
    self->request(stages[1], std::chrono::seconds(10), inspect_atom::value)
      .receive([&](actor_snapshot& snap) { CHECK(snap.fields["inboxes"] == "0"); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    f.stop(stages);
  }
}

TEST_CASE("a shard refuses inbox requests it cannot honour", "[workload]") {
  fixture f;
  auto stages = f.pipeline({0, 2, 4}, {0, 0});
  caf::scoped_actor self{*f.sys};
  auto refused = [&](caf::actor& to, std::uint64_t bytes,
                     const std::string& why) {
    self->request(to, std::chrono::seconds(10), inbox_atom::value,
                  std::uint64_t{1}, std::uint32_t{0}, bytes)
      .receive([&](handle_id, caf::actor&) { FAIL("accepted " << bytes); },
               [&](caf::error& e) {
                 CHECK_THAT(error_message(e), Catch::Contains(why));
               });
  };
  const std::uint64_t row = f.model->hparams().n_embd * 4;
  refused(stages[0], row, "first stage");
  refused(stages[1], 0, "whole rows");
  refused(stages[1], row + 1, "whole rows");
  refused(stages[1], std::uint64_t{1} << 40, "whole rows");
  // A step that claims activations on the device without an inbox.
  stage_step s;
  s.job = 9;
  s.tokens = {1};
  s.on_device = true;
  self->request(stages[1], std::chrono::seconds(10), forward_atom::value, s)
    .receive([](stage_step&) { FAIL("accepted"); },
             [&](caf::error& e) {
               CHECK_THAT(error_message(e),
                          Catch::Contains("no activations on this device"));
             });
  f.stop(stages);
}

TEST_CASE("a one-stage job gives the engine's own logits", "[workload]") {
  fixture f;
  auto r = f.run({0, 4}, {prompts()[0]}, 4, 0.0f);
  REQUIRE(r.error.empty());
  model::llama_pipeline pipe(f.model, {0, 4});
  auto seq = pipe.new_sequence(128);
  auto logits = pipe.eval(seq, prompts()[0]);
  for (std::size_t i = 0; i + 1 < r.tokens[0].size(); ++i) {
    CHECK(model::sampler::argmax(logits.data(), logits.size())
          == r.tokens[0][i]);
    logits = pipe.eval(seq, {r.tokens[0][i]});
  }
  // The stage may run on a GPU device (F32 attention sums; 1.1e-3 seen).
  CHECK(max_rel_diff(r.logits[0], logits) <= 5e-3f);
}

TEST_CASE("four sequences in flight give what running them one by one gives",
          "[workload]") {
  fixture f;
  // One stage (one batch of four), two stages (two batches of two), three
  // stages on cpu, Vulkan and sim devices.
  for (auto& l : layouts_of(f)) {
    INFO("stages " << l.bounds.size() - 1);
    auto run = [&](std::vector<std::vector<std::int32_t>> p,
                   std::uint64_t seed, std::uint32_t per_step = 0) {
      auto stages = f.pipeline(l.bounds, l.on);
      auto j = f.job(1, stages, std::move(p), 10, 0.7f, seed);
      j.step_sequences = per_step;
      auto r = workload::run_job(*f.sys, std::move(j));
      f.stop(stages);
      REQUIRE(r.error.empty());
      return r;
    };
    auto all = run(prompts(), 11);
    REQUIRE(all.tokens.size() == 4);
    CHECK(all.generated_tokens == 40);
    // Batched or each sequence on its own step: the same.
    auto apart = run(prompts(), 11, 1);
    CHECK(apart.tokens == all.tokens);
    for (std::size_t j = 0; j < 4; ++j) {
      // Sequence j of a job is seeded with seed + j.
      auto alone = run({prompts()[j]}, 11 + j);
      CHECK(alone.tokens[0] == all.tokens[j]);
      if (l.host) {
        CHECK(alone.logits[0] == all.logits[j]);
        CHECK(apart.logits[j] == all.logits[j]);
      } else {
        // GPU shaders may sum a batch's rows in another order (3e-4 seen
        // on lavapipe).
        CHECK(max_rel_diff(alone.logits[0], all.logits[j]) <= 5e-3f);
      }
    }
  }
}

TEST_CASE("a job whose last stage returns each row's candidates gets the "
          "tokens of whole rows",
          "[workload]") {
  fixture f;
  for (auto& l : layouts_of(f))
    for (float temp : {0.0f, 0.7f})
      for (std::uint32_t top_k : {40u, 3u, 0u}) {
        INFO("stages " << l.bounds.size() - 1 << ", temperature " << temp
                       << ", top_k " << top_k);
        auto run = [&](bool keep_logits) {
          auto stages = f.pipeline(l.bounds, l.on);
          // Two sequences share a prompt (one read, two samplers).
          auto p = prompts();
          p.push_back(p[1]);
          auto j = f.job(1, stages, std::move(p), 10, temp, 21);
          j.sampling.top_k = top_k;
          j.keep_logits = keep_logits;
          auto r = workload::run_job(*f.sys, std::move(j));
          f.stop(stages);
          REQUIRE(r.error.empty());
          return r;
        };
        auto whole = run(true);
        auto top = run(false);
        CHECK(top.tokens == whole.tokens);
        CHECK(top.generated_tokens == 50);
        for (std::size_t q = 0; q < 5; ++q) {
          CHECK(whole.logits[q].size() == 400);
          // A sampler that reads whole rows (top_k 0 above temperature 0)
          // gets them; the others get candidates and keep no logits.
          CHECK(top.logits[q].size() == (temp > 0 && top_k == 0 ? 400 : 0));
        }
      }
}

TEST_CASE("a step of a large-vocabulary model carries more sequences when "
          "its last stage returns candidates",
          "[workload]") {
  fixture f;
  model::test_model_options o;
  o.layers = 2;
  o.dim = 64;
  o.ff = 128;
  o.vocab = 65536; // 256 KiB a row of logits: 16 rows a message
  o.seed = 5;
  f.model = generated(f, ".vocab64k", o);
  REQUIRE(workload::max_step_sequences(64, 65536) == 16);
  REQUIRE(workload::max_step_sequences(64, 65536, 1) == 32);
  REQUIRE(workload::max_step_sequences(64, 65536, 40) == 32);
  const auto cpu = f.device_index("cpu");
  caf::scoped_actor self{*f.sys};
  std::vector<std::vector<std::int32_t>> p;
  for (std::int32_t i = 0; i < 24; ++i)
    p.push_back({1, 1000 + 2000 * i});
  std::vector<std::vector<std::vector<std::int32_t>>> tokens;
  for (bool keep : {true, false}) {
    INFO((keep ? "whole rows" : "candidates"));
    auto stages = f.pipeline({0, 2}, {cpu});
    auto j = f.job(1, stages, p, 4, 0.0f);
    j.keep_logits = keep;
    j.share_prompts = false;
    auto r = workload::run_job(*f.sys, std::move(j));
    REQUIRE(r.error.empty());
    auto sh = snapshot_of(self, stages[0]);
    // 24 sequences: two groups of 12 with whole rows (16 a step at most),
    // one of 24 with candidates. Each group: its prompts, then three
    // tokens.
    CHECK(num(sh, "steps") == (keep ? 2 * 4 : 4));
    CHECK(num(sh, "tokens") == 24 * 2 + 24 * 3);
    tokens.push_back(r.tokens);
    f.stop(stages);
  }
  CHECK(tokens[0] == tokens[1]);
}

TEST_CASE("sequences of one prompt read it once, each gets what it gets "
          "alone, the stages fork its KV rows",
          "[workload][share]") {
  fixture f;
  const auto a = prompts()[0], b = prompts()[1];
  // Sequences 0, 2 and 3 share a prompt, 1 and 4 another.
  const std::vector<std::vector<std::int32_t>> ps{a, b, a, a, b};
  for (auto& l : layouts_of(f)) {
    INFO("stages " << l.bounds.size() - 1);
    struct ran {
      workload::job_result r;
      std::vector<actor_snapshot> snaps;
    };
    auto run = [&](std::vector<std::vector<std::int32_t>> p,
                   std::uint64_t seed, bool share, std::uint32_t per_step = 0) {
      auto stages = f.pipeline(l.bounds, l.on);
      auto j = f.job(1, stages, std::move(p), 10, 0.7f, seed);
      j.share_prompts = share;
      j.step_sequences = per_step;
      ran out;
      out.r = workload::run_job(*f.sys, std::move(j));
      caf::scoped_actor self{*f.sys};
      for (auto& s : stages)
        out.snaps.push_back(released(self, s));
      f.stop(stages);
      REQUIRE(out.r.error.empty());
      return out;
    };
    for (std::uint32_t per_step : {0u, 1u}) {
      INFO("sequences per step " << per_step);
      auto shared = run(ps, 11, true, per_step);
      auto apart = run(ps, 11, false, per_step);
      REQUIRE(shared.r.tokens.size() == 5);
      CHECK(shared.r.tokens == apart.r.tokens);
      CHECK(shared.r.generated_tokens == 50);
      CHECK(shared.r.prompt_tokens == apart.r.prompt_tokens);
      CHECK(shared.r.shared_prompt_tokens == 5 + 5 + 3); // a, a and b
      CHECK(apart.r.shared_prompt_tokens == 0);
      for (std::size_t i = 0; i < shared.snaps.size(); ++i) {
        INFO("stage " << i);
        auto& s = shared.snaps[i];
        // Each prompt once (5 + 3 tokens), then 9 fed tokens a sequence;
        // apart, every copy of the prompt.
        CHECK(num(s, "tokens") == 5 + 3 + 5 * 9);
        CHECK(num(apart.snaps[i], "tokens") == 3 * 5 + 2 * 3 + 5 * 9);
        CHECK(num(s, "forks") == 3);
        CHECK(num(apart.snaps[i], "forks") == 0);
        CHECK(num(s, "kv_cache_bytes") == 0);
      }
      for (std::size_t j = 0; j < ps.size(); ++j) {
        INFO("sequence " << j);
        auto alone = run({ps[j]}, 11 + j, true);
        CHECK(alone.r.tokens[0] == shared.r.tokens[j]);
        if (l.host)
          CHECK(alone.r.logits[0] == shared.r.logits[j]);
        else
          CHECK(max_rel_diff(alone.r.logits[0], shared.r.logits[j]) <= 5e-3f);
      }
    }
  }
}

TEST_CASE("long prompts of several sequences are read in the pieces each "
          "is read in alone, with the bits of running alone",
          "[workload][share]") {
  // Prompts longer than a step carries (512 tokens here): read together,
  // a step's tokens are shared out, but each prompt is still cut where it
  // is cut alone (a forward's rows depend on the rows computed with them).
  fixture f;
  f.n_ctx = 1024;
  use_q4k_model(f);
  const std::vector<std::vector<std::int32_t>> ps{
    pattern(700, 7), pattern(600, 13), pattern(700, 7), {1, 17, 42}};
  for (auto& l : layouts_of(f)) {
    if (!l.host)
      continue;
    const auto& bounds = l.bounds;
    const auto& on = l.on;
    INFO("stages " << on.size());
    auto run = [&](std::vector<std::vector<std::int32_t>> p,
                   std::uint64_t seed, bool share) {
      auto stages = f.pipeline(bounds, on);
      auto j = f.job(1, stages, std::move(p), 4, 0.7f, seed);
      j.share_prompts = share;
      auto r = workload::run_job(*f.sys, std::move(j));
      f.stop(stages);
      INFO(r.error);
      REQUIRE(r.error.empty());
      return r;
    };
    for (bool share : {false, true}) {
      INFO("shared " << share);
      auto all = run(ps, 21, share);
      for (std::size_t j = 0; j < ps.size(); ++j) {
        INFO("sequence " << j);
        auto alone = run({ps[j]}, 21 + j, share);
        CHECK(alone.tokens[0] == all.tokens[j]);
        CHECK((alone.logits[0] == all.logits[j])); // (not printed: 400)
      }
    }
  }
}

TEST_CASE("a job starts from the prompt rows an earlier job left on its "
          "stages and gets what it gets alone",
          "[workload][prefix]") {
  // A shared start of 600 tokens: the stages keep the rows of whole
  // pieces (512 tokens) of the prompts they read; a later job copies the
  // longest prefix every stage keeps and reads the rest in the pieces it
  // is cut into alone.
  fixture f;
  f.n_ctx = 2048;
  use_q4k_model(f);
  const auto part = pattern;
  auto cat = [](std::vector<std::int32_t> a,
                const std::vector<std::int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const auto system = part(600, 7);
  const auto a = cat(system, part(500, 13)); // 1100: pieces 512, 1024
  const auto b = cat(system, part(300, 11)); //  900: 512 (a's)
  const auto c = cat(a, part(200, 5));       // 1300: 1024 (a's)
  const auto other = part(900, 3);           // another start
  for (auto& l : layouts_of(f)) {
    if (!l.host)
      continue;
    const auto& bounds = l.bounds;
    const auto& on = l.on;
    INFO("stages " << on.size());
    // Alone: fresh stages, nothing kept.
    auto alone = [&](const std::vector<std::int32_t>& p, std::uint64_t seed) {
      auto stages = f.pipeline(bounds, on);
      auto r = workload::run_job(*f.sys, f.job(1, stages, {p}, 4, 0.7f, seed));
      f.stop(stages);
      REQUIRE(r.error.empty());
      return r;
    };
    f.prefix_cache_bytes = 64ull << 20;
    auto stages = f.pipeline(bounds, on);
    caf::scoped_actor self{*f.sys};
    auto run = [&](std::uint64_t id, const std::vector<std::int32_t>& p,
                   std::uint64_t seed, bool cache = true) {
      auto j = f.job(id, stages, {p}, 4, 0.7f, seed);
      j.prefix_cache = cache;
      auto r = workload::run_job(*f.sys, std::move(j));
      INFO(r.error);
      REQUIRE(r.error.empty());
      return r;
    };
    auto ra = run(1, a, 21);
    CHECK(ra.cached_prompt_tokens == 0); // nothing kept yet
    auto rb = run(2, b, 22);
    CHECK(rb.cached_prompt_tokens == 512); // the system prompt's piece
    auto rc = run(3, c, 23);
    CHECK(rc.cached_prompt_tokens == 1024); // a's two pieces
    auto ro = run(4, other, 24);
    CHECK(ro.cached_prompt_tokens == 0);
    auto again = run(5, a, 25); // its own longest prefix: kept
    CHECK(again.cached_prompt_tokens == 1024);
    auto off = run(6, b, 22, false);
    CHECK(off.cached_prompt_tokens == 0);
    // Each as alone: the same tokens and logits, bit for bit.
    for (auto& [r, p, seed] :
         {std::tuple{&ra, &a, 21}, std::tuple{&rb, &b, 22},
          std::tuple{&rc, &c, 23}, std::tuple{&ro, &other, 24},
          std::tuple{&again, &a, 25}, std::tuple{&off, &b, 22}}) {
      INFO("prompt of " << p->size() << " tokens, seed " << seed);
      auto want = alone(*p, static_cast<std::uint64_t>(seed));
      CHECK(want.tokens[0] == r->tokens[0]);
      CHECK((want.logits[0] == r->logits[0])); // (not printed: 400)
    }
    // What the stages computed and copied: the first stage read every
    // prompt but the 512 + 1024 + 1024 copied positions.
    auto snap = snapshot_of(self, stages[0]);
    CHECK(num(snap, "prefix_forks") == 3);
    CHECK(num(snap, "prefix_positions") == 512 + 1024 + 1024);
    const auto fed = a.size() + b.size() + c.size() + other.size() + a.size()
                     + b.size() + 6 * 3; // and 3 fed tokens a job
    CHECK(num(snap, "tokens") == fed - (512 + 1024 + 1024));
    // Kept: a's rows and other's (b's and c's longest keys were a's).
    CHECK(num(snap, "prefixes") == 2);
    CHECK(num(snap, "kv_cache_bytes") == 0); // the jobs' own caches went
    CHECK(num(snap, "prefix_bytes") > 0);
    f.stop(stages);
    f.prefix_cache_bytes = 0;
  }
}

TEST_CASE("a stage stays on its device after its last job: the next job's "
          "shards find it with the prompt rows it kept",
          "[workload][prefix][keep]") {
  // A chat's turns are jobs one after another, each on shards of its own:
  // the device keeps the stage (weights and kept rows) between them.
  fixture f;
  f.n_ctx = 2048;
  f.prefix_cache_bytes = 64ull << 20;
  f.keep_alive = std::chrono::hours{1};
  const auto cpu = f.device_index("cpu");
  auto dev = caf::actor_cast<caf::actor>(f.dev_actors[cpu]);
  caf::scoped_actor self{*f.sys};
  auto cat = [](std::vector<std::int32_t> a,
                const std::vector<std::int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const auto first = cat(pattern(600, 7), pattern(100, 13));
  const auto second = cat(first, pattern(80, 5)); // the next turn
  // A job on fresh shards; the first stage's snapshot before they stop.
  auto run = [&](std::uint64_t id, const std::vector<std::int32_t>& p,
                 bool cache) {
    auto stages = f.pipeline({0, 4}, {cpu});
    auto j = f.job(id, stages, {p}, 4, 0.7f, 31);
    j.prefix_cache = cache;
    auto r = workload::run_job(*f.sys, std::move(j));
    INFO(r.error);
    REQUIRE(r.error.empty());
    auto snap = snapshot_of(self, stages[0]);
    f.stop(stages);
    return std::pair{r, snap};
  };
  auto [r1, s1] = run(1, first, true);
  CHECK(r1.cached_prompt_tokens == 0);
  CHECK(num(s1, "stage_reuses") == 0);
  // Its shards are gone; the device keeps the stage, counted as free.
  auto kept = snapshot_of(self, dev);
  CHECK(num(kept, "kept") == 1);
  CHECK(num(kept, "kept_bytes")
        >= num(s1, "weight_bytes") + num(s1, "prefix_bytes"));
  CHECK(num(s1, "prefix_bytes") > 0);
  auto [r2, s2] = run(2, second, true);
  CHECK(r2.cached_prompt_tokens == 512);
  CHECK(num(s2, "stage_reuses") == 1);
  CHECK(num(s2, "tokens") == second.size() - 512 + 3);
  // The same bits as reading it all.
  auto [ref, sref] = run(3, second, false);
  CHECK(ref.cached_prompt_tokens == 0);
  CHECK(num(sref, "stage_reuses") == 2);
  CHECK(ref.tokens[0] == r2.tokens[0]);
  CHECK((ref.logits[0] == r2.logits[0])); // (not printed: 400)
  // Without keep_alive the stage goes with its last shard.
  f.keep_alive = std::chrono::milliseconds{0};
  auto [r4, s4] = run(4, second, true);
  CHECK(r4.cached_prompt_tokens == 512);
  auto gone = snapshot_of(self, dev);
  CHECK(num(gone, "kept") == 0);
  CHECK(num(gone, "kept_bytes") == 0);
  auto [r5, s5] = run(5, second, true);
  CHECK(r5.cached_prompt_tokens == 0);
  CHECK(num(s5, "stage_reuses") == 0);
  // A short keep_alive: the device lets it go by itself.
  f.keep_alive = std::chrono::milliseconds{200};
  run(6, first, true);
  for (int i = 0; i < 500 && num(snapshot_of(self, dev), "kept") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto expired = snapshot_of(self, dev);
  CHECK(num(expired, "kept") == 0);
  CHECK(num(expired, "kept_expired") >= 1);
  auto [r7, s7] = run(7, second, true);
  CHECK(r7.cached_prompt_tokens == 0);
}

TEST_CASE("the prefix cache keeps to its budget, drops the least recently "
          "used and never what a job holds",
          "[workload][prefix]") {
  fixture f;
  f.n_ctx = 1024;
  f.batch_wait = std::chrono::microseconds{0};
  auto prompt = [](std::int32_t mul) { return pattern(600, mul); };
  const auto piece = workload::max_batch_tokens(f.model->hparams().n_embd);
  REQUIRE(piece == 512);
  // Room for two prompts' 512 rows on the stage (f16 K and V, 4 layers).
  const std::uint64_t one = 4ull * 2 * 512 * f.model->hparams().n_embd_kv()
                            * 2;
  f.prefix_cache_bytes = 2 * one;
  auto stages = f.pipeline({0, 4}, {f.device_index("cpu")});
  caf::scoped_actor self{*f.sys};
  auto run = [&](std::uint64_t id, std::int32_t mul) {
    auto r = workload::run_job(*f.sys,
                               f.job(id, stages, {prompt(mul)}, 2, 0.0f));
    REQUIRE(r.error.empty());
    return r.cached_prompt_tokens;
  };
  CHECK(run(1, 3) == 0);
  CHECK(run(2, 5) == 0);
  CHECK(num(snapshot_of(self, stages[0]), "prefixes") == 2);
  CHECK(run(3, 3) == 512); // 3 used again: 5 is the least recent
  CHECK(run(4, 7) == 0);   // 7 takes 5's room
  auto snap = snapshot_of(self, stages[0]);
  CHECK(num(snap, "prefixes") == 2);
  CHECK(num(snap, "prefixes_dropped") == 1);
  CHECK(num(snap, "prefix_bytes") == 2 * one);
  CHECK(run(5, 5) == 0);   // gone (and now kept again, 3 dropped)
  CHECK(run(6, 7) == 512);
  // A claim holds the rows until the job is released: none is dropped
  // for another's, whatever the budget.
  prefix_claim c;
  c.job = 77;
  c.keys = {workload::prefix_keys(prompt(7), piece).at(0).key,
            workload::prefix_keys(prompt(5), piece).at(0).key};
  self->request(stages[0], std::chrono::seconds(10), claim_atom::value, c)
    .receive([&](prefix_claim& r) { CHECK(r.keys.size() == 2); },
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(run(7, 11) == 0); // no room: both are held
  snap = snapshot_of(self, stages[0]);
  CHECK(num(snap, "prefixes") == 2);
  self->request(stages[0], std::chrono::seconds(10), release_atom::value,
                std::uint64_t{77})
    .receive([](caf::ok_atom) {}, [](caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(run(8, 11) == 0); // kept now (in the room of the least recent)
  CHECK(run(9, 11) == 512);
  // A claim of keys no one keeps, and of too many, holds nothing.
  c.keys = {12345};
  self->request(stages[0], std::chrono::seconds(10), claim_atom::value, c)
    .receive([&](prefix_claim& r) { CHECK(r.keys.empty()); },
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  c.keys.assign(max_prefix_claim + 1, 1);
  self->request(stages[0], std::chrono::seconds(10), claim_atom::value, c)
    .receive([](prefix_claim&) { FAIL("a claim of too many keys"); },
             [](caf::error& e) {
               CHECK(error_message(e).find("at most") != std::string::npos);
             });
  // A step that names a prefix its job does not hold is refused.
  stage_step s;
  s.job = 99;
  s.seq = 0;
  s.pos = 512;
  s.tokens = {1};
  s.parts = {step_part{0, 512, 1, true, 0,
                       workload::prefix_keys(prompt(11), piece).at(0).key}};
  self->request(stages[0], std::chrono::seconds(10), forward_atom::value, s)
    .receive([](stage_step&) { FAIL("a prefix the job does not hold"); },
             [](caf::error& e) {
               CHECK(error_message(e).find("does not hold")
                     != std::string::npos);
             });
  f.stop(stages);
}

TEST_CASE("a prompt's source sequence that ends at once keeps its KV rows "
          "until the sequences sharing them have forked",
          "[workload][share]") {
  fixture f;
  // A seed whose sequence 0 draws a first token the others never draw,
  // made the end of generation: sequence 0 ends with the prompt's logits,
  // before the others' first steps fork its rows.
  const auto a = prompts()[0];
  const std::vector<std::vector<std::int32_t>> ps{a, a, a};
  auto stages = f.pipeline({0, 4}, {f.device_index("cpu")});
  std::uint64_t seed = 1;
  std::int32_t stop = -1;
  for (; seed < 50 && stop < 0; ++seed) {
    auto r = workload::run_job(*f.sys, f.job(1, stages, ps, 4, 1.0f, seed));
    REQUIRE(r.error.empty());
    if (r.tokens[1][0] != r.tokens[0][0] && r.tokens[2][0] != r.tokens[0][0]
        && std::find(r.tokens[1].begin(), r.tokens[1].end(), r.tokens[0][0])
             == r.tokens[1].end()
        && std::find(r.tokens[2].begin(), r.tokens[2].end(), r.tokens[0][0])
             == r.tokens[2].end())
      stop = r.tokens[0][0];
  }
  --seed;
  REQUIRE(stop >= 0);
  f.stop(stages);
  for (bool share : {true, false}) {
    auto st = f.pipeline({0, 4}, {f.device_index("cpu")});
    auto j = f.job(2, st, ps, 4, 1.0f, seed);
    j.eog = {stop};
    j.share_prompts = share;
    auto r = workload::run_job(*f.sys, std::move(j));
    INFO(r.error);
    REQUIRE(r.error.empty()); // a fork from a released cache would fail
    CHECK(r.tokens[0] == std::vector<std::int32_t>{stop});
    CHECK(r.tokens[1].size() == 4);
    CHECK(r.tokens[2].size() == 4);
    caf::scoped_actor self{*f.sys};
    CHECK(num(snapshot_of(self, st[0]), "forks") == (share ? 2 : 0));
    f.stop(st);
  }
}

TEST_CASE("a job cancelled while the prompt its sequences share is read "
          "ends them all",
          "[workload][share]") {
  fixture f;
  auto stages = f.pipeline({0, 2, 4}, {f.device_index("cpu"),
                                       f.device_index("sim")});
  auto done = std::make_shared<std::promise<workload::job_result>>();
  auto j = f.job(3, stages, {prompts()[0], prompts()[0], prompts()[0]}, 8,
                 0.7f);
  j.finish = [done](workload::job_result& r) {
    done->set_value(r);
    return caf::make_message(caf::ok_atom::value);
  };
  auto h = workload::spawn_job(*f.sys, std::move(j));
  // In this order in its mailbox: the prompt's step goes out, then the
  // cancel; sequences 1 and 2 wait for sequence 0's prompt, which ends
  // at the cancel's token boundary.
  caf::anon_send(h, run_atom::value);
  caf::anon_send(h, cancel_atom::value);
  auto fut = done->get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  auto r = fut.get();
  CHECK(r.cancelled);
  CHECK(r.error.empty());
  CHECK(r.generated_tokens == 0);
  caf::scoped_actor self{*f.sys};
  for (auto& s : stages) {
    auto snap = released(self, s);
    CHECK(num(snap, "kv_cache_bytes") == 0);
    CHECK(num(snap, "forks") == 0);
  }
  f.stop(stages);
}

TEST_CASE("jobs that run the same layers on one device share its stage and "
          "decode as one batch, each getting the tokens it gets alone",
          "[workload][batch]") {
  fixture f;
  // Here the jobs always wait for each other (the default is 2 ms).
  f.batch_wait = std::chrono::seconds(1);
  auto cpu = f.device_index("cpu");
  auto sim = f.device_index("sim");
  caf::scoped_actor self{*f.sys};
  struct layout {
    std::vector<std::uint32_t> bounds;
    std::vector<std::size_t> on;
  };
  for (auto& l : {layout{{0, 4}, {cpu}}, layout{{0, 2, 4}, {cpu, sim}}}) {
    INFO("stages " << l.bounds.size() - 1);
    // Job 1: two sequences, 12 tokens; job 2: one sequence, 20 tokens (it
    // goes on alone once job 1 is done).
    auto job1 = [&](std::vector<caf::actor> st) {
      return f.job(1, std::move(st), {prompts()[0], prompts()[1]}, 12, 0.8f,
                   21);
    };
    auto job2 = [&](std::vector<caf::actor> st) {
      return f.job(2, std::move(st), {prompts()[2]}, 20, 0.8f, 33);
    };
    // Alone: the tokens, and how many each stage saw.
    auto alone = [&](auto make, std::vector<std::uint64_t>& stage_tokens) {
      auto st = f.pipeline(l.bounds, l.on);
      auto r = workload::run_job(*f.sys, make(st));
      for (auto& a : st) {
        auto sh = snapshot_of(self, a);
        CHECK(num(sh, "shared_by") == 1);
        CHECK(num(sh, "merged_steps") == 0);
        stage_tokens.push_back(num(sh, "tokens"));
      }
      f.stop(st);
      REQUIRE(r.error.empty());
      return r;
    };
    std::vector<std::uint64_t> t1_alone, t2_alone;
    auto a1 = alone(job1, t1_alone);
    auto a2 = alone(job2, t2_alone);
    // Both jobs at once, each on its own pipeline: each gets its tokens
    // alone.
    auto together = [&](const std::vector<caf::actor>& p1,
                        const std::vector<caf::actor>& p2) {
      std::pair<workload::job_result, workload::job_result> r;
      std::thread t1([&] { r.first = workload::run_job(*f.sys, job1(p1)); });
      std::thread t2([&] { r.second = workload::run_job(*f.sys, job2(p2)); });
      t1.join();
      t2.join();
      REQUIRE(r.first.error.empty());
      REQUIRE(r.second.error.empty());
      CHECK(r.first.tokens == a1.tokens);
      CHECK(r.second.tokens == a2.tokens);
      return r;
    };
    auto s1 = f.pipeline(l.bounds, l.on);
    auto s2 = f.pipeline(l.bounds, l.on);
    auto [r1, r2] = together(s1, s2);
    CHECK(r1.logits == a1.logits); // host devices: the same bits
    CHECK(r2.logits == a2.logits);
    for (std::size_t i = 0; i + 1 < l.bounds.size(); ++i) {
      INFO("stage " << i);
      auto one = snapshot_of(self, s1[i]);
      auto two = snapshot_of(self, s2[i]);
      // One stage on the device for both jobs: its weights once.
      CHECK(num(one, "shared_by") == 2);
      CHECK(num(two, "shared_by") == 2);
      CHECK(num(one, "stage_forwards") == num(two, "stage_forwards"));
      // Each shard counts its own tokens and sequences.
      CHECK(num(one, "tokens") == t1_alone[i]);
      CHECK(num(two, "tokens") == t2_alone[i]);
    }
    // The first stage waited for the other job: their steps ran together.
    // (Stages of one node hand activations over on the device; those
    // steps run alone, so only the one-stage layout batches here.) A job
    // is waited for once it has run in the stage: on a loaded machine the
    // second thread's job can reach the stage only after the first one's
    // 12 tokens (a full run saw it), so the pair runs again, a few times at
    // most, until their steps met; the tokens must be right every time.
    const auto merged_first = num(snapshot_of(self, s1[0]), "merged_steps");
    f.stop(s1);
    f.stop(s2);
    if (l.bounds.size() == 2) {
      auto merged = merged_first;
      for (int again = 0; merged == 0 && again < 5; ++again) {
        auto p1 = f.pipeline(l.bounds, l.on);
        auto p2 = f.pipeline(l.bounds, l.on);
        (void) together(p1, p2);
        merged = num(snapshot_of(self, p1[0]), "merged_steps");
        f.stop(p1);
        f.stop(p2);
      }
      CHECK(merged > 0);
    }
  }
}

TEST_CASE("a job's sequences go through a stage as one batched step",
          "[workload]") {
  fixture f;
  auto cpu = f.device_index("cpu");
  caf::scoped_actor self{*f.sys};
  for (std::uint32_t per_step : {0u, 1u}) {
    INFO("at most " << per_step << " sequences per step (0: no limit)");
    auto stages = f.pipeline({0, 4}, {cpu});
    auto j = f.job(1, stages, prompts(), 6, 0.0f);
    j.step_sequences = per_step;
    auto r = workload::run_job(*f.sys, std::move(j));
    REQUIRE(r.error.empty());
    auto sh = snapshot_of(self, stages[0]);
    // Four prompts then five more tokens each: one step for all four
    // prompts and one per token batched; 4 + 4 * 5 steps apart.
    CHECK(num(sh, "tokens") == 4 * 5 + (5 + 3 + 7 + 2));
    CHECK(num(sh, "steps") == (per_step == 1 ? 4 + 4 * 5 : 1 + 5));
    f.stop(stages);
  }
}

TEST_CASE("a long prompt crosses the stages in bounded batches",
          "[workload]") {
  fixture f;
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 100; ++i)
    prompt.push_back(1 + (i * 37) % 399);
  auto r = f.run({0, 2, 4}, {prompt}, 3, 0.0f);
  REQUIRE(r.error.empty());
  model::llama_pipeline pipe(f.model, {0, 4});
  auto seq = pipe.new_sequence(128);
  auto logits = pipe.eval(seq, prompt);
  CHECK(model::sampler::argmax(logits.data(), logits.size())
        == r.tokens[0][0]);
}

TEST_CASE("a shard refuses steps out of order, too wide or off-vocabulary",
          "[workload]") {
  fixture f;
  auto stages = f.pipeline({0, 4});
  caf::scoped_actor self{*f.sys};
  auto expect_error = [&](stage_step s, const std::string& needle) {
    std::string msg;
    self->request(stages[0], std::chrono::seconds(10), forward_atom::value,
                  std::move(s))
      .receive([](stage_step&) {},
               [&](caf::error& e) { msg = error_message(e); });
    INFO(msg);
    CHECK(msg.find(needle) != std::string::npos);
  };
  stage_step late;
  late.tokens = {1};
  late.pos = 5;
  expect_error(late, "starts at position 5");
  stage_step empty;
  expect_error(empty, "needs 1 to");
  stage_step off;
  off.seq = 2;
  off.tokens = {100000};
  expect_error(off, "shard:");
  stage_step wide_top;
  wide_top.tokens = {1};
  wide_top.top_k = 400; // the whole vocabulary
  expect_error(wide_top, "at most 399 candidates a row (top_k), not 400");
  stage_step ids_in;
  ids_in.tokens = {1};
  ids_in.top_k = 2;
  ids_in.top_ids = {5, 6};
  expect_error(ids_in,
               "carries no candidates (top_ids, lse) on its way in");
  stage_step lse_in; // nor log-sum-exps
  lse_in.tokens = {1};
  lse_in.top_k = 2;
  lse_in.logprobs = true;
  lse_in.lse = {1.0};
  expect_error(lse_in,
               "carries no candidates (top_ids, lse) on its way in");
  stage_step too_many;
  too_many.tokens.assign(40, 1);
  for (std::uint32_t q = 0; q < 40; ++q)
    too_many.parts.push_back({q, 0, 1});
  too_many.top_k = 1;
  expect_error(too_many, "a step carries at most 32 sequences, not 40");
  stage_step apart_rows;
  apart_rows.tokens.assign(40, 1);
  apart_rows.apart = true;
  expect_error(apart_rows, "returns at most 32 rows of logits, not 40");
  f.stop(stages);
  stages = f.pipeline({0, 2, 4});
  stage_step wrong_width;
  wrong_width.tokens = {1};
  wrong_width.x.resize(3);
  std::string msg;
  self->request(stages[1], std::chrono::seconds(10), forward_atom::value,
                wrong_width)
    .receive([](stage_step&) {},
             [&](caf::error& e) { msg = error_message(e); });
  CHECK(msg.find("expected 64 activations") != std::string::npos);
  f.stop(stages);
}

TEST_CASE("layers split evenly into contiguous stages", "[workload]") {
  CHECK(workload::even_split(4, 1) == std::vector<std::uint32_t>{0, 4});
  CHECK(workload::even_split(4, 3) == std::vector<std::uint32_t>{0, 1, 2, 4});
  CHECK(workload::even_split(12, 2) == std::vector<std::uint32_t>{0, 6, 12});
  CHECK_THROWS(workload::even_split(2, 3));
  CHECK_THROWS(workload::even_split(2, 0));
}

TEST_CASE("a shard computes on its device and keeps its KV cache there",
          "[workload]") {
  fixture f;
  auto si = f.device_index("sim");
  auto* sim = dynamic_cast<backend::sim_device*>(f.devs[si]);
  REQUIRE(sim != nullptr);
  caf::scoped_actor self{*f.sys};
  auto snapshot = [&](const caf::actor& a) { return snapshot_of(self, a); };
  auto dev = caf::actor_cast<caf::actor>(f.dev_actors[si]);
  auto before = snapshot(dev);
  auto stages = f.pipeline({0, 4}, {si});
  auto sh = snapshot(stages[0]);
  CHECK(sh.fields["compute"] == "device");
  auto weights = num(sh, "weight_bytes");
  CHECK(weights > 0);
  // The weights were uploaded to the device.
  auto loaded = snapshot(dev);
  CHECK(num(loaded, "live_bytes") - num(before, "live_bytes") >= weights);
  CHECK(num(loaded, "bytes_in") - num(before, "bytes_in") >= weights);

  const double t0 = sim->now();
  stage_step s;
  s.job = 9;
  s.tokens = {1, 17, 42, 99, 5};
  std::vector<float> logits;
  self->request(stages[0], std::chrono::seconds(30), forward_atom::value, s)
    .receive([&](stage_step& r) { logits = std::move(r.x); },
             [](caf::error& e) { FAIL(error_message(e)); });
  REQUIRE(logits.size() == f.model->hparams().n_vocab);
  // The math ran on the simulated device's clock, as kernel calls...
  CHECK(sim->now() > t0);
  auto after = snapshot(dev);
  CHECK(num(after, "kernel_calls") - num(loaded, "kernel_calls") >= 4 * 14);
  // ... and the sequence's KV cache (one block of the stage's paged
  // cache: 4 layers x 32 positions x 32 halves, K and V) lives in the
  // device's memory.
  sh = snapshot(stages[0]);
  const std::uint64_t kv = 2ull * 4 * 32 * f.model->hparams().n_embd_kv() * 2;
  CHECK(num(sh, "kv_cache_bytes") == kv);
  CHECK(num(sh, "kv_block_positions") == 32);
  CHECK(num(sh, "kv_blocks_used") == 1);
  CHECK(num(after, "live_bytes") - num(loaded, "live_bytes") >= kv);
  // The device's logits are the host engine's.
  model::llama_pipeline pipe(f.model, {0, 4});
  auto seq = pipe.new_sequence(128);
  CHECK(max_rel_diff(logits, pipe.eval(seq, s.tokens)) <= 1e-4f);
  // A further step is one task on the device actor's thread: the write,
  // the batch of calls and the read travel together.
  auto tasks = num(snapshot(dev), "compute_tasks");
  stage_step next;
  next.job = 9;
  next.pos = 5;
  next.tokens = {7};
  self->request(stages[0], std::chrono::seconds(30), forward_atom::value, next)
    .receive([&](stage_step& r) { logits = std::move(r.x); },
             [](caf::error& e) { FAIL(error_message(e)); });
  CHECK(num(snapshot(dev), "compute_tasks") == tasks + 1);
  CHECK(max_rel_diff(logits, pipe.eval(seq, next.tokens)) <= 1e-4f);
  // Releasing the job frees the cache on the device.
  self->request(stages[0], std::chrono::seconds(10), release_atom::value,
                std::uint64_t{9})
    .receive([](caf::ok_atom) {}, [](caf::error& e) { FAIL(error_message(e)); });
  sh = snapshot(stages[0]);
  CHECK(num(sh, "kv_cache_bytes") == 0);
  CHECK(num(sh, "kv_blocks_used") == 0); // every block back in the pool
  f.stop(stages);
}

TEST_CASE("a shard on the cpu device reads its weights where the model is "
          "mapped, on a simulated device it uploads them",
          "[workload]") {
  fixture f;
  caf::scoped_actor self{*f.sys};
  auto snapshot = [&](const caf::actor& a) { return snapshot_of(self, a); };
  for (const char* kind : {"cpu", "sim"}) {
    INFO(kind);
    auto di = f.device_index(kind);
    auto dev = caf::actor_cast<caf::actor>(f.dev_actors[di]);
    auto before = snapshot(dev);
    auto stages = f.pipeline({0, 4}, {di});
    auto sh = snapshot(stages[0]);
    auto weights = num(sh, "weight_bytes");
    REQUIRE(weights > 0);
    auto loaded = snapshot(dev);
    // Counted on the device either way (placement's accounting holds).
    CHECK(num(loaded, "live_bytes") - num(before, "live_bytes") >= weights);
    const bool cpu = std::string{kind} == "cpu";
    CHECK(num(sh, "weight_bytes_in_place") == (cpu ? weights : 0));
    // In place: nothing crossed to the device actor (bytes_in counts
    // written bytes); copied: every weight was written.
    auto written = num(loaded, "bytes_in") - num(before, "bytes_in");
    if (cpu)
      CHECK(written < weights / 100);
    else
      CHECK(written >= weights);
    stage_step s;
    s.job = 3;
    s.tokens = {1, 17, 42, 99, 5};
    std::vector<float> logits;
    self->request(stages[0], std::chrono::seconds(30), forward_atom::value, s)
      .receive([&](stage_step& r) { logits = std::move(r.x); },
               [](caf::error& e) { FAIL(error_message(e)); });
    model::llama_pipeline pipe(f.model, {0, 4});
    auto seq = pipe.new_sequence(128);
    CHECK(max_rel_diff(logits, pipe.eval(seq, s.tokens)) <= 1e-4f);
    // Held: steps sent by hand, never released.
    f.stop(stages, true);
  }
}

TEST_CASE("a step sent while its device is paused waits, then completes "
          "with the same logits", "[workload]") {
  fixture f;
  auto si = f.device_index("sim");
  caf::scoped_actor self{*f.sys};
  auto stages = f.pipeline({0, 4}, {si});
  auto dev = f.dev_actors[si];
  self->request(dev, std::chrono::seconds(10), pause_atom::value,
                std::string{"thermal: test"})
    .receive([](caf::atom_value) {}, [](caf::error& e) { FAIL(error_message(e)); });
  stage_step s;
  s.job = 4;
  s.tokens = {1, 17, 42, 99, 5};
  // The step goes out while the device is paused ...
  self->send(stages[0], forward_atom::value, s);
  auto dev_snapshot = [&] {
    return snapshot_of(self, caf::actor_cast<caf::actor>(dev));
  };
  // ... and is held by the device (waited for without a fixed sleep: the
  // shard checks it and hands it over, the device holds it).
  for (int i = 0; i < 2000 && num(dev_snapshot(), "held_tasks") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(num(dev_snapshot(), "held_tasks") == 1);
  // The shard still answers while its device is paused: no step ran yet.
  auto sh = snapshot_of(self, stages[0]);
  CHECK(num(sh, "steps") == 0);
  CHECK(num(sh, "pause_waits") == 0);
  self->request(dev, std::chrono::seconds(10), resume_atom::value)
    .receive([](caf::atom_value) {}, [](caf::error& e) { FAIL(error_message(e)); });
  std::vector<float> logits;
  self->receive([&](stage_step& r) { logits = std::move(r.x); },
                [&](caf::error& e) { FAIL(error_message(e)); },
                caf::after(std::chrono::seconds(60)) >> [] {
                  FAIL("the step never completed");
                });
  CHECK(num(dev_snapshot(), "held_tasks") == 0);
  sh = snapshot_of(self, stages[0]);
  CHECK(num(sh, "steps") == 1);
  CHECK(num(sh, "pause_waits") == 1);
  REQUIRE(logits.size() == f.model->hparams().n_vocab);
  model::llama_pipeline pipe(f.model, {0, 4});
  auto seq = pipe.new_sequence(128);
  CHECK(max_rel_diff(logits, pipe.eval(seq, s.tokens)) <= 1e-4f);
  // Held: steps sent by hand, never released.
  f.stop(stages, true);
}

TEST_CASE("a shard without a device is refused", "[workload]") {
  fixture f;
  workload::shard_setup s;
  s.model = f.model;
  s.first = 0;
  s.last = 4;
  CHECK_THROWS_WITH(workload::spawn_shard(*f.sys, std::move(s)),
                    Catch::Contains("no device"));
}

TEST_CASE("a cancelled job stops at the next token and keeps what it made "
          "and releases its KV caches", "[workload]") {
  fixture f;
  auto si = f.device_index("sim");
  auto stages = f.pipeline({0, 2, 4}, {si, si});
  caf::scoped_actor self{*f.sys};
  auto kv_bytes = [&](const caf::actor& a) {
    std::uint64_t out = ~0ull;
    self->request(a, std::chrono::seconds(10), inspect_atom::value)
      .receive(
        [&](actor_snapshot& s) { out = std::stoull(s.fields["kv_cache_bytes"]); },
        [](caf::error& e) { FAIL(caf::to_string(e)); });
    return out;
  };
  auto setup = [&](std::uint64_t id, std::uint32_t n_gen) {
    workload::job_setup j;
    j.id = id;
    j.stages = stages;
    j.n_embd = f.model->hparams().n_embd;
    j.n_vocab = f.model->hparams().n_vocab;
    j.prompts = {{1, 17, 42, 99, 5}};
    j.n_gen = n_gen;
    j.sampling.temperature = 0.7f;
    j.sampling.seed = 5;
    return j;
  };
  // Cancelled from its own token callback after the third token: the
  // cancel is queued before the fourth step's logits come back.
  auto result = std::make_shared<workload::job_result>();
  auto handle = std::make_shared<caf::actor>();
  auto j = setup(21, 100);
  auto seen = std::make_shared<int>(0);
  j.on_token = [handle, seen](std::uint32_t, std::int32_t, lp_ptr) {
    if (++*seen == 3)
      caf::anon_send(*handle, cancel_atom::value);
  };
  j.finish = [result](workload::job_result& r) {
    *result = r;
    return caf::make_message(caf::ok_atom::value);
  };
  *handle = workload::spawn_job(*f.sys, std::move(j));
  self->request(*handle, std::chrono::seconds(60), run_atom::value)
    .receive([](caf::ok_atom) {},
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(result->cancelled);
  CHECK(result->error.empty());
  REQUIRE(result->tokens.size() == 1);
  CHECK(result->tokens[0].size() == 3);
  CHECK(result->generated_tokens == 3);
  // What it made is what an uncancelled job makes first.
  auto full = workload::run_job(*f.sys, setup(22, 3));
  CHECK(full.error.empty());
  CHECK_FALSE(full.cancelled);
  CHECK(full.tokens[0] == result->tokens[0]);
  // Every stage released the job's KV cache.
  for (auto& s : stages)
    CHECK(kv_bytes(s) == 0);
  // Cancelled before it ran: nothing generated, still an answer.
  auto early = std::make_shared<workload::job_result>();
  auto j2 = setup(23, 10);
  j2.finish = [early](workload::job_result& r) {
    *early = r;
    return caf::make_message(caf::ok_atom::value);
  };
  auto job2 = workload::spawn_job(*f.sys, std::move(j2));
  bool stopping = false;
  self->request(job2, std::chrono::seconds(10), cancel_atom::value)
    .receive([&](bool b) { stopping = b; },
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(stopping);
  self->request(job2, std::chrono::seconds(60), run_atom::value)
    .receive([](caf::ok_atom) {},
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(early->cancelled);
  CHECK(early->generated_tokens == 0);
  f.stop(stages);
}

TEST_CASE("a sequence stopped alone ends at its next token, frees its "
          "caches, and the others get what they get unstopped",
          "[workload][share]") {
  fixture f;
  const auto a = prompts()[0];
  const std::vector<std::vector<std::int32_t>> ps{a, a, a};
  auto si = f.device_index("sim");
  // Sequence `which` is stopped after its `after`-th token (0: as soon as
  // the job runs, while the prompt the sequences share is being read).
  auto run = [&](std::uint64_t id, std::optional<std::uint32_t> which,
                 std::size_t after) {
    auto stages = f.pipeline({0, 2, 4}, {si, si});
    auto j = f.job(id, stages, ps, 8, 0.7f, 5);
    auto result = std::make_shared<workload::job_result>();
    auto handle = std::make_shared<caf::actor>();
    auto seen = std::make_shared<std::size_t>(0);
    if (which && after > 0)
      j.on_token = [handle, seen, which, after](
                     std::uint32_t seq, std::int32_t,
                     lp_ptr) {
        if (seq == *which && ++*seen == after)
          caf::anon_send(*handle, cancel_atom::value, *which);
      };
    j.finish = [result](workload::job_result& r) {
      *result = r;
      return caf::make_message(caf::ok_atom::value);
    };
    *handle = workload::spawn_job(*f.sys, std::move(j));
    caf::scoped_actor self{*f.sys};
    // Before the job runs, a sequence cannot be stopped.
    self->request(*handle, std::chrono::seconds(10), cancel_atom::value,
                  std::uint32_t{0})
      .receive([&](bool b) { CHECK_FALSE(b); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    auto done = self->request(*handle, std::chrono::seconds(60),
                              run_atom::value);
    if (which && after == 0) // queued behind the run: it is read now
      caf::anon_send(*handle, cancel_atom::value, *which);
    std::move(done).receive([](caf::ok_atom) {},
                            [](caf::error& e) { FAIL(caf::to_string(e)); });
    f.stop(stages); // checks that every KV cache was given back
    REQUIRE(result->error.empty());
    CHECK_FALSE(result->cancelled);
    return *result;
  };
  auto full = run(31, std::nullopt, 0);
  REQUIRE(full.tokens.size() == 3);
  for (std::uint32_t which : {0u, 1u, 2u}) {
    INFO("sequence " << which << " stopped after its third token");
    auto r = run(32 + which, which, 3);
    REQUIRE(r.tokens.size() == 3);
    for (std::uint32_t k = 0; k < 3; ++k) {
      INFO("sequence " << k);
      if (k != which) {
        CHECK(r.tokens[k] == full.tokens[k]);
      } else { // its next step's logits came after the stop: not sampled
        REQUIRE(r.tokens[k].size() == 3);
        CHECK(std::equal(r.tokens[k].begin(), r.tokens[k].end(),
                         full.tokens[k].begin()));
      }
    }
    CHECK(r.generated_tokens == 8 + 8 + 3);
  }
  // Stopped while the prompt it shares with sequence 0 is read: nothing.
  auto early = run(40, 2u, 0);
  CHECK(early.tokens[0] == full.tokens[0]);
  CHECK(early.tokens[1] == full.tokens[1]);
  CHECK(early.tokens[2].empty());
}

TEST_CASE("a step no stage answers ends the job at its step timeout with "
          "the sequence named", "[workload]") {
  fixture f;
  // A first stage that takes steps and never answers them (a stuck device
  // behind it), and answers everything else.
  auto held = std::make_shared<std::vector<caf::response_promise>>();
  // (held goes in as an argument: CAF 0.17 spawning a functor without
  // arguments binds a reference to a null tuple, which UBSan reports.)
  auto silent = f.sys->spawn(
    [](caf::event_based_actor* self,
       std::shared_ptr<std::vector<caf::response_promise>> held)
      -> caf::behavior {
      return {
        [self, held](forward_atom, stage_step&) {
          held->push_back(self->make_response_promise());
        },
        [](release_atom, std::uint64_t) { return caf::ok_atom::value; },
      };
    },
    held);
  workload::job_setup j;
  j.id = 31;
  j.stages = {silent};
  j.n_embd = f.model->hparams().n_embd;
  j.n_vocab = f.model->hparams().n_vocab;
  j.prompts = {{1, 17}, {1, 5}};
  j.n_gen = 4;
  j.step_timeout = std::chrono::milliseconds(200);
  auto t0 = std::chrono::steady_clock::now();
  auto r = workload::run_job(*f.sys, std::move(j));
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(r.error.find("sequence 0: no answer from the pipeline within 200 ms")
        != std::string::npos);
  CHECK(r.generated_tokens == 0);
  CHECK(waited >= std::chrono::milliseconds(200));
  caf::anon_send_exit(silent, caf::exit_reason::user_shutdown);
}

TEST_CASE("a job ends at once naming a stage that goes away, and on a lost "
          "node only when its pipeline has stalled", "[workload]") {
  fixture f;
  auto si = f.device_index("sim");
  caf::scoped_actor self{*f.sys};
  auto setup = [&](std::uint64_t id, std::vector<caf::actor> stages) {
    auto j = f.job(id, std::move(stages), {{1, 17, 42, 99, 5}}, 40, 0);
    j.stage_names = {"n1/sim:0", "n2/sim:0"};
    return j;
  };
  auto run = [&](workload::job_setup j,
                 std::function<void(caf::actor, std::int32_t)> each) {
    auto result = std::make_shared<workload::job_result>();
    auto handle = std::make_shared<caf::actor>();
    auto count = std::make_shared<std::int32_t>(0);
    j.on_token = [handle, count, each](std::uint32_t, std::int32_t, lp_ptr) {
      each(*handle, ++*count);
    };
    j.finish = [result](workload::job_result& r) {
      *result = r;
      return caf::make_message(caf::ok_atom::value);
    };
    *handle = workload::spawn_job(*f.sys, std::move(j));
    self->request(*handle, std::chrono::seconds(60), run_atom::value)
      .receive([](caf::ok_atom) {},
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    return *result;
  };
  // A lost notice while tokens flow: ignored, the job completes.
  auto stages = f.pipeline({0, 2, 4}, {si, si});
  auto flowing = run(setup(31, stages), [](caf::actor job, std::int32_t n) {
    if (n == 3)
      caf::anon_send(job, lost_atom::value, std::string{"node n2 is dead"},
                     std::vector<std::uint32_t>{1});
  });
  CHECK(flowing.error.empty());
  CHECK(flowing.tokens[0].size() == 40);
  // A stage that goes away: the job ends at once, naming it.
  auto gone = run(setup(32, stages), [&](caf::actor, std::int32_t n) {
    if (n == 3)
      caf::anon_send_exit(stages[1], caf::exit_reason::kill);
  });
  INFO("the job's error: " << gone.error);
  CHECK(gone.tokens[0].size() < 40);
  CHECK(gone.error.find("stage 1 (n2/sim:0) is gone") != std::string::npos);
  f.stop(stages);
  // A lost notice while a step has waited over a second (its device
  // paused): the job ends with the notice.
  auto dev = f.dev_actors[si];
  auto stalled_stages = f.pipeline({0, 2, 4}, {si, si});
  auto tokens = std::make_shared<std::atomic<int>>(0);
  auto j = setup(33, stalled_stages);
  j.on_token = [tokens](std::uint32_t, std::int32_t, lp_ptr) { ++*tokens; };
  auto stalled = std::make_shared<workload::job_result>();
  j.finish = [stalled](workload::job_result& r) {
    *stalled = r;
    return caf::make_message(caf::ok_atom::value);
  };
  auto job = workload::spawn_job(*f.sys, std::move(j));
  auto pending = self->request(job, std::chrono::seconds(60),
                               run_atom::value);
  for (int i = 0; i < 6000 && *tokens < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  self->request(dev, std::chrono::seconds(10), pause_atom::value,
                std::string{"thermal: test"})
    .receive([](caf::atom_value) {},
             [](caf::error& e) { FAIL(error_message(e)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  self->send(job, lost_atom::value, std::string{"node n2 is dead (test)"},
             std::vector<std::uint32_t>{1});
  pending.receive([](caf::ok_atom) {},
                  [](caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(stalled->error == "node n2 is dead (test)");
  CHECK(stalled->tokens[0].size() < 40);
  self->request(dev, std::chrono::seconds(10), resume_atom::value)
    .receive([](caf::atom_value) {},
             [](caf::error& e) { FAIL(error_message(e)); });
  f.stop(stalled_stages);
}

TEST_CASE("a job whose stages go away is re-placed by its recoverer and "
          "gives the tokens of an uninterrupted run", "[workload]") {
  fixture f;
  auto si = f.device_index("sim");
  auto cpu = f.device_index("cpu");
  caf::scoped_actor self{*f.sys};
  // Two sequences sampled at temperature 0.8: each sampler's state must
  // carry over a recovery for the tokens to match.
  auto setup = [&](std::uint64_t id, std::vector<caf::actor> stages) {
    auto j = f.job(id, std::move(stages), {{1, 17, 42, 99, 5}, {3, 8, 250}},
                   40, 0.8f, 11);
    j.stage_names = {"n1/sim:0", "n2/cpu:0"};
    return j;
  };
  auto reference_stages = f.pipeline({0, 2, 4}, {si, cpu});
  auto reference = workload::run_job(*f.sys, setup(40, reference_stages));
  f.stop(reference_stages);
  REQUIRE(reference.error.empty());
  REQUIRE(reference.tokens[0].size() == 40);

  // The recoverer: a new pipeline split differently each time (a detached
  // actor: building one waits for its links), or an error when told to.
  struct recoverer_state {
    std::vector<std::vector<caf::actor>> made;
    std::vector<std::string> reasons;
    std::vector<std::vector<std::uint32_t>> lost;
    bool refuse = false;
  };
  auto rs = std::make_shared<recoverer_state>();
  // (An argument: CAF 0.17 spawns an actor function without one through a
  // null tuple pointer, which UBSan reports.)
  auto recoverer = f.sys->spawn<caf::detached>(
    [&f, rs, si, cpu](caf::event_based_actor*, int) -> caf::behavior {
      return {
        [&f, rs, si, cpu](recover_atom, std::uint64_t,
                          std::vector<std::uint32_t>& lost, std::string& why,
                          bool device_only) -> caf::result<job_pipeline> {
          CHECK(!device_only); // stages killed: not their devices
          rs->reasons.push_back(why);
          rs->lost.push_back(lost);
          if (rs->refuse)
            return make_exo_error(exo_errc::failed_state,
                                  "the survivors cannot hold 4 layers");
          auto splits = rs->made.size() % 2 == 0
                          ? std::vector<std::uint32_t>{0, 1, 4}
                          : std::vector<std::uint32_t>{0, 3, 4};
          rs->made.push_back(f.pipeline(splits, {cpu, si}));
          job_pipeline p;
          p.stages = rs->made.back();
          p.names = {"n1/cpu:0", "n3/sim:0"};
          p.placement = "stage 0: layers [" + std::to_string(splits[0])
                        + ", " + std::to_string(splits[1]) + ")\n";
          return p;
        },
      };
    },
    0);
  // Runs a job that kills its current first or last stage after the
  // tokens named in `kill_at` (counted over both sequences).
  auto run = [&](workload::job_setup j, std::vector<int> kill_at,
                 std::vector<job_recovered>* events = nullptr) {
    j.recoverer = recoverer;
    auto result = std::make_shared<workload::job_result>();
    auto count = std::make_shared<int>(0);
    auto current = std::make_shared<std::vector<caf::actor>>(j.stages);
    auto rs2 = rs;
    j.on_token = [count, kill_at, current, rs2](
                   std::uint32_t, std::int32_t, lp_ptr) {
      ++*count;
      for (std::size_t k = 0; k < kill_at.size(); ++k)
        if (*count == kill_at[k]) {
          // the pipeline in use: the first one, then the k-th re-placement
          auto& stages = k == 0 ? *current : rs2->made.back();
          caf::anon_send_exit(stages[k % 2 == 0 ? 1 : 0],
                              caf::exit_reason::kill);
        }
    };
    if (events)
      j.on_recovered = [events](const job_recovered& e) {
        events->push_back(e);
      };
    j.finish = [result](workload::job_result& r) {
      *result = r;
      return caf::make_message(caf::ok_atom::value);
    };
    auto job = workload::spawn_job(*f.sys, std::move(j));
    self->request(job, std::chrono::seconds(120), run_atom::value)
      .receive([](caf::ok_atom) {},
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    return *result;
  };

  SECTION("one loss mid-decode, then a second during the run") {
    auto stages = f.pipeline({0, 2, 4}, {si, cpu});
    std::vector<job_recovered> events;
    auto r = run(setup(41, stages), {7, 50}, &events);
    INFO(r.error);
    CHECK(r.error.empty());
    CHECK(r.tokens == reference.tokens);
    REQUIRE(r.recoveries.size() == 2);
    CHECK(events.size() == 2);
    CHECK(rs->reasons[0].find("stage 1 (n2/cpu:0) is gone") == 0);
    CHECK(rs->lost[0] == std::vector<std::uint32_t>{1});
    CHECK(rs->lost[1] == std::vector<std::uint32_t>{0});
    // Each recovery re-fed the prompts and what was generated so far but
    // each sequence's last token (its next step reads that one).
    CHECK(r.recoveries[0].replayed >= 5 + 3 + 7 - 2);
    CHECK(r.recoveries[0].replayed <= 5 + 3 + 7);
    CHECK(r.recoveries[0].recovery_s > 0);
    CHECK(r.recoveries[0].gap_s >= r.recoveries[0].recovery_s);
    CHECK(r.recoveries[1].reason.find("stage 0 (n1/cpu:0) is gone") == 0);
    CHECK(r.generated_tokens == 80);
    // Held: the job left them (re-placed).
    f.stop(stages, true);
  }
  SECTION("a scored prompt: its scores go out once, across recoveries "
          "after it and one while it is read") {
    auto stages = f.pipeline({0, 2, 4}, {si, cpu});
    auto j = setup(47, stages);
    j.logprobs = 0;
    j.prompt_logprobs = true;
    auto calls = std::make_shared<std::vector<std::size_t>>(2, 0);
    auto sizes = std::make_shared<std::vector<std::size_t>>(2, 0);
    auto seen = std::make_shared<
      std::vector<std::vector<model::token_logprobs>>>(2);
    j.on_prompt_scores = [calls, sizes, seen](
                           std::uint32_t seq,
                           const std::vector<model::token_logprobs>& sc) {
      ++(*calls)[seq];
      (*sizes)[seq] = sc.size();
      (*seen)[seq] = sc;
    };
    auto scored_setup = j;
    auto r = run(std::move(j), {7, 50});
    INFO(r.error);
    CHECK(r.error.empty());
    CHECK(r.tokens == reference.tokens);
    CHECK(r.recoveries.size() == 2);
    CHECK(*calls == std::vector<std::size_t>{1, 1});
    CHECK(*sizes == std::vector<std::size_t>{4, 2});
    f.stop(stages, true);
    // Lost while its prompt is read (the first step fails): the new
    // pipeline reads and scores it, once; the same scores (another split:
    // up to a forward's last bits).
    auto first = *seen;
    *calls = {0, 0};
    auto lost = f.pipeline({0, 2, 4}, {si, cpu});
    caf::anon_send_exit(lost[1], caf::exit_reason::kill);
    scored_setup.id = 48;
    scored_setup.stages = lost;
    auto again = run(std::move(scored_setup), {});
    INFO(again.error);
    CHECK(again.error.empty());
    CHECK(again.tokens == reference.tokens);
    CHECK(again.recoveries.size() == 1);
    CHECK(*calls == std::vector<std::size_t>{1, 1});
    for (std::size_t q = 0; q < 2; ++q) {
      REQUIRE((*seen)[q].size() == first[q].size());
      for (std::size_t i = 0; i < first[q].size(); ++i)
        CHECK((*seen)[q][i].logprob
              == Approx(first[q][i].logprob).margin(3e-3));
    }
    f.stop(lost, true);
  }
  SECTION("a speculating job: a round under way is drawn again") {
    // A draft that is never kept: each token a round of 4 proposals, a
    // verdict on each and a residual's draw. The loss drops the round in
    // flight; its sampler goes back to where its tokens were whole.
    auto other = other_draft(f);
    auto with_draft = [&](std::uint64_t id, std::vector<caf::actor> stages,
                          std::vector<caf::actor> draft) {
      auto j = setup(id, std::move(stages));
      j.draft_stages = std::move(draft);
      j.draft_n_embd = other->hparams().n_embd;
      j.draft_tokens = 4;
      return j;
    };
    auto ref_stages = f.pipeline({0, 2, 4}, {si, cpu});
    auto ref_draft = shards_of(f, other, {0, 2});
    auto spec_reference = workload::run_job(
      *f.sys, with_draft(45, ref_stages, ref_draft));
    f.stop(ref_draft);
    f.stop(ref_stages);
    REQUIRE(spec_reference.error.empty());
    REQUIRE(spec_reference.drafted > 0);
    auto stages = f.pipeline({0, 2, 4}, {si, cpu});
    auto draft = shards_of(f, other, {0, 2});
    auto r = run(with_draft(46, stages, draft), {9});
    f.stop(draft);
    INFO(r.error);
    CHECK(r.error.empty());
    CHECK(r.tokens == spec_reference.tokens);
    CHECK(r.recoveries.size() == 1);
    CHECK(r.drafted > 0);
    f.stop(stages, true);
  }
  SECTION("a loss before the prompt is read") {
    auto stages = f.pipeline({0, 2, 4}, {si, cpu});
    caf::anon_send_exit(stages[1], caf::exit_reason::kill);
    auto r = run(setup(42, stages), {});
    INFO(r.error);
    CHECK(r.error.empty());
    CHECK(r.tokens == reference.tokens);
    CHECK(r.recoveries.size() == 1);
    // Held: the job left them (re-placed).
    f.stop(stages, true);
  }
  SECTION("a recoverer that cannot re-place it ends the job, naming both") {
    rs->refuse = true;
    auto stages = f.pipeline({0, 2, 4}, {si, cpu});
    auto r = run(setup(43, stages), {4});
    CHECK(r.error.find("stage 1 (n2/cpu:0) is gone") == 0);
    CHECK(r.error.find("could not be re-placed: the survivors cannot hold "
                       "4 layers")
          != std::string::npos);
    CHECK(r.recoveries.empty());
    CHECK(r.tokens[0].size() < 40);
    f.stop(stages);
  }
  SECTION("past max_recoveries a loss ends the job") {
    auto stages = f.pipeline({0, 2, 4}, {si, cpu});
    auto j = setup(44, stages);
    j.max_recoveries = 1;
    auto r = run(std::move(j), {5, 30});
    CHECK(r.error.find("stage 0 (n1/cpu:0) is gone") == 0);
    CHECK(r.error.find("(after 1 recovery, at most 1)") != std::string::npos);
    CHECK(r.recoveries.size() == 1);
    // Held: the job left them (re-placed).
    f.stop(stages, true);
  }
  for (auto& p : rs->made) // (held: jobs that ended on a second loss)
    f.stop(p, true);
  self->send_exit(recoverer, caf::exit_reason::user_shutdown);
}

TEST_CASE("a planned move carries the KV caches to the new stages: nothing "
          "is re-fed and the tokens are those of an uninterrupted run",
          "[workload][move]") {
  fixture f;
  f.n_ctx = 1024;
  auto si = f.device_index("sim");
  auto cpu = f.device_index("cpu");
  caf::scoped_actor self{*f.sys};
  // Three sequences at temperature 0.8 (the samplers carry over), one of
  // them with a prompt longer than a step carries (512 tokens).
  std::vector<std::int32_t> long_prompt(700);
  for (std::size_t i = 0; i < long_prompt.size(); ++i)
    long_prompt[i] = static_cast<std::int32_t>((31 * i + 4) % 400);
  auto setup = [&](std::uint64_t id, std::vector<caf::actor> stages) {
    auto j = f.job(id, std::move(stages),
                   {{1, 17, 42, 99, 5}, {3, 8, 250}, long_prompt}, 30, 0.8f,
                   21);
    j.stage_names = {"n1/sim:0", "leaving/cpu:0"};
    return j;
  };
  auto reference_stages = f.pipeline({0, 2, 4}, {si, cpu});
  auto reference = workload::run_job(*f.sys, setup(60, reference_stages));
  f.stop(reference_stages);
  INFO(reference.error);
  REQUIRE(reference.error.empty());
  // Drains "leaving" after the `at`-th token; the new pipeline is split
  // differently, its devices swapped.
  auto run = [&](std::uint64_t id, int at, bool tell_bounds) {
    auto got = std::make_shared<fixture::recovery_seen>();
    auto rec = f.recoverer(got, {0, 1, 4}, {cpu, si},
                           {"n1/cpu:0", "n3/sim:0"}, {}, tell_bounds);
    auto stages = f.pipeline({0, 2, 4}, {si, cpu});
    auto j = setup(id, stages);
    j.recoverer = rec;
    auto result = std::make_shared<workload::job_result>();
    auto job_handle = std::make_shared<caf::actor>();
    auto count = std::make_shared<int>(0);
    j.on_token = [count, at, job_handle](std::uint32_t, std::int32_t, lp_ptr) {
      if (++*count == at)
        caf::anon_send(*job_handle, lost_atom::value,
                       std::string{"node leaving is drained (a planned "
                                   "move)"},
                       std::vector<std::uint32_t>{1}, true);
    };
    j.finish = [result](workload::job_result& r) {
      *result = r;
      return caf::make_message(caf::ok_atom::value);
    };
    *job_handle = workload::spawn_job(*f.sys, std::move(j));
    self->request(*job_handle, std::chrono::seconds(120), run_atom::value)
      .receive([](caf::ok_atom) {},
               [](caf::error& e) { FAIL(caf::to_string(e)); });
    *job_handle = caf::actor{};
    // Held: the job left them (moved).
    f.stop(stages, true);
    f.stop(got->made);
    self->send_exit(rec, caf::exit_reason::user_shutdown);
    CHECK(got->lost == std::vector<std::uint32_t>{1});
    return *result;
  };
  const std::uint64_t per_position
    = 4 * 2 * std::uint64_t{f.model->hparams().n_embd_kv()} * 2; // f16

  SECTION("mid-decode, the caches go along") {
    auto r = run(61, 12, true);
    INFO(r.error);
    REQUIRE(r.error.empty());
    CHECK(r.tokens == reference.tokens);
    REQUIRE(r.recoveries.size() == 1);
    auto& e = r.recoveries[0];
    CHECK(e.reason == "node leaving is drained (a planned move)");
    CHECK(e.replayed == 0);
    // Every sequence's positions: its prompt and the tokens it had (all
    // but the last sampled one, not yet read), at least 12 tokens in all.
    CHECK(e.moved_positions >= 5 + 3 + 700 + 12 - 3);
    CHECK(e.moved_positions <= 5 + 3 + 700 + 12 + 6);
    CHECK(e.moved_bytes == e.moved_positions * per_position);
  }
  SECTION("while a prompt is still being read") {
    // The first token comes while the 700-token prompt is half read.
    auto r = run(62, 1, true);
    INFO(r.error);
    REQUIRE(r.error.empty());
    CHECK(r.tokens == reference.tokens);
    REQUIRE(r.recoveries.size() == 1);
    CHECK(r.recoveries[0].replayed == 0);
    CHECK(r.recoveries[0].moved_bytes > 0);
  }
  SECTION("new stages whose layer ranges are unknown: re-fed, and said") {
    auto r = run(63, 12, false);
    INFO(r.error);
    REQUIRE(r.error.empty());
    CHECK(r.tokens == reference.tokens);
    REQUIRE(r.recoveries.size() == 1);
    auto& e = r.recoveries[0];
    CHECK(e.moved_bytes == 0);
    CHECK(e.replayed >= 5 + 3 + 700 + 12 - 3 - 3); // (but the last tokens)
    CHECK(e.reason.find("its KV caches were re-fed, not moved (the new "
                        "stages' layer ranges do not cover the 4 layers "
                        "carried)")
          != std::string::npos);
  }
}

TEST_CASE("a planned move asked for while the job moves already is made "
          "once it goes on, its caches carried again",
          "[workload][move]") {
  fixture f;
  auto si = f.device_index("sim");
  auto cpu = f.device_index("cpu");
  caf::scoped_actor self{*f.sys};
  auto setup = [&](std::uint64_t id, std::vector<caf::actor> stages) {
    auto j = f.job(id, std::move(stages), {{1, 17, 42, 99, 5}, {3, 8, 250}},
                   40, 0.8f, 5);
    j.stage_names = {"n1/sim:0", "n2/cpu:0"};
    return j;
  };
  auto reference_stages = f.pipeline({0, 2, 4}, {si, cpu});
  auto reference = workload::run_job(*f.sys, setup(70, reference_stages));
  f.stop(reference_stages);
  REQUIRE(reference.error.empty());
  // The recoverer answers the first move and right after it says that the
  // new pipeline's stage 0 must move too (as the coordinator does for a
  // stage placed on a node drained meanwhile); the job is still writing
  // the rows it carried then.
  auto job = std::make_shared<caf::actor>();
  auto made = std::make_shared<std::vector<std::vector<caf::actor>>>();
  auto recoverer = f.sys->spawn<caf::detached>(
    [&f, job, made, si, cpu](caf::event_based_actor* rec,
                             int) -> caf::behavior {
      return {
        [&f, job, made, si, cpu, rec](recover_atom, std::uint64_t,
                                      std::vector<std::uint32_t>&,
                                      std::string&,
                                      bool) -> caf::result<job_pipeline> {
          auto bounds = made->size() % 2 == 0
                          ? std::vector<std::uint32_t>{0, 1, 4}
                          : std::vector<std::uint32_t>{0, 3, 4};
          made->push_back(f.pipeline(bounds, {cpu, si}));
          job_pipeline p;
          p.stages = made->back();
          p.names = {"n3/cpu:0", "n4/sim:0"};
          p.bounds = bounds;
          if (made->size() > 1)
            return p;
          auto rp = rec->make_response_promise<job_pipeline>();
          rp.deliver(std::move(p));
          rec->send(*job, lost_atom::value,
                    std::string{"n3/cpu:0 was drained meanwhile (a planned "
                                "move)"},
                    std::vector<std::uint32_t>{0}, true);
          return rp;
        },
      };
    },
    0);
  auto stages = f.pipeline({0, 2, 4}, {si, cpu});
  auto j = setup(71, stages);
  j.recoverer = recoverer;
  auto result = std::make_shared<workload::job_result>();
  auto count = std::make_shared<int>(0);
  j.on_token = [count, job](std::uint32_t, std::int32_t, lp_ptr) {
    if (++*count == 9)
      caf::anon_send(*job, lost_atom::value,
                     std::string{"node n2 is drained (a planned move)"},
                     std::vector<std::uint32_t>{1}, true);
  };
  j.finish = [result](workload::job_result& r) {
    *result = r;
    return caf::make_message(caf::ok_atom::value);
  };
  *job = workload::spawn_job(*f.sys, std::move(j));
  self->request(*job, std::chrono::seconds(120), run_atom::value)
    .receive([](caf::ok_atom) {},
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  *job = caf::actor{};
  INFO(result->error);
  REQUIRE(result->error.empty());
  CHECK(result->tokens == reference.tokens);
  REQUIRE(result->recoveries.size() == 2);
  CHECK(result->recoveries[1].reason
        == "n3/cpu:0 was drained meanwhile (a planned move)");
  for (auto& e : result->recoveries) {
    CHECK(e.replayed == 0);
    CHECK(e.moved_bytes > 0);
  }
  CHECK(made->size() == 2);
  // Held: the job left them (moved).
  f.stop(stages, true);
  for (auto& p : *made) // the job moved on from the first (held)
    f.stop(p, &p != &made->back());
  self->send_exit(recoverer, caf::exit_reason::user_shutdown);
}

TEST_CASE("a shard checks the KV rows it is given and the rows it is asked "
          "for", "[workload][move]") {
  fixture f;
  caf::scoped_actor self{*f.sys};
  auto stages = f.pipeline({0, 2, 4}, {f.device_index("cpu"),
                                       f.device_index("cpu")});
  auto read_error = [&](std::uint32_t n) {
    std::string why;
    self->request(stages[0], std::chrono::seconds(10), kv_read_atom::value,
                  std::uint64_t{9}, std::uint32_t{0}, std::uint32_t{0}, n)
      .receive([](kv_rows&) { FAIL("answered"); },
               [&](caf::error& e) { why = caf::to_string(e); });
    return why;
  };
  auto write_error = [&](const kv_rows& rows) {
    std::string why;
    self->request(stages[0], std::chrono::seconds(10), kv_write_atom::value,
                  rows)
      .receive([](caf::ok_atom) { FAIL("accepted"); },
               [&](caf::error& e) { why = caf::to_string(e); });
    return why;
  };
  CHECK(read_error(4)
          .find("job 9 has no KV cache for sequence 0 here")
        != std::string::npos);
  kv_rows r;
  r.job = 9;
  r.first = 0;
  r.last = 4;
  r.n = 1;
  r.row_bytes = f.model->hparams().n_embd_kv() * 2;
  r.data.resize(4 * 2 * r.row_bytes);
  CHECK(write_error(r)
          .find("layers [0, 4) for a stage of [0, 2)")
        != std::string::npos);
  r.last = 2;
  r.data.resize(2 * 2 * r.row_bytes);
  r.pos = 3; // a new sequence starts at 0
  CHECK(write_error(r)
          .find("sequence 0 starts at position 3")
        != std::string::npos);
  r.pos = 0;
  r.row_bytes += 2;
  CHECK(write_error(r)
          .find("this stage's are")
        != std::string::npos);
  r.row_bytes -= 2;
  r.data.pop_back();
  CHECK(write_error(r).find("bytes, got")
        != std::string::npos);
  r.data.push_back(0);
  r.n = 1u << 30; // past the context
  CHECK(write_error(r)
          .find("for a context of")
        != std::string::npos);
  // Accepted rows are there to read back, bit for bit.
  r.n = 1;
  for (std::size_t i = 0; i < r.data.size(); ++i)
    r.data[i] = static_cast<std::uint8_t>(i * 7);
  self->request(stages[0], std::chrono::seconds(10), kv_write_atom::value, r)
    .receive([](caf::ok_atom) {},
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(read_error(2)
          .find("holds 1 positions: cannot read 2 from position 0")
        != std::string::npos);
  self->request(stages[0], std::chrono::seconds(10), kv_read_atom::value,
                std::uint64_t{9}, std::uint32_t{0}, std::uint32_t{0},
                std::uint32_t{1})
    .receive(
      [&](kv_rows& back) {
        CHECK(back.n == 1);
        CHECK(back.first == 0);
        CHECK(back.last == 2);
        CHECK(back.data == r.data);
      },
      [](caf::error& e) { FAIL(caf::to_string(e)); });
  // Held: rows written by hand, never released.
  f.stop(stages, true);
}

// Last in the file: the sim device vanishes for good (the registry is the
// process's; ctest runs each test case in a process of its own).
TEST_CASE("a job whose device vanishes mid-decode is re-placed without the "
          "device and gives the tokens of an uninterrupted run",
          "[workload]") {
  fixture f;
  auto si = f.device_index("sim");
  auto cpu = f.device_index("cpu");
  REQUIRE(si != cpu);
  auto* sim = dynamic_cast<backend::sim_device*>(f.devs[si]);
  REQUIRE(sim);
  caf::scoped_actor self{*f.sys};
  auto setup = [&](std::uint64_t id, std::vector<caf::actor> stages) {
    auto j = f.job(id, std::move(stages), {{1, 17, 42, 99, 5}}, 30, 0.8f, 5);
    j.stage_names = {"n1/cpu:0", "n1/sim:0"};
    return j;
  };
  auto first = f.pipeline({0, 2, 4}, {cpu, si});
  auto reference = workload::run_job(*f.sys, setup(50, first));
  REQUIRE(reference.error.empty());
  auto got = std::make_shared<fixture::recovery_seen>();
  auto recoverer = f.recoverer(got, {0, 2, 4}, {cpu, cpu},
                               {"n1/cpu:0", "n1/cpu:0"});
  auto j = setup(51, first);
  j.recoverer = recoverer;
  auto count = std::make_shared<int>(0);
  j.on_token = [count, sim](std::uint32_t, std::int32_t, lp_ptr) {
    if (++*count == 5)
      sim->vanish();
  };
  auto result = std::make_shared<workload::job_result>();
  j.finish = [result](workload::job_result& r) {
    *result = r;
    return caf::make_message(caf::ok_atom::value);
  };
  auto job = workload::spawn_job(*f.sys, std::move(j));
  self->request(job, std::chrono::seconds(120), run_atom::value)
    .receive([](caf::ok_atom) {},
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  INFO(result->error);
  CHECK(result->error.empty());
  CHECK(result->tokens == reference.tokens);
  REQUIRE(result->recoveries.size() == 1);
  CHECK(got->device_only);
  CHECK(got->lost == std::vector<std::uint32_t>{1});
  CHECK(got->why.find("stage 1 (n1/sim:0) is gone: device_lost") == 0);
  // Held: the job left them (re-placed).
  f.stop(first, true);
  f.stop(got->made);
  self->send_exit(recoverer, caf::exit_reason::user_shutdown);
}

TEST_CASE("a job whose KV cache cannot grow on its device moves to another "
          "and gives the tokens of an uninterrupted run",
          "[workload][kv]") {
  // A simulated device of its own (the shared one may have vanished in
  // an earlier test); the registry outlives the fixture's device actors.
  backend::factory_options fo;
  fo.use_environment = false;
  fo.include = {"sim"};
  fo.sim.devices = {{"a100-40g", "sim:kv-test"}};
  auto reg = backend::registry::create(fo);
  REQUIRE(reg.ok());
  backend::device* own = nullptr;
  for (auto* d : reg->devices())
    if (d->properties().id == "sim:kv-test")
      own = d;
  REQUIRE(own);
  fixture f;
  f.n_ctx = 600; // caches start with room for 256 positions
  device::device_actor_config dc;
  dc.node = "test";
  f.devs.push_back(own);
  f.dev_actors.push_back(
    device::spawn_device_actor(*f.sys, *f.devs.back(), dc));
  const auto si = f.devs.size() - 1;
  auto cpu = f.device_index("cpu");
  auto* sim = dynamic_cast<backend::sim_device*>(f.devs[si]);
  REQUIRE(sim);
  caf::scoped_actor self{*f.sys};
  auto setup = [&](std::uint64_t id, std::vector<caf::actor> stages) {
    auto j = f.job(id, std::move(stages), {{1, 17, 42, 99, 5}}, 300, 0.8f, 9);
    j.stage_names = {"n1/sim:0"};
    return j;
  };
  // The reference on the cpu device (the same bits as the simulated one;
  // and the sim device's pool keeps no grown cache's buffers to reuse).
  auto ref_stages = f.pipeline({0, 4}, {cpu});
  auto reference = workload::run_job(*f.sys, setup(60, ref_stages));
  REQUIRE(reference.error.empty());
  f.stop(ref_stages);
  auto first = f.pipeline({0, 4}, {si});
  auto got = std::make_shared<fixture::recovery_seen>();
  auto recoverer = f.recoverer(got, {0, 4}, {cpu}, {"n1/cpu:0"},
                               [sim] { sim->fail_allocations(false); });
  auto j = setup(61, first);
  j.recoverer = recoverer;
  // From the 100th token on the device has no memory to give: the cache
  // cannot grow past 256 positions.
  auto count = std::make_shared<int>(0);
  j.on_token = [count, sim](std::uint32_t, std::int32_t, lp_ptr) {
    if (++*count == 100)
      sim->fail_allocations(true);
  };
  auto result = workload::run_job(*f.sys, std::move(j));
  sim->fail_allocations(false);
  INFO(result.error);
  CHECK(result.error.empty());
  CHECK(result.tokens == reference.tokens);
  REQUIRE(result.recoveries.size() == 1);
  CHECK(got->device_only);
  CHECK(got->lost == std::vector<std::uint32_t>{0});
  INFO(got->why);
  CHECK(got->why.find("stage 0 (n1/sim:0) is gone: out_of_memory: ") == 0);
  CHECK(got->why.find("could not grow past 256 positions")
        != std::string::npos);
  f.stop(first);
  f.stop(got->made);
  self->send_exit(recoverer, caf::exit_reason::user_shutdown);
}

TEST_CASE("a job resumed from the tokens another job generated goes on "
          "exactly as that job did", "[workload]") {
  fixture f;
  std::vector<std::vector<std::int32_t>> ps{{1, 17, 42, 99, 5}, {3, 8, 250},
                                            {1, 250}};
  // The uninterrupted run: three sequences at temperature 0.9, 30 tokens.
  auto reference = f.run({0, 2, 4}, ps, 30, 0.9f, 5);
  REQUIRE(reference.error.empty());
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{13},
                          std::size_t{30}}) {
    CAPTURE(cut);
    auto stages = f.pipeline({0, 2, 4});
    auto j = f.job(2, stages, ps, 30, 0.9f, 5);
    // What a coordinator that died had replicated: each sequence's first
    // `cut` tokens (sequence 2 one fewer: replicas lag unevenly).
    std::vector<std::size_t> j_generated;
    for (std::size_t s = 0; s < ps.size(); ++s) {
      auto n = s == 2 && cut > 0 ? cut - 1 : cut;
      j.generated.emplace_back(reference.tokens[s].begin(),
                               reference.tokens[s].begin() + n);
      j_generated.push_back(n);
    }
    j.resumed_after = "coordinator n1 is dead";
    auto fresh = std::make_shared<std::vector<std::int32_t>>();
    j.on_token = [fresh](std::uint32_t s, std::int32_t t, lp_ptr) {
      if (s == 0)
        fresh->push_back(t);
    };
    auto r = workload::run_job(*f.sys, std::move(j));
    f.stop(stages);
    REQUIRE(r.error.empty());
    for (std::size_t s = 0; s < ps.size(); ++s) {
      CAPTURE(s);
      CHECK(r.tokens[s] == reference.tokens[s]);
    }
    // Only the new tokens are produced (and counted) again.
    CHECK(fresh->size() == 30 - cut);
    CHECK(r.generated_tokens == 3 * 30 - (3 * cut - (cut > 0 ? 1 : 0)));
    // The takeover is the job's first recovery: the prompts and tokens of
    // the sequences still running were re-fed, each but its last token
    // (its next step reads that one, as a running sequence's).
    REQUIRE(r.recoveries.size() == 1);
    CHECK(r.recoveries[0].reason == "coordinator n1 is dead");
    std::size_t refed = 0;
    for (std::size_t s = 0; s < ps.size(); ++s) {
      const auto n = j_generated[s];
      if (n < 30)
        refed += ps[s].size() + (n > 0 ? n - 1 : 0);
    }
    CHECK(r.recoveries[0].replayed == refed);
  }
  SECTION("a job whose sequences had all ended ends at once") {
    auto stages = f.pipeline({0, 4});
    auto j = f.job(4, stages, ps, 30, 0.9f, 5);
    j.generated = reference.tokens;
    j.resumed_after = "coordinator n1 is dead";
    auto r = workload::run_job(*f.sys, std::move(j));
    f.stop(stages);
    REQUIRE(r.error.empty());
    CHECK(r.tokens == reference.tokens);
    CHECK(r.generated_tokens == 0);
    CHECK(r.recoveries.empty());
  }
  SECTION("tokens outside the vocabulary or too many are refused") {
    auto stages = f.pipeline({0, 4});
    auto j = f.job(3, stages, {{1, 2}}, 5, 0.0f);
    j.generated = {{4, 999999}};
    auto r = workload::run_job(*f.sys, j);
    CHECK(r.error.find("outside the vocabulary") != std::string::npos);
    j.generated = {{4, 4, 4, 4, 4, 4}};
    r = workload::run_job(*f.sys, j);
    CHECK(r.error.find("more than the 5") != std::string::npos);
    j.generated = {{4}, {4}};
    r = workload::run_job(*f.sys, j);
    CHECK(r.error.find("resumes 2 sequences") != std::string::npos);
    f.stop(stages);
  }
}

TEST_CASE("a sequence that ended gives its KV cache back while the others "
          "go on",
          "[workload]") {
  fixture f;
  caf::scoped_actor self{*f.sys};
  auto stages = f.pipeline({0, 4}, {f.device_index("cpu")});
  auto step = [&](std::uint32_t seq, std::uint32_t pos,
                  std::vector<std::int32_t> toks) {
    stage_step s;
    s.job = 9;
    s.seq = seq;
    s.pos = pos;
    s.tokens = std::move(toks);
    self->request(stages[0], std::chrono::seconds(30), forward_atom::value, s)
      .receive([](stage_step&) {},
               [](caf::error& e) { FAIL(error_message(e)); });
  };
  step(0, 0, {1, 17, 42});
  step(1, 0, {1, 200});
  // One 32-position block of the paged cache each (halves).
  auto one = 32ull * 2 * 4 * f.model->hparams().n_embd_kv() * 2;
  CHECK(num(snapshot_of(self, stages[0]), "kv_cache_bytes") == 2 * one);
  self->request(stages[0], std::chrono::seconds(10), release_atom::value,
                std::uint64_t{9}, std::uint32_t{0})
    .receive([](caf::ok_atom) {}, [](caf::error& e) { FAIL(error_message(e)); });
  auto sh = snapshot_of(self, stages[0]);
  CHECK(num(sh, "kv_cache_bytes") == one);
  CHECK(num(sh, "sequences") == 1);
  CHECK(num(sh, "kv_blocks_used") == 1);
  step(1, 2, {5}); // the other one goes on
  self->request(stages[0], std::chrono::seconds(10), release_atom::value,
                std::uint64_t{9})
    .receive([](caf::ok_atom) {}, [](caf::error& e) { FAIL(error_message(e)); });
  sh = snapshot_of(self, stages[0]);
  CHECK(num(sh, "kv_cache_bytes") == 0);
  CHECK(num(sh, "kv_blocks_used") == 0);
  CHECK(num(sh, "stage_kv_bytes") == 0);
  f.stop(stages);
}

TEST_CASE("a job gives back each sequence's KV caches as it ends",
          "[workload]") {
  // Sequence 0 stops at its third token (made an end-of-generation token
  // for this run); sequence 1 runs on. A proxy in front of the shard sees
  // the job release sequence 0 alone, then the whole job.
  fixture f;
  auto first = f.run({0, 4}, {prompts()[0], prompts()[1]}, 8, 0.0f);
  REQUIRE(first.error.empty());
  const auto stop = first.tokens[0][2];
  REQUIRE(std::find(first.tokens[1].begin(), first.tokens[1].end(), stop)
          == first.tokens[1].end());
  auto stages = f.pipeline({0, 4}, {f.device_index("cpu")});
  struct seen {
    std::mutex m;
    std::vector<std::int64_t> released; ///< a sequence, or -1: the job
  };
  auto log = std::make_shared<seen>();
  auto shard = stages[0];
  // At least one argument after `self`: CAF 0.17 spawns a function
  // without one through a null pointer (UBSan).
  auto proxy = f.sys->spawn([log](caf::event_based_actor* p,
                                  const caf::actor& shard) -> caf::behavior {
    return {
      [p, shard](forward_atom a, stage_step& s) {
        return p->delegate(shard, a, std::move(s));
      },
      [p, log, shard](release_atom a, std::uint64_t job, std::uint32_t seq) {
        std::lock_guard<std::mutex> g{log->m};
        log->released.push_back(seq);
        return p->delegate(shard, a, job, seq);
      },
      [p, log, shard](release_atom a, std::uint64_t job) {
        std::lock_guard<std::mutex> g{log->m};
        log->released.push_back(-1);
        return p->delegate(shard, a, job);
      },
    };
  }, shard);
  auto j = f.job(1, {proxy}, {prompts()[0], prompts()[1]}, 8, 0.0f);
  j.eog = {stop};
  auto r = workload::run_job(*f.sys, std::move(j));
  REQUIRE(r.error.empty());
  CHECK(r.tokens[0].size() == 3);
  CHECK(r.tokens[1] == first.tokens[1]);
  caf::scoped_actor self{*f.sys};
  // Both ended: nothing held (the job's release arrives after its steps).
  CHECK(num(released(self, shard), "kv_cache_bytes") == 0);
  {
    std::lock_guard<std::mutex> g{log->m};
    CHECK(log->released == std::vector<std::int64_t>{0, -1});
  }
  self->send_exit(proxy, caf::exit_reason::user_shutdown);
  f.stop(stages);
}

TEST_CASE("speculative decoding with a draft model gives exactly the tokens "
          "of decoding without one",
          "[workload][speculative]") {
  fixture f;
  // A draft of another seed and two layers (it rarely agrees), and the
  // model itself as its own draft (it always does).
  auto other = other_draft(f);
  std::vector<draft_case> drafts{{"another model", other, {0, 2}},
                                 {"the model itself", f.model, {0, 2, 4}}};
  for (auto& bounds : std::vector<std::vector<std::uint32_t>>{{0, 4},
                                                             {0, 2, 4}}) {
    const auto cpu = f.device_index("cpu");
    auto plain_stages = f.pipeline(bounds, {cpu, cpu});
    auto plain = workload::run_job(
      *f.sys, f.job(1, plain_stages, {prompts()[0], prompts()[2]}, 24, 0.0f));
    f.stop(plain_stages);
    REQUIRE(plain.error.empty());
    for (auto& d : drafts) {
      for (std::uint32_t k : {1u, 4u}) {
        INFO("draft: " << d.name << ", " << bounds.size() - 1
                       << " stages, " << k << " proposals a round");
        auto stages = f.pipeline(bounds, {cpu, cpu});
        auto draft = shards_of(f, d.m, d.bounds);
        auto j = f.job(1, stages, {prompts()[0], prompts()[2]}, 24, 0.0f);
        j.draft_stages = draft;
        j.draft_n_embd = d.m->hparams().n_embd;
        j.draft_tokens = k;
        auto r = workload::run_job(*f.sys, std::move(j));
        REQUIRE(r.error.empty());
        CHECK(r.tokens == plain.tokens);
        CHECK(r.generated_tokens == plain.generated_tokens);
        CHECK(r.drafted > 0);
        if (d.m == f.model) // its own draft: every proposal kept
          CHECK(r.accepted == r.drafted);
        else
          CHECK(r.accepted < r.drafted);
        // The last logits are the model's own, bit for bit.
        for (std::size_t q = 0; q < r.logits.size(); ++q) {
          INFO("sequence " << q << " diff "
                           << max_rel_diff(r.logits[q], plain.logits[q]));
          CHECK(r.logits[q] == plain.logits[q]);
        }
        f.stop(draft);
        f.stop(stages);
      }
      // The verifying steps return each row's greedy candidate: the same.
      INFO("draft: " << d.name << ", candidates only");
      auto stages = f.pipeline(bounds, {cpu, cpu});
      auto draft = shards_of(f, d.m, d.bounds);
      auto j = f.job(1, stages, {prompts()[0], prompts()[2]}, 24, 0.0f);
      j.draft_stages = draft;
      j.draft_n_embd = d.m->hparams().n_embd;
      j.draft_tokens = 4;
      j.keep_logits = false;
      auto r = workload::run_job(*f.sys, std::move(j));
      REQUIRE(r.error.empty());
      CHECK(r.tokens == plain.tokens);
      CHECK(r.drafted > 0);
      CHECK(r.logits[0].empty());
      f.stop(draft);
      f.stop(stages);
    }
  }
}

namespace {

/// `n` tokens of `prompt` from the fixture's model alone (a device stage of
/// every layer on a cpu device of its own, the prompt in one forward, then
/// a token at a time), each row adjusted by `p`'s bias and penalties for
/// the prompt and the tokens generated so far and sampled by a sampler of
/// `p` (greedy at temperature 0): what a job's sequence seeded with p.seed
/// must give.
/// `raw` gets each token's row as the model gave it.
std::vector<std::int32_t>
adjusted_alone(const fixture& f, const std::vector<std::int32_t>& prompt,
               std::size_t n, const model::sampler_params& p,
               std::vector<std::vector<float>>& raw) {
  backend::factory_options fo;
  fo.include = {"cpu"};
  fo.use_environment = false;
  fo.cpu.threads = 1;
  auto reg = backend::registry::create(fo);
  REQUIRE(reg.ok());
  model::backend_ops ops(*reg->devices().front());
  auto st = model::device_stage::create(f.model, 0,
                                        f.model->hparams().n_layer, ops, {});
  REQUIRE(st.ok());
  auto& stage = **st;
  auto cache = stage.new_cache(f.n_ctx);
  REQUIRE(cache.ok());
  const std::size_t e = f.model->hparams().n_embd;
  const std::size_t v = f.model->hparams().n_vocab;
  model::sampler smp(p);
  std::vector<std::int32_t> out;
  std::vector<std::int32_t> in = prompt;
  std::uint32_t pos = 0;
  raw.clear();
  while (out.size() < n) {
    std::vector<float> x(in.size() * e), logits(v);
    REQUIRE(stage.embed(in.data(), in.size(), x.data()).ok());
    REQUIRE(stage.forward(*cache, pos, x.data(), in.size(), logits.data())
              .ok());
    pos += static_cast<std::uint32_t>(in.size());
    raw.push_back(logits);
    model::adjust_logits(p, prompt.data(), prompt.size(), out.data(),
                         out.size(), logits.data(), v);
    out.push_back(smp.sample(logits.data(), v));
    in = {out.back()};
  }
  return out;
}

} // namespace

TEST_CASE("a logit bias and penalties adjust each sequence's rows for its "
          "own tokens in batches and across stages and with a draft while "
          "its log-probabilities stay the model's",
          "[workload][sampling]") {
  fixture f;
  const std::vector<std::vector<std::int32_t>> ps{prompts()[0],
                                                  prompts()[2]};
  const std::size_t n = 24;
  auto plain = f.run({0, 4}, ps, n, 0.0f);
  REQUIRE(plain.error.empty());
  // Penalties on repeats, sequence 0's first token banned and a token
  // neither sequence chose favoured.
  std::int32_t favoured = 0;
  while (std::count(plain.tokens[0].begin(), plain.tokens[0].end(), favoured)
         + std::count(plain.tokens[1].begin(), plain.tokens[1].end(),
                      favoured)
         > 0)
    ++favoured;
  const std::int32_t banned = plain.tokens[0][0];
  model::sampler_params adj;
  adj.frequency_penalty = 0.75f;
  adj.presence_penalty = 0.5f;
  adj.repetition_penalty = 1.25f; // (the prompt's tokens too)
  adj.min_p = 0.05f;
  adj.bias_ids = {std::min(banned, favoured), std::max(banned, favoured)};
  adj.bias_values = banned < favoured ? std::vector<float>{-100.0f, 1.5f}
                                      : std::vector<float>{1.5f, -100.0f};
  for (float temperature : {0.0f, 0.8f}) {
    adj.temperature = temperature;
    adj.top_k = 40;
    adj.top_p = 0.95f;
    std::vector<std::vector<std::int32_t>> expected(ps.size());
    std::vector<std::vector<std::vector<float>>> raw(ps.size());
    for (std::size_t q = 0; q < ps.size(); ++q) {
      auto pq = adj;
      pq.seed = 5 + q; // a job seeds sequence q with seed + q
      expected[q] = adjusted_alone(f, ps[q], n, pq, raw[q]);
      CHECK(std::find(expected[q].begin(), expected[q].end(), banned)
            == expected[q].end());
    }
    if (temperature == 0.0f) { // the adjustments matter here
      CHECK(expected[0] != plain.tokens[0]);
      CHECK(expected[1] != plain.tokens[1]);
    }
    struct run_case {
      const char* name;
      std::vector<std::uint32_t> bounds;
      bool draft;
    };
    for (const auto& c : {run_case{"one stage, batched", {0, 4}, false},
                          run_case{"two stages", {0, 2, 4}, false},
                          run_case{"with a draft", {0, 2, 4}, true}}) {
      INFO(c.name << ", temperature " << temperature);
      const auto cpu = f.device_index("cpu");
      auto stages = f.pipeline(c.bounds, {cpu, cpu});
      std::vector<caf::actor> draft;
      auto j = f.job(1, stages, ps, n, temperature, 5);
      j.sampling = adj;
      j.sampling.seed = 5;
      j.keep_logits = false;
      j.logprobs = 2;
      if (c.draft) {
        draft = shards_of(f, f.model, {0, 4});
        j.draft_stages = draft;
        j.draft_n_embd = f.model->hparams().n_embd;
        j.draft_tokens = 3;
      }
      auto lps = std::make_shared<
        std::vector<std::vector<model::token_logprobs>>>(ps.size());
      j.on_token = [lps](std::uint32_t seq, std::int32_t, lp_ptr lp) {
        REQUIRE(lp != nullptr);
        (*lps)[seq].push_back(*lp);
      };
      auto r = workload::run_job(*f.sys, std::move(j));
      if (c.draft)
        f.stop(draft);
      f.stop(stages);
      REQUIRE(r.error.empty());
      if (c.draft) {
        // The model is its own draft, and proposes from rows adjusted as
        // its verifying rows are: every proposal is kept.
        CHECK(r.drafted > 0);
        CHECK(r.accepted == r.drafted);
      }
      if (c.draft && temperature > 0.0f) {
        // Speculative sampling draws other numbers: the tokens are
        // distributed as the adjusted rows say, not the same draws. The
        // banned token never comes.
        for (auto& t : r.tokens)
          CHECK(std::find(t.begin(), t.end(), banned) == t.end());
        continue;
      }
      for (std::size_t q = 0; q < ps.size(); ++q) {
        INFO("sequence " << q);
        CHECK(r.tokens[q] == expected[q]);
        REQUIRE((*lps)[q].size() == r.tokens[q].size());
        // The model's own log-probabilities: of the raw rows.
        for (std::size_t i = 0; i < r.tokens[q].size(); ++i) {
          auto want = model::logprobs_of(raw[q][i].data(), raw[q][i].size(),
                                         r.tokens[q][i], 2);
          CHECK((*lps)[q][i].logprob == want.logprob);
          CHECK((*lps)[q][i].top_ids == want.top_ids);
        }
      }
    }
  }
}

TEST_CASE("in JSON mode each sequence's text stays a prefix of one JSON "
          "object and ends when the object closes",
          "[workload][sampling][json]") {
  fixture f;
  const auto tok = model::tokenizer::from_gguf(f.model->file());
  const auto vocab = model::vocab_bytes_of(tok, f.model->hparams().n_vocab);
  const std::vector<std::vector<std::int32_t>> ps{prompts()[0],
                                                  prompts()[2]};
  auto text_of = [&](const std::vector<std::int32_t>& ids) {
    std::string t;
    for (auto id : ids)
      if (tok.eog_ids().count(id) == 0)
        t += vocab->bytes[static_cast<std::size_t>(id)];
    return t;
  };
  // Without it, the model's text is no JSON.
  auto plain = f.run({0, 4}, ps, 48, 0.0f);
  REQUIRE(plain.error.empty());
  {
    model::json_prefix p;
    CHECK_FALSE(p.feed(text_of(plain.tokens[0])));
  }
  const auto cpu = f.device_index("cpu");
  std::size_t whole = 0;
  for (float temperature : {0.0f, 0.9f}) {
    for (bool draft : {false, true}) {
      INFO("temperature " << temperature << (draft ? ", a draft" : ""));
      auto stages = f.pipeline({0, 2, 4}, {cpu, cpu});
      std::vector<caf::actor> drafts;
      auto j = f.job(1, stages, ps, 48, temperature, 5);
      j.sampling.json = true;
      j.sampling.frequency_penalty = 0.25f; // (with an adjustment too)
      j.vocab = vocab;
      j.eog = tok.eog_ids();
      j.keep_logits = false;
      if (draft) {
        drafts = shards_of(f, f.model, {0, 4});
        j.draft_stages = drafts;
        j.draft_n_embd = f.model->hparams().n_embd;
        j.draft_tokens = 3;
      }
      auto r = workload::run_job(*f.sys, std::move(j));
      if (draft)
        f.stop(drafts);
      f.stop(stages);
      REQUIRE(r.error.empty());
      if (draft) { // the model as its own draft, masked as it is
        CHECK(r.drafted > 0);
        CHECK(r.accepted == r.drafted);
      }
      for (std::size_t q = 0; q < ps.size(); ++q) {
        const auto& ids = r.tokens[q];
        REQUIRE(!ids.empty());
        const auto text = text_of(ids);
        INFO("sequence " << q << ": " << text);
        model::json_prefix p;
        CHECK(p.feed(text));
        // It ended at an end-of-generation token only once the object was
        // whole, and then it parses as one.
        const bool ended = tok.eog_ids().count(ids.back()) != 0;
        CHECK(ended == p.complete());
        if (ended) {
          ++whole;
          auto doc = nlohmann::json::parse(text, nullptr, false);
          CHECK(doc.is_object());
        }
      }
    }
  }
  // (Some object closed within 48 tokens: the end is reached too.)
  CHECK(whole > 0);
}

TEST_CASE("speculative sampling: a draft that is the model keeps every "
          "proposal, a seed gives the same tokens again",
          "[workload][speculative]") {
  // Temperature 0.8: the draft draws its proposals, the model keeps each
  // with probability min(1, p/q) (core/model/sampler.hpp; sampler_tests
  // checks that the tokens are distributed exactly as p). Here: the
  // rounds line each proposal up with the row the model read it in (a
  // draft that is the model has q = p there, bit for bit, so every
  // proposal is kept; one row off and they would differ), a seed repeats
  // its tokens, and rows returned whole or as candidates draw the same.
  fixture f;
  auto other = other_draft(f);
  const auto cpu = f.device_index("cpu");
  const std::vector<std::uint32_t> bounds{0, 2, 4};
  const std::vector<std::vector<std::int32_t>> ps{prompts()[0],
                                                  prompts()[2]};
  auto plain_stages = f.pipeline(bounds, {cpu, cpu});
  auto plain = workload::run_job(*f.sys,
                                 f.job(1, plain_stages, ps, 24, 0.8f, 5));
  f.stop(plain_stages);
  REQUIRE(plain.error.empty());
  for (auto& d : std::vector<draft_case>{{"the model itself", f.model,
                                          {0, 2, 4}},
                                         {"another model", other, {0, 2}}}) {
    std::vector<std::vector<std::int32_t>> first;
    for (bool keep_logits : {true, false}) {
      for (int again = 0; again < 2; ++again) {
        INFO("draft: " << d.name << (keep_logits ? ", whole rows"
                                                 : ", candidates")
                       << (again ? ", again" : ""));
        auto stages = f.pipeline(bounds, {cpu, cpu});
        auto draft = shards_of(f, d.m, d.bounds);
        auto j = f.job(1, stages, ps, 24, 0.8f, 5);
        j.draft_stages = draft;
        j.draft_n_embd = d.m->hparams().n_embd;
        j.draft_tokens = 4;
        j.keep_logits = keep_logits;
        auto r = workload::run_job(*f.sys, std::move(j));
        f.stop(draft);
        f.stop(stages);
        REQUIRE(r.error.empty());
        REQUIRE(r.tokens.size() == ps.size());
        CHECK(r.drafted > 0);
        if (d.m == f.model)
          CHECK(r.accepted == r.drafted);
        else
          CHECK(r.accepted < r.drafted);
        for (std::size_t q = 0; q < ps.size(); ++q) {
          REQUIRE(!r.tokens[q].empty());
          // The first token is drawn from the prompt's logits before any
          // round: the plain run's first draw.
          CHECK(r.tokens[q][0] == plain.tokens[q][0]);
          CHECK(r.tokens[q].size() == 24); // (no end-of-generation ids)
          for (auto t : r.tokens[q])
            CHECK((t >= 0 && t < static_cast<std::int32_t>(
                                   f.model->hparams().n_vocab)));
        }
        CHECK(r.generated_tokens
              == r.tokens[0].size() + r.tokens[1].size());
        if (first.empty())
          first = r.tokens;
        else // the same seed: the same tokens, whole rows or candidates
          CHECK(r.tokens == first);
      }
    }
  }
}

namespace {

/// Runs `j` until `at` tokens are out, then pauses it for a handoff
/// (handoff_atom) and ends it there (commit): what it handed over.
job_handoff pause_for_handoff(fixture& f, workload::job_setup j, int at) {
  auto count = std::make_shared<std::atomic<int>>(0);
  j.on_token = [count](std::uint32_t, std::int32_t, lp_ptr) { ++*count; };
  auto job = workload::spawn_job(*f.sys, std::move(j));
  caf::anon_send(job, run_atom::value); // its answer: nobody's
  for (int i = 0; i < 6000 && *count < at; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(*count >= at);
  caf::scoped_actor self{*f.sys};
  job_handoff h;
  self->request(job, std::chrono::seconds(60), handoff_atom::value)
    .receive([&](job_handoff& x) { h = std::move(x); },
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  // Paused: a second handoff is refused, no token comes meanwhile.
  auto paused_at = count->load();
  self->request(job, std::chrono::seconds(10), handoff_atom::value)
    .receive([](job_handoff&) { FAIL("a paused job handed over twice"); },
             [](caf::error& e) {
               CHECK(to_string(e).find("cannot be handed over now")
                     != std::string::npos);
             });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(count->load() == paused_at);
  self->send(job, handoff_atom::value, true);
  self->wait_for(job);
  return h;
}

/// Sets `j` (the next coordinator's job) to go on from handoff `h`.
void resume_from(workload::job_setup& j, const job_handoff& h,
                 std::string why) {
  j.generated = h.tokens;
  j.generated_draws = h.draws;
  j.resident = h.pos;
  j.stage_job = h.stage_job;
  j.rewind_first = h.rewind;
  j.resumed_after = std::move(why);
}

} // namespace

TEST_CASE("a job handed over at a token boundary goes on in another job on "
          "the same stages, nothing re-fed, the tokens of an uninterrupted "
          "run",
          "[workload][handoff]") {
  fixture f;
  f.n_ctx = 1024;
  // Three sequences at temperature 0.8 (the samplers carry over through
  // the tokens handed over), one with a prompt longer than a step.
  std::vector<std::int32_t> long_prompt(700);
  for (std::size_t i = 0; i < long_prompt.size(); ++i)
    long_prompt[i] = static_cast<std::int32_t>((31 * i + 4) % 400);
  const std::vector<std::vector<std::int32_t>> ps{
    {1, 17, 42, 99, 5}, {3, 8, 250}, long_prompt};
  auto reference = f.run({0, 2, 4}, ps, 30, 0.8f, 21);
  REQUIRE(reference.error.empty());
  for (int at : {1, 12, 45}) {
    CAPTURE(at);
    auto stages = f.pipeline({0, 2, 4});
    auto h = pause_for_handoff(f, f.job(70, stages, ps, 30, 0.8f, 21), at);
    CHECK(h.stage_job == 70);
    CHECK(h.stages == stages);
    CHECK_FALSE(h.rewind);
    REQUIRE(h.tokens.size() == 3);
    REQUIRE(h.pos.size() == 3);
    std::uint64_t held = 0, had = 0;
    for (std::size_t s = 0; s < 3; ++s) {
      CAPTURE(s);
      had += h.tokens[s].size();
      // Each sequence's prompt and tokens, all but the last (sampled,
      // not read yet): or a prompt still being read, or one that ended.
      if (!h.tokens[s].empty() && h.tokens[s].size() < 30)
        CHECK(h.pos[s] == ps[s].size() + h.tokens[s].size() - 1);
      else if (h.tokens[s].empty())
        CHECK(h.pos[s] < ps[s].size());
      if (h.tokens[s].size() < 30)
        held += h.pos[s];
    }
    // The other coordinator's job: another id, the stages' caches under
    // the first one's.
    auto j = f.job(9, stages, ps, 30, 0.8f, 21);
    resume_from(j, h, "coordinator n1 stopped: handed over");
    auto r = workload::run_job(*f.sys, std::move(j));
    f.stop(stages);
    INFO(r.error);
    REQUIRE(r.error.empty());
    CHECK(r.tokens == reference.tokens);
    CHECK(r.generated_tokens == 3 * 30 - had);
    REQUIRE(r.recoveries.size() == 1);
    CHECK(r.recoveries[0].reason == "coordinator n1 stopped: handed over");
    CHECK(r.recoveries[0].replayed == 0);
    CHECK(r.recoveries[0].moved_positions == held);
  }
  SECTION("caches that do not hold what the job says are refused") {
    auto stages = f.pipeline({0, 4});
    auto j = f.job(11, stages, {{1, 2, 3}}, 8, 0.0f);
    j.generated = {{4, 5}};
    j.resident = {5}; // prompt 3 + 2 tokens: at most 4 positions are held
    auto r = workload::run_job(*f.sys, j);
    CHECK(r.error.find("its caches hold 5 positions, it has 5 tokens")
          != std::string::npos);
    j.resident = {4, 1};
    r = workload::run_job(*f.sys, j);
    CHECK(r.error.find("the caches of 2 sequences") != std::string::npos);
    // The stages hold nothing for job 11: the first step says so.
    j.resident = {4};
    r = workload::run_job(*f.sys, j);
    CHECK(r.error.find("starts at position 4") != std::string::npos);
    f.stop(stages);
  }
}

TEST_CASE("a speculating job handed over goes on without its draft: the "
          "stages forget the proposals they did not keep",
          "[workload][handoff][speculative]") {
  fixture f;
  // A draft of another seed (it rarely agrees): the stages hold rows of
  // rejected proposals past each sequence's position when it pauses.
  auto other = other_draft(f);
  const auto cpu = f.device_index("cpu");
  const std::vector<std::vector<std::int32_t>> ps{prompts()[0], prompts()[2]};
  auto plain_stages = f.pipeline({0, 2, 4}, {cpu, cpu});
  auto plain = workload::run_job(*f.sys, f.job(1, plain_stages, ps, 24, 0.0f));
  f.stop(plain_stages);
  REQUIRE(plain.error.empty());
  auto stages = f.pipeline({0, 2, 4}, {cpu, cpu});
  auto draft = shards_of(f, other, {0, 2});
  auto j = f.job(5, stages, ps, 24, 0.0f);
  j.draft_stages = draft;
  j.draft_n_embd = other->hparams().n_embd;
  j.draft_tokens = 4;
  auto h = pause_for_handoff(f, std::move(j), 6);
  CHECK(h.rewind);
  // Held: the handed-over job's draft: its shard goes with its run.
  f.stop(draft, true);
  auto next = f.job(6, stages, ps, 24, 0.0f);
  resume_from(next, h, "handed over");
  auto r = workload::run_job(*f.sys, std::move(next));
  f.stop(stages);
  INFO(r.error);
  REQUIRE(r.error.empty());
  CHECK(r.tokens == plain.tokens);
  REQUIRE(r.recoveries.size() == 1);
  CHECK(r.recoveries[0].replayed == 0);
}

TEST_CASE("a sampled speculating job taken over or handed over goes on "
          "with the tokens of an uninterrupted run, its samplers skipping "
          "the numbers each round drew",
          "[workload][handoff][speculative]") {
  // Temperature 0.8: a round draws its proposals, a verdict on each and
  // the model's token, more numbers than the tokens it keeps. A job that
  // goes on from a sequence's tokens must skip exactly the numbers drawn
  // for them (on_settled's draws, not one a token) and read the last one
  // in its next round, as the first job would have. Two drafts: the model
  // itself (every proposal kept: rounds of 5 tokens, replicated whole) and
  // another model (none kept: each token from the residual).
  fixture f;
  const auto cpu = f.device_index("cpu");
  const std::vector<std::vector<std::int32_t>> ps{prompts()[0], prompts()[2]};
  const std::vector<std::uint32_t> bounds{0, 2, 4};
  for (auto& d : std::vector<draft_case>{{"the model itself", f.model,
                                          {0, 2, 4}},
                                         {"another model", other_draft(f),
                                          {0, 2}}}) {
    INFO("draft: " << d.name);
    const bool agrees = d.m == f.model;
    auto with_draft = [&](std::uint64_t id, std::vector<caf::actor> stages,
                          std::vector<caf::actor> draft) {
      auto j = f.job(id, std::move(stages), ps, 24, 0.8f, 5);
      j.draft_stages = std::move(draft);
      j.draft_n_embd = d.m->hparams().n_embd;
      j.draft_tokens = 4;
      return j;
    };
    // The uninterrupted run, and where each sequence's tokens were whole.
    struct settled_point {
      std::size_t tokens;
      std::uint64_t draws;
    };
    auto points = std::make_shared<std::vector<std::vector<settled_point>>>(
      ps.size());
    workload::job_result reference;
    {
      auto stages = f.pipeline(bounds, {cpu, cpu});
      auto draft = shards_of(f, d.m, d.bounds);
      auto j = with_draft(1, stages, draft);
      j.on_settled = [points](std::uint32_t s, std::size_t n,
                              std::uint64_t k) {
        (*points)[s].push_back({n, k});
      };
      reference = workload::run_job(*f.sys, std::move(j));
      f.stop(draft);
      f.stop(stages);
    }
    REQUIRE(reference.error.empty());
    CHECK((reference.accepted == reference.drafted) == agrees);
    for (std::size_t s = 0; s < ps.size(); ++s) {
      CAPTURE(s);
      auto& pts = (*points)[s];
      REQUIRE(pts.size() >= 4);
      REQUIRE(pts.back().tokens == reference.tokens[s].size());
      // The first token from the prompt (one number), then rounds: of 5
      // tokens drawn with 9 numbers, or of 1 drawn with 6.
      CHECK(pts[0].tokens == 1);
      CHECK(pts[0].draws == 1);
      CHECK(pts[2].tokens == (agrees ? 11u : 3u));
      CHECK(pts[2].draws == (agrees ? 19u : 13u));
    }
    auto resume = [&](workload::job_setup& j, std::size_t at, bool draws) {
      for (std::size_t s = 0; s < ps.size(); ++s) {
        // (sequences lag unevenly)
        const auto& p = (*points)[s][s == 0 ? at : at - 1];
        j.generated.emplace_back(reference.tokens[s].begin(),
                                 reference.tokens[s].begin()
                                   + static_cast<std::ptrdiff_t>(p.tokens));
        if (draws)
          j.generated_draws.push_back(p.draws);
      }
      j.resumed_after = "coordinator n1 is dead";
    };
    // Taken over from replicated tokens: re-fed, the same tokens.
    for (std::size_t at : {std::size_t{2}, std::size_t{3}}) {
      CAPTURE(at);
      auto stages = f.pipeline(bounds, {cpu, cpu});
      auto draft = shards_of(f, d.m, d.bounds);
      auto j = with_draft(2, stages, draft);
      resume(j, at, true);
      auto r = workload::run_job(*f.sys, std::move(j));
      f.stop(draft);
      f.stop(stages);
      INFO(r.error);
      REQUIRE(r.error.empty());
      CHECK(r.tokens == reference.tokens);
      CHECK(r.drafted > 0);
    }
    {
      // Skipping one number a token instead (what a takeover did before)
      // draws other tokens: the draws are what makes them the same.
      auto stages = f.pipeline(bounds, {cpu, cpu});
      auto draft = shards_of(f, d.m, d.bounds);
      auto j = with_draft(3, stages, draft);
      resume(j, 2, false);
      auto r = workload::run_job(*f.sys, std::move(j));
      f.stop(draft);
      f.stop(stages);
      REQUIRE(r.error.empty());
      CHECK(r.tokens != reference.tokens);
    }
    // Handed over at a token boundary (a round under way dropped, its
    // numbers drawn again): nothing re-fed, the same tokens.
    for (int at : {3, 11}) {
      CAPTURE(at);
      auto stages = f.pipeline(bounds, {cpu, cpu});
      auto draft = shards_of(f, d.m, d.bounds);
      auto h = pause_for_handoff(f, with_draft(5, stages, draft), at);
      f.stop(draft, true);
      REQUIRE(h.draws.size() == ps.size());
      auto next_draft = shards_of(f, d.m, d.bounds);
      auto j = with_draft(6, stages, next_draft);
      resume_from(j, h, "handed over");
      auto r = workload::run_job(*f.sys, std::move(j));
      f.stop(next_draft);
      f.stop(stages);
      INFO(r.error);
      REQUIRE(r.error.empty());
      CHECK(r.tokens == reference.tokens);
      REQUIRE(r.recoveries.size() == 1);
      CHECK(r.recoveries[0].replayed == 0);
    }
  }
  // What a job resumes is checked: at most 2 x 4 + 1 numbers a token.
  auto stages = f.pipeline(bounds, {cpu, cpu});
  auto j = f.job(7, stages, ps, 24, 0.8f, 5);
  j.generated = {{5, 6}, {}};
  j.generated_draws = {19, 0};
  auto r = workload::run_job(*f.sys, j);
  CHECK(r.error.find("sequence 0 resumes after 19 draws of its sampler, "
                     "more than its 2 tokens take (18)")
        != std::string::npos);
  j.generated_draws = {3};
  r = workload::run_job(*f.sys, j);
  CHECK(r.error.find("the job resumes the draws of 1 sequences, it has 2")
        != std::string::npos);
  f.stop(stages, true);
}

TEST_CASE("a shard follows a new owner only when its owner hands it over",
          "[workload][handoff]") {
  fixture f;
  caf::scoped_actor self{*f.sys};
  auto shard = std::make_shared<caf::actor>();
  // (At least one argument after `self`: CAF 0.17 spawns a function
  // without one through a null pointer, UBSan.)
  auto next_owner = f.sys->spawn(
    [](caf::event_based_actor*, int) -> caf::behavior {
      return {[](int) {}};
    },
    0);
  // The owner hands the shard to `next_owner` when asked (its own request:
  // the shard sees it as the sender).
  auto owner = f.sys->spawn(
    [shard](caf::event_based_actor* me,
            const caf::actor& next_owner) -> caf::behavior {
      return {[=](int) -> caf::result<caf::ok_atom> {
        auto rp = me->make_response_promise<caf::ok_atom>();
        me->request(*shard, std::chrono::seconds(10), adopt_atom::value,
                    next_owner)
          .then([rp](caf::ok_atom) mutable { rp.deliver(caf::ok_atom::value); },
                [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      }};
    },
    next_owner);
  workload::shard_setup s;
  s.model = f.model;
  s.first = 0;
  s.last = 4;
  s.n_ctx = 64;
  const auto d = f.device_index("cpu");
  s.device = f.dev_actors[d];
  s.device_id = f.devs[d]->properties().id;
  s.node = "test";
  s.owner = owner;
  *shard = workload::spawn_shard(*f.sys, std::move(s));
  self->monitor(*shard);
  // Anyone else is refused, a delegate of the owner's too.
  self->request(*shard, std::chrono::seconds(10), adopt_atom::value,
                next_owner)
    .receive([](caf::ok_atom) { FAIL("a stranger took the shard over"); },
             [](caf::error& e) {
               CHECK(to_string(e).find("only its owner hands it over")
                     != std::string::npos);
             });
  self->request(owner, std::chrono::seconds(10), 1)
    .receive([](caf::ok_atom) {},
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  // Its first owner goes: the shard stays (it answers).
  self->send_exit(owner, caf::exit_reason::user_shutdown);
  self->wait_for(owner);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  bool answers = false;
  self->request(*shard, std::chrono::seconds(10), inspect_atom::value)
    .receive([&](actor_snapshot&) { answers = true; },
             [](caf::error& e) { FAIL(caf::to_string(e)); });
  CHECK(answers);
  // Its new owner goes: so does the shard.
  self->send_exit(next_owner, caf::exit_reason::user_shutdown);
  bool gone = false;
  self->receive([&](caf::down_msg& dm) { gone = dm.source == *shard; },
                caf::after(std::chrono::seconds(10)) >> [] {});
  CHECK(gone);
}

TEST_CASE("a backup refuses a handoff whose stages, sequences or recoveries "
          "do not add up, naming what",
          "[workload][handoff]") {
  fixture f;
  auto stages = f.pipeline({0, 2, 4});
  workload::job_request req;
  req.sequences = 2;
  req.n_gen = 10;
  const std::set<std::string> alive{"n2", "n3"};
  auto good = [&] {
    job_handoff h;
    h.origin = "n1";
    h.job = 4;
    h.stages = stages;
    h.nodes = {"n2", "n3"};
    h.devices = {"cpu:0", "cpu:0"};
    h.bounds = {0, 2, 4};
    h.tokens = {{5, 6}, {}};
    h.pos = {7, 3};
    h.draws = {2, 0};
    return h;
  };
  auto problem = [&](job_handoff h) {
    return workload::handoff_problem(h, req, "n3", alive);
  };
  CHECK(problem(good()).empty());
  auto most = good();
  most.draws[0] = 18;
  CHECK(problem(most).empty());
  struct bad_case {
    const char* what;
    std::function<void(job_handoff&)> change;
    const char* says;
  };
  const std::vector<bad_case> cases{
    {"no stage", [](job_handoff& h) { h.stages.clear(); },
     "its 0 stages do not match"},
    {"a node short", [](job_handoff& h) { h.nodes.pop_back(); },
     "stages do not match their nodes"},
    {"bounds short", [](job_handoff& h) { h.bounds.pop_back(); },
     "stages do not match their nodes, devices and layer bounds"},
    {"not from 0", [](job_handoff& h) { h.bounds = {1, 2, 4}; },
     "layer bounds"},
    {"an empty range", [](job_handoff& h) { h.bounds = {0, 2, 2}; },
     "stage 1 has no actor or no layers"},
    {"a null stage", [](job_handoff& h) { h.stages[0] = caf::actor{}; },
     "stage 0 has no actor"},
    {"a stage on the origin", [](job_handoff& h) { h.nodes[1] = "n1"; },
     "stage 1 is still on n1"},
    {"a stage on a dead node", [](job_handoff& h) { h.nodes[0] = "n9"; },
     "stage 0 is on n9, not an alive member"},
    {"a sequence short", [](job_handoff& h) { h.tokens.pop_back(); },
     "its sequences do not match the request"},
    {"positions short", [](job_handoff& h) { h.pos.pop_back(); },
     "its sequences do not match the request"},
    {"draws short", [](job_handoff& h) { h.draws.pop_back(); },
     "its sequences do not match the request"},
    // 2 tokens of 4 proposals a round: at most 2 x (4 + 4 + 1) numbers
    // (a sampler skips what a peer says, one by one).
    {"too many draws", [](job_handoff& h) { h.draws[0] = 19; },
     "sequence 0's sampler drew 19 numbers, more than its 2 tokens take"},
    {"draws without tokens", [](job_handoff& h) { h.draws[1] = 1; },
     "sequence 1's sampler drew 1 numbers"},
    {"too many tokens",
     [](job_handoff& h) { h.tokens[0].assign(11, 5); },
     "more tokens than the request allows"},
    {"too many recoveries",
     [](job_handoff& h) { h.recoveries.resize(max_replicated_recoveries + 1); },
     "too many recoveries"},
    {"two unfinished", [](job_handoff& h) { h.unfinished.resize(2); },
     "too many recoveries"},
  };
  for (auto& c : cases) {
    INFO(c.what);
    auto h = good();
    c.change(h);
    auto why = problem(h);
    CHECK(why.find(c.says) != std::string::npos);
  }
  // The receiving node itself may hold a stage (it is not in `alive`).
  auto here = good();
  here.nodes[0] = "n4";
  CHECK(workload::handoff_problem(here, req, "n4", alive).empty());
  f.stop(stages);
}

TEST_CASE("each token's log-probabilities are its row's log-softmax: from "
          "whole rows, from candidates and the stages' log-sum-exp, "
          "batched or speculative, the same numbers",
          "[workload][logprobs]") {
  fixture f;
  const auto cpu = f.device_index("cpu");
  // One stage: the two sequences go through it as one batch a step.
  const std::vector<std::uint32_t> bounds{0, 4};
  const std::vector<std::vector<std::int32_t>> ps{prompts()[0],
                                                  prompts()[2]};
  const auto n_vocab = f.model->hparams().n_vocab;
  using seen_t = std::vector<std::vector<model::token_logprobs>>;
  // Runs the job with 3 alternatives a token; its tokens' log-probabilities
  // as on_token got them, per sequence.
  auto run = [&](float temperature, bool keep_logits, bool draft,
                 workload::job_result& out) {
    auto stages = f.pipeline(bounds, {cpu});
    std::vector<caf::actor> draft_stages;
    auto j = f.job(1, stages, ps, 12, temperature, 5);
    j.keep_logits = keep_logits;
    j.logprobs = 3;
    if (draft) {
      draft_stages = shards_of(f, f.model, {0, 4});
      j.draft_stages = draft_stages;
      j.draft_n_embd = f.model->hparams().n_embd;
      j.draft_tokens = 3;
    }
    auto seen = std::make_shared<seen_t>(ps.size());
    j.on_token = [seen](std::uint32_t seq, std::int32_t,
                        const model::token_logprobs* lp) {
      REQUIRE(lp != nullptr);
      (*seen)[seq].push_back(*lp);
    };
    out = workload::run_job(*f.sys, std::move(j));
    f.stop(draft_stages);
    f.stop(stages);
    REQUIRE(out.error.empty());
    return *seen;
  };
  for (float temperature : {0.0f, 0.8f}) {
    INFO("temperature " << temperature);
    workload::job_result whole;
    auto reference = run(temperature, true, false, whole);
    for (std::size_t q = 0; q < ps.size(); ++q) {
      REQUIRE(reference[q].size() == whole.tokens[q].size());
      for (std::size_t i = 0; i < reference[q].size(); ++i) {
        auto& lp = reference[q][i];
        REQUIRE(lp.top_ids.size() == 3);
        CHECK(lp.logprob <= 0.0f);
        CHECK(lp.top_logprobs[0] >= lp.top_logprobs[1]);
        CHECK(lp.top_logprobs[1] >= lp.top_logprobs[2]);
        if (temperature == 0.0f) { // the chosen token is the best one
          CHECK(lp.top_ids[0] == whole.tokens[q][i]);
          CHECK(lp.top_logprobs[0] == lp.logprob);
        }
      }
      // The last token's, from the row the job kept: log-softmax's numbers.
      REQUIRE(whole.logits[q].size() == n_vocab);
      auto last = model::logprobs_of(whole.logits[q].data(), n_vocab,
                                     whole.tokens[q].back(), 3);
      CHECK(reference[q].back().logprob == last.logprob);
      CHECK(reference[q].back().top_ids == last.top_ids);
      double p = 0; // and they are probabilities
      for (std::uint32_t t = 0; t < n_vocab; ++t)
        p += std::exp(model::logprobs_of(whole.logits[q].data(), n_vocab,
                                         static_cast<std::int32_t>(t), 0)
                        .logprob);
      CHECK(p == Approx(1.0).epsilon(1e-4));
    }
    // Candidates and the stages' log-sum-exp: the same tokens, the same
    // numbers; so with a draft (its own model: every proposal kept, the
    // rows verified apart).
    for (bool draft : {false, true}) {
      INFO((draft ? "with a draft" : "candidates"));
      workload::job_result r;
      auto got = run(temperature, false, draft, r);
      if (!draft || temperature == 0.0f) { // (a draft draws other numbers)
        CHECK(r.tokens == whole.tokens);
        for (std::size_t q = 0; q < ps.size(); ++q)
          for (std::size_t i = 0; i < got[q].size(); ++i) {
            INFO("sequence " << q << " token " << i);
            CHECK(got[q][i].logprob == Approx(reference[q][i].logprob)
                                         .epsilon(1e-6));
            CHECK(got[q][i].top_ids == reference[q][i].top_ids);
          }
      }
      for (std::size_t q = 0; q < ps.size(); ++q)
        CHECK(got[q].size() == r.tokens[q].size());
    }
  }
}

TEST_CASE("a prompt's scores are each prompt row's log-softmax at the "
          "next prompt token, sent once per sequence before its first "
          "token, and change no token",
          "[workload][logprobs]") {
  fixture f;
  const auto n_vocab = f.model->hparams().n_vocab;
  // A prompt longer than the last stage's rows of logits at once (scored
  // in pieces), one short one, and a copy of the long one (its prompt read
  // once: the copy gets the same scores).
  std::vector<std::int32_t> longp{1};
  for (int i = 0; i < 90; ++i)
    longp.push_back(static_cast<std::int32_t>(3 + (i * 37) % 390));
  const std::vector<std::vector<std::int32_t>> ps{longp, {1, 200, 3},
                                                  longp};
  const std::vector<std::uint32_t> bounds{0, 2, 4};
  const std::size_t top = 3;
  // The reference: each prefix's last row of logits, alone (a job that
  // generates nothing keeps them), its log-softmax at the next token.
  auto stages = f.pipeline(bounds);
  std::vector<std::vector<model::token_logprobs>> want(ps.size());
  std::uint64_t id = 100;
  for (std::size_t q = 0; q < 2; ++q)
    for (std::size_t i = 0; i + 1 < ps[q].size(); ++i) {
      std::vector<std::int32_t> prefix(ps[q].begin(), ps[q].begin() + i + 1);
      auto j = f.job(++id, stages, {prefix}, 0, 0.0f);
      j.keep_logits = true;
      auto r = workload::run_job(*f.sys, std::move(j));
      REQUIRE(r.error.empty());
      REQUIRE(r.tokens[0].empty());
      REQUIRE(r.logits[0].size() == n_vocab);
      want[q].push_back(model::logprobs_of(r.logits[0].data(), n_vocab,
                                           ps[q][i + 1], top));
    }
  want[2] = want[0];
  // Without scores: the tokens to compare with.
  auto plain = workload::run_job(*f.sys, f.job(1, stages, ps, 6, 0.0f));
  REQUIRE(plain.error.empty());
  // n_gen 6, 0 (the prompt alone), and 6 with a draft (its own model:
  // speculative rounds after the prompt; the prompts read one by one).
  for (std::uint32_t n_gen : {6u, 0u, 7u}) {
    const bool draft = n_gen == 7u;
    if (draft)
      n_gen = 6;
    INFO("n_gen " << n_gen << (draft ? ", with a draft" : ""));
    struct seen_t {
      std::vector<std::vector<model::token_logprobs>> scores;
      std::vector<int> times;       // on_prompt_scores calls per sequence
      std::vector<bool> early;      // before the sequence's first token
      std::vector<std::size_t> tokens;
    };
    auto seen = std::make_shared<seen_t>();
    seen->scores.resize(ps.size());
    seen->times.assign(ps.size(), 0);
    seen->early.assign(ps.size(), true);
    seen->tokens.assign(ps.size(), 0);
    auto j = f.job(++id, stages, ps, n_gen, 0.0f);
    j.keep_logits = false;
    j.logprobs = static_cast<std::int32_t>(top);
    j.prompt_logprobs = true;
    j.on_prompt_scores = [seen](std::uint32_t seq,
                                const std::vector<model::token_logprobs>& s) {
      ++seen->times[seq];
      seen->early[seq] = seen->tokens[seq] == 0;
      seen->scores[seq] = s;
    };
    j.on_token = [seen](std::uint32_t seq, std::int32_t,
                        const model::token_logprobs*) {
      ++seen->tokens[seq];
    };
    std::vector<caf::actor> draft_stages;
    if (draft) {
      draft_stages = shards_of(f, f.model, {0, 4});
      j.draft_stages = draft_stages;
      j.draft_n_embd = f.model->hparams().n_embd;
      j.draft_tokens = 3;
    }
    auto r = workload::run_job(*f.sys, std::move(j));
    f.stop(draft_stages);
    REQUIRE(r.error.empty());
    if (draft)
      CHECK(r.accepted > 0);
    for (std::size_t q = 0; q < ps.size(); ++q) {
      INFO("sequence " << q);
      CHECK(seen->times[q] == 1);
      CHECK(seen->early[q]);
      if (n_gen > 0)
        CHECK(r.tokens[q] == plain.tokens[q]);
      else
        CHECK(r.tokens[q].empty());
      REQUIRE(seen->scores[q].size() == ps[q].size() - 1);
      for (std::size_t i = 0; i < want[q].size(); ++i) {
        INFO("prompt token " << i + 1);
        auto& got = seen->scores[q][i];
        // Up to a forward's rows computed with other rows: a K or V value
        // one f32 bit off may round to another f16 (the cache's type),
        // which moves a logit by ~1e-3 here; a wrong row or token is off
        // by far more.
        CHECK(got.logprob == Approx(want[q][i].logprob).margin(3e-3));
        CHECK(got.logprob <= 0.0f);
        // Its rank in the vocabulary: the prefix alone's, up to the
        // near-ties those last bits may swap.
        CHECK(got.rank >= 1);
        CHECK(static_cast<double>(got.rank)
              == Approx(want[q][i].rank).margin(2));
        REQUIRE(got.top_ids.size() == top);
        CHECK(got.top_ids == want[q][i].top_ids);
        CHECK(got.top_logprobs[0] >= got.top_logprobs[1]);
      }
    }
    REQUIRE(seen->scores[2].size() == seen->scores[0].size());
    for (std::size_t i = 0; i < seen->scores[0].size(); ++i) {
      CHECK(seen->scores[2][i].logprob == seen->scores[0][i].logprob);
      CHECK(seen->scores[2][i].top_ids == seen->scores[0][i].top_ids);
    }
  }
  f.stop(stages);
}

TEST_CASE("a backup refuses a replica whose model, sequences or line of "
          "copies do not add up, naming what",
          "[workload][backup]") {
  auto good = [] {
    job_replica r;
    r.origin = "n2";
    r.job = 3;
    r.request.sequences = 2;
    r.request.n_gen = 10;
    r.model_sha256 = std::string(64, 'a');
    r.model_size = 4096;
    r.tokens = {{5, 6}, {}};
    r.draws = {2, 0};
    r.lineage = {"n1:4"};
    return r;
  };
  CHECK(workload::replica_problem(good(), "n3").empty());
  auto no_line = good();
  no_line.lineage.clear(); // a job that started on its origin
  CHECK(workload::replica_problem(no_line, "n3").empty());
  struct bad_case {
    const char* what;
    std::function<void(job_replica&)> change;
    const char* says;
  };
  const std::vector<bad_case> cases{
    {"from itself", [](job_replica& r) { r.origin = "n3"; },
     "the origin must be another node"},
    {"no origin", [](job_replica& r) { r.origin.clear(); },
     "the origin must be another node"},
    {"a short digest", [](job_replica& r) { r.model_sha256 = "abc"; },
     "the model's digest or size is malformed"},
    {"no size", [](job_replica& r) { r.model_size = 0; },
     "the model's digest or size is malformed"},
    {"a sequence short", [](job_replica& r) { r.tokens.pop_back(); },
     "the sequences do not match the request"},
    {"too many tokens", [](job_replica& r) { r.tokens[0].assign(11, 5); },
     "a sequence holds more tokens than -n"},
    {"too many draws", [](job_replica& r) { r.draws[1] = 1; },
     "sequence 1's sampler drew more numbers than its tokens take"},
    {"a bad draft digest", [](job_replica& r) { r.draft_sha256 = "x"; },
     "the draft model's digest or size is malformed"},
    {"a key without an id", [](job_replica& r) { r.lineage = {"n1"}; },
     "the job's key has no ':' (NODE:ID)"},
    {"a key with a word for an id",
     [](job_replica& r) { r.lineage = {"n1:x"}; },
     "the job's key has no decimal id"},
    {"too long a line",
     [](job_replica& r) {
       r.lineage.assign(workload::max_job_lineage + 1, "n1:1");
     },
     "the job's line of copies names more than 16"},
  };
  for (auto& c : cases) {
    INFO(c.what);
    auto r = good();
    c.change(r);
    CHECK(workload::replica_problem(r, "n3").find(c.says)
          != std::string::npos);
  }
}
