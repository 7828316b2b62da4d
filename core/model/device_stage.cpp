#include "core/model/device_stage.hpp"

#include "backends/host_kernels.hpp"
#include "core/gguf/quant.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

namespace exo::model {

using backend::errc;
using backend::fail;
using backend::result;
using backend::status;

device_ops::~device_ops() = default;

bool device_ops::runs_weights(backend::weight_type t) const {
  return t == backend::weight_type::f32 || t == backend::weight_type::f16
         || t == backend::weight_type::q8_0;
}

backend::weight_type device_ops::preferred_weights(backend::weight_type t,
                                                   std::uint64_t,
                                                   std::uint64_t) const {
  return t;
}

bool device_ops::reads_kv_blocks() const {
  return false;
}

bool device_ops::paged_rows() const {
  return false;
}

result<device_handle> device_ops::adopt_host(const void*, std::uint64_t,
                                             std::shared_ptr<const void>) {
  return fail(errc::unsupported, where() + " cannot read host memory in place");
}

status device_ops::copy(device_handle src, std::uint64_t src_offset,
                        device_handle dst, std::uint64_t dst_offset,
                        std::uint64_t bytes) {
  std::vector<std::uint8_t> staging(
    static_cast<std::size_t>(std::min<std::uint64_t>(bytes, 4u << 20)));
  for (std::uint64_t done = 0; done < bytes;) {
    const std::uint64_t n = std::min<std::uint64_t>(staging.size(),
                                                    bytes - done);
    EXO_TRY(read(src, src_offset + done, staging.data(), n));
    EXO_TRY(write(dst, dst_offset + done, staging.data(), n));
    done += n;
  }
  return {};
}

status device_ops::resize(device_handle, std::uint64_t) {
  return fail(errc::unsupported, where() + " cannot resize a buffer in place");
}

bool device_ops::resizes() const {
  return false;
}

status device_ops::step(device_handle in, std::uint64_t in_offset,
                        const void* src, std::uint64_t in_bytes,
                        const std::vector<device_op>& ops, device_handle out,
                        std::uint64_t out_offset, void* dst,
                        std::uint64_t out_bytes) {
  if (in_bytes > 0)
    EXO_TRY(write(in, in_offset, src, in_bytes));
  const auto t0 = std::chrono::steady_clock::now();
  auto st = run(ops);
  last_run_seconds_ = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
  EXO_TRY(st);
  if (out_bytes > 0)
    EXO_TRY(read(out, out_offset, dst, out_bytes));
  return {};
}

// -- backend_ops ---------------------------------------------------------------

backend_ops::backend_ops(backend::device& dev) : dev_(dev) {
}

backend_ops::~backend_ops() {
  // Pending work on a buffer finishes before it is freed (ordering rule 7).
  bufs_.clear();
}

result<device_handle> backend_ops::allocate(std::uint64_t bytes) {
  if (bytes > std::numeric_limits<std::size_t>::max())
    return fail(errc::out_of_memory, "allocation too large");
  auto b = dev_.allocate(static_cast<std::size_t>(bytes));
  if (!b)
    return b.err();
  auto h = next_++;
  bufs_.emplace(h, std::move(*b));
  return h;
}

status backend_ops::free(device_handle h) {
  adopted_.erase(h);
  if (bufs_.erase(h) == 0)
    return fail(errc::invalid_argument,
                "free: unknown buffer " + std::to_string(h));
  return {};
}

std::uint64_t backend_ops::footprint(device_handle h) const {
  auto it = bufs_.find(h);
  if (it == bufs_.end()
      || (adopted_.count(h) != 0 && !dev_.counts_adopted_memory()))
    return 0;
  return it->second->size();
}

result<backend::buffer*> backend_ops::find(device_handle h) const {
  auto it = bufs_.find(h);
  if (it == bufs_.end())
    return fail(errc::invalid_argument,
                "unknown buffer " + std::to_string(h));
  return it->second.get();
}

status backend_ops::write(device_handle h, std::uint64_t offset,
                          const void* src, std::uint64_t bytes) {
  auto b = find(h);
  if (!b)
    return b.err();
  return dev_.write(**b, offset, src, bytes);
}

status backend_ops::read(device_handle h, std::uint64_t offset, void* dst,
                         std::uint64_t bytes) {
  auto b = find(h);
  if (!b)
    return b.err();
  return dev_.read(**b, offset, dst, bytes);
}

status backend_ops::copy(device_handle src, std::uint64_t src_offset,
                         device_handle dst, std::uint64_t dst_offset,
                         std::uint64_t bytes) {
  auto from = find(src);
  if (!from)
    return from.err();
  auto to = find(dst);
  if (!to)
    return to.err();
  return dev_.copy(**from, src_offset, **to, dst_offset, bytes);
}

status backend_ops::resize(device_handle h, std::uint64_t bytes) {
  auto b = find(h);
  if (!b)
    return b.err();
  if (adopted_.count(h) != 0)
    return fail(errc::invalid_argument,
                "resize: buffer " + std::to_string(h)
                  + " is host memory read in place");
  if (bytes > std::numeric_limits<std::size_t>::max())
    return fail(errc::out_of_memory, "resize: too large");
  return dev_.resize(**b, static_cast<std::size_t>(bytes));
}

result<device_handle> backend_ops::adopt_host(const void* data,
                                              std::uint64_t bytes,
                                              std::shared_ptr<const void> keep) {
  if (bytes > std::numeric_limits<std::size_t>::max())
    return fail(errc::out_of_memory, "adopt_host: too large");
  auto b = dev_.adopt_host(data, static_cast<std::size_t>(bytes),
                           std::move(keep));
  if (!b)
    return b.err();
  auto h = next_++;
  bufs_.emplace(h, std::move(*b));
  adopted_.insert(h);
  return h;
}

namespace {

result<backend::mut_view> find_in(const void* ctx, device_handle h,
                                  std::uint64_t offset) {
  auto b = static_cast<const backend_ops*>(ctx)->find(h);
  if (!b)
    return b.err();
  return backend::mut_view{*b, static_cast<std::size_t>(offset), 0};
}

} // namespace

status backend_ops::run(const std::vector<device_op>& ops) {
  return run_device_ops(dev_, ops, &find_in, this);
}

status run_device_ops(backend::device& dev, const std::vector<device_op>& ops,
                      buffer_finder find, const void* ctx) {
  for (std::size_t i = 0; i < ops.size(); ++i) {
    auto s = run_device_op(dev, ops[i], find, ctx);
    if (!s)
      return fail(s.err().code, std::string{to_string(ops[i].kind)} + " (op "
                                  + std::to_string(i) + "): "
                                  + s.err().message);
  }
  return {};
}

status run_device_op(backend::device& dev, const device_op& op,
                     buffer_finder find, const void* ctx) {
  // More operands than any operation takes: refused, named, by the table
  // (backend::run checks the counts of everything else).
  if (op.inputs.size() > backend::max_op_inputs
      || op.dims.size() > backend::max_op_dims
      || op.scalars.size() > backend::max_op_scalars)
    return backend::check_counts(op.kind, op.inputs.size(), op.dims.size(),
                                 op.scalars.size());
  backend::op_call call;
  call.kind = op.kind;
  call.n_inputs = op.inputs.size();
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    auto v = find(ctx, op.inputs[i].buf, op.inputs[i].offset);
    if (!v)
      return v.err();
    call.inputs[i] = {v->buf, v->offset, v->limit};
  }
  auto out = find(ctx, op.output.buf, op.output.offset);
  if (!out)
    return out.err();
  call.output = *out;
  call.n_dims = op.dims.size();
  std::copy(op.dims.begin(), op.dims.end(), call.dims.begin());
  call.n_scalars = op.scalars.size();
  std::copy(op.scalars.begin(), op.scalars.end(), call.scalars.begin());
  return backend::run(dev, call);
}

status backend_ops::synchronize() {
  return dev_.synchronize();
}

std::string backend_ops::where() const {
  return dev_.properties().id;
}

bool backend_ops::runs_weights(backend::weight_type t) const {
  return dev_.runs_weights(t);
}

backend::weight_type backend_ops::preferred_weights(backend::weight_type t,
                                                    std::uint64_t rows,
                                                    std::uint64_t cols) const {
  return dev_.preferred_weights(t, static_cast<std::size_t>(rows),
                                static_cast<std::size_t>(cols));
}

bool backend_ops::resizes() const {
  return dev_.resizes();
}

bool backend_ops::reads_kv_blocks() const {
  return dev_.reads_kv_blocks();
}

bool backend_ops::paged_rows() const {
  return dev_.runs_paged_rows();
}

// -- device_stage --------------------------------------------------------------

