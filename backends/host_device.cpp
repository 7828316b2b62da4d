#include "backends/host_device.hpp"

#include "backends/host_info.hpp"
#include "backends/host_kernels.hpp"
#include "backends/host_parallel.hpp"
#include "backends/quant_q4_k_x16.hpp"
#include "backends/quant_q6_k_x16.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace exo::backend {

/// Host memory, 64-byte aligned (a cache line; enough for any SIMD load):
/// from the device's huge-page arena when large, else from malloc; or,
/// read-only, the caller's memory (adopt_host), which `keep_` holds alive.
class host_device::host_buffer : public buffer {
public:
  host_buffer(host_device& owner, std::size_t size, void* mem,
              std::size_t arena_bytes)
    : buffer(owner, size), mem_(mem), arena_bytes_(arena_bytes),
      owner_(owner) {
  }
  host_buffer(host_device& owner, std::size_t size, const void* mem,
              std::shared_ptr<const void> keep)
    : buffer(owner, size, true), mem_(const_cast<void*>(mem)),
      arena_bytes_(0), owner_(owner), keep_(std::move(keep)) {
  }
  ~host_buffer() override {
    std::lock_guard<std::mutex> guard{owner_.mtx_};
    if (keep_) {
      // The caller's memory: nothing to free.
    } else if (arena_bytes_ > 0) {
      owner_.arena_.release(mem_, arena_bytes_);
    } else {
      std::free(mem_);
    }
    owner_.used_ -= size();
  }
  /// Writable only when !read_only() (every write path checks that).
  char* data() const noexcept {
    return static_cast<char*>(mem_);
  }
  /// Now `size` bytes at mem (arena_bytes from the arena, or 0: malloc).
  void moved(void* mem, std::size_t size, std::size_t arena_bytes) noexcept {
    mem_ = mem;
    arena_bytes_ = arena_bytes;
    set_size(size);
  }
  std::size_t arena_bytes() const noexcept {
    return arena_bytes_;
  }

private:
  void* mem_;
  std::size_t arena_bytes_; // 0: from malloc, or adopted
  host_device& owner_;
  std::shared_ptr<const void> keep_; // set: adopted, not ours to free
};

namespace {

constexpr std::size_t alignment = 64;

std::size_t round_up(std::size_t bytes) noexcept {
  return (bytes + alignment - 1) / alignment * alignment;
}

error refused(std::size_t bytes, const char* what) {
  return fail(errc::out_of_memory, std::string{what} + ": the host refused "
                                     + std::to_string(bytes) + " bytes");
}

} // namespace

status host_device::check_size(std::size_t bytes, const char* what) const {
  if (bytes == 0)
    return fail(errc::invalid_argument, std::string{what} + ": size must be > 0");
  if (bytes > props_.max_allocation)
    return fail(errc::out_of_memory,
                std::string{what} + ": " + std::to_string(bytes)
                  + " bytes exceeds the device's largest allocation of "
                  + std::to_string(props_.max_allocation));
  return {};
}

void* host_device::take(std::size_t rounded) {
  return arena_.takes(rounded) ? arena_.allocate(rounded)
                               : std::aligned_alloc(alignment, rounded);
}

result<std::unique_ptr<buffer>> host_device::allocate(std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("allocate"));
  EXO_TRY(check_size(bytes, "allocate"));
  EXO_TRY(reserve(bytes, used_));
  const auto rounded = round_up(bytes);
  const bool large = arena_.takes(rounded);
  void* mem = take(rounded);
  if (mem == nullptr)
    return refused(bytes, "allocate");
  used_ += bytes;
  ++submitted_;
  return std::unique_ptr<buffer>{
    new host_buffer(*this, bytes, mem, large ? rounded : 0)};
}

status host_device::resize(buffer& buf, std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  // A growth takes memory as an allocation does (a simulated device's
  // allocation faults refuse it); a shrink only gives some back.
  EXO_TRY(admit(bytes > buf.size() ? "resize" : "shrink"));
  EXO_TRY(check_range(buf, 0, 0, "resize"));
  EXO_TRY(check_writable(buf, "resize"));
  EXO_TRY(check_size(bytes, "resize"));
  auto& hb = static_cast<host_buffer&>(buf);
  const std::size_t old = buf.size();
  if (bytes > old)
    EXO_TRY(reserve(bytes - old, used_));
  const auto rounded = round_up(bytes);
  if (hb.arena_bytes() > 0) {
    // The arena moves pages (or grows the block where it is).
    void* mem = arena_.resize(hb.data(), hb.arena_bytes(), rounded);
    if (mem == nullptr)
      return refused(bytes, "resize");
    hb.moved(mem, bytes, rounded);
  } else {
    // A small buffer from malloc: a new one (from the arena once large
    // enough), its bytes copied.
    void* mem = take(rounded);
    if (mem == nullptr)
      return refused(bytes, "resize");
    std::memcpy(mem, hb.data(), std::min(old, bytes));
    std::free(hb.data());
    hb.moved(mem, bytes, arena_.takes(rounded) ? rounded : 0);
  }
  used_ = used_ - old + bytes;
  ++submitted_;
  return {};
}

