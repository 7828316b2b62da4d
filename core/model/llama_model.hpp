#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/gguf/gguf.hpp"
#include "core/model/llama_hparams.hpp"
#include "core/model/ops.hpp"

namespace exo::model {

/// Raised for a misuse of a loaded model at run time (a token id outside the
/// vocabulary, a full KV cache, a wrong layer range); the message says which.
class model_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The tensors of one decoder layer, as views into the mapped file.
struct layer_weights {
  const float* attn_norm = nullptr;
  ops::matrix_view wq, wk, wv, wo;
  /// Q/K/V biases (qwen2; optional for llama) or nullptr.
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;
  /// Per-head RMSNorm weights of Q and K, head_dim each (qwen3) or nullptr.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* ffn_norm = nullptr;
  ops::matrix_view gate, up, down;
};

/// A llama, qwen2 or qwen3 model: hyper-parameters plus checked views of
/// every tensor. Weights stay in the file mapping (no copy).
class llama_model {
public:
  /// Checks every tensor's presence, type and shape; throws gguf_error.
  explicit llama_model(std::shared_ptr<gguf_file> file);

  /// Opens, maps and checks the file at `path`.
  static std::shared_ptr<llama_model> load(const std::string& path);

  const llama_hparams& hparams() const {
    return hp_;
  }
  const gguf_file& file() const {
    return *file_;
  }
  const layer_weights& layer(uint32_t i) const {
    return layers_[i];
  }
  const ops::matrix_view& token_embd() const {
    return token_embd_;
  }
  /// The output head: output.weight, or token_embd when tied.
  const ops::matrix_view& output() const {
    return output_;
  }
  const float* output_norm() const {
    return output_norm_;
  }
  /// Per-pair rotary frequency factors (rope_freqs.weight) or nullptr.
  const float* rope_freqs() const {
    return rope_freqs_;
  }

private:
  std::shared_ptr<gguf_file> file_;
  llama_hparams hp_;
  std::vector<layer_weights> layers_;
  ops::matrix_view token_embd_;
  ops::matrix_view output_;
  const float* output_norm_ = nullptr;
  const float* rope_freqs_ = nullptr;
};

/// The K and V cache of one sequence for the layers [first, last) in IEEE
/// half (llama.cpp's F16 cache: attention rounds K and V to half anyway,
/// so halves give the same bits in half the bytes), laid out per layer as
/// capacity rows of n_embd_kv values.
class kv_cache {
public:
  kv_cache(uint32_t first, uint32_t last, uint32_t n_embd_kv,
           uint32_t capacity);

  uint32_t first() const {
    return first_;
  }
  uint32_t last() const {
    return last_;
  }
  uint32_t capacity() const {
    return capacity_;
  }
  /// Number of positions already stored.
  uint32_t n_past() const {
    return n_past_;
  }
  /// Forgets positions from `n` on (n <= n_past).
  void truncate(uint32_t n);

  uint16_t* k(uint32_t layer, uint32_t pos);
  uint16_t* v(uint32_t layer, uint32_t pos);

private:
  friend class llama_stage;
  uint32_t first_, last_, n_embd_kv_, capacity_;
  uint32_t n_past_ = 0;
  std::vector<uint16_t> k_, v_;
};

/// A contiguous range of layers [first, last) that can run alone: a pipeline
/// stage. The first stage (first == 0) embeds tokens; the last stage
/// (last == n_layer) applies the final norm and the output head. Const
/// methods are safe to call concurrently for different caches.
class llama_stage {
public:
  llama_stage(std::shared_ptr<const llama_model> model, uint32_t first,
              uint32_t last);

  uint32_t first() const {
    return first_;
  }
  uint32_t last() const {
    return last_;
  }
  bool is_first() const {
    return first_ == 0;
  }
  bool is_last() const {
    return last_ == model_->hparams().n_layer;
  }
  const llama_model& model() const {
    return *model_;
  }

  /// A fresh cache for one sequence of up to `n_ctx` tokens.
  kv_cache make_cache(uint32_t n_ctx) const;

  /// Writes the embeddings of n tokens to x (n rows of n_embd); throws
  /// model_error for an id outside the vocabulary.
  void embed(const int32_t* tokens, size_t n, float* x) const;

  /// Runs this stage's layers over n tokens (rows of x, updated in place) at
  /// positions cache.n_past() onwards, then advances the cache by n.
  void forward(float* x, size_t n, kv_cache& cache) const;

  /// Final norm and output head for n rows of x: n rows of n_vocab logits.
  void head(const float* x, size_t n, float* logits) const;

private:
  std::shared_ptr<const llama_model> model_;
  uint32_t first_, last_;
};

/// Runs a model split into stages in this process, one sequence at a time
/// per call; each sequence owns one cache per stage.
class llama_pipeline {
public:
  /// `bounds` are the stage boundaries, e.g. {0, n_layer} for one stage or
  /// {0, 1, 3, n_layer} for three.
  llama_pipeline(std::shared_ptr<const llama_model> model,
                 const std::vector<uint32_t>& bounds);

  /// One sequence in flight: a cache per stage.
  struct sequence {
    std::vector<kv_cache> caches;
    uint32_t n_past() const {
      return caches.front().n_past();
    }
  };

  sequence new_sequence(uint32_t n_ctx) const;

  /// Feeds `tokens` (as one batch) and returns the logits of the last token,
  /// or of every token (n rows) when `all_logits` is set.
  std::vector<float> eval(sequence& seq, const std::vector<int32_t>& tokens,
                          bool all_logits = false) const;

  const std::vector<llama_stage>& stages() const {
    return stages_;
  }

private:
  std::shared_ptr<const llama_model> model_;
  std::vector<llama_stage> stages_;
};

} // namespace exo::model
