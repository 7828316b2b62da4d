// Conformance of the Llama operations (rms_norm, rope, attention, silu_mul,
// F32/F16/Q8_0 matrix products) on every device the factory finds, against
// double-precision references written here, independent of the backends'
// host kernels.
//
// Bounds: f32 operations agree within 1e-4 relative (to max(1, |want|)).
// Products with F16 weights see activations rounded to half (as llama.cpp
// does), so they agree within 1e-3 of sum_i |a_i w_i| (half's rounding is
// 2^-11 relative). Products with Q8_0 weights see activations quantized to
// Q8_0, so each product term may be off by one quantization step of its
// activation block: the bound is sum_i |w_i| * amax(block of a_i) / 127 +
// 1e-3 * sum_i |a_i w_i|.

#include "backends/factory/factory.hpp"
#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"
#include "test/support/random.hpp"

#include "test/support/emulated_gpu.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace exo::backend;

using exo::test::random_floats;

namespace {

registry& devices() {
  static registry reg = [] {
    factory_options opts;
    opts.use_environment = false;
    opts.sim.devices = {{"a100-40g", ""}};
    auto r = registry::create(opts);
    REQUIRE(r.ok());
    return std::move(*r);
  }();
  return reg;
}

/// The registry's devices and the emulated GPU (test/support/emulated_gpu.hpp).
std::vector<device*> every_device() {
  return exo::test::with_emulated_gpu(devices());
}

/// body(device, kv) for every device and KV cache type, each device in a
/// section of its own, the type in the messages.
template <class F>
void on_every_device_and_kv(F body) {
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      for (auto kv : {kv_type::f32, kv_type::f16, kv_type::q8_0}) {
        INFO("kv " << to_string(kv));
        body(*dev, kv);
      }
    }
  }
}

std::unique_ptr<buffer> alloc(device& dev, std::size_t n) {
  auto r = dev.allocate(n);
  REQUIRE(r.ok());
  return std::move(*r);
}

template <class T>
std::unique_ptr<buffer> upload(device& dev, const std::vector<T>& v,
                               std::size_t offset = 0,
                               std::size_t extra = 0) {
  auto b = alloc(dev, offset + v.size() * sizeof(T) + extra);
  REQUIRE(dev.write(*b, offset, v.data(), v.size() * sizeof(T)).ok());
  return b;
}

std::vector<float> download(device& dev, const buffer& buf, std::size_t n,
                            std::size_t offset = 0) {
  std::vector<float> v(n);
  REQUIRE(dev.read(buf, offset, v.data(), n * sizeof(float)).ok());
  return v;
}

/// Requires the first n floats of got and want to have the same bits,
/// naming the first element that does not.
void require_bits(const std::vector<float>& got, const std::vector<float>& want,
                  std::size_t n) {
  REQUIRE(got.size() >= n);
  REQUIRE(want.size() >= n);
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
      REQUIRE(std::memcmp(&got[i], &want[i], 4) == 0);
    }
}

void require_close(const std::vector<float>& got,
                   const std::vector<double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    double tol = rel * std::max(1.0, std::fabs(want[i]));
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= tol);
  }
}

// -- encodings, written independently of backends/host_kernels ---------------

/// IEEE half bits -> value, by the definition.
double half_value(std::uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v = exp == 0 ? std::ldexp(mant, -24)
                      : std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}

/// value -> nearest IEEE half bits (ties to even), for finite values below
/// 65504, computed in double where every step is exact.
std::uint16_t half_bits(double x) {
  std::uint16_t sign = x < 0 ? 0x8000 : 0;
  double a = std::fabs(x);
  if (a < std::ldexp(1.0, -14)) // subnormal: units of 2^-24
    return static_cast<std::uint16_t>(
      sign | static_cast<int>(std::nearbyint(std::ldexp(a, 24))));
  int e = std::ilogb(a);
  auto mant = static_cast<int>(std::nearbyint((std::ldexp(a, -e) - 1) * 1024));
  if (mant == 1024) {
    mant = 0;
    ++e;
  }
  return static_cast<std::uint16_t>(sign | ((e + 15) << 10) | mant);
}

/// A weight matrix [rows x cols] encoded as t, and its exact values.
struct encoded {
  std::vector<std::uint8_t> bytes;
  std::vector<double> values;
};

encoded encode(weight_type t, const std::vector<float>& w) {
  encoded out;
  out.values.resize(w.size());
  switch (t) {
    case weight_type::f32:
      out.bytes.resize(w.size() * 4);
      std::memcpy(out.bytes.data(), w.data(), out.bytes.size());
      for (std::size_t i = 0; i < w.size(); ++i)
        out.values[i] = w[i];
      break;
    case weight_type::f16:
      out.bytes.resize(w.size() * 2);
      for (std::size_t i = 0; i < w.size(); ++i) {
        auto h = half_bits(w[i]);
        std::memcpy(out.bytes.data() + 2 * i, &h, 2);
        out.values[i] = half_value(h);
      }
      break;
    case weight_type::q8_0:
      out.bytes.resize(w.size() / 32 * 34);
      for (std::size_t b = 0; b < w.size() / 32; ++b) {
        double amax = 0;
        for (int j = 0; j < 32; ++j)
          amax = std::max(amax, std::fabs(static_cast<double>(w[b * 32 + j])));
        auto d = half_bits(amax / 127.0);
        double dv = half_value(d);
        std::uint8_t* blk = out.bytes.data() + b * 34;
        std::memcpy(blk, &d, 2);
        for (int j = 0; j < 32; ++j) {
          double q = dv > 0 ? std::round(w[b * 32 + j] / dv) : 0.0;
          q = std::max(-127.0, std::min(127.0, q));
          auto qi = static_cast<std::int8_t>(q);
          std::memcpy(blk + 2 + j, &qi, 1);
          out.values[b * 32 + j] = dv * qi;
        }
      }
      break;
    default: // the other formats: ggml's quantizers (quantized() below)
      FAIL("encode() writes f32, f16 and q8_0 only");
  }
  return out;
}

/// W [n x k] in format t as ggml's reference quantizers write it, row by
/// row (quant_formats.hpp).
std::vector<std::uint8_t> quantized(weight_type t, const std::vector<float>& w,
                                    std::size_t n, std::size_t k) {
  const auto g = static_cast<quant::ggml_type>(ggml_type_id(t));
  const std::size_t rb = *weight_row_bytes(t, k);
  std::vector<std::uint8_t> bytes(rb * n);
  for (std::size_t r = 0; r < n; ++r)
    quant::quantize_row(g, w.data() + r * k, bytes.data() + r * rb, k);
  return bytes;
}

// -- references ---------------------------------------------------------------

std::vector<double> rms_norm_ref(const std::vector<float>& x,
                                 const std::vector<float>& w,
                                 std::size_t rows, std::size_t dim,
                                 double eps) {
  std::vector<double> y(rows * dim);
  for (std::size_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::size_t i = 0; i < dim; ++i)
      ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    double s = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
    for (std::size_t i = 0; i < dim; ++i)
      y[r * dim + i] = x[r * dim + i] * s * w[i];
  }
  return y;
}

std::vector<double> rope_ref(const std::vector<float>& x,
                             const std::vector<std::int32_t>& pos,
                             const std::vector<float>* ff,
                             const rope_dims& d) {
  std::vector<double> y(x.begin(), x.end());
  for (std::size_t r = 0; r < d.rows; ++r)
    for (std::size_t h = 0; h < d.heads; ++h) {
      double* v = y.data() + (r * d.heads + h) * d.head_dim;
      for (std::size_t i = 0; 2 * i < d.n_rot; ++i) {
        double theta = pos[r]
                       * std::pow(static_cast<double>(d.freq_base),
                                  -2.0 * static_cast<double>(i)
                                    / static_cast<double>(d.n_rot));
        if (ff)
          theta /= (*ff)[i];
        double c = std::cos(theta), s = std::sin(theta);
        // NORMAL pairs (2i, 2i+1); NEOX pairs (i, i + n_rot/2).
        const std::size_t i0 = d.neox ? i : 2 * i;
        const std::size_t i1 = d.neox ? i + d.n_rot / 2 : 2 * i + 1;
        double x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * c - x1 * s;
        v[i1] = x0 * s + x1 * c;
      }
    }
  return y;
}

