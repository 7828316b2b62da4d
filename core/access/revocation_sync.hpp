#pragma once

#include "core/access/revocation_store.hpp"
#include "core/access/token.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace exo::access {

/// Revocation catch-up between nodes (anti-entropy), the pure part.
///
/// A node that was down (or not yet joined) during a revocation's broadcast
/// learns it when it (re)joins: the access service of every node sends each
/// member it sees (re)appear its whole revocation list, the peer applies
/// and persists what it lacks and answers with what the sender lacks, so
/// one exchange in either direction makes both lists equal.
///
/// Wire form: text, one entry a line,
///
///   token ID EXPIRES_AT MAC
///   principal NAME THROUGH MAC
///
/// MAC = hex HMAC-SHA256(access key, "exo-revocation\n" KIND " " NAME " " AT).
///
/// Trust: the same as the relay path's. A relayed `token revoke` is applied
/// because it carries an admin token, i.e. a MAC made with the shared access
/// key; a catch-up entry is applied because it carries a MAC made with that
/// same key. Only holders of the key (every node, and nobody else: clients
/// only ever see tokens) can make either, and a key holder could mint an
/// admin token anyway, so catch-up trusts a peer no more than a relay does.
/// Beyond the MAC every entry is validated like a relayed one: a name of 1
/// to 256 printable characters, a principal's THROUGH at most a minute
/// ahead of this node's clock and a token's expiry at most the longest
/// token lifetime (plus a minute) ahead (later values are clamped, as the
/// relay clamps `through=`), and entries that can no longer matter are
/// dropped. A message holds at most `max_sync_entries` lines and
/// `max_sync_bytes` bytes; more is refused whole.
inline constexpr std::size_t max_sync_entries = 4096;
inline constexpr std::size_t max_sync_bytes = 1 << 20;

/// The revocations a node knows, one entry per (kind, name) with the
/// latest time (a later through/expiry covers an earlier one).
class revocation_set {
public:
  /// Adds `r`; true when it is new or later than the known entry.
  bool add(const revocation& r);

  /// Whether an entry covers `r` (same kind and name, a time >= r.at).
  bool knows(const revocation& r) const;

  /// Every entry, newest first, at most `limit`.
  std::vector<revocation> entries(std::size_t limit = max_sync_entries) const;

  /// Entries of this set that `other` lacks or knows with an earlier time.
  std::vector<revocation> missing_from(const std::vector<revocation>& other,
                                       std::size_t limit
                                       = max_sync_entries) const;

  /// Forgets entries that can no longer matter.
  void sweep(std::int64_t now, std::int64_t max_ttl_s);

  std::size_t size() const noexcept { return known_.size(); }

private:
  std::map<std::pair<revocation::kind, std::string>, std::int64_t> known_;
};

/// Encodes entries with their MACs (at most max_sync_entries of them).
std::string encode_revocations(const std::vector<revocation>& rs,
                               const hmac_sha256& mac);

/// What a peer's list held.
struct decoded_revocations {
  std::vector<revocation> accepted; ///< valid, MAC checked, still live
  std::size_t rejected = 0;         ///< malformed lines or bad MACs
  std::size_t stale = 0;            ///< valid but no longer mattering
  std::string error; ///< non-empty: refused whole (too large)
};

/// Decodes and validates a peer's list (see above). Never throws.
decoded_revocations decode_revocations(const std::string& text,
                                       const hmac_sha256& mac,
                                       std::int64_t now,
                                       std::int64_t max_ttl_s);

} // namespace exo::access
