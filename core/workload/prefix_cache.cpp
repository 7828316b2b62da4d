#include "core/workload/prefix_cache.hpp"

#include <algorithm>

namespace exo::workload {

bool prefix_cache::touch(std::uint64_t key) {
  auto by = by_key_.find(key);
  if (by == by_key_.end())
    return false;
  entries_.at(by->second.first).used = ++clock_;
  return true;
}

prefix_cache::iterator prefix_cache::drop(iterator it,
                                          std::vector<cache_id>& dropped) {
  dropped.push_back(it->second.cache);
  bytes_ -= it->second.bytes;
  ++dropped_;
  const auto id = it->first;
  auto keys = std::move(it->second.keys);
  auto next = entries_.erase(it);
  for (auto& k : keys) {
    auto by = by_key_.find(k.key);
    if (by == by_key_.end() || by->second.first != id)
      continue;
    by_key_.erase(by);
    for (auto& [other, e] : entries_)
      if (std::find(e.keys.begin(), e.keys.end(), k) != e.keys.end()) {
        by_key_[k.key] = {other, k.n};
        break;
      }
  }
  return next;
}

bool prefix_cache::make_room(std::uint64_t need,
                             std::vector<cache_id>& dropped) {
  if (need > budget_)
    return false;
  while (bytes_ + need > budget_) {
    auto lru = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.holders.empty()
          && (lru == entries_.end() || it->second.used < lru->second.used))
        lru = it;
    if (lru == entries_.end())
      return false;
    drop(lru, dropped);
  }
  return true;
}

void prefix_cache::add(cache_id cache, std::uint64_t bytes,
                       const std::vector<prefix_key>& keys) {
  const auto id = next_++;
  entry e;
  e.cache = cache;
  e.bytes = bytes;
  e.used = ++clock_;
  e.keys = keys;
  for (auto& k : keys)
    by_key_.emplace(k.key, std::make_pair(id, k.n));
  bytes_ += bytes;
  entries_.emplace(id, std::move(e));
}

std::vector<std::uint64_t>
prefix_cache::claim(const std::vector<std::uint64_t>& keys, const holder& h) {
  std::vector<std::uint64_t> held;
  for (auto key : keys) {
    auto by = by_key_.find(key);
    if (by == by_key_.end())
      continue;
    auto& e = entries_.at(by->second.first);
    e.holders.insert(h);
    e.used = ++clock_;
    held.push_back(key);
  }
  return held;
}

std::optional<prefix_cache::cache_id>
prefix_cache::claimed(std::uint64_t key, std::uint32_t n, const holder& h) {
  auto by = by_key_.find(key);
  if (by == by_key_.end() || by->second.second != n)
    return std::nullopt;
  auto& e = entries_.at(by->second.first);
  if (e.holders.count(h) == 0)
    return std::nullopt;
  e.used = ++clock_;
  return e.cache;
}

std::vector<prefix_cache::cache_id> prefix_cache::drop_unheld() {
  std::vector<cache_id> dropped;
  for (auto it = entries_.begin(); it != entries_.end();)
    it = it->second.holders.empty() ? drop(it, dropped) : std::next(it);
  return dropped;
}

void prefix_cache::let_go(const holder& h) {
  for (auto& kv : entries_)
    kv.second.holders.erase(h);
}

void prefix_cache::let_go_slot(std::uint64_t slot) {
  for (auto& kv : entries_)
    for (auto it = kv.second.holders.begin(); it != kv.second.holders.end();)
      it = it->first == slot ? kv.second.holders.erase(it) : std::next(it);
}

} // namespace exo::workload
