#pragma once

/// The bookkeeping of a stage's prefix cache (messages/workload.hpp
/// retain_atom, claim_atom): which kept copies of prompt rows exist, the
/// keys that find them (core/workload/prefix_key.hpp), which jobs hold
/// them, and which go when the budget or the device needs room. Plain
/// logic: the shard keeps the rows themselves (device_stage caches) and
/// drops the caches this class names.

#include "core/workload/prefix_key.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace exo::workload {

class prefix_cache {
public:
  /// A device_stage cache holding kept rows.
  using cache_id = std::uint64_t;
  /// Who holds an entry: (shard slot id, job).
  using holder = std::pair<std::uint64_t, std::uint64_t>;

  explicit prefix_cache(std::uint64_t budget = 0) : budget_(budget) {
  }

  std::uint64_t budget() const noexcept {
    return budget_;
  }
  /// Whether an entry is found by `key`; a kept one is marked as used.
  bool touch(std::uint64_t key);

  /// Room for `need` more bytes within the budget: drops the least
  /// recently used entries no job holds (their caches appended to
  /// `dropped`); false when that is not enough (or need exceeds the
  /// budget).
  bool make_room(std::uint64_t need, std::vector<cache_id>& dropped);

  /// Keeps `cache` (`bytes` on the device) for the prefixes `keys` (its
  /// rows are those of the longest); a key already found by another entry
  /// stays with it.
  void add(cache_id cache, std::uint64_t bytes,
           const std::vector<prefix_key>& keys);

  /// The keys of `keys` an entry is found by; each such entry is held by
  /// `h` (never dropped) until let_go.
  std::vector<std::uint64_t> claim(const std::vector<std::uint64_t>& keys,
                                   const holder& h);

  /// The cache of the entry found by `key` for a prefix of `n` positions,
  /// when `h` holds it (marked as used); none otherwise.
  std::optional<cache_id> claimed(std::uint64_t key, std::uint32_t n,
                                  const holder& h);

  /// Drops every entry no job holds (a sequence's cache could not grow);
  /// their caches.
  std::vector<cache_id> drop_unheld();

  /// `h` holds no entry any more.
  void let_go(const holder& h);
  /// Nor does any job of shard slot `slot`.
  void let_go_slot(std::uint64_t slot);

  std::size_t entries() const noexcept {
    return entries_.size();
  }
  std::size_t keys() const noexcept {
    return by_key_.size();
  }
  std::uint64_t bytes() const noexcept {
    return bytes_;
  }
  std::uint64_t dropped() const noexcept {
    return dropped_;
  }

private:
  struct entry {
    cache_id cache = 0;
    std::uint64_t bytes = 0;
    std::uint64_t used = 0; ///< when last kept or claimed (a counter)
    std::vector<prefix_key> keys;
    std::set<holder> holders;
  };
  using iterator = std::map<std::uint64_t, entry>::iterator;

  /// Drops entry `it`: its keys find another entry that holds them, if
  /// any; its cache appended to `dropped`.
  iterator drop(iterator it, std::vector<cache_id>& dropped);

  std::uint64_t budget_;
  std::map<std::uint64_t, entry> entries_; ///< by entry id
  /// Each key's entry and prefix length.
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint32_t>> by_key_;
  std::uint64_t next_ = 1;
  std::uint64_t bytes_ = 0;
  std::uint64_t clock_ = 0;
  std::uint64_t dropped_ = 0;
};

} // namespace exo::workload
