#pragma once

/// Host implementations of the compute operations, shared by the cpu and sim
/// backends, by the generic fallbacks of device, by the CPU model engine
/// (core/model/ops.cpp calls these, so there is one implementation), and
/// by tests that check GPU kernels against them. Plain pointers in, plain
/// pointers out; callers check sizes first.
///
/// The Llama operations follow llama.cpp's CPU arithmetic: F16 weights meet
/// activations rounded to half, Q8_0 weights meet activations quantized to
/// Q8_0, rope angles come from repeated multiplication, softmax sums in
/// double precision.

#include "backends/backend.hpp"

#include <cstddef>
#include <cstdint>

namespace exo::backend::host {

// -- f32 element-wise and matrix products -----------------------------------

/// out[i] = a[i] (op) b[i] for i < count.
void elementwise(binary_op op, const float* a, const float* b, float* out,
                 std::size_t count) noexcept;

/// C = A * B (or A * B^T) with exo's own F32 kernels (A * B^T is
/// matmul_weights' F32 product), on `threads` OpenMP threads where the
/// build has OpenMP. Checked against matmul_reference.
void matmul(const float* a, const float* b, float* c, const matmul_dims& dims,
            int threads = 1) noexcept;

/// The same product with plain loops in double precision: the reference the
/// tests hold every backend to.
void matmul_reference(const float* a, const float* b, float* c,
                      const matmul_dims& dims) noexcept;

/// Checks dims describe a non-empty product whose byte sizes fit size_t.
status check_matmul_dims(const matmul_dims& dims);

/// Byte sizes of A, B and C for dims (call check_matmul_dims first).
struct matmul_bytes {
  std::size_t a;
  std::size_t b;
  std::size_t c;
};
matmul_bytes bytes_of(const matmul_dims& dims) noexcept;

// -- half precision and Q8_0 ------------------------------------------------

/// Converts IEEE half bits to float (exact).
float f16_to_f32(std::uint16_t h) noexcept;

/// Converts a float to IEEE half bits, rounding to nearest even.
std::uint16_t f32_to_f16(float f) noexcept;

/// y[i] = the half nearest x[i] (ties to even), as IEEE half bits: an f16
/// KV cache's rows (F16C where the machine has it).
void to_f16(const float* x, std::uint16_t* y, std::size_t n) noexcept;

/// y[i] = x[i] rounded to the nearest half (what llama.cpp does to
/// activations that meet F16 weights). y may equal x.
void round_to_f16(const float* x, float* y, std::size_t n) noexcept;

/// One Q8_0 block as GGUF stores it: a half scale and 32 signed bytes.
struct block_q8_0 {
  std::uint16_t d;
  std::int8_t qs[32];
};
static_assert(sizeof(block_q8_0) == 34, "Q8_0 blocks are 34 bytes");

/// Quantizes n floats (a multiple of 32) to Q8_0 as ggml's reference does:
/// d = max|x| / 127, q = round(x / d) (half away from zero).
void quantize_q8_0(const float* x, block_q8_0* y, std::size_t n) noexcept;

/// Quantizes n activations (a multiple of 32) to Q8_0 as llama.cpp's x86
/// CPU backend does before every product with Q8_0 weights:
/// d = half(max|x| / 127), q = x * (127 / max|x|) rounded half to even.
/// Differs from quantize_q8_0 (the file format's reference) in the last
/// bit of some q.
void quantize_q8_0_activations(const float* x, block_q8_0* y,
                               std::size_t n) noexcept;

/// Decodes n elements of type t at src (row_bytes(t, n) bytes) to floats
/// (ggml's to_float for BF16 and Q4_0 ... Q6_K).
void decode_row(weight_type t, const std::uint8_t* src, float* dst,
                std::size_t n) noexcept;

/// Encodes n floats as type t at dst (row_bytes(t, n) bytes; ggml's
/// reference quantizers for BF16 and Q4_0 ... Q6_K).
void encode_row(weight_type t, const float* src, std::uint8_t* dst,
                std::size_t n) noexcept;

// -- instruction sets ---------------------------------------------------------

/// The kernels pick the widest instruction set the CPU has (scalar, AVX2 +
/// FMA + F16C, AVX-512F). limit_isa caps it for the whole process, so that
/// tests and benchmarks can run the narrower paths on a wider CPU. Not for
/// use while kernels run on other threads.
enum class isa { scalar = 0, avx2 = 1, avx512 = 2 };

/// Binds the `threads` threads of the kernels' OpenMP team (the caller is
/// thread 0) each to its own CPU of the process's affinity mask, in order.
/// Unbound, the team's second thread starts on its creator's CPU and a
/// short batch could run at half speed on two cores (docs/benchmarks.md).
/// For a process that owns its cores (exo-model): it pins the calling
/// thread too. Returns how many threads were bound (0 without OpenMP, with
/// fewer than 2 threads or more threads than CPUs).
int bind_threads(int threads) noexcept;
void limit_isa(isa widest) noexcept;

/// The widest instruction set the kernels use now: what the CPU has (AVX2
/// counts with FMA and F16C, AVX-512 with AVX-512F), capped by limit_isa.
isa widest_isa() noexcept;

/// Whether the kernels may use AVX-512 VNNI (vpdpbusd/vpdpwssd, with BW and
/// VL): the CPU has them and limit_isa allows AVX-512.
bool have_vnni() noexcept;

/// Whether the kernels may use AMX's int8 tiles (tdpbusd; Sapphire Rapids
/// and later): have_vnni(), the CPU has AMX-TILE, AMX-INT8 and AVX-512
/// VBMI, the kernel granted this process the tile state (Linux's
/// ARCH_REQ_XCOMP_PERM, asked once), and allow_amx has not turned them off.
bool have_amx() noexcept;

/// Lets the kernels use AMX tiles where the CPU has them (the default) or
/// not (tests: the AVX-512 VNNI paths give the same bits).
void allow_amx(bool allowed) noexcept;

// -- the operations of a Llama layer ----------------------------------------

/// A product stays on the calling thread unless its weights reach
/// product_split_bytes (F32, F16, BF16: a stream from memory, which two
/// cores read faster) or product_split_quant_bytes (the quantized formats:
/// more work a byte, and their small models' matrices stay in cache), or
/// its multiply-adds product_split_macs (tokens x rows x cols): below all,
/// waking and joining the other threads costs more than they give.
/// A decode step of a small model runs a hundred such products, and in a
/// node its kernel threads share the cores with the actors': `exo-node run`
/// of a 12 x 512 Q4_K_M model on 2 cores, 2 threads, one sequence, gave
/// 312-428 tokens/s with every product and attention split and 552-694
/// with these limits and attention_splits' while the quantized formats
/// split from 512 KiB too; from 1 MiB, 611-987 against 404-534 in another
/// hour (docs/benchmarks.md, "Small products and attentions on one
/// thread"). The thread count never changes the bits.
constexpr std::size_t product_split_bytes = std::size_t{512} << 10;
constexpr std::size_t product_split_quant_bytes = std::size_t{1} << 20;
constexpr std::size_t product_split_macs = std::size_t{8} << 20;

/// Whether matmul_weights splits this product over its threads (above),
/// or every product with split_all_work(true).
bool product_splits(weight_type t, std::size_t tokens, std::size_t rows,
                    std::size_t cols) noexcept;

/// Splits every product and every attention over the threads they are
/// given, however small (true), or by product_splits' and
/// attention_splits' limits (false, the default): tests that compare
/// thread counts on small operands run the threaded paths so.
void split_all_work(bool all) noexcept;

/// Whether split_all_work(true) is in force.
bool all_work_splits() noexcept;

/// C[m x n] = A[m x k] * W^T, W stored [n x k] encoded as t (row-major rows
/// of k elements). F32 and F16 (activations rounded to half first) compute
/// exactly what llama.cpp's AVX-512 CPU backend computes: ggml_vec_dot_f32/
/// _f16's order for one row of A (and batches llamafile_sgemm declines: k
/// not a multiple of 16 or n not of 4), tinyBLAS's 16-lane order for two
/// rows and more; AVX-512, AVX2 and scalar code give the same bits. Q8_0:
/// activations quantized by
/// quantize_q8_0_activations, then int8 block dot products summed exactly
/// as llama.cpp sums them (a matrix-vector kernel for one row, register
/// tiles with AVX-512 VNNI or AVX2 for more; every path, any row count and
/// any thread count give the same bits). ggml's other formats (BF16, Q4_0
/// ... Q6_K): llama.cpp's CPU arithmetic (quant_formats.hpp's matmul_quant;
/// Q4_K matrices of a multiple of 8 rows in the order of llama.cpp's
/// repacked x86 kernels, quant_repack.hpp). `threads` > 1 splits rows over
/// OpenMP threads where the build has OpenMP and product_splits says the
/// product is worth it.
void matmul_weights(const float* a, const std::uint8_t* w, weight_type t,
                    float* c, const matmul_dims& dims, int threads) noexcept;

/// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, per row of dim
/// elements (float squares summed in double, as ggml). out may equal x.
void rms_norm(const float* x, const float* weight, float* out,
              std::size_t rows, std::size_t dim, float eps) noexcept;

/// Rope of one row of `heads` heads at position pos (see rope_dims),
/// NORMAL mode (adjacent pairs). freq_factors may be null.
void rope_row(float* x, std::size_t heads, std::size_t head_dim,
              std::size_t n_rot, std::int64_t pos, float freq_base,
              const float* freq_factors) noexcept;

/// rope_row in NEOX mode: pair i is (x[i], x[i + n_rot / 2]).
void rope_row_neox(float* x, std::size_t heads, std::size_t head_dim,
                   std::size_t n_rot, std::int64_t pos, float freq_base,
                   const float* freq_factors) noexcept;

/// Rope of dims.rows rows; row r at positions[r]; dims.neox picks the mode.
/// The same as rope_cache, then rope_cached.
void rope(float* x, const std::int32_t* positions, const float* freq_factors,
          const rope_dims& dims) noexcept;

/// ggml's rope cache of dims.rows rows (dims.heads and head_dim unused):
/// cs[r * n_rot + 2i] and cs[r * n_rot + 2i + 1] are the cosine and sine
/// of pair i's angle at positions[r] (rope_dims), theta built by repeated
/// multiplication as ggml_rope_cache_init builds it, with this process's
/// libm. Computed once, it serves every layer's Q and K of those rows.
void rope_cache(float* cs, const std::int32_t* positions,
                const float* freq_factors, const rope_dims& dims) noexcept;

/// Rope of dims.rows rows of x turned by rope_cache's cs (its layout):
/// given rope_cache's angles, rope's bits. dims.freq_base is unused.
void rope_cached(float* x, const float* cs, const rope_dims& dims) noexcept;

/// In-place softmax of n elements (max subtracted, sum in double).
void softmax(float* x, std::size_t n) noexcept;

/// ggml's vector expf (ggml_v_expf, the AVX-512 build) on one float: a
/// polynomial with at most 1.5 ulp of error, 0 below about -104 and
/// infinity above about 88.4. Not libm's expf.
float expf_ggml(float x) noexcept;

/// The sum of expf_ggml(x[i] - shift) over n floats: in 16 (AVX-512) or 8
/// (AVX2) vector lanes where the CPU has them, each lane's exponential
/// widened to double and summed there (a row's log-sum-exp: about 0.1 ms
/// for a 128K-token vocabulary).
double sum_exp(const float* x, std::size_t n, float shift) noexcept;

/// std::exp of 16 floats (out may equal x) as the attention kernels'
/// online softmax computes them: where the CPU has AVX-512F (or AVX2 and
/// FMA) and the process's libm gives the same bits (expf_libm_lanes),
/// glibc's expf steps in double vector lanes for |x| < 88 and libm's calls
/// for the rest; else a call each. The bits of std::exp either way.
void expf_libm16(const float* x, float* out) noexcept;

/// Whether expf_libm16 computes in vector lanes here: the CPU has
/// AVX-512F, or AVX2 and FMA (as limit_isa allows), and a check at first
/// use (every 4096th float below 88 in magnitude, and libm's special
/// cases) found std::exp's bits.
bool expf_libm_lanes() noexcept;

/// out[i] = silu(gate[i]) * up[i] as ggml_vec_swiglu_f32 computes it (the
/// AVX-512 build of llama.cpp, bit for bit, on every instruction set):
/// gate / (1 + expf_ggml(0 - gate)) * up for each whole group of 16
/// elements from the start, gate / (1 + expf(-gate)) * up (libm expf) for
/// the count % 16 left at the end. ggml starts its groups at every row of
/// the feed-forward width, so rows of n_ff elements give ggml's bits when
/// n_ff is a multiple of 16 (every Llama model's is). out may equal gate or
/// up.
void silu_mul(const float* gate, const float* up, float* out,
              std::size_t count) noexcept;

/// Causal attention of dims.n_tokens rows (see attention_dims) as
/// llama.cpp's CPU flash attention computes it over its F16 KV cache
/// (ggml_compute_forward_flash_attn_ext_f16 with one thread, AVX-512
/// build), bit for bit on every instruction set and thread count. K and V
/// are rounded to half where read (an f32 cache; see below for f16). Batches of
/// fewer than 64 tokens, or heads not a multiple of 16 wide, take ggml's
/// one_chunk path: Q rounded to half, scores by ggml_vec_dot_f16's order,
/// an online softmax with libm expf, the weighted V sum in a half
/// accumulator rounded after every cell, then divided by the sum. Batches
/// of 64 tokens and more take the tiled path: F32 Q, scores and V sums as
/// fused multiply-add chains over 64-cell tiles (simd_gemm), each tile's
/// softmax through expf_ggml summed per 16 lanes in double. (token, head)
/// pairs are split over `threads` OpenMP threads; the result does not
/// depend on how.
///
/// One token over 512 cells or more (llama.cpp pads its KV length to a
/// multiple of 256, so from position 256 on) takes ggml's split-KV path,
/// whose bits depend on llama.cpp's thread count: on one thread it is
/// one_chunk; on N it cuts the cells into N chunks and merges their
/// partial sums. `llama_threads` is the thread count of the llama.cpp whose
/// bits to give: 1 (the default, and exo's answer everywhere unless a user
/// asks) is one_chunk; N > 1 reproduces `llama.cpp -t N`.
void attention(const float* q, const float* k, const float* v, float* out,
               const attention_dims& dims, int threads,
               int llama_threads = 1) noexcept;
/// The same over an f16 cache (dims.kv == kv_type::f16): k and v hold the
/// halves an f32 cache is rounded to, so the bits are the same.
void attention(const float* q, const std::uint16_t* k, const std::uint16_t* v,
               float* out, const attention_dims& dims, int threads,
               int llama_threads = 1) noexcept;

/// The same over a Q8_0 cache (dims.kv == kv_type::q8_0; head_dim and
/// kv_stride multiples of 32): llama.cpp's flash attention over such a
/// cache, which always takes ggml's one_chunk path (its tiled and split-KV
/// paths are for F32/F16 caches only), so the bits depend on neither the
/// batch nor any thread count: each query head quantized to Q8_0
/// (quantize_q8_0_activations), scores by ggml_vec_dot_q8_0_q8_0, an online
/// softmax with libm expf, V rows decoded to f32 (ggml's
/// dequantize_row_q8_0) and summed with fused multiply-adds in an f32
/// accumulator, finally divided by the sum.
void attention(const float* q, const block_q8_0* k, const block_q8_0* v,
               float* out, const attention_dims& dims, int threads) noexcept;

/// y = x with every run of n values (n a power of two, count a multiple of
/// n) times the orthonormal Walsh-Hadamard matrix of order n, as ggml's CPU
/// backend computes a product with llama.cpp's rotation matrix
/// (ggml_compute_forward_fwht): each value times 1/sqrtf(n), then the
/// butterflies (u + v, u - v) for strides 1, 2, 4, ... n/2. Exact sums in
/// a fixed order: the same bits on every instruction set. y may equal x.
void hadamard(const float* x, float* y, std::size_t count,
              std::size_t n) noexcept;

/// Whether attention takes the tiled path for dims.
bool attention_tiled_path(const attention_dims& dims) noexcept;

/// An attention runs on several threads only from this many multiply-adds
/// (query rows x heads x visible positions x head size, scores and values
/// counted once): a decode step's attention over a short context (8 heads
/// of 64 over 50 positions: 26 K) costs less than waking the threads; one
/// over 2048 positions of a 1B model's 32 heads (4 Mi) does not.
constexpr std::size_t attention_split_macs = std::size_t{1} << 20;

/// Whether attention splits its heads over its threads for dims (above),
/// or always with split_all_work(true). The bits never depend on it.
bool attention_splits(const attention_dims& dims) noexcept;

/// Whether attention takes the split-KV path for dims and llama_threads.
bool attention_split_kv(const attention_dims& dims,
                        int llama_threads) noexcept;

// -- checks and sizes of the Llama operations ------------------------------

/// Byte sizes of each operand of an operation, or the reason its dims are
/// malformed (zero sizes, overflow, broken divisibility).
struct weights_bytes {
  std::size_t a;
  std::size_t w;
  std::size_t c;
};
result<weights_bytes> check_matmul_weights(weight_type t,
                                           const matmul_dims& dims);

/// rows x dim f32 (the x / out size; weight is dim f32).
result<std::size_t> check_rms_norm(std::size_t rows, std::size_t dim);

struct rope_bytes {
  std::size_t x;
  std::size_t positions;
  std::size_t freq_factors;
  std::size_t cache; ///< rope_cache's cs: rows x n_rot f32
};
result<rope_bytes> check_rope(const rope_dims& dims);

struct attention_bytes {
  std::size_t q;  ///< also out
  std::size_t kv; ///< each of k and v
};
result<attention_bytes> check_attention(const attention_dims& dims);

/// Sizes of a paged attention (attention_dims::block_positions != 0):
/// check_attention's q, the table's bytes, the bytes of one block's rows
/// (what k and v must hold from their offsets at least) and where a
/// block's last row ends, in bytes from the block's start.
struct paged_attention_bytes {
  std::size_t q;
  std::size_t table;
  std::size_t block_rows; ///< (block_positions - 1) rows apart + one row
  std::size_t block;      ///< block_stride values
};
result<paged_attention_bytes> check_paged_attention(const attention_dims& d);

/// Bytes of a view from its offset to the end of its buffer, or of its
/// allocation where its limit is less (0 when the offset is past it): how
/// far a paged cache's blocks may lie.
std::size_t view_extent(const_view v) noexcept;

/// Checks row `row`'s position `pos` in a decode batch's table of
/// table_len blocks of block_positions (attention_paged_rows,
/// store_kv_rows): an error naming `op`, the row and the position where
/// the table does not cover it.
status check_row_position(const char* op, std::size_t row, std::int32_t pos,
                          std::size_t table_len,
                          std::size_t block_positions);

/// Checks each of the n entries of a block table: an index >= 0 whose
/// block's rows end within `extent` bytes of k and of v (the views'
/// bytes from their offsets). An error names the first bad entry.
status check_block_table(const std::int32_t* table, std::size_t n,
                         const paged_attention_bytes& sz,
                         std::size_t k_extent, std::size_t v_extent);

} // namespace exo::backend::host