result<std::unique_ptr<buffer>>
host_device::adopt_host(const void* data, std::size_t bytes,
                        std::shared_ptr<const void> keep) {
  if (!adopts_host_memory_)
    return device::adopt_host(data, bytes, std::move(keep));
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("adopt_host"));
  if (bytes == 0)
    return fail(errc::invalid_argument, "adopt_host: size must be > 0");
  if (data == nullptr || !keep)
    return fail(errc::invalid_argument,
                "adopt_host: no memory, or nothing keeps it alive");
  EXO_TRY(reserve(bytes, used_));
  used_ += bytes;
  ++submitted_;
  return std::unique_ptr<buffer>{
    new host_buffer(*this, bytes, data, std::move(keep))};
}

memory_info host_device::memory() {
  std::lock_guard<std::mutex> guard{mtx_};
  memory_info info;
  info.total = props_.total_memory;
  info.used_by_exo = used_;
  info.free = info.total > used_ ? info.total - used_ : 0;
  return info;
}

status host_device::write(buffer& dst, std::size_t offset, const void* src,
                          std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("write"));
  EXO_TRY(check_range(dst, offset, bytes, "write"));
  EXO_TRY(check_writable(dst, "write"));
  if (bytes > 0 && src == nullptr)
    return fail(errc::invalid_argument, "write: null host pointer");
  if (bytes > 0)
    std::memcpy(static_cast<host_buffer&>(dst).data() + offset, src, bytes);
  ++submitted_;
  account(static_cast<double>(bytes), 0);
  return {};
}

status host_device::read(const buffer& src, std::size_t offset, void* dst,
                         std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("read"));
  EXO_TRY(check_range(src, offset, bytes, "read"));
  if (bytes > 0 && dst == nullptr)
    return fail(errc::invalid_argument, "read: null host pointer");
  if (bytes > 0)
    std::memcpy(dst, static_cast<const host_buffer&>(src).data() + offset,
                bytes);
  ++submitted_;
  account(static_cast<double>(bytes), 0);
  return {};
}

status host_device::copy(const buffer& src, std::size_t src_offset,
                         buffer& dst, std::size_t dst_offset,
                         std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("copy"));
  EXO_TRY(check_range(src, src_offset, bytes, "copy source"));
  EXO_TRY(check_range(dst, dst_offset, bytes, "copy destination"));
  EXO_TRY(check_writable(dst, "copy destination"));
  if (bytes > 0)
    std::memmove(static_cast<host_buffer&>(dst).data() + dst_offset,
                 static_cast<const host_buffer&>(src).data() + src_offset,
                 bytes);
  ++submitted_;
  account(2.0 * static_cast<double>(bytes), 0);
  return {};
}

void* host_device::host_pointer(buffer& buf) {
  // No writable pointer into adopted (read-only) memory.
  if (&buf.owner() != this || buf.read_only())
    return nullptr;
  return static_cast<host_buffer&>(buf).data();
}

status host_device::synchronize() {
  std::lock_guard<std::mutex> guard{mtx_};
  return admit("synchronize");
}

result<event> host_device::record() {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("record"));
  return event{uid(), ++submitted_};
}

status host_device::wait(const event& e) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(check_event(e, submitted_));
  return admit("wait");
}

result<bool> host_device::completed(const event& e) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(check_event(e, submitted_));
  EXO_TRY(admit("completed"));
  return true;
}

// Compute: the operands were checked by device's public methods.

template <class T>
T* host_device::at(const buffer* b, std::size_t off) {
  return reinterpret_cast<T*>(static_cast<const host_buffer*>(b)->data()
                              + off);
}

status host_device::do_elementwise(binary_op op, const_view a, const_view b,
                                   mut_view out, std::size_t count) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("elementwise"));
  on_compute();
  const float* pa = at(a.buf, a.offset);
  const float* pb = at(b.buf, b.offset);
  float* po = at(out.buf, out.offset);
  host::for_each_range(count, threads_, 16, host::split_elements,
                       [&](std::size_t i, std::size_t e) {
                         host::elementwise(op, pa + i, pb + i, po + i, e - i);
                       });
  ++submitted_;
  account(3.0 * 4.0 * static_cast<double>(count),
          static_cast<double>(count));
  return {};
}