namespace {

/// The device layer's encoding of weights of type t (every weight format
/// has one; a tensor_type is a GGUF id).
result<backend::weight_type> weight_type_of(tensor_type t) {
  auto w = backend::weight_type_of_ggml(static_cast<std::uint32_t>(t));
  if (!w)
    return fail(errc::unsupported, std::string{"weights of type "}
                                     + to_string(t)
                                     + " have no device operation");
  return *w;
}

device_operand at(device_handle h, std::uint64_t offset = 0) {
  return {h, offset};
}

/// Rows of ones a batched forward copies K and V rows into the caches
/// with (device `mul` by one); longer copies go in pieces.
constexpr std::uint64_t ones_rows = 16;

/// Floats of each scratch buffer for T rows, in create()'s order: io
/// (activations, then T int32 positions), cur, q, att, tmp, gate, up, the
/// ones of the K/V copies into an f32 cache (none for f16: to_f16 writes
/// its rows). New K and V rows wait in gate and up (free until the
/// feed-forward part) before they go to their caches (every row for an
/// f16 cache, a batch's for f32): every model has n_ff >= n_embd_kv
/// (create() checks).
std::array<std::uint64_t, 8> scratch_floats(const llama_hparams& hp,
                                            std::uint64_t T,
                                            backend::kv_type kv_type) {
  const std::uint64_t e = hp.n_embd, nq = hp.n_embd_q(), ff = hp.n_ff,
                      kv = hp.n_embd_kv();
  const std::uint64_t ones
    = kv_type == backend::kv_type::f32 ? std::min(T, ones_rows) * kv : 0;
  return {T * (e + hp.n_rot), T * e, T * nq, T * nq, T * e, T * ff, T * ff,
          ones};
}

/// Bytes of the block tables a paged stage's step writes, allocated with
/// its scratch: one int32 per block of a training context (4096 when the
/// file says none) for each of the most sequences a step carries
/// (batch_sequences_for's cap, 32, within max_tokens). A step that needs
/// more (a context past the training one) grows the buffer.
std::uint64_t table_bytes(const llama_hparams& hp,
                          const device_stage_options& o) {
  if (o.kv_block_positions == 0)
    return 0;
  const std::uint64_t ctx = hp.n_ctx_train != 0 ? hp.n_ctx_train : 4096;
  const std::uint64_t seqs = std::min<std::uint64_t>(o.max_tokens, 32);
  return seqs * ((ctx + o.kv_block_positions - 1) / o.kv_block_positions)
         * 4;
}

/// Bytes of the logits buffer of the last stage.
std::uint64_t logits_buffer_bytes(const llama_hparams& hp,
                                  const device_stage_options& o) {
  return std::uint64_t{o.max_logit_rows} * hp.n_vocab * 4;
}

/// Whether even a device without kernels for ggml's other formats takes
/// matrices of type t as they are stored (f32, f16, q8_0: device_ops'
/// default); such a device gets the rest dequantized to F16 on upload.
bool every_device_runs(tensor_type t) {
  return t == tensor_type::f32 || t == tensor_type::f16
         || t == tensor_type::q8_0;
}

/// The bytes of m on a device that runs every format as stored (`stored`)
/// or only f32, f16 and q8_0.
std::uint64_t matrix_bytes(const ops::matrix_view& m, bool stored) {
  const tensor_type t =
    stored || every_device_runs(m.type) ? m.type : tensor_type::f16;
  return row_bytes(t, m.cols) * m.rows;
}

} // namespace

std::uint32_t batch_tokens_for(std::uint32_t n_embd,
                               std::uint64_t chunk_bytes) {
  auto per_token = std::uint64_t{n_embd} * sizeof(float);
  auto n = chunk_bytes / (per_token == 0 ? 1 : per_token);
  return static_cast<std::uint32_t>(n == 0 ? 1 : (n > 512 ? 512 : n));
}

std::uint32_t batch_sequences_for(std::uint32_t n_embd,
                                  std::uint32_t n_vocab,
                                  std::uint64_t chunk_bytes,
                                  std::uint32_t top_k) {
  const std::uint64_t row =
    top_k == 0 ? std::uint64_t{n_vocab} * sizeof(float)
               : std::uint64_t{top_k} * (sizeof(float) + sizeof(std::int32_t));
  std::uint64_t n = chunk_bytes / (row == 0 ? 1 : row);
  n = std::min<std::uint64_t>({n, batch_tokens_for(n_embd, chunk_bytes),
                               32});
  return static_cast<std::uint32_t>(n == 0 ? 1 : n);
}

device_stage_options shard_stage_options(const llama_hparams& hp) {
  device_stage_options o;
  o.max_tokens = batch_tokens_for(hp.n_embd);
  o.max_logit_rows = batch_sequences_for(hp.n_embd, hp.n_vocab,
                                         default_upload_chunk_bytes, 1);
  return o;
}

stage_memory device_stage_memory(const llama_model& m, std::uint32_t first,
                                 std::uint32_t last,
                                 const device_stage_options& o) {
  const auto& hp = m.hparams();
  if (first >= last || last > hp.n_layer)
    throw model_error("stage memory: layer range [" + std::to_string(first)
                      + ", " + std::to_string(last) + ") is not inside [0, "
                      + std::to_string(hp.n_layer) + ")");
  const std::uint64_t e = hp.n_embd;
  stage_memory r;
  for (std::uint32_t l = first; l < last; ++l) {
    const auto& L = m.layer(l);
    r.layer_weight_bytes += 2 * e * 4; // attn_norm, ffn_norm
    for (const auto* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up,
                          &L.down})
      r.layer_weight_bytes += matrix_bytes(*w, o.stored_weights);
    if (L.bq)
      r.layer_weight_bytes += std::uint64_t{hp.n_embd_q() + 2 * hp.n_embd_kv()}
                              * 4;
    if (L.q_norm)
      r.layer_weight_bytes += 2 * std::uint64_t{hp.head_dim} * 4;
  }
  const bool is_last = last == hp.n_layer;
  if (is_last) {
    r.head_bytes = e * 4 + matrix_bytes(m.output(), o.stored_weights);
    r.logits_bytes = logits_buffer_bytes(hp, o);
  }
  for (auto f : scratch_floats(hp, o.max_tokens, o.kv))
    r.scratch_bytes += f * 4;
  r.scratch_bytes += table_bytes(hp, o);
  r.kv_bytes_per_token = 2 * std::uint64_t{last - first}
                         * backend::kv_bytes_of(o.kv, hp.n_embd_kv());
  return r;
}

device_stage::device_stage(std::shared_ptr<const llama_model> model,
                           std::uint32_t first, std::uint32_t last,
                           device_ops& ops, device_stage_options opts)
  : model_(std::move(model)),
    first_(first),
    last_(last),
    ops_(ops),
    opts_(opts),
    block_positions_(opts.kv_block_positions != 0 && ops.reads_kv_blocks()
                       ? opts.kv_block_positions
                       : 0) {
}

result<std::unique_ptr<device_stage>>
device_stage::create(std::shared_ptr<const llama_model> model,
                     std::uint32_t first, std::uint32_t last,
                     device_ops& ops, device_stage_options opts) {
  if (!model)
    return fail(errc::invalid_argument, "device stage: no model");
  auto n_layer = model->hparams().n_layer;
  if (first >= last || last > n_layer)
    return fail(errc::invalid_argument,
                "device stage: layer range [" + std::to_string(first) + ", "
                  + std::to_string(last) + ") is not inside [0, "
                  + std::to_string(n_layer) + ")");
  if (model->hparams().n_ff < model->hparams().n_embd_kv())
    return fail(errc::unsupported,
                "device stage: a feed-forward width below the K/V width ("
                  + std::to_string(model->hparams().n_ff) + " < "
                  + std::to_string(model->hparams().n_embd_kv())
                  + ") leaves no room for a batch's K and V rows");
  if (!backend::kv_holds_heads(opts.kv, model->hparams().head_dim))
    return fail(errc::unsupported,
                "device stage: a q8_0 KV cache needs a head width that is a "
                "multiple of 32 (whole Q8_0 blocks); this model's is "
                  + std::to_string(model->hparams().head_dim));
  if (opts.max_tokens == 0 || opts.max_tokens > (1u << 16)
      || opts.max_logit_rows == 0 || opts.max_logit_rows > opts.max_tokens
      || opts.upload_chunk_bytes < 64 || opts.max_ops_per_run == 0)
    return fail(errc::invalid_argument, "device stage: bad options");
  if (const auto B = opts.kv_block_positions;
      B > 4096 || (B & (B - 1)) != 0)
    return fail(errc::invalid_argument,
                "device stage: kv_block_positions " + std::to_string(B)
                  + " is not 0 or a power of two up to 4096");
  std::unique_ptr<device_stage> st{
    new device_stage(std::move(model), first, last, ops, opts)};
  auto s = st->upload_all();
  if (!s)
    return fail(s.err().code, "device stage [" + std::to_string(first) + ", "
                                + std::to_string(last) + ") on "
                                + ops.where() + ": " + s.err().message);
  return st;
}

device_stage::~device_stage() {
  for (auto& c : caches_) {
    if (c.second.k == 0)
      continue; // paged: its blocks are the pool's
    (void) ops_.free(c.second.k);
    (void) ops_.free(c.second.v);
  }
  for (auto h : {pool_.k, pool_.v, tables_})
    if (h != 0)
      (void) ops_.free(h);
  for (auto h : owned_)
    (void) ops_.free(h);
}

std::uint64_t device_stage::footprint() const {
  std::uint64_t sum = 0;
  for (auto h : owned_)
    sum += ops_.footprint(h);
  for (auto& c : caches_)
    if (c.second.k != 0)
      sum += ops_.footprint(c.second.k) + ops_.footprint(c.second.v);
  for (auto h : {pool_.k, pool_.v, tables_})
    if (h != 0)
      sum += ops_.footprint(h);
  return sum;
}

result<device_handle> device_stage::alloc(std::uint64_t bytes) {
  auto h = ops_.allocate(bytes);
  if (!h)
    return h.err();
  owned_.push_back(*h);
  return *h;
}

