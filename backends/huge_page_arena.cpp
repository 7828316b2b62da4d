#include "backends/huge_page_arena.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace exo::backend {

huge_page_arena::huge_page_arena(std::size_t min_bytes,
                                 std::size_t region_bytes)
  : min_bytes_(std::max<std::size_t>(min_bytes, 1)),
    region_bytes_(round_up(std::max(region_bytes, huge_page), huge_page)) {
}

huge_page_arena::~huge_page_arena() {
  for (auto& r : regions_)
    unmap(r);
}

huge_page_arena::region* huge_page_arena::add_region(std::size_t bytes) {
  const auto size = std::max(region_bytes_, round_up(bytes, huge_page));
  // Map one huge page more than needed and trim to a 2 MiB boundary:
  // mmap only promises 4 KiB alignment, and a huge page must be aligned.
  const auto span = size + huge_page;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return nullptr;
  auto* raw = static_cast<char*>(p);
  auto addr = reinterpret_cast<std::uintptr_t>(raw);
  auto* base = reinterpret_cast<char*>(round_up(addr, huge_page));
  const auto head = static_cast<std::size_t>(base - raw);
  if (head > 0)
    ::munmap(raw, head);
  if (span - head > size)
    ::munmap(base + size, span - head - size);
  // Advice only: without THP the region is ordinary memory.
  (void) ::madvise(base, size, MADV_HUGEPAGE);
  region r;
  r.base = base;
  r.size = size;
  r.free.emplace(0, size);
  regions_.push_back(std::move(r));
  return &regions_.back();
}

void huge_page_arena::unmap(region& r) {
  if (r.base != nullptr)
    ::munmap(r.base, r.size);
  r.base = nullptr;
}

void* huge_page_arena::allocate(std::size_t bytes) {
  // Rounding up (to a granule, a region, a huge page of slack) must not
  // wrap around.
  if (bytes == 0 || bytes > SIZE_MAX - 2 * region_bytes_ - huge_page)
    return nullptr;
  const auto need = round_up(bytes, granule);
  auto take = [need](region& r) -> void* {
    for (auto it = r.free.begin(); it != r.free.end(); ++it) {
      if (it->second < need)
        continue;
      auto off = it->first;
      auto left = it->second - need;
      r.free.erase(it);
      if (left > 0)
        r.free.emplace(off + need, left);
      r.used += need;
      return r.base + off;
    }
    return nullptr;
  };
  for (auto& r : regions_)
    if (r.size - r.used >= need)
      if (auto* p = take(r))
        return p;
  auto* r = add_region(need);
  return r == nullptr ? nullptr : take(*r);
}

huge_page_arena::region* huge_page_arena::region_of(const char* c) noexcept {
  for (auto& r : regions_)
    if (c >= r.base && c < r.base + r.size)
      return &r;
  return nullptr;
}

void huge_page_arena::give(region& r, std::size_t off, std::size_t len) {
  // The pages go back to the host (a region lives while any block of it
  // does: a shrunk KV arena's tail would stay resident); small blocks
  // keep theirs, not worth a call each.
  if (len >= return_bytes)
    (void) ::madvise(r.base + off, len, MADV_DONTNEED);
  auto end = off + len;
  // Merge with the free neighbours on either side.
  auto next = r.free.lower_bound(off);
  if (next != r.free.end() && next->first == end) {
    end += next->second;
    next = r.free.erase(next);
  }
  if (next != r.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      r.free.erase(prev);
    }
  }
  r.free.emplace(off, end - off);
  r.used -= len;
}

bool huge_page_arena::carve(region& r, std::size_t off, std::size_t len) {
  auto it = r.free.upper_bound(off);
  if (it == r.free.begin())
    return false;
  --it;
  const auto [start, size] = *it;
  if (off + len > start + size)
    return false;
  r.free.erase(it);
  if (off > start)
    r.free.emplace(start, off - start);
  if (start + size > off + len)
    r.free.emplace(off + len, start + size - off - len);
  r.used += len;
  return true;
}

void huge_page_arena::release_at(std::size_t i, std::size_t off,
                                 std::size_t len) {
  auto& r = regions_[i];
  give(r, off, len);
  if (r.used == 0) {
    unmap(r);
    regions_.erase(regions_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void huge_page_arena::release(void* p, std::size_t bytes) {
  if (p == nullptr)
    return;
  auto* c = static_cast<char*>(p);
  if (auto* r = region_of(c))
    release_at(static_cast<std::size_t>(r - regions_.data()),
               static_cast<std::size_t>(c - r->base), round_up(bytes, granule));
}

void* huge_page_arena::resize(void* p, std::size_t old_bytes,
                              std::size_t new_bytes) {
  if (p == nullptr || new_bytes == 0
      || new_bytes > SIZE_MAX - 2 * region_bytes_ - 2 * huge_page)
    return nullptr;
  auto* c = static_cast<char*>(p);
  auto* r = region_of(c);
  if (r == nullptr)
    return nullptr;
  const auto off = static_cast<std::size_t>(c - r->base);
  const auto had = round_up(old_bytes, granule);
  const auto need = round_up(new_bytes, granule);
  if (need <= had) {
    if (need < had)
      give(*r, off + need, had - need);
    return p;
  }
  // Where it is, when the space after it is free.
  if (auto next = r->free.find(off + had);
      next != r->free.end() && next->second >= need - had) {
    (void) carve(*r, off + had, need - had);
    return p;
  }
  // Else into a new region, at the same offset within a huge page (an
  // aligned huge page moves as one page-table entry; one split across
  // two addresses would be broken into small pages).
  const auto index = static_cast<std::size_t>(r - regions_.data());
  const auto lead = reinterpret_cast<std::uintptr_t>(c) % huge_page;
  auto* nr = add_region(lead + need); // may move regions_: r is stale now
  if (nr == nullptr)
    return nullptr;
  (void) carve(*nr, lead, need);
  auto* dst = nr->base + lead;
  // The pages move; the old range stays mapped, empty (MREMAP_DONTUNMAP),
  // so the old region keeps no hole another mapping could take.
  void* moved = ::mremap(c, had, had,
                         MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, dst);
  if (moved == MAP_FAILED) {
    std::memcpy(dst, c, std::min(old_bytes, new_bytes));
    bytes_copied_ += std::min(old_bytes, new_bytes);
  }
  ++moves_;
  release_at(index, off, had);
  return dst;
}

std::size_t huge_page_arena::mapped_bytes() const noexcept {
  std::size_t n = 0;
  for (auto& r : regions_)
    n += r.size;
  return n;
}

} // namespace exo::backend