std::vector<double> attention_ref(const std::vector<float>& q,
                                  const std::vector<float>& k,
                                  const std::vector<float>& v,
                                  const attention_dims& d) {
  const std::size_t row = d.n_heads * d.head_dim;
  const std::size_t group = d.n_heads / d.n_kv_heads;
  std::vector<double> out(d.n_tokens * row);
  // The contract: keys and values are read as halves (llama.cpp's F16 KV
  // cache); everything else in double.
  auto half = [](float x) { return half_value(half_bits(x)); };
  for (std::size_t t = 0; t < d.n_tokens; ++t)
    for (std::size_t h = 0; h < d.n_heads; ++h) {
      const std::size_t n_pos = d.pos0 + t + 1;
      const std::size_t kvh = (h / group) * d.head_dim;
      std::vector<double> s(n_pos);
      double mx = -std::numeric_limits<double>::infinity();
      for (std::size_t p = 0; p < n_pos; ++p) {
        double acc = 0;
        for (std::size_t i = 0; i < d.head_dim; ++i)
          acc += static_cast<double>(q[t * row + h * d.head_dim + i])
                 * half(k[p * d.kv_stride + kvh + i]);
        s[p] = acc * d.scale;
        mx = std::max(mx, s[p]);
      }
      double sum = 0;
      for (auto& x : s) {
        x = std::exp(x - mx);
        sum += x;
      }
      for (std::size_t i = 0; i < d.head_dim; ++i) {
        double acc = 0;
        for (std::size_t p = 0; p < n_pos; ++p)
          acc += s[p] / sum * half(v[p * d.kv_stride + kvh + i]);
        out[t * row + h * d.head_dim + i] = acc;
      }
    }
  return out;
}

/// Whether dev's attention has host::attention's bits for d: the cpu and
/// sim devices always; CUDA and HIP (and the emulated GPU) on the host's
/// one_chunk path (f32 and f16 caches below 64 tokens, q8_0 caches always:
/// attention_exact_kernel), and with heads wider than 256 (handed to the
/// host kernel).
bool host_attention_bits(device& dev, const attention_dims& d) {
  auto k = dev.properties().kind;
  if (k == backend_kind::cpu || k == backend_kind::sim)
    return true;
  return (k == backend_kind::cuda || k == backend_kind::hip)
         && (d.kv == kv_type::q8_0 || d.head_dim > 256
             || !host::attention_tiled_path(d));
}

/// GPU kernels sum in F32 (1e-4). llama.cpp's CPU flash attention (the
/// cpu and sim devices, and the GPUs' decode kernel): below 64 tokens Q is
/// rounded to half (scores move by about 2^-11 of |q||k|) and the
/// weighted sum of V sits in a half accumulator rounded after every
/// position (11 significant bits); 4 * 2^-11 bounds both (1e-3 is the
/// most seen here).
double attention_bound(device& dev, const attention_dims& d) {
  // Every GPU hands heads wider than 256 to the host kernel.
  return host_attention_bits(dev, d) || d.head_dim > 256 ? 2e-3 : 1e-4;
}

const char* name(weight_type t) {
  return to_string(t);
}

} // namespace

TEST_CASE("rms_norm matches a double-precision reference, in place too") {
  std::mt19937 rng{11};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      for (std::size_t dim : {1u, 7u, 64u, 257u, 2048u}) {
        const std::size_t rows = 3;
        auto x = random_floats(rng, rows * dim, -2.0f, 2.0f);
        auto w = random_floats(rng, dim);
        auto want = rms_norm_ref(x, w, rows, dim, 1e-5);
        auto bx = upload(*dev, x), bw = upload(*dev, w);
        auto out = alloc(*dev, x.size() * 4);
        INFO("dim " << dim);
        REQUIRE(dev->rms_norm({bx.get(), 0}, {bw.get(), 0}, {out.get(), 0},
                              rows, dim, 1e-5f)
                  .ok());
        require_close(download(*dev, *out, x.size()), want, 1e-4);
        REQUIRE(dev->rms_norm({bx.get(), 0}, {bw.get(), 0}, {bx.get(), 0},
                              rows, dim, 1e-5f)
                  .ok());
        require_close(download(*dev, *bx, x.size()), want, 1e-4);
      }
    }
  }
}

TEST_CASE("rms_norm gives the host's bits, in place too") {
  // The host's arithmetic (ggml's): float squares summed in double, the
  // mean rounded to float. Devices sum in another order, which changes a
  // row's float mean only when the two double sums straddle a float's
  // rounding boundary (about dim x 2^-29 a row): never in these rows.
  // Float sums, even of a few squares a thread, give other bits in some
  // 5% of them.
  std::mt19937 rng{41};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      for (std::size_t dim : {64u, 2048u, 5000u}) {
        INFO("dim " << dim);
        const std::size_t rows = 256;
        auto x = random_floats(rng, rows * dim, -3.0f, 3.0f);
        for (std::size_t i = 0; i < x.size(); i += 7)
          x[i] *= 1e-3f; // small values, whose squares a sum may round
        auto w = random_floats(rng, dim, 0.5f, 1.5f);
        std::vector<float> want(x.size());
        host::rms_norm(x.data(), w.data(), want.data(), rows, dim, 1e-5f);
        auto bx = upload(*dev, x), bw = upload(*dev, w);
        auto out = alloc(*dev, x.size() * 4);
        REQUIRE(dev->rms_norm({bx.get(), 0}, {bw.get(), 0}, {out.get(), 0},
                              rows, dim, 1e-5f)
                  .ok());
        require_bits(download(*dev, *out, x.size()), want, x.size());
        REQUIRE(dev->rms_norm({bx.get(), 0}, {bw.get(), 0}, {bx.get(), 0},
                              rows, dim, 1e-5f)
                  .ok());
        require_bits(download(*dev, *bx, x.size()), want, x.size());
      }
    }
  }
}

TEST_CASE("rope rotates adjacent pairs (NEOX: halves) by position, leaving "
          "the rest") {
  std::mt19937 rng{12};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      // Full rotation, partial rotation (n_rot < head_dim) with Llama 3
      // frequency factors, and one large head.
      struct shape {
        std::size_t rows, heads, head_dim, n_rot;
        float base;
        bool factors;
        bool neox;
      };
      for (auto s : {shape{3, 4, 16, 16, 10000.0f, false, false},
                     shape{4, 3, 16, 10, 500000.0f, true, false},
                     shape{2, 2, 128, 128, 10000.0f, false, false},
                     shape{3, 4, 16, 16, 1000000.0f, false, true},
                     shape{4, 3, 16, 10, 500000.0f, true, true},
                     shape{2, 2, 128, 128, 10000.0f, false, true}}) {
        rope_dims d{s.rows, s.heads, s.head_dim, s.n_rot, s.base, s.neox};
        auto x = random_floats(rng, s.rows * s.heads * s.head_dim);
        std::vector<std::int32_t> pos(s.rows);
        for (std::size_t r = 0; r < s.rows; ++r)
          pos[r] = static_cast<std::int32_t>(r * 13 % 40);
        auto ff = random_floats(rng, s.n_rot / 2, 1.0f, 8.0f);
        auto want = rope_ref(x, pos, s.factors ? &ff : nullptr, d);
        // x at an offset inside its buffer, to check offsets are honoured.
        auto bx = upload(*dev, x, 64, 16);
        auto bp = upload(*dev, pos);
        auto bf = upload(*dev, ff);
        const_view fv{s.factors ? bf.get() : nullptr, 0};
        INFO("head_dim " << s.head_dim << " n_rot " << s.n_rot << " neox "
                         << s.neox);
        REQUIRE(dev->rope({bx.get(), 64}, {bp.get(), 0}, fv, d).ok());
        auto got = download(*dev, *bx, x.size(), 64);
        require_close(got, want, 1e-4);
        for (std::size_t r = 0; r < s.rows * s.heads; ++r)
          for (std::size_t i = s.n_rot; i < s.head_dim; ++i)
            REQUIRE(got[r * s.head_dim + i] == x[r * s.head_dim + i]);
      }
    }
  }
}

