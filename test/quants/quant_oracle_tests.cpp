// The weight formats against llama.cpp's own ggml (the CPU binaries of the
// test-only npm package node-llama-cpp, loaded with dlopen): quantized
// bytes, dequantized floats, quantized activations and dot products, for
// every format, on rows of several sizes and shapes (Gaussian, zeros, a
// huge outlier, constants, tiny values, values on rounding boundaries).

#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_repack.hpp"
#include "test/support/ggml_oracle.hpp"
#include "test/support/tools.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace exo::backend::quant;
namespace host = exo::backend::host;
namespace gg = exo::test::ggml;

namespace {

gg::oracle& oracle() {
  exo::test::require_tool("node-llama-cpp");
  auto& o = gg::load(exo::test::tools_dir());
  if (!o.ok())
    exo::test::skip_test("llama.cpp's ggml could not be loaded: " + o.error);
  static bool said = false;
  if (!said) {
    std::printf("ggml oracle: %s/%s\n", o.dir.c_str(), o.variant.c_str());
    said = true;
  }
  return o;
}

int id(ggml_type t) {
  return static_cast<int>(t);
}

const ggml_type weight_formats[] = {
    ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1,
    ggml_type::q8_0, ggml_type::q2_k, ggml_type::q3_k, ggml_type::q4_k,
    ggml_type::q5_k, ggml_type::q6_k, ggml_type::f16,  ggml_type::bf16,
};

const ggml_type block_dot_formats[] = {
    ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1,
    ggml_type::q8_0, ggml_type::q2_k, ggml_type::q3_k, ggml_type::q4_k,
    ggml_type::q5_k, ggml_type::q6_k,
};

/// A named input row.
struct row {
  std::string what;
  std::vector<float> x;
};

/// Rows of n elements (n a multiple of 256) of the shapes the formats must
/// survive.
std::vector<row> rows_of(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng{seed};
  std::normal_distribution<float> g{0.0f, 1.0f};
  std::vector<row> rs;
  auto gauss = [&](float scale) {
    std::vector<float> v(n);
    for (auto& e : v)
      e = scale * g(rng);
    return v;
  };
  rs.push_back({"gaussian 0.02", gauss(0.02f)});
  rs.push_back({"gaussian 1", gauss(1.0f)});
  {
    auto v = gauss(0.05f);
    for (std::size_t i = 0; i < n && i < 300; ++i)
      v[i] = 0.0f; // whole zero blocks and a partly zero super-block
    rs.push_back({"zero blocks", v});
  }
  {
    auto v = gauss(0.02f);
    v[n / 3] = 3.0e4f; // a huge outlier
    v[n / 2 + 5] = -1.0e4f;
    rs.push_back({"huge outlier", v});
  }
  rs.push_back({"all zero", std::vector<float>(n, 0.0f)});
  rs.push_back({"constant", std::vector<float>(n, 0.75f)});
  rs.push_back({"negative constant", std::vector<float>(n, -1.25f)});
  {
    auto v = gauss(1e-20f); // below half's range: scales underflow
    rs.push_back({"tiny", v});
  }
  {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) // levels and their midpoints
      v[i] = 0.5f * static_cast<float>(static_cast<int>(i % 33) - 16);
    rs.push_back({"rounding boundaries", v});
  }
  {
    std::uniform_real_distribution<float> u{0.0f, 2.0f};
    std::vector<float> v(n);
    for (auto& e : v)
      e = u(rng); // all positive: minimums of zero
    rs.push_back({"positive uniform", v});
  }
  return rs;
}

bool same_float(float a, float b) {
  if (std::isnan(a) && std::isnan(b))
    return true;
  std::uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

/// Index of the first differing byte, or -1.
long first_diff(const std::vector<std::uint8_t>& a,
                const std::vector<std::uint8_t>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return static_cast<long>(i);
  return -1;
}

const std::size_t sizes[] = {256, 512, 4096};

} // namespace

