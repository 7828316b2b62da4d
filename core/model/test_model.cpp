#include "core/model/test_model.hpp"

#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "core/tokenizer/tokenizer.hpp"

namespace exo::model {

namespace {

const char* words[] = {
  "hello", "world", "the",  "and",   "of",    "to",    "in",   "is",    "that",  "it",
  "for",  "was",   "on",    "are",   "as",   "with",  "his",   "they",
  "at",   "be",    "this",  "have",  "from", "or",    "one",   "had",
  "by",   "word",  "but",   "not",   "what", "all",   "were",  "we",
  "when", "your",  "can",   "said",  "there", "use",  "an",    "each",
  "which", "she",  "do",    "how",   "their", "if",   "will",  "up",
  "other", "about", "out",  "many",  "then", "them",  "these", "so",
  "some", "her",   "would", "make",  "like", "him",   "into",  "time",
  "has",  "look",  "two",   "more",  "write", "go",   "see",   "number",
  "no",   "way",   "could", "people", "my",  "than",  "first", "water",
  "been", "call",  "who",   "oil",   "its",  "now",   "find",  "long",
  "down", "day",   "did",   "get",   "come", "made",  "may",   "part",
  "model", "token", "layer", "cluster", "device"};

/// Uniform float in [-1, 1) from the generator, portable.
float uniform(std::mt19937_64& rng) {
  return static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-52
                            - 1.0);
}

struct vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  uint32_t bos = 0, eos = 0;
};

vocab llama_vocab(uint32_t n, std::mt19937_64& rng) {
  vocab v;
  auto add = [&](const std::string& s, float score, token_kind k) {
    v.tokens.push_back(s);
    v.scores.push_back(score);
    v.types.push_back(static_cast<int32_t>(k));
  };
  add("<unk>", 0.0f, token_kind::unknown);
  add("<s>", 0.0f, token_kind::control);
  add("</s>", 0.0f, token_kind::control);
  v.bos = 1;
  v.eos = 2;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0.0f, token_kind::byte);
  }
  std::set<std::string> have;
  const std::string sp = "\xE2\x96\x81";
  add(sp, -1000.0f, token_kind::normal);
  have.insert(sp);
  for (char c = '!'; c <= '~'; ++c) {
    add(std::string(1, c), -1000.0f, token_kind::normal);
    have.insert(std::string(1, c));
  }
  const size_t min = v.tokens.size() + 8;
  if (n < min)
    throw gguf_error("a llama test vocabulary needs at least "
                     + std::to_string(min) + " tokens, not "
                     + std::to_string(n));
  // Merged pieces: every prefix of "▁word" and "word", so that each is
  // reachable by merging two pieces already in the vocabulary.
  float score = -1.0f;
  auto add_piece = [&](const std::string& s) {
    if (v.tokens.size() >= n || have.count(s))
      return;
    have.insert(s);
    add(s, score, token_kind::normal);
    score -= 1.0f;
  };
  for (auto* w : words) {
    std::string full = sp + w;
    for (size_t k = 4; k <= full.size(); ++k)
      add_piece(full.substr(0, k));
    std::string plain = w;
    for (size_t k = 2; k <= plain.size(); ++k)
      add_piece(plain.substr(0, k));
  }
  // Fill the rest with concatenations of random existing normal pieces.
  const size_t first_normal = 3 + 256;
  while (v.tokens.size() < n) {
    auto a = v.tokens[first_normal + rng() % (v.tokens.size() - first_normal)];
    auto b = v.tokens[first_normal + 1 + rng() % 94]; // a single character
    add_piece(a + b);
    if (have.size() > 100000)
      break;
  }
  return v;
}

/// Llama 3's special tokens, in the order gpt2_vocab appends them for the
/// "llama3" tokenizer (the first is BOS, the second EOS).
const char* const llama3_specials[] = {"<|begin_of_text|>", "<|end_of_text|>",
                                       "<|start_header_id|>",
                                       "<|end_header_id|>", "<|eot_id|>"};