TEST_CASE("rope_cached turns by the host's angles with the host's bits") {
  // Every device, given host::rope_cache's angles, gives host::rope's bits
  // (the stage's way: angles computed once a step, on the host): far
  // positions too, where a device's own sinf and cosf would differ.
  std::mt19937 rng{31};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      struct shape {
        std::size_t rows, heads, head_dim, n_rot;
        float base;
        bool factors;
        bool neox;
      };
      for (auto s : {shape{5, 4, 16, 16, 10000.0f, false, false},
                     shape{4, 3, 16, 10, 500000.0f, true, false},
                     shape{3, 2, 128, 128, 10000.0f, false, false},
                     shape{5, 4, 16, 16, 1000000.0f, false, true},
                     shape{4, 3, 16, 10, 500000.0f, true, true},
                     shape{3, 8, 128, 64, 10000.0f, false, true}}) {
        INFO("head_dim " << s.head_dim << " n_rot " << s.n_rot << " neox "
                         << s.neox);
        rope_dims d{s.rows, s.heads, s.head_dim, s.n_rot, s.base, s.neox};
        auto x = random_floats(rng, s.rows * s.heads * s.head_dim, -4.0f,
                               4.0f);
        std::vector<std::int32_t> pos(s.rows);
        for (std::size_t r = 0; r < s.rows; ++r)
          pos[r] = static_cast<std::int32_t>(r * 40009 % 131072);
        auto ff = random_floats(rng, s.n_rot / 2, 1.0f, 8.0f);
        const float* f = s.factors ? ff.data() : nullptr;
        std::vector<float> cs(s.rows * s.n_rot);
        host::rope_cache(cs.data(), pos.data(), f, d);
        auto want = x;
        host::rope(want.data(), pos.data(), f, d);
        // x at an offset inside its buffer, to check offsets are honoured.
        auto bx = upload(*dev, x, 64, 16);
        auto bc = upload(*dev, cs, 32);
        REQUIRE(dev->rope_cached({bx.get(), 64}, {bc.get(), 32}, d).ok());
        auto got = download(*dev, *bx, x.size(), 64);
        require_bits(got, want, x.size());
        // Through the operation table too (the stage's way).
        auto bx2 = upload(*dev, x);
        op_call call;
        call.kind = op_kind::rope_cached;
        call.n_inputs = 1;
        call.inputs[0] = {bc.get(), 32};
        call.output = {bx2.get(), 0};
        call.n_dims = 5;
        call.dims = {s.rows, s.heads, s.head_dim, s.n_rot, s.neox ? 1u : 0u};
        REQUIRE(run(*dev, call).ok());
        got = download(*dev, *bx2, x.size());
        require_bits(got, want, x.size());
      }
      // A cache one row short is refused before anything runs.
      rope_dims d{2, 2, 8, 8, 10000.0f, false};
      auto bx = alloc(*dev, 2 * 2 * 8 * 4);
      auto bc = alloc(*dev, 8 * 4);
      auto st = dev->rope_cached({bx.get(), 0}, {bc.get(), 0}, d);
      REQUIRE_FALSE(st.ok());
      CHECK(st.err().code == errc::out_of_range);
    }
  }
}

/// An attention call's shape and random operands (K and V for every row
/// up to the last query's).
struct attention_shape {
  std::size_t n_tokens, pos0, n_heads, n_kv_heads, head_dim, stride;
};
struct attention_case {
  attention_dims d;
  std::vector<float> q, k, v;
};
attention_case random_attention(std::mt19937& rng, const attention_shape& s) {
  attention_case c;
  c.d = {s.n_tokens, s.pos0, s.n_heads, s.n_kv_heads, s.head_dim, s.stride,
         1.0f / std::sqrt(static_cast<float>(s.head_dim))};
  const std::size_t n_ctx = s.pos0 + s.n_tokens;
  c.q = random_floats(rng, s.n_tokens * s.n_heads * s.head_dim, -2.0f, 2.0f);
  c.k = random_floats(rng, n_ctx * s.stride, -2.0f, 2.0f);
  c.v = random_floats(rng, n_ctx * s.stride);
  return c;
}