status host_device::do_matmul(const_view a, const_view b, mut_view c,
                              const matmul_dims& dims) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("matmul"));
  on_compute();
  auto sz = host::bytes_of(dims);
  host::matmul(at(a.buf, a.offset), at(b.buf, b.offset),
               at(c.buf, c.offset), dims, threads_);
  ++submitted_;
  account(static_cast<double>(sz.a + sz.b + sz.c),
          2.0 * static_cast<double>(dims.m) * dims.n * dims.k);
  return {};
}

bool host_device::runs_weights(weight_type) const noexcept {
  return true;
}

weight_type host_device::preferred_weights(weight_type t, std::size_t rows,
                                           std::size_t cols) const noexcept {
  if (packs_weights_ && t == weight_type::q4_k
      && quant::q4_k_x16_packs(rows, cols) && host::have_vnni()
      && !host::have_amx())
    return weight_type::q4_k_x16;
  if (packs_q6_k_ && t == weight_type::q6_k
      && rows >= quant::q6_k_x16_rows && quant::q6_k_x16_packs(rows, cols)
      && host::have_vnni())
    return weight_type::q6_k_x16;
  return t;
}

status host_device::do_matmul_weights(const_view a, const_view w,
                                      weight_type type, mut_view c,
                                      const matmul_dims& dims) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("matmul_weights"));
  on_compute();
  auto sz = host::check_matmul_weights(type, dims); // sizes only: checked
  if (!sz)
    return sz.err();
  host::matmul_weights(at(a.buf, a.offset),
                       at<const std::uint8_t>(w.buf, w.offset), type,
                       at(c.buf, c.offset), dims, threads_);
  ++submitted_;
  account(static_cast<double>(sz->a + sz->w + sz->c),
          2.0 * static_cast<double>(dims.m) * dims.n * dims.k);
  return {};
}

status host_device::do_rms_norm(const_view x, const_view weight,
                                mut_view out, std::size_t rows,
                                std::size_t dim, float eps) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("rms_norm"));
  on_compute();
  const float* px = at(x.buf, x.offset);
  const float* pw = at(weight.buf, weight.offset);
  float* po = at(out.buf, out.offset);
  host::for_each_range(rows, threads_, 1,
                       host::split_elements / (dim ? dim : 1),
                       [&](std::size_t r, std::size_t e) {
                         host::rms_norm(px + r * dim, pw, po + r * dim, e - r,
                                        dim, eps);
                       });
  ++submitted_;
  const auto bytes = 4.0 * static_cast<double>(rows) * dim;
  account(2.0 * bytes + 4.0 * static_cast<double>(dim),
          3.0 * static_cast<double>(rows) * dim);
  return {};
}

status host_device::do_rope(mut_view x, const_view positions,
                            const_view freq_factors, const rope_dims& dims) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("rope"));
  on_compute();
  const float* ff = freq_factors.buf != nullptr
                      ? at(freq_factors.buf, freq_factors.offset)
                      : nullptr;
  float* px = at(x.buf, x.offset);
  const auto* pos = at<const std::int32_t>(positions.buf, positions.offset);
  const std::size_t row = dims.heads * dims.head_dim;
  host::for_each_range(dims.rows, threads_, 1,
                       host::split_elements / (row ? row : 1),
                       [&](std::size_t r, std::size_t e) {
                         rope_dims part = dims;
                         part.rows = e - r;
                         host::rope(px + r * row, pos + r, ff, part);
                       });
  ++submitted_;
  const auto x_bytes = 4.0 * static_cast<double>(dims.rows) * dims.heads
                       * dims.head_dim;
  account(2.0 * x_bytes,
          3.0 * static_cast<double>(dims.rows) * dims.heads * dims.n_rot);
  return {};
}

status host_device::do_rope_cached(mut_view x, const_view cache,
                                   const rope_dims& dims) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("rope_cached"));
  on_compute();
  const float* cs = at(cache.buf, cache.offset);
  float* px = at(x.buf, x.offset);
  const std::size_t row = dims.heads * dims.head_dim;
  host::for_each_range(dims.rows, threads_, 1,
                       host::split_elements / (row ? row : 1),
                       [&](std::size_t r, std::size_t e) {
                         rope_dims part = dims;
                         part.rows = e - r;
                         host::rope_cached(px + r * row, cs + r * dims.n_rot,
                                           part);
                       });
  ++submitted_;
  const auto x_bytes = 4.0 * static_cast<double>(dims.rows) * dims.heads
                       * dims.head_dim;
  account(2.0 * x_bytes + 4.0 * static_cast<double>(dims.rows) * dims.n_rot,
          3.0 * static_cast<double>(dims.rows) * dims.heads * dims.n_rot);
  return {};
}

