#pragma once

/// A device whose memory is host memory: the common base of the cpu and sim
/// backends. Operations run at once on the caller's thread (under the
/// device's lock), so every event is complete when recorded; the ordering
/// rules of backend.hpp hold trivially.

#include "backends/backend.hpp"
#include "backends/huge_page_arena.hpp"

#include <mutex>

namespace exo::backend {

class host_device : public device {
public:
  const device_properties& properties() const override {
    return props_;
  }

  result<std::unique_ptr<buffer>> allocate(std::size_t bytes) override;
  /// In place when adopts_host_memory_ (the cpu device), else unsupported.
  result<std::unique_ptr<buffer>>
  adopt_host(const void* data, std::size_t bytes,
             std::shared_ptr<const void> keep) override;
  memory_info memory() override;
  /// Moves pages, never copies more than a small buffer (< 256 KiB, from
  /// malloc) holds; read-only (adopted) buffers are refused.
  status resize(buffer& buf, std::size_t bytes) override;
  bool resizes() const noexcept override {
    return true;
  }
  /// Every weight type: the host kernels run them all.
  bool runs_weights(weight_type t) const noexcept override;
  /// q4_k_x16 for Q4_K where packs_weights_ and the CPU gains from it
  /// (AVX-512 VNNI without AMX: with AMX, prompts take the tiles, which
  /// read Q4_K as stored), q6_k_x16 for Q6_K of 16 rows or more where
  /// packs_q6_k_ and the CPU has AVX-512 VNNI (no tiles run Q6_K); else t.
  weight_type preferred_weights(weight_type t, std::size_t rows,
                                std::size_t cols) const noexcept override;
  /// Attention reads a paged cache's rows where they are.
  bool reads_kv_blocks() const noexcept override;
  /// A decode batch's attention as one operation (do_attention_paged_rows:
  /// its rows over the kernels' threads) and its K/V rows as one each.
  bool runs_paged_rows() const noexcept override;

  status write(buffer& dst, std::size_t offset, const void* src,
               std::size_t bytes) override;
  status read(const buffer& src, std::size_t offset, void* dst,
              std::size_t bytes) override;
  status copy(const buffer& src, std::size_t src_offset, buffer& dst,
              std::size_t dst_offset, std::size_t bytes) override;
  void* host_pointer(buffer& buf) override;

  status synchronize() override;
  result<event> record() override;
  status wait(const event& e) override;
  result<bool> completed(const event& e) override;

protected:
  status do_elementwise(binary_op op, const_view a, const_view b,
                        mut_view out, std::size_t count) override;
  status do_matmul(const_view a, const_view b, mut_view c,
                   const matmul_dims& dims) override;
  status do_matmul_weights(const_view a, const_view w, weight_type type,
                           mut_view c, const matmul_dims& dims) override;
  status do_rms_norm(const_view x, const_view weight, mut_view out,
                     std::size_t rows, std::size_t dim, float eps) override;
  status do_rope(mut_view x, const_view positions, const_view freq_factors,
                 const rope_dims& dims) override;
  status do_rope_cached(mut_view x, const_view cache,
                        const rope_dims& dims) override;
  status do_attention(const_view q, const_view k, const_view v, mut_view out,
                      const attention_dims& dims) override;
  status do_attention_paged(const_view q, const_view k, const_view v,
                            const_view table, mut_view out,
                            const attention_dims& dims) override;
  status do_attention_paged_rows(const_view q, const_view k, const_view v,
                                 const_view tables, mut_view out,
                                 const attention_dims& dims,
                                 std::size_t table_len) override;
  status do_silu_mul(const_view gate, const_view up, mut_view out,
                     std::size_t count) override;
  status do_to_f16(const_view a, mut_view out, std::size_t count) override;
  status do_to_q8_0(const_view a, mut_view out, std::size_t count) override;
  status do_hadamard(mut_view out, const_view a, std::size_t count,
                     std::size_t n) override;

  /// Hooks for subclasses, called with the lock held.
  /// Before any operation: a refusal (vanished, paused...) or nothing.
  virtual status admit(const char* what);
  /// Room for a new allocation of `bytes`, given `used` bytes live now.
  virtual status reserve(std::size_t bytes, std::uint64_t used);
  /// Before a computing operation (not allocations or copies), on the
  /// thread that runs it, once admitted.
  virtual void on_compute() {}
  /// After an operation that moved `bytes` and computed `flops`.
  virtual void account(double bytes, double flops);

  device_properties props_;
  std::mutex mtx_;
  std::uint64_t used_ = 0;
  std::uint64_t submitted_ = 0;
  /// Threads of the matrix and attention kernels (OpenMP).
  int threads_ = 1;
  /// Whose attention bits (host::attention's llama_threads).
  int llama_threads_ = 1;
  /// Whether adopt_host reads host memory in place. The cpu device does;
  /// a simulated device keeps "device memory" of its own (uploads cost
  /// simulated time).
  bool adopts_host_memory_ = false;
  /// Whether preferred_weights packs Q4_K (the cpu device, by default); a
  /// simulated device holds what it is given.
  bool packs_weights_ = false;
  /// Whether it packs Q6_K too (cpu_options::pack_q6_k).
  bool packs_q6_k_ = false;
  /// Where buffers of 256 KiB and more live (huge_page_arena.hpp).
  huge_page_arena arena_;

private:
  /// do_attention's body (the lock held, admitted): dims.block_table set
  /// for a paged cache.
  status attention_locked(const_view q, const_view k, const_view v,
                          mut_view out, const attention_dims& dims);
  /// host::attention on `threads` threads for the kernels, the lock held.
  void attention_kernel(const_view q, const_view k, const_view v,
                        mut_view out, const attention_dims& dims,
                        int threads);
  /// What an attention of dims moved and computed, to account().
  void account_attention(const attention_dims& dims);
  class host_buffer;

  /// Refuses a buffer size of 0 or past the largest allocation.
  status check_size(std::size_t bytes, const char* what) const;
  /// `rounded` bytes: from the arena when large, else from malloc; null
  /// when the host refuses.
  void* take(std::size_t rounded);

  /// The host address of offset `off` in a buffer of this device.
  template <class T = float>
  static T* at(const buffer* b, std::size_t off);
};

} // namespace exo::backend