TEST_CASE("causal grouped-query attention matches a reference") {
  std::mt19937 rng{13};
  using shape = attention_shape;
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      for (auto s : {shape{1, 0, 2, 2, 8, 16}, shape{3, 5, 4, 2, 16, 40},
                     shape{1, 70, 8, 1, 64, 64}, shape{6, 0, 6, 3, 32, 96},
                     shape{2, 300, 4, 4, 128, 512},
                     // Past 1024 positions (Vulkan's score chunk), the widest
                     // native head, and a head wider than that.
                     shape{2, 1500, 2, 1, 64, 64}, shape{1, 9, 2, 2, 256, 512},
                     shape{1, 3, 1, 1, 320, 320}}) {
        auto [d, q, k, v] = random_attention(rng, s);
        auto want = attention_ref(q, k, v, d);
        // Cache rows past the last position hold NaN: a kernel that looks
        // past its causal prefix spoils its output.
        std::vector<float> poison(4 * s.stride,
                                  std::numeric_limits<float>::quiet_NaN());
        auto bq = upload(*dev, q);
        auto bk = alloc(*dev, (k.size() + poison.size()) * 4);
        auto bv = alloc(*dev, (v.size() + poison.size()) * 4);
        for (auto [b, src] : {std::pair{bk.get(), &k}, std::pair{bv.get(), &v}}) {
          REQUIRE(dev->write(*b, 0, src->data(), src->size() * 4).ok());
          REQUIRE(dev->write(*b, src->size() * 4, poison.data(),
                             poison.size() * 4)
                    .ok());
        }
        auto out = alloc(*dev, q.size() * 4);
        INFO("n_tokens " << s.n_tokens << " pos0 " << s.pos0 << " heads "
                         << s.n_heads << "/" << s.n_kv_heads);
        REQUIRE(dev->attention({bq.get(), 0}, {bk.get(), 0}, {bv.get(), 0},
                               {out.get(), 0}, d)
                  .ok());
        const auto got = download(*dev, *out, q.size());
        require_close(got, want, attention_bound(*dev, d));
        if (host_attention_bits(*dev, d)) { // bit for bit, not only close
          std::vector<float> bits(q.size());
          host::attention(q.data(), k.data(), v.data(), bits.data(), d, 1);
          CHECK(std::memcmp(got.data(), bits.data(), bits.size() * 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("attention sees cache rows written by earlier operations") {
  std::mt19937 rng{14};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      // Decode step by step: each step copies its K/V row into the cache
      // on the device, then attends; the last step sees every row.
      attention_dims d{1, 0, 2, 1, 8, 8, 0.35f};
      const std::size_t steps = 5;
      auto q = random_floats(rng, 16);
      auto k = random_floats(rng, steps * 8), v = random_floats(rng, steps * 8);
      auto bk = alloc(*dev, steps * 32), bv = alloc(*dev, steps * 32);
      auto sk = upload(*dev, k), sv = upload(*dev, v), bq = upload(*dev, q);
      auto out = alloc(*dev, 64);
      for (std::size_t p = 0; p < steps; ++p) {
        REQUIRE(dev->copy(*sk, p * 32, *bk, p * 32, 32).ok());
        REQUIRE(dev->copy(*sv, p * 32, *bv, p * 32, 32).ok());
        d.pos0 = p;
        REQUIRE(dev->attention({bq.get(), 0}, {bk.get(), 0}, {bv.get(), 0},
                               {out.get(), 0}, d)
                  .ok());
      }
      require_close(download(*dev, *out, 16), attention_ref(q, k, v, d),
                    attention_bound(*dev, d));
    }
  }
}

TEST_CASE("an f16 KV cache written by to_f16 gives an f32 cache's bits") {
  std::mt19937 rng{19};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      using shape = attention_shape;
      // Rows of 9 halves (18 bytes) put every other row at an offset a
      // word-wide kernel cannot write; past 1024 positions; a prompt.
      // The last shape's keys and values are the hard cases of rounding
      // to half: ties, subnormal halves, the edge of the normal range.
      for (auto s : {shape{1, 6, 2, 1, 8, 9}, shape{1, 40, 4, 2, 64, 128},
                     shape{3, 1100, 2, 1, 64, 64},
                     shape{20, 0, 4, 4, 32, 128}, shape{2, 30, 2, 1, 32, 32}}) {
        INFO("n_tokens " << s.n_tokens << " pos0 " << s.pos0 << " stride "
                         << s.stride);
        auto [d, q, k, v] = random_attention(rng, s);
        if (s.stride == 32)
          for (auto* x : {&k, &v})
            for (std::size_t i = 0; i < x->size(); ++i) {
              const float sign = i % 2 ? -1.0f : 1.0f;
              const float j = static_cast<float>(i % 97);
              switch (i % 5) {
              case 0: // halfway between two halves of [1, 2)
                (*x)[i] = sign * (1.0f + (2.0f * j + 1.0f) * 0x1p-11f);
                break;
              case 1: // subnormal halves and the ties between them
                (*x)[i] = sign * (j + 0.5f * static_cast<float>(i % 3))
                          * 0x1p-24f;
                break;
              case 2: // about the smallest normal half, 2^-14
                (*x)[i] = sign * 0x1p-14f * (1.0f + (j - 48.0f) * 0x1p-12f);
                break;
              case 3: // below half a subnormal step: rounds to zero
                (*x)[i] = sign * j * 0x1p-32f;
                break;
              default: // ties of larger halves, 0.5 apart in [512, 1024)
                (*x)[i] = sign * (512.0f + (2.0f * j + 1.0f) * 0.25f);
              }
            }
        // The f16 cache, row by row as decoding writes it; then the
        // new tokens' rows in one call, as a prompt's.
        auto sk = upload(*dev, k), sv = upload(*dev, v), bq = upload(*dev, q);
        auto hk = alloc(*dev, k.size() * 2), hv = alloc(*dev, v.size() * 2);
        const std::size_t row = s.stride * 2;
        for (std::size_t p = 0; p < s.pos0; ++p) {
          REQUIRE(dev->to_f16({sk.get(), p * s.stride * 4},
                              {hk.get(), p * row}, s.stride)
                    .ok());
          REQUIRE(dev->to_f16({sv.get(), p * s.stride * 4},
                              {hv.get(), p * row}, s.stride)
                    .ok());
        }
        const std::size_t tail = s.n_tokens * s.stride;
        REQUIRE(dev->to_f16({sk.get(), s.pos0 * s.stride * 4},
                            {hk.get(), s.pos0 * row}, tail)
                  .ok());
        REQUIRE(dev->to_f16({sv.get(), s.pos0 * s.stride * 4},
                            {hv.get(), s.pos0 * row}, tail)
                  .ok());
        // Every half is the host's nearest half of its float.
        for (auto [b, src] : {std::pair{hk.get(), &k}, std::pair{hv.get(), &v}}) {
          std::vector<std::uint16_t> got(src->size()), want(src->size());
          REQUIRE(dev->read(*b, 0, got.data(), got.size() * 2).ok());
          host::to_f16(src->data(), want.data(), src->size());
          REQUIRE(got == want);
        }
        auto o32 = alloc(*dev, q.size() * 4), o16 = alloc(*dev, q.size() * 4);
        REQUIRE(dev->attention({bq.get(), 0}, {sk.get(), 0}, {sv.get(), 0},
                               {o32.get(), 0}, d)
                  .ok());
        auto d16 = d;
        d16.kv = kv_type::f16;
        REQUIRE(dev->attention({bq.get(), 0}, {hk.get(), 0}, {hv.get(), 0},
                               {o16.get(), 0}, d16)
                  .ok());
        const auto a = download(*dev, *o32, q.size());
        const auto b = download(*dev, *o16, q.size());
        CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
        require_close(b, attention_ref(q, k, v, d), attention_bound(*dev, d));
      }
    }
  }
}

TEST_CASE("attention over a paged cache gives the bits of the same rows in "
          "one run, on every device and cache type") {
  std::mt19937 rng{23};
  using shape = attention_shape;
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      // Decode past a block, a small batch, a prompt on the tiled path
      // (64 tokens and more), one token over 512 cells (split-KV bound).
      for (auto s : {shape{1, 37, 4, 2, 32, 64}, shape{5, 40, 4, 1, 64, 64},
                     shape{70, 10, 2, 2, 32, 96}, shape{1, 600, 2, 1, 64, 64}})
        for (auto kv : {kv_type::f32, kv_type::f16, kv_type::q8_0})
          for (std::size_t B : {std::size_t{8}, std::size_t{32}}) {
            INFO("n_tokens " << s.n_tokens << " pos0 " << s.pos0 << " kv "
                             << to_string(kv) << " block " << B);
            auto [d, q, k, v] = random_attention(rng, s);
            d.kv = kv;
            const std::size_t n_pos = s.pos0 + s.n_tokens;
            // The rows as the cache type stores them, in one run.
            auto stored = [&](const std::vector<float>& x) {
              std::vector<std::uint8_t> out(kv_bytes_of(kv, x.size()));
              if (kv == kv_type::f16)
                host::to_f16(x.data(),
                             reinterpret_cast<std::uint16_t*>(out.data()),
                             x.size());
              else if (kv == kv_type::q8_0)
                host::quantize_q8_0_activations(
                  x.data(), reinterpret_cast<host::block_q8_0*>(out.data()),
                  x.size());
              else
                std::memcpy(out.data(), x.data(), out.size());
              return out;
            };
            const auto rk = stored(k), rv = stored(v);
            const std::size_t row = kv_bytes_of(kv, s.stride);
            // Blocks of B rows of this "layer" at an offset of 2 * B rows
            // in blocks of 3 * B rows (two other layers around it), in a
            // shuffled order with unused blocks between.
            const std::size_t n_blocks = (n_pos + B - 1) / B;
            std::vector<std::int32_t> table(n_blocks);
            for (std::size_t i = 0; i < n_blocks; ++i)
              table[i] = static_cast<std::int32_t>(2 * i + 1);
            std::shuffle(table.begin(), table.end(), rng);
            const std::size_t block = 3 * B * row, first = 2 * B * row;
            std::vector<std::uint8_t> pk((2 * n_blocks + 2) * block, 0xA5),
              pv(pk);
            for (std::size_t p = 0; p < n_pos; ++p) {
              const std::size_t at = static_cast<std::size_t>(table[p / B])
                                       * block
                                     + first + (p % B) * row;
              std::memcpy(pk.data() + at, rk.data() + p * row, row);
              std::memcpy(pv.data() + at, rv.data() + p * row, row);
            }
            auto bq = upload(*dev, q), bk = upload(*dev, rk),
                 bv = upload(*dev, rv), bpk = upload(*dev, pk),
                 bpv = upload(*dev, pv), bt = upload(*dev, table);
            auto o1 = alloc(*dev, q.size() * 4), o2 = alloc(*dev, q.size() * 4);
            auto dp = d;
            dp.block_positions = B;
            dp.block_stride = 3 * B * s.stride;
            REQUIRE(dev->attention_paged({bq.get(), 0}, {bpk.get(), first},
                                         {bpv.get(), first}, {bt.get(), 0},
                                         {o2.get(), 0}, dp)
                      .ok());
            // The device's own attention over the run: its paged kernel, or
            // the path through host memory where a device has none (whose
            // contiguous attention then goes through the host too).
            REQUIRE(dev->attention({bq.get(), 0}, {bk.get(), 0}, {bv.get(), 0},
                                   {o1.get(), 0}, d)
                      .ok());
            const auto want = download(*dev, *o1, q.size());
            const auto got = download(*dev, *o2, q.size());
            CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
            // A table entry outside the cache, or negative, is refused by
            // name and nothing is read there: the host devices check the
            // table, and so does the path through host memory; a GPU
            // kernel, which cannot without waiting for its queue, reads the
            // last block inside the cache instead.
            const bool host = dev->properties().kind == backend_kind::cpu
                              || dev->properties().kind == backend_kind::sim;
            for (std::int32_t bad : {static_cast<std::int32_t>(2 * n_blocks + 2),
                                     -1}) {
              auto t2 = table;
              t2.back() = bad;
              auto bt2 = upload(*dev, t2);
              auto st = dev->attention_paged({bq.get(), 0}, {bpk.get(), first},
                                             {bpv.get(), first},
                                             {bt2.get(), 0}, {o2.get(), 0},
                                             dp);
              if (st.ok()) {
                CHECK_FALSE(host);
                continue;
              }
              CHECK(st.err().code == errc::out_of_range);
              CHECK(st.err().message.find("block table entry "
                                          + std::to_string(n_blocks - 1))
                    != std::string::npos);
            }
          }
      // Malformed paging: a block size that is not a power of two, blocks
      // that overlap.
      auto [d, q, k, v] = random_attention(rng, shape{1, 3, 2, 1, 8, 8});
      auto bq = upload(*dev, q), bk = upload(*dev, k);
      std::vector<std::int32_t> table{0};
      auto bt = upload(*dev, table);
      auto out = alloc(*dev, q.size() * 4);
      for (auto [B, stride] : {std::pair{std::size_t{3}, std::size_t{24}},
                               std::pair{std::size_t{4}, std::size_t{16}}}) {
        auto dp = d;
        dp.block_positions = B;
        dp.block_stride = stride;
        auto st = dev->attention_paged({bq.get(), 0}, {bk.get(), 0},
                                       {bk.get(), 0}, {bt.get(), 0},
                                       {out.get(), 0}, dp);
        REQUIRE_FALSE(st.ok());
        CHECK(st.err().code == errc::invalid_argument);
      }
    }
  }
}