status host_device::do_attention(const_view q, const_view k, const_view v,
                                 mut_view out, const attention_dims& dims) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("attention"));
  on_compute();
  return attention_locked(q, k, v, out, dims);
}

bool host_device::reads_kv_blocks() const noexcept {
  return true;
}

bool host_device::runs_paged_rows() const noexcept {
  return true;
}

status host_device::do_attention_paged(const_view q, const_view k,
                                       const_view v, const_view table,
                                       mut_view out,
                                       const attention_dims& dims) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("attention_paged"));
  auto sz = host::check_paged_attention(dims); // sizes only: checked
  if (!sz)
    return sz.err();
  const auto* tab = at<const std::int32_t>(table.buf, table.offset);
  EXO_TRY(host::check_block_table(tab, attention_blocks(dims), *sz,
                                  host::view_extent(k),
                                  host::view_extent(v)));
  on_compute();
  auto d = dims;
  d.block_table = tab;
  return attention_locked(q, k, v, out, d);
}

status host_device::do_attention_paged_rows(const_view q, const_view k,
                                            const_view v, const_view tables,
                                            mut_view out,
                                            const attention_dims& dims,
                                            std::size_t table_len) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("attention_paged_rows"));
  // Every row checked before any runs (its position in its table, its
  // blocks inside k and v), so that a bad row leaves no half-written
  // output: what device::do_attention_paged_rows checks row by row.
  const std::size_t rows = dims.n_tokens, stride = 1 + table_len;
  const auto* tab = at<const std::int32_t>(tables.buf, tables.offset);
  std::vector<attention_dims> one(rows);
  double macs = 0.0;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t p = tab[r * stride];
    EXO_TRY(host::check_row_position("attention_paged_rows", r, p, table_len,
                                     dims.block_positions));
    auto& d = one[r];
    d = dims;
    d.n_tokens = 1;
    d.pos0 = static_cast<std::size_t>(p);
    auto sz = host::check_paged_attention(d); // sizes only: checked
    if (!sz)
      return sz.err();
    const std::int32_t* blocks = tab + r * stride + 1;
    if (auto bad = host::check_block_table(blocks, attention_blocks(d), *sz,
                                           host::view_extent(k),
                                           host::view_extent(v));
        !bad)
      return fail(bad.err().code, "attention_paged_rows: row "
                                    + std::to_string(r) + ": "
                                    + bad.err().message);
    d.block_table = blocks;
    macs += (static_cast<double>(p) + 1.0)
            * static_cast<double>(dims.n_heads)
            * static_cast<double>(dims.head_dim);
  }
  on_compute();
  const std::size_t row_bytes = dims.n_heads * dims.head_dim * sizeof(float);
  const auto run = [&](std::size_t r, int threads) {
    const_view qr = q;
    mut_view outr = out;
    qr.offset += r * row_bytes;
    outr.offset += r * row_bytes;
    attention_kernel(qr, k, v, outr, one[r], threads);
  };
  // A batch of sequences' decode rows: each row on one thread, the rows
  // handed out over the threads (a row's bits do not depend on its thread
  // count), where the whole is worth waking them; alone, each row would
  // stay on the calling thread below host::attention_split_macs (a decode
  // row over a short context) and the other threads would wait. One row,
  // or a small batch: as before, each row's heads over the threads where
  // it is large enough.
  const bool by_rows = rows > 1 && threads_ > 1
                       && (host::all_work_splits()
                           || macs >= static_cast<double>(
                                host::attention_split_macs));
  if (by_rows)
    host::for_each_job(
      static_cast<long>(rows), threads_, [] { return 0; },
      [&](long r, int&) { run(static_cast<std::size_t>(r), 1); });
  else
    for (std::size_t r = 0; r < rows; ++r)
      run(r, threads_);
  for (std::size_t r = 0; r < rows; ++r) {
    ++submitted_;
    account_attention(one[r]);
  }
  return {};
}

status host_device::attention_locked(const_view q, const_view k,
                                     const_view v, mut_view out,
                                     const attention_dims& dims) {
  attention_kernel(q, k, v, out, dims, threads_);
  ++submitted_;
  account_attention(dims);
  return {};
}

