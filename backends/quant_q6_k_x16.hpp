#pragma once

/// Q6_K matrices packed 16 rows at a time for the CPU's int8 dot products
/// (x16), as quant_q4_k_x16 packs Q4_K: the same bytes' worth (16 x 210
/// per super-block column), the same values, in an order where one 64-byte
/// load holds 16 rows' low nibbles at the same 8 positions, every row in
/// its own dword.
///
/// llama.cpp's Q6_K product (vec_dot_q6_K_q8_K, AVX2) keeps 8 integer
/// lanes per block, lane l summing bytes 4l .. 4l + 3 of each 32-byte
/// chunk times the chunk half's scale, and a float chain per lane. The
/// stored rows' kernel keeps those lanes in a register per row and folds
/// and converts them per row and block; here a lane is one register of 16
/// rows, so a token's block ends with 8 conversions for 16 rows instead
/// of 8 per row, and the weights' unpacking is a third of theirs.
///
/// Layout, per group of 16 rows g and super-block b, 3360 bytes at
/// (g * nb + b) * 3360 (nb = k / 256); after the last whole group, the
/// rows left (rows % 16: a vocabulary of 100002) as stored. Position x
/// of a block (x < 256) is chunk c = x / 32 (scales 2c and 2c + 1 for its
/// halves), lane l = (x % 32) / 4, byte e = x % 4:
///   [0, 32)       d of rows 0..15 (f16)
///   [32, 288)     for l < 8, 32 bytes at 32 + 32 l: byte 2 r + i is row r's
///                 scale 2 l + i (i < 2)
///   [288, 2336)   for lane l and chunk pair p (< 4), 64 bytes at
///                 288 + (4 l + p) * 64: byte 4 r + e holds the low 4 bits
///                 of row r's weight at chunk 2p, lane l, byte e (low nibble)
///                 and at chunk 2p + 1 (high nibble)
///   [2336, 3360)  for lane l and chunk quad q (< 2), 64 bytes at
///                 2336 + (2 l + q) * 64: bits 2i, 2i + 1 of byte 4 r + e
///                 are the top 2 bits of row r's weight at chunk 4q + i,
///                 lane l, byte e
///
/// The products give the bits of matmul_quant's Q6_K product on the same
/// rows (the same integer lanes, the same float chains), so a packed
/// matrix can stand in for the stored one anywhere that function runs.

#include "backends/result.hpp"

#include <cstddef>

namespace exo::backend::quant {

/// Rows per packed group.
inline constexpr std::size_t q6_k_x16_rows = 16;

/// Byte offsets within a group's block (above).
namespace q6_k_x16_layout {
inline constexpr std::size_t group_block_bytes = 16 * 210;
inline constexpr std::size_t off_scales = 32;
inline constexpr std::size_t off_ql = 288;
inline constexpr std::size_t off_qh = 2336;
} // namespace q6_k_x16_layout

/// Whether a rows x k Q6_K matrix packs: k a whole number of
/// super-blocks, neither zero (rows past the last group of 16 stay as
/// stored).
bool q6_k_x16_packs(std::size_t rows, std::size_t k) noexcept;

/// Packs rows x k Q6_K (rows stored one after another, ggml's layout) at
/// src into dst (the same number of bytes; not overlapping). Only where
/// q6_k_x16_packs(rows, k).
void pack_q6_k_x16(const void* src, std::size_t rows, std::size_t k,
                   void* dst) noexcept;

/// The inverse: ggml's rows back, byte for byte.
void unpack_q6_k_x16(const void* src, std::size_t rows, std::size_t k,
                     void* dst) noexcept;

/// matmul_quant(unpacked w, q6_k, rows, k, a, m, out, threads), bit for
/// bit, from the packed matrix w: out[t * rows + r] for tokens t < m.
/// With AVX-512 VNNI: 16 rows against up to 8 tokens a pass (the rows'
/// weights unpacked once a pass), the rows after the last group through
/// matmul_quant; elsewhere the rows are unpacked and run as stored. Rows
/// split over `threads` by group (the results do not depend on it).
/// Refuses null operands and a shape that does not pack.
result<bool> matmul_q6_k_x16(const void* w, std::size_t rows, std::size_t k,
                             const float* a, std::size_t m, float* out,
                             int threads);

} // namespace exo::backend::quant
