#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace exo::access {

class access_policy;

/// One revocation: a token id (valid until `at`, its latest expiry) or a
/// principal (every token issued up to `at`, Unix seconds).
struct revocation {
  enum class kind : std::uint8_t { token, principal };
  kind what = kind::token;
  std::string name;
  std::int64_t at = 0;

  bool operator==(const revocation& o) const {
    return what == o.what && name == o.name && at == o.at;
  }
};

/// Revocations that survive a restart: an append-only text file (0600) in
/// the node's state directory, one line per revocation:
///
///   token ID EXPIRES_AT
///   principal NAME THROUGH
///
/// `append` writes and fsyncs the line before the revocation is reported
/// done. `load` reads what is there (a torn or malformed line is skipped
/// and counted, never fatal) and rewrites the file without entries that no
/// longer matter: a token revocation after its expiry, a principal's after
/// `max_ttl_s` (no token issued up to then can still be valid). Not
/// thread-safe: one owner.
class revocation_store {
public:
  explicit revocation_store(std::string path) : path_(std::move(path)) {}

  /// Throws std::runtime_error when the file exists but cannot be read or
  /// rewritten.
  std::vector<revocation> load(std::int64_t now, std::int64_t max_ttl_s);

  /// Throws std::invalid_argument for an empty name or one with whitespace,
  /// std::runtime_error when the line cannot be written durably.
  void append(const revocation& r);

  /// Malformed lines skipped by the last `load`.
  std::size_t skipped() const noexcept { return skipped_; }

  const std::string& path() const noexcept { return path_; }

private:
  std::string path_;
  std::size_t skipped_ = 0;
};

/// Applies loaded revocations to a policy.
void apply_revocations(access_policy& policy,
                       const std::vector<revocation>& rs);

} // namespace exo::access