/// A chat template in Llama 3's format (header tokens around each role,
/// <|eot_id|> after each message), written for the generated models.
const char* const llama3_template =
  "{{- bos_token }}"
  "{%- for message in messages %}"
  "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
  "{{- message['content'] | trim }}{{- '<|eot_id|>' }}"
  "{%- endfor %}"
  "{%- if add_generation_prompt %}"
  "{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
  "{%- endif %}";

/// A byte-level BPE vocabulary of n tokens: the 256 byte tokens, merges,
/// then the special tokens (<|endoftext|>, or Llama 3's with `llama3`).
vocab gpt2_vocab(uint32_t n, std::mt19937_64& rng, bool llama3 = false) {
  vocab v;
  std::set<std::string> have;
  for (int b = 0; b < 256; ++b) {
    auto s = gpt2_byte_to_unicode(static_cast<uint8_t>(b));
    v.tokens.push_back(s);
    have.insert(s);
  }
  if (n < 256 + 8)
    throw gguf_error("a gpt2 test vocabulary needs at least 264 tokens, not "
                     + std::to_string(n));
  const size_t n_special = llama3 ? std::size(llama3_specials) : 1;
  const size_t normal_limit = n - n_special; // then the special tokens
  auto merge = [&](const std::string& a, const std::string& b) {
    if (v.tokens.size() >= normal_limit || have.count(a + b)
        || !have.count(a) || !have.count(b))
      return;
    v.merges.push_back(a + " " + b);
    v.tokens.push_back(a + b);
    have.insert(a + b);
  };
  const std::string g = gpt2_byte_to_unicode(' '); // "Ġ"
  for (auto* w : words) {
    for (auto prefix : {g, std::string()}) {
      std::string cur = prefix.empty() ? std::string(1, w[0]) : prefix;
      size_t k = prefix.empty() ? 1 : 0;
      for (; w[k] != 0; ++k) {
        std::string ch(1, w[k]);
        merge(cur, ch);
        cur += ch;
      }
    }
  }
  while (v.tokens.size() < normal_limit) {
    auto a = v.tokens[rng() % v.tokens.size()];
    auto b = v.tokens[rng() % 256];
    merge(a, b);
    if (have.size() > 100000)
      break;
  }
  const auto first_special = static_cast<uint32_t>(v.tokens.size());
  if (llama3)
    for (const char* t : llama3_specials)
      v.tokens.push_back(t);
  else
    v.tokens.push_back("<|endoftext|>");
  v.scores.assign(v.tokens.size(), 0.0f);
  v.types.assign(v.tokens.size(), static_cast<int32_t>(token_kind::normal));
  for (auto i = first_special; i < v.tokens.size(); ++i)
    v.types[i] = static_cast<int32_t>(token_kind::control);
  v.bos = first_special;
  v.eos = llama3 ? first_special + 1 : first_special;
  return v;
}

} // namespace

