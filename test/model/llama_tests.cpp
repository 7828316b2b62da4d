// The engine against an independent reference: a plain scalar forward pass
// in double precision that shares no code with the engine (it decodes the
// tensors itself and reads the file only through the GGUF reader).

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "core/gguf/gguf.hpp"
#include "core/gguf/quant.hpp"
#include "core/model/llama_model.hpp"
#include "core/model/sampler.hpp"
#include "core/model/test_model.hpp"
#include "test/model/temp_file.hpp"

using namespace exo::model;

namespace {

using vec = std::vector<double>;

double half_to_double(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(m + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}

/// x rounded to the nearest half (ties to even; no overflow here): how
/// llama.cpp's F16 KV cache, and so exo's attention, holds keys and values.
double round_half(double x) {
  if (x == 0)
    return x;
  int e;
  std::frexp(x, &e);
  const int q = std::max(e - 11, -24); // 11 significant bits, or 2^-24 steps
  return std::nearbyint(std::ldexp(x, -q)) * std::ldexp(1.0, q);
}

/// A tensor decoded to doubles, rows of ne[0].
struct ref_tensor {
  size_t cols = 0, rows = 1;
  vec v;
};

ref_tensor load(const gguf_file& f, const std::string& name) {
  auto& t = f.tensor(name);
  ref_tensor r;
  r.cols = t.ne[0];
  r.rows = t.ne.size() > 1 ? t.ne[1] : 1;
  r.v.resize(r.cols * r.rows);
  for (size_t i = 0; i < r.v.size(); ++i) {
    if (t.type == tensor_type::f32) {
      float x;
      std::memcpy(&x, t.data + 4 * i, 4);
      r.v[i] = x;
    } else if (t.type == tensor_type::f16) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      r.v[i] = half_to_double(h);
    } else if (t.type == tensor_type::q8_0) {
      const uint8_t* blk = t.data + (i / 32) * 34;
      uint16_t d;
      std::memcpy(&d, blk, 2);
      r.v[i] = half_to_double(d) * static_cast<int8_t>(blk[2 + i % 32]);
    } else {
      break; // decoded below, a row at a time
    }
  }
  if (t.type != tensor_type::f32 && t.type != tensor_type::f16
      && t.type != tensor_type::q8_0) {
    // ggml's to_float (bit-exact against libggml in test/quants).
    std::vector<float> row(r.cols);
    const size_t rb = row_bytes(t.type, r.cols);
    for (size_t y = 0; y < r.rows; ++y) {
      dequantize(t.type, t.data + y * rb, row.data(), r.cols);
      for (size_t c = 0; c < r.cols; ++c)
        r.v[y * r.cols + c] = row[c];
    }
  }
  return r;
}

vec matvec(const ref_tensor& w, const vec& x) {
  vec y(w.rows, 0.0);
  for (size_t r = 0; r < w.rows; ++r)
    for (size_t c = 0; c < w.cols; ++c)
      y[r] += w.v[r * w.cols + c] * x[c];
  return y;
}

vec rmsnorm(const vec& x, const ref_tensor& w, double eps) {
  double ss = 0;
  for (double a : x)
    ss += a * a;
  double s = 1.0 / std::sqrt(ss / x.size() + eps);
  vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = x[i] * s * w.v[i];
  return y;
}

/// Rotates pair i of each head, (x[2i], x[2i+1]) or with `neox` (x[i],
/// x[i + n_rot/2]), by pos * base^(-2i / n_rot).
void rope(vec& x, size_t heads, size_t hd, size_t n_rot, size_t pos,
          double base, bool neox, const vec* ff) {
  for (size_t h = 0; h < heads; ++h)
    for (size_t i = 0; i < n_rot / 2; ++i) {
      double theta = pos * std::pow(base, -2.0 * i / n_rot);
      if (ff)
        theta /= (*ff)[i]; // Llama 3's rope_freqs
      size_t i0 = h * hd + (neox ? i : 2 * i);
      size_t i1 = i0 + (neox ? n_rot / 2 : 1);
      double a = x[i0], b = x[i1];
      x[i0] = a * std::cos(theta) - b * std::sin(theta);
      x[i1] = a * std::sin(theta) + b * std::cos(theta);
    }
}

/// RMSNorm of each head of x on its own (qwen3's Q/K norms).
void head_norm(vec& x, size_t hd, const ref_tensor& w, double eps) {
  for (size_t h = 0; h < x.size() / hd; ++h) {
    vec part(x.begin() + h * hd, x.begin() + (h + 1) * hd);
    auto y = rmsnorm(part, w, eps);
    std::copy(y.begin(), y.end(), x.begin() + h * hd);
  }
}

void add_to(vec& x, const ref_tensor& b) {
  for (size_t i = 0; i < x.size(); ++i)
    x[i] += b.v[i];
}

/// Logits of every position of `tokens`.
std::vector<vec> reference_logits(const gguf_file& f,
                                  const std::vector<int32_t>& tokens) {
  // The architectures as llama.cpp builds them: qwen2 adds Q/K/V biases,
  // qwen3 RMSNorms each Q and K head; both rotate NEOX pairs.
  const std::string a = f.get_string("general.architecture");
  const bool neox = a == "qwen2" || a == "qwen3";
  const size_t n_layer = f.get_uint(a + ".block_count");
  const size_t n_embd = f.get_uint(a + ".embedding_length");
  const size_t n_head = f.get_uint(a + ".attention.head_count");
  const size_t n_kv = f.get_uint(a + ".attention.head_count_kv");
  const size_t n_rot = f.get_uint(a + ".rope.dimension_count");
  const double base = f.get_float(a + ".rope.freq_base");
  const double eps = f.get_float(a + ".attention.layer_norm_rms_epsilon");
  const size_t hd = f.find(a + ".attention.key_length")
                      ? f.get_uint(a + ".attention.key_length")
                      : n_embd / n_head;
  auto embd = load(f, "token_embd.weight");
  ref_tensor freqs;
  const vec* ff = nullptr;
  if (f.find_tensor("rope_freqs.weight")) {
    freqs = load(f, "rope_freqs.weight");
    ff = &freqs.v;
  }
  const size_t n = tokens.size();
  std::vector<vec> x(n);
  for (size_t t = 0; t < n; ++t)
    x[t] = vec(embd.v.begin() + tokens[t] * n_embd,
               embd.v.begin() + (tokens[t] + 1) * n_embd);
  for (size_t l = 0; l < n_layer; ++l) {
    auto p = "blk." + std::to_string(l) + ".";
    auto an = load(f, p + "attn_norm.weight");
    auto wq = load(f, p + "attn_q.weight"), wk = load(f, p + "attn_k.weight"),
         wv = load(f, p + "attn_v.weight"),
         wo = load(f, p + "attn_output.weight");
    auto fn = load(f, p + "ffn_norm.weight");
    auto wg = load(f, p + "ffn_gate.weight"), wu = load(f, p + "ffn_up.weight"),
         wd = load(f, p + "ffn_down.weight");
    std::vector<vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      auto h = rmsnorm(x[t], an, eps);
      q[t] = matvec(wq, h);
      k[t] = matvec(wk, h);
      v[t] = matvec(wv, h);
      if (a == "qwen2") {
        add_to(q[t], load(f, p + "attn_q.bias"));
        add_to(k[t], load(f, p + "attn_k.bias"));
        add_to(v[t], load(f, p + "attn_v.bias"));
      }
      if (a == "qwen3") {
        head_norm(q[t], hd, load(f, p + "attn_q_norm.weight"), eps);
        head_norm(k[t], hd, load(f, p + "attn_k_norm.weight"), eps);
      }
      rope(q[t], n_head, hd, n_rot, t, base, neox, ff);
      rope(k[t], n_kv, hd, n_rot, t, base, neox, ff);
    }
    for (size_t t = 0; t < n; ++t) {
      vec att(n_head * hd, 0.0);
      for (size_t h = 0; h < n_head; ++h) {
        size_t g = h / (n_head / n_kv);
        vec s(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (size_t i = 0; i < hd; ++i)
            d += q[t][h * hd + i] * round_half(k[j][g * hd + i]);
          s[j] = d / std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (auto& e : s)
          sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j)
          for (size_t i = 0; i < hd; ++i)
            att[h * hd + i] += s[j] / sum * round_half(v[j][g * hd + i]);
      }
      auto o = matvec(wo, att);
      for (size_t i = 0; i < n_embd; ++i)
        x[t][i] += o[i];
      auto h = rmsnorm(x[t], fn, eps);
      auto gt = matvec(wg, h), up = matvec(wu, h);
      for (size_t i = 0; i < gt.size(); ++i)
        gt[i] = gt[i] / (1.0 + std::exp(-gt[i])) * up[i];
      auto dn = matvec(wd, gt);
      for (size_t i = 0; i < n_embd; ++i)
        x[t][i] += dn[i];
    }
  }
  auto on = load(f, "output_norm.weight");
  auto head = f.find_tensor("output.weight") ? load(f, "output.weight") : embd;
  std::vector<vec> out(n);
  for (size_t t = 0; t < n; ++t)
    out[t] = matvec(head, rmsnorm(x[t], on, eps));
  return out;
}

