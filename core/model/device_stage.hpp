#pragma once

/// A pipeline stage that computes on a device: layers [first, last) of a
/// llama_model run as the device layer's Llama operations (backends/
/// backend.hpp: matmul_weights, rms_norm, rope, attention, silu_mul, add),
/// with the weights uploaded once and the KV caches resident on the device.
///
/// The stage reaches its device only through `device_ops`, so the same code
/// runs over a backend::device in this process (backend_ops, below) and
/// over a device actor's buffer pool, on the actor's thread
/// (core/device/pool_ops.hpp, where a shard's stage lives). Per forward
/// it makes one write (activations and positions), one batch of compute
/// operations and one read (activations, or logits on the last stage).
///
/// The math is llama_stage's, operation for operation: RMSNorm with the
/// file's eps, Q/K/V projections (plus their biases, qwen2: one add per
/// row; then an RMSNorm of each Q and K head, qwen3), llama.cpp's "normal"
/// rotary mode (rope_neox for qwen2/qwen3) with the
/// file's frequency base, n_rot and rope_freqs, grouped-query causal
/// attention scaled by 1/sqrt(head_dim), output projection, residual,
/// RMSNorm, SwiGLU, residual; the last stage adds the final norm and the
/// output head. The token embedding stays on the host (a row lookup).
///
/// No exceptions: every failure is a backend::error value.

#include "backends/backend.hpp"
#include "core/model/llama_model.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace exo::model {

/// A buffer on the device behind a device_ops (an opaque id; 0 is none).
using device_handle = std::uint64_t;

/// The operations a stage runs are the device layer's (backend::op_kind,
/// backends/ops.hpp): add, matmul_f32/f16/q8_0, rms_norm, rope, attention,
/// silu_mul, with the operand rules of its op table.
using backend::op_kind;

struct device_operand {
  device_handle buf = 0;
  std::uint64_t offset = 0; ///< bytes
};

/// One compute operation on buffers of one device: a backend::op_call
/// whose operands are handles (run_device_op resolves them to views).
struct device_op {
  op_kind kind = op_kind::add;
  std::vector<device_operand> inputs;
  device_operand output;
  std::vector<std::uint64_t> dims;
  std::vector<float> scalars;
};

