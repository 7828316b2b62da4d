// The arithmetic ceiling of one core: how many fused multiply-adds (F32)
// and int8 multiply-adds (VNNI's vpdpbusd, the K-quant kernels' step) it
// retires a second when nothing waits on memory. docs/benchmarks.md holds
// batched decoding's figures against these: a batch of B tokens needs B
// times a token's arithmetic, so B tokens cannot take less than B times
// (a token's multiply-adds / this peak), whatever the kernel.
//
//   core_peak [seconds per measurement, default 0.3]
//
// Pin it as the benchmarks are pinned (taskset -c 1). Each figure is the
// median of 5 runs, min-max shown, of independent chains: 12 over 256 bits
// (16 registers and the two operands, no spill), 16 over 512 bits (32
// registers); either covers the latency of both instructions on the x86
// cores we have seen. Every chain ends in the result, so none is dropped.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using clock_type = std::chrono::steady_clock;

/// One measurement: `fn(iters)` repeated with growing iteration counts
/// until it runs `seconds`, then ops / s for `ops_per_iter` ops a pass.
template <class Fn>
double rate(Fn fn, double ops_per_iter, double seconds) {
  std::uint64_t iters = 1 << 14;
  for (;;) {
    const auto t0 = clock_type::now();
    fn(iters);
    const double s =
      std::chrono::duration<double>(clock_type::now() - t0).count();
    if (s >= seconds)
      return ops_per_iter * static_cast<double>(iters) / s;
    iters = s <= 0.0 ? iters * 16
                     : static_cast<std::uint64_t>(
                         static_cast<double>(iters) * seconds / s * 1.1)
                         + 1;
  }
}

/// Median, min and max of 5 measurements, in units of 1e9 a second.
template <class Fn>
void report(const char* what, const char* unit, Fn fn, double ops_per_iter,
            double seconds) {
  std::vector<double> r;
  for (int i = 0; i < 5; ++i)
    r.push_back(rate(fn, ops_per_iter, seconds) / 1e9);
  std::sort(r.begin(), r.end());
  std::printf("  %-44s %8.1f %s (%.1f-%.1f)\n", what, r[2], unit, r.front(),
              r.back());
}

volatile float sink_f;
volatile int sink_i;

/// Chains over 256 / 512 bits.
constexpr int chains256 = 12;
constexpr int chains512 = 16;

/// The sum of every lane of every chain (keeps them all live).
template <class V, class E, int N>
E lanes_sum(const V (&a)[N]) {
  E total = 0;
  for (int i = 0; i < N; ++i) {
    alignas(64) E lanes[sizeof(V) / sizeof(E)];
    std::memcpy(lanes, &a[i], sizeof(V));
    for (E x : lanes)
      total += x;
  }
  return total;
}

#if defined(__x86_64__)
/// Chains of 8-lane fused multiply-adds (2 FLOP a lane).
__attribute__((target("avx2,fma"), noinline)) void fma256(std::uint64_t n) {
  __m256 a[chains256];
  for (int i = 0; i < chains256; ++i)
    a[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-6f);
  for (std::uint64_t k = 0; k < n; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < chains256; ++i)
      a[i] = _mm256_fmadd_ps(a[i], x, y);
  }
  sink_f = lanes_sum<__m256, float>(a);
}

/// The same with 16-lane registers.
__attribute__((target("avx512f"), noinline)) void fma512(std::uint64_t n) {
  __m512 a[chains512];
  for (int i = 0; i < chains512; ++i)
    a[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-6f);
  for (std::uint64_t k = 0; k < n; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < chains512; ++i)
      a[i] = _mm512_fmadd_ps(a[i], x, y);
  }
  sink_f = lanes_sum<__m512, float>(a);
}

/// Chains of vpdpbusd over 256 bits (32 u8 x s8 products a step).
__attribute__((target("avx2,avxvnni"), noinline)) void
dpbusd256(std::uint64_t n) {
  __m256i a[chains256];
  for (int i = 0; i < chains256; ++i)
    a[i] = _mm256_set1_epi32(i);
  const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
  for (std::uint64_t k = 0; k < n; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < chains256; ++i)
      a[i] = _mm256_dpbusd_avx_epi32(a[i], u, s);
  }
  sink_i = lanes_sum<__m256i, int>(a);
}

/// The same over 512 bits (64 products a step).
__attribute__((target("avx512f,avx512vnni"), noinline)) void
dpbusd512(std::uint64_t n) {
  __m512i a[chains512];
  for (int i = 0; i < chains512; ++i)
    a[i] = _mm512_set1_epi32(i);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (std::uint64_t k = 0; k < n; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < chains512; ++i)
      a[i] = _mm512_dpbusd_epi32(a[i], u, s);
  }
  sink_i = lanes_sum<__m512i, int>(a);
}
#endif

} // namespace

int main(int argc, char** argv) {
  double seconds = 0.3;
  if (argc > 1) {
    char* end = nullptr;
    seconds = std::strtod(argv[1], &end);
    if (end == argv[1] || *end != '\0' || !(seconds > 0.0) || seconds > 60.0) {
      std::fprintf(stderr,
                   "core_peak: seconds must be a number in (0, 60], not '%s'\n",
                   argv[1]);
      return 2;
    }
  }
  std::printf("One core's arithmetic peak (independent chains; median of 5, "
              "min-max):\n");
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    report("F32 fused multiply-add, 256-bit", "GFLOP/s", fma256, chains256 * 8 * 2,
           seconds);
  if (__builtin_cpu_supports("avx512f"))
    report("F32 fused multiply-add, 512-bit", "GFLOP/s", fma512, chains512 * 16 * 2,
           seconds);
  if (__builtin_cpu_supports("avxvnni"))
    report("int8 multiply-add (vpdpbusd), 256-bit", "G MAC/s", dpbusd256,
           chains256 * 32, seconds);
  if (__builtin_cpu_supports("avx512vnni"))
    report("int8 multiply-add (vpdpbusd), 512-bit", "G MAC/s", dpbusd512,
           chains512 * 64, seconds);
#else
  std::printf("  (no measurement for this architecture)\n");
#endif
  return 0;
}
