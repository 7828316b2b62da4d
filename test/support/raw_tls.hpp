#pragma once

/// Test support: a raw TLS connection to a node's port with a certificate of
/// the cluster CA, made with OpenSSL directly, to speak as a hostile peer
/// would (announce BASP messages and send nothing more, stall a handshake).

#include <chrono>
#include <cstdint>
#include <string>

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace exo::test {

class raw_tls {
 public:
  /// Connects to 127.0.0.1:port (TCP only; no TLS yet). Throws
  /// std::runtime_error when the connection or the files fail.
  raw_tls(std::uint16_t port, const std::string& cert, const std::string& key,
          const std::string& ca);
  ~raw_tls();
  raw_tls(const raw_tls&) = delete;
  raw_tls& operator=(const raw_tls&) = delete;

  /// The TLS handshake; false when the server refuses it.
  bool handshake();

  /// Sends one BASP header (operation client_handshake) announcing
  /// `payload_len` bytes of payload, and no payload. False when the write
  /// fails.
  bool announce(std::uint32_t payload_len);

  /// Sends `n` bytes of zeros (payload). False when the write fails.
  bool send_zeros(std::size_t n);

  /// Sends `n` bytes as they are. False when the write fails: the
  /// connection ended, or the node took nothing for the send patience
  /// (10 s unless set). `last_error()` says which.
  bool send(const void* data, std::size_t n);

  /// How long a send waits for the node to take bytes before it fails
  /// (a node on a loaded machine may read nothing for seconds).
  void set_send_patience(std::chrono::milliseconds patience);

  /// Why the last send or receive failed ("" when none did): the SSL
  /// error and errno.
  const std::string& last_error() const {
    return last_error_;
  }

  /// Reads exactly `n` bytes (10 s per read at most). False when the
  /// connection ends or times out first.
  bool receive(void* data, std::size_t n);

  /// This side's TCP port.
  std::uint16_t local_port() const;

  /// Sets the socket's receive buffer (before the handshake: a peer that
  /// does not read fills it sooner).
  void set_receive_buffer(int bytes);

  /// Whether the server closes the TCP connection within `patience`,
  /// without a TLS handshake from this side.
  bool socket_closed_within(std::chrono::milliseconds patience);

  /// Whether the server closes the connection within `patience` (its own
  /// handshake bytes are read and ignored).
  bool closed_within(std::chrono::milliseconds patience);

 private:
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::chrono::milliseconds send_patience_{10000};
  std::string last_error_;

  /// Records why an SSL call that returned `rc` failed.
  void note_failure(const char* call, int rc);
};

/// Whether the peer of socket `fd` closes it within `patience` (what it
/// sends before is read and dropped).
bool socket_closed_within(int fd, std::chrono::milliseconds patience);

/// Whether process `pid` still holds a TCP socket whose peer is
/// 127.0.0.1:`peer_port` (an open descriptor; a socket it closed and the
/// kernel still drains does not count).
bool holds_tcp_peer(int pid, std::uint16_t peer_port);

/// The resident set of process `pid` now, in KiB (VmRSS), or -1.
long resident_kib(int pid);

/// The most `pid` has held resident since it started, in KiB (VmHWM), or -1.
long peak_resident_kib(int pid);

} // namespace exo::test