/// What a stage needs from a device. Ordering is the device layer's (one
/// in-order queue): a read sees every operation run before it.
class device_ops {
public:
  virtual ~device_ops();
  virtual backend::result<device_handle> allocate(std::uint64_t bytes) = 0;
  /// Frees a buffer; may finish after it returns.
  virtual backend::status free(device_handle h) = 0;
  virtual backend::status write(device_handle h, std::uint64_t offset,
                                const void* src, std::uint64_t bytes)
    = 0;
  virtual backend::status read(device_handle h, std::uint64_t offset,
                               void* dst, std::uint64_t bytes)
    = 0;
  /// A read-only buffer over `bytes` of this process's memory at `data`,
  /// read in place (no copy) while `keep` holds that memory alive: weights
  /// straight from the mapped model file on a device that reads host memory
  /// (backend::device::adopt_host). errc::unsupported (the default) when the
  /// device cannot; the caller then allocates and writes.
  virtual backend::result<device_handle>
  adopt_host(const void* data, std::uint64_t bytes,
             std::shared_ptr<const void> keep);
  /// Whether the device runs matmul_weights on weights encoded as t
  /// (backend::device::runs_weights). The default: f32, f16 and q8_0,
  /// which every backend runs.
  virtual bool runs_weights(backend::weight_type t) const;
  /// The encoding the device would rather hold a rows x cols matrix of
  /// type t in (backend::device::preferred_weights): the stage uploads a
  /// packed copy (backend::pack_weights) when it differs. The default: t.
  virtual backend::weight_type preferred_weights(backend::weight_type t,
                                                 std::uint64_t rows,
                                                 std::uint64_t cols) const;
  /// Whether the device's attention reads a paged cache's rows where they
  /// lie (backend::device::reads_kv_blocks). The default: no.
  virtual bool reads_kv_blocks() const;
  /// Whether the device runs a decode batch's cache writes and attention
  /// as one operation each (backend::device::runs_paged_rows). The
  /// default: no, so a stage sends them sequence by sequence.
  virtual bool paged_rows() const;
  /// Copies `bytes` between two buffers of the device (in order with the
  /// other operations). The default goes through host memory (read, then
  /// write) in pieces of at most 4 MiB.
  virtual backend::status copy(device_handle src, std::uint64_t src_offset,
                               device_handle dst, std::uint64_t dst_offset,
                               std::uint64_t bytes);
  /// The buffer behind `h` as one of `bytes`, its first min(old, new)
  /// bytes kept, needing room for the difference only (in order with the
  /// other operations; the handle stays). On failure it is as it was.
  /// errc::unsupported (the default) where the device cannot
  /// (backend::device::resize); the caller then allocates and copies.
  virtual backend::status resize(device_handle h, std::uint64_t bytes);
  /// Whether resize is supported (backend::device::resizes; the default:
  /// no).
  virtual bool resizes() const;
  /// Bytes of the device's memory the buffer behind `h` takes (at least
  /// the bytes it was asked for: a pool rounds up; adopted host memory
  /// counts as the device counts it); 0 for an unknown handle. What a
  /// stage gives back when it goes (device_stage::footprint).
  virtual std::uint64_t footprint(device_handle h) const = 0;
  /// Runs the operations in order; stops at the first failure.
  virtual backend::status run(const std::vector<device_op>& ops) = 0;
  virtual backend::status synchronize() = 0;
  /// A whole step: writes `in_bytes` from `src` at (in, in_offset) (none
  /// when 0), runs `ops`, reads `out_bytes` from (out, out_offset) into
  /// `dst` (none when 0). The default makes the three calls; an
  /// implementation that pays per call (a remote device) may make it one.
  virtual backend::status step(device_handle in, std::uint64_t in_offset,
                               const void* src, std::uint64_t in_bytes,
                               const std::vector<device_op>& ops,
                               device_handle out, std::uint64_t out_offset,
                               void* dst, std::uint64_t out_bytes);
  /// What the operations run on ("cpu:0"), for messages.
  virtual std::string where() const = 0;
  /// Seconds the last step() spent in run(): handing its operations to
  /// the device (device_stage::submit_seconds). 0 where an implementation
  /// makes the step one call and cannot tell.
  double last_run_seconds() const noexcept {
    return last_run_seconds_;
  }

protected:
  double last_run_seconds_ = 0;
};

/// The view of `offset` in the buffer behind a handle (ctx: the finder's
/// owner), its limit the size the handle was allocated with where that is
/// less than the buffer's (a pooled buffer).
using buffer_finder = backend::result<backend::mut_view> (*)(
  const void* ctx, device_handle h, std::uint64_t offset);

/// Runs one operation on `dev`, its buffers found by `find`, through
/// backend::run: the one executor of device_op (backend_ops here; a device
/// actor's pool for the stages it hosts). The device checks the counts
/// against the op table and every view against its buffer and limit.
backend::status run_device_op(backend::device& dev, const device_op& op,
                              buffer_finder find, const void* ctx);

/// run_device_op over `ops` in order; the first failure stops it, named
/// with its operation and index.
backend::status run_device_ops(backend::device& dev,
                               const std::vector<device_op>& ops,
                               buffer_finder find, const void* ctx);

/// device_ops straight over a backend::device of this process (tests,
/// benchmarks, a single-process engine). The device must outlive it;
/// destroying it frees every buffer still allocated.
class backend_ops final : public device_ops {
public:
  explicit backend_ops(backend::device& dev);
  ~backend_ops() override;

  backend::result<device_handle> allocate(std::uint64_t bytes) override;
  backend::status free(device_handle h) override;
  backend::status write(device_handle h, std::uint64_t offset,
                        const void* src, std::uint64_t bytes) override;
  backend::status read(device_handle h, std::uint64_t offset, void* dst,
                       std::uint64_t bytes) override;
  backend::result<device_handle>
  adopt_host(const void* data, std::uint64_t bytes,
             std::shared_ptr<const void> keep) override;
  backend::status run(const std::vector<device_op>& ops) override;
  backend::status synchronize() override;
  std::string where() const override;
  bool runs_weights(backend::weight_type t) const override;
  backend::weight_type preferred_weights(backend::weight_type t,
                                         std::uint64_t rows,
                                         std::uint64_t cols) const override;
  bool reads_kv_blocks() const override;
  bool paged_rows() const override;
  backend::status copy(device_handle src, std::uint64_t src_offset,
                       device_handle dst, std::uint64_t dst_offset,
                       std::uint64_t bytes) override;
  backend::status resize(device_handle h, std::uint64_t bytes) override;
  bool resizes() const override;
  std::uint64_t footprint(device_handle h) const override;