result<device_handle> device_stage::upload(const void* data,
                                           std::uint64_t bytes,
                                           bool may_adopt) {
  if (opts_.weights_in_place && may_adopt) {
    // The model (its mapping) outlives every buffer of this stage.
    auto a = ops_.adopt_host(data, bytes, model_);
    if (a) {
      owned_.push_back(*a);
      weight_bytes_ += bytes;
      in_place_bytes_ += bytes;
      return *a;
    }
    if (a.err().code != errc::unsupported)
      return a.err();
  }
  auto h = alloc(bytes);
  if (!h)
    return h.err();
  auto* p = static_cast<const std::uint8_t*>(data);
  for (std::uint64_t done = 0; done < bytes;) {
    auto n = std::min(opts_.upload_chunk_bytes, bytes - done);
    EXO_TRY(ops_.write(*h, done, p + done, n));
    done += n;
  }
  weight_bytes_ += bytes;
  return *h;
}

result<device_stage::matrix>
device_stage::upload_matrix(const ops::matrix_view& m) {
  matrix out;
  out.rows = m.rows;
  out.cols = m.cols;
  auto wt = weight_type_of(m.type);
  if (!wt)
    return wt.err();
  if (!ops_.runs_weights(*wt)) {
    // No kernel for this format on the device (every backend of exo has
    // them; a device_ops may say otherwise): the weights go up dequantized
    // (ggml's to_float) and rounded to F16, and run as an F16 matrix. A
    // copy, never adopted in place.
    out.kind = op_kind::matmul_f16;
    const std::size_t rb = row_bytes(m.type, m.cols);
    const std::size_t hb = row_bytes(tensor_type::f16, m.cols);
    std::vector<std::uint8_t> half(hb * m.rows);
    std::vector<float> row(m.cols);
    for (std::size_t r = 0; r < m.rows; ++r) {
      dequantize(m.type, m.data + r * rb, row.data(), m.cols);
      quantize(tensor_type::f16, row.data(), half.data() + r * hb, m.cols);
    }
    auto h = upload(half.data(), half.size(), false);
    if (!h)
      return h.err();
    out.buf = *h;
    return out;
  }
  // A layout of the device's own (the cpu device's packed Q4_K): a packed
  // copy, the same results.
  if (const auto kept = ops_.preferred_weights(*wt, m.rows, m.cols);
      kept != *wt) {
    const std::size_t bytes = matrix_bytes(m, true);
    if (packing_.size() < bytes)
      packing_.resize(bytes);
    EXO_TRY(backend::pack_weights(*wt, kept, m.data, m.rows, m.cols,
                                  packing_.data()));
    auto h = upload(packing_.data(), bytes, false);
    if (!h)
      return h.err();
    out.kind = backend::weights_op(kept);
    out.buf = *h;
    return out;
  }
  // As stored: read in place where the device reads host memory.
  out.kind = backend::weights_op(*wt);
  auto h = upload(m.data, matrix_bytes(m, true));
  if (!h)
    return h.err();
  out.buf = *h;
  return out;
}

status device_stage::upload_all() {
  // upload_matrix's packing buffer lives while the weights go up.
  struct release {
    std::vector<std::uint8_t>& v;
    ~release() {
      std::vector<std::uint8_t>().swap(v);
    }
  } release_packing{packing_};
  auto& hp = model_->hparams();
  const std::uint64_t e = hp.n_embd;
  // Weights, layer by layer.
  for (std::uint32_t l = first_; l < last_; ++l) {
    auto& L = model_->layer(l);
    layer dl;
    auto an = upload(L.attn_norm, e * 4);
    if (!an)
      return an.err();
    dl.attn_norm = *an;
    auto fn = upload(L.ffn_norm, e * 4);
    if (!fn)
      return fn.err();
    dl.ffn_norm = *fn;
    std::pair<const ops::matrix_view*, matrix*> ms[] = {
      {&L.wq, &dl.wq},   {&L.wk, &dl.wk}, {&L.wv, &dl.wv},
      {&L.wo, &dl.wo},   {&L.gate, &dl.gate}, {&L.up, &dl.up},
      {&L.down, &dl.down}};
    for (auto& [src, dst] : ms) {
      auto m = upload_matrix(*src);
      if (!m)
        return fail(m.err().code, "layer " + std::to_string(l) + ": "
                                    + m.err().message);
      *dst = *m;
    }
    // Optional vectors of the architecture: biases (qwen2), Q/K norms
    // (qwen3).
    std::pair<const float*, std::pair<device_handle*, std::uint64_t>> vs[] = {
      {L.bq, {&dl.bq, hp.n_embd_q()}},
      {L.bk, {&dl.bk, hp.n_embd_kv()}},
      {L.bv, {&dl.bv, hp.n_embd_kv()}},
      {L.q_norm, {&dl.q_norm, hp.head_dim}},
      {L.k_norm, {&dl.k_norm, hp.head_dim}}};
    for (auto& [src, dst] : vs) {
      if (!src)
        continue;
      auto h = upload(src, dst.second * 4);
      if (!h)
        return h.err();
      *dst.first = *h;
    }
    layers_.push_back(dl);
  }
  if (is_last()) {
    auto h = upload(model_->output_norm(), e * 4);
    if (!h)
      return h.err();
    output_norm_ = *h;
    auto m = upload_matrix(model_->output());
    if (!m)
      return m.err();
    output_ = *m;
  }
  // Scratch for max_tokens rows (sizes shared with device_stage_memory).
  // io: activations, then the rows' rope angles.
  device_handle* scratch[] = {&io_, &cur_, &q_, &att_,
                              &tmp_, &g_,  &u_, &ones_};
  const auto floats = scratch_floats(hp, opts_.max_tokens, opts_.kv);
  for (std::size_t i = 0; i < floats.size(); ++i) {
    if (floats[i] == 0)
      continue; // (the ones of an f16 cache's stage)
    auto h = alloc(floats[i] * 4);
    if (!h)
      return h.err();
    *scratch[i] = *h;
  }
  ones_floats_ = floats.back(); // written by the first batched forward
  if (const auto tb = table_bytes(hp, opts_); tb > 0 && paged()) {
    // Not in owned_: a step that needs more replaces it.
    auto h = ops_.allocate(tb);
    if (!h)
      return h.err();
    tables_ = *h;
    tables_bytes_ = tb;
  }
  if (is_last()) {
    auto h = alloc(logits_buffer_bytes(hp, opts_));
    if (!h)
      return h.err();
    logits_ = *h;
  }
  return {};
}

result<cache_id> device_stage::new_cache(std::uint32_t n_ctx) {
  if (n_ctx == 0)
    return fail(errc::invalid_argument,
                "a KV cache needs a context of at least one token");
  cache c;
  c.capacity = n_ctx;
  if (paged()) {
    cap_blocks_ += blocks_of(c);
    if (auto st = take_blocks(c, 1); !st) {
      cap_blocks_ -= blocks_of(c);
      return st.err();
    }
  } else {
    EXO_TRY(grow(c, room_for(c, 1)));
  }
  auto id = next_cache_++;
  caches_.emplace(id, c);
  return id;
}

result<cache_id> device_stage::fork_cache(cache_id src, std::uint32_t n,
                                          std::uint32_t capacity) {
  auto found = find_cache(src);
  if (!found)
    return found.err();
  const cache from = **found;
  if (n > from.n_past)
    return fail(errc::invalid_argument,
                "cannot fork " + std::to_string(n) + " positions of KV cache "
                  + std::to_string(src) + ": it holds "
                  + std::to_string(from.n_past));
  cache c;
  c.capacity = capacity != 0 ? capacity : from.capacity;
  if (n > c.capacity)
    return fail(errc::invalid_argument,
                "cannot fork " + std::to_string(n) + " positions of KV cache "
                  + std::to_string(src) + " into a cache of "
                  + std::to_string(c.capacity));
  if (paged()) {
    // The source's blocks of positions [0, n), shared: a block either
    // writes later is copied first (own_blocks).
    const std::uint32_t B = block_positions_;
    c.table.assign(from.table.begin(), from.table.begin() + (n + B - 1) / B);
    for (auto b : c.table)
      ++pool_.refs[static_cast<std::size_t>(b)];
    cap_blocks_ += blocks_of(c);
    c.room = std::min<std::uint32_t>(
      static_cast<std::uint32_t>(c.table.size()) * B, c.capacity);
    c.bytes = c.table.size() * 2 * block_bytes();
    if (auto st = take_blocks(c, std::max<std::uint32_t>(n, 1)); !st) {
      release_blocks(c);
      cap_blocks_ -= blocks_of(c);
      return fail(st.err().code, "KV cache " + std::to_string(src)
                                   + " could not be forked: "
                                   + st.err().message);
    }
    c.n_past = n;
    auto id = next_cache_++;
    caches_.emplace(id, std::move(c));
    return id;
  }
  if (auto st = grow(c, room_for(c, std::max<std::uint32_t>(n, 1))); !st)
    return fail(st.err().code, "KV cache " + std::to_string(src)
                                 + " could not be forked: "
                                 + st.err().message);
  const std::uint64_t row =
    backend::kv_bytes_of(opts_.kv, model_->hparams().n_embd_kv());
  const std::uint64_t held = std::uint64_t{n} * row;
  for (std::uint64_t l = 0; held > 0 && l < last_ - first_; ++l)
    for (auto [a, b] : {std::pair{from.k, c.k}, std::pair{from.v, c.v}})
      if (auto st = ops_.copy(a, l * from.room * row, b, l * c.room * row, held);
          !st) {
        (void) ops_.free(c.k);
        (void) ops_.free(c.v);
        cache_bytes_ -= c.bytes;
        return st.err();
      }
  c.n_past = n;
  auto id = next_cache_++;
  caches_.emplace(id, c);
  return id;
}

std::uint32_t device_stage::room_for(const cache& c,
                                     std::uint64_t need) const {
  const std::uint64_t step = opts_.kv_grow_positions;
  if (step == 0)
    return c.capacity;
  std::uint64_t r = std::max<std::uint64_t>(need, 2ull * c.room);
  r = (r + step - 1) / step * step;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(r, c.capacity));
}

