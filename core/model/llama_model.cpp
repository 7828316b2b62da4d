#include "core/model/llama_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/gguf/quant.hpp"

namespace exo::model {

namespace {

std::string shape_string(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

const tensor_info& expect(const gguf_file& f, const std::string& name,
                          std::vector<uint64_t> ne) {
  auto& t = f.tensor(name);
  if (t.ne != ne)
    throw gguf_error("tensor '" + name + "' has shape " + shape_string(t.ne)
                     + " but " + shape_string(ne) + " was expected");
  return t;
}

const float* expect_f32(const gguf_file& f, const std::string& name,
                        uint64_t n) {
  auto& t = expect(f, name, {n});
  if (t.type != tensor_type::f32)
    throw gguf_error("tensor '" + name + "' must be F32, not "
                     + to_string(t.type));
  return reinterpret_cast<const float*>(t.data);
}

ops::matrix_view expect_matrix(const gguf_file& f, const std::string& name,
                               uint64_t cols, uint64_t rows) {
  auto& t = expect(f, name, {cols, rows});
  return ops::matrix_view{t.data, t.type, cols, rows};
}

} // namespace

llama_model::llama_model(std::shared_ptr<gguf_file> file)
  : file_(std::move(file)), hp_(llama_hparams::from_gguf(*file_)) {
  auto& f = *file_;
  const uint64_t e = hp_.n_embd, q = hp_.n_embd_q(), kv = hp_.n_embd_kv(),
                 ff = hp_.n_ff;
  token_embd_ = expect_matrix(f, "token_embd.weight", e, hp_.n_vocab);
  output_norm_ = expect_f32(f, "output_norm.weight", e);
  output_ = hp_.tied_output
              ? token_embd_
              : expect_matrix(f, "output.weight", e, hp_.n_vocab);
  if (f.find_tensor("rope_freqs.weight"))
    rope_freqs_ = expect_f32(f, "rope_freqs.weight", hp_.n_rot / 2);
  layers_.resize(hp_.n_layer);
  for (uint32_t l = 0; l < hp_.n_layer; ++l) {
    auto p = "blk." + std::to_string(l) + ".";
    auto& L = layers_[l];
    L.attn_norm = expect_f32(f, p + "attn_norm.weight", e);
    L.wq = expect_matrix(f, p + "attn_q.weight", e, q);
    L.wk = expect_matrix(f, p + "attn_k.weight", e, kv);
    L.wv = expect_matrix(f, p + "attn_v.weight", e, kv);
    L.wo = expect_matrix(f, p + "attn_output.weight", q, e);
    const auto& tr = hp_.traits;
    if (tr.qkv_bias_allowed) {
      const bool any = f.find_tensor(p + "attn_q.bias")
                       || f.find_tensor(p + "attn_k.bias")
                       || f.find_tensor(p + "attn_v.bias");
      if (any || tr.qkv_bias_required) {
        // All three or none (f.tensor names the one missing).
        L.bq = expect_f32(f, p + "attn_q.bias", q);
        L.bk = expect_f32(f, p + "attn_k.bias", kv);
        L.bv = expect_f32(f, p + "attn_v.bias", kv);
      }
    }
    if (tr.qk_norm) {
      L.q_norm = expect_f32(f, p + "attn_q_norm.weight", hp_.head_dim);
      L.k_norm = expect_f32(f, p + "attn_k_norm.weight", hp_.head_dim);
    }
    L.ffn_norm = expect_f32(f, p + "ffn_norm.weight", e);
    L.gate = expect_matrix(f, p + "ffn_gate.weight", e, ff);
    L.up = expect_matrix(f, p + "ffn_up.weight", e, ff);
    L.down = expect_matrix(f, p + "ffn_down.weight", ff, e);
  }
}

std::shared_ptr<llama_model> llama_model::load(const std::string& path) {
  return std::make_shared<llama_model>(gguf_file::open(path));
}

// -- kv_cache -----------------------------------------------------------------

kv_cache::kv_cache(uint32_t first, uint32_t last, uint32_t n_embd_kv,
                   uint32_t capacity)
  : first_(first),
    last_(last),
    n_embd_kv_(n_embd_kv),
    capacity_(capacity),
    k_(size_t{last - first} * capacity * n_embd_kv),
    v_(k_.size()) {
}

void kv_cache::truncate(uint32_t n) {
  if (n > n_past_)
    throw model_error("cannot truncate a KV cache of "
                      + std::to_string(n_past_) + " positions to "
                      + std::to_string(n));
  n_past_ = n;
}

uint16_t* kv_cache::k(uint32_t layer, uint32_t pos) {
  return k_.data() + (size_t{layer - first_} * capacity_ + pos) * n_embd_kv_;
}

uint16_t* kv_cache::v(uint32_t layer, uint32_t pos) {
  return v_.data() + (size_t{layer - first_} * capacity_ + pos) * n_embd_kv_;
}

// -- llama_stage --------------------------------------------------------------

llama_stage::llama_stage(std::shared_ptr<const llama_model> model,
                         uint32_t first, uint32_t last)
  : model_(std::move(model)), first_(first), last_(last) {
  if (first > last || last > model_->hparams().n_layer)
    throw model_error("invalid layer range [" + std::to_string(first) + ", "
                      + std::to_string(last) + ") for a model of "
                      + std::to_string(model_->hparams().n_layer)
                      + " layers");
}

kv_cache llama_stage::make_cache(uint32_t n_ctx) const {
  if (n_ctx == 0)
    throw model_error("a KV cache needs a context of at least one token");
  return kv_cache(first_, last_, model_->hparams().n_embd_kv(), n_ctx);
}

void llama_stage::embed(const int32_t* tokens, size_t n, float* x) const {
  if (!is_first())
    throw model_error("embed called on a stage that does not start at "
                      "layer 0");
  auto& hp = model_->hparams();
  auto& w = model_->token_embd();
  const size_t rb = row_bytes(w.type, w.cols);
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= hp.n_vocab)
      throw model_error("token id " + std::to_string(tokens[i])
                        + " is outside the vocabulary of "
                        + std::to_string(hp.n_vocab));
    dequantize(w.type, w.data + static_cast<size_t>(tokens[i]) * rb,
               x + i * hp.n_embd, hp.n_embd);
  }
}

