#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <cstring>
#include <functional>
#include <fstream>
#include <random>

#include "core/gguf/gguf.hpp"
#include "core/gguf/gguf_writer.hpp"
#include "core/model/llama_hparams.hpp"
#include "core/model/llama_model.hpp"
#include "core/gguf/quant.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "test/model/temp_file.hpp"

using namespace exo::model;

namespace {

test_model_options tiny() {
  test_model_options o;
  o.layers = 2;
  o.dim = 32;
  o.ff = 64;
  o.heads = 4;
  o.kv_heads = 2;
  o.vocab = 400;
  o.ctx = 64;
  return o;
}

std::vector<uint8_t> tiny_bytes() {
  return build_test_model(tiny()).bytes();
}

/// Position right after the first occurrence of `s` in `b`.
size_t after(const std::vector<uint8_t>& b, const std::string& s) {
  auto it = std::search(b.begin(), b.end(), s.begin(), s.end());
  REQUIRE(it != b.end());
  return static_cast<size_t>(it - b.begin()) + s.size();
}

template <class T>
void poke(std::vector<uint8_t>& b, size_t pos, T v) {
  REQUIRE(pos + sizeof(T) <= b.size());
  std::memcpy(b.data() + pos, &v, sizeof(T));
}

std::string parse_error(const std::vector<uint8_t>& b) {
  try {
    auto f = gguf_file::parse(b.data(), b.size());
    llama_model m(f);
  } catch (const gguf_error& e) {
    return e.what();
  }
  return "no error";
}

} // namespace

