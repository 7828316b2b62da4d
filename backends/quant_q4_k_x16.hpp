#pragma once

/// Q4_K matrices packed 16 rows at a time for the CPU's int8 dot products
/// (x16): the same bytes' worth (16 x 144 per super-block column), the
/// same values, in an order where one 64-byte load holds 16 rows' weights
/// at the same 8 positions of one sub-block, every row in its own dword.
/// Against the Q4_K rows as stored (quant_repack's groups of 8 rows, four
/// to a register, each sub-block summed across a lane), a token's sums
/// need no broadcast, no lane reduction and half the scale steps, and the
/// weights need no gathering: the unpacking that a row group pays per
/// block is a third of theirs.
///
/// Layout, per group of 16 rows g and super-block b, 2304 bytes at
/// (g * nb + b) * 2304 (nb = k / 256):
///   [0, 32)      d of rows 0..15 (f16)
///   [32, 64)     dmin of rows 0..15 (f16)
///   [64, 256)    scale byte i of row r at 64 + 16 i + r (i < 12)
///   [256, 2304)  for sub-block j (< 8) and unit u (< 4), 64 bytes at
///                256 + (4 j + u) * 64: byte 4 r + e (e < 4) holds row r's
///                weight 8 u + e of sub-block j (low nibble) and 8 u + 4 + e
///                (high nibble).
///
/// The products give the bits of matmul_q4_k_repacked on the same rows
/// (the same integer sums, the same float chains), so a packed matrix can
/// stand in for the stored one anywhere that function runs.

#include "backends/result.hpp"

#include <cstddef>

namespace exo::backend::quant {

/// Rows per packed group.
inline constexpr std::size_t q4_k_x16_rows = 16;

/// Byte offsets within a group's block (above).
namespace q4_k_x16_layout {
inline constexpr std::size_t group_block_bytes = 16 * 144;
inline constexpr std::size_t off_dmin = 32;
inline constexpr std::size_t off_scales = 64;
inline constexpr std::size_t off_qs = 256;
} // namespace q4_k_x16_layout

/// Whether a rows x k Q4_K matrix packs: rows a whole number of groups,
/// k a whole number of super-blocks, neither zero.
bool q4_k_x16_packs(std::size_t rows, std::size_t k) noexcept;

/// Packs rows x k Q4_K (rows stored one after another, ggml's layout) at
/// src into dst (the same number of bytes; not overlapping). Only where
/// q4_k_x16_packs(rows, k).
void pack_q4_k_x16(const void* src, std::size_t rows, std::size_t k,
                   void* dst) noexcept;

/// The inverse: ggml's rows back, byte for byte.
void unpack_q4_k_x16(const void* src, std::size_t rows, std::size_t k,
                     void* dst) noexcept;

/// matmul_q4_k_repacked(unpacked w, rows, k, a, m, out, threads,
/// rows_apart), bit for bit, from the packed matrix w: out[t * rows + r]
/// for tokens t < m. With AVX-512 VNNI: 16 rows against up to 8 tokens a
/// pass (the rows' nibbles split once a pass), and from 64 tokens
/// matmul_q4_k_repacked's 16-row panels filled from the groups
/// (matmul_q4_k_x16_panels); elsewhere the rows are unpacked and run as
/// stored. Rows split over `threads` by group (the
/// results do not depend on it). Refuses null operands and a shape that
/// does not pack.
result<bool> matmul_q4_k_x16(const void* w, std::size_t rows, std::size_t k,
                             const float* a, std::size_t m, float* out,
                             int threads, bool rows_apart = false);

} // namespace exo::backend::quant
