// A stage's memory as placement counts it (load_model_spec ->
// problem::stage_memory) equals model::device_stage_memory and what a
// device stage really allocates, measured by the device's own accounting
// (memory().used_by_exo), for every layer range of generated test models:
// weights, scratch for a shard's batch, logits on the last stage, and the
// KV caches of two sequences.
#include <catch2/catch.hpp>

#include "core/placement/model_spec.hpp"
#include "core/placement/problem.hpp"
#include "backends/factory/factory.hpp"
#include "core/model/device_stage.hpp"
#include "core/model/llama_model.hpp"
#include "core/model/test_model.hpp"

#include <filesystem>
#include <string>
#include <vector>
#include <unistd.h>

using namespace exo;

namespace {

backend::device& sim_device() {
  static backend::registry reg = [] {
    backend::factory_options opts;
    opts.use_environment = false;
    opts.include = {"sim"};
    opts.sim.devices = {{"a100-40g", ""}};
    auto r = backend::registry::create(opts);
    REQUIRE(r.ok());
    return std::move(*r);
  }();
  for (auto& d : reg.devices())
    if (d->properties().id.rfind("sim", 0) == 0)
      return *d;
  FAIL("no simulated device");
  throw std::logic_error("unreachable");
}

struct temp_model {
  std::string path;
  explicit temp_model(const model::test_model_options& o,
                      const std::string& tag) {
    path = (std::filesystem::temp_directory_path()
            / ("exo-stage-memory-" + std::to_string(::getpid()) + "-" + tag
               + ".gguf"))
             .string();
    model::make_test_model(o, path);
  }
  ~temp_model() { std::filesystem::remove(path); }
};

} // namespace