  backend::device& device() const noexcept {
    return dev_;
  }
  std::size_t live_buffers() const noexcept {
    return bufs_.size();
  }

  /// The buffer behind a handle of this object.
  backend::result<backend::buffer*> find(device_handle h) const;

private:
  backend::device& dev_;
  device_handle next_ = 1;
  std::unordered_map<device_handle, std::unique_ptr<backend::buffer>> bufs_;
  /// Handles of host memory read in place (adopt_host).
  std::set<device_handle> adopted_;
};

/// The wire's max_chunk_bytes (messages/device.hpp, which this CAF-free
/// library cannot include; actors/workload/shard_actor checks that the two agree).
constexpr std::uint64_t default_upload_chunk_bytes = 4u << 20;

/// Options of a device stage.
struct device_stage_options {
  /// The most tokens one forward may carry (sizes the scratch buffers).
  std::uint32_t max_tokens = 64;
  /// The most rows of logits one forward of the last stage may return.
  std::uint32_t max_logit_rows = 1;
  /// Weights are written in pieces of at most this many bytes (the wire's
  /// max_chunk_bytes: a device actor on another thread receives each piece
  /// as one message).
  std::uint64_t upload_chunk_bytes = default_upload_chunk_bytes;
  /// The most operations handed to device_ops::run at once.
  std::size_t max_ops_per_run = 4096;
  /// On a device that reads host memory in place (the cpu device), use the
  /// weights where the model file is mapped instead of copying them
  /// (device_ops::adopt_host): no second copy in memory, nothing to upload,
  /// and the same pages the host engine reads.
  bool weights_in_place = true;
  /// For device_stage_memory only: count every weight format at its stored
  /// size, as a device that runs them all (device_ops::runs_weights: every
  /// backend of exo) holds them; false counts the formats other than
  /// f32/f16/q8_0 at their F16 size, as a device without their kernels
  /// holds them (create() uploads F16 copies there).
  bool stored_weights = true;
  /// How the KV caches store keys and values: f16 (llama.cpp's default:
  /// half the memory of f32, the same bits, backend::kv_type), f32, or
  /// q8_0 (34 bytes per 32 values, 53% of f16: llama.cpp's
  /// `--cache-type-k q8_0 --cache-type-v q8_0`, with its bits; the model's
  /// head width must be a multiple of 32).
  backend::kv_type kv = backend::kv_type::f16;
  /// A cache holds room for this many positions at first and grows as its
  /// sequence needs (to the next multiple of it, at least doubling, never
  /// past the context new_cache was given), so memory follows the tokens
  /// a sequence holds, not its context; 0: the whole context at once.
  std::uint32_t kv_grow_positions = 256;
  /// A paged KV cache (on a device whose attention reads blocks where
  /// they lie: device_ops::reads_kv_blocks): the stage's caches take
  /// blocks of this many positions (a power of two) from one pool, each
  /// sequence a table of them; a fork or a kept prompt prefix shares the
  /// source's blocks (copy-on-write: a block written while another cache
  /// holds it is copied first). 0, or a device that cannot: one run of
  /// rows per sequence, grown as kv_grow_positions says.
  std::uint32_t kv_block_positions = 32;
};

/// The most tokens one step of a shard may carry for a model `n_embd`
/// wide: a step's rows of activations stay within `chunk_bytes`, and at
/// most 512 (at least 1).
std::uint32_t batch_tokens_for(std::uint32_t n_embd,
                               std::uint64_t chunk_bytes
                               = default_upload_chunk_bytes);

