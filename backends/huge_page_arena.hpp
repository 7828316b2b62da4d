#pragma once

/// Host memory for large device buffers, backed by transparent huge pages.
///
/// Why: a decode step streams every weight of a stage once, so with 4 KiB
/// pages it walks one page-table entry per 4 KiB of weights, on every
/// step. llama.cpp (and exo's host engine) read the weights from the mapped
/// model file, which this kernel maps with 2 MiB pages (FilePmdMapped);
/// the cpu device's copies, from malloc, had 4 KiB pages and made the same
/// decode step 15-28% slower (docs/benchmarks.md, "shard step").
///
/// How: buffers of `min_bytes` and more are carved from regions of at
/// least `region_bytes`, mapped anonymously at 2 MiB alignment and
/// advised MADV_HUGEPAGE (honoured when the kernel's THP setting is
/// "madvise" or "always"). Inside a region, a first-fit free list of page
/// granules; freed neighbours merge; a region left empty is unmapped.
/// Smaller buffers are not worth a region and come from malloc. Not
/// thread-safe: the owner serialises calls (host_device's lock).

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace exo::backend {

class huge_page_arena {
public:
  static constexpr std::size_t huge_page = std::size_t{2} << 20;
  static constexpr std::size_t granule = 4096;
  /// A released (or shrunk-off) range of at least this many bytes gives
  /// its pages back to the host at once (MADV_DONTNEED); the address
  /// space stays the region's.
  static constexpr std::size_t return_bytes = std::size_t{1} << 20;

  explicit huge_page_arena(std::size_t min_bytes = std::size_t{256} << 10,
                           std::size_t region_bytes = std::size_t{64} << 20);
  ~huge_page_arena();
  huge_page_arena(const huge_page_arena&) = delete;
  huge_page_arena& operator=(const huge_page_arena&) = delete;

  /// Whether a buffer of `bytes` belongs here (else: malloc).
  bool takes(std::size_t bytes) const noexcept {
    return bytes >= min_bytes_;
  }

  /// `bytes` (rounded up to whole granules) at a granule-aligned address,
  /// or null when the host refuses the mapping.
  void* allocate(std::size_t bytes);

  /// Returns a block from allocate() with the same `bytes`.
  void release(void* p, std::size_t bytes);

  /// The block `p` of `old_bytes` (from allocate() or resize()) as a block
  /// of `new_bytes`, its first min(old, new) bytes kept, without copying
  /// them: it shrinks or grows where it is when the space after it is
  /// free; else its pages move to a new region (mremap: the page tables
  /// move, the memory stays), at the same offset within a huge page so
  /// that huge pages move whole. The old address is then invalid. Null
  /// when the host refuses (p is unchanged then). Where the kernel cannot
  /// move pages (before Linux 5.7) the bytes are copied instead
  /// (bytes_copied() says so).
  void* resize(void* p, std::size_t old_bytes, std::size_t new_bytes);

  /// Blocks resize() moved to another address, and bytes it had to copy
  /// doing so (0 where the kernel moves pages).
  std::uint64_t moves() const noexcept {
    return moves_;
  }
  std::uint64_t bytes_copied() const noexcept {
    return bytes_copied_;
  }

  /// Bytes of address space mapped for regions (not all of it resident).
  std::size_t mapped_bytes() const noexcept;
  /// Regions mapped now.
  std::size_t regions() const noexcept {
    return regions_.size();
  }

private:
  struct region {
    char* base = nullptr;
    std::size_t size = 0;
    std::size_t used = 0;
    /// Free blocks: offset -> length, disjoint, never adjacent.
    std::map<std::size_t, std::size_t> free;
  };

  static std::size_t round_up(std::size_t n, std::size_t to) noexcept {
    return (n + to - 1) / to * to;
  }
  /// A new region of at least `bytes`, or null.
  region* add_region(std::size_t bytes);
  void unmap(region& r);
  /// The region holding address c, or null.
  region* region_of(const char* c) noexcept;
  /// Gives [off, off + len) of r back to its free list, merged with its
  /// free neighbours.
  static void give(region& r, std::size_t off, std::size_t len);
  /// Takes [off, off + len) of r from the free block that holds it;
  /// whether one does.
  static bool carve(region& r, std::size_t off, std::size_t len);
  /// Releases [off, off + len) of regions_[i], unmapping the region when
  /// nothing is left in it.
  void release_at(std::size_t i, std::size_t off, std::size_t len);

  std::size_t min_bytes_;
  std::size_t region_bytes_;
  std::vector<region> regions_;
  std::uint64_t moves_ = 0;
  std::uint64_t bytes_copied_ = 0;
};

} // namespace exo::backend