status device_stage::grow(cache& c, std::uint32_t room) {
  auto& hp = model_->hparams();
  const std::uint64_t row = backend::kv_bytes_of(opts_.kv, hp.n_embd_kv());
  const std::uint64_t layers = last_ - first_;
  const std::uint64_t bytes = layers * room * row;
  auto k = ops_.allocate(bytes);
  if (!k)
    return k.err();
  auto v = ops_.allocate(bytes);
  if (!v) {
    (void) ops_.free(*k);
    return v.err();
  }
  // Each layer's rows of the old buffers to the start of its range in the
  // new ones.
  const std::uint64_t held = std::uint64_t{c.n_past} * row;
  for (std::uint64_t l = 0; held > 0 && l < layers; ++l)
    for (auto [from, to] : {std::pair{c.k, *k}, std::pair{c.v, *v}}) {
      auto st = ops_.copy(from, l * c.room * row, to, l * room * row, held);
      if (!st) {
        (void) ops_.free(*k);
        (void) ops_.free(*v);
        return st;
      }
    }
  if (c.k) {
    (void) ops_.free(c.k);
    (void) ops_.free(c.v);
  }
  cache_bytes_ = cache_bytes_ - c.bytes + 2 * bytes;
  c.k = *k;
  c.v = *v;
  c.room = room;
  c.bytes = 2 * bytes;
  return {};
}

status device_stage::drop_cache(cache_id id) {
  auto it = caches_.find(id);
  if (it == caches_.end())
    return fail(errc::invalid_argument,
                "unknown KV cache " + std::to_string(id));
  if (it->second.k == 0) { // paged
    release_blocks(it->second);
    cap_blocks_ -= blocks_of(it->second);
    caches_.erase(it);
    trim_pool();
    return {};
  }
  auto s1 = ops_.free(it->second.k);
  auto s2 = ops_.free(it->second.v);
  cache_bytes_ -= it->second.bytes;
  caches_.erase(it);
  return !s1 ? s1 : s2;
}

result<const device_stage::cache*>
device_stage::find_cache(cache_id id) const {
  auto it = caches_.find(id);
  if (it == caches_.end())
    return fail(errc::invalid_argument,
                "unknown KV cache " + std::to_string(id));
  return &it->second;
}

result<device_stage::cache*> device_stage::find_cache(cache_id id) {
  auto c = static_cast<const device_stage&>(*this).find_cache(id);
  if (!c)
    return c.err();
  return const_cast<cache*>(*c);
}

result<std::uint32_t> device_stage::n_past(cache_id id) const {
  auto c = find_cache(id);
  if (!c)
    return c.err();
  return (*c)->n_past;
}

status device_stage::reserve(cache_id id, std::uint32_t positions) {
  auto found = find_cache(id);
  if (!found)
    return found.err();
  auto& c = **found;
  const std::uint32_t need = std::min(positions, c.capacity);
  if (need <= c.room)
    return {};
  if (auto st = paged() ? take_blocks(c, need) : grow(c, room_for(c, need));
      !st)
    return fail(st.err().code,
                "KV cache " + std::to_string(id) + " could not grow past "
                  + std::to_string(c.room) + " positions: "
                  + st.err().message);
  return {};
}

result<std::uint32_t> device_stage::room(cache_id id) const {
  auto c = find_cache(id);
  if (!c)
    return c.err();
  return (*c)->room;
}

result<std::uint32_t> device_stage::capacity(cache_id id) const {
  auto c = find_cache(id);
  if (!c)
    return c.err();
  return (*c)->capacity;
}

status device_stage::embed(const std::int32_t* tokens, std::size_t n,
                           float* x) const {
  if (!is_first())
    return fail(errc::invalid_argument,
                "embed called on a stage that does not start at layer 0");
  auto& hp = model_->hparams();
  auto& w = model_->token_embd();
  const std::size_t rb = row_bytes(w.type, w.cols);
  for (std::size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || static_cast<std::uint32_t>(tokens[i]) >= hp.n_vocab)
      return fail(errc::invalid_argument,
                  "token id " + std::to_string(tokens[i])
                    + " is outside the vocabulary of "
                    + std::to_string(hp.n_vocab));
    dequantize(w.type, w.data + static_cast<std::size_t>(tokens[i]) * rb,
               x + i * hp.n_embd, hp.n_embd);
  }
  return {};
}

status device_stage::run_batched(const std::vector<device_op>& ops) {
  const auto t0 = std::chrono::steady_clock::now();
  status st;
  if (ops.size() <= opts_.max_ops_per_run) {
    st = ops_.run(ops);
  } else {
    for (std::size_t i = 0; i < ops.size() && st.ok();
         i += opts_.max_ops_per_run) {
      auto end = std::min(ops.size(), i + opts_.max_ops_per_run);
      st = ops_.run(
        std::vector<device_op>(ops.begin() + i, ops.begin() + end));
    }
  }
  submit_seconds_ += std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
  EXO_TRY(st);
  ops_run_ += ops.size();
  return {};
}

status device_stage::forward(cache_id id, std::uint32_t pos, float* x,
                             std::size_t n, float* logits,
                             std::size_t logit_rows) {
  return forward(id, pos, x, n, logits, logit_rows, device_io{});
}

status device_stage::forward(cache_id id, std::uint32_t pos, float* x,
                             std::size_t n, float* logits,
                             std::size_t logit_rows, const device_io& dio) {
  if (n == 0 || n > opts_.max_tokens)
    return fail(errc::invalid_argument,
                "a forward needs 1 to " + std::to_string(opts_.max_tokens)
                  + " tokens, not " + std::to_string(n));
  if (is_last()
      && (!logits || logit_rows == 0 || logit_rows > n
          || logit_rows > opts_.max_logit_rows))
    return fail(errc::invalid_argument,
                "the last stage needs room for 1 to "
                  + std::to_string(std::min<std::size_t>(
                    n, opts_.max_logit_rows))
                  + " rows of logits");
  one_.assign(1, segment{id, pos, static_cast<std::uint32_t>(n)});
  return run_forward(one_, x, logits, logit_rows, dio);
}

status device_stage::forward(const std::vector<segment>& segs, float* x,
                             float* logits) {
  return forward(segs, x, logits, device_io{});
}

status device_stage::forward(const std::vector<segment>& segs, float* x,
                             float* logits, const device_io& dio) {
  if (segs.empty())
    return fail(errc::invalid_argument, "a batched forward needs a segment");
  std::uint64_t rows = 0;
  for (auto& sg : segs)
    rows += sg.apart ? sg.n : 1;
  if (is_last() && (!logits || rows > opts_.max_logit_rows))
    return fail(errc::invalid_argument,
                "the last stage returns at most "
                  + std::to_string(opts_.max_logit_rows)
                  + " rows of logits at once, not " + std::to_string(rows)
                  + " (" + std::to_string(segs.size()) + " sequences)");
  return run_forward(segs, x, logits, 0, dio);
}

status device_stage::row_logits(std::uint64_t row, std::uint64_t rows,
                                float* logits) {
  if (!is_last())
    return fail(errc::invalid_argument,
                "only the last stage computes logits");
  if (!logits || rows == 0 || rows > opts_.max_logit_rows)
    return fail(errc::invalid_argument,
                "row logits: 1 to " + std::to_string(opts_.max_logit_rows)
                  + " rows at once, not " + std::to_string(rows));
  if (row > last_rows_ || rows > last_rows_ - row)
    return fail(errc::out_of_range,
                "row logits: rows " + std::to_string(row) + " to "
                  + std::to_string(row + rows) + " of a forward of "
                  + std::to_string(last_rows_) + " rows");
  auto& hp = model_->hparams();
  const std::uint64_t e = hp.n_embd;
  std::vector<device_op> ops(2);
  ops[0].kind = op_kind::rms_norm;
  ops[0].inputs = {at(io_, row * e * 4), at(output_norm_)};
  ops[0].output = at(cur_);
  ops[0].dims = {rows, e};
  ops[0].scalars = {hp.rms_eps};
  ops[1].kind = output_.kind;
  ops[1].inputs = {at(cur_), at(output_.buf)};
  ops[1].output = at(logits_);
  ops[1].dims = {rows, output_.rows, output_.cols};
  EXO_TRY(ops_.step(io_, 0, nullptr, 0, ops, logits_, 0, logits,
                    rows * hp.n_vocab * 4));
  ops_run_ += ops.size();
  return {};
}

result<std::uint64_t> device_stage::cache_bytes(cache_id id) const {
  auto c = find_cache(id);
  if (!c)
    return c.err();
  return (*c)->bytes;
}

kv_rotation device_stage::kv_rotations() const noexcept {
  return kv_rotation_of(opts_.kv, model_->hparams().head_dim);
}

std::uint64_t device_stage::kv_row_bytes() const noexcept {
  return backend::kv_bytes_of(opts_.kv, model_->hparams().n_embd_kv());
}

status device_stage::read_kv(cache_id id, std::uint32_t pos, std::uint32_t n,
                             std::uint8_t* out) {
  auto found = find_cache(id);
  if (!found)
    return found.err();
  auto& c = **found;
  if (n == 0 || std::uint64_t{pos} + n > c.n_past)
    return fail(errc::invalid_argument,
                "KV cache " + std::to_string(id) + " holds "
                  + std::to_string(c.n_past) + " positions: cannot read "
                  + std::to_string(n) + " from position "
                  + std::to_string(pos));
  return for_kv_runs(c, pos, n,
                     [&](device_handle h, std::uint64_t off, std::uint64_t at,
                         std::uint64_t bytes) {
                       return ops_.read(h, off, out + at, bytes);
                     });
}