/// The most sequences one step of a shard may carry for a model with
/// these widths: at most batch_tokens_for(n_embd) and 32, and what the
/// last stage returns for them (a row per sequence) within `chunk_bytes`
/// (at least 1): a whole row of logits each (n_vocab floats), or with
/// `top_k` (not 0) each row's top_k best logits and their token ids
/// (messages/workload.hpp stage_step::top_k).
std::uint32_t batch_sequences_for(std::uint32_t n_embd,
                                  std::uint32_t n_vocab,
                                  std::uint64_t chunk_bytes
                                  = default_upload_chunk_bytes,
                                  std::uint32_t top_k = 0);

/// The options a shard (actors/workload/shard_actor) runs its stage with:
/// batches of batch_tokens_for(n_embd) rows, up to as many rows of logits
/// as a step of sequences whose rows return reduced may carry
/// (batch_sequences_for with a top_k).
/// Placement sizes a stage's working memory with the same options.
device_stage_options shard_stage_options(const llama_hparams& hp);

/// What a device stage of layers [first, last) allocates on its device,
/// buffer by buffer as create() and new_cache() allocate them (create()
/// sizes its scratch from the same function, so the two cannot drift).
/// The token embedding is not on the device: the first stage looks rows up
/// on the host (embed()).
struct stage_memory {
  /// Norms and matrices of the stage's layers.
  std::uint64_t layer_weight_bytes = 0;
  /// Last stage: the output norm and the output head (token_embd when
  /// tied).
  std::uint64_t head_bytes = 0;
  /// Scratch for max_tokens rows: activations and the rows' rope angles
  /// (host::rope_cache's n_rot floats a row, rope_freqs folded in), the normed
  /// row, q, the attention output, a temporary, gate and up; with an f32
  /// cache, the ones that copy a batch's K and V rows into each
  /// sequence's cache.
  std::uint64_t scratch_bytes = 0;
  /// Last stage: max_logit_rows rows of n_vocab floats.
  std::uint64_t logits_bytes = 0;
  /// K and V of every layer of the stage for one position of one sequence
  /// (at the options' kv type); new_cache(n_ctx) allocates n_ctx times
  /// this.
  std::uint64_t kv_bytes_per_token = 0;

  /// Uploaded once by create().
  std::uint64_t weight_bytes() const {
    return layer_weight_bytes + head_bytes;
  }
  /// Allocated by create() besides the weights.
  std::uint64_t working_bytes() const {
    return scratch_bytes + logits_bytes;
  }
  /// Everything, with `sequences` KV caches of `n_ctx` positions each.
  std::uint64_t total(std::uint64_t n_ctx,
                      std::uint64_t sequences = 1) const {
    return weight_bytes() + working_bytes()
           + kv_bytes_per_token * n_ctx * sequences;
  }
};

/// The memory of a device stage of `m`'s layers [first, last) with options
/// `o`. Weights are counted at the size create() uploads: the file's tensor
/// bytes for F32, F16 and Q8_0, which every device runs; for every other
/// format the file's bytes when o.stored_weights (a device that runs them
/// as stored: every backend of exo), else two bytes per weight (create()
/// dequantizes them to F16 for a device without their kernels). Throws
/// model_error for a bad range.
stage_memory device_stage_memory(const llama_model& m, std::uint32_t first,
                                 std::uint32_t last,
                                 const device_stage_options& o);

/// Identifies one sequence's KV cache in a stage.
using cache_id = std::uint64_t;

class device_stage {
public:
  /// Checks the range, allocates and uploads the stage's weights through
  /// `ops` (which must outlive the stage) and its scratch buffers.
  static backend::result<std::unique_ptr<device_stage>>
  create(std::shared_ptr<const llama_model> model, std::uint32_t first,
         std::uint32_t last, device_ops& ops,
         device_stage_options opts = {});

  /// Frees every buffer (weights, scratch, caches) through the ops.
  ~device_stage();
  device_stage(const device_stage&) = delete;
  device_stage& operator=(const device_stage&) = delete;

  std::uint32_t first() const noexcept {
    return first_;
  }
  std::uint32_t last() const noexcept {
    return last_;
  }
  bool is_first() const noexcept {
    return first_ == 0;
  }
  bool is_last() const noexcept {
    return last_ == model_->hparams().n_layer;
  }
  const llama_model& model() const noexcept {
    return *model_;
  }
  const device_stage_options& options() const noexcept {
    return opts_;
  }

