#pragma once

// What a TLS peer may hold of a node: connections, buffered bytes, time and
// message rate (issue 23). Pure bookkeeping, no sockets and no OpenSSL: the
// TLS guard (ssl_error_queue_guard.cpp) feeds it what it sees of each
// connection's decrypted BASP stream and acts on its answers, and tests
// drive it directly.
//
// Why it is needed: CAF 0.17 allocates each BASP message's payload in full
// as soon as its 32-byte header announces the length, and keeps it until
// the last byte arrives. Without limits, any holder of a client certificate
// could open connections that each announce a large message and then send
// nothing: 30 connections held 2 GB of a node.
//
// The limits, per connection, per peer (the certificate's common name) and
// in total:
// - connections: at most `max_connections` open (handshakes included), at
//   most `max_connections_per_peer` per certificate name;
// - message size: a node certificate (serverAuth) may announce up to
//   `max_node_frame_bytes`, a client certificate (the console, clientAuth
//   only) up to `max_client_frame_bytes`: clients only send commands;
// - buffered bytes: the payloads announced and not yet complete count
//   against `max_buffered_per_peer` and `max_buffered_total`;
// - time: a handshake must finish within `handshake_timeout`, a message
//   that has started must make progress within `idle_timeout`;
// - rate: messages per second per connection (a token bucket);
// - replies not taken: a peer that does not read what the node sends it
//   makes CAF buffer the node's output in memory once the kernel's socket
//   buffers are full. Output that the peer does not acknowledge for
//   `idle_timeout` is dropped, and a client certificate may send at most
//   `max_client_unread_messages` messages while it is behind (the socket's
//   send buffer full, or half of it or more unread);
// - whom a client may address: CAF delivers a BASP message to any actor
//   whose handle ever crossed the wire (its id is in the registry), so a
//   client certificate could message the node's services directly and
//   pass by the gate's access checks. With `client_targets` set (exo-node
//   sets the gate), a client may send direct messages to those actors
//   and to actors that messaged it first only, to the named receivers in
//   `client_named_targets` only (CAF's own greeting goes to the spawn
//   server), and no routed messages.
// A connection that passes a limit is refused: the guard fails its next
// TLS call, CAF drops it, and the refusal is reported (and audited by the
// node).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace exo::tls {

struct connection_limits_config {
  std::uint32_t max_connections = 512;
  std::uint32_t max_connections_per_peer = 16;
  std::uint64_t max_node_frame_bytes = 64ull << 20;
  std::uint64_t max_client_frame_bytes = 1ull << 20;
  std::uint64_t max_buffered_per_peer = 256ull << 20;
  std::uint64_t max_buffered_total = 1ull << 30;
  std::chrono::milliseconds handshake_timeout{10000};
  std::chrono::milliseconds idle_timeout{30000};
  /// Messages per second per connection (0: unlimited) and the burst.
  double node_messages_per_s = 0;
  double client_messages_per_s = 1000;
  double message_burst = 2000;
  /// Messages a client certificate may send while the node's output to it
  /// waits for it to read (0: unlimited).
  std::uint32_t max_client_unread_messages = 64;
  /// The actors a client certificate may message (exo-node: its gate);
  /// empty: any.
  std::vector<std::uint64_t> client_targets;
  /// The named receivers (CAF atoms) a client may message when
  /// client_targets is set.
  std::vector<std::uint64_t> client_named_targets;
};

/// The fields of a BASP header (CAF 0.17: operation byte 0, flags byte 3,
/// source actor bytes 16..23, destination 24..31, big endian) the limits
/// look at.
struct basp_fields {
  std::uint8_t operation = 0;
  std::uint8_t flags = 0;
  std::uint64_t source = 0;
  std::uint64_t dest = 0;
};

/// One refused connection, as reported to the node (and its audit log).
struct connection_refusal {
  std::int64_t unix_ms = 0;
  std::string peer;    ///< the certificate's common name, or "" before it
  bool node = false;   ///< a node certificate
  std::string address; ///< "ip:port"
  std::string limit;   ///< which limit: "connections", "connections_per_peer",
                       ///< "frame_bytes", "buffered_per_peer",
                       ///< "buffered_total", "handshake_timeout",
                       ///< "idle_timeout", "message_rate", "tls_handshake",
                       ///< "output_stalled", "unread_replies",
                       ///< "client_target"
  std::string detail;  ///< a sentence for the operator
};

