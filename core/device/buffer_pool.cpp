#include "core/device/buffer_pool.hpp"

#include <iterator>

namespace exo::device {

using backend::errc;
using backend::fail;

buffer_pool::buffer_pool(backend::device& dev, std::uint64_t cache_limit,
                         std::uint64_t salt, clock::duration max_idle,
                         std::function<clock::time_point()> now)
  : dev_(dev),
    cache_limit_(cache_limit),
    salt_(salt),
    max_idle_(max_idle),
    now_(std::move(now)) {
}

buffer_pool::~buffer_pool() = default;

std::uint64_t buffer_pool::size_class(std::uint64_t bytes) noexcept {
  constexpr std::uint64_t min = 4096;
  constexpr std::uint64_t pow2_max = 64u << 20;
  constexpr std::uint64_t step = 1u << 20;
  if (bytes <= min)
    return min;
  if (bytes <= pow2_max) {
    std::uint64_t c = min;
    while (c < bytes)
      c <<= 1;
    return c;
  }
  if (bytes > UINT64_MAX - step)
    return bytes;
  return (bytes + step - 1) / step * step;
}

result<std::uint64_t> buffer_pool::allocate(std::uint64_t bytes) {
  if (bytes == 0)
    return fail(errc::invalid_argument, "allocate: size must be > 0");
  auto cls = size_class(bytes);
  if (cls > dev_.properties().max_allocation)
    cls = bytes; // no room to round up: ask for exactly what is needed
  std::unique_ptr<backend::buffer> buf;
  // The newest of a class is reused (equal keys keep their order), so
  // that buffers beyond what the work reuses age out (trim_idle).
  auto newest = [&](std::uint64_t key) {
    auto end = cache_.upper_bound(key);
    return end != cache_.begin() && std::prev(end)->first == key
             ? std::prev(end)
             : cache_.end();
  };
  auto it = newest(cls);
  if (it == cache_.end())
    it = newest(bytes); // one allocated unrounded (below)
  if (it != cache_.end()) {
    cls = it->first;
    buf = std::move(it->second.buf);
    cache_.erase(it);
    cached_bytes_ -= cls;
    ++reused_;
  } else {
    auto made = dev_.allocate(static_cast<std::size_t>(cls));
    if (!made && made.err().code == errc::out_of_memory && !cache_.empty()) {
      trim();
      made = dev_.allocate(static_cast<std::size_t>(cls));
    }
    if (!made && made.err().code == errc::out_of_memory && cls > bytes) {
      // Rounding is for reuse, never a reason to fail: placement counts
      // the bytes asked for, so a plan that fits them must run.
      made = dev_.allocate(static_cast<std::size_t>(bytes));
    }
    if (!made)
      return made.err();
    buf = std::move(*made);
  }
  return add(std::move(buf), bytes);
}

status buffer_pool::resize(std::uint64_t handle, std::uint64_t bytes) {
  if (bytes == 0)
    return fail(errc::invalid_argument, "resize: size must be > 0");
  if (bytes > SIZE_MAX)
    return fail(errc::out_of_memory, "resize: too large");
  auto it = live_.find(handle);
  if (it == live_.end())
    return fail(errc::invalid_argument,
                "resize: unknown handle " + std::to_string(handle));
  auto& e = it->second;
  if (e.adopted)
    return fail(errc::invalid_argument,
                "resize: handle " + std::to_string(handle)
                  + " is host memory read in place");
  auto cls = size_class(bytes);
  if (cls > dev_.properties().max_allocation)
    cls = bytes;
  if (cls != e.buf->size() && bytes != e.buf->size()) {
    auto to = [&](std::uint64_t n) {
      return dev_.resize(*e.buf, static_cast<std::size_t>(n));
    };
    auto st = to(cls);
    if (!st && st.err().code == errc::out_of_memory && !cache_.empty()) {
      trim();
      st = to(cls);
    }
    if (!st && st.err().code == errc::out_of_memory && cls > bytes)
      st = to(bytes); // rounding is never a reason to fail (allocate)
    if (!st)
      return st;
  }
  live_bytes_ = live_bytes_ - e.size + bytes;
  e.size = bytes;
  return {};
}

result<std::uint64_t> buffer_pool::adopt(const void* data, std::uint64_t bytes,
                                         std::shared_ptr<const void> keep) {
  if (bytes > SIZE_MAX)
    return fail(errc::out_of_memory, "adopt: too large");
  auto made = dev_.adopt_host(data, static_cast<std::size_t>(bytes), keep);
  if (!made && made.err().code == errc::out_of_memory && !cache_.empty()) {
    trim();
    made = dev_.adopt_host(data, static_cast<std::size_t>(bytes), keep);
  }
  if (!made)
    return made.err();
  auto id = add(std::move(*made), bytes);
  live_.at(id).adopted = true;
  return id;
}

std::uint64_t buffer_pool::add(std::unique_ptr<backend::buffer> buf,
                               std::uint64_t bytes) {
  // Ids are a salted counter: unique, opaque, and meaningless elsewhere.
  auto id = (next_++ * 0x9E3779B97F4A7C15ull) ^ salt_;
  live_.emplace(id, entry{std::move(buf), bytes});
  live_bytes_ += bytes;
  return id;
}

status buffer_pool::release(std::uint64_t handle) {
  auto it = live_.find(handle);
  if (it == live_.end())
    return fail(errc::invalid_argument,
                "free: unknown handle " + std::to_string(handle));
  auto cls = it->second.buf->size();
  live_bytes_ -= it->second.size;
  // Adopted memory is its owner's: never handed out again.
  if (!it->second.buf->read_only() && cached_bytes_ + cls <= cache_limit_) {
    cache_.emplace(cls, cached{std::move(it->second.buf), now_()});
    cached_bytes_ += cls;
  }
  live_.erase(it);
  trim_idle();
  return {};
}

result<backend::buffer*> buffer_pool::resolve(std::uint64_t handle,
                                              std::uint64_t offset,
                                              std::uint64_t len) const {
  auto it = live_.find(handle);
  if (it == live_.end())
    return fail(errc::invalid_argument,
                "unknown handle " + std::to_string(handle));
  auto size = it->second.size;
  if (offset > size || len > size - offset)
    return fail(errc::out_of_range,
                "range [" + std::to_string(offset) + ", +"
                  + std::to_string(len) + ") exceeds allocation of "
                  + std::to_string(size) + " bytes");
  return it->second.buf.get();
}

result<backend::mut_view> buffer_pool::view(std::uint64_t handle,
                                            std::uint64_t offset) const {
  auto it = live_.find(handle);
  if (it == live_.end())
    return fail(errc::invalid_argument,
                "unknown handle " + std::to_string(handle));
  return backend::mut_view{it->second.buf.get(),
                           static_cast<std::size_t>(offset),
                           static_cast<std::size_t>(it->second.size)};
}

result<std::uint64_t> buffer_pool::size_of(std::uint64_t handle) const {
  auto it = live_.find(handle);
  if (it == live_.end())
    return fail(errc::invalid_argument,
                "unknown handle " + std::to_string(handle));
  return it->second.size;
}

std::uint64_t buffer_pool::footprint(std::uint64_t handle) const noexcept {
  auto it = live_.find(handle);
  if (it == live_.end()
      || (it->second.adopted && !dev_.counts_adopted_memory()))
    return 0;
  return it->second.buf->size();
}

void buffer_pool::trim() {
  cache_.clear();
  cached_bytes_ = 0;
}

void buffer_pool::trim_idle() {
  if (max_idle_ <= clock::duration::zero() || cache_.empty())
    return;
  const auto now = now_();
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (now - it->second.since > max_idle_) {
      cached_bytes_ -= it->first;
      it = cache_.erase(it);
    } else {
      ++it;
    }
  }
}

} // namespace exo::device
