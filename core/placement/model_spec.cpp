#include "core/placement/model_spec.hpp"

#include "core/model/device_stage.hpp"
#include "core/gguf/gguf.hpp"
#include "core/model/llama_hparams.hpp"

#include <exception>

namespace exo::placement {

static_assert(model::device_stage_options{}.kv_block_positions
                == stage_kv_block_positions,
              "placement counts KV in the blocks a shard's stage takes");

model_spec load_model_spec(const std::string& path, std::uint32_t n_ctx,
                           backend::kv_type kv) {
  try {
    std::shared_ptr<model::gguf_file> f = model::gguf_file::open(path);
    const model::llama_model lm(f);
    const auto& hp = lm.hparams();
    auto costs = model::layer_costs(*f, hp, n_ctx, kv);
    // Memory as a shard's device stage allocates it.
    auto opts = model::shard_stage_options(hp);
    opts.kv = kv;
    model_spec m;
    auto slash = path.find_last_of('/');
    m.name = slash == std::string::npos ? path : path.substr(slash + 1);
    m.context_train = hp.n_ctx_train;
    m.layers.reserve(costs.size());
    for (std::uint32_t i = 0; i < costs.size(); ++i) {
      const auto& c = costs[i];
      const auto mem = model::device_stage_memory(lm, i, i + 1, opts);
      layer l;
      l.weight_bytes = mem.layer_weight_bytes + mem.head_bytes;
      l.kv_bytes_per_token = mem.kv_bytes_per_token;
      l.flops_per_token = static_cast<double>(c.flops_per_token);
      l.activation_bytes = c.activation_bytes;
      l.operations = c.operations;
      m.layers.push_back(l);
      if (i == 0) {
        m.extras.every_stage = mem.scratch_bytes;
        m.extras.first_stage = 0;
      }
      if (i + 1 == costs.size())
        m.extras.last_stage = mem.logits_bytes;
    }
    return m;
  } catch (const problem_error&) {
    throw;
  } catch (const std::exception& e) {
    throw problem_error(path + ": " + e.what());
  }
}

} // namespace exo::placement
