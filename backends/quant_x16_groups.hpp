#pragma once

/// The loops over a matrix's groups of 16 rows that the packed layouts
/// (quant_q4_k_x16, quant_q6_k_x16) share. Internal to the backends.

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace exo::backend::quant::x16 {

/// f(rows, g, b) for groups g in [g0, g1) and super-blocks b < nb, rows[r]
/// pointing at block b of row 16 (g - g0) + r of `base` (rows of nb blocks
/// one after another): a group's blocks in the order its packed blocks lie.
template<class Block, class F>
void for_each_group_block(Block* base, std::size_t g0, std::size_t g1,
                          std::size_t nb, F&& f) {
  for (std::size_t g = g0; g < g1; ++g)
    for (std::size_t b = 0; b < nb; ++b) {
      Block* rows[16];
      for (std::size_t r = 0; r < 16; ++r)
        rows[r] = base + ((g - g0) * 16 + r) * nb + b;
      f(rows, g, b);
    }
}

#if defined(__x86_64__) || defined(__i386__)
/// The 4 bytes at p in every dword (a vpbroadcastd from memory; loaded
/// as a whole, GCC broadcast them from general registers): a token's 4
/// activations against 16 rows' 4 weights.
__attribute__((target("avx512f"))) inline __m512i dword_to_all(const void* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
#endif

} // namespace exo::backend::quant::x16
