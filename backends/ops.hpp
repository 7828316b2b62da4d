#pragma once

/// The device layer's one vocabulary of compute operations: every operation
/// a device offers, with its operand rules, in one table.
///
/// The device's public compute methods (backend.hpp) and the generic
/// `run(device&, const op_call&)` check operands against these rules once;
/// the device actor decodes a kernel_call's op number with op_from_wire and
/// the stage executor (core/model/device_stage) names its operations with
/// op_kind. Nothing decodes op names from strings at run time: names are
/// for messages only.
///
///   add, mul     inputs {a, b}, dims {count}
///   matmul       inputs {a, b} (B stored [k x n]), dims {m, n, k}
///   matmul_t     inputs {a, b} (B stored [n x k]), dims {m, n, k}
///   matmul_f32, matmul_f16, matmul_q8_0, matmul_bf16, matmul_q4_0 ...
///   matmul_q6_k  inputs {a, w} (W stored [n x k] in the named encoding),
///                dims {m, n, k}
///   matmul_rows_f32, matmul_rows_f16, matmul_rows_q4_k, matmul_q4_k_x16,
///   matmul_rows_q4_k_x16, matmul_q6_k_x16
///                the same, each row of a on its own (see the enum)
///   rms_norm     inputs {x, weight}, dims {rows, dim}, scalars {eps}
///   rope, rope_neox
///                inputs {positions} or {positions, freq_factors},
///                dims {rows, heads, head_dim, n_rot}, scalars {freq_base}
///                (rope_neox: llama.cpp's NEOX pairs, rope_dims::neox)
///   rope_cached  inputs {cache}, dims {rows, heads, head_dim, n_rot, neox}:
///                rope by angles computed ahead (host::rope_cache's cos and
///                sin per pair, rows x n_rot f32), NEOX pairs where neox
///                is 1 (device::rope_cached)
///   attention    inputs {q, k, v}, dims {n_tokens, pos0, n_heads,
///                n_kv_heads, head_dim, kv_stride}, scalars {scale}
///   attention_f16, attention_q8_0
///                the same with k and v stored as IEEE half (kv_type::f16)
///                or Q8_0 blocks (kv_type::q8_0)
///   attention_paged
///                inputs {q, k, v, table}, dims {n_tokens, pos0, n_heads,
///                n_kv_heads, head_dim, kv_stride, kv_type (backend::
///                kv_type's number), block_positions, block_stride},
///                scalars {scale}: a paged cache (attention_dims)
///   attention_paged_rows
///                inputs {q, k, v, tables}, dims {rows, n_heads,
///                n_kv_heads, head_dim, kv_stride, kv_type,
///                block_positions, block_stride, table_len}, scalars
///                {scale}: every row of q one token of its own sequence
///                over its own paged cache; tables holds per row its
///                position, then table_len block indices
///                (device::attention_paged_rows)
///   store_kv_rows
///                inputs {a, tables}, out kv, dims {rows, width,
///                kv_stride, kv_type, block_positions, block_stride,
///                table_len}: row r of a (width f32) stored, as the cache
///                holds it, at its position in its block (tables as
///                attention_paged_rows'; device::store_kv_rows)
///   silu_mul     inputs {gate, up}, dims {count}
///   to_f16       inputs {a} (f32), dims {count}; out IEEE half
///   to_q8_0      inputs {a} (f32), dims {count} (a multiple of 32); out
///                count / 32 Q8_0 blocks
///   hadamard     inputs {a}, dims {count, n}: every run of n values (n a
///                power of two, count a multiple of n) times the orthonormal
///                Walsh-Hadamard matrix of order n; out may be a
///
/// The output is `out` (`c` for the products); rope rotates its output `x`
/// in place.

#include "backends/result.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace exo::backend {

