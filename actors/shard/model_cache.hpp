#pragma once

/// Model files by content: the SHA-256 of a GGUF file names it across
/// nodes, and a node keeps the files it received from a coordinator in
/// <state_dir>/models/<sha256>/model.gguf so a second run does not send
/// them again. No CAF inside.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace exo::shard {

/// A file that cannot be hashed, written or verified; what() says why.
class model_cache_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Hex SHA-256 of the file at `path` (memoized per path, size and mtime).
std::string file_sha256(const std::string& path);

/// Size of the file at `path`; throws model_cache_error.
std::uint64_t file_size(const std::string& path);

/// Whether `s` looks like a hex SHA-256 digest (64 lowercase hex digits):
/// digests name directories, so nothing else is accepted.
bool is_sha256(const std::string& s);

/// <state_dir>/models/<sha256>/model.gguf.
std::string cached_model_path(const std::string& state_dir,
                              const std::string& sha256);

/// Receives one file in order, hashing as it goes: writes to a temporary
/// name and moves it into the cache only when size and digest match.
class model_download {
public:
  model_download(const std::string& state_dir, const std::string& sha256,
                 std::uint64_t size);
  ~model_download(); ///< removes an unfinished temporary file
  model_download(const model_download&) = delete;
  model_download& operator=(const model_download&) = delete;

  /// Appends the next bytes; throws model_cache_error past the size.
  void append(const std::uint8_t* data, std::size_t n);

  std::uint64_t received() const {
    return received_;
  }

  /// Checks size and digest and moves the file into place; returns its
  /// path. Throws model_cache_error naming the mismatch.
  std::string finish();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::uint64_t received_ = 0;
};

} // namespace exo::shard
