#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exo::tls {
class private_key;
class trust_store;
} // namespace exo::tls

namespace exo::audit {

/// A signed audit checkpoint: node `node` states, with its own key, that its
/// log holds records 1..`seq` and that the hash of record `seq` is `head`.
/// Whoever holds the log files can recompute the hash chain, but not this
/// signature: a checkpoint kept elsewhere (by the node's peers, see the
/// witness functions below) reveals a cut tail (the log ends before `seq`),
/// a dropped head (the log does not start at record 1) and a rewrite with
/// recomputed hashes (record `seq` has another hash).
///
/// Checkpoints form a chain of their own: each names the one signed before
/// it (`prev_seq`, `prev_head`; 0 and 64 zeros for a node's first) and
/// carries its chain's id (`chain`, 64 random hex digits drawn when the
/// chain starts: on a node's first start, or when its log no longer holds
/// what its latest checkpoint says). A witness holding an earlier
/// checkpoint thus tells a continuation from a new history (a log cut or
/// rewritten, then continued past the held seq), even across checkpoints
/// it missed.
///
/// On disk and on the wire a checkpoint is one JSON line (no '\n'):
///
///   {"checkpoint":1,"node":"n1","seq":1200,"head":"<64 hex>",
///    "prev_seq":1000,"prev_head":"<64 hex>","chain":"<64 hex>",
///    "time":1700000000,
///    "cert":"-----BEGIN CERTIFICATE-----...","sig":"<hex>"}
///
/// The signature covers `canonical_text` (the context string
/// "exo-audit-checkpoint-v1" and every field but cert and sig), made with
/// tls::sign_message: ECDSA-SHA256 or Ed25519 by the node's key.
struct checkpoint {
  std::string node;
  std::uint64_t seq = 0;  ///< records 1..seq; at least 1
  std::string head;       ///< hash of record `seq` (64 hex)
  std::uint64_t prev_seq = 0; ///< seq of the checkpoint before (0: none)
  std::string prev_head;      ///< its head (64 zeros when none)
  std::string chain;          ///< id of this chain of checkpoints (64 hex)
  std::int64_t time = 0;  ///< when it was signed, seconds since the epoch
  std::string cert_pem;   ///< the signer's node certificate
  std::vector<std::uint8_t> sig;
};

/// The context string at the start of every signed checkpoint text.
inline constexpr std::string_view checkpoint_context =
  "exo-audit-checkpoint-v1";

/// The longest checkpoint line accepted (a peer sends them).
inline constexpr std::size_t max_checkpoint_line = 24 * 1024;

/// The text that is signed: context, node, seq, head, prev_seq, prev_head,
/// chain and time, one per line.
std::string canonical_text(const checkpoint& cp);

/// Signs a checkpoint of `node`'s log that follows `prev` (the node's
/// checkpoint before it, whose chain it continues; none: a new chain). Throws `audit_error` for bad
/// fields (a name that is not a node name, seq 0, a head that is not 64
/// hex, a `prev` of another node or not below `seq`) and when signing
/// fails.
checkpoint sign_checkpoint(std::string node, std::uint64_t seq,
                           std::string head, std::int64_t time,
                           std::string cert_pem, const tls::private_key& key,
                           const checkpoint* prev = nullptr);

/// The JSON line of `cp`, without '\n'.
std::string to_line(const checkpoint& cp);

/// Parses one checkpoint line (with or without its '\n'), checking every
/// field: only the ten keys above, each of its type, a node name, seq in
/// 1..2^63, a 64-hex head, prev_seq below seq (64 zeros as prev_head when
/// 0), a 64-hex chain, a time in 0..2^40, a bounded PEM and a bounded, even
/// hex signature. Does not check the signature. Throws `audit_error`
/// naming the problem.
checkpoint parse_checkpoint(std::string_view line);

/// Checks the signature of `cp`: its certificate is a node certificate
/// within its validity that chains to `ca`, its CN is `cp.node`, and `sig`
/// signs `canonical_text(cp)` with its key. Throws `audit_error` naming the
/// problem.
void verify_checkpoint(const checkpoint& cp, const tls::trust_store& ca);

/// parse_checkpoint, then verify_checkpoint.
checkpoint read_checkpoint(std::string_view line, const tls::trust_store& ca);

/// Reads every non-empty line of a checkpoint file (a node's own
/// <state_dir>/audit/checkpoints or a peer's witness/<node>.checkpoint) and
/// verifies each. Throws `audit_error` naming the file, the line and the
/// problem (a file that is not a regular file, or over 64 MiB, included).
std::vector<checkpoint> load_checkpoints(const std::string& path,
                                         const tls::trust_store& ca);

/// "checkpoint of n1 signed at 2026-11-27T02:00:00Z".
std::string describe(const checkpoint& cp);

/// UTC ISO 8601 form of seconds since the epoch.
std::string format_utc(std::int64_t unix_seconds);

// -- the node's own checkpoints ----------------------------------------------

/// Appends `cp`'s line to `path` (created 0600, fsync'd). When the file
/// holds more than 2 * `keep` lines afterwards, it is replaced (atomically)
/// by its last `keep` lines. Throws `audit_error`.
void append_checkpoint(const std::string& path, const checkpoint& cp,
                       std::size_t keep);

// -- witnessing peers' checkpoints --------------------------------------------

/// How an offered checkpoint relates to the one a witness holds.
enum class witness_verdict {
  first,    ///< none held: keep it
  newer,    ///< a higher seq: keep it
  same,     ///< the same seq and head: nothing to do
  rollback, ///< a lower seq than held: the log was cut or restarted
  fork,     ///< the same seq and another head, or a higher seq of
            ///< another chain or whose chain skips the held one
};

/// "first", "newer", "same", "rollback", "fork".
const char* to_string(witness_verdict v) noexcept;

/// Compares `offered` with what a witness `held` (both of the same node).
/// A higher seq is `newer` when it is of the same chain and its prev is the
/// held checkpoint or lies beyond it (the witness missed some), and a
/// `fork` when it is of another chain, or its prev lies before the held one
/// or is the held seq with another head.
witness_verdict compare(const std::optional<checkpoint>& held,
                        const checkpoint& offered) noexcept;

/// Path of the witness file for `node` in `dir`: "<dir>/<node>.checkpoint".
/// Throws `audit_error` when `node` is not a node name.
std::string witness_path(const std::string& dir, std::string_view node);

/// Reads the checkpoint held in a witness file; nothing when there is none.
/// Throws `audit_error` for an unreadable or invalid file.
std::optional<checkpoint> read_witness(const std::string& path,
                                       const tls::trust_store& ca);

/// Replaces the witness file's content by `cp` (temp file, fsync, rename;
/// 0600). Throws `audit_error`.
void write_witness(const std::string& path, const checkpoint& cp);

/// Appends `cp` to the evidence file `path` (0600) unless it holds
/// `max_lines` lines already. Throws `audit_error`.
void keep_evidence(const std::string& path, const checkpoint& cp,
                   std::size_t max_lines = 100);

} // namespace exo::audit
