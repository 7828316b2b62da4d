#pragma once

/// The bulk channel: byte ranges of large blobs (model files, tensors)
/// streamed over a mutually authenticated TLS connection of their own,
/// beside CAF's.
///
/// Why a second connection: CAF 0.17's BASP serialises every message into a
/// buffer, OpenSSL encrypts that into its own, the far side decrypts into a
/// read buffer, copies it into a message buffer and deserialises it into a
/// fresh vector, and each hop crosses a thread (docs/benchmarks.md, "Cluster
/// transport"). Here the server encrypts straight from the blob's memory
/// (a mapped file) and the client decrypts straight into its destination,
/// on threads of their own: one copy less on each side and no hand-offs.
///
/// Security is the same as CAF's transport: TLS 1.3, the cluster CA, a
/// certificate required from both ends. The client also checks that the
/// server's certificate names the node it meant to reach; the server serves
/// only blobs its owner registered (bulk_blobs), and only to holders of a
/// node certificate. Nothing a peer sends is trusted: the request is read
/// with bounded lengths and checked against the blob, the client reads
/// exactly the length it asked for, and every socket has a timeout, so a
/// stalled or hostile peer costs one thread for at most that long.
///
/// Wire format (after the handshake; integers big-endian):
///   request  "EXOB" | u16 version (1) | u16 id length (1..128) | id bytes
///            | u64 offset | u64 length
///   response u32 status (0 = ok) | u32 message length (<= 1024) | message
///            then, when ok, exactly `length` bytes of the blob
/// Requests follow one another on a connection until the client closes it;
/// a refused request ends the connection.

#include "core/tls/material.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace exo::tls {

/// Longest blob id (exo uses SHA-256 hex digests: 64).
constexpr std::size_t bulk_max_id = 128;

/// The blobs a node serves, by id. Thread-safe: the node's actors add and
/// remove, the server's threads look up.
class bulk_blobs {
 public:
  /// Maps `path` read-only and serves it as `id` (replacing an earlier one).
  /// @throws std::runtime_error naming the file.
  void add_file(const std::string& id, const std::string& path);

  /// Serves `size` bytes at `data`, kept alive by `owner`.
  void add_memory(const std::string& id, std::shared_ptr<const void> owner,
                  const std::uint8_t* data, std::uint64_t size);

  void remove(const std::string& id);

  struct view {
    std::shared_ptr<const void> owner; ///< keeps `data` valid
    const std::uint8_t* data = nullptr;
    std::uint64_t size = 0;
  };

  /// Returns the blob, or an empty view (data == nullptr) when unknown.
  view find(const std::string& id) const;

 private:
  mutable std::mutex mtx_;
  std::map<std::string, view> blobs_;
};

struct bulk_server_stats {
  std::uint64_t connections = 0; ///< accepted
  std::uint64_t served = 0;      ///< requests answered with data
  std::uint64_t refused = 0;     ///< handshakes or requests refused
  std::uint64_t bytes = 0;       ///< blob bytes sent
};

/// Accepts bulk connections on one address and serves `blobs`.
class bulk_server {
 public:
  struct options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0; ///< 0: an ephemeral port (see port())
    std::size_t max_connections = 16; ///< more are closed at once
    std::chrono::milliseconds io_timeout{10000}; ///< per socket operation
  };

  /// Checks `files` (check_material), binds and starts the accept thread.
  /// @throws tls_error for bad material, std::runtime_error when binding
  ///         fails.
  bulk_server(const material& files, std::shared_ptr<bulk_blobs> blobs,
              options opts);

  /// Stops accepting, closes every connection and joins the threads.
  ~bulk_server();

  bulk_server(const bulk_server&) = delete;
  bulk_server& operator=(const bulk_server&) = delete;

  std::uint16_t port() const noexcept;
  bulk_server_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// A connection to one bulk server for several fetches in a row (one TLS
/// handshake). Blocking; one thread at a time.
class bulk_session {
 public:
  /// Connects to host:port; the server's certificate must name
  /// `expected_node`.
  /// @throws tls_error for bad material or another server;
  ///         std::runtime_error when it cannot connect.
  bulk_session(const material& files, const std::string& host,
               std::uint16_t port, const std::string& expected_node,
               std::chrono::milliseconds io_timeout
               = std::chrono::milliseconds{10000});
  ~bulk_session();
  bulk_session(const bulk_session&) = delete;
  bulk_session& operator=(const bulk_session&) = delete;

  /// Fetches `length` bytes at `offset` of blob `id`; calls `sink` with
  /// consecutive pieces (at most 4 MiB). After a refusal or an error the
  /// session is unusable. @throws std::runtime_error naming the server.
  void fetch(const std::string& id, std::uint64_t offset,
             std::uint64_t length,
             const std::function<void(const std::uint8_t*, std::size_t)>&
               sink);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Fetches `length` bytes at `offset` of blob `id` from the bulk server at
/// host:port (one bulk_session, one fetch), whose certificate must name `expected_node`. Calls `sink` with
/// consecutive pieces (at most 4 MiB each) as they are decrypted; `sink`
/// may throw to abort. Returns when all `length` bytes have arrived.
/// @throws tls_error for bad material or a server that is not
///         `expected_node`; std::runtime_error naming the server for a
///         refused request, a timeout, a short or broken stream.
void bulk_fetch(const material& files, const std::string& host,
                std::uint16_t port, const std::string& expected_node,
                const std::string& id, std::uint64_t offset,
                std::uint64_t length,
                const std::function<void(const std::uint8_t*, std::size_t)>&
                  sink,
                std::chrono::milliseconds io_timeout
                = std::chrono::milliseconds{10000});

} // namespace exo::tls