gguf_writer build_test_model(const test_model_options& o) {
  if (o.layers == 0 || o.dim == 0 || o.ff == 0 || o.heads == 0
      || o.kv_heads == 0 || o.ctx == 0)
    throw gguf_error("test model sizes must be positive");
  if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3")
    throw gguf_error("unknown architecture '" + o.arch
                     + "' (llama, qwen2 or qwen3)");
  const uint32_t head_dim = o.head_dim ? o.head_dim : o.dim / o.heads;
  if ((!o.head_dim && o.dim % o.heads != 0) || o.heads % o.kv_heads != 0
      || head_dim % 2 != 0)
    throw gguf_error("dim must split into an even head size and heads into "
                     "kv-heads");
  const file_type ft{o.type, o.mix};
  if (o.dim % block_elements(o.type) != 0 || o.ff % block_elements(o.type) != 0
      || (ft.kind != file_type::mix::none && (o.dim % 256 || o.ff % 256)))
    throw gguf_error(std::string(to_string(o.type)) + " needs dim and ff to "
                     "be multiples of "
                     + std::to_string(ft.kind != file_type::mix::none
                                        ? 256
                                        : block_elements(o.type))
                     + " (its block size)");
  if (!o.vocab_from && o.tokenizer != "llama" && o.tokenizer != "gpt2"
      && o.tokenizer != "llama3")
    throw gguf_error("unknown tokenizer '" + o.tokenizer
                     + "' (llama, gpt2 or llama3)");
  std::mt19937_64 rng(o.seed);
  vocab v;
  std::string model = o.tokenizer, pre = "default";
  if (o.vocab_from) {
    const auto& h = *o.vocab_from;
    if (h.tokens.empty() || h.types.size() != h.tokens.size()
        || (!h.scores.empty() && h.scores.size() != h.tokens.size()))
      throw gguf_error("the vocabulary to copy is empty or inconsistent");
    v.tokens = h.tokens;
    v.scores = h.scores;
    v.types = h.types;
    v.merges = h.merges;
    model = h.model;
    pre = h.pre;
  } else if (o.tokenizer == "llama3") {
    // Byte-level BPE with Llama 3's pre-tokenizer, special tokens and a
    // chat template in its format.
    v = gpt2_vocab(o.vocab, rng, true);
    model = "gpt2";
    pre = "llama-bpe";
  } else {
    v = o.tokenizer == "llama" ? llama_vocab(o.vocab, rng)
                               : gpt2_vocab(o.vocab, rng);
  }
  const uint32_t n_vocab = static_cast<uint32_t>(v.tokens.size());
  const uint32_t n_q = o.heads * head_dim, n_kv = o.kv_heads * head_dim;
  if (o.type == tensor_type::q8_0 && n_q % 32 != 0)
    throw gguf_error("Q8_0 needs heads x head size to be a multiple of 32");

  gguf_writer w;
  const std::string& a = o.arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "exo test model");
  w.set_u32("general.alignment", 32);
  w.set_u32(a + ".block_count", o.layers);
  w.set_u32(a + ".context_length", o.ctx);
  w.set_u32(a + ".embedding_length", o.dim);
  w.set_u32(a + ".feed_forward_length", o.ff);
  w.set_u32(a + ".attention.head_count", o.heads);
  w.set_u32(a + ".attention.head_count_kv", o.kv_heads);
  w.set_f32(a + ".rope.freq_base", o.rope_base);
  w.set_u32(a + ".rope.dimension_count", head_dim);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", o.rms_eps);
  if (o.head_dim) {
    w.set_u32(a + ".attention.key_length", head_dim);
    w.set_u32(a + ".attention.value_length", head_dim);
  }
  w.set_u32("general.file_type", llama_ftype(ft));
  w.set_string("tokenizer.ggml.model", model);
  w.set_string("tokenizer.ggml.pre", pre);
  w.set_strings("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty())
    w.set_f32s("tokenizer.ggml.scores", v.scores);
  w.set_i32s("tokenizer.ggml.token_type", v.types);
  if (!v.merges.empty())
    w.set_strings("tokenizer.ggml.merges", v.merges);
  if (o.vocab_from) {
    const auto& h = *o.vocab_from;
    auto id = [&](const char* key, int64_t value) {
      if (value >= 0)
        w.set_u32(key, static_cast<uint32_t>(value));
    };
    id("tokenizer.ggml.bos_token_id", h.bos);
    id("tokenizer.ggml.eos_token_id", h.eos);
    id("tokenizer.ggml.unknown_token_id", h.unk);
    id("tokenizer.ggml.padding_token_id", h.pad);
    if (h.add_bos)
      w.set_bool("tokenizer.ggml.add_bos_token", *h.add_bos);
    if (h.add_eos)
      w.set_bool("tokenizer.ggml.add_eos_token", *h.add_eos);
    if (!h.chat_template.empty())
      w.set_string("tokenizer.chat_template", h.chat_template);
  } else {
    w.set_u32("tokenizer.ggml.bos_token_id", v.bos);
    w.set_u32("tokenizer.ggml.eos_token_id", v.eos);
    if (o.tokenizer == "llama")
      w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_bool("tokenizer.ggml.add_bos_token",
               o.tokenizer == "llama" || o.tokenizer == "llama3");
    if (o.tokenizer == "llama3")
      w.set_string("tokenizer.chat_template", llama3_template);
  }

  // Matrices uniform in +-1/sqrt(inputs) keep activations near unit size;
  // norms near 1; the embedding uniform in +-1.
  uint32_t layer = 0;
  auto matrix = [&](const std::string& name, uint32_t in, uint32_t out,
                    float scale) {
    std::vector<float> m(size_t{in} * out);
    for (auto& x : m)
      x = uniform(rng) * scale;
    matrix_role r{name, layer, o.layers, o.heads / o.kv_heads, !o.tied, in};
    // One format for every matrix (the head too, so that it is tested),
    // or llama-quantize's choices for a mix.
    w.add_tensor(name, {in, out},
                 ft.kind == file_type::mix::none ? o.type
                                                 : matrix_type(ft, r),
                 m);
  };
  auto norm = [&](const std::string& name, uint32_t n, float scale = 1.0f) {
    std::vector<float> m(n);
    for (auto& x : m)
      x = (1.0f + 0.1f * uniform(rng)) * scale;
    w.add_tensor(name, {n}, tensor_type::f32, m);
  };
  auto bias = [&](const std::string& name, uint32_t n) {
    std::vector<float> m(n);
    for (auto& x : m)
      x = 0.5f * uniform(rng);
    w.add_tensor(name, {n}, tensor_type::f32, m);
  };
  const float s_in = 1.0f / std::sqrt(static_cast<float>(o.dim));
  const float s_ff = 1.0f / std::sqrt(static_cast<float>(o.ff));
  matrix("token_embd.weight", o.dim, n_vocab, 1.0f);
  for (uint32_t l = 0; l < o.layers; ++l) {
    layer = l;
    auto p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight", o.dim);
    matrix(p + "attn_q.weight", o.dim, n_q, s_in * o.qk_scale);
    matrix(p + "attn_k.weight", o.dim, n_kv, s_in * o.qk_scale);
    matrix(p + "attn_v.weight", o.dim, n_kv, s_in);
    if (a == "qwen2") {
      bias(p + "attn_q.bias", n_q);
      bias(p + "attn_k.bias", n_kv);
      bias(p + "attn_v.bias", n_kv);
    }
    if (a == "qwen3") {
      norm(p + "attn_q_norm.weight", head_dim, o.qk_scale);
      norm(p + "attn_k_norm.weight", head_dim, o.qk_scale);
    }
    matrix(p + "attn_output.weight", n_q, o.dim,
           1.0f / std::sqrt(static_cast<float>(n_q)));
    norm(p + "ffn_norm.weight", o.dim);
    matrix(p + "ffn_gate.weight", o.dim, o.ff, s_in);
    matrix(p + "ffn_up.weight", o.dim, o.ff, s_in);
    matrix(p + "ffn_down.weight", o.ff, o.dim, s_ff);
  }
  norm("output_norm.weight", o.dim);
  if (o.llama3_rope) {
    // convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors.
    const double factor = 8, low = 1, high = 4, old_ctx = 8192;
    const double pi = 3.14159265358979323846;
    const double low_wl = old_ctx / low, high_wl = old_ctx / high;
    std::vector<float> ff;
    for (uint32_t i = 0; i < head_dim; i += 2) {
      const double freq =
        1.0 / std::pow(static_cast<double>(o.rope_base),
                       static_cast<double>(i) / head_dim);
      const double wl = 2 * pi / freq;
      double f = 1;
      if (wl > low_wl) {
        f = factor;
      } else if (wl >= high_wl) {
        const double smooth = (old_ctx / wl - low) / (high - low);
        f = 1 / ((1 - smooth) / factor + smooth);
      }
      ff.push_back(static_cast<float>(f));
    }
    w.add_tensor("rope_freqs.weight", {head_dim / 2}, tensor_type::f32, ff);
  }
  if (!o.tied)
    matrix("output.weight", o.dim, n_vocab, s_in * 4.0f);
  return w;
}

void make_test_model(const test_model_options& o, const std::string& path) {
  build_test_model(o).write(path);
}

} // namespace exo::model