void llama_stage::forward(float* x, size_t n, kv_cache& cache) const {
  if (cache.first() != first_ || cache.last() != last_)
    throw model_error("KV cache belongs to another layer range");
  if (n == 0)
    return;
  if (cache.n_past() + n > cache.capacity())
    throw model_error("context full: " + std::to_string(cache.n_past())
                      + " + " + std::to_string(n) + " tokens exceed the "
                      + std::to_string(cache.capacity())
                      + "-token KV cache");
  auto& hp = model_->hparams();
  const size_t e = hp.n_embd, nq = hp.n_embd_q(), nkv = hp.n_embd_kv(),
               ff = hp.n_ff;
  const uint32_t pos0 = cache.n_past();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  std::vector<float> cur(n * e), q(n * nq), k(n * nkv), v(n * nkv),
    att(n * nq), tmp(n * e), g(n * ff), u(n * ff);
  for (uint32_t l = first_; l < last_; ++l) {
    auto& L = model_->layer(l);
    ops::for_rows(n, e, [&](size_t t0, size_t t1) {
      for (size_t t = t0; t < t1; ++t)
        ops::rmsnorm(x + t * e, L.attn_norm, cur.data() + t * e, e,
                     hp.rms_eps);
    });
    ops::matmul(L.wq, cur.data(), n, q.data());
    ops::matmul(L.wk, cur.data(), n, k.data());
    ops::matmul(L.wv, cur.data(), n, v.data());
    if (L.bq) {
      ops::add_bias(q.data(), L.bq, n, nq);
      ops::add_bias(k.data(), L.bk, n, nkv);
      ops::add_bias(v.data(), L.bv, n, nkv);
    }
    if (L.q_norm) {
      // Each head of each row on its own (n * heads rows of head_dim).
      for (size_t r = 0; r < n * hp.n_head; ++r)
        ops::rmsnorm(q.data() + r * hp.head_dim, L.q_norm,
                     q.data() + r * hp.head_dim, hp.head_dim, hp.rms_eps);
      for (size_t r = 0; r < n * hp.n_head_kv; ++r)
        ops::rmsnorm(k.data() + r * hp.head_dim, L.k_norm,
                     k.data() + r * hp.head_dim, hp.head_dim, hp.rms_eps);
    }
    auto rope = hp.rope_neox() ? &ops::rope_neox : &ops::rope;
    ops::for_rows(n, nq + 2 * nkv, [&](size_t t0, size_t t1) {
      for (size_t t = t0; t < t1; ++t) {
        const int64_t pos = pos0 + static_cast<int64_t>(t);
        rope(q.data() + t * nq, hp.n_head, hp.head_dim, hp.n_rot, pos,
             hp.rope_freq_base, model_->rope_freqs());
        rope(k.data() + t * nkv, hp.n_head_kv, hp.head_dim, hp.n_rot, pos,
             hp.rope_freq_base, model_->rope_freqs());
        ops::to_f16(k.data() + t * nkv, cache.k(l, pos0 + t), nkv);
        ops::to_f16(v.data() + t * nkv, cache.v(l, pos0 + t), nkv);
      }
    });
    const uint16_t* kc = cache.k(l, 0);
    const uint16_t* vc = cache.v(l, 0);
    ops::attention(q.data(), kc, vc, n, pos0, hp.n_head, hp.n_head_kv,
                   hp.head_dim, nkv, scale, att.data());
    ops::matmul(L.wo, att.data(), n, tmp.data());
    ops::add(x, tmp.data(), n * e);
    ops::for_rows(n, e, [&](size_t t0, size_t t1) {
      for (size_t t = t0; t < t1; ++t)
        ops::rmsnorm(x + t * e, L.ffn_norm, cur.data() + t * e, e,
                     hp.rms_eps);
    });
    ops::matmul(L.gate, cur.data(), n, g.data());
    ops::matmul(L.up, cur.data(), n, u.data());
    ops::silu_gate(g.data(), u.data(), g.data(), n * ff);
    ops::matmul(L.down, g.data(), n, tmp.data());
    ops::add(x, tmp.data(), n * e);
  }
  cache.n_past_ += static_cast<uint32_t>(n);
}