  /// Bytes of weights on the device (uploaded once by create(), or read
  /// in place).
  std::uint64_t weight_bytes() const noexcept {
    return weight_bytes_;
  }
  /// The part of weight_bytes() read in place from the mapped model file
  /// (options().weights_in_place on a device that can).
  std::uint64_t weight_bytes_in_place() const noexcept {
    return in_place_bytes_;
  }
  /// Bytes of KV cache on the device, all sequences together.
  std::uint64_t cache_bytes() const noexcept {
    return cache_bytes_;
  }
  /// Bytes of the device's memory the stage holds (device_ops::footprint
  /// of every buffer: weights, scratch, caches; weights read in place as
  /// the device counts them, nothing on the cpu device without a memory
  /// limit): what the device has again once the stage is gone.
  std::uint64_t footprint() const;
  /// Operations run through device_ops so far.
  std::uint64_t ops_run() const noexcept {
    return ops_run_;
  }
  /// Seconds spent in device_ops::run so far: handing the operations to
  /// the device. A host device computes them there, so this is its step; a
  /// GPU only enqueues them, and a step whose submission takes about as
  /// long as the whole step is bound by the host's launches, not by the
  /// device (batch_step_bench prints both).
  double submit_seconds() const noexcept {
    return submit_seconds_;
  }

  /// A KV cache of up to `n_ctx` positions for a new sequence, on the
  /// device: room for options().kv_grow_positions of them at first (all
  /// of them when 0), grown by forward() as the sequence needs.
  backend::result<cache_id> new_cache(std::uint32_t n_ctx);
  /// A new cache that starts with the first `n` positions of cache `src`
  /// (paged: src's blocks, shared until either writes into one; else
  /// copied on the device, layer by layer): a sequence whose first n
  /// tokens are src's gets the rows src computed for them, without
  /// computing them again (several sequences of one prompt; a retained
  /// prompt prefix). Its capacity is `capacity` (0: src's); src is
  /// unchanged. An error naming the cache when src is unknown, holds fewer
  /// than n positions, n exceeds the capacity, or the device has no room.
  backend::result<cache_id> fork_cache(cache_id src, std::uint32_t n,
                                       std::uint32_t capacity = 0);
  /// Frees a sequence's cache.
  backend::status drop_cache(cache_id id);
  /// Positions stored in a cache (an error for an unknown id).
  backend::result<std::uint32_t> n_past(cache_id id) const;
  /// Forgets a cache's positions from n on (n <= n_past): the next
  /// forward writes over them (drafted tokens the model did not accept).
  backend::status truncate(cache_id id, std::uint32_t n);
  /// The most positions the cache may hold (the n_ctx it was made with).
  backend::result<std::uint32_t> capacity(cache_id id) const;
  /// Positions it has room for now (grows up to capacity()).
  backend::result<std::uint32_t> room(cache_id id) const;
  /// Grows the cache, as forward() would, to hold `positions` (at most
  /// capacity()); nothing when it does. An error naming the cache (and
  /// the cache as it was) when the device has no room.
  backend::status reserve(cache_id id, std::uint32_t positions);
  /// Bytes of one sequence's cache on the device now (K and V; a paged
  /// cache's blocks, shared ones too).
  backend::result<std::uint64_t> cache_bytes(cache_id id) const;

  /// Whether the caches are paged (options().kv_block_positions on a
  /// device that reads blocks).
  bool paged() const noexcept {
    return block_positions_ != 0;
  }
  /// The block pool of a paged stage: blocks of block_positions()
  /// positions of every layer (K and V each block_bytes()).
  struct kv_block_stats {
    std::uint32_t total = 0;  ///< blocks the pool has room for
    std::uint32_t used = 0;   ///< held by at least one cache
    std::uint32_t shared = 0; ///< held by two caches or more
    std::uint64_t copies = 0; ///< blocks copied on write so far
    std::uint64_t grows = 0;  ///< times the pool grew
    std::uint64_t trims = 0;  ///< times it shrank (a quarter or less used)
  };
  kv_block_stats kv_blocks() const noexcept;
  std::uint32_t block_positions() const noexcept {
    return block_positions_;
  }
  /// Bytes of one block of K (or of V): every layer of the stage.
  std::uint64_t block_bytes() const noexcept;
  /// Checks the pool's books against the caches' tables: each block's
  /// count is the number of tables holding it, the free list holds
  /// exactly the blocks none holds, each once; an error says what is
  /// wrong (tests run it after every step).
  backend::status check_kv_blocks() const;