TEST_CASE("metadata of every value type survives a write and read",
          "[gguf]") {
  gguf_writer w;
  w.set_u32("a.u32", 4000000000u);
  w.set_i32("a.i32", -7);
  w.set_u64("a.u64", 1ull << 40);
  w.set_f32("a.f32", 0.5f);
  w.set_bool("a.bool", true);
  w.set_string("a.str", "h\xC3\xA9llo");
  w.set_strings("a.strs", {"x", "", "yz"});
  w.set_f32s("a.f32s", {1.5f, -2.0f});
  w.set_i32s("a.i32s", {3, -4, 5});
  w.set_u32("general.alignment", 64);
  w.add_tensor("t", {4, 2}, tensor_type::f32,
               std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  w.add_tensor("u", {3}, tensor_type::f16, std::vector<float>{1, -2, 0.25});
  auto b = w.bytes();
  auto f = gguf_file::parse(b.data(), b.size());
  CHECK(f->version() == 3);
  CHECK(f->alignment() == 64);
  CHECK(f->data_offset() % 64 == 0);
  CHECK(f->get_uint("a.u32") == 4000000000u);
  CHECK(f->find("a.u32")->type == gguf_value_type::u32);
  CHECK(f->get_int("a.i32") == -7);
  CHECK(f->get_uint("a.u64") == (1ull << 40));
  CHECK(f->get_float("a.f32") == 0.5);
  CHECK(f->get_bool("a.bool"));
  CHECK(f->get_string("a.str") == "h\xC3\xA9llo");
  auto& strs = f->get_array("a.strs");
  REQUIRE(strs.values.size() == 3);
  CHECK(std::get<std::string>(strs.values[2]) == "yz");
  CHECK(std::get<double>(f->get_array("a.f32s").values[1]) == -2.0);
  CHECK(std::get<int64_t>(f->get_array("a.i32s").values[1]) == -4);
  auto& t = f->tensor("t");
  CHECK(t.ne == std::vector<uint64_t>{4, 2});
  CHECK(reinterpret_cast<const float*>(t.data)[5] == 6.0f);
  CHECK(reinterpret_cast<uintptr_t>(t.data) % 32 == 0);
  float u[3];
  dequantize(tensor_type::f16, f->tensor("u").data, u, 3);
  CHECK(u[0] == 1.0f);
  CHECK(u[1] == -2.0f);
  CHECK(u[2] == 0.25f);
  CHECK_THROWS_WITH(f->get_string("a.u32"),
                    Catch::Contains("'a.u32' has type uint32"));
  CHECK_THROWS_WITH(f->get_uint("nope"),
                    Catch::Contains("missing required key 'nope'"));
}

TEST_CASE("a generated file is memory-mapped and read back from disk",
          "[gguf]") {
  test::temp_file tf("mapped");
  make_test_model(tiny(), tf.path());
  auto f = gguf_file::open(tf.path());
  auto hp = llama_hparams::from_gguf(*f);
  CHECK(hp.n_layer == 2);
  CHECK(hp.n_embd == 32);
  CHECK(hp.n_head_kv == 2);
  CHECK(hp.n_vocab == 400);
  CHECK(f->find_tensor("output.weight") != nullptr);
  CHECK_THROWS_WITH(gguf_file::open(tf.path() + ".missing"),
                    Catch::Contains("cannot open"));
}

TEST_CASE("Q8_0 and F16 encodings round-trip within their precision",
          "[gguf]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> x(256), y(256);
  for (auto& v : x)
    v = d(rng);
  std::vector<uint8_t> q(row_bytes(tensor_type::q8_0, 256));
  quantize(tensor_type::q8_0, x.data(), q.data(), 256);
  dequantize(tensor_type::q8_0, q.data(), y.data(), 256);
  for (size_t i = 0; i < 256; ++i)
    REQUIRE(std::fabs(x[i] - y[i]) <= 3.0f / 127.0f);
  std::vector<uint8_t> h(row_bytes(tensor_type::f16, 256));
  quantize(tensor_type::f16, x.data(), h.data(), 256);
  dequantize(tensor_type::f16, h.data(), y.data(), 256);
  for (size_t i = 0; i < 256; ++i)
    REQUIRE(std::fabs(x[i] - y[i]) <= std::fabs(x[i]) * 1e-3f);
  CHECK(f16_to_f32(f32_to_f16(65504.0f)) == 65504.0f);
  CHECK(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  CHECK(f16_to_f32(f32_to_f16(5.9604645e-8f)) == 5.9604645e-8f);
}

TEST_CASE("tensor types cover llama.cpp's weight formats from one table",
          "[gguf]") {
  struct row {
    uint32_t id;
    const char* name;
    uint64_t elements, bytes;
  };
  const row expected[] = {
    {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},    {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110},
    {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176}, {14, "Q6_K", 256, 210},
    {30, "BF16", 1, 2}};
  REQUIRE(all_tensor_types().size() == std::size(expected));
  for (auto& e : expected) {
    INFO(e.name);
    const tensor_type* t = find_tensor_type(e.id);
    REQUIRE(t != nullptr);
    CHECK(std::string(to_string(*t)) == e.name);
    CHECK(block_elements(*t) == e.elements);
    CHECK(block_bytes(*t) == e.bytes);
    CHECK(row_bytes(*t, 512) == 512 / e.elements * e.bytes);
    CHECK(is_k_quant(*t) == (e.elements == 256));
    std::string lower = e.name;
    for (auto& c : lower)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    REQUIRE(parse_tensor_type(lower) != nullptr);
    CHECK(*parse_tensor_type(lower) == *t);
  }
  for (uint32_t id : {4u, 5u, 9u, 15u, 16u, 29u, 31u, 1000u})
    CHECK(find_tensor_type(id) == nullptr);
  CHECK(parse_tensor_type("q8_k") == nullptr);
  CHECK(parse_tensor_type("q4_k_m") == nullptr);
  CHECK_THROWS_WITH(row_bytes(tensor_type::q4_k, 128),
                    Catch::Contains("not a multiple of the Q4_K block size "
                                    "256"));
}

TEST_CASE("every tensor type round-trips through a GGUF file", "[gguf]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> x(512);
  for (auto& v : x)
    v = d(rng);
  gguf_writer w;
  w.set_string("general.architecture", "llama");
  for (auto t : all_tensor_types())
    w.add_tensor(std::string("t.") + to_string(t), {256, 2}, t, x);
  auto b = w.bytes();
  auto f = gguf_file::parse(b.data(), b.size());
  for (auto t : all_tensor_types()) {
    INFO(to_string(t));
    auto& ti = f->tensor(std::string("t.") + to_string(t));
    CHECK(ti.type == t);
    CHECK(ti.n_bytes == row_bytes(t, 512));
    std::vector<float> y(512);
    dequantize(t, ti.data, y.data(), 512);
    // Within the format's precision: 2 bits of 1.0 for Q2_K down to half
    // and bfloat16 rounding.
    const double bound = t == tensor_type::f32 ? 0.0
                         : t == tensor_type::q2_k ? 0.5
                         : t == tensor_type::q3_k ? 0.25
                         : t == tensor_type::q4_0 ? 0.13 // d = max / -8
                         : (t == tensor_type::q4_1 || t == tensor_type::q4_k)
                           ? 0.1
                         : t == tensor_type::q5_0 ? 0.07 // d = max / -16
                         : (t == tensor_type::q5_1 || t == tensor_type::q5_k)
                           ? 0.05
                           : 0.02;
    double worst = 0;
    for (size_t i = 0; i < 512; ++i)
      worst = std::max(worst, double(std::fabs(x[i] - y[i])));
    CHECK(worst <= bound);
  }
}

TEST_CASE("per-layer costs count the head last and the embedding nowhere",
          "[gguf]") {
  auto b = tiny_bytes();
  auto f = gguf_file::parse(b.data(), b.size());
  auto hp = llama_hparams::from_gguf(*f);
  auto c = layer_costs(*f, hp);
  REQUIRE(c.size() == 2);
  const uint64_t embd = 32ull * 400 * 4, head = embd, norm = 32 * 4;
  const uint64_t layer = 2 * norm + (32 * 32 + 2 * 32 * 16 + 32 * 32) * 4
                         + 3 * 32 * 64 * 4;
  CHECK(c[0].weight_bytes == layer); // the embedding stays on the host
  CHECK(c[1].weight_bytes == layer + norm + head);
  CHECK(c[0].kv_bytes_per_token == 2 * 16 * 2); // an f16 cache
  CHECK(c[0].activation_bytes == 32 * 4);
  CHECK(c[1].activation_bytes == 400 * 4);
  CHECK(c[1].flops_per_token == c[0].flops_per_token + 2 * 32 * 400);
  // A decode step's operations: 17 a layer, the last one's norm and head
  // (device_stage_tests checks them against what a stage runs).
  CHECK(c[0].operations == 17);
  CHECK(c[1].operations == 19);
}

TEST_CASE("each kind of malformed file is refused with its message",
          "[gguf]") {
  const auto good = tiny_bytes();
  REQUIRE(parse_error(good) == "no error");
  struct row {
    const char* what;
    std::function<void(std::vector<uint8_t>&)> mutate;
    const char* message;
  };
  const std::string name = "blk.0.attn_q.weight";
  std::vector<row> table = {
    {"wrong magic", [](auto& b) { b[0] = 'X'; }, "wrong magic"},
    {"version 2", [](auto& b) { poke<uint32_t>(b, 4, 2); },
     "unsupported GGUF version 2"},
    {"empty file", [](auto& b) { b.clear(); }, "truncated file"},
    {"cut in the header", [](auto& b) { b.resize(20); }, "truncated file"},
    {"cut in the metadata", [](auto& b) { b.resize(300); },
     "truncated"},
    {"cut in the data", [](auto& b) { b.resize(b.size() - 100); },
     "outside the data section"},
    {"huge metadata count",
     [](auto& b) { poke<uint64_t>(b, 16, 1ull << 50); },
     "metadata count"},
    {"huge tensor count",
     [](auto& b) { poke<uint64_t>(b, 8, 1ull << 50); }, "tensor count"},
    {"string length past the end",
     [](auto& b) { poke<uint64_t>(b, 24, 1ull << 40); },
     "string length 1099511627776"},
    {"array count past the end",
     [&](auto& b) {
       poke<uint64_t>(b, after(b, "tokenizer.ggml.tokens") + 8, 1ull << 40);
     },
     "array count 1099511627776 of key 'tokenizer.ggml.tokens'"},
    {"unknown value type",
     [&](auto& b) { poke<uint32_t>(b, after(b, "general.name"), 99); },
     "unknown metadata value type 99 for key 'general.name'"},
    {"offset outside the file",
     [&](auto& b) {
       poke<uint64_t>(b, after(b, name) + 4 + 16 + 4, 1ull << 40);
     },
     "offset or size outside the file"},
    {"misaligned offset",
     [&](auto& b) {
       auto p = after(b, name) + 4 + 16 + 4;
       uint64_t off;
       std::memcpy(&off, b.data() + p, 8);
       poke<uint64_t>(b, p, off + 4);
     },
     "is not a multiple of the alignment"},
    {"dimension product overflows",
     [&](auto& b) {
       poke<uint64_t>(b, after(b, name) + 4, 1ull << 40);
       poke<uint64_t>(b, after(b, name) + 12, 1ull << 40);
     },
     "product of dimensions overflows"},
    {"five dimensions",
     [&](auto& b) { poke<uint32_t>(b, after(b, name), 5); },
     "has 5 dimensions"},
    {"unknown tensor type",
     [&](auto& b) { poke<uint32_t>(b, after(b, name) + 4 + 16, 4); },
     "unknown or unsupported tensor type 4"},
    {"activation-only tensor type",
     [&](auto& b) { poke<uint32_t>(b, after(b, name) + 4 + 16, 15); },
     "tensor type 15 (q8_K, an activation format)"},
    {"duplicate tensor name",
     [&](auto& b) {
       auto p = after(b, "blk.0.attn_k.weight") - 8;
       std::memcpy(b.data() + p, "q", 1); // attn_k -> attn_q
       (void)p;
     },
     "duplicate tensor name 'blk.0.attn_q.weight'"},
    {"alignment not a power of two",
     [&](auto& b) {
       poke<uint32_t>(b, after(b, "general.alignment") + 4, 24);
     },
     "not a power of two"},
    {"missing block count",
     [&](auto& b) {
       b[after(b, "llama.block_count") - 1] = 'X';
     },
     "missing required key 'llama.block_count'"},
    {"block count beyond the file",
     [&](auto& b) {
       poke<uint32_t>(b, after(b, "llama.block_count") + 4, 0xffffffffu);
     },
     "'llama.block_count' is 4294967295, but the file has only"},
    {"missing tensor",
     [&](auto& b) { b[after(b, "blk.1.ffn_up.weight") - 1] = 'X'; },
     "missing tensor 'blk.1.ffn_up.weight'"},
    {"wrong architecture",
     [&](auto& b) {
       auto p = after(b, "general.architecture") + 4 + 8;
       std::memcpy(b.data() + p, "llamb", 5);
     },
     "unsupported architecture 'llamb'"},
    {"wrong tensor shape",
     [&](auto& b) {
       auto p = after(b, "blk.1.attn_v.weight") + 4;
       uint64_t a, c;
       std::memcpy(&a, b.data() + p, 8);
       std::memcpy(&c, b.data() + p + 8, 8);
       poke<uint64_t>(b, p, c);
       poke<uint64_t>(b, p + 8, a);
     },
     "'blk.1.attn_v.weight' has shape [16, 32] but [32, 16] was expected"},
  };
  for (auto& r : table) {
    SECTION(r.what) {
      auto b = good;
      r.mutate(b);
      CHECK_THAT(parse_error(b), Catch::Contains(r.message));
    }
  }
}

TEST_CASE("a repeated metadata key is refused", "[gguf]") {
  gguf_writer w;
  w.set_u32("k.one", 1);
  w.set_u32("k.two", 2);
  auto b = w.bytes();
  auto p = after(b, "k.two") - 3;
  std::memcpy(b.data() + p, "one", 3);
  CHECK_THROWS_WITH(gguf_file::parse(b.data(), b.size()),
                    Catch::Contains("duplicate metadata key 'k.one'"));
}

TEST_CASE("overlapping tensors are refused", "[gguf]") {
  gguf_writer w;
  w.add_tensor("a", {8}, tensor_type::f32, std::vector<float>(8, 1.0f));
  w.add_tensor("b", {8}, tensor_type::f32, std::vector<float>(8, 2.0f));
  auto b = w.bytes();
  poke<uint64_t>(b, after(b, "b") + 4 + 8 + 4, 0);
  CHECK_THROWS_WITH(gguf_file::parse(b.data(), b.size()),
                    Catch::Contains("overlap"));
}

TEST_CASE("mutations of a mixed K-quant model are refused or run, never "
          "crash",
          "[gguf][fuzz]") {
  auto o = tiny();
  o.layers = 1;
  o.dim = 256;
  o.ff = 256;
  o.heads = 2;
  o.kv_heads = 1;
  o.type = tensor_type::q4_k;
  o.mix = file_type::mix::q4_k_m; // Q4_K, Q6_K and F32 tensors
  const auto good = build_test_model(o).bytes();
  std::mt19937_64 rng(777);
  int refused = 0, accepted = 0;
  for (int i = 0; i < 400; ++i) {
    auto b = good;
    switch (rng() % 3) {
      case 0: // truncate
        b.resize(rng() % b.size());
        break;
      case 1: { // a small integer somewhere in the header (tensor types)
        size_t p = rng() % std::min<size_t>(b.size() - 4, 14000);
        uint32_t v = static_cast<uint32_t>(rng() % 40);
        std::memcpy(b.data() + p, &v, 4);
        break;
      }
      default: // flip bytes anywhere, the blocks' scales included
        for (int k = 0, n = 1 + rng() % 8; k < n; ++k)
          b[rng() % b.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    try {
      auto f = gguf_file::parse(b.data(), b.size());
      auto m = std::make_shared<llama_model>(f);
      llama_pipeline pipe(m, {0, m->hparams().n_layer});
      auto seq = pipe.new_sequence(8);
      (void)pipe.eval(seq, {1, 2});
      ++accepted;
    } catch (const gguf_error&) {
      ++refused;
    } catch (const model_error&) {
      ++refused;
    }
  }
  CHECK(refused + accepted == 400);
  CHECK(refused > 50);
  CHECK(accepted > 50);
}

TEST_CASE("thousands of random mutations and truncations never crash",
          "[gguf][fuzz]") {
  const auto good = tiny_bytes();
  std::mt19937_64 rng(12345);
  int refused = 0, accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    auto b = good;
    switch (rng() % 4) {
      case 0: // flip a few random bytes
        for (int k = 0, n = 1 + rng() % 8; k < n; ++k)
          b[rng() % b.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
        break;
      case 1: // truncate
        b.resize(rng() % b.size());
        break;
      case 2: { // overwrite 8 bytes in the header region with a large value
        size_t p = rng() % std::min<size_t>(b.size() - 8, 12000);
        uint64_t v = rng() % 3 == 0 ? ~0ull : rng() >> (rng() % 64);
        std::memcpy(b.data() + p, &v, 8);
        break;
      }
      default: { // overwrite 4 bytes with a small integer
        size_t p = rng() % std::min<size_t>(b.size() - 4, 12000);
        uint32_t v = static_cast<uint32_t>(rng() % 40);
        std::memcpy(b.data() + p, &v, 4);
        break;
      }
    }
    try {
      auto f = gguf_file::parse(b.data(), b.size());
      llama_model m(f);
      auto t = tokenizer::from_gguf(*f);
      (void)t.encode("hello world", true);
      ++accepted;
    } catch (const gguf_error&) {
      ++refused;
    }
  }
  CHECK(refused + accepted == 3000);
  CHECK(refused > 500);
}