template <class F>
status device_stage::for_kv_runs(const cache& c, std::uint32_t pos,
                                 std::uint32_t n, F&& f) const {
  const std::uint64_t row = kv_row_bytes(), run = std::uint64_t{n} * row;
  std::uint64_t at = 0;
  for (std::uint32_t l = 0; l < last_ - first_; ++l)
    for (int kv = 0; kv < 2; ++kv, at += run) {
      if (!paged()) {
        EXO_TRY(f(kv == 0 ? c.k : c.v, (l * c.room + pos) * row, at, run));
        continue;
      }
      const device_handle h = kv == 0 ? pool_.k : pool_.v;
      EXO_TRY(for_runs(c, l, pos, n,
                       [&](std::uint64_t off, std::uint32_t r0,
                           std::uint32_t rows) {
                         return f(h, off, at + r0 * row, rows * row);
                       }));
    }
  return {};
}

status device_stage::write_kv(cache_id id, std::uint32_t pos, std::uint32_t n,
                              const std::uint8_t* data, std::uint64_t bytes) {
  auto found = find_cache(id);
  if (!found)
    return found.err();
  auto& c = **found;
  if (n == 0 || pos != c.n_past || std::uint64_t{pos} + n > c.capacity)
    return fail(errc::invalid_argument,
                "KV cache " + std::to_string(id) + " holds "
                  + std::to_string(c.n_past) + " of at most "
                  + std::to_string(c.capacity) + " positions: cannot add "
                  + std::to_string(n) + " at position "
                  + std::to_string(pos));
  if (bytes != kv_bytes(n))
    return fail(errc::invalid_argument,
                "KV rows of " + std::to_string(n) + " positions for layers ["
                  + std::to_string(first_) + ", " + std::to_string(last_)
                  + ") are " + std::to_string(kv_bytes(n)) + " bytes, got "
                  + std::to_string(bytes));
  EXO_TRY(reserve(id, pos + n));
  if (paged())
    EXO_TRY(own_blocks(c, pos, n));
  EXO_TRY(for_kv_runs(c, pos, n,
                      [&](device_handle h, std::uint64_t off, std::uint64_t at,
                          std::uint64_t b) {
                        return ops_.write(h, off, data + at, b);
                      }));
  c.n_past = pos + n;
  return {};
}

status device_stage::truncate(cache_id id, std::uint32_t n) {
  auto c = find_cache(id);
  if (!c)
    return c.err();
  if (n > (*c)->n_past)
    return fail(errc::invalid_argument,
                "cannot truncate a KV cache of "
                  + std::to_string((*c)->n_past) + " positions to "
                  + std::to_string(n));
  (*c)->n_past = n;
  return {};
}

// -- the block pool of a paged stage -------------------------------------------

std::uint64_t device_stage::block_bytes() const noexcept {
  return std::uint64_t{last_ - first_} * block_positions_ * kv_row_bytes();
}

device_stage::kv_block_stats device_stage::kv_blocks() const noexcept {
  kv_block_stats st;
  st.total = pool_.blocks;
  for (auto r : pool_.refs) {
    st.used += r > 0 ? 1 : 0;
    st.shared += r > 1 ? 1 : 0;
  }
  st.copies = pool_.copies;
  st.grows = pool_.grows;
  st.trims = pool_.trims;
  return st;
}

status device_stage::check_kv_blocks() const {
  if (!paged())
    return {};
  std::vector<std::uint32_t> held(pool_.blocks, 0);
  for (auto& [id, c] : caches_) {
    const std::uint64_t B = block_positions_;
    if (c.table.size() * B < std::min<std::uint64_t>(c.n_past, c.capacity))
      return fail(errc::invalid_argument, "KV cache " + std::to_string(id) + " holds "
                                    + std::to_string(c.n_past)
                                    + " positions in "
                                    + std::to_string(c.table.size())
                                    + " blocks");
    for (auto b : c.table) {
      if (b < 0 || static_cast<std::uint32_t>(b) >= pool_.blocks)
        return fail(errc::invalid_argument, "KV cache " + std::to_string(id)
                                      + " names block " + std::to_string(b)
                                      + " of a pool of "
                                      + std::to_string(pool_.blocks));
      ++held[static_cast<std::size_t>(b)];
    }
  }
  std::vector<bool> is_free(pool_.blocks, false);
  for (auto b : pool_.free) {
    if (b < 0 || static_cast<std::uint32_t>(b) >= pool_.blocks
        || is_free[static_cast<std::size_t>(b)])
      return fail(errc::invalid_argument, "block " + std::to_string(b)
                                    + " is on the free list twice or is "
                                      "not the pool's");
    is_free[static_cast<std::size_t>(b)] = true;
  }
  std::uint64_t used = 0;
  for (std::uint32_t b = 0; b < pool_.blocks; ++b) {
    if (held[b] != pool_.refs[b])
      return fail(errc::invalid_argument, "block " + std::to_string(b) + " is held by "
                                    + std::to_string(held[b])
                                    + " caches, its count says "
                                    + std::to_string(pool_.refs[b]));
    if ((held[b] == 0) != is_free[b])
      return fail(errc::invalid_argument,
                  "block " + std::to_string(b)
                    + (held[b] == 0 ? " is held by no cache and not free"
                                    : " is held and on the free list"));
    used += held[b] > 0 ? 1 : 0;
  }
  if (cache_bytes_ != used * 2 * block_bytes())
    return fail(errc::invalid_argument, "the stage counts "
                                  + std::to_string(cache_bytes_)
                                  + " bytes of KV cache, its blocks "
                                  + std::to_string(used * 2 * block_bytes()));
  return {};
}

status device_stage::grow_pool(std::uint32_t blocks) {
  const std::uint64_t bb = block_bytes();
  if (pool_.k != 0 && ops_.resizes()) {
    // Each arena resized where it is (device_ops::resize): room for the
    // new blocks only, nothing copied. When V's cannot grow, K's goes
    // back to its old size: a failed growth leaves the device as it was.
    const std::uint32_t k_had = pool_.k_room;
    if (pool_.k_room < blocks) {
      EXO_TRY(ops_.resize(pool_.k, blocks * bb));
      pool_.k_room = blocks;
    }
    if (pool_.v_room < blocks) {
      if (auto st = ops_.resize(pool_.v, blocks * bb); !st) {
        if (k_had < blocks && ops_.resize(pool_.k, k_had * bb))
          pool_.k_room = k_had;
        return st;
      }
      pool_.v_room = blocks;
    }
  } else {
    // K's arena, then V's: each old arena goes as soon as its blocks are
    // copied, so a growth needs room for one new arena beside the pool,
    // not two. A growth that gets K's arena but not V's keeps the larger
    // K (the rows in its first blocks, as before) and the pool's count:
    // the next growth finds K grown already.
    for (auto [arena, room] : {std::pair{&pool_.k, &pool_.k_room},
                               std::pair{&pool_.v, &pool_.v_room}}) {
      if (*room >= blocks)
        continue;
      auto h = ops_.allocate(blocks * bb);
      if (!h)
        return h.err();
      if (pool_.blocks > 0)
        if (auto st = ops_.copy(*arena, 0, *h, 0, pool_.blocks * bb); !st) {
          (void) ops_.free(*h);
          return st;
        }
      if (*arena != 0)
        (void) ops_.free(*arena);
      *arena = *h;
      *room = blocks;
    }
  }
  // The blocks keep their numbers; the lowest new block is taken first.
  for (std::uint32_t b = blocks; b-- > pool_.blocks;)
    pool_.free.push_back(static_cast<std::int32_t>(b));
  pool_.refs.resize(blocks, 0);
  pool_.blocks = blocks;
  ++pool_.grows;
  return {};
}

status device_stage::grow_pool_by(std::uint64_t add) {
  // The most the device has room for, halving the step: a growth by one
  // block at a time would copy the whole pool for every new block once
  // the device has no room to double it (or, resizing in place, grow
  // by one block per 32-odd positions). Copying, a growth by `add` needs
  // room for t + 2 * add blocks at its peak (K's new arena of t + add
  // beside the pool, then, K's old one freed, V's), or t + add where
  // K's arena has grown already: one allocation of that size, freed at
  // once, says whether it fits before a step that does not fit grows K
  // alone. Resizing in place needs room for 2 * add blocks, and a
  // growth that fails leaves nothing grown: no probe. A step of one
  // block is tried as it is (nothing smaller would fit).
  const std::uint64_t bb = block_bytes();
  const bool in_place = pool_.k != 0 && ops_.resizes();
  for (;; add = (add + 1) / 2) {
    const std::uint64_t t = pool_.blocks;
    const auto blocks = static_cast<std::uint32_t>(t + add);
    if (add > 1 && !in_place) {
      const std::uint64_t peak =
        (pool_.k_room >= blocks ? t + add : t + 2 * add) * bb;
      auto probe = ops_.allocate(peak);
      if (!probe)
        continue;
      (void) ops_.free(*probe);
    }
    auto st = grow_pool(blocks);
    if (st || add == 1)
      return st;
  }
}

std::uint64_t device_stage::blocks_of(const cache& c) const noexcept {
  return (std::uint64_t{c.capacity} + block_positions_ - 1) / block_positions_;
}