TEST_CASE("the descriptor table agrees with ggml's type traits") {
  auto& o = oracle();
  std::size_t count = 0;
  const type_info* types = all_types(count);
  REQUIRE(count == 15);
  for (std::size_t i = 0; i < count; ++i) {
    const type_info& t = types[i];
    INFO(t.name);
    const gg::type_traits* tr = o.get_type_traits(id(t.type));
    REQUIRE(tr != nullptr);
    CHECK(std::string(tr->type_name) == t.name);
    CHECK(static_cast<std::size_t>(tr->blck_size) == t.block_size);
    CHECK(tr->type_size == t.block_bytes);
    if (t.weights && t.type != ggml_type::f32) {
      const gg::type_traits_cpu* c = o.get_type_traits_cpu(id(t.type));
      REQUIRE(c != nullptr);
      CHECK(c->vec_dot_type == id(t.dot_type));
    }
  }
}

TEST_CASE("the reference quantizers write ggml's bytes for every format") {
  auto& o = oracle();
  std::size_t compared = 0;
  for (ggml_type t : weight_formats) {
    for (std::size_t n : sizes) {
      for (const row& r : rows_of(n, 11 + static_cast<std::uint32_t>(n))) {
        INFO(name(t) << " n=" << n << " " << r.what);
        const std::size_t bytes = *row_bytes(t, n);
        std::vector<std::uint8_t> mine(bytes, 0), chunk(bytes, 0),
            ref(bytes, 0);
        quantize_row(t, r.x.data(), mine.data(), n);
        o.quantize_chunk(id(t), r.x.data(), chunk.data(), 0, 1,
                         static_cast<std::int64_t>(n), nullptr);
        o.get_type_traits(id(t))->from_float_ref(r.x.data(), ref.data(),
                                                 static_cast<std::int64_t>(n));
        INFO("first differing byte " << first_diff(mine, chunk));
        CHECK(mine == chunk);
        CHECK(mine == ref);
        ++compared;
      }
    }
  }
  std::printf("quantized rows compared with ggml: %zu\n", compared);
}