/// max |a - r| / max |r|.
double rel_error(const float* a, const vec& r) {
  double md = 0, mr = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    md = std::max(md, std::fabs(a[i] - r[i]));
    mr = std::max(mr, std::fabs(r[i]));
  }
  return md / mr;
}

test_model_options small(tensor_type type, bool tied = false,
                         const std::string& arch = "llama") {
  test_model_options o;
  o.arch = arch;
  o.layers = 3;
  o.dim = 64;
  o.ff = 128;
  o.heads = 4;
  o.kv_heads = 2;
  o.vocab = 400;
  o.ctx = 64;
  o.type = type;
  o.tied = tied;
  o.seed = 7;
  return o;
}

std::shared_ptr<llama_model> model_from(const test_model_options& o) {
  auto b = build_test_model(o).bytes();
  return std::make_shared<llama_model>(gguf_file::parse(b.data(), b.size()));
}

/// Compares the engine with the reference over a 6-token batch followed by
/// 3 single tokens; returns the largest relative error seen.
double worst_error(const test_model_options& o) {
  auto m = model_from(o);
  const std::vector<int32_t> toks = {1, 300, 17, 42, 260, 99, 5, 311, 64};
  auto ref = reference_logits(m->file(), toks);
  llama_pipeline pipe(m, {0, m->hparams().n_layer});
  auto seq = pipe.new_sequence(32);
  const size_t nv = m->hparams().n_vocab;
  double worst = 0;
  auto batch = pipe.eval(seq, {toks.begin(), toks.begin() + 6}, true);
  for (size_t t = 0; t < 6; ++t)
    worst = std::max(worst, rel_error(batch.data() + t * nv, ref[t]));
  for (size_t t = 6; t < toks.size(); ++t) {
    auto one = pipe.eval(seq, {toks[t]});
    worst = std::max(worst, rel_error(one.data(), ref[t]));
  }
  return worst;
}