result<std::int32_t> device_stage::new_block() {
  if (pool_.free.empty()) {
    // Doubling (at least 8 blocks), never past what the caches could ever
    // hold together (their contexts' blocks: so a stage holds no more
    // than placement counts for its sequences); when the device has no
    // room for that, the most it has room for (grow_pool_by).
    const std::uint64_t want = std::min<std::uint64_t>(
      std::max<std::uint64_t>(8, 2ull * pool_.blocks), cap_blocks_);
    EXO_TRY(grow_pool_by(std::max<std::uint64_t>(want, pool_.blocks + 1ull)
                         - pool_.blocks));
  }
  const std::int32_t b = pool_.free.back();
  pool_.free.pop_back();
  pool_.refs[static_cast<std::size_t>(b)] = 1;
  cache_bytes_ += 2 * block_bytes();
  return b;
}

void device_stage::release_blocks(cache& c) {
  for (auto b : c.table)
    if (--pool_.refs[static_cast<std::size_t>(b)] == 0) {
      pool_.free.push_back(b);
      cache_bytes_ -= 2 * block_bytes();
    }
  c.table.clear();
  c.room = 0;
  c.bytes = 0;
  if (cache_bytes_ == 0 && pool_.k != 0) {
    // No block held: the arenas go back to the device.
    (void) ops_.free(pool_.k);
    (void) ops_.free(pool_.v);
    pool_.k = pool_.v = 0;
    pool_.blocks = pool_.k_room = pool_.v_room = 0;
    pool_.refs.clear();
    pool_.free.clear();
  }
}

void device_stage::trim_pool() {
  const std::uint64_t bb = block_bytes();
  const std::uint64_t used = cache_bytes_ / (2 * bb);
  if (pool_.blocks <= 8 || used * 4 > pool_.blocks)
    return;
  // A quarter or less in use: the arenas become twice the held blocks
  // (at least 8), every held block below that, the tables following.
  const auto n = static_cast<std::uint32_t>(std::max<std::uint64_t>(8, 2 * used));
  std::vector<std::int32_t> to(pool_.blocks, -1);
  if (ops_.resizes()) {
    // In place: the held blocks past n move into free blocks below it,
    // then both arenas shrink to n blocks where they are.
    std::vector<std::int32_t> below;
    for (std::uint32_t b = n; b-- > 0;)
      if (pool_.refs[b] == 0)
        below.push_back(static_cast<std::int32_t>(b));
    for (std::uint32_t b = 0; b < pool_.blocks; ++b) {
      if (pool_.refs[b] == 0)
        continue;
      if (b < n) {
        to[b] = static_cast<std::int32_t>(b);
        continue;
      }
      const auto dst = static_cast<std::uint64_t>(below.back());
      for (auto arena : {pool_.k, pool_.v})
        if (!ops_.copy(arena, b * bb, arena, dst * bb, bb))
          return; // the tables still say where every row is
      to[b] = below.back();
      below.pop_back();
    }
    pool_.k_room = ops_.resize(pool_.k, n * bb) ? n : pool_.k_room;
    pool_.v_room = ops_.resize(pool_.v, n * bb) ? n : pool_.v_room;
  } else {
    auto k = ops_.allocate(n * bb);
    if (!k)
      return; // no room for new arenas: keep the old ones
    auto v = ops_.allocate(n * bb);
    if (!v) {
      (void) ops_.free(*k);
      return;
    }
    std::int32_t next = 0;
    for (std::uint32_t b = 0; b < pool_.blocks; ++b) {
      if (pool_.refs[b] == 0)
        continue;
      for (auto [from, dst] : {std::pair{pool_.k, *k}, std::pair{pool_.v, *v}})
        if (!ops_.copy(from, b * bb, dst, static_cast<std::uint64_t>(next) * bb,
                       bb)) {
          (void) ops_.free(*k);
          (void) ops_.free(*v);
          return;
        }
      to[b] = next++;
    }
    (void) ops_.free(pool_.k);
    (void) ops_.free(pool_.v);
    pool_.k = *k;
    pool_.v = *v;
    pool_.k_room = pool_.v_room = n;
  }
  for (auto& [id, c] : caches_)
    for (auto& e : c.table)
      e = to[static_cast<std::size_t>(e)];
  std::vector<std::uint32_t> refs(n, 0);
  for (std::uint32_t b = 0; b < pool_.blocks; ++b)
    if (to[b] >= 0)
      refs[static_cast<std::size_t>(to[b])] = pool_.refs[b];
  pool_.refs = std::move(refs);
  pool_.free.clear();
  // The lowest free block is taken first.
  for (std::uint32_t b = n; b-- > 0;)
    if (pool_.refs[b] == 0)
      pool_.free.push_back(static_cast<std::int32_t>(b));
  pool_.blocks = n;
  ++pool_.trims;
}

status device_stage::take_blocks(cache& c, std::uint32_t positions) {
  const std::uint32_t B = block_positions_;
  const std::size_t need
    = (std::min(positions, c.capacity) + std::size_t{B} - 1) / B;
  const std::size_t had = c.table.size();
  while (c.table.size() < need) {
    auto b = new_block();
    if (!b) {
      // Back as it was.
      for (std::size_t i = had; i < c.table.size(); ++i) {
        const auto x = c.table[i];
        pool_.refs[static_cast<std::size_t>(x)] = 0;
        pool_.free.push_back(x);
        cache_bytes_ -= 2 * block_bytes();
      }
      c.table.resize(had);
      return b.err();
    }
    c.table.push_back(*b);
  }
  c.room = std::min<std::uint32_t>(static_cast<std::uint32_t>(need) * B,
                                   c.capacity);
  c.bytes = c.table.size() * 2 * block_bytes();
  return {};
}

status device_stage::own_blocks(cache& c, std::uint32_t pos,
                                std::uint32_t n) {
  const std::uint32_t B = block_positions_;
  const std::uint64_t bb = block_bytes();
  for (std::size_t i = pos / B; n > 0 && i <= (pos + n - 1) / B
                                && i < c.table.size();
       ++i) {
    const auto b = c.table[i];
    if (pool_.refs[static_cast<std::size_t>(b)] <= 1)
      continue;
    // Copy on write: this cache's own copy of the shared block.
    auto nb = new_block();
    if (!nb)
      return nb.err();
    for (auto arena : {pool_.k, pool_.v})
      if (auto st = ops_.copy(arena, static_cast<std::uint64_t>(b) * bb,
                              arena, static_cast<std::uint64_t>(*nb) * bb,
                              bb);
          !st) {
        pool_.refs[static_cast<std::size_t>(*nb)] = 0;
        pool_.free.push_back(*nb);
        cache_bytes_ -= 2 * bb;
        return st;
      }
    --pool_.refs[static_cast<std::size_t>(b)];
    c.table[i] = *nb;
    ++pool_.copies;
  }
  return {};
}

template <class F>
status device_stage::for_runs(const cache& c, std::uint32_t l,
                              std::uint32_t pos, std::uint32_t n,
                              F&& f) const {
  const std::uint32_t B = block_positions_;
  const std::uint64_t row = kv_row_bytes();
  for (std::uint32_t done = 0; done < n;) {
    const std::uint32_t p = pos + done;
    const std::uint32_t rows = std::min(n - done, B - p % B);
    const auto b = static_cast<std::uint64_t>(c.table[p / B]);
    EXO_TRY(f(b * block_bytes() + (std::uint64_t{l} * B + p % B) * row, done,
              rows));
    done += rows;
  }
  return {};
}