  /// Bytes of one position of one layer's K (or V) in a cache: n_embd_kv
  /// values of the options' kv type.
  std::uint64_t kv_row_bytes() const noexcept;
  /// The rotations around this stage's cache (model::kv_rotation_of).
  kv_rotation kv_rotations() const noexcept;
  /// Bytes read_kv writes (and write_kv takes) for n positions of every
  /// layer of the stage.
  std::uint64_t kv_bytes(std::uint32_t n) const noexcept {
    return std::uint64_t{last_ - first_} * 2 * n * kv_row_bytes();
  }
  /// Copies positions [pos, pos + n) of a cache out (a planned move of a
  /// sequence to another stage): layer by layer from first(), its K rows
  /// then its V rows, kv_bytes(n) bytes in all. pos + n must not pass the
  /// positions the cache holds.
  backend::status read_kv(cache_id id, std::uint32_t pos, std::uint32_t n,
                          std::uint8_t* out);
  /// Appends positions [pos, pos + n) to a cache in read_kv's layout
  /// (`bytes` must be kv_bytes(n)): pos must be the positions it holds;
  /// it grows as forward() would, within its capacity. The cache then
  /// holds pos + n positions, as if forward() had computed them.
  backend::status write_kv(cache_id id, std::uint32_t pos, std::uint32_t n,
                           const std::uint8_t* data, std::uint64_t bytes);
  std::size_t caches() const noexcept {
    return caches_.size();
  }

  /// Host embedding lookup of the first stage: n rows of n_embd floats.
  /// An error for a token id outside the vocabulary or another stage.
  backend::status embed(const std::int32_t* tokens, std::size_t n,
                        float* x) const;

  /// Runs the stage over n tokens at positions pos .. pos + n - 1 of the
  /// cache's sequence: x holds n rows of n_embd floats (activations in).
  /// pos must equal the cache's n_past (steps of a sequence arrive in
  /// order) and pos + n must fit the cache; 1 <= n <= max_tokens.
  ///   - not the last stage: x is overwritten with the activations out;
  ///   - last stage: `logits` receives the logits of the last
  ///     `logit_rows` rows (1 <= logit_rows <= min(n, max_logit_rows)),
  ///     x is left as given.
  /// On success the cache advances by n; on failure it does not.
  backend::status forward(cache_id id, std::uint32_t pos, float* x,
                          std::size_t n, float* logits = nullptr,
                          std::size_t logit_rows = 1);

  /// Where a forward's activations come from and go to when they stay on
  /// devices between the stages of one node (a device copy instead of a
  /// trip through host memory).
  struct device_io {
    /// Activations in: n rows of n_embd floats in a buffer of this
    /// stage's device (the first layer reads them there); buf 0: from x.
    device_operand in;
    /// Not the last stage: leave the activations out on the device, in
    /// activations(), instead of reading them into x.
    bool keep_out = false;
  };
  /// forward() with activations on the device as `io` says; x may be null
  /// when both ends stay on the device.
  backend::status forward(cache_id id, std::uint32_t pos, float* x,
                          std::size_t n, float* logits,
                          std::size_t logit_rows, const device_io& io);