TEST_CASE("dequantization gives ggml's floats, also for arbitrary bytes") {
  auto& o = oracle();
  std::mt19937 rng{5};
  std::uniform_int_distribution<int> byte{0, 255};
  for (ggml_type t : weight_formats) {
    for (std::size_t n : sizes) {
      const std::size_t bytes = *row_bytes(t, n);
      std::vector<std::vector<std::uint8_t>> inputs;
      for (const row& r : rows_of(n, 3)) {
        std::vector<std::uint8_t> q(bytes);
        quantize_row(t, r.x.data(), q.data(), n);
        inputs.push_back(q);
      }
      for (int k = 0; k < 4; ++k) { // what a file may hold
        std::vector<std::uint8_t> q(bytes);
        for (auto& b : q)
          b = static_cast<std::uint8_t>(byte(rng));
        inputs.push_back(q);
      }
      for (std::size_t k = 0; k < inputs.size(); ++k) {
        INFO(name(t) << " n=" << n << " input " << k);
        std::vector<float> mine(n), theirs(n);
        dequantize_row(t, inputs[k].data(), mine.data(), n);
        o.get_type_traits(id(t))->to_float(inputs[k].data(), theirs.data(),
                                           static_cast<std::int64_t>(n));
        std::size_t bad = 0;
        for (std::size_t i = 0; i < n; ++i)
          bad += same_float(mine[i], theirs[i]) ? 0 : 1;
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("activations are quantized as ggml's CPU backend does") {
  auto& o = oracle();
  const ggml_type act_types[] = {ggml_type::q8_0, ggml_type::q8_1,
                                 ggml_type::q8_k, ggml_type::f16,
                                 ggml_type::bf16};
  for (ggml_type t : act_types) {
    for (std::size_t n : sizes) {
      for (const row& r : rows_of(n, 29)) {
        INFO(name(t) << " n=" << n << " " << r.what);
        const std::size_t bytes = *row_bytes(t, n);
        std::vector<std::uint8_t> mine(bytes, 0), theirs(bytes, 0);
        quantize_activations(t, r.x.data(), mine.data(), n);
        o.get_type_traits_cpu(id(t))->from_float(r.x.data(), theirs.data(),
                                                 static_cast<std::int64_t>(n));
        INFO("first differing byte " << first_diff(mine, theirs));
        CHECK(mine == theirs);
      }
    }
  }
}

TEST_CASE("block dot products are ggml's vec_dot bit for bit") {
  auto& o = oracle();
  std::mt19937 rng{17};
  std::uniform_int_distribution<int> byte{0, 255};
  std::size_t compared = 0;
  for (ggml_type t : block_dot_formats) {
    const ggml_type at = info(t).dot_type;
    const gg::type_traits_cpu* c = o.get_type_traits_cpu(id(t));
    const gg::type_traits_cpu* ca = o.get_type_traits_cpu(id(at));
    for (std::size_t n : sizes) {
      auto ws = rows_of(n, 100 + static_cast<std::uint32_t>(n));
      auto as = rows_of(n, 200 + static_cast<std::uint32_t>(n));
      const std::size_t wbytes = *row_bytes(t, n);
      const std::size_t abytes = *row_bytes(at, n);
      for (std::size_t i = 0; i < ws.size(); ++i) {
        for (int variant = 0; variant < 2; ++variant) {
          std::vector<std::uint8_t> w(wbytes), a(abytes, 0);
          if (variant == 0) {
            o.quantize_chunk(id(t), ws[i].x.data(), w.data(), 0, 1,
                             static_cast<std::int64_t>(n), nullptr);
          } else { // arbitrary weight bytes with finite scales
            for (auto& b : w)
              b = static_cast<std::uint8_t>(byte(rng));
            std::vector<float> deq(n);
            dequantize_row(t, w.data(), deq.data(), n);
            bool finite = true;
            for (float v : deq)
              finite = finite && std::isfinite(v);
            if (!finite)
              continue;
          }
          const row& ar = as[(i * 3 + 1) % as.size()];
          ca->from_float(ar.x.data(), a.data(), static_cast<std::int64_t>(n));
          float theirs = 0;
          c->vec_dot(static_cast<int>(n), &theirs, 0, w.data(), 0, a.data(), 0,
                     1);
          const float fast = vec_dot(t, n, w.data(), a.data());
          const float portable = vec_dot_portable(t, n, w.data(), a.data());
          INFO(name(t) << " n=" << n << " weights " << ws[i].what
                       << (variant ? " (random bytes)" : "") << ", activations "
                       << ar.what << ": ggml " << theirs << " simd " << fast
                       << " portable " << portable);
          CHECK(same_float(fast, theirs));
          CHECK(same_float(portable, theirs));
          ++compared;
        }
      }
    }
  }
  std::printf("dot products compared with ggml: %zu\n", compared);
}

TEST_CASE("F16 and BF16 dot products stay within a few ulps of ggml's") {
  // ggml's AVX-512 F16/BF16 kernels sum in an order of their own (BF16 with
  // AVX512-BF16's dot instruction where the variant has it); exo's exact
  // F16 product is host::matmul_weights'. Here: the relative difference.
  auto& o = oracle();
  for (ggml_type t : {ggml_type::f16, ggml_type::bf16}) {
    const gg::type_traits_cpu* c = o.get_type_traits_cpu(id(t));
    double worst = 0;
    for (std::size_t n : sizes) {
      auto ws = rows_of(n, 41);
      auto as = rows_of(n, 43);
      const std::size_t bytes = *row_bytes(t, n);
      for (std::size_t i = 0; i < 4; ++i) { // the Gaussian rows
        std::vector<std::uint8_t> w(bytes), a(bytes);
        quantize_row(t, ws[i].x.data(), w.data(), n);
        quantize_activations(t, as[i].x.data(), a.data(), n);
        float theirs = 0;
        c->vec_dot(static_cast<int>(n), &theirs, 0, w.data(), 0, a.data(), 0,
                   1);
        const float mine = vec_dot(t, n, w.data(), a.data());
        double scale = 0;
        std::vector<float> wf(n), af(n);
        dequantize_row(t, w.data(), wf.data(), n);
        dequantize_row(t, a.data(), af.data(), n);
        for (std::size_t k = 0; k < n; ++k)
          scale += std::fabs(static_cast<double>(wf[k]) * af[k]);
        const double rel = std::fabs(double(mine) - double(theirs)) / scale;
        worst = rel > worst ? rel : worst;
      }
    }
    std::printf("%s dot product: largest difference from ggml %.3g of "
                "sum |w*a|\n",
                name(t), worst);
    CHECK(worst < 1e-5);
  }
}

namespace {

/// The fields of ggml.h's struct ggml_tensor (the ggml of node-llama-cpp
/// 3.22.1) that llama.cpp's Q4_K repack reads: type, ne, data.
struct ggml_tensor_layout {
  std::int32_t type;
  void* buffer;
  std::int64_t ne[4];
  std::size_t nb[4];
  std::int32_t op;
  std::int32_t op_params[16];
  std::int32_t flags;
  void* src[10];
  void* view_src;
  std::size_t view_offs;
  void* data;
  char name[64];
  void* extra;
  char padding[8];
};
static_assert(offsetof(ggml_tensor_layout, data) == 248
                && sizeof(ggml_tensor_layout) == 336,
              "ggml_tensor's layout");

} // namespace

TEST_CASE("repacked Q4_K products are the loaded llama.cpp build's gemm and "
          "gemv bit for bit") {
  // llama.cpp repacks Q4_K matrices of 8k rows (block_q4_Kx8), multiplies
  // the first m - m % 4 tokens of a batch with its gemm (activations from
  // ggml_quantize_mat_q8_K_4x8) and the others with its gemv. Its gemm
  // steps the float sums per pair of sub-blocks, its gemv per super-block,
  // in the AVX-512 builds (zen4) and the AVX2 ones (haswell) alike.
  auto& o = oracle();
  using quantize_mat_t = void (*)(const float*, void*, std::int64_t,
                                  std::int64_t);
  using repack_t = int (*)(void*, ggml_tensor_layout*, const void*,
                           std::size_t);
  using gemm_t = void (*)(int, float*, std::size_t, const void*, const void*,
                          int, int);
  auto quantize_mat = reinterpret_cast<quantize_mat_t>(
    dlsym(o.cpu, "_Z19ggml_quantize_mat_tILl8EL9ggml_type15EEvPKfPvll"));
  auto repack = reinterpret_cast<repack_t>(
    dlsym(o.cpu, "_ZN4ggml3cpu6repack13tensor_traitsI10block_q4_KLl8ELl8EL9gg"
                 "ml_type15EE6repackEP11ggml_tensorPKvm"));
  auto gemm =
    reinterpret_cast<gemm_t>(dlsym(o.cpu, "ggml_gemm_q4_K_8x8_q8_K"));
  auto gemv =
    reinterpret_cast<gemm_t>(dlsym(o.cpu, "ggml_gemv_q4_K_8x8_q8_K"));
  REQUIRE(quantize_mat);
  REQUIRE(repack);
  REQUIRE(gemm);
  REQUIRE(gemv);
  struct shape {
    int rows, k, m;
  };
  for (const shape sh : {shape{24, 512, 8}, shape{64, 2048, 13},
                         shape{16, 256, 5}, shape{40, 768, 3},
                         shape{48, 1024, 37}}) {
    CAPTURE(sh.rows, sh.k, sh.m);
    const auto rows = static_cast<std::size_t>(sh.rows);
    const auto k = static_cast<std::size_t>(sh.k);
    const auto m = static_cast<std::size_t>(sh.m);
    const std::size_t nb = k / 256, rb = *row_bytes(ggml_type::q4_k, k);
    std::mt19937 rng(static_cast<unsigned>(sh.rows * 7 + sh.m));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> wf(rows * k), a(m * k);
    for (auto& x : wf)
      x = nd(rng) * 0.05f;
    for (auto& x : a)
      x = nd(rng);
    std::vector<std::uint8_t> w(rows * rb), packed(rows * rb);
    for (std::size_t r = 0; r < rows; ++r)
      quantize_row(ggml_type::q4_k, wf.data() + r * k, w.data() + r * rb, k);
    ggml_tensor_layout t{};
    t.type = id(ggml_type::q4_k);
    t.ne[0] = sh.k;
    t.ne[1] = sh.rows;
    t.ne[2] = t.ne[3] = 1;
    t.data = packed.data();
    REQUIRE(repack(nullptr, &t, w.data(), w.size()) == 0);
    // llama.cpp: gemm over the first mg tokens, gemv one token at a time.
    const std::size_t mg = m >= 4 ? m - m % 4 : 0;
    std::vector<float> theirs(m * rows), mine(m * rows);
    std::vector<std::uint8_t> act(sizeof(block_q8_k) * nb * m);
    for (std::size_t g = 0; g < mg / 4; ++g)
      quantize_mat(a.data() + 4 * g * k,
                   act.data() + sizeof(block_q8_k) * nb * 4 * g, 4, sh.k);
    if (mg > 0)
      gemm(sh.k, theirs.data(), rows, packed.data(), act.data(),
           static_cast<int>(mg), sh.rows);
    for (std::size_t i = mg; i < m; ++i) {
      std::vector<std::uint8_t> one(sizeof(block_q8_k) * nb);
      o.get_type_traits_cpu(id(ggml_type::q8_k))
        ->from_float(a.data() + i * k, one.data(), sh.k);
      gemv(sh.k, theirs.data() + i * rows, rows, packed.data(), one.data(), 1,
           sh.rows);
    }
    // Every path of exo's: AMX tiles (12 tokens and more where the CPU has
    // them, 32 and more for the gemm's steps by pair: 37 tokens here),
    // AVX-512 VNNI panels (9 and more), AVX2 groups of 8 rows, the
    // portable sums.
    for (int path = 0; path < 4; ++path) {
      CAPTURE(path);
      host::allow_amx(path == 0);
      host::limit_isa(path < 2    ? host::isa::avx512
                      : path == 2 ? host::isa::avx2
                                  : host::isa::scalar);
      REQUIRE(matmul_q4_k_repacked(w.data(), rows, k, a.data(), m,
                                   mine.data(), 2)
                .ok());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < mine.size(); ++i)
        differ += std::memcmp(&mine[i], &theirs[i], 4) != 0;
      CHECK(differ == 0);
    }
    host::limit_isa(host::isa::avx512);
    host::allow_amx(true);
    // Rows apart (a decode batch: each token as alone) is llama.cpp's
    // gemv for every token; from 12 tokens on the AMX tiles where the CPU
    // has them, else the VNNI panels.
    std::vector<float> gemv_all(m * rows);
    for (std::size_t i = 0; i < m; ++i) {
      std::vector<std::uint8_t> one(sizeof(block_q8_k) * nb);
      o.get_type_traits_cpu(id(ggml_type::q8_k))
        ->from_float(a.data() + i * k, one.data(), sh.k);
      gemv(sh.k, gemv_all.data() + i * rows, rows, packed.data(), one.data(),
           1, sh.rows);
    }
    for (const bool amx : {true, false}) {
      CAPTURE(amx);
      host::allow_amx(amx);
      REQUIRE(matmul_q4_k_repacked(w.data(), rows, k, a.data(), m,
                                   mine.data(), 2, true)
                .ok());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < mine.size(); ++i)
        differ += std::memcmp(&mine[i], &gemv_all[i], 4) != 0;
      CHECK(differ == 0);
    }
    host::allow_amx(true);
  }
}