status device_stage::run_forward(const std::vector<segment>& segs, float* x,
                                 float* logits, std::size_t logit_rows,
                                 const device_io& dio) {
  last_rows_ = 0;
  // Everything is checked before anything runs: all or nothing.
  std::uint64_t N = 0;
  std::vector<cache*> cs(segs.size());
  for (std::size_t s = 0; s < segs.size(); ++s) {
    auto& sg = segs[s];
    auto it = caches_.find(sg.cache);
    if (it == caches_.end())
      return fail(errc::invalid_argument,
                  "unknown KV cache " + std::to_string(sg.cache));
    auto& c = it->second;
    for (std::size_t t = 0; t < s; ++t)
      if (cs[t] == &c)
        return fail(errc::invalid_argument,
                    "KV cache " + std::to_string(sg.cache)
                      + " appears twice in one batch");
    cs[s] = &c;
    if (sg.n == 0) // (forward() checks logit_rows against n)
      return fail(errc::invalid_argument,
                  "a segment of a batch needs at least one token");
    if (sg.pos != c.n_past)
      return fail(errc::invalid_argument,
                  "step at position " + std::to_string(sg.pos)
                    + ", cache holds " + std::to_string(c.n_past));
    if (std::uint64_t{sg.pos} + sg.n > c.capacity)
      return fail(errc::out_of_range,
                  "context full: " + std::to_string(sg.pos) + " + "
                    + std::to_string(sg.n) + " tokens exceed the "
                    + std::to_string(c.capacity) + "-token KV cache");
    N += sg.n;
  }
  if (N > opts_.max_tokens)
    return fail(errc::invalid_argument,
                "a forward needs 1 to " + std::to_string(opts_.max_tokens)
                  + " tokens, not " + std::to_string(N));
  const bool x_from_device = dio.in.buf != 0;
  const bool x_to_device = dio.keep_out && !is_last();
  if (!x && (!x_from_device || (!is_last() && !x_to_device)))
    return fail(errc::invalid_argument, "no activations");
  // Checked: room for the new rows. A cache that is too small grows (its
  // rows copied; on failure it stays as it was and nothing runs).
  for (std::size_t s = 0; s < segs.size(); ++s)
    EXO_TRY(reserve(segs[s].cache, segs[s].pos + segs[s].n));
  // Paged: the blocks the new rows go to are each cache's own (copied on
  // write where shared), and each segment's block table goes to the
  // device with the step.
  // A decode batch (every segment one token) on a device that runs it as
  // one operation: two store_kv_rows (K and V) and one
  // attention_paged_rows a layer, whose tables hold each row's position
  // and then its block table, all padded to the longest (rows_table_len
  // blocks), instead of two conversions and one attention per segment.
  const bool rows_attention =
    paged() && segs.size() > 1 && ops_.paged_rows()
    && std::all_of(segs.begin(), segs.end(),
                   [](const segment& sg) { return sg.n == 1; });
  std::uint64_t rows_table_len = 0;
  std::vector<std::uint64_t> table_off(paged() ? segs.size() : 0);
  if (paged()) {
    table_staging_.clear();
    std::vector<std::size_t> nbs(segs.size());
    for (std::size_t s = 0; s < segs.size(); ++s) {
      EXO_TRY(own_blocks(*cs[s], segs[s].pos, segs[s].n));
      nbs[s] = (segs[s].pos + segs[s].n + block_positions_ - 1)
               / block_positions_;
      rows_table_len = std::max<std::uint64_t>(rows_table_len, nbs[s]);
    }
    for (std::size_t s = 0; s < segs.size(); ++s) {
      table_off[s] = table_staging_.size() * 4;
      if (rows_attention)
        table_staging_.push_back(static_cast<std::int32_t>(segs[s].pos));
      table_staging_.insert(table_staging_.end(), cs[s]->table.begin(),
                            cs[s]->table.begin()
                              + static_cast<std::ptrdiff_t>(nbs[s]));
      if (rows_attention) // never read: past the row's last block
        table_staging_.resize(table_staging_.size() + rows_table_len
                                - nbs[s],
                              0);
    }
    const std::uint64_t bytes = table_staging_.size() * 4;
    if (bytes > tables_bytes_) {
      const std::uint64_t want
        = std::max<std::uint64_t>({bytes, 2 * tables_bytes_, 4096});
      auto h = ops_.allocate(want);
      if (!h)
        return h.err();
      if (tables_ != 0)
        (void) ops_.free(tables_);
      tables_ = *h;
      tables_bytes_ = want;
    }
    EXO_TRY(ops_.write(tables_, 0, table_staging_.data(), bytes));
  }
  auto& hp = model_->hparams();
  const std::uint64_t e = hp.n_embd, nq = hp.n_embd_q(), nkv = hp.n_embd_kv(),
                      ff = hp.n_ff;
  // One write: N rows of activations (unless they are on the device
  // already), then the rope angles of the N rows, each at its own
  // sequence's position: computed here once with the host's function
  // (rope_freqs folded in), they serve every layer's Q and K, and every
  // device turns by the host's angles (rope_cached).
  const std::uint64_t x_bytes = N * e * 4, cs_off = x_bytes;
  const std::uint64_t skip = x_from_device ? x_bytes : 0;
  staging_.resize(x_bytes + N * hp.n_rot * 4 - skip);
  if (!x_from_device)
    std::memcpy(staging_.data(), x, x_bytes);
  {
    positions_.clear();
    for (auto& sg : segs)
      for (std::uint32_t t = 0; t < sg.n; ++t)
        positions_.push_back(static_cast<std::int32_t>(sg.pos + t));
    backend::rope_dims rd;
    rd.rows = N;
    rd.n_rot = hp.n_rot;
    rd.freq_base = hp.rope_freq_base;
    rope_staging_.resize(N * hp.n_rot);
    backend::host::rope_cache(rope_staging_.data(), positions_.data(),
                              model_->rope_freqs(), rd);
    std::memcpy(staging_.data() + cs_off - skip, rope_staging_.data(),
                rope_staging_.size() * 4);
  }
  // The residual stream lives in io_; activations from the device are
  // read where they are by the first layer, which writes io_.
  const device_operand x_in = x_from_device ? dio.in : at(io_);
  // An f32 cache and one sequence: its K and V land in its cache rows
  // directly. Several: in g_/u_ first (one product for all rows), then
  // each segment's rows go to its cache. An f16 or q8_0 cache: always in
  // g_/u_ first, then to_f16 / to_q8_0 writes each segment's rows to its
  // cache.
  const bool batched = segs.size() > 1;
  const bool converted = opts_.kv != backend::kv_type::f32;
  const op_kind to_cache = opts_.kv == backend::kv_type::q8_0
                             ? op_kind::to_q8_0
                             : op_kind::to_f16;
  const op_kind attention_kind
    = opts_.kv == backend::kv_type::q8_0  ? op_kind::attention_q8_0
      : opts_.kv == backend::kv_type::f16 ? op_kind::attention_f16
                                          : op_kind::attention;
  // A paged cache: always staged (rows go to their blocks in runs).
  const bool staged = batched || converted || paged();
  const std::uint64_t row_bytes = kv_row_bytes();
  // A quantized cache: llama.cpp rotates Q and K (Walsh-Hadamard, per head
  // of `rot_k`), V and the attention output (per 64 values) so that the
  // 8-bit blocks lose less (its attn_rot; none unless the head width is a
  // multiple of 64).
  const kv_rotation rot = kv_rotations();
  const std::uint64_t rot_k = rot.k, rot_v = rot.v;
  // Rows that must each get a one-token forward's bits: a batch's
  // one-token segments and every row of an apart segment.
  auto alone = [&](const segment& sg) { return sg.n == 1 || sg.apart; };
  const bool any_apart = std::any_of(segs.begin(), segs.end(),
                                     [](const segment& sg) {
                                       return sg.apart;
                                     });
  if (staged && !converted && ones_floats_ > 0) {
    const std::vector<float> ones(ones_floats_, 1.0f);
    const auto* b = reinterpret_cast<const std::uint8_t*>(ones.data());
    for (std::uint64_t done = 0; done < ones.size() * 4;) {
      auto n = std::min<std::uint64_t>(opts_.upload_chunk_bytes,
                                       ones.size() * 4 - done);
      EXO_TRY(ops_.write(ones_, done, b + done, n));
      done += n;
    }
    ones_floats_ = 0;
  }

  const float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  // The operations go into the stage's own list, slot by slot: a step
  // has the same ~170 operations as the last one, so their vectors keep
  // their storage and a step allocates nothing here.
  auto& ops = op_list_;
  std::size_t n_ops = 0;
  auto add = [&](op_kind kind, std::initializer_list<device_operand> in,
                 device_operand out, std::initializer_list<std::uint64_t> dims,
                 std::initializer_list<float> scalars) -> device_op& {
    if (n_ops == ops.size())
      ops.emplace_back();
    auto& op = ops[n_ops++];
    op.kind = kind;
    op.inputs.assign(in);
    op.output = out;
    op.dims.assign(dims);
    op.scalars.assign(scalars);
    return op;
  };
  // A product over the rows of the step. Several sequences: each gets
  // the arithmetic it gets alone (a device may sum a product of several
  // rows in another order than one of a single row): a run of one-token
  // segments is one product with its rows apart (matmul_rows_*), a longer
  // segment a product of its own rows, as alone.
  auto mm = [&](const matrix& w, device_operand a, device_operand out) {
    const op_kind apart = backend::rows_apart_op(w.kind);
    if ((!batched && !any_apart) || apart == w.kind) {
      add(w.kind, {a, at(w.buf)}, out, {N, w.rows, w.cols}, {});
      return;
    }
    std::uint64_t r0 = 0;
    for (std::size_t s = 0; s < segs.size();) {
      std::size_t e = s + 1;
      if (alone(segs[s]))
        while (e < segs.size() && alone(segs[e]))
          ++e;
      std::uint64_t rows = 0;
      for (std::size_t i = s; i < e; ++i)
        rows += segs[i].n;
      add(alone(segs[s]) ? apart : w.kind,
          {at(a.buf, a.offset + r0 * w.cols * 4), at(w.buf)},
          at(out.buf, out.offset + r0 * w.rows * 4), {rows, w.rows, w.cols},
          {});
      r0 += rows;
      s = e;
    }
  };
  auto rope = [&](device_operand xv, std::uint64_t heads) {
    add(op_kind::rope_cached, {at(io_, cs_off)}, xv,
        {N, heads, hp.head_dim, hp.n_rot, hp.rope_neox() ? 1u : 0u}, {});
  };
  for (std::uint32_t l = first_; l < last_; ++l) {
    auto& L = layers_[l - first_];
    const std::uint64_t kv0 = (l - first_) * row_bytes;
    // Layer l's K/V of a cache with room for R positions start at kv0 * R.
    auto layer_kv = [&](const cache& c) { return kv0 * c.room; };
    auto new_row = [&](const cache& c, std::uint32_t pos) {
      return layer_kv(c) + std::uint64_t{pos} * row_bytes;
    };
    const device_operand k_out =
      staged ? at(g_) : at(cs[0]->k, new_row(*cs[0], segs[0].pos));
    const device_operand v_out =
      staged ? at(u_) : at(cs[0]->v, new_row(*cs[0], segs[0].pos));
    auto row_of = [](device_operand o, std::uint64_t off) {
      return at(o.buf, o.offset + off);
    };
    const device_operand resid = l == first_ ? x_in : at(io_);
    add(op_kind::rms_norm, {resid, at(L.attn_norm)}, at(cur_), {N, e},
        {hp.rms_eps});
    mm(L.wq, at(cur_), at(q_));
    mm(L.wk, at(cur_), k_out);
    mm(L.wv, at(cur_), v_out);
    if (L.bq) {
      // The bias of each row: the device layer's add, row by row (no
      // broadcasting operation; decode steps have one row).
      for (std::uint64_t t = 0; t < N; ++t) {
        add(op_kind::add, {at(q_, t * nq * 4), at(L.bq)}, at(q_, t * nq * 4),
            {nq}, {});
        const auto kr = row_of(k_out, t * nkv * 4);
        const auto vr = row_of(v_out, t * nkv * 4);
        add(op_kind::add, {kr, at(L.bk)}, kr, {nkv}, {});
        add(op_kind::add, {vr, at(L.bv)}, vr, {nkv}, {});
      }
    }
    if (L.q_norm) {
      // Every head of every row is a row of head_dim for rms_norm.
      add(op_kind::rms_norm, {at(q_), at(L.q_norm)}, at(q_),
          {N * hp.n_head, hp.head_dim}, {hp.rms_eps});
      add(op_kind::rms_norm, {k_out, at(L.k_norm)}, k_out,
          {N * hp.n_head_kv, hp.head_dim}, {hp.rms_eps});
    }
    rope(at(q_), hp.n_head);
    rope(k_out, hp.n_head_kv);
    if (rot_k > 0) {
      add(op_kind::hadamard, {at(q_)}, at(q_), {N * nq, rot_k}, {});
      add(op_kind::hadamard, {k_out}, k_out, {N * nkv, rot_k}, {});
    }
    if (rot_v > 0)
      add(op_kind::hadamard, {v_out}, v_out, {N * nkv, rot_v}, {});
    // Each segment's new rows into its cache: an f16 cache's rounded to
    // half (to_f16), a q8_0 cache's quantized (to_q8_0, whole rows of
    // blocks), an f32 batch's times one (bit for bit; in pieces of
    // ones_rows rows). Then each segment's attention.
    // Rows [t, t + rows) of segment s (its first row at r0 of the step)
    // to where its cache keeps them: an f16/q8_0 cache's converted, an
    // f32 one's times one, in pieces of ones_rows.
    auto to_cache_rows = [&](std::uint64_t r0, device_operand k_dst,
                             device_operand v_dst, std::uint64_t rows) {
      const std::uint64_t src = r0 * nkv * 4;
      if (converted) {
        add(to_cache, {at(g_, src)}, k_dst, {rows * nkv}, {});
        add(to_cache, {at(u_, src)}, v_dst, {rows * nkv}, {});
        return;
      }
      for (std::uint64_t t = 0; t < rows; t += ones_rows) {
        const std::uint64_t m = std::min<std::uint64_t>(ones_rows, rows - t);
        const std::uint64_t step = t * row_bytes, from = src + t * nkv * 4;
        add(op_kind::mul, {at(g_, from), at(ones_)},
            at(k_dst.buf, k_dst.offset + step), {m * nkv}, {});
        add(op_kind::mul, {at(u_, from), at(ones_)},
            at(v_dst.buf, v_dst.offset + step), {m * nkv}, {});
      }
    };
    // A paged cache's layer l: its rows of block 0 (the tables name the
    // blocks), blocks block_stride values apart.
    const std::uint64_t first_row = std::uint64_t{l - first_}
                                    * block_positions_ * row_bytes;
    const std::uint64_t block_stride = block_bytes()
                                       / backend::kv_block_bytes(opts_.kv)
                                       * backend::kv_block_values(opts_.kv);
    if (rows_attention) {
      // A decode batch: every sequence's new K and V row to its own slot,
      // one operation each (attention_paged_rows' tables).
      add(op_kind::store_kv_rows, {at(g_), at(tables_)},
          at(pool_.k, first_row),
          {segs.size(), nkv, nkv, static_cast<std::uint64_t>(opts_.kv),
           block_positions_, block_stride, rows_table_len},
          {});
      add(op_kind::store_kv_rows, {at(u_), at(tables_)},
          at(pool_.v, first_row),
          {segs.size(), nkv, nkv, static_cast<std::uint64_t>(opts_.kv),
           block_positions_, block_stride, rows_table_len},
          {});
    }
    std::uint64_t r0 = 0;
    for (std::size_t s = 0; staged && !rows_attention && s < segs.size();
         ++s) {
      auto& sg = segs[s];
      auto& c = *cs[s];
      if (paged())
        (void) for_runs(c, l - first_, sg.pos, sg.n,
                        [&](std::uint64_t off, std::uint32_t t,
                            std::uint32_t rows) -> status {
                          to_cache_rows(r0 + t, at(pool_.k, off),
                                        at(pool_.v, off), rows);
                          return {};
                        });
      else
        to_cache_rows(r0, at(c.k, new_row(c, sg.pos)),
                      at(c.v, new_row(c, sg.pos)), sg.n);
      r0 += sg.n;
    }
    r0 = 0;
    if (rows_attention)
      add(op_kind::attention_paged_rows,
          {at(q_), at(pool_.k, first_row), at(pool_.v, first_row),
           at(tables_)},
          at(att_),
          {segs.size(), hp.n_head, hp.n_head_kv, hp.head_dim, nkv,
           static_cast<std::uint64_t>(opts_.kv), block_positions_,
           block_stride, rows_table_len},
          {scale});
    for (std::size_t s = 0; !rows_attention && s < segs.size(); ++s) {
      auto& sg = segs[s];
      auto& c = *cs[s];
      if (paged()) {
        add(op_kind::attention_paged,
            {at(q_, r0 * nq * 4), at(pool_.k, first_row),
             at(pool_.v, first_row), at(tables_, table_off[s])},
            at(att_, r0 * nq * 4),
            {sg.n, sg.pos, hp.n_head, hp.n_head_kv, hp.head_dim, nkv,
             static_cast<std::uint64_t>(opts_.kv), block_positions_,
             block_stride},
            {scale});
      } else {
        add(attention_kind,
            {at(q_, r0 * nq * 4), at(c.k, layer_kv(c)), at(c.v, layer_kv(c))},
            at(att_, r0 * nq * 4),
            {sg.n, sg.pos, hp.n_head, hp.n_head_kv, hp.head_dim, nkv},
            {scale});
      }
      r0 += sg.n;
    }
    if (rot_v > 0)
      add(op_kind::hadamard, {at(att_)}, at(att_), {N * nq, rot_v}, {});
    mm(L.wo, at(att_), at(tmp_));
    add(op_kind::add, {resid, at(tmp_)}, at(io_), {N * e}, {});
    add(op_kind::rms_norm, {at(io_), at(L.ffn_norm)}, at(cur_), {N, e},
        {hp.rms_eps});
    mm(L.gate, at(cur_), at(g_));
    mm(L.up, at(cur_), at(u_));
    add(op_kind::silu_mul, {at(g_), at(u_)}, at(g_), {N * ff}, {});
    mm(L.down, at(g_), at(tmp_));
    add(op_kind::add, {at(io_), at(tmp_)}, at(io_), {N * e}, {});
  }
  // Rows of logits of each segment: logit_rows, or (0) one, every row of
  // an apart segment.
  auto rows_out = [&](const segment& sg) -> std::uint64_t {
    return logit_rows != 0 ? logit_rows : sg.apart ? sg.n : 1;
  };
  std::uint64_t out_rows = 0;
  for (auto& sg : segs)
    out_rows += rows_out(sg);
  if (is_last()) {
    // The last rows of each segment, normed into consecutive rows of
    // cur_, then one product with the output head. Rows that follow each
    // other in io_ (all of a decode batch's) are one norm: each row's bits
    // are its own.
    std::uint64_t end = 0, done = 0, run_from = 0, run_rows = 0;
    auto norm_run = [&] {
      if (run_rows > 0)
        add(op_kind::rms_norm, {at(io_, run_from * e * 4), at(output_norm_)},
            at(cur_, (done - run_rows) * e * 4), {run_rows, e},
            {hp.rms_eps});
    };
    for (std::size_t s = 0; s < segs.size(); ++s) {
      const std::uint64_t R = rows_out(segs[s]);
      end += segs[s].n;
      if (run_rows > 0 && end - R != run_from + run_rows) {
        norm_run();
        run_rows = 0;
      }
      if (run_rows == 0)
        run_from = end - R;
      run_rows += R;
      done += R;
    }
    norm_run();
    // Rows of several sequences, or of an apart one: each on its own.
    add(batched || any_apart ? backend::rows_apart_op(output_.kind)
                             : output_.kind,
        {at(cur_), at(output_.buf)}, at(logits_),
        {out_rows, output_.rows, output_.cols}, {});
  }
  ops.resize(n_ops); // shrinks only when the step's shape changed
  // One write, the operations and one read: a single step request when
  // the operations fit one run.
  device_handle out = 0;
  void* dst = nullptr;
  std::uint64_t out_bytes = 0;
  if (is_last()) {
    out = logits_;
    dst = logits;
    out_bytes = out_rows * hp.n_vocab * 4;
  } else if (!x_to_device) {
    out = io_;
    dst = x;
    out_bytes = x_bytes;
  }
  if (ops.size() <= opts_.max_ops_per_run) {
    EXO_TRY(ops_.step(io_, skip, staging_.data(), staging_.size(), ops, out,
                      0, dst, out_bytes));
    ops_run_ += ops.size();
    submit_seconds_ += ops_.last_run_seconds();
  } else {
    EXO_TRY(ops_.write(io_, skip, staging_.data(), staging_.size()));
    EXO_TRY(run_batched(ops));
    if (out_bytes > 0)
      EXO_TRY(ops_.read(out, 0, dst, out_bytes));
  }
  for (std::size_t s = 0; s < segs.size(); ++s)
    cs[s]->n_past += segs[s].n;
  // io_ holds the rows' final activations (a stage without layers whose
  // rows stayed in another buffer: none).
  if (last_ > first_ || !x_from_device)
    last_rows_ = N;
  return {};
}

} // namespace exo::model