void llama_stage::head(const float* x, size_t n, float* logits) const {
  if (!is_last())
    throw model_error("head called on a stage that does not end at the "
                      "last layer");
  auto& hp = model_->hparams();
  std::vector<float> cur(n * hp.n_embd);
  for (size_t t = 0; t < n; ++t)
    ops::rmsnorm(x + t * hp.n_embd, model_->output_norm(),
                 cur.data() + t * hp.n_embd, hp.n_embd, hp.rms_eps);
  ops::matmul(model_->output(), cur.data(), n, logits);
}

// -- llama_pipeline -----------------------------------------------------------

llama_pipeline::llama_pipeline(std::shared_ptr<const llama_model> model,
                               const std::vector<uint32_t>& bounds)
  : model_(std::move(model)) {
  if (bounds.size() < 2 || bounds.front() != 0
      || bounds.back() != model_->hparams().n_layer)
    throw model_error("stage bounds must start at 0 and end at the layer "
                      "count");
  for (size_t i = 1; i < bounds.size(); ++i)
    stages_.emplace_back(model_, bounds[i - 1], bounds[i]);
}

llama_pipeline::sequence llama_pipeline::new_sequence(uint32_t n_ctx) const {
  sequence s;
  for (auto& st : stages_)
    s.caches.push_back(st.make_cache(n_ctx));
  return s;
}

std::vector<float> llama_pipeline::eval(sequence& seq,
                                        const std::vector<int32_t>& tokens,
                                        bool all_logits) const {
  auto& hp = model_->hparams();
  const size_t n = tokens.size();
  if (n == 0)
    throw model_error("eval needs at least one token");
  std::vector<float> x(n * hp.n_embd);
  stages_.front().embed(tokens.data(), n, x.data());
  for (size_t i = 0; i < stages_.size(); ++i)
    stages_[i].forward(x.data(), n, seq.caches[i]);
  const size_t rows = all_logits ? n : 1;
  std::vector<float> logits(rows * hp.n_vocab);
  stages_.back().head(x.data() + (n - rows) * hp.n_embd, rows, logits.data());
  return logits;
}

} // namespace exo::model