TEST_CASE("attention_paged_rows gives every row of a decode batch the bits "
          "of its own attention_paged, and refuses positions outside its "
          "table") {
  // Three sequences of one pool at positions 5, 20 and 37 (blocks of 8,
  // interleaved in the pool), one query row each, kv f32, f16 and q8_0.
  std::mt19937 rng{29};
  const std::size_t B = 8, heads = 4, kvh = 2, hd = 32, stride = 64;
  const std::size_t pos[] = {5, 20, 37};
  const std::size_t R = 3, L = (37 + B) / B; // the longest table: 5 blocks
  on_every_device_and_kv([&](device& dev, kv_type kv) {
    const std::size_t row = kv_bytes_of(kv, stride);
    const std::size_t block = B * row;
    std::vector<std::uint8_t> pk((R * L + 1) * block, 0xA5), pv(pk);
    std::vector<float> q;
    std::vector<std::int32_t> tables; // per row: position, L entries
    std::vector<std::vector<std::int32_t>> own(R);
    attention_dims d{};
    for (std::size_t r = 0; r < R; ++r) {
      auto c = random_attention(rng, {1, pos[r], heads, kvh, hd, stride});
      d = c.d;
      q.insert(q.end(), c.q.begin(), c.q.end());
      std::vector<std::uint8_t> rk(kv_bytes_of(kv, c.k.size())),
        rv(rk.size());
      if (kv == kv_type::f16) {
        host::to_f16(c.k.data(), reinterpret_cast<std::uint16_t*>(rk.data()),
                     c.k.size());
        host::to_f16(c.v.data(), reinterpret_cast<std::uint16_t*>(rv.data()),
                     c.v.size());
      } else if (kv == kv_type::q8_0) {
        host::quantize_q8_0_activations(
          c.k.data(), reinterpret_cast<host::block_q8_0*>(rk.data()),
          c.k.size());
        host::quantize_q8_0_activations(
          c.v.data(), reinterpret_cast<host::block_q8_0*>(rv.data()),
          c.v.size());
      } else {
        std::memcpy(rk.data(), c.k.data(), rk.size());
        std::memcpy(rv.data(), c.v.data(), rv.size());
      }
      const std::size_t nb = pos[r] / B + 1;
      tables.push_back(static_cast<std::int32_t>(pos[r]));
      for (std::size_t i = 0; i < L; ++i) {
        const auto b = static_cast<std::int32_t>(i * R + (R - 1 - r));
        if (i < nb)
          own[r].push_back(b);
        tables.push_back(i < nb ? b : 0); // past its last: never read
      }
      for (std::size_t p = 0; p <= pos[r]; ++p) {
        const std::size_t at =
          static_cast<std::size_t>(own[r][p / B]) * block + (p % B) * row;
        std::memcpy(pk.data() + at, rk.data() + p * row, row);
        std::memcpy(pv.data() + at, rv.data() + p * row, row);
      }
    }
    d.kv = kv;
    d.block_positions = B;
    d.block_stride = B * stride;
    auto bq = upload(dev, q), bk = upload(dev, pk), bv = upload(dev, pv),
         bt = upload(dev, tables);
    auto o1 = alloc(dev, q.size() * 4), o2 = alloc(dev, q.size() * 4);
    const std::size_t qrow = heads * hd * 4;
    for (std::size_t r = 0; r < R; ++r) {
      auto bo = upload(dev, own[r]);
      auto dr = d;
      dr.n_tokens = 1;
      dr.pos0 = pos[r];
      REQUIRE(dev.attention_paged({bq.get(), r * qrow}, {bk.get(), 0},
                                   {bv.get(), 0}, {bo.get(), 0},
                                   {o1.get(), r * qrow}, dr)
                .ok());
    }
    auto dr = d;
    dr.n_tokens = R;
    dr.pos0 = 12345; // not used
    REQUIRE(dev.attention_paged_rows({bq.get(), 0}, {bk.get(), 0},
                                      {bv.get(), 0}, {bt.get(), 0},
                                      {o2.get(), 0}, dr, L)
              .ok());
    const auto want = download(dev, *o1, q.size());
    const auto got = download(dev, *o2, q.size());
    CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
    // Through the operation table too (the stage's way).
    op_call call;
    call.kind = op_kind::attention_paged_rows;
    call.n_inputs = 4;
    call.inputs[0] = {bq.get(), 0};
    call.inputs[1] = {bk.get(), 0};
    call.inputs[2] = {bv.get(), 0};
    call.inputs[3] = {bt.get(), 0};
    call.output = {o2.get(), 0};
    call.n_dims = 9;
    call.dims = {R, heads, kvh, hd, stride, static_cast<std::size_t>(kv),
                 B, B * stride, L};
    call.n_scalars = 1;
    call.scalars = {d.scale};
    REQUIRE(run(dev, call).ok());
    CHECK(download(dev, *o2, q.size()) == got);
    // A row whose position its table does not cover: the host devices
    // (one operation too, their rows over the kernels' threads) and the
    // path through host memory name the row; a GPU kernel clamps it into
    // the table and reads nothing outside the cache.
    const auto kind = dev.properties().kind;
    const bool gpu = dev.runs_paged_rows() && kind != backend_kind::cpu
                     && kind != backend_kind::sim;
    auto bad = tables;
    bad[1 + L] = static_cast<std::int32_t>(L * B);
    auto bb = upload(dev, bad);
    auto st = dev.attention_paged_rows({bq.get(), 0}, {bk.get(), 0},
                                        {bv.get(), 0}, {bb.get(), 0},
                                        {o2.get(), 0}, dr, L);
    if (gpu) {
      CHECK(st.ok());
    } else {
      REQUIRE_FALSE(st.ok());
      CHECK(st.err().code == errc::out_of_range);
      CHECK(st.err().message.find("row 1") != std::string::npos);
    }
    // Tables too small for their rows, and no rows: refused.
    CHECK_FALSE(dev.attention_paged_rows({bq.get(), 0}, {bk.get(), 0},
                                          {bv.get(), 0}, {bt.get(), 0},
                                          {o2.get(), 0}, dr, 4 * L)
                  .ok());
    auto none = dr;
    none.n_tokens = 0;
    CHECK_FALSE(dev.attention_paged_rows({bq.get(), 0}, {bk.get(), 0},
                                          {bv.get(), 0}, {bt.get(), 0},
                                          {o2.get(), 0}, none, L)
                  .ok());
  });
}

