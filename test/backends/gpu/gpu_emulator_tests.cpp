// The GPU emulator (gpu_emulator.hpp) and, through it, the shared kernels
// of kernels.cuh as the GPU runs them: blocks of threads with barriers,
// shared memory and grid-stride loops, on the host. The emulator's own
// semantics first (barriers, divergence, launch limits, streams and
// events), then the kernels: against their host replicas
// (kernel_reference.hpp) bit for bit, rows of a batch against the same
// rows alone, paged attention against one run of rows, and every kernel
// with its threads in both orders (a result that depends on the order is a
// race between threads).

#include "backends/gpu_common/gpu_emulator.hpp"
#include "backends/gpu_common/gpu_emulator_backend.hpp"
#include "backends/gpu_common/kernel_math.hpp"
#include "backends/gpu_common/kernel_quant.hpp"
#include "backends/gpu_common/kernel_reference.hpp"
#include "backends/gpu_common/launch_geometry.hpp"
#include "backends/host_kernels.hpp"
#include "backends/quant_formats.hpp"
#include "backends/quant_repack.hpp"

#define EXO_GPU_KERNEL_NS emu_kernels
#include "backends/gpu_common/kernel_api.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

using namespace exo::backend;
namespace emu = exo::backend::gpu::emu;
namespace k = exo::backend::emu_kernels;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed,
                                 float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> d{lo, hi};
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

/// Within rel of want (relative to 1 at least): the replicas of the row
/// kernels sum in another order than the threads' tree.
bool close_to(const std::vector<float>& got, const std::vector<float>& want,
              double rel) {
  if (got.size() != want.size())
    return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i])
          <= rel * std::max(1.0, std::fabs(double{want[i]}))))
      return false;
  return true;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size()
         && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Runs f with the threads of each block forward, then backward; both
/// results must have the same bits (else threads race), and the first is
/// returned.
template <class F>
std::vector<float> both_orders(F f) {
  emu::set_thread_order(emu::thread_order::forward);
  auto fwd = f();
  emu::set_thread_order(emu::thread_order::reverse);
  auto rev = f();
  emu::set_thread_order(emu::thread_order::forward);
  CHECK(same_bits(fwd, rev));
  return fwd;
}

/// C = A W^T through launch_matmul_weights on the null stream.
std::vector<float> product(const std::vector<float>& a,
                           const std::vector<std::uint8_t>& w,
                           weight_type t, matmul_dims d) {
  std::vector<float> c(d.m * d.n, -1.0f);
  std::vector<std::uint8_t> scratch(gpu::act_scratch_bytes(t, d) + 1);
  REQUIRE(k::launch_matmul_weights(
            a.data(), w.data(), t, c.data(), d, scratch.data(),
            quant::q4_k_pair_tokens(d.m, d.rows_apart), nullptr)
          == 0);
  return c;
}

std::vector<std::uint8_t> encode(weight_type t, const std::vector<float>& w,
                                 std::size_t n, std::size_t kk) {
  const std::size_t rb = *weight_row_bytes(t, kk);
  std::vector<std::uint8_t> enc(rb * n);
  for (std::size_t j = 0; j < n; ++j)
    host::encode_row(t, w.data() + j * kk, enc.data() + j * rb, kk);
  return enc;
}

/// The rows of caches kc and vc (rows of `stride` values) in blocks of B
/// rows: cache block i at slot (i * step) % blocks of a pool whose slots
/// are 2B rows apart, `fill` between.
struct paged_caches {
  std::vector<std::int32_t> table;
  std::vector<float> k, v;
  std::size_t B, block;
  /// d reading these blocks.
  attention_dims dims(attention_dims d) const {
    d.block_positions = B;
    d.block_stride = block;
    d.block_table = table.data();
    d.max_block = table.size();
    return d;
  }
};
paged_caches page(const std::vector<float>& kc, const std::vector<float>& vc,
                  std::size_t stride, std::size_t B, std::size_t step,
                  float fill) {
  const std::size_t ctx = kc.size() / stride, blocks = (ctx + B - 1) / B;
  paged_caches pc{std::vector<std::int32_t>(blocks), {}, {}, B,
                  2 * B * stride};
  for (std::size_t i = 0; i < blocks; ++i)
    pc.table[i] = static_cast<std::int32_t>((i * step) % blocks);
  pc.k.assign((blocks + 1) * pc.block, fill);
  pc.v = pc.k;
  for (std::size_t p = 0; p < ctx; ++p) {
    const std::size_t at =
      static_cast<std::size_t>(pc.table[p / B]) * pc.block + (p % B) * stride;
    std::copy_n(kc.begin() + p * stride, stride, pc.k.begin() + at);
    std::copy_n(vc.begin() + p * stride, stride, pc.v.begin() + at);
  }
  return pc;
}

} // namespace

TEST_CASE("emulated blocks meet at barriers, share their static memory and "
          "see their indices") {
  // Each thread writes its index, waits, then reads its neighbour's: only a
  // barrier between the two makes every read see the write.
  std::vector<unsigned> out(3 * 64);
  static unsigned shared[64];
  auto st = emu::run_grid(emu::dim3{3}, emu::dim3{64}, [&] {
    const unsigned t = emu::thread_idx().x, b = emu::block_idx().x;
    shared[t] = b * 1000 + t;
    emu::syncthreads();
    out[b * 64 + t] = shared[(t + 1) % emu::block_dim().x];
    emu::syncthreads();
  });
  REQUIRE(st == 0);
  for (unsigned b = 0; b < 3; ++b)
    for (unsigned t = 0; t < 64; ++t)
      CHECK(out[b * 64 + t] == b * 1000 + (t + 1) % 64);
  // Two- and three-dimensional indices cover every thread once.
  std::vector<int> seen(2 * 3 * 4 * 5, 0);
  REQUIRE(emu::run_grid(emu::dim3{2, 3}, emu::dim3{4, 5}, [&] {
            auto t = emu::thread_idx();
            auto b = emu::block_idx();
            ++seen[((b.y * emu::grid_dim().x + b.x) * 5 + t.y) * 4 + t.x];
          })
          == 0);
  CHECK(std::count(seen.begin(), seen.end(), 1)
        == static_cast<long>(seen.size()));
}

