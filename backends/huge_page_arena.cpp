#include "backends/huge_page_arena.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

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

void huge_page_arena::release(void* p, std::size_t bytes) {
  if (p == nullptr)
    return;
  auto* c = static_cast<char*>(p);
  const auto len = round_up(bytes, granule);
  for (auto it = regions_.begin(); it != regions_.end(); ++it) {
    auto& r = *it;
    if (c < r.base || c >= r.base + r.size)
      continue;
    auto off = static_cast<std::size_t>(c - r.base);
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
    if (r.used == 0) {
      unmap(r);
      regions_.erase(it);
    }
    return;
  }
}

std::size_t huge_page_arena::mapped_bytes() const noexcept {
  std::size_t n = 0;
  for (auto& r : regions_)
    n += r.size;
  return n;
}

} // namespace exo::backend