TEST_CASE("store_kv_rows writes each row of a decode batch where its own "
          "to_f16, to_q8_0 or copy would, and nothing else") {
  // Three sequences at positions 5, 20 and 37 of one pool (blocks of 8
  // rows, 128 values apart, interleaved), one new row of 64 values each;
  // past the view's limit a guard that no device may write.
  std::mt19937 rng{31};
  const std::size_t B = 8, width = 64, stride = 128;
  const std::size_t pos[] = {5, 20, 37};
  const std::size_t R = 3, L = (37 + B) / B; // the longest table: 5 blocks
  auto bytes_of = [](device& dev, const buffer& b) {
    std::vector<std::uint8_t> v(b.size());
    REQUIRE(dev.read(b, 0, v.data(), v.size()).ok());
    return v;
  };
  on_every_device_and_kv([&](device& dev, kv_type kv) {
    const std::size_t row = kv_bytes_of(kv, stride);
    const std::size_t block = B * row;
    const std::size_t pool = (R * L + 1) * block;
    std::vector<std::uint8_t> init(pool + 256);
    for (auto& b : init)
      b = static_cast<std::uint8_t>(rng());
    const auto a = random_floats(rng, R * width, -4.0f, 4.0f);
    std::vector<std::int32_t> tables; // per row: position, L entries
    std::vector<std::size_t> slot(R);
    for (std::size_t r = 0; r < R; ++r) {
      tables.push_back(static_cast<std::int32_t>(pos[r]));
      for (std::size_t i = 0; i < L; ++i) // past its last: not read
        tables.push_back(i <= pos[r] / B
                           ? static_cast<std::int32_t>(i * R + (R - 1 - r))
                           : -7);
      slot[r] = static_cast<std::size_t>(
                  tables[r * (1 + L) + 1 + pos[r] / B])
                  * block
                + (pos[r] % B) * row;
    }
    auto ba = upload(dev, a), bt = upload(dev, tables);
    // What each row's own conversion writes at its slot.
    auto want = upload(dev, init);
    for (std::size_t r = 0; r < R; ++r) {
      const_view ar{ba.get(), r * width * 4};
      mut_view at{want.get(), slot[r]};
      if (kv == kv_type::f16)
        REQUIRE(dev.to_f16(ar, at, width).ok());
      else if (kv == kv_type::q8_0)
        REQUIRE(dev.to_q8_0(ar, at, width).ok());
      else
        REQUIRE(dev.write(*want, slot[r], a.data() + r * width,
                           width * 4)
                  .ok());
    }
    const auto expected = bytes_of(dev, *want);
    kv_rows_dims d;
    d.rows = R;
    d.width = width;
    d.kv_stride = stride;
    d.kv = kv;
    d.block_positions = B;
    d.block_stride = B * stride;
    d.table_len = L;
    auto got = upload(dev, init);
    REQUIRE(dev.store_kv_rows({ba.get(), 0}, {bt.get(), 0},
                               {got.get(), 0, pool}, d)
              .ok());
    CHECK(bytes_of(dev, *got) == expected);
    // Through the operation table too (the stage's way).
    auto got2 = upload(dev, init);
    op_call call;
    call.kind = op_kind::store_kv_rows;
    call.n_inputs = 2;
    call.inputs[0] = {ba.get(), 0};
    call.inputs[1] = {bt.get(), 0};
    call.output = {got2.get(), 0, pool};
    call.n_dims = 7;
    call.dims = {R, width, stride, static_cast<std::size_t>(kv), B,
                 B * stride, L};
    REQUIRE(run(dev, call).ok());
    CHECK(bytes_of(dev, *got2) == expected);
    // A position outside its table, a block past the view, a negative
    // block: the host devices (and any device's path through host
    // memory) name the row and write nothing; a GPU kernel clamps them
    // into the view and writes nothing past it (CUDA's and HIP's
    // always; Vulkan's where every row starts at a whole word, as
    // here, else it takes the path through host memory).
    const auto kind = dev.properties().kind;
    const bool host =
      kind == backend_kind::cpu || kind == backend_kind::sim;
    const bool kernel = dev.runs_paged_rows() && !host;
    struct bad_case {
      std::size_t index;
      std::int32_t value;
      const char* row;
    };
    for (auto [index, value, name] :
         {bad_case{1 + L, static_cast<std::int32_t>(L * B), "row 1"},
          bad_case{2 * (1 + L) + 1 + pos[2] / B,
                   static_cast<std::int32_t>(R * L + 1), "row 2"},
          bad_case{1 + pos[0] / B, -1, "row 0"}}) {
      INFO(name << ": entry " << index << " = " << value);
      auto bad = tables;
      bad[index] = value;
      auto bb = upload(dev, bad);
      auto b3 = upload(dev, init);
      auto st = dev.store_kv_rows({ba.get(), 0}, {bb.get(), 0},
                                   {b3.get(), 0, pool}, d);
      const auto after = bytes_of(dev, *b3);
      if (kernel)
        CHECK(st.ok());
      if (st.ok()) {
        CHECK_FALSE(host);
        CHECK(std::equal(after.begin() + pool, after.end(),
                         init.begin() + pool));
      } else {
        REQUIRE_FALSE(st.ok());
        CHECK(st.err().code == errc::out_of_range);
        CHECK(st.err().message.find(name) != std::string::npos);
        CHECK(after == init);
      }
    }
    // Malformed: no rows, rows wider than the cache's, a view shorter
    // than a block, and (q8_0) rows that are not whole blocks.
    auto refused = [&](kv_rows_dims bad, std::size_t limit,
                       errc want_code) {
      auto st = dev.store_kv_rows({ba.get(), 0}, {bt.get(), 0},
                                   {got.get(), 0, limit}, bad);
      REQUIRE_FALSE(st.ok());
      CHECK(st.err().code == want_code);
      CHECK(st.err().message.find("store_kv_rows") != std::string::npos);
    };
    auto none = d;
    none.rows = 0;
    refused(none, pool, errc::invalid_argument);
    auto wide = d;
    wide.width = stride + 32;
    refused(wide, pool, errc::invalid_argument);
    refused(d, block / 2, errc::out_of_range);
    if (kv == kv_type::q8_0) {
      auto partial = d;
      partial.width = 48;
      refused(partial, pool, errc::invalid_argument);
    }
  });
}

TEST_CASE("a q8_0 KV cache written by to_q8_0 holds the host's blocks and "
          "attention over it is attention") {
  std::mt19937 rng{23};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      const auto kind = dev->properties().kind;
      const bool host_kernels =
        kind == backend_kind::cpu || kind == backend_kind::sim;
      using shape = attention_shape;
      // Rows of 3 blocks (102 bytes: rows at offsets a word-wide kernel
      // cannot write), past 1024 positions, a prompt, GQA.
      for (auto s : {shape{1, 6, 2, 1, 32, 32}, shape{2, 10, 3, 1, 96, 96},
                     shape{1, 40, 4, 2, 64, 128}, shape{3, 1100, 2, 1, 64, 64},
                     shape{20, 0, 4, 4, 32, 128}}) {
        INFO("n_tokens " << s.n_tokens << " pos0 " << s.pos0 << " stride "
                         << s.stride);
        auto [d, q, k, v] = random_attention(rng, s);
        d.kv = kv_type::q8_0;
        auto sk = upload(*dev, k), sv = upload(*dev, v), bq = upload(*dev, q);
        const std::size_t row = s.stride / 32 * 34;
        const std::size_t rows = s.pos0 + s.n_tokens;
        auto qk = alloc(*dev, rows * row), qv = alloc(*dev, rows * row);
        for (std::size_t p = 0; p < s.pos0; ++p)
          for (auto [src, dst] : {std::pair{sk.get(), qk.get()},
                                  std::pair{sv.get(), qv.get()}})
            REQUIRE(dev->to_q8_0({src, p * s.stride * 4}, {dst, p * row},
                                 s.stride)
                      .ok());
        for (auto [src, dst] :
             {std::pair{sk.get(), qk.get()}, std::pair{sv.get(), qv.get()}})
          REQUIRE(dev->to_q8_0({src, s.pos0 * s.stride * 4},
                               {dst, s.pos0 * row}, s.n_tokens * s.stride)
                    .ok());
        // The host's blocks: the same bytes on the host devices; a GPU's
        // division may put a scale one half-ulp away and a value one step.
        std::vector<std::vector<float>> decoded;
        std::vector<std::vector<host::block_q8_0>> blocks;
        for (auto [b, src] : {std::pair{qk.get(), &k}, std::pair{qv.get(), &v}}) {
          const std::size_t nb = src->size() / 32;
          std::vector<host::block_q8_0> got(nb), want(nb);
          REQUIRE(dev->read(*b, 0, got.data(), nb * 34).ok());
          blocks.push_back(got);
          host::quantize_q8_0_activations(src->data(), want.data(),
                                          src->size());
          if (host_kernels)
            REQUIRE(std::memcmp(got.data(), want.data(), nb * 34) == 0);
          std::vector<float> dec(src->size());
          for (std::size_t i = 0; i < nb; ++i) {
            REQUIRE(std::abs(int{got[i].d} - int{want[i].d}) <= 1);
            const double dg = half_value(got[i].d);
            for (std::size_t j = 0; j < 32; ++j) {
              REQUIRE(std::abs(got[i].qs[j] - want[i].qs[j]) <= 1);
              dec[32 * i + j] = static_cast<float>(got[i].qs[j] * dg);
            }
          }
          decoded.push_back(std::move(dec));
        }
        // Attention over the blocks: attention over their values, Q
        // rounded to Q8_0 on the host devices and CUDA/HIP (llama.cpp's
        // arithmetic: host::attention's bits over the device's blocks),
        // kept in f32 on Vulkan.
        auto out = alloc(*dev, q.size() * 4);
        auto st = dev->attention({bq.get(), 0}, {qk.get(), 0}, {qv.get(), 0},
                                 {out.get(), 0}, d);
        INFO((st.ok() ? std::string{} : st.err().to_string()));
        REQUIRE(st.ok());
        auto d32 = d;
        d32.kv = kv_type::f32;
        const auto got = download(*dev, *out, q.size());
        require_close(got, attention_ref(q, decoded[0], decoded[1], d32),
                      2e-2);
        if (host_attention_bits(*dev, d)) {
          std::vector<float> bits(q.size());
          host::attention(q.data(), blocks[0].data(), blocks[1].data(),
                          bits.data(), d, 1);
          CHECK(std::memcmp(got.data(), bits.data(), bits.size() * 4) == 0);
        }
      }
      // The cache's rows must be whole blocks.
      auto a = alloc(*dev, 256), o = alloc(*dev, 256);
      CHECK_FALSE(dev->to_q8_0({a.get(), 0}, {o.get(), 0}, 48).ok());
    }
  }
}