std::vector<int32_t> greedy(const llama_pipeline& pipe,
                            std::vector<int32_t> prompt, size_t n,
                            sampler& smp, uint32_t nv) {
  auto seq = pipe.new_sequence(64);
  auto logits = pipe.eval(seq, prompt);
  std::vector<int32_t> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(smp.sample(logits.data(), nv));
    logits = pipe.eval(seq, {out.back()});
  }
  return out;
}

} // namespace

// The reference reads keys and values as halves, as llama.cpp's F16 KV cache
// holds them; otherwise it computes in double. exo's attention, as
// llama.cpp's, also rounds Q to half and sums softmax x V in a half
// accumulator for batches under 64 tokens: 2^-11 relative on the attention
// output, about 2.5e-4 on these logits (1e-4 before, with F32 attention).
TEST_CASE("F32 logits agree with the double-precision reference within "
          "5e-4 relative",
          "[llama]") {
  CHECK(worst_error(small(tensor_type::f32)) < 5e-4);
}

TEST_CASE("a tied output head uses the token embedding like the reference",
          "[llama]") {
  auto o = small(tensor_type::f32, true);
  CHECK(model_from(o)->hparams().tied_output);
  CHECK(worst_error(o) < 5e-4);
}

TEST_CASE("F16 logits agree with the reference within 1e-2 relative "
          "(activations rounded to half, as llama.cpp does)",
          "[llama]") {
  CHECK(worst_error(small(tensor_type::f16)) < 1e-2);
}