void host_device::attention_kernel(const_view q, const_view k, const_view v,
                                   mut_view out, const attention_dims& dims,
                                   int threads) {
  if (dims.kv == kv_type::f16)
    host::attention(at(q.buf, q.offset),
                    at<const std::uint16_t>(k.buf, k.offset),
                    at<const std::uint16_t>(v.buf, v.offset),
                    at(out.buf, out.offset), dims, threads, llama_threads_);
  else if (dims.kv == kv_type::q8_0)
    host::attention(at(q.buf, q.offset),
                    at<const host::block_q8_0>(k.buf, k.offset),
                    at<const host::block_q8_0>(v.buf, v.offset),
                    at(out.buf, out.offset), dims, threads);
  else
    host::attention(at(q.buf, q.offset), at(k.buf, k.offset),
                    at(v.buf, v.offset), at(out.buf, out.offset), dims,
                    threads, llama_threads_);
}

void host_device::account_attention(const attention_dims& dims) {
  // Each query row reads its causal prefix of K and V once per KV head.
  double ctx = static_cast<double>(dims.pos0)
               + 0.5 * static_cast<double>(dims.n_tokens + 1);
  double kv_bytes = 2.0 * ctx
                    * static_cast<double>(kv_block_bytes(dims.kv))
                    / static_cast<double>(kv_block_values(dims.kv))
                    * static_cast<double>(dims.n_kv_heads)
                    * static_cast<double>(dims.head_dim);
  const auto q_bytes = 4.0 * static_cast<double>(dims.n_tokens)
                       * dims.n_heads * dims.head_dim;
  account(2.0 * q_bytes + kv_bytes,
          4.0 * ctx * static_cast<double>(dims.n_tokens) * dims.n_heads
            * dims.head_dim);
}

status host_device::do_to_q8_0(const_view a, mut_view out,
                               std::size_t count) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("to_q8_0"));
  on_compute();
  const float* pa = at(a.buf, a.offset);
  auto* po = at<host::block_q8_0>(out.buf, out.offset);
  host::for_each_range(count, threads_, 32, host::split_elements,
                       [&](std::size_t i, std::size_t e) {
                         host::quantize_q8_0_activations(pa + i, po + i / 32,
                                                         e - i);
                       });
  ++submitted_;
  account(4.0 * static_cast<double>(count)
            + static_cast<double>(kv_bytes_of(kv_type::q8_0, count)),
          3.0 * static_cast<double>(count));
  return {};
}

status host_device::do_hadamard(mut_view out, const_view a,
                                std::size_t count, std::size_t n) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("hadamard"));
  on_compute();
  const float* pa = at(a.buf, a.offset);
  float* po = at(out.buf, out.offset);
  host::for_each_range(count, threads_, n, host::split_elements,
                       [&](std::size_t i, std::size_t e) {
                         host::hadamard(pa + i, po + i, e - i, n);
                       });
  ++submitted_;
  double stages = 0;
  for (std::size_t s = 1; s < n; s *= 2)
    stages += 1;
  account(8.0 * static_cast<double>(count),
          (stages + 1) * static_cast<double>(count));
  return {};
}

status host_device::do_silu_mul(const_view gate, const_view up, mut_view out,
                                std::size_t count) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("silu_mul"));
  on_compute();
  // Ranges of whole groups of 16: silu_mul's groups start where ggml's do.
  const float* pg = at(gate.buf, gate.offset);
  const float* pu = at(up.buf, up.offset);
  float* po = at(out.buf, out.offset);
  host::for_each_range(count, threads_, 16, host::split_elements,
                       [&](std::size_t i, std::size_t e) {
                         host::silu_mul(pg + i, pu + i, po + i, e - i);
                       });
  ++submitted_;
  account(3.0 * 4.0 * static_cast<double>(count),
          5.0 * static_cast<double>(count));
  return {};
}

status host_device::do_to_f16(const_view a, mut_view out,
                              std::size_t count) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(admit("to_f16"));
  on_compute();
  const float* pa = at(a.buf, a.offset);
  auto* po = at<std::uint16_t>(out.buf, out.offset);
  host::for_each_range(count, threads_, 16, host::split_elements,
                       [&](std::size_t i, std::size_t e) {
                         host::to_f16(pa + i, po + i, e - i);
                       });
  ++submitted_;
  account(6.0 * static_cast<double>(count), static_cast<double>(count));
  return {};
}

status host_device::admit(const char*) {
  return {};
}

status host_device::reserve(std::size_t bytes, std::uint64_t used) {
  if (used + bytes > props_.total_memory)
    return fail(errc::out_of_memory,
                "allocate: " + std::to_string(bytes) + " bytes requested, "
                  + std::to_string(props_.total_memory - used) + " free");
  return {};
}

void host_device::account(double, double) {
}

} // namespace exo::backend