TEST_CASE("hadamard rotates runs of n as the host does, in place too") {
  std::mt19937 rng{29};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      for (std::size_t n : {2u, 64u, 128u, 4096u}) {
        INFO("n " << n);
        const std::size_t count = 3 * n;
        auto x = random_floats(rng, count, -4.0f, 4.0f);
        std::vector<float> want(count);
        host::hadamard(x.data(), want.data(), count, n);
        auto bx = upload(*dev, x);
        auto bo = alloc(*dev, count * 4);
        REQUIRE(dev->hadamard({bx.get(), 0}, {bo.get(), 0}, count, n).ok());
        auto got = download(*dev, *bo, count);
        CHECK(std::memcmp(got.data(), want.data(), count * 4) == 0);
        REQUIRE(dev->hadamard({bx.get(), 0}, {bx.get(), 0}, count, n).ok());
        got = download(*dev, *bx, count);
        CHECK(std::memcmp(got.data(), want.data(), count * 4) == 0);
      }
      auto b = alloc(*dev, 256);
      CHECK_FALSE(dev->hadamard({b.get(), 0}, {b.get(), 0}, 48, 12).ok());
      CHECK_FALSE(dev->hadamard({b.get(), 0}, {b.get(), 0}, 48, 32).ok());
    }
  }
}

TEST_CASE("silu_mul matches a double-precision reference, in place too") {
  std::mt19937 rng{15};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      for (std::size_t n : {1u, 33u, 5000u}) {
        auto g = random_floats(rng, n, -8.0f, 8.0f), u = random_floats(rng, n);
        std::vector<double> want(n);
        for (std::size_t i = 0; i < n; ++i)
          want[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
        auto bg = upload(*dev, g), bu = upload(*dev, u);
        auto out = alloc(*dev, n * 4);
        REQUIRE(dev->silu_mul({bg.get(), 0}, {bu.get(), 0}, {out.get(), 0}, n)
                  .ok());
        require_close(download(*dev, *out, n), want, 1e-4);
        REQUIRE(dev->silu_mul({bg.get(), 0}, {bu.get(), 0}, {bg.get(), 0}, n)
                  .ok());
        require_close(download(*dev, *bg, n), want, 1e-4);
      }
    }
  }
}

TEST_CASE("silu_mul gives the host's bits on its groups of 16") {
  // ggml_vec_swiglu_f32's arithmetic on every device (expf_ggml.hpp): the
  // whole groups of 16 from the start bit for bit, whatever the device's
  // own expf; the few past them within the reference's bound. Gates reach
  // past ggml's cut-offs (0 below about -104, infinity above 88.4).
  std::mt19937 rng{37};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      for (std::size_t n : {16u * 3 * 1536, 16u * 5 + 7}) {
        INFO("n " << n);
        auto g = random_floats(rng, n, -12.0f, 12.0f);
        auto u = random_floats(rng, n, -3.0f, 3.0f);
        for (std::size_t i = 0; i < n; i += 97)
          g[i] = random_floats(rng, 1, -120.0f, 120.0f)[0];
        std::vector<float> want(n);
        host::silu_mul(g.data(), u.data(), want.data(), n);
        auto bg = upload(*dev, g), bu = upload(*dev, u);
        auto out = alloc(*dev, n * 4);
        REQUIRE(dev->silu_mul({bg.get(), 0}, {bu.get(), 0}, {out.get(), 0}, n)
                  .ok());
        auto got = download(*dev, *out, n);
        const std::size_t groups = n - n % 16;
        require_bits(got, want, groups);
        for (std::size_t i = groups; i < n; ++i)
          CHECK(std::fabs(got[i] - want[i])
                <= 1e-5 * std::max(1.0f, std::fabs(want[i])));
      }
    }
  }
}

TEST_CASE("products with F32, F16 and Q8_0 weights meet their bounds") {
  std::mt19937 rng{16};
  struct shape {
    std::size_t m, n, k;
  };
  // m < 4 takes matrix-vector paths, m >= 4 matrix-matrix ones.
  std::vector<shape> shapes{{1, 1, 32},  {1, 300, 256}, {2, 37, 96},
                            {5, 64, 128}, {17, 33, 512}, {1, 2048, 64}};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      for (auto t : {weight_type::f32, weight_type::f16, weight_type::q8_0}) {
        for (auto s : shapes) {
          auto a = random_floats(rng, s.m * s.k);
          auto w = random_floats(rng, s.n * s.k);
          auto enc = encode(t, w);
          // The weights sit at an even, not 4-aligned, offset for F16/Q8_0.
          const std::size_t woff = t == weight_type::f32 ? 8 : 6;
          auto ba = upload(*dev, a);
          auto bw = upload(*dev, enc.bytes, woff);
          auto bc = alloc(*dev, s.m * s.n * 4);
          matmul_dims d{s.m, s.n, s.k, true};
          INFO(name(t) << " m=" << s.m << " n=" << s.n << " k=" << s.k);
          REQUIRE(dev->matmul_weights({ba.get(), 0}, {bw.get(), woff}, t,
                                      {bc.get(), 0}, d)
                    .ok());
          auto got = download(*dev, *bc, s.m * s.n);
          for (std::size_t i = 0; i < s.m; ++i)
            for (std::size_t j = 0; j < s.n; ++j) {
              double want = 0, mag = 0, step = 0;
              for (std::size_t p = 0; p < s.k; ++p) {
                double av = a[i * s.k + p], wv = enc.values[j * s.k + p];
                want += av * wv;
                mag += std::fabs(av * wv);
              }
              for (std::size_t b = 0; b < s.k / 32; ++b) {
                double amax = 0, wsum = 0;
                for (std::size_t p = b * 32; p < b * 32 + 32; ++p) {
                  amax = std::max(amax, std::fabs(double{a[i * s.k + p]}));
                  wsum += std::fabs(enc.values[j * s.k + p]);
                }
                step += wsum * amax / 127.0;
              }
              double tol = t == weight_type::f32
                             ? 1e-4 * std::max(1.0, std::fabs(want))
                           : t == weight_type::f16 ? 1e-3 * mag + 1e-6
                                                   : step + 1e-3 * mag;
              INFO("row " << i << " col " << j << ": got "
                          << got[i * s.n + j] << ", want " << want);
              REQUIRE(std::fabs(got[i * s.n + j] - want) <= tol);
            }
        }
      }
    }
  }
}

