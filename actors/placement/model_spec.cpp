#include "actors/placement/model_spec.hpp"

#include "runtime/model/gguf.hpp"
#include "runtime/model/llama_hparams.hpp"

#include <exception>

namespace exo::placement {

model_spec load_model_spec(const std::string& path, std::uint32_t n_ctx) {
  try {
    auto f = model::gguf_file::open(path);
    auto hp = model::llama_hparams::from_gguf(*f);
    auto costs = model::layer_costs(*f, hp, n_ctx);
    model_spec m;
    auto slash = path.find_last_of('/');
    m.name = slash == std::string::npos ? path : path.substr(slash + 1);
    m.context_train = hp.n_ctx_train;
    m.layers.reserve(costs.size());
    for (auto& c : costs) {
      layer l;
      l.weight_bytes = c.weight_bytes;
      l.kv_bytes_per_token = c.kv_bytes_per_token;
      l.flops_per_token = static_cast<double>(c.flops_per_token);
      l.activation_bytes = c.activation_bytes;
      m.layers.push_back(l);
    }
    return m;
  } catch (const problem_error&) {
    throw;
  } catch (const std::exception& e) {
    throw problem_error(path + ": " + e.what());
  }
}

} // namespace exo::placement
