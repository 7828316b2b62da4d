#pragma once

/// Model files by content: the SHA-256 of a GGUF file names it across
/// nodes, and a node keeps the parts it received from a coordinator (the
/// header and the tensors of the layer ranges it ran) in
/// <state_dir>/models/<sha256>/model.gguf so a second run does not send
/// them again. No CAF inside.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace exo::workload {

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

/// Most parts a model transfer may name (a stage needs the header, a range
/// per layer or per tensor, and a few global tensors; bounded because the
/// list comes from a peer).
constexpr std::size_t max_model_parts = 2048;

/// Largest model file a peer may announce (sparse files make the size
/// itself cheap; the bound keeps offsets far from overflow).
constexpr std::uint64_t max_model_bytes = std::uint64_t{1} << 42;

/// One byte range of a model file and the SHA-256 of its bytes, as the
/// coordinator computed it: what a node without the file fetches and
/// verifies. Travels in shard_spec (messages/workload.hpp).
struct model_part {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::string sha256;

  friend bool operator==(const model_part& a, const model_part& b) {
    return a.offset == b.offset && a.length == b.length
           && a.sha256 == b.sha256;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_part& x) {
  return f(x.offset, x.length, x.sha256);
}

/// Hex SHA-256 of `length` bytes at `offset` of the file at `path`.
std::string range_sha256(const std::string& path, std::uint64_t offset,
                         std::uint64_t length);

/// Checks parts a peer sent against the model's size: 1 to max_model_parts
/// parts, in order, not overlapping, inside the file, each non-empty with a
/// well-formed digest, the first at offset 0 (the GGUF header). Throws
/// model_cache_error naming the first problem.
void check_parts(const std::vector<model_part>& parts, std::uint64_t size);

/// The parts of one model this node holds: <state_dir>/models/<sha256>/
/// model.gguf, `size` bytes with holes where parts are missing (a sparse
/// file: the holes take no disk), and beside it `parts`, one verified part
/// per line ("offset length sha256"). A part is recorded only after its
/// bytes were written, digest-checked and flushed, so the manifest never
/// names bytes that are not there. Not thread-safe: one user at a time.
class partial_model {
public:
  /// Opens or creates the file (a file of another size starts over).
  /// Throws model_cache_error.
  partial_model(const std::string& state_dir, const std::string& sha256,
                std::uint64_t size);
  ~partial_model();
  partial_model(const partial_model&) = delete;
  partial_model& operator=(const partial_model&) = delete;

  /// The parts of `wanted` not yet held (none once the whole file is: a
  /// part from offset 0 over `size` bytes, its digest the file's own).
  std::vector<model_part> missing(const std::vector<model_part>& wanted) const;

  /// Receives one part: call write() with its bytes in order, then
  /// commit(). Throws model_cache_error past the part's length, on a short
  /// part or a digest mismatch (the part is then not recorded).
  void begin(const model_part& part);
  void write(const std::uint8_t* data, std::size_t n);
  void commit();

  std::string path() const;
  std::uint64_t size() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace exo::workload
