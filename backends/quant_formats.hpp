#pragma once

/// llama.cpp's weight formats on the CPU: ggml's block layouts byte for
/// byte, its reference quantizers (the ones `llama-quantize` uses without
/// an importance matrix), its dequantizers, the activation quantization of
/// its CPU backend and its dot products, with the same integer arithmetic
/// and the same float accumulation order as ggml's x86 AVX2 kernels (which
/// its AVX-512 builds also run for these types).
///
/// Every dot product has two implementations that give the same bits: a
/// portable one (plain C++, std::fma where ggml fuses) and an AVX2 + FMA +
/// F16C one picked at run time (host::limit_isa caps it, for tests).
///
/// Sizes: callers check a row with row_bytes() first; the functions below
/// take element counts that are whole blocks and do not check them again.

#include "backends/result.hpp"

#include <cstddef>
#include <cstdint>

namespace exo::backend::quant {

// -- ggml's type ids ----------------------------------------------------------

/// The ggml_type ids of the formats handled here (GGUF stores these).
enum class ggml_type : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  bf16 = 30,
};

/// Elements per K-quant super-block.
constexpr std::size_t qk_k = 256;

// -- block layouts (ggml-common.h) -------------------------------------------
// Halves are stored as their IEEE bits (uint16_t); all blocks are packed
// with no padding, which the static_asserts pin down.

/// 32 weights: w = d * (q - 8), q in 0..15.
struct block_q4_0 {
  std::uint16_t d;
  std::uint8_t qs[16]; ///< element j in the low nibble of qs[j % 16],
                       ///< j >= 16 in the high nibble
};
static_assert(sizeof(block_q4_0) == 18, "Q4_0 blocks are 18 bytes");

/// 32 weights: w = d * q + m, q in 0..15.
struct block_q4_1 {
  std::uint16_t d;
  std::uint16_t m;
  std::uint8_t qs[16];
};
static_assert(sizeof(block_q4_1) == 20, "Q4_1 blocks are 20 bytes");

/// 32 weights: w = d * (q - 16), q in 0..31 (fifth bit j in bit j of qh).
struct block_q5_0 {
  std::uint16_t d;
  std::uint8_t qh[4];
  std::uint8_t qs[16];
};
static_assert(sizeof(block_q5_0) == 22, "Q5_0 blocks are 22 bytes");

/// 32 weights: w = d * q + m, q in 0..31.
struct block_q5_1 {
  std::uint16_t d;
  std::uint16_t m;
  std::uint8_t qh[4];
  std::uint8_t qs[16];
};
static_assert(sizeof(block_q5_1) == 24, "Q5_1 blocks are 24 bytes");

/// 32 values: v = d * q.
struct block_q8_0 {
  std::uint16_t d;
  std::int8_t qs[32];
};
static_assert(sizeof(block_q8_0) == 34, "Q8_0 blocks are 34 bytes");

/// 32 activations: v = d * q, s = d * sum(q) (for the Q4_1/Q5_1 minimum).
struct block_q8_1 {
  std::uint16_t d;
  std::uint16_t s;
  std::int8_t qs[32];
};
static_assert(sizeof(block_q8_1) == 36, "Q8_1 blocks are 36 bytes");

/// 256 weights in 16 groups of 16: w = d * sc * q - dmin * m, q in 0..3,
/// scales[g] = sc | m << 4.
struct block_q2_k {
  std::uint8_t scales[16];
  std::uint8_t qs[64];
  std::uint16_t d;
  std::uint16_t dmin;
};
static_assert(sizeof(block_q2_k) == 84, "Q2_K blocks are 84 bytes");

/// 256 weights in 16 groups of 16: w = d * (sc - 32) * (q - 4), q in 0..7
/// (third bit in hmask, inverted), 6-bit scales packed in 12 bytes.
struct block_q3_k {
  std::uint8_t hmask[32];
  std::uint8_t qs[64];
  std::uint8_t scales[12];
  std::uint16_t d;
};
static_assert(sizeof(block_q3_k) == 110, "Q3_K blocks are 110 bytes");

/// 256 weights in 8 groups of 32: w = d * sc * q - dmin * m, q in 0..15,
/// 6-bit scales and minimums packed in 12 bytes.
struct block_q4_k {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[128];
};
static_assert(sizeof(block_q4_k) == 144, "Q4_K blocks are 144 bytes");

/// As Q4_K with a fifth bit per weight in qh: q in 0..31.
struct block_q5_k {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[32];
  std::uint8_t qs[128];
};
static_assert(sizeof(block_q5_k) == 176, "Q5_K blocks are 176 bytes");

/// 256 weights in 16 groups of 16: w = d * sc * (q - 32), q in 0..63,
/// sc a signed byte.
struct block_q6_k {
  std::uint8_t ql[128];
  std::uint8_t qh[64];
  std::int8_t scales[16];
  std::uint16_t d;
};
static_assert(sizeof(block_q6_k) == 210, "Q6_K blocks are 210 bytes");

