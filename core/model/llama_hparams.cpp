#include "core/model/llama_hparams.hpp"

#include <string>

namespace exo::model {

namespace {

uint32_t need_u32(const gguf_file& f, const std::string& key) {
  auto v = f.get_uint(key);
  if (v == 0 || v > UINT32_MAX)
    throw gguf_error("key '" + key + "' has invalid value "
                     + std::to_string(v));
  return static_cast<uint32_t>(v);
}

} // namespace

const arch_traits* find_arch(const std::string& name) {
  // llama.cpp: LLM_ARCH_LLAMA (NORM rope, optional Q/K/V biases),
  // LLM_ARCH_QWEN2 (NEOX rope, Q/K/V biases), LLM_ARCH_QWEN3 (NEOX rope,
  // per-head Q/K RMSNorm, no biases).
  static const arch_traits table[] = {
    {model_arch::llama, "llama", false, false, true, false},
    {model_arch::qwen2, "qwen2", true, true, true, false},
    {model_arch::qwen3, "qwen3", true, false, false, true},
  };
  for (auto& t : table)
    if (name == t.name)
      return &t;
  return nullptr;
}

namespace {

/// Refuses rope scalings other than none: llama.cpp reads
/// <arch>.rope.scaling.type (linear by default), .scaling.factor or the older
/// .rope.scale_linear (freq_scale = 1 / factor), and applies YaRN for
/// "yarn". Llama 3.1+ files instead carry rope_freqs.weight (read by
/// llama_model) and no factor, which is what exo implements.
void check_rope_scaling(const gguf_file& f, const std::string& a) {
  const auto type_key = a + ".rope.scaling.type";
  const std::string type =
    f.find(type_key) ? f.get_string(type_key) : std::string{"linear"};
  if (type == "none")
    return; // llama.cpp never scales then, whatever the factor says
  if (type != "linear")
    throw gguf_error(type_key + " '" + type
                     + "' is not supported (only none, or linear with "
                       "factor 1; Llama 3 scaling comes as rope_freqs.weight)");
  double factor = f.get_float_or(a + ".rope.scaling.factor", 0.0);
  if (factor == 0.0)
    factor = f.get_float_or(a + ".rope.scale_linear", 0.0);
  if (factor != 0.0 && factor != 1.0)
    throw gguf_error("linear rope scaling by " + std::to_string(factor) + " ("
                     + a + ".rope.scaling.factor) is not supported");
}

} // namespace

llama_hparams llama_hparams::from_gguf(const gguf_file& f) {
  const auto& arch = f.get_string("general.architecture");
  const auto* traits = find_arch(arch);
  if (!traits)
    throw gguf_error("unsupported architecture '" + arch
                     + "' (llama, qwen2 and qwen3 are supported)");
  const std::string a = traits->name;
  llama_hparams hp;
  hp.traits = *traits;
  hp.n_layer = need_u32(f, a + ".block_count");
  // Every layer has at least 9 tensors: a count the file cannot hold is
  // refused before anything is sized by it (2^32-1 reached bad_alloc).
  if (hp.n_layer > f.tensors().size() / 9)
    throw gguf_error("key '" + a + ".block_count' is "
                     + std::to_string(hp.n_layer) + ", but the file has only "
                     + std::to_string(f.tensors().size())
                     + " tensors (at least 9 per layer)");
  hp.n_embd = need_u32(f, a + ".embedding_length");
  hp.n_ff = need_u32(f, a + ".feed_forward_length");
  hp.n_head = need_u32(f, a + ".attention.head_count");
  hp.n_ctx_train = need_u32(f, a + ".context_length");
  hp.n_head_kv = f.find(a + ".attention.head_count_kv")
                   ? need_u32(f, a + ".attention.head_count_kv")
                   : hp.n_head;
  const auto eps_key = a + ".attention.layer_norm_rms_epsilon";
  hp.rms_eps = static_cast<float>(f.get_float(eps_key));
  if (!(hp.rms_eps >= 0.0f && hp.rms_eps < 1.0f))
    throw gguf_error(eps_key + " out of range");
  hp.rope_freq_base =
    static_cast<float>(f.get_float_or(a + ".rope.freq_base", 10000.0));
  if (!(hp.rope_freq_base > 0.0f))
    throw gguf_error(a + ".rope.freq_base must be positive");
  check_rope_scaling(f, a);
  if (hp.n_head % hp.n_head_kv != 0)
    throw gguf_error(a + ".attention.head_count "
                     + std::to_string(hp.n_head)
                     + " is not a multiple of head_count_kv "
                     + std::to_string(hp.n_head_kv));
  if (f.find(a + ".attention.key_length")) {
    hp.head_dim = need_u32(f, a + ".attention.key_length");
    if (f.find(a + ".attention.value_length")
        && need_u32(f, a + ".attention.value_length") != hp.head_dim)
      throw gguf_error(a + ".attention.value_length differs from "
                       "key_length (not supported)");
  } else {
    if (hp.n_embd % hp.n_head != 0)
      throw gguf_error(a + ".embedding_length is not a multiple of " + a
                       + ".attention.head_count");
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  hp.n_rot = f.find(a + ".rope.dimension_count")
               ? need_u32(f, a + ".rope.dimension_count")
               : hp.head_dim;
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
    throw gguf_error(a + ".rope.dimension_count "
                     + std::to_string(hp.n_rot)
                     + " must be even and at most the head size "
                     + std::to_string(hp.head_dim));
  const auto& embd = f.tensor("token_embd.weight");
  if (embd.ne.size() != 2 || embd.ne[0] != hp.n_embd || embd.ne[1] == 0
      || embd.ne[1] > INT32_MAX)
    throw gguf_error("tensor 'token_embd.weight' has the wrong shape");
  hp.n_vocab = static_cast<uint32_t>(embd.ne[1]);
  hp.tied_output = f.find_tensor("output.weight") == nullptr;
  return hp;
}

kv_rotation kv_rotation_of(backend::kv_type kv, uint32_t head_dim) {
  if (kv != backend::kv_type::q8_0 || head_dim % 64 != 0)
    return {};
  uint64_t k = 64;
  while (head_dim % (2 * k) == 0)
    k *= 2;
  return {k, 64};
}

std::vector<layer_cost> layer_costs(const gguf_file& f, const llama_hparams& hp,
                                    uint32_t n_ctx, backend::kv_type kv) {
  if (n_ctx == 0)
    n_ctx = hp.n_ctx_train;
  static const char* names[] = {"attn_norm", "attn_q",   "attn_k",
                                "attn_v",    "attn_output", "ffn_norm",
                                "ffn_gate",  "ffn_up",   "ffn_down"};
  std::vector<layer_cost> out(hp.n_layer);
  const uint64_t attn_flops =
    4ull * hp.n_head * hp.head_dim * (n_ctx / 2 + 1);
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    auto& c = out[l];
    for (auto* n : names) {
      auto& t = f.tensor("blk." + std::to_string(l) + "." + n + ".weight");
      c.weight_bytes += t.n_bytes;
      if (t.ne.size() == 2)
        c.flops_per_token += 2 * t.n_elements;
    }
    // Biases (qwen2) and per-head Q/K norms (qwen3).
    for (auto* n : {"attn_q.bias", "attn_k.bias", "attn_v.bias",
                    "attn_q_norm.weight", "attn_k_norm.weight"})
      if (auto* t = f.find_tensor("blk." + std::to_string(l) + "." + n))
        c.weight_bytes += t->n_bytes;
    c.flops_per_token += attn_flops;
    // As device_stage records a decode step: two norms, seven products,
    // two ropes, K and V into the cache (to_f16 / to_q8_0), attention,
    // silu_mul and two residual adds; a bias add per biased projection, a
    // norm per Q/K norm; a q8_0 cache of heads a multiple of 64 wide: the
    // four rotations around it (hadamard of Q, K, V and the output).
    c.operations = 17;
    if (kv_rotation_of(kv, hp.head_dim).any())
      c.operations += 4;
    for (auto* n : {"attn_q.bias", "attn_k.bias", "attn_v.bias",
                    "attn_q_norm.weight", "attn_k_norm.weight"})
      if (f.find_tensor("blk." + std::to_string(l) + "." + n))
        ++c.operations;
    c.kv_bytes_per_token = 2 * backend::kv_bytes_of(kv, hp.n_embd_kv());
    c.activation_bytes = uint64_t{hp.n_embd} * sizeof(float);
  }
  auto& embd = f.tensor("token_embd.weight");
  auto& last = out.back();
  last.weight_bytes += f.tensor("output_norm.weight").n_bytes;
  auto* head = f.find_tensor("output.weight");
  last.weight_bytes += head ? head->n_bytes : embd.n_bytes;
  last.flops_per_token += 2ull * hp.n_embd * hp.n_vocab;
  last.activation_bytes = uint64_t{hp.n_vocab} * sizeof(float);
  last.operations += 2; // the final norm and the head
  return out;
}

} // namespace exo::model
