#pragma once

/// The access service: issues and revokes bearer tokens for the node's
/// shared policy (core/access/shared_policy.hpp), which the device actors
/// check on their own threads. Console command "token":
///
///   token issue principal=P role=R [devices=a,b|*] [quota=BYTES]
///               [ttl=SECONDS] auth=ADMIN_TOKEN       -> the new token
///   token revoke ID|principal=P auth=ADMIN_TOKEN      -> revoked everywhere
///   token limit principal=P rate=N[/s] [burst=B] auth=ADMIN_TOKEN
///                                                     -> set everywhere
///   token limits auth=TOKEN (monitoring_read)          -> the rate limits
///   token check TOKEN [perm=P] [device=D]             -> allow / code
///
/// Who is admin: the console's certificate name is not passed to services,
/// so issue/revoke carry a token with the policy_admin permission in
/// `auth=`. Every node verifies it itself with the shared HMAC key, so a
/// request relayed from a peer is trusted no more than one from a client.
/// The first admin token is written by the node to
/// <state_dir>/access/admin.token (0600): holding it means having read
/// access to a node's state directory.
///
/// A revocation is applied locally and appended to the revocations file
/// (fsynced, so it survives a restart), then broadcast through the gate as
/// ("token", "revoke ... relay=1 through=T") to every live peer (which
/// applies and persists it but does not relay it further), so it reaches
/// every node within one round trip; the reply says how many peers applied
/// it and how long that took. A principal's revocation covers tokens issued
/// up to T, the revoking node's clock (a peer whose clock is ahead uses its
/// own, never less).
///
/// Catch-up (core/access/revocation_sync.hpp): a node that was down or
/// not yet joined during the broadcast learns every revocation when it
/// (re)joins. Every `sync_interval` the service reads the gate's member
/// view; to each member it sees alive with an incarnation it has not
/// exchanged lists with yet, it sends (through the gate, service "token")
/// (token_atom, node, list): its revocations, each with an HMAC made with
/// the access key. The peer applies and persists what it lacks (audited
/// token_revoked + policy_change with relayed "sync") and answers with
/// what the sender lacks, which the sender applies the same way. Trust is
/// the relay path's: an entry is applied because it carries a MAC made
/// with the shared key, as a relayed revoke carries an admin token made
/// with it; lists and entries are bounded and validated.
///
/// A rate limit (`token limit`, rate 0: unlimited; burst defaults to the
/// rate rounded up, at least 1) replaces the principal's limit from the
/// node's default (safety.access_rate_per_s / access_burst) and is relayed
/// to every live peer like a revocation (audited as policy_change
/// "rate_limit" on every node). Limits are kept in memory only: a node
/// that restarts (or was down during the relay) has the default again
/// until an admin repeats the command.
/// Issue, revoke and every refusal are audited. Policy entries are swept
/// every `sweep_interval`.

#include "core/access/shared_policy.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace exo::access {

/// Longest lifetime of a token the node issues (the first admin token's
/// too); a principal's revocation is kept this long.
inline constexpr std::int64_t max_token_ttl_s = 30 * 86400;

struct access_actor_config {
  std::string node;
  std::shared_ptr<shared_policy> policy;
  std::string key; ///< the HMAC key (the same on every node)
  caf::actor audit; ///< optional
  caf::actor gate;  ///< optional: revocations reach peers through it
  std::chrono::milliseconds sweep_interval{60000};
  /// Longest lifetime of an issued token (also how long revocations of a
  /// token id are kept).
  std::int64_t max_ttl_s = max_token_ttl_s;
  /// Where revocations are appended (revocation_store) so that they survive
  /// a restart; empty: kept in memory only. The node loads the file into
  /// the policy before any device actor exists (runtime/node/safety.cpp).
  std::string revocations_file;
  /// How often the member view is polled for members to exchange
  /// revocation lists with (catch-up of revocations a node missed);
  /// 0: never. Needs `gate`.
  std::chrono::milliseconds sync_interval{500};
};

caf::actor spawn_access_actor(caf::actor_system& sys,
                              access_actor_config cfg);

/// Reads the key file at `path` (whitespace trimmed; at least 32 bytes),
/// creating it (0600, 64 hex digits from a CSPRNG) when it does not exist;
/// refused (text::file_error, with the chmod that fixes it) when other
/// users may read or change it, or when it is not a regular file.
/// Throws std::runtime_error naming the file.
std::string load_or_create_key(const std::string& path);

/// Issues an admin token for `principal` valid for `ttl_s` seconds.
std::string issue_admin_token(const std::string& key,
                              const std::string& principal,
                              std::int64_t ttl_s);

} // namespace exo::access