/// 256 activations: v = d * q, bsums[g] = sum of the 16 q of group g.
struct block_q8_k {
  float d;
  std::int8_t qs[256];
  std::int16_t bsums[16];
};
static_assert(sizeof(block_q8_k) == 292, "Q8_K blocks are 292 bytes");

// -- the descriptor table -----------------------------------------------------

/// What one format is: its id, its GGUF name, its block geometry, and the
/// format llama.cpp's CPU backend rounds activations to before the dot
/// product with a row of this format (its vec_dot_type).
struct type_info {
  ggml_type type;
  const char* name;        ///< ggml's name: "q4_K", "bf16"...
  std::size_t block_size;  ///< elements per block
  std::size_t block_bytes; ///< bytes per block
  ggml_type dot_type;      ///< activation format of the dot product
  bool weights;            ///< whether weights may have it (not Q8_1/Q8_K)
};

/// The formats handled here, in id order.
const type_info* all_types(std::size_t& count) noexcept;

/// The descriptor of ggml type id `id`, or null for an id not handled here.
const type_info* find_type(std::uint32_t id) noexcept;

/// The descriptor of t (always present for the enumerators above).
const type_info& info(ggml_type t) noexcept;

/// The name of t ("q4_K").
const char* name(ggml_type t) noexcept;

/// Bytes of a row of n elements of type t, or an error naming the problem:
/// an unknown type, n not a multiple of the block size, or a size that does
/// not fit size_t.
result<std::size_t> row_bytes(ggml_type t, std::size_t n);

/// Bytes of rows x n elements of type t, with the same checks.
result<std::size_t> matrix_bytes(ggml_type t, std::size_t rows, std::size_t n);

// -- conversions --------------------------------------------------------------

/// Float to bfloat16 bits as ggml rounds it (nearest even; NaNs stay quiet
/// NaNs).
std::uint16_t f32_to_bf16(float f) noexcept;

/// Bfloat16 bits to float (exact).
float bf16_to_f32(std::uint16_t h) noexcept;

/// Encodes n floats as type t at dst with ggml's reference quantizer
/// (quantize_row_*_ref: what llama-quantize writes without an importance
/// matrix; the K-quants search their scales with make_qx_quants,
/// make_q3_quants and make_qkx2_quants). F32, F16 and BF16 convert. Q8_1
/// and Q8_K, activation formats, are encoded as ggml's reference does
/// too. n must be a whole number of blocks (check with row_bytes).
void quantize_row(ggml_type t, const float* src, void* dst,
                  std::size_t n) noexcept;

/// Decodes n elements of type t at src to floats as ggml's to_float does.
void dequantize_row(ggml_type t, const void* src, float* dst,
                    std::size_t n) noexcept;

/// Rounds n activations to t = info(w).dot_type as llama.cpp's x86 CPU
/// backend does before a dot product with weights of type w (its
/// from_float): Q8_0 and Q8_1 with AVX2's rounding (x * (127 / max|x|),
/// half to even), Q8_K with ggml's reference, F16 and BF16 by conversion,
/// F32 copied.
void quantize_activations(ggml_type t, const float* src, void* dst,
                          std::size_t n) noexcept;

// -- dot products -------------------------------------------------------------

/// The dot product of n weights of type w with n activations already in
/// info(w).dot_type, as ggml_vec_dot_<w>_<dot type> of llama.cpp's x86
/// backend computes it: bit-exact for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
/// Q3_K, Q4_K, Q5_K and Q6_K. F32, F16 and BF16 sum in two 16-lane
/// accumulators reduced in double (ggml_vec_dot_bf16's AVX-512F order):
/// within about 1e-8 of the sum of |w * a| of ggml's, not bit-exact (the
/// exact F32/F16 matrix products are host::matmul_weights', which
/// matmul_quant uses).
float vec_dot(ggml_type w, std::size_t n, const void* weights,
              const void* activations) noexcept;

/// The same product on the portable path, whatever the CPU has.
float vec_dot_portable(ggml_type w, std::size_t n, const void* weights,
                       const void* activations) noexcept;

/// Whether vec_dot for w has a SIMD path on this CPU (under limit_isa).
bool vec_dot_has_simd(ggml_type w) noexcept;

/// out[t * rows + r] = dot(row r of W, row t of A) for t < m, r < rows:
/// W is rows x k of type w (row_bytes(w, k) per row), A is m x k floats.
/// Each row of A is rounded once to info(w).dot_type; the rows of W are
/// split over `threads` OpenMP threads where the build has OpenMP. Results
/// do not depend on the thread count. Refuses (without touching out) types
/// that are not weights, k not a whole number of blocks, null pointers and
/// sizes that overflow.
result<bool> matmul_quant(const void* w, ggml_type t, std::size_t rows,
                          std::size_t k, const float* a, std::size_t m,
                          float* out, int threads);

} // namespace exo::backend::quant
