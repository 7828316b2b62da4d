#pragma once

/// Keys of prompt prefixes whose KV rows a stage keeps after the job that
/// read them (the prefix cache: a system prompt, a chat's history, read
/// once for the jobs that start with it).
///
/// A prompt is read in pieces of a step's tokens from its start
/// (actors/workload/job_actor.cpp): rows [0, P) for P a multiple of the
/// piece are computed from those P tokens alone, in the same pieces,
/// whatever follows them. A later prompt that starts with the same P
/// tokens gets those rows bit for bit when it takes a copy, and reads
/// the rest in the pieces it is cut into alone. So the keys are of whole
/// pieces only, and at least one token is left to read (its logits are
/// the first token's).
///
/// A key is the first 8 bytes of the SHA-256 of the P token ids (32-bit
/// little endian) and P: a prompt that is not the prefix does not find
/// its rows (no one crafts a collision with a known prompt), and 0 is
/// never a key.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace exo::workload {

/// One prefix of a prompt: its length and its key.
struct prefix_key {
  std::uint32_t n = 0;
  std::uint64_t key = 0;

  friend bool operator==(const prefix_key& a, const prefix_key& b) {
    return a.n == b.n && a.key == b.key;
  }
};

/// Most prefixes of one prompt (the longest kept).
constexpr std::size_t max_prefix_keys = 256;

/// The prefixes of `tokens` at every multiple of `piece` that leaves at
/// least one token (n = piece, 2 piece, ... < size), shortest first; at
/// most max_prefix_keys of them (the longest). None when piece is 0.
std::vector<prefix_key> prefix_keys(const std::vector<std::int32_t>& tokens,
                                    std::uint32_t piece);

} // namespace exo::workload