TEST_CASE("an emulated barrier that not every thread reaches fails the "
          "launch, and launches beyond the limits are refused") {
  auto divergent = emu::run_grid(emu::dim3{1}, emu::dim3{32}, [] {
    if (emu::thread_idx().x < 16)
      emu::syncthreads();
  });
  CHECK(divergent == emu::error_launch_failure);
  // After a failure the next launch runs normally (fibers start afresh).
  std::atomic<int> ran{0};
  CHECK(emu::run_grid(emu::dim3{2}, emu::dim3{8}, [&] {
          emu::syncthreads();
          ++ran;
        })
        == 0);
  CHECK(ran == 16);
  for (auto [g, b] : {std::pair{emu::dim3{0}, emu::dim3{32}},
                      std::pair{emu::dim3{1}, emu::dim3{2048}},
                      std::pair{emu::dim3{1}, emu::dim3{64, 32}},
                      std::pair{emu::dim3{1, 70000}, emu::dim3{32}}})
    CHECK(emu::run_grid(g, b, [] {}) == emu::error_invalid_configuration);
}

TEST_CASE("emulated warp shuffles exchange floats and integers within 32 "
          "lanes, and a shuffle beside a barrier fails the launch") {
  std::vector<float> out(2 * 64);
  REQUIRE(emu::run_grid(emu::dim3{2}, emu::dim3{64}, [&] {
            const unsigned t = emu::thread_idx().x, b = emu::block_idx().x;
            float v = static_cast<float>(t);
            const float swapped = emu::shfl_xor(v, 1);
            for (unsigned x = 16; x > 0; x /= 2)
              v += emu::shfl_xor(v, x);
            out[b * 64 + t] = v * 1000 + swapped;
          })
          == 0);
  for (unsigned t = 0; t < 64; ++t) {
    // The sum of the lane numbers of t's 32 (0..31 or 32..63), and the
    // neighbour's number.
    const float warp_sum = t < 32 ? 496.0f : 1520.0f;
    CHECK(out[t] == warp_sum * 1000 + static_cast<float>(t ^ 1));
    CHECK(out[64 + t] == out[t]);
  }
  // Integers move whole: values a float cannot hold, and negatives.
  std::vector<int> ints(64);
  REQUIRE(emu::run_grid(emu::dim3{1}, emu::dim3{64}, [&] {
            const int t = static_cast<int>(emu::thread_idx().x);
            const int v = (t % 2 ? -1 : 1) * ((1 << 24) + 2 * t + 1);
            ints[static_cast<std::size_t>(t)] = emu::shfl_xor(v, 3u);
          })
          == 0);
  for (int t = 0; t < 64; ++t) {
    const int from = t ^ 3;
    CHECK(ints[static_cast<std::size_t>(t)]
          == (from % 2 ? -1 : 1) * ((1 << 24) + 2 * from + 1));
  }
  CHECK(emu::run_grid(emu::dim3{1}, emu::dim3{64}, [] {
          if (emu::thread_idx().x < 32)
            (void)emu::shfl_xor(1.0f, 1);
          else
            emu::syncthreads();
        })
        == emu::error_launch_failure);
}

TEST_CASE("an emulated stream runs its work in order after the call, and "
          "events and waits order streams") {
  emu::configure({1, std::size_t{64} << 20});
  REQUIRE(emu::set_device(0) == emu::success);
  emu::stream_t a = nullptr, b = nullptr;
  REQUIRE(emu::stream_create_with_flags(&a, emu::stream_non_blocking)
          == emu::success);
  REQUIRE(emu::stream_create_with_flags(&b, emu::stream_non_blocking)
          == emu::success);
  void* dev = nullptr;
  REQUIRE(emu::malloc_async(&dev, 4096, a) == emu::success);
  CHECK(emu::bytes_in_use(0) == 4096);
  // Fresh device memory reads as NaN patterns, not zeros.
  std::vector<float> host(1024, 1.0f), back(1024, 0.0f);
  REQUIRE(emu::memcpy_async(back.data(), dev, 4096, emu::device_to_host, a)
          == emu::success);
  REQUIRE(emu::stream_synchronize(a) == emu::success);
  CHECK(std::isnan(back[0]));
  // Stream b waits for a's event: its copy sees a's kernel's writes.
  REQUIRE(emu::memcpy_async(dev, host.data(), 4096, emu::host_to_device, a)
          == emu::success);
  emu::launch_on_stream("test", a, emu::dim3{4}, emu::dim3{256}, [dev] {
    auto* f = static_cast<float*>(dev);
    f[emu::block_idx().x * 256 + emu::thread_idx().x] *= 3.0f;
  });
  REQUIRE(emu::get_last_error() == emu::success);
  emu::event_t ev = nullptr;
  REQUIRE(emu::event_create_with_flags(&ev, emu::event_disable_timing)
          == emu::success);
  REQUIRE(emu::event_record(ev, a) == emu::success);
  REQUIRE(emu::stream_wait_event(b, ev, 0) == emu::success);
  REQUIRE(emu::memcpy_async(back.data(), dev, 4096, emu::device_to_host, b)
          == emu::success);
  REQUIRE(emu::stream_synchronize(b) == emu::success);
  CHECK(std::all_of(back.begin(), back.end(),
                    [](float x) { return x == 3.0f; }));
  REQUIRE(emu::event_synchronize(ev) == emu::success);
  CHECK(emu::event_query(ev) == emu::success);
  // Copies outside an allocation are refused when they are made.
  CHECK(emu::memcpy_async(back.data(), static_cast<char*>(dev) + 8, 4096,
                          emu::device_to_host, a)
        == emu::error_invalid_value);
  CHECK(emu::get_last_error() == emu::error_invalid_value);
  CHECK(emu::get_last_error() == emu::success);
  // A kernel that fails makes the stream's synchronization fail.
  emu::launch_on_stream("test", a, emu::dim3{1}, emu::dim3{2}, [] {
    if (emu::thread_idx().x == 0)
      emu::syncthreads();
  });
  CHECK(emu::stream_synchronize(a) == emu::error_launch_failure);
  REQUIRE(emu::free_async(dev, b) == emu::success);
  REQUIRE(emu::stream_synchronize(b) == emu::success);
  CHECK(emu::bytes_in_use(0) == 0);
  // Beyond the device's memory: an out-of-memory error, nothing held.
  void* big = nullptr;
  CHECK(emu::malloc_async(&big, std::size_t{65} << 20, b)
        == emu::error_memory_allocation);
  (void)emu::get_last_error();
  CHECK(emu::bytes_in_use(0) == 0);
  REQUIRE(emu::event_destroy(ev) == emu::success);
  REQUIRE(emu::stream_destroy(a) == emu::success);
  REQUIRE(emu::stream_destroy(b) == emu::success);
  emu::configure({});
}