  /// Part of a batched forward: n tokens of one sequence, at positions
  /// pos .. pos + n - 1 of its cache.
  struct segment {
    cache_id cache = 0;
    std::uint32_t pos = 0;
    std::uint32_t n = 0;
    /// Every row a step of its own (speculative decoding's verification
    /// of drafted tokens): each row gets the bits a one-token forward at
    /// its position gives, and the last stage returns the logits of every
    /// row of the segment, not only of its last.
    bool apart = false;
  };
  /// One forward of several sequences at once (batched decoding): x holds
  /// the rows of every segment in order (their n add up to at most
  /// max_tokens). Every matrix is read once for all the rows; each
  /// segment's new K and V go to its own cache and its attention reads
  /// only that cache, at its own positions, so each sequence gets exactly
  /// what a forward of it alone gives. Each segment's cache must be
  /// distinct and at `pos`, as forward() asks. The last stage writes one
  /// row of logits per segment (its last row's; every row's for a segment
  /// `apart`), at most max_logit_rows rows in all, to `logits`. All or
  /// nothing: on failure no cache advances.
  backend::status forward(const std::vector<segment>& segs, float* x,
                          float* logits, const device_io& io);
  backend::status forward(const std::vector<segment>& segs, float* x,
                          float* logits);
  /// Last stage, after a successful forward: the logits of rows
  /// [row, row + rows) of that forward's rows (every segment's, in order),
  /// 1 <= rows <= max_logit_rows, n_vocab floats each, into `logits`.
  /// What scoring a prompt reads (the log-probability of each of its
  /// tokens): every row of a long step in pieces the logits buffer holds,
  /// without changing the step itself. Rows the forward returned logits
  /// for may differ from these in the last bits (another product shape).
  /// An error names a stage that is not the last, no forward yet, or rows
  /// past the forward's.
  backend::status row_logits(std::uint64_t row, std::uint64_t rows,
                             float* logits);
  /// The activations out of the last forward of a stage that is not the
  /// last (n rows of n_embd floats from offset 0), valid until the next
  /// forward.
  device_operand activations() const noexcept {
    return {io_, 0};
  }

private:
  struct matrix {
    device_handle buf = 0;
    op_kind kind = op_kind::matmul_f32;
    std::uint64_t rows = 0, cols = 0;
  };
  struct layer {
    device_handle attn_norm = 0, ffn_norm = 0;
    matrix wq, wk, wv, wo, gate, up, down;
    /// Q/K/V biases (qwen2) and per-head Q/K norms (qwen3), or 0.
    device_handle bq = 0, bk = 0, bv = 0, q_norm = 0, k_norm = 0;
  };
  struct cache {
    device_handle k = 0, v = 0; ///< 0 when paged
    std::uint32_t capacity = 0; ///< the most positions (n_ctx)
    std::uint32_t room = 0;     ///< positions allocated: rows per layer
    std::uint32_t n_past = 0;
    std::uint64_t bytes = 0;
    /// Paged: the pool's blocks holding positions [i * B, (i + 1) * B).
    std::vector<std::int32_t> table;
  };
  /// The block pool of a paged stage: K and V arenas of `blocks` blocks,
  /// each block every layer's B rows (layer l's at l * B rows).
  struct block_pool {
    device_handle k = 0, v = 0;
    std::uint32_t blocks = 0;
    /// The blocks each arena has room for: `blocks`, except after a growth
    /// that got K's larger arena but not V's (grow_pool).
    std::uint32_t k_room = 0, v_room = 0;
    std::vector<std::uint32_t> refs;   ///< caches holding each block
    std::vector<std::int32_t> free;    ///< blocks no cache holds
    std::uint64_t copies = 0, grows = 0, trims = 0;
  };

  device_stage(std::shared_ptr<const llama_model> model, std::uint32_t first,
               std::uint32_t last, device_ops& ops,
               device_stage_options opts);