TEST_CASE("Q8_0 logits agree with the reference within 5e-2 relative "
          "(activations quantised to Q8_0, as llama.cpp does)",
          "[llama]") {
  CHECK(worst_error(small(tensor_type::q8_0)) < 5e-2);
}

TEST_CASE("every weight format and llama.cpp's mixes agree with the "
          "reference within 5e-2 relative (activations rounded to Q8_K, "
          "Q8_0, Q8_1 or BF16, as llama.cpp does)",
          "[llama]") {
  struct mixed {
    tensor_type type;
    file_type::mix mix;
  };
  std::vector<mixed> cases;
  for (auto t : all_tensor_types())
    cases.push_back({t, file_type::mix::none});
  cases.push_back({tensor_type::q3_k, file_type::mix::q3_k_m});
  cases.push_back({tensor_type::q4_k, file_type::mix::q4_k_m});
  cases.push_back({tensor_type::q5_k, file_type::mix::q5_k_m});
  for (auto& c : cases) {
    auto o = small(c.type);
    o.mix = c.mix;
    o.layers = 2;
    o.dim = 256; // K-quant rows are 256 wide
    o.ff = 256;
    o.tied = c.mix == file_type::mix::q4_k_m; // a Q6_K token_embd
    INFO(to_string(file_type{c.type, c.mix}));
    CHECK(worst_error(o) < 5e-2);
  }
}

TEST_CASE("a Q4_K_M model mixes formats per tensor as llama-quantize does",
          "[llama]") {
  auto o = small(tensor_type::q4_k);
  o.mix = file_type::mix::q4_k_m;
  o.layers = 8;
  o.dim = 256;
  o.ff = 256;
  auto m = model_from(o);
  auto& f = m->file();
  CHECK(f.tensor("output.weight").type == tensor_type::q6_k);
  CHECK(f.tensor("token_embd.weight").type == tensor_type::q4_k);
  CHECK(f.tensor("output_norm.weight").type == tensor_type::f32);
  // use_more_bits(i, 8): layers 0, 3, 6, 7.
  for (uint32_t l = 0; l < 8; ++l) {
    auto p = "blk." + std::to_string(l) + ".";
    const bool more = l == 0 || l == 3 || l == 6 || l == 7;
    INFO(l);
    auto want = more ? tensor_type::q6_k : tensor_type::q4_k;
    CHECK(f.tensor(p + "attn_v.weight").type == want);
    CHECK(f.tensor(p + "ffn_down.weight").type == want);
    CHECK(f.tensor(p + "attn_q.weight").type == tensor_type::q4_k);
    CHECK(f.tensor(p + "ffn_up.weight").type == tensor_type::q4_k);
  }
  CHECK(f.get_uint("general.file_type") == 15);
  o.tied = true;
  CHECK(model_from(o)->file().tensor("token_embd.weight").type
        == tensor_type::q6_k);
  o.mix = file_type::mix::q3_k_m;
  o.type = tensor_type::q3_k;
  auto m3 = model_from(o);
  CHECK(m3->file().tensor("blk.0.attn_v.weight").type == tensor_type::q5_k);
  CHECK(m3->file().tensor("blk.2.attn_v.weight").type == tensor_type::q4_k);
  CHECK(m3->file().tensor("blk.1.attn_output.weight").type
        == tensor_type::q4_k);
  CHECK(m3->file().tensor("blk.1.ffn_down.weight").type == tensor_type::q4_k);
  CHECK(m3->file().tensor("blk.1.ffn_gate.weight").type == tensor_type::q3_k);
}

TEST_CASE("a K-quant model with rows that are not whole blocks is refused "
          "naming the format",
          "[llama]") {
  auto o = small(tensor_type::q4_k);
  CHECK_THROWS_WITH(build_test_model(o),
                    Catch::Contains("Q4_K needs dim and ff to be multiples "
                                    "of 256"));
}

