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

llama_hparams llama_hparams::from_gguf(const gguf_file& f) {
  const auto& arch = f.get_string("general.architecture");
  if (arch != "llama")
    throw gguf_error("unsupported architecture '" + arch
                     + "' (only llama is supported)");
  llama_hparams hp;
  hp.n_layer = need_u32(f, "llama.block_count");
  hp.n_embd = need_u32(f, "llama.embedding_length");
  hp.n_ff = need_u32(f, "llama.feed_forward_length");
  hp.n_head = need_u32(f, "llama.attention.head_count");
  hp.n_ctx_train = need_u32(f, "llama.context_length");
  hp.n_head_kv = f.find("llama.attention.head_count_kv")
                   ? need_u32(f, "llama.attention.head_count_kv")
                   : hp.n_head;
  hp.rms_eps = static_cast<float>(
    f.get_float("llama.attention.layer_norm_rms_epsilon"));
  if (!(hp.rms_eps >= 0.0f && hp.rms_eps < 1.0f))
    throw gguf_error("llama.attention.layer_norm_rms_epsilon out of range");
  hp.rope_freq_base =
    static_cast<float>(f.get_float_or("llama.rope.freq_base", 10000.0));
  if (!(hp.rope_freq_base > 0.0f))
    throw gguf_error("llama.rope.freq_base must be positive");
  if (hp.n_head % hp.n_head_kv != 0)
    throw gguf_error("llama.attention.head_count "
                     + std::to_string(hp.n_head)
                     + " is not a multiple of head_count_kv "
                     + std::to_string(hp.n_head_kv));
  if (f.find("llama.attention.key_length")) {
    hp.head_dim = need_u32(f, "llama.attention.key_length");
  } else {
    if (hp.n_embd % hp.n_head != 0)
      throw gguf_error("llama.embedding_length is not a multiple of "
                       "llama.attention.head_count");
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  hp.n_rot = f.find("llama.rope.dimension_count")
               ? need_u32(f, "llama.rope.dimension_count")
               : hp.head_dim;
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
    throw gguf_error("llama.rope.dimension_count "
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

std::vector<layer_cost> layer_costs(const gguf_file& f, const llama_hparams& hp,
                                    uint32_t n_ctx) {
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
    c.flops_per_token += attn_flops;
    c.kv_bytes_per_token = 2ull * hp.n_embd_kv() * sizeof(float);
    c.activation_bytes = uint64_t{hp.n_embd} * sizeof(float);
  }
  auto& embd = f.tensor("token_embd.weight");
  auto& last = out.back();
  last.weight_bytes += f.tensor("output_norm.weight").n_bytes;
  auto* head = f.find_tensor("output.weight");
  last.weight_bytes += head ? head->n_bytes : embd.n_bytes;
  last.flops_per_token += 2ull * hp.n_embd * hp.n_vocab;
  last.activation_bytes = uint64_t{hp.n_vocab} * sizeof(float);
  return out;
}

} // namespace exo::model