/// What the limits hold now.
struct connection_stats {
  std::size_t connections = 0;
  std::uint64_t buffered = 0;
  std::uint64_t refused = 0;
  std::uint64_t refusals_dropped = 0; ///< reports lost to a full queue
};

class connection_limits {
 public:
  using clock = std::chrono::steady_clock;
  using id = const void*;

  explicit connection_limits(connection_limits_config cfg = {});

  const connection_limits_config& config() const { return cfg_; }
  void configure(const connection_limits_config& cfg) { cfg_ = cfg; }

  /// A connection starts its handshake. False: refused (too many open).
  bool open(id c, std::string address, clock::time_point now);

  /// The handshake finished: the peer is `peer` (a node certificate when
  /// `node`). False: refused (too many connections of that peer).
  bool admit(id c, std::string peer, bool node, clock::time_point now);

  /// The TLS handshake failed (a bad certificate, a stranger): reported.
  void handshake_failed(id c, std::string detail);

  /// A message header announced `bytes` of payload. False: refused.
  bool announce(id c, std::uint64_t bytes, clock::time_point now);

  /// A BASP message header the peer sent. False: refused (a client
  /// addressing an actor that is neither a target nor one that messaged
  /// it).
  bool address(id c, const basp_fields& h);

  /// A BASP message header the node sent the peer: an actor of the node
  /// that messages a client may be answered by it (CAF's own greeting
  /// does; at most `max_contacts` remembered per connection, the oldest
  /// forgotten).
  void sent(id c, const basp_fields& h);

  static constexpr std::size_t max_contacts = 1024;

  /// `bytes` of payload (or header) arrived.
  void progress(id c, std::uint64_t bytes, clock::time_point now);

  /// The whole announced payload arrived: its bytes are released.
  void complete(id c);

  /// A sample of the node's output to the peer: `unsent` bytes the kernel
  /// holds, not yet acknowledged, of a send buffer of `buffer` bytes;
  /// `full` when the kernel takes no more (the socket is not writable: CAF
  /// keeps what follows in memory); `progressed` when the peer acknowledged
  /// bytes since the last sample. Output waits while unsent > 0; the peer
  /// is behind (it does not read) while the kernel is full or half the
  /// buffer or more waits. Either alone is not enough: the kernel counts a
  /// buffer's use with its bookkeeping, so a full one may hold less than
  /// half its size in bytes.
  void output(id c, std::uint64_t unsent, std::uint64_t buffer, bool full,
              bool progressed, clock::time_point now);

  /// The connection is gone.
  void close(id c);

  /// Connections whose handshake or message timed out at `now` (refused
  /// and reported once; the caller closes their sockets).
  std::vector<id> expired(clock::time_point now);

  /// Whether `c` was refused (every later TLS call fails).
  bool refused(id c) const;

  /// The refusals since the last call (at most 1024 are kept).
  std::vector<connection_refusal> take_refusals();

  connection_stats stats() const;

  static constexpr std::size_t max_reports = 1024;

 private:
  struct conn {
    std::string address;
    std::string peer;
    bool node = false;
    bool admitted = false;
    bool refused = false;
    std::uint64_t announced = 0; ///< payload bytes of the message underway
    clock::time_point opened;
    clock::time_point last_progress;
    double tokens = 0;
    clock::time_point refill;
    bool output_waits = false;         ///< output waits for the peer
    bool behind = false;               ///< half the send buffer waits
    clock::time_point output_progress; ///< the peer last acknowledged
    std::uint32_t sent_while_behind = 0;
    /// The node's actors that messaged this client.
    std::deque<std::uint64_t> contacts;
  };
  struct peer_use {
    std::uint32_t connections = 0;
    std::uint64_t buffered = 0;
  };

  bool refuse(conn& c, const char* limit, std::string detail);
  /// `c` for a check, or null with `verdict`: true when it is unknown
  /// (nothing to check), false when it was refused already.
  conn* checked(id c, bool& verdict);
  void release(conn& c);

  connection_limits_config cfg_;
  std::unordered_map<id, conn> conns_;
  std::unordered_map<std::string, peer_use> peers_;
  std::uint64_t buffered_ = 0;
  std::uint64_t refused_ = 0;
  std::uint64_t dropped_ = 0;
  std::deque<connection_refusal> reports_;
};

/// The limits of this process's TLS guard (the guard is linked into every
/// program that runs CAF's TLS; see ssl_error_queue_guard.cpp). Defined
/// there.
void configure_connection_guard(const connection_limits_config& cfg);
std::vector<connection_refusal> take_connection_refusals();
connection_stats connection_guard_stats();

} // namespace exo::tls