TEST_CASE("one stage and three stages give identical logits", "[llama]") {
  auto o = small(tensor_type::f16);
  o.layers = 4;
  auto m = model_from(o);
  llama_pipeline one(m, {0, 4});
  llama_pipeline three(m, {0, 1, 3, 4});
  REQUIRE(three.stages().size() == 3);
  CHECK_FALSE(three.stages()[1].is_first());
  CHECK_FALSE(three.stages()[1].is_last());
  auto s1 = one.new_sequence(32);
  auto s3 = three.new_sequence(32);
  std::vector<int32_t> prompt = {1, 270, 280, 290, 300};
  CHECK(one.eval(s1, prompt, true) == three.eval(s3, prompt, true));
  for (int32_t t : {10, 20, 30})
    CHECK(one.eval(s1, {t}) == three.eval(s3, {t}));
}

TEST_CASE("interleaved sequences do not disturb each other", "[llama]") {
  auto m = model_from(small(tensor_type::f32));
  llama_pipeline pipe(m, {0, 1, 3});
  auto a = pipe.new_sequence(16), b = pipe.new_sequence(16),
       alone = pipe.new_sequence(16);
  pipe.eval(a, {1, 2, 3, 4, 5});
  pipe.eval(b, {1, 9});
  pipe.eval(alone, {1, 2, 3, 4, 5});
  auto la = pipe.eval(a, {7});
  pipe.eval(b, {8});
  CHECK(la == pipe.eval(alone, {7}));
  CHECK(a.n_past() == 6);
  CHECK(b.n_past() == 3);
}

TEST_CASE("greedy generation is deterministic and the same across stage "
          "splits",
          "[llama]") {
  auto m = model_from(small(tensor_type::q8_0));
  const uint32_t nv = m->hparams().n_vocab;
  llama_pipeline one(m, {0, 3}), split(m, {0, 2, 3});
  sampler g1({}), g2({}), g3({});
  auto a = greedy(one, {1, 265, 270}, 12, g1, nv);
  auto b = greedy(one, {1, 265, 270}, 12, g2, nv);
  auto c = greedy(split, {1, 265, 270}, 12, g3, nv);
  CHECK(a == b);
  CHECK(a == c);
}

