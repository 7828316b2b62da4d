#pragma once

/// The matrix products llama.cpp's CPU backend computes on weights it has
/// repacked at load ("extra buffer types", ggml-cpu/repack.cpp): on an AVX2
/// CPU it interleaves Q4_K matrices whose row count is a multiple of 8 into
/// block_q4_Kx8 and multiplies them with ggml_gemv/gemm_q4_K_8x8_q8_K. The
/// integer block sums are those of vec_dot_q4_K_q8_K, but the float
/// accumulation differs: per output, over the super-blocks in order,
///   acc  = fma(float(sum_j sc_j * dot_j),        d    * d8, acc)
///   accm = fma(float(sum_j m_j  * bsum_j),       dmin * d8, accm)
/// and the result is acc - accm (vec_dot folds the eight float lanes and
/// the minimums in another order). Greedy generations part from
/// llama.cpp's on near-ties without this (after about 20 tokens on 2-layer
/// test models). Its gemm (AVX2 and AVX-512 builds alike) steps the two
/// chains once per pair of sub-blocks instead (q4_k_gemm below); both are
/// checked against the loaded build's own gemm and gemv in
/// quant_oracle_tests.

#include "backends/quant_formats.hpp"
#include "backends/result.hpp"

#include <cstddef>
#include <optional>

namespace exo::backend::quant {

/// Whether llama.cpp (x86, AVX2 and up) repacks a Q4_K matrix of `rows`
/// rows: rows a multiple of 8.
bool q4_k_repacked(std::size_t rows) noexcept;

/// How the float chains of llama.cpp's repacked Q4_K products step: once
/// per super-block (its gemv, in every build) or once per pair of
/// sub-blocks (its gemm, in its x86 builds: checked against the zen4
/// build's ggml_gemm_q4_K_8x8_q8_K on AMD EPYC Zen 4 and Zen 5 and the
/// haswell build's on an AVX2-only Zen 3, every output of each product of
/// quant_oracle_tests the same bits; the integers are the same).
enum class q4_k_gemm { by_super_block, by_pair };

/// What llama.cpp's CPU build for this machine does: by_pair on x86 (where
/// it repacks), by_super_block elsewhere; unless set_q4_k_gemm chose.
q4_k_gemm q4_k_gemm_here() noexcept;

/// Overrides q4_k_gemm_here (tests; reproducing another machine's bits);
/// nullopt goes back to the CPU's.
void set_q4_k_gemm(std::optional<q4_k_gemm> steps) noexcept;

/// How many leading tokens of an m-token batch matmul_q4_k_repacked sums
/// by pair of sub-blocks: the m - m % 4 its gemm takes (m >= 4) where
/// q4_k_gemm_here is by_pair, else none (every token by super-block, as
/// the gemv; also with rows_apart). The GPU kernels take the same count.
std::size_t q4_k_pair_tokens(std::size_t m, bool rows_apart) noexcept;

/// out[t * rows + r] = dot(row r of W, row t of A) as ggml's repacked Q4_K
/// kernels compute it: W is rows x k Q4_K (k a multiple of 256), A is m x k
/// floats rounded to Q8_K per row. As llama.cpp's repacked mul_mat: with
/// m >= 4 the first m - m % 4 tokens take the gemm's steps
/// (q4_k_gemm_here), the others the gemv's; rows_apart: every token the
/// gemv's, as alone. Rows split over `threads` (results do not depend on
/// it). Batches of 12 or more tokens that step per super-block (rows
/// apart, or an AVX2 build's gemm), or of 32 or more with the AVX-512
/// gemm's steps by pair, go through 16-row panels on AMX's int8 tiles
/// where the CPU has them (host::have_amx); on a CPU with AVX-512 VNNI,
/// batches with tokens by pair from 9 tokens and the others from 20
/// through 16-row panels unpacked once per call (rows in lanes,
/// vpdpbusd), fewer tokens by super-block through 8-row groups of four
/// rows per register (vpdpbusd, 8 tokens a pass), by pair through 8-row
/// groups (AVX2, 4 tokens a pass), as on CPUs without VNNI; every path
/// gives the same bits. Refuses null pointers and k not a whole number of
/// blocks.
result<bool> matmul_q4_k_repacked(const void* w, std::size_t rows,
                                  std::size_t k, const float* a,
                                  std::size_t m, float* out, int threads,
                                  bool rows_apart = false);

/// matmul_q4_k_repacked's 16-row panels (AVX-512 VNNI, panel_width tokens
/// a pass, the weights unpacked to bytes once per product) fed from a
/// packed matrix (quant_q4_k_x16) instead of stored rows: matmul_q4_k_x16's
/// prompts. q holds m rows of k / 256 Q8_K blocks; tokens [0, mg) step by
/// pair. The same bits as the stored rows' product. Only where
/// host::have_vnni(); unchecked (the caller checked the shapes).
void matmul_q4_k_x16_panels(const void* packed, std::size_t rows,
                            std::size_t k, const block_q8_k* q,
                            std::size_t m, std::size_t mg, float* out,
                            int threads);

/// Whether matmul_quant sends a Q6_K product of m tokens to
/// matmul_q6_k_panels here (a batch of 48 or more, AVX-512 VNNI).
bool q6_k_panels(std::size_t m) noexcept;

/// out[t * rows + r] = vec_dot_q6_K_q8_K(row r of W, token t) with the
/// AVX2 kernel's bits: W is rows x k Q6_K, q8k holds m rows of k / 256
/// Q8_K blocks. 16-row panels, rows in lanes, on AVX-512 VNNI; only where
/// q6_k_panels(m) says so. Unchecked: matmul_quant checks the operands.
void matmul_q6_k_panels(const void* w, std::size_t rows, std::size_t k,
                        const void* q8k, std::size_t m, float* out,
                        int threads);

} // namespace exo::backend::quant