TEST_CASE("the emulated row kernels agree with their host replicas") {
  const std::size_t rows = 5, cols = 300;
  auto x = random_floats(rows * cols, 1, -3, 3);
  auto w = random_floats(cols, 2);
  std::vector<float> want(rows * cols);
  gpu::reference::rmsnorm(x.data(), w.data(), want.data(), rows, cols, 1e-5f);
  auto got = both_orders([&] {
    std::vector<float> out(rows * cols);
    REQUIRE(k::launch_rmsnorm(x.data(), w.data(), out.data(), rows, cols,
                              1e-5f, nullptr)
            == 0);
    return out;
  });
  CHECK(close_to(got, want, 1e-5));
  gpu::reference::softmax_rows(x.data(), want.data(), rows, cols);
  got = both_orders([&] {
    std::vector<float> out(rows * cols);
    REQUIRE(k::launch_softmax_rows(x.data(), out.data(), rows, cols, nullptr)
            == 0);
    return out;
  });
  CHECK(close_to(got, want, 1e-5));
  // The tiled product (bit for bit: each thread sums its row and column
  // in the replica's order), with edges that are not multiples of the tile.
  matmul_dims d{19, 23, 37, true};
  auto a = random_floats(d.m * d.k, 3);
  auto b = random_floats(d.n * d.k, 4);
  std::vector<float> c_want(d.m * d.n);
  gpu::reference::tiled_matmul(a.data(), b.data(), c_want.data(), d);
  got = both_orders([&] {
    std::vector<float> c(d.m * d.n);
    REQUIRE(k::launch_matmul_tiled(a.data(), b.data(), c.data(), d, nullptr)
            == 0);
    return c;
  });
  CHECK(same_bits(got, c_want));
}