  backend::status upload_all();
  /// `may_adopt`: the bytes outlive the stage (the file mapping), so a
  /// device that reads host memory may use them in place.
  backend::result<device_handle> upload(const void* data,
                                        std::uint64_t bytes,
                                        bool may_adopt = true);
  backend::result<matrix> upload_matrix(const ops::matrix_view& m);
  /// Where upload_matrix packs a matrix for the device (one buffer for all
  /// of upload_all's, freed when it ends).
  std::vector<std::uint8_t> packing_;
  backend::result<device_handle> alloc(std::uint64_t bytes);
  backend::status run_batched(const std::vector<device_op>& ops);
  /// The cache `id`, or an error naming it.
  backend::result<const cache*> find_cache(cache_id id) const;
  backend::result<cache*> find_cache(cache_id id);
  /// New K and V buffers of `room` positions for c, each layer's rows
  /// copied over; c is unchanged on failure.
  backend::status grow(cache& c, std::uint32_t room);
  /// The positions a cache holding n_past + n first gets room for.
  std::uint32_t room_for(const cache& c, std::uint64_t need) const;
  /// Paged: c's table covers `positions` (blocks from the pool, which
  /// grows when it has none left); c is unchanged on failure.
  backend::status take_blocks(cache& c, std::uint32_t positions);
  /// Paged: the blocks holding positions [pos, pos + n) of c are c's
  /// alone (a block another cache holds is copied first).
  backend::status own_blocks(cache& c, std::uint32_t pos, std::uint32_t n);
  /// Paged: blocks of c's whole context.
  std::uint64_t blocks_of(const cache& c) const noexcept;
  /// Paged: a block from the free list (the pool grown when empty).
  backend::result<std::int32_t> new_block();
  /// Paged: the pool with room for at least `blocks` blocks (arenas
  /// copied into new ones).
  backend::status grow_pool(std::uint32_t blocks);
  /// Paged: the pool grown by `add` blocks, or by the most the device has
  /// room for (halves of `add`, down to one block).
  backend::status grow_pool_by(std::uint64_t add);
  /// Paged: gives c's blocks back.
  void release_blocks(cache& c);
  /// Paged: when a quarter of the pool or less is held, moves the held
  /// blocks into arenas of twice their number (memory follows the tokens
  /// held after a burst too); nothing when the device has no room.
  void trim_pool();
  /// Paged: calls f(block offset of row pos in the K/V arena, rows) for
  /// each run of c's rows [pos, pos + n) of layer l within one block.
  template <class F>
  backend::status for_runs(const cache& c, std::uint32_t l, std::uint32_t pos,
                           std::uint32_t n, F&& f) const;
  /// Calls f(buffer, offset, offset in read_kv's layout, bytes) for each
  /// run of positions [pos, pos + n) of c: layer by layer, K then V.
  template <class F>
  backend::status for_kv_runs(const cache& c, std::uint32_t pos,
                              std::uint32_t n, F&& f) const;
  /// forward()'s body: the last `logit_rows` rows of each segment get
  /// logits on the last stage (0: one row, every row of an apart one).
  backend::status run_forward(const std::vector<segment>& segs, float* x,
                              float* logits, std::size_t logit_rows,
                              const device_io& io);

  std::shared_ptr<const llama_model> model_;
  std::uint32_t first_, last_;
  device_ops& ops_;
  device_stage_options opts_;

  std::vector<device_handle> owned_; ///< every buffer but the caches'
  std::vector<layer> layers_;
  device_handle output_norm_ = 0;
  matrix output_;
  /// Scratch: io (activations, then positions), cur, q, att, tmp, gate
  /// and up (which also hold a batch's new K and V rows), 16 rows of
  /// n_embd_kv ones (a device `mul` by one is an exact copy: K/V rows into
  /// their caches), logits.
  device_handle io_ = 0, cur_ = 0, q_ = 0, att_ = 0, tmp_ = 0, g_ = 0,
                u_ = 0, ones_ = 0, logits_ = 0;
  /// The segments of a single-sequence forward (no allocation per step).
  std::vector<segment> one_;
  /// Rows of the last successful forward whose final activations io_
  /// still holds (row_logits); 0 after a failed one.
  std::uint64_t last_rows_ = 0;
  /// Floats of ones_ still to be written (by the first batched forward).
  std::uint64_t ones_floats_ = 0;
  std::map<cache_id, cache> caches_;
  /// Paged: positions per block (0: contiguous caches), the pool, and the
  /// device buffer the step's block tables are written to.
  std::uint32_t block_positions_ = 0;
  block_pool pool_;
  /// Paged: the blocks every cache's context could take together (the
  /// pool's most).
  std::uint64_t cap_blocks_ = 0;
  device_handle tables_ = 0;
  std::uint64_t tables_bytes_ = 0;
  std::vector<std::int32_t> table_staging_;
  cache_id next_cache_ = 1;
  std::uint64_t weight_bytes_ = 0;
  std::uint64_t in_place_bytes_ = 0;
  std::uint64_t cache_bytes_ = 0;
  std::uint64_t ops_run_ = 0;
  double submit_seconds_ = 0;
  std::vector<std::uint8_t> staging_;
  /// A step's positions and their rope angles (host::rope_cache), row by
  /// row, on their way into staging_.
  std::vector<std::int32_t> positions_;
  std::vector<float> rope_staging_;
  /// The last step's operations, rewritten in place by the next.
  std::vector<device_op> op_list_;
};

} // namespace exo::model