TEST_CASE("placement counts exactly what a shard's device stage allocates") {
  struct variant {
    const char* tag;
    model::tensor_type type;
    bool tied;
    const char* arch = "llama";
    std::uint32_t head_dim = 0;
    bool q4_k_m = false; ///< llama.cpp's Q4_K_M mix, 256 wide
  };
  const variant variants[] = {
    {"f32", model::tensor_type::f32, false},
    {"q8", model::tensor_type::q8_0, false},
    {"f16-tied", model::tensor_type::f16, true},
    {"qwen2", model::tensor_type::f32, false, "qwen2"}, // Q/K/V biases
    {"qwen3", model::tensor_type::q8_0, true, "qwen3", 32}, // Q/K norms
    // Q4_K and Q6_K are held as stored (every backend runs them).
    {"q4_k_m", model::tensor_type::q4_k, false, "llama", 0, true}};
  // A context of whole 32-position blocks: a paged cache at its fullest
  // holds exactly its context; one of 40: its last block whole, as
  // placement counts it (problem::request::kv_block_positions).
  const std::uint32_t sequences = 2;
  auto& dev = sim_device();
  for (const auto& v : variants) {
    INFO("model " << v.tag);
    model::test_model_options o;
    o.layers = 4;
    o.dim = 64;
    o.ff = 128;
    o.heads = 4;
    o.kv_heads = 2;
    o.vocab = 400;
    o.type = v.type;
    o.tied = v.tied;
    o.arch = v.arch;
    o.head_dim = v.head_dim;
    if (v.q4_k_m) {
      o.dim = 256;
      o.ff = 512;
      o.mix = model::file_type::mix::q4_k_m;
    }
    temp_model tm(o, v.tag);
    auto spec = placement::load_model_spec(tm.path, 64);
    REQUIRE(spec.layers.size() == 4);
    {
      // A layer's weights are its tensors' bytes in the file.
      auto f = model::gguf_file::open(tm.path);
      for (std::uint32_t l = 0; l + 1 < 4; ++l) {
        std::uint64_t file_bytes = 0;
        const auto prefix = "blk." + std::to_string(l) + ".";
        for (const auto& t : f->tensors())
          if (t.name.rfind(prefix, 0) == 0)
            file_bytes += t.n_bytes;
        CHECK(spec.layers[l].weight_bytes == file_bytes);
      }
    }
    placement::problem p;
    p.layers = spec.layers;
    p.stage_memory_extra = spec.extras;
    p.request.sequences = sequences;
    p.request.kv_block_positions = placement::stage_kv_block_positions;
    // The token embedding is not on the device: nothing extra on the first.
    CHECK(spec.extras.first_stage == 0);
    CHECK(spec.extras.every_stage > 0);
    // A row of logits for each sequence a step may carry (batched
    // decoding: 32 for this 400-token vocabulary).
    CHECK(model::batch_sequences_for(64, 400) == 32);
    // A 128K vocabulary: 8 whole rows fit a message, 32 rows of 40
    // candidates (or of the greedy one) do; the last stage's buffer holds
    // the rows of a step of candidates.
    CHECK(model::batch_sequences_for(2048, 128256) == 8);
    CHECK(model::batch_sequences_for(2048, 128256,
                                     model::default_upload_chunk_bytes, 40)
          == 32);
    CHECK(model::batch_sequences_for(2048, 128256,
                                     model::default_upload_chunk_bytes, 1)
          == 32);
    model::llama_hparams big;
    big.n_embd = 2048;
    big.n_vocab = 128256;
    CHECK(model::shard_stage_options(big).max_logit_rows == 32);
    CHECK(spec.extras.last_stage == 32u * 400u * 4);

    auto m = model::llama_model::load(tm.path);
    const auto opts = model::shard_stage_options(m->hparams());
    CHECK(opts.max_tokens == model::batch_tokens_for(64));
    struct stage_case {
      std::uint32_t n_ctx, first, last;
    };
    std::vector<stage_case> cases;
    for (std::uint32_t first = 0; first < 4; ++first)
      for (std::uint32_t last = first + 1; last <= 4; ++last)
        cases.push_back({64, first, last});
    cases.push_back({40, 0, 4}); // the whole model shows the rounding
    for (const auto& [n_ctx, first, last] : cases) {
      INFO("context " << n_ctx << ", layers [" << first << ", " << last
                      << ")");
      p.request.context_length = n_ctx;
      const std::uint64_t held = p.request.kv_positions();
      CHECK(held == 64); // 40 positions take 2 blocks
      auto want = model::device_stage_memory(*m, first, last, opts);
      CHECK(p.stage_memory(first, last) == want.total(held, sequences));
      model::backend_ops ops(dev);
      const auto before = dev.memory().used_by_exo;
      {
        auto st = model::device_stage::create(m, first, last, ops, opts);
        REQUIRE(st.ok());
        CHECK((*st)->weight_bytes() == want.weight_bytes());
        CHECK(dev.memory().used_by_exo - before
              == want.weight_bytes() + want.working_bytes());
        // Every sequence at its fullest: a paged stage (the sim device
        // reads blocks) takes its blocks as positions come.
        for (std::uint32_t s = 0; s < sequences; ++s) {
          auto c = (*st)->new_cache(n_ctx);
          REQUIRE(c.ok());
          std::vector<std::int32_t> toks(n_ctx);
          for (std::uint32_t i = 0; i < n_ctx; ++i)
            toks[i] = static_cast<std::int32_t>((7 * i + s) % 400);
          std::vector<float> x(std::size_t{n_ctx} * m->hparams().n_embd,
                               0.25f),
            logits(m->hparams().n_vocab);
          if (first == 0)
            REQUIRE((*st)->embed(toks.data(), n_ctx, x.data()).ok());
          REQUIRE((*st)->forward(*c, 0, x.data(), n_ctx, logits.data())
                    .ok());
        }
        CHECK((*st)->paged());
        CHECK((*st)->cache_bytes()
              == want.kv_bytes_per_token * held * sequences);
        // Everything the stage holds, by the device's own accounting.
        CHECK(dev.memory().used_by_exo - before
              == p.stage_memory(first, last));
      }
      CHECK(dev.memory().used_by_exo == before);
    }
  }
}

TEST_CASE("a stage's memory refuses a range outside the model") {
  model::test_model_options o;
  temp_model tm(o, "range");
  auto m = model::llama_model::load(tm.path);
  const auto opts = model::shard_stage_options(m->hparams());
  CHECK_THROWS_AS(model::device_stage_memory(*m, 1, 1, opts),
                  model::model_error);
  CHECK_THROWS_AS(model::device_stage_memory(*m, 0, 3, opts),
                  model::model_error);
}