namespace {

/// A KV cache of kc's values as `kv` stores them: f32 as they are, f16 as
/// their halves, q8_0 as the host's to_q8_0 quantizes them (rows of
/// whole blocks).
std::vector<std::uint8_t> cache_bytes(const std::vector<float>& kc,
                                      kv_type kv) {
  std::vector<std::uint8_t> out;
  if (kv == kv_type::f32) {
    out.resize(kc.size() * 4);
    std::memcpy(out.data(), kc.data(), out.size());
  } else if (kv == kv_type::f16) {
    out.resize(kc.size() * 2);
    for (std::size_t i = 0; i < kc.size(); ++i) {
      const std::uint16_t h = gpu::math::float_to_half(kc[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else {
    std::vector<host::block_q8_0> b(kc.size() / 32);
    host::quantize_q8_0_activations(kc.data(), b.data(), kc.size());
    out.resize(b.size() * sizeof(host::block_q8_0));
    std::memcpy(out.data(), b.data(), out.size());
  }
  return out;
}

/// host::attention's output for dims over caches of kc, vc stored as kv.
std::vector<float> host_attention(const std::vector<float>& q,
                                  const std::vector<float>& kc,
                                  const std::vector<float>& vc,
                                  attention_dims d, kv_type kv) {
  std::vector<float> out(q.size());
  d.kv = kv;
  const auto kb = cache_bytes(kc, kv), vb = cache_bytes(vc, kv);
  if (kv == kv_type::f32)
    host::attention(q.data(), reinterpret_cast<const float*>(kb.data()),
                    reinterpret_cast<const float*>(vb.data()), out.data(), d,
                    1);
  else if (kv == kv_type::f16)
    host::attention(q.data(),
                    reinterpret_cast<const std::uint16_t*>(kb.data()),
                    reinterpret_cast<const std::uint16_t*>(vb.data()),
                    out.data(), d, 1);
  else
    host::attention(q.data(),
                    reinterpret_cast<const host::block_q8_0*>(kb.data()),
                    reinterpret_cast<const host::block_q8_0*>(vb.data()),
                    out.data(), d, 1);
  return out;
}

/// launch_attention on the emulator over the same caches (both thread
/// orders).
std::vector<float> emulated_attention(const std::vector<float>& q,
                                      const std::vector<float>& kc,
                                      const std::vector<float>& vc,
                                      attention_dims d, kv_type kv) {
  d.kv = kv;
  const auto kb = cache_bytes(kc, kv), vb = cache_bytes(vc, kv);
  return both_orders([&] {
    std::vector<float> out(q.size(), -1.0f);
    REQUIRE(k::launch_attention(q.data(), kb.data(), vb.data(), out.data(),
                                d, nullptr)
            == 0);
    return out;
  });
}

/// The shape of an attention case: query rows (tokens) after pos0 cached
/// positions, query and K/V heads, head size.
struct attention_shape {
  std::size_t tokens, pos0, heads, kvh, hd;
};

/// Random queries and caches of a shape (seeds from ++seed), with scores
/// that tie and a maximum that returns: every fifth K row repeats the
/// one two before it.
struct attention_case {
  attention_dims d;
  std::vector<float> q, kc, vc;
  attention_case(const attention_shape& sh, std::size_t& seed)
      : d{sh.tokens, sh.pos0, sh.heads, sh.kvh, sh.hd, sh.kvh * sh.hd,
          1.0f / std::sqrt(static_cast<float>(sh.hd))} {
    const std::size_t stride = d.kv_stride, ctx = sh.pos0 + sh.tokens;
    q = random_floats(sh.tokens * sh.heads * sh.hd, ++seed, -3, 3);
    kc = random_floats(ctx * stride, ++seed, -3, 3);
    vc = random_floats(ctx * stride, ++seed, -2, 2);
    for (std::size_t p = 2; p < ctx; p += 5)
      std::copy_n(kc.begin() + (p - 2) * stride, stride,
                  kc.begin() + p * stride);
  }
};

} // namespace

TEST_CASE("emulated decode attention gives host::attention's bits, paged "
          "and rows apart too") {
  // Head sizes with and without a rest past the blocks of 64 (40: only a
  // rest), GQA groups of 1, 2 and 4, positions in one tile of cells and
  // in several (the kernel's tiles are 128 cells), f32, f16 and q8_0 caches.
  const attention_shape shapes[] = {
    {1, 0, 2, 2, 64},    {1, 37, 4, 2, 128}, {3, 300, 4, 1, 80},
    {2, 127, 8, 2, 40},  {1, 700, 2, 1, 256}, {63, 5, 2, 2, 64},
    {70, 3, 2, 1, 72},   {4, 20, 4, 2, 32}};
  std::size_t seed = 100;
  for (const auto& sh : shapes)
    for (kv_type kv : {kv_type::f32, kv_type::f16, kv_type::q8_0}) {
      if (kv == kv_type::q8_0 && sh.hd % 32 != 0)
        continue; // q8_0 caches hold whole blocks of a head

      const attention_case c(sh, seed);
      const auto& d = c.d;
      const auto &q = c.q, &kc = c.kc, &vc = c.vc;
      REQUIRE((kv == kv_type::q8_0
               || gpu::math::attention_one_chunk(d.n_tokens, d.head_dim,
                                                 false)));
      INFO("tokens " << sh.tokens << ", pos0 " << sh.pos0 << ", heads "
                     << sh.heads << "/" << sh.kvh << ", head_dim " << sh.hd
                     << ", " << static_cast<int>(kv));
      auto want = host_attention(q, kc, vc, d, kv);
      CHECK(same_bits(emulated_attention(q, kc, vc, d, kv), want));
      // A paged cache: blocks of 16 in a shuffled order, other rows between.
      const auto pc = page(kc, vc, d.kv_stride, 16, 7, 9.0f);
      const auto dp = pc.dims(d);
      CHECK(same_bits(emulated_attention(q, pc.k, pc.v, dp, kv), want));
      // Rows apart (attention_paged_rows' tables): row t one token at
      // pos0 + t over the same table, whatever the batch's size.
      std::vector<std::int32_t> rows;
      for (std::size_t t = 0; t < sh.tokens; ++t) {
        rows.push_back(static_cast<std::int32_t>(sh.pos0 + t));
        rows.insert(rows.end(), pc.table.begin(), pc.table.end());
      }
      auto dr = dp;
      dr.block_table = nullptr;
      dr.row_tables = rows.data();
      dr.row_table_len = pc.table.size();
      CHECK(same_bits(emulated_attention(q, pc.k, pc.v, dr, kv), want));
    }
}

TEST_CASE("emulated prompt attention gives host::attention's bits (ggml's "
          "tiled path), paged too") {
  // 64 rows and more with head sizes of multiples of 16: the host's tiled
  // path, tiles of 64 cells. Prompts that start at 0 and after a cache
  // (pos0 past one tile and past many), a row count that is no multiple
  // of 64, GQA groups of 1, 2 and 4, f32 and f16 caches.
  const attention_shape shapes[] = {
    {64, 0, 2, 2, 64},   {64, 700, 4, 2, 64},  {100, 37, 4, 1, 32},
    {65, 63, 8, 2, 80},  {70, 130, 2, 1, 128}, {64, 5, 2, 1, 256}};
  std::size_t seed = 300;
  for (const auto& sh : shapes)
    for (kv_type kv : {kv_type::f32, kv_type::f16}) {
      attention_case c(sh, seed);
      const auto& d = c.d;
      const auto& q = c.q;
      auto &kc = c.kc, &vc = c.vc;
      REQUIRE(host::attention_tiled_path(d));
      REQUIRE_FALSE(
        gpu::math::attention_one_chunk(d.n_tokens, d.head_dim, false));
      // A maximum that grows late: one row of large scores in the last tile.
      const std::size_t stride = d.kv_stride, ctx = sh.pos0 + sh.tokens;
      for (std::size_t i = 0; i < stride; ++i)
        kc[(ctx - 3) * stride + i] *= 4.0f;
      INFO("tokens " << sh.tokens << ", pos0 " << sh.pos0 << ", heads "
                     << sh.heads << "/" << sh.kvh << ", head_dim " << sh.hd
                     << ", " << static_cast<int>(kv));
      auto want = host_attention(q, kc, vc, d, kv);
      CHECK(same_bits(emulated_attention(q, kc, vc, d, kv), want));
      // A paged cache: blocks of 32 in a shuffled order, other rows between.
      const auto pc = page(kc, vc, stride, 32, 13, -7.0f);
      auto dp = pc.dims(d);
      CHECK(same_bits(emulated_attention(q, pc.k, pc.v, dp, kv), want));
      if (sh.pos0 < 64)
        continue;
      // Entries outside the cache read its last block: finite, in bounds.
      auto bad = pc.table;
      bad[2] = static_cast<std::int32_t>(pc.table.size() + 9);
      bad[5] = -4;
      dp.block_table = bad.data();
      for (float x : emulated_attention(q, pc.k, pc.v, dp, kv))
        CHECK(std::isfinite(x));
    }
}

TEST_CASE("the emulated product kernels give every row of a batch the bits "
          "it gets alone, in every format") {
  // What a batched step relies on: a sequence's logits do not depend on
  // which sequences share its step. Rows of A one by one against all of
  // them at once; the quantized formats also against the CPU engine.
  std::size_t compared = 0;
  for (weight_type t : all_weight_types) {
    if (t == weight_type::f32)
      continue; // the tiled kernel (above); F32 weights go through BLAS
    const bool k_quant = weight_block_elements(t) == 256;
    // n = 16 and 24: Q4_K the repacked way (24: a block of 16 rows of W
    // half past the end, whose lanes still shuffle); 20 rows otherwise.
    for (matmul_dims d : {matmul_dims{9, 16, k_quant ? 512u : 96u, true},
                          matmul_dims{17, 20, k_quant ? 256u : 64u, true},
                          matmul_dims{13, 24, k_quant ? 256u : 64u, true}}) {
      INFO(to_string(t) << " m=" << d.m << " n=" << d.n << " k=" << d.k);
      auto a = random_floats(d.m * d.k, 20 + static_cast<unsigned>(d.m), -2, 2);
      auto enc = encode(t, random_floats(d.n * d.k, 30), d.n, d.k);
      // A decode batch: rows apart (Q4_K: every token by super-block).
      auto da = d;
      da.rows_apart = true;
      auto all = both_orders([&] { return product(a, enc, t, da); });
      for (std::size_t r = 0; r < d.m; ++r) {
        std::vector<float> row(a.begin() + r * d.k,
                               a.begin() + (r + 1) * d.k);
        auto alone = product(row, enc, t, {1, d.n, d.k, true});
        INFO("row " << r);
        CHECK(std::memcmp(alone.data(), all.data() + r * d.n,
                          d.n * sizeof(float))
              == 0);
        compared += d.n;
      }
      if (gpu::math::act_format_of(ggml_type_id(t))
          != gpu::math::act_format::none) {
        // The quantized formats give the CPU engine's bits, apart and as a
        // prompt's batch (Q4_K: by pair of sub-blocks where llama.cpp's
        // gemm steps so here).
        for (auto dd : {da, d}) {
          INFO("rows apart: " << dd.rows_apart);
          std::vector<float> want(d.m * d.n);
          host::matmul_weights(a.data(), enc.data(), t, want.data(), dd, 1);
          CHECK(same_bits(product(a, enc, t, dd), want));
        }
      }
    }
  }
  CHECK(compared
        == (std::size(all_weight_types) - 1) * (9 * 16 + 17 * 20 + 13 * 24));
}

TEST_CASE("F16 weights at any even address give the same bits through the "
          "one F16 kernel") {
  matmul_dims d{5, 40, 264, true};
  auto a = random_floats(d.m * d.k, 41, -2, 2);
  auto enc = encode(weight_type::f16, random_floats(d.n * d.k, 42), d.n,
                    d.k);
  // The rows at a 16-byte boundary, and 2 bytes further on (an even
  // address, not a 16-byte one).
  std::vector<std::uint8_t> room(enc.size() + 32);
  auto* aligned = room.data();
  while (reinterpret_cast<std::uintptr_t>(aligned) % 16 != 0)
    ++aligned;
  std::vector<std::uint8_t> room2(room.size());
  auto* off = room2.data();
  while (reinterpret_cast<std::uintptr_t>(off) % 16 != 2)
    ++off;
  std::memcpy(aligned, enc.data(), enc.size());
  std::memcpy(off, enc.data(), enc.size());
  std::vector<float> one(d.m * d.n), two(d.m * d.n);
  std::vector<float> scratch(d.m * d.k);
  for (auto [w, out] : {std::pair{aligned, &one}, std::pair{off, &two}}) {
    emu::reset_stats();
    REQUIRE(k::launch_matmul_weights(a.data(), w, weight_type::f16,
                                     out->data(), d, scratch.data(), 0,
                                     nullptr)
            == 0);
    CHECK(emu::stats().kernels.count("matvec_vecdot_kernel") == 1);
    CHECK(emu::stats().kernels.count("matvec_rows_kernel") == 0);
  }
  CHECK(same_bits(one, two));
}

TEST_CASE("F16 and BF16 weights meet the activations rounded to their "
          "format, as llama.cpp rounds them") {
  // round_act_kernel rounds A once per product: the product of A is the
  // product of A rounded beforehand, bit for bit (a kernel that took A as
  // it is fails this).
  for (weight_type t : {weight_type::f16, weight_type::bf16}) {
    INFO(to_string(t));
    for (matmul_dims d : {matmul_dims{5, 24, 260, true},   // F16: rows kernel
                          matmul_dims{9, 24, 256, true}}) { // F16: warps
      auto a = random_floats(d.m * d.k, 50, -3, 3);
      auto enc = encode(t, random_floats(d.n * d.k, 51), d.n, d.k);
      std::vector<float> rounded(a.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        rounded[i] = t == weight_type::f16 ? gpu::math::round_to_half(a[i])
                                           : gpu::math::round_to_bf16(a[i]);
      const auto got = product(a, enc, t, d);
      CHECK(same_bits(got, product(rounded, enc, t, d)));
      // (Not vacuous: A's values are not all of the format already.)
      CHECK(a != rounded);
    }
  }
}

TEST_CASE("F16, F32 and BF16 products of one row of A, of rows apart and "
          "of batches give the host's bits") {
  // matvec_vecdot_kernel: 8 lanes a row of W, the chains met by shuffles,
  // the rest of the row on the first lane. Row lengths with no rest (64,
  // 128), a rest in double or in F32's epilogue (16s, then an 8, then
  // fused multiply-adds: 100, 200, 88, 24, 40), only a rest (24, 40), and
  // row counts that leave lanes of a warp without a row (1, 7, 33).
  // Batches of rows not apart take tinyBLAS's order where llamafile_sgemm
  // takes them (k a multiple of 16 and rows of W in fours: 48, 80, 128
  // with 8 rows), vec_dot's otherwise.
  std::size_t tiny = 0;
  for (weight_type t : {weight_type::f32, weight_type::f16, weight_type::bf16})
    for (std::size_t k : {64u, 128u, 100u, 200u, 88u, 24u, 40u, 48u, 80u})
      for (std::size_t n : {1u, 7u, 8u, 33u})
        for (auto [m, apart] : {std::pair{std::size_t{1}, false},
                                std::pair{std::size_t{5}, true},
                                std::pair{std::size_t{5}, false},
                                std::pair{std::size_t{9}, false}}) {
          INFO(to_string(t) << " m " << m << " n " << n << " k " << k
                            << (apart ? " apart" : ""));
          matmul_dims d{m, n, k, true, apart};
          tiny += t != weight_type::bf16
                  && gpu::math::tinyblas_takes(m, n, k, apart);
          auto a = random_floats(m * k, 60 + k, -3, 3);
          auto enc = encode(t, random_floats(n * k, 61 + n, -1, 1), n, k);
          std::vector<float> want(m * n);
          host::matmul_weights(a.data(), enc.data(), t, want.data(), d, 1);
          CHECK(same_bits(both_orders([&] { return product(a, enc, t, d); }),
                          want));
        }
  CHECK(tiny == 2 * 4 * 2); // the shapes above do take both orders
}

TEST_CASE("the emulated Q8_K quantizer, a warp a super-block, writes the "
          "replica's blocks with ties, signs, zeros, NaN and infinities") {
  // What the K-quant products read: ggml's quantize_row_q8_K. A block's
  // scale comes from its first element of largest magnitude, which the
  // warp finds by shuffles: ties across lanes and within one, either sign
  // first, blocks of zeros or NaN, infinities. 11 rows of 2 super-blocks:
  // 22 warps, the third thread block's last two past the end.
  const matmul_dims d{11, 4, 512, true};
  const std::size_t blocks = d.m * d.k / 256;
  auto a = random_floats(d.m * d.k, 77, -2, 2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto blk = [&](std::size_t b) { return a.data() + 256 * b; };
  blk(1)[40] = 3, blk(1)[200] = -3;     // across lanes, + first
  blk(2)[7] = -3, blk(2)[100] = 3;      // across lanes, - first
  std::fill(blk(3), blk(3) + 256, 0.0f);
  blk(3)[9] = -0.0f;
  std::fill(blk(4), blk(4) + 256, nan);
  blk(5)[3] = nan, blk(5)[255] = 7;     // NaN skipped, the last element
  blk(6)[41] = -2.5f, blk(6)[46] = 2.5f; // one lane's 8 elements
  blk(6)[47] = -2.5f;
  blk(7)[30] = inf, blk(7)[10] = -inf;
  std::fill(blk(8), blk(8) + 256, 0.0f);
  blk(8)[250] = 1e-40f; // a subnormal, alone
  for (std::size_t i = 0; i < 256; ++i) // equal magnitudes everywhere
    blk(9)[i] = i % 3 == 0 ? -0.5f : 0.5f;
  for (std::size_t i = 0; i < 256; ++i) // a small scale
    blk(10)[i] *= 1e-30f;
  auto enc = encode(weight_type::q4_k, random_floats(d.n * d.k, 78), d.n,
                    d.k);
  const std::size_t bytes = gpu::act_scratch_bytes(weight_type::q4_k, d);
  REQUIRE(bytes == blocks * sizeof(gpu::math::act_q8k));
  std::vector<gpu::math::act_q8k> want(blocks);
  for (std::size_t b = 0; b < blocks; ++b)
    gpu::math::quantize_act_q8k(blk(b), want[b]);
  for (auto order : {emu::thread_order::forward, emu::thread_order::reverse}) {
    emu::set_thread_order(order);
    std::vector<std::uint8_t> scratch(bytes, 0xA5);
    std::vector<float> c(d.m * d.n);
    emu::reset_stats();
    REQUIRE(k::launch_matmul_weights(a.data(), enc.data(), weight_type::q4_k,
                                     c.data(), d, scratch.data(), 0, nullptr)
            == 0);
    CHECK(emu::stats().kernels.count("quantize_q8k_warps_kernel") == 1);
    for (std::size_t b = 0; b < blocks; ++b) {
      INFO("block " << b);
      CHECK(std::memcmp(scratch.data() + b * sizeof(gpu::math::act_q8k),
                        &want[b], sizeof(gpu::math::act_q8k))
            == 0);
    }
  }
  emu::set_thread_order(emu::thread_order::forward);
  // The cases say what they test: the scale's sign follows the first.
  CHECK(want[1].d < 0);
  CHECK(want[2].d > 0);
  CHECK(want[3].d == 0);
  CHECK(want[4].d == 0);
  CHECK(want[6].d > 0);
}

TEST_CASE("the emulated dequant_rows kernel decodes every format as the "
          "host does") {
  // Rows of every format other than F32 at an even, not 4-aligned,
  // address; element i of row r against quant::dequantize_row.
  const std::size_t n = 5, kk = 512;
  for (weight_type t : all_weight_types) {
    if (t == weight_type::f32)
      continue;
    INFO(to_string(t));
    auto enc = encode(t, random_floats(n * kk, 50, -3, 3), n, kk);
    std::vector<std::uint8_t> room(enc.size() + 8);
    std::memcpy(room.data() + 6, enc.data(), enc.size());
    const std::size_t rb = *weight_row_bytes(t, kk);
    std::vector<float> want(n * kk);
    for (std::size_t r = 0; r < n; ++r)
      quant::dequantize_row(static_cast<quant::ggml_type>(ggml_type_id(t)),
                            enc.data() + r * rb, want.data() + r * kk, kk);
    auto got = both_orders([&] {
      std::vector<float> out(n * kk, -7.0f);
      REQUIRE(k::launch_dequant_rows(room.data() + 6, t, out.data(), n, kk,
                                     nullptr)
              == 0);
      return out;
    });
    CHECK(close_to(got, want, 1e-6));
  }
}

TEST_CASE("a prompt's product on the emulated device decodes the weights "
          "piece by piece and gives the tiled product's bits") {
  // gpu_options::prompt_gemm_rows: 40 rows of a prompt (not apart) take
  // the decoded weights and the tiled kernel (the emulator has no BLAS),
  // in one piece or in pieces of 10 rows of W whose results are copied
  // into their columns; 40 rows apart, and 31 rows, take the row kernels.
  emu::configure({1, std::size_t{1} << 28});
  const std::size_t kk = 256;
  for (std::size_t chunk : {std::size_t{64} << 20, 10 * kk * 4}) {
    gpu_options opts;
    opts.prompt_gemm_chunk_bytes = chunk;
    auto be = make_gpu_emulator_backend(opts);
    REQUIRE(be->initialize().ok());
    auto& dev = *be->device_at(0);
    for (weight_type t : {weight_type::f16, weight_type::q8_0,
                          weight_type::q4_k, weight_type::q6_k,
                          weight_type::bf16}) {
      for (std::size_t m : {40u, 31u}) {
        for (bool apart : {false, true}) {
          const matmul_dims d{m, 37, kk, true, apart};
          INFO(to_string(t) << " chunk " << chunk << " m=" << m
                            << " apart " << apart);
          auto a = random_floats(d.m * d.k, 60, -2, 2);
          auto enc = encode(t, random_floats(d.n * d.k, 61), d.n, d.k);
          auto ba = dev.allocate(a.size() * 4);
          auto bw = dev.allocate(enc.size() + 6);
          auto bc = dev.allocate(d.m * d.n * 4);
          REQUIRE((ba.ok() && bw.ok() && bc.ok()));
          REQUIRE(dev.write(**ba, 0, a.data(), a.size() * 4).ok());
          REQUIRE(dev.write(**bw, 6, enc.data(), enc.size()).ok());
          emu::reset_stats();
          REQUIRE(dev.matmul_weights({ba->get(), 0}, {bw->get(), 6}, t,
                                     {bc->get(), 0}, d)
                    .ok());
          std::vector<float> got(d.m * d.n);
          REQUIRE(dev.read(**bc, 0, got.data(), got.size() * 4).ok());
          const bool prompt = !apart && m >= opts.prompt_gemm_rows;
          const std::size_t pieces = chunk == 10 * kk * 4 ? 4 : 1;
          auto stats = emu::stats();
          CHECK(stats.kernels["dequant_rows_kernel"].launches
                == (prompt ? pieces : 0));
          CHECK(stats.kernels["matmul_tiled_kernel"].launches
                == (prompt ? pieces : 0));
          CHECK(stats.on_device == (prompt && pieces > 1 ? pieces : 0));
          if (!prompt) {
            // The row kernels, launched directly on W at another address
            // (modulo 16: the kernels take any).
            std::vector<std::uint8_t> room(enc.size() + 32);
            auto* at = room.data();
            while (reinterpret_cast<std::uintptr_t>(at) % 16 != 6)
              ++at;
            std::memcpy(at, enc.data(), enc.size());
            std::vector<float> want(d.m * d.n);
            std::vector<std::uint8_t> scratch(gpu::act_scratch_bytes(t, d)
                                              + 1);
            REQUIRE(k::launch_matmul_weights(
                      a.data(), at, t, want.data(), d, scratch.data(),
                      quant::q4_k_pair_tokens(d.m, d.rows_apart), nullptr)
                    == 0);
            CHECK(same_bits(got, want));
            continue;
          }
          // The replica: W decoded element by element, then the tiled
          // kernel's order.
          const std::size_t rb = *weight_row_bytes(t, d.k);
          const std::size_t be_ = weight_block_elements(t);
          const std::size_t bb = *weight_row_bytes(t, be_);
          std::vector<float> deq(d.n * d.k), want(d.m * d.n);
          for (std::size_t j = 0; j < d.n; ++j)
            for (std::size_t i = 0; i < d.k; ++i)
              deq[j * d.k + i] = gpu::math::dequant_element(
                ggml_type_id(t), enc.data() + j * rb + i / be_ * bb,
                static_cast<unsigned>(i % be_));
          gpu::reference::tiled_matmul(a.data(), deq.data(), want.data(),
                                       {d.m, d.n, d.k, true});
          CHECK(same_bits(got, want));
        }
      }
    }
    be->shutdown();
  }
  emu::configure({});
}

TEST_CASE("products of one A in a row convert it once, and anything "
          "written to the device between converts it again",
          "[gpu_emulator]") {
  // gpu_device keeps what a product left in its activation scratch (A as
  // Q8_K, Q8_0 or Q8_1 blocks, or a batch rounded to F16/BF16): the very
  // next call, if it is a product of the same A in the same form, reads it
  // instead of converting A again (a layer's Q, K and V; gate and up).
  // Any other call to the device in between, a peer's copy into it
  // included, makes the next product convert A afresh.
  emu::configure({2, std::size_t{1} << 28});
  auto be = make_gpu_emulator_backend({});
  REQUIRE(be->initialize().ok());
  REQUIRE(be->device_count() == 2);
  auto& dev = *be->device_at(0);
  auto& peer = *be->device_at(1);
  REQUIRE(dev.properties().has(cap_peer_copy));
  auto conversions = [] {
    auto s = emu::stats();
    return s.kernels["quantize_q8k_warps_kernel"].launches
           + s.kernels["quantize_act_kernel"].launches
           + s.kernels["round_act_kernel"].launches;
  };
  struct pair_case {
    weight_type first, second;
    std::size_t m;
    bool shared; ///< the second product reads the first's conversion
  };
  const std::size_t kk = 512, n = 24;
  for (auto pc : {pair_case{weight_type::q4_k, weight_type::q6_k, 1, true},
                  pair_case{weight_type::q4_k, weight_type::q4_k, 4, true},
                  pair_case{weight_type::q8_0, weight_type::q4_0, 3, true},
                  pair_case{weight_type::q4_1, weight_type::q5_1, 2, true},
                  pair_case{weight_type::f16, weight_type::f16, 3, true},
                  pair_case{weight_type::bf16, weight_type::bf16, 5, true},
                  pair_case{weight_type::f16, weight_type::f16, 1, false},
                  pair_case{weight_type::f16, weight_type::bf16, 3, false},
                  pair_case{weight_type::q4_k, weight_type::q8_0, 2, false},
                  pair_case{weight_type::q4_0, weight_type::q4_1, 2,
                            false}}) {
    INFO(to_string(pc.first) << " then " << to_string(pc.second) << ", m="
                             << pc.m);
    const matmul_dims d{pc.m, n, kk, true};
    const auto w1 = encode(pc.first, random_floats(n * kk, 70), n, kk);
    const auto w2 = encode(pc.second, random_floats(n * kk, 71), n, kk);
    auto a = random_floats(pc.m * kk, 72, -3, 3);
    auto b = random_floats(pc.m * kk, 73, -3, 3);
    auto ba = dev.allocate(a.size() * 4);
    auto bb = dev.allocate(b.size() * 4);
    auto bw1 = dev.allocate(w1.size());
    auto bw2 = dev.allocate(w2.size());
    auto bc = dev.allocate(pc.m * n * 4);
    auto bp = peer.allocate(a.size() * 4);
    REQUIRE((ba.ok() && bb.ok() && bw1.ok() && bw2.ok() && bc.ok()
             && bp.ok()));
    REQUIRE(dev.write(**bw1, 0, w1.data(), w1.size()).ok());
    REQUIRE(dev.write(**bw2, 0, w2.data(), w2.size()).ok());
    REQUIRE(dev.write(**ba, 0, a.data(), a.size() * 4).ok());
    REQUIRE(dev.write(**bb, 0, b.data(), b.size() * 4).ok());
    // C = x W^T on the device, against the kernels launched on host copies
    // (every product converting its own A).
    auto run = [&](buffer& x, const std::vector<std::uint8_t>& w,
                   buffer& bw, weight_type t) {
      REQUIRE(dev.matmul_weights({&x, 0}, {&bw, 0}, t, {bc->get(), 0}, d)
                .ok());
      (void)w;
    };
    auto result = [&] {
      std::vector<float> c(pc.m * n);
      REQUIRE(dev.read(**bc, 0, c.data(), c.size() * 4).ok());
      return c;
    };
    const std::size_t one = pc.shared ? 0 : 1;

    // Two products of A in a row: one conversion where the forms agree. A
    // telemetry poll between (memory, read_telemetry: other threads') writes
    // nothing and changes nothing.
    emu::reset_stats();
    run(**ba, w1, **bw1, pc.first);
    (void)dev.memory();
    (void)dev.read_telemetry();
    run(**ba, w2, **bw2, pc.second);
    const auto got = result(); // (the reference's launches count too)
    CHECK(conversions() == (pc.first == weight_type::f16 && pc.m == 1
                                ? 0u
                                : 1 + one));
    CHECK(same_bits(got, product(a, w2, pc.second, d)));

    // A written between: converted again, the new A's product.
    for (auto& x : a)
      x = -0.5f * x + 0.25f;
    REQUIRE(dev.write(**ba, 0, a.data(), a.size() * 4).ok());
    run(**ba, w2, **bw2, pc.second);
    CHECK(same_bits(result(), product(a, w2, pc.second, d)));

    // A doubled in place by an operation between.
    run(**ba, w1, **bw1, pc.first);
    REQUIRE(dev.elementwise(binary_op::add, {ba->get(), 0}, {ba->get(), 0},
                            {ba->get(), 0}, a.size())
              .ok());
    for (auto& x : a)
      x = x + x;
    run(**ba, w2, **bw2, pc.second);
    CHECK(same_bits(result(), product(a, w2, pc.second, d)));

    // A overwritten by the peer's copy, without any call to this device.
    run(**ba, w1, **bw1, pc.first);
    auto p = random_floats(a.size(), 74, -2, 2);
    REQUIRE(peer.write(**bp, 0, p.data(), p.size() * 4).ok());
    REQUIRE(peer.copy_to_peer(**bp, 0, **ba, 0, p.size() * 4).ok());
    run(**ba, w2, **bw2, pc.second);
    CHECK(same_bits(result(), product(p, w2, pc.second, d)));
    a = p;

    // Another A's product between: A converted again.
    run(**ba, w1, **bw1, pc.first);
    run(**bb, w1, **bw1, pc.first);
    run(**ba, w2, **bw2, pc.second);
    CHECK(same_bits(result(), product(a, w2, pc.second, d)));

    // Other rows of the same buffer: not the same A. Rows 1.. after rows
    // 0..; then all the rows after all but the last.
    if (pc.m > 1) {
      const matmul_dims d1{pc.m - 1, n, kk, true};
      auto rows = [&](std::size_t offset, const matmul_dims& dd,
                      const buffer& bw, weight_type t) {
        REQUIRE(dev.matmul_weights({ba->get(), offset}, {&bw, 0}, t,
                                   {bc->get(), 0}, dd)
                  .ok());
        std::vector<float> c(dd.m * n);
        return c;
      };
      auto read = [&](std::vector<float> c) {
        REQUIRE(dev.read(**bc, 0, c.data(), c.size() * 4).ok());
        return c;
      };
      rows(0, d1, **bw1, pc.first); // (its result is not read)
      CHECK(same_bits(read(rows(kk * 4, d1, **bw2, pc.second)),
                      product(std::vector<float>(a.begin() + kk, a.end()),
                              w2, pc.second, d1)));
      run(**bb, w1, **bw1, pc.first); // B's rows in all of the scratch
      rows(0, d1, **bw1, pc.first);
      CHECK(same_bits(read(rows(0, d, **bw2, pc.second)),
                      product(a, w2, pc.second, d)));
    }
  }
  be->shutdown();
  emu::configure({});
}