TEST_CASE("products with ggml's other formats meet their bounds where a "
          "device runs them and are refused where it does not") {
  // BF16, Q4_0 ... Q6_K: the bytes ggml's reference quantizers write. The
  // host devices give exactly the host kernels' bits (the engine's
  // arithmetic), and so do the CUDA and HIP kernels for Q4_0 ... Q6_K
  // (gpu_common/kernel_quant.hpp: the same activation quantization and
  // lanes); every device stays within the activations' rounding of the
  // product with the dequantized weights (Vulkan within F32 rounding); a
  // device without the kernels would say unsupported and leave the output
  // alone.
  std::mt19937 rng{26};
  struct shape {
    std::size_t m, n, k;
  };
  const std::vector<shape> shapes{{1, 16, 256}, {3, 13, 256}, {6, 24, 512}};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      const auto kind = dev->properties().kind;
      const bool host = kind == backend_kind::cpu || kind == backend_kind::sim;
      const bool gpu = kind == backend_kind::cuda || kind == backend_kind::hip;
      const bool runs = host || gpu || kind == backend_kind::vulkan;
      for (weight_type t : all_weight_types) {
        if (t == weight_type::f32 || t == weight_type::f16
            || t == weight_type::q8_0)
          continue;
        const bool exact = host || (gpu && t != weight_type::bf16);
        CHECK(dev->runs_weights(t) == runs);
        const auto g = static_cast<quant::ggml_type>(ggml_type_id(t));
        auto these = shapes;
        if (t == weight_type::bf16) // rows need not be whole 32s
          these.push_back({2, 5, 40});
        for (auto s : these) {
          INFO(to_string(t) << " m=" << s.m << " n=" << s.n << " k=" << s.k);
          auto a = random_floats(rng, s.m * s.k);
          auto w = random_floats(rng, s.n * s.k);
          const std::size_t rb = *weight_row_bytes(t, s.k);
          auto bytes = quantized(t, w, s.n, s.k);
          const std::size_t woff = 6; // even, not 4-aligned
          auto ba = upload(*dev, a);
          auto bw = upload(*dev, bytes, woff);
          std::vector<float> sentinel(s.m * s.n, 7.0f);
          auto bc = upload(*dev, sentinel);
          matmul_dims d{s.m, s.n, s.k, true};
          auto st = dev->matmul_weights({ba.get(), 0}, {bw.get(), woff}, t,
                                        {bc.get(), 0}, d);
          auto got = download(*dev, *bc, s.m * s.n);
          if (!runs) {
            REQUIRE_FALSE(st.ok());
            CHECK(st.err().code == errc::unsupported);
            CHECK_THAT(st.err().message,
                       Catch::Contains(std::string{"no kernel for "}
                                       + to_string(t)));
            CHECK(got == sentinel);
            continue;
          }
          REQUIRE(st.ok());
          if (exact) {
            std::vector<float> want_bits(s.m * s.n);
            host::matmul_weights(a.data(), bytes.data(), t, want_bits.data(),
                                 d, 1);
            CHECK(std::memcmp(got.data(), want_bits.data(), got.size() * 4)
                  == 0);
          }
          std::vector<float> deq(s.k);
          for (std::size_t j = 0; j < s.n; ++j) {
            quant::dequantize_row(g, bytes.data() + j * rb, deq.data(), s.k);
            for (std::size_t i = 0; i < s.m; ++i) {
              double want = 0, mag = 0, step = 0;
              for (std::size_t p = 0; p < s.k; ++p) {
                want += double{a[i * s.k + p]} * deq[p];
                mag += std::fabs(double{a[i * s.k + p]} * deq[p]);
              }
              // Host devices and GPUs round activations to 8 bits per
              // block of at most 256 (Q8_K, Q8_0, Q8_1), or to BF16;
              // Vulkan multiplies them as they are, so it must meet F32
              // rounding (which also proves its dequantization exact).
              for (std::size_t b = 0; b < s.k / 256; ++b) {
                double amax = 0, wsum = 0;
                for (std::size_t p = b * 256; p < b * 256 + 256; ++p) {
                  amax = std::max(amax, std::fabs(double{a[i * s.k + p]}));
                  wsum += std::fabs(double{deq[p]});
                }
                step += wsum * amax / 127.0;
              }
              const double tol =
                host || gpu ? step + 4e-3 * mag + 1e-6 : 1e-5 * mag + 1e-6;
              INFO("row " << i << " col " << j << ": got "
                          << got[i * s.n + j] << ", want " << want);
              REQUIRE(std::fabs(got[i * s.n + j] - want) <= tol);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("a row's product with stored weights has its bits whatever rows "
          "share the product") {
  // A decode batch's sequences and a prompt's tokens are rows of one
  // product; each must get what it gets alone where the device says so:
  // the host kernels, and Vulkan's weight shaders in every format
  // (weight_tiles.glsl: of 11 rows, two tiles of 4 go through the _x4
  // pipelines and 3 rows one by one).
  std::mt19937 rng{31};
  const std::size_t m = 11, n = 9, k = 256;
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      const auto kind = dev->properties().kind;
      const bool host = kind == backend_kind::cpu || kind == backend_kind::sim;
      for (weight_type t : all_weight_types) {
        if (!dev->runs_weights(t) || !(host || kind == backend_kind::vulkan))
          continue;
        INFO(to_string(t));
        auto a = random_floats(rng, m * k);
        auto w = random_floats(rng, n * k);
        const bool common = t == weight_type::f32 || t == weight_type::f16
                            || t == weight_type::q8_0;
        auto bytes = common ? encode(t, w).bytes : quantized(t, w, n, k);
        auto ba = upload(*dev, a);
        auto bw = upload(*dev, bytes);
        auto bc = alloc(*dev, m * n * 4);
        REQUIRE(dev->matmul_weights({ba.get(), 0}, {bw.get(), 0}, t,
                                    {bc.get(), 0}, {m, n, k, true})
                  .ok());
        auto all = download(*dev, *bc, m * n);
        auto one = alloc(*dev, n * 4);
        for (std::size_t i = 0; i < m; ++i) {
          INFO("row " << i);
          REQUIRE(dev->matmul_weights({ba.get(), i * k * 4}, {bw.get(), 0},
                                      t, {one.get(), 0}, {1, n, k, true})
                    .ok());
          auto alone = download(*dev, *one, n);
          CHECK(std::memcmp(alone.data(), all.data() + i * n, n * 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("malformed Llama operations are refused with values, not crashes") {
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      auto a = alloc(*dev, 4096), b = alloc(*dev, 4096);
      auto code = [](const status& st) {
        REQUIRE_FALSE(st.ok());
        CHECK_FALSE(st.err().message.empty());
        return st.err().code;
      };
      // Q8_0 rows must be whole blocks; weights must fit their buffer.
      CHECK(code(dev->matmul_weights({a.get(), 0}, {b.get(), 0},
                                     weight_type::q8_0, {a.get(), 2048},
                                     {1, 4, 48, true}))
            == errc::invalid_argument);
      CHECK(code(dev->matmul_weights({a.get(), 0}, {b.get(), 0},
                                     weight_type::f16, {a.get(), 2048},
                                     {1, 64, 64, true}))
            == errc::out_of_range);
      // Odd weight offsets, overlapping outputs, null buffers.
      CHECK(code(dev->matmul_weights({a.get(), 0}, {b.get(), 1},
                                     weight_type::q8_0, {a.get(), 2048},
                                     {1, 4, 32, true}))
            == errc::invalid_argument);
      CHECK(code(dev->matmul_weights({a.get(), 0}, {b.get(), 0},
                                     weight_type::f32, {a.get(), 64},
                                     {1, 4, 32, true}))
            == errc::invalid_argument);
      CHECK(code(dev->rms_norm({nullptr, 0}, {b.get(), 0}, {a.get(), 0}, 1,
                               8, 1e-5f))
            == errc::invalid_argument);
      CHECK(code(dev->rms_norm({a.get(), 0}, {b.get(), 0}, {a.get(), 4}, 1,
                               8, 1e-5f))
            == errc::invalid_argument);
      CHECK(code(dev->rms_norm({a.get(), 0}, {b.get(), 0}, {a.get(), 0}, 2,
                               1024, 1e-5f))
            == errc::out_of_range);
      // Rope: n_rot odd or beyond head_dim; positions past the buffer.
      CHECK(code(dev->rope({a.get(), 0}, {b.get(), 0}, {}, {1, 2, 8, 7}))
            == errc::invalid_argument);
      CHECK(code(dev->rope({a.get(), 0}, {b.get(), 0}, {}, {1, 2, 8, 10}))
            == errc::invalid_argument);
      CHECK(code(dev->rope({a.get(), 0}, {b.get(), 4092}, {}, {2, 2, 8, 8}))
            == errc::out_of_range);
      // Attention: heads that do not group, a stride shorter than a row, a
      // cache too short for the last position.
      attention_dims d{1, 0, 3, 2, 8, 16, 1.0f};
      CHECK(code(dev->attention({a.get(), 0}, {b.get(), 0}, {b.get(), 0},
                                {a.get(), 1024}, d))
            == errc::invalid_argument);
      d = {1, 0, 4, 2, 8, 15, 1.0f};
      CHECK(code(dev->attention({a.get(), 0}, {b.get(), 0}, {b.get(), 0},
                                {a.get(), 1024}, d))
            == errc::invalid_argument);
      d = {2, 254, 4, 2, 8, 16, 1.0f};
      CHECK(code(dev->attention({a.get(), 0}, {b.get(), 0}, {b.get(), 0},
                                {a.get(), 1024}, d))
            == errc::out_of_range);
      CHECK(code(dev->silu_mul({a.get(), 0}, {b.get(), 0}, {a.get(), 8}, 16))
            == errc::invalid_argument);
    }
  }
}

TEST_CASE("Llama operations refuse buffers of another device") {
  auto devs = every_device();
  REQUIRE(devs.size() >= 2);
  auto a = alloc(*devs[0], 1024), b = alloc(*devs[1], 1024);
  auto st = devs[0]->silu_mul({a.get(), 0}, {b.get(), 0}, {a.get(), 512}, 16);
  REQUIRE_FALSE(st.ok());
  CHECK(st.err().code == errc::wrong_device);
  st = devs[1]->rms_norm({b.get(), 0}, {a.get(), 0}, {b.get(), 512}, 1, 16,
                         1e-5f);
  REQUIRE_FALSE(st.ok());
  CHECK(st.err().code == errc::wrong_device);
}