TEST_CASE("sampled generation repeats for a seed and differs across seeds",
          "[llama]") {
  auto m = model_from(small(tensor_type::f32));
  const uint32_t nv = m->hparams().n_vocab;
  llama_pipeline pipe(m, {0, 3});
  auto run = [&](uint64_t seed) {
    sampler_params p;
    p.temperature = 1.5f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.seed = seed;
    sampler s(p);
    return greedy(pipe, {1, 300}, 16, s, nv);
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
}

TEST_CASE("bad run-time input is refused with a clear error", "[llama]") {
  auto m = model_from(small(tensor_type::f32));
  llama_pipeline pipe(m, {0, 3});
  auto seq = pipe.new_sequence(4);
  CHECK_THROWS_WITH(pipe.eval(seq, {1, 400}),
                    Catch::Contains("token id 400 is outside the vocabulary"));
  CHECK_THROWS_WITH(pipe.eval(seq, {1, 2, 3, 4, 5}),
                    Catch::Contains("context full"));
  CHECK_THROWS_WITH(llama_pipeline(m, {0, 4}),
                    Catch::Contains("stage bounds"));
  CHECK_THROWS_WITH(llama_stage(m, 2, 1), Catch::Contains("invalid layer"));
  llama_stage mid(m, 1, 2);
  std::vector<float> x(64);
  int32_t tok = 1;
  CHECK_THROWS_WITH(mid.embed(&tok, 1, x.data()),
                    Catch::Contains("does not start at layer 0"));
}

// -- architectures: qwen2 (Q/K/V biases, NEOX rope) and qwen3 (per-head
// Q/K RMSNorm, NEOX rope, a head size of its own) ---------------------------

TEST_CASE("qwen2 and qwen3 files load with their architecture's traits",
          "[llama][arch]") {
  auto q2 = model_from(small(tensor_type::f32, false, "qwen2"));
  CHECK(q2->hparams().arch() == model_arch::qwen2);
  CHECK(q2->hparams().rope_neox());
  CHECK(q2->layer(0).bq != nullptr);
  CHECK(q2->layer(0).q_norm == nullptr);
  auto o3 = small(tensor_type::f32, false, "qwen3");
  o3.head_dim = 32; // 4 heads of 32 on a 64-wide model, as Qwen3's 128
  auto q3 = model_from(o3);
  CHECK(q3->hparams().arch() == model_arch::qwen3);
  CHECK(q3->hparams().head_dim == 32);
  CHECK(q3->hparams().n_embd_q() == 128);
  CHECK(q3->layer(2).k_norm != nullptr);
  CHECK(q3->layer(2).bq == nullptr);
  auto l = model_from(small(tensor_type::f32));
  CHECK(l->hparams().arch() == model_arch::llama);
  CHECK_FALSE(l->hparams().rope_neox());
  CHECK(l->layer(0).bq == nullptr);
}

TEST_CASE("Llama 3's rope_freqs divide the rope angles as in the reference",
          "[llama][arch]") {
  auto o = small(tensor_type::f32);
  o.llama3_rope = true;
  o.rope_base = 500000.0f;
  auto m = model_from(o);
  REQUIRE(m->rope_freqs() != nullptr);
  CHECK(m->rope_freqs()[0] == 1.0f);                    // high frequency
  CHECK(m->rope_freqs()[m->hparams().n_rot / 2 - 1] == 8.0f); // low
  CHECK(worst_error(o) < 5e-4);
  o.arch = "qwen3"; // the factors apply to NEOX pairs alike
  CHECK(worst_error(o) < 5e-4);
}

TEST_CASE("qwen2 logits agree with the reference (biases, NEOX rope)",
          "[llama][arch]") {
  CHECK(worst_error(small(tensor_type::f32, false, "qwen2")) < 5e-4);
  CHECK(worst_error(small(tensor_type::f32, true, "qwen2")) < 5e-4);
  CHECK(worst_error(small(tensor_type::f16, false, "qwen2")) < 1e-2);
  CHECK(worst_error(small(tensor_type::q8_0, false, "qwen2")) < 5e-2);
}

TEST_CASE("qwen3 logits agree with the reference (Q/K norms, NEOX rope, "
          "head size other than dim / heads)",
          "[llama][arch]") {
  CHECK(worst_error(small(tensor_type::f32, false, "qwen3")) < 5e-4);
  CHECK(worst_error(small(tensor_type::f32, true, "qwen3")) < 5e-4);
  auto o = small(tensor_type::f32, false, "qwen3");
  o.head_dim = 32;
  CHECK(worst_error(o) < 5e-4);
  o.type = tensor_type::q8_0;
  CHECK(worst_error(o) < 5e-2);
  CHECK(worst_error(small(tensor_type::f16, false, "qwen3")) < 1e-2);
}

TEST_CASE("qwen greedy generation is the same across stage splits",
          "[llama][arch]") {
  for (const char* arch : {"qwen2", "qwen3"}) {
    INFO(arch);
    auto m = model_from(small(tensor_type::q8_0, false, arch));
    const uint32_t nv = m->hparams().n_vocab;
    llama_pipeline one(m, {0, 3}), split(m, {0, 1, 3});
    sampler g1({}), g2({});
    CHECK(greedy(one, {1, 265, 270}, 12, g1, nv)
          == greedy(split, {1, 265, 270}, 12, g2, nv));
  }
}

namespace {

/// The model of `o` with its hyper-parameter keys also written under
/// `arch` and general.architecture set to it: a file of another
/// architecture that lacks that architecture's own tensors.
std::vector<uint8_t> as_arch(const test_model_options& o,
                             const std::string& arch) {
  auto w = build_test_model(o);
  w.set_string("general.architecture", arch);
  w.set_u32(arch + ".block_count", o.layers);
  w.set_u32(arch + ".context_length", o.ctx);
  w.set_u32(arch + ".embedding_length", o.dim);
  w.set_u32(arch + ".feed_forward_length", o.ff);
  w.set_u32(arch + ".attention.head_count", o.heads);
  w.set_u32(arch + ".attention.head_count_kv", o.kv_heads);
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", o.rms_eps);
  return w.bytes();
}

std::string load_error(const std::vector<uint8_t>& b) {
  try {
    llama_model m(gguf_file::parse(b.data(), b.size()));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("files of other architectures, or lacking their architecture's "
          "tensors, are refused naming the problem",
          "[llama][arch]") {
  auto o = small(tensor_type::f32);
  CHECK_THAT(load_error(as_arch(o, "gemma2")),
             Catch::Contains("unsupported architecture 'gemma2'"));
  CHECK_THAT(load_error(as_arch(o, "qwen2")),
             Catch::Contains("blk.0.attn_q.bias"));
  CHECK_THAT(load_error(as_arch(o, "qwen3")),
             Catch::Contains("blk.0.attn_q_norm.weight"));
  // Keys are read under the file's own architecture.
  auto w = build_test_model(o);
  w.set_string("general.architecture", "qwen2");
  auto b = w.bytes();
  CHECK_THAT(load_error(b), Catch::Contains("qwen2.block_count"));
}

TEST_CASE("rope scalings other than none are refused naming the key",
          "[llama][arch]") {
  auto o = small(tensor_type::f32);
  auto with = [&](auto&& set) {
    auto w = build_test_model(o);
    set(w);
    return load_error(w.bytes());
  };
  CHECK_THAT(with([](gguf_writer& w) {
               w.set_string("llama.rope.scaling.type", "yarn");
               w.set_f32("llama.rope.scaling.factor", 4.0f);
             }),
             Catch::Contains("llama.rope.scaling.type 'yarn'"));
  CHECK_THAT(with([](gguf_writer& w) {
               w.set_f32("llama.rope.scaling.factor", 8.0f);
             }),
             Catch::Contains("linear rope scaling"));
  // Factor 1 and type none change nothing, as in llama.cpp.
  CHECK(with([](gguf_writer& w) {
          w.set_f32("llama.rope.scaling.factor", 1.0f);
        }).empty());
  CHECK(with([](gguf_writer& w) {
          w.set_string("llama.rope.scaling.type", "none");
          w.set_f32("llama.rope.scaling.factor", 8.0f);
        }).empty());
}

TEST_CASE("random mutations of qwen2 and qwen3 files are refused or load, "
          "never crash",
          "[llama][arch][fuzz]") {
  for (const char* arch : {"qwen2", "qwen3"}) {
    auto o = small(tensor_type::q8_0, false, arch);
    o.layers = 1;
    if (o.arch == "qwen3")
      o.head_dim = 32;
    const auto good = build_test_model(o).bytes();
    std::mt19937_64 rng(99);
    int refused = 0, accepted = 0;
    for (int i = 0; i < 1500; ++i) {
      auto b = good;
      if (rng() % 3 == 0) {
        b.resize(rng() % b.size());
      } else {
        // Small integers over the header (keys, shapes, types, offsets).
        size_t p = rng() % std::min<size_t>(b.size() - 4, 16000);
        uint32_t v = static_cast<uint32_t>(rng() % 70);
        std::memcpy(b.data() + p, &v, 4);
      }
      try {
        auto m = std::make_shared<llama_model>(
          gguf_file::parse(b.data(), b.size()));
        llama_pipeline pipe(m, {0, m->hparams().n_layer});
        auto seq = pipe.new_sequence(4);
        (void)pipe.eval(seq, {1, 2});
        ++accepted;
      } catch (const gguf_error&) {
        ++refused;
      } catch (const model_error&) {
        ++refused;
      }
    }
    INFO(arch);
    CHECK(refused + accepted == 1500);
    CHECK(refused > 300);
  }
}

TEST_CASE("a NaN in the weights gives non-finite logits that callers catch "
          "before sampling",
          "[llama]") {
  auto b = build_test_model(small(tensor_type::f32)).bytes();
  {
    auto f = gguf_file::parse(b.data(), b.size());
    auto& t = f->tensor("output_norm.weight");
    const float nan = std::nanf("");
    std::memcpy(b.data() + f->data_offset() + t.offset + 4 * sizeof(float),
                &nan, sizeof nan);
  }
  auto m = std::make_shared<llama_model>(gguf_file::parse(b.data(), b.size()));
  llama_pipeline pipe(m, {0, m->hparams().n_layer});
  auto seq = pipe.new_sequence(8);
  auto logits = pipe.eval(seq, {1, 2, 3});
  CHECK(sampler::first_non_finite(logits.data(), logits.size())
        < logits.size());
  std::vector<float> fine = {0.5f, -1.0f, 3.0f};
  CHECK(sampler::first_non_finite(fine.data(), fine.size()) == 3);
  fine[1] = INFINITY;
  CHECK(sampler::first_non_finite(fine.data(), fine.size()) == 1);
}