/// A compute operation. The numbers are the wire's (kernel_call::op):
/// never reuse one; 0 is no operation.
enum class op_kind : std::uint8_t {
  add = 1,         ///< out[i] = a[i] + b[i]
  mul = 2,         ///< out[i] = a[i] * b[i]
  matmul = 3,      ///< C = A * B, all f32
  matmul_t = 4,    ///< C = A * B^T, all f32
  matmul_f32 = 5,  ///< C = A * W^T, W f32 (matmul_weights)
  matmul_f16 = 6,  ///< C = A * W^T, W IEEE half
  matmul_q8_0 = 7, ///< C = A * W^T, W Q8_0 blocks
  rms_norm = 8,
  rope = 9,
  attention = 10,
  silu_mul = 11,
  rope_neox = 12, ///< rope with NEOX pairs (qwen2, qwen3)
  // C = A * W^T, W in one of ggml's formats (backend::weight_type); run by
  // the host devices, refused (unsupported) by devices without the kernel.
  matmul_bf16 = 13,
  matmul_q4_0 = 14,
  matmul_q4_1 = 15,
  matmul_q5_0 = 16,
  matmul_q5_1 = 17,
  matmul_q2_k = 18,
  matmul_q3_k = 19,
  matmul_q4_k = 20,
  matmul_q5_k = 21,
  matmul_q6_k = 22,
  // matmul_f32/f16 with every row of A a product of its own: each row's
  // result is what a product of that row alone (m = 1) gives, where the
  // device's arithmetic depends on m (the host devices sum a product of
  // several rows in llama.cpp's batched order). A batch of sequences uses
  // them, so that each sequence gets the bits it gets alone.
  matmul_rows_f32 = 23,
  matmul_rows_f16 = 24,
  // attention over a KV cache stored as IEEE half (kv_type::f16), and the
  // conversion that writes its rows.
  attention_f16 = 25,
  to_f16 = 26, ///< out[i] = a[i] rounded to the nearest half (ties to even)
  // matmul_q4_k with every row of A a product of its own (as
  // matmul_rows_f32): on the host devices a batch of 4 rows or more sums
  // Q4_K as llama.cpp's repacked gemm does, which in its AVX-512 builds is
  // not what one row alone (its gemv) gives.
  matmul_rows_q4_k = 27,
  // attention over a KV cache of Q8_0 blocks (kv_type::q8_0), and the
  // quantization that writes its rows.
  attention_q8_0 = 28,
  to_q8_0 = 29,
  // The rotation llama.cpp applies to Q, K, V and the attention output
  // around a quantized KV cache (its attn_rot: a fast Walsh-Hadamard
  // transform per head).
  hadamard = 30,
  // attention over a paged KV cache: rows in fixed-size blocks found
  // through a block table (attention_dims::block_positions).
  attention_paged = 31,
  // a decode batch's attention in one operation: each row of q one token
  // of its own sequence, with its own position and block table.
  attention_paged_rows = 32,
  // a decode batch's new K (or V) rows, each into its own sequence's slot
  // of a paged cache (attention_paged_rows' tables).
  store_kv_rows = 33,
  // rope by angles the host computed once for a step's rows (its cosines
  // and sines), which every layer's Q and K of the step share: every
  // device then turns by the host's own angles.
  rope_cached = 34,
  // matmul_q4_k and matmul_rows_q4_k on weights a device packed for its
  // own kernels (weight_type::q4_k_x16, device::preferred_weights): the
  // same results, bit for bit.
  matmul_q4_k_x16 = 35,
  matmul_rows_q4_k_x16 = 36,
  // matmul_q6_k on weights a device packed for its own kernels
  // (weight_type::q6_k_x16): the same results, bit for bit.
  matmul_q6_k_x16 = 37,
};

/// How many operations there are (the highest wire number).
constexpr std::size_t op_count = 37;

/// The most inputs, dims and scalars any operation takes.
constexpr std::size_t max_op_inputs = 4;
constexpr std::size_t max_op_dims = 9;
constexpr std::size_t max_op_scalars = 1;

/// The operand rules of one operation: how many of each it takes and their
/// names (for messages). Byte sizes, alignment and overlap follow from the
/// dims; backend.hpp's compute methods check them.
struct op_rule {
  op_kind kind;
  const char* name;
  std::uint8_t min_inputs; ///< less than max_inputs: optional last inputs
  std::uint8_t max_inputs;
  std::uint8_t n_dims;
  std::uint8_t n_scalars;
  std::array<const char*, max_op_inputs> inputs;
  const char* output;
  std::array<const char*, max_op_dims> dims;
  std::array<const char*, max_op_scalars> scalars;
  /// Whether the output may be the very same view as an input (in place);
  /// any other overlap of output and input is refused.
  bool in_place;
};

/// Every operation, in the order of their numbers.
const std::array<op_rule, op_count>& op_rules() noexcept;

/// The rules of `kind` (an op_kind outside the table is never made: see
/// op_from_wire).
const op_rule& rule_of(op_kind kind) noexcept;

/// "add", "matmul_q8_0", ...
const char* to_string(op_kind kind) noexcept;

/// The wire number of `kind`.
constexpr std::uint8_t to_wire(op_kind kind) noexcept {
  return static_cast<std::uint8_t>(kind);
}

/// The operation with wire number `n`, or none for a number outside the
/// table.
std::optional<op_kind> op_from_wire(std::uint8_t n) noexcept;

/// Checks the counts of a call of `kind` against its rule: an
/// invalid_argument naming the operation, what it expects and what it got.
status check_counts(op_kind kind, std::size_t n_inputs, std::size_t n_dims,
                    std::size_t n_scalars);

} // namespace exo::backend
