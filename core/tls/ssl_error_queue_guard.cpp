// Clears OpenSSL's per-thread error queue before every TLS I/O call made in
// this process.
//
// Why: SSL_get_error() is only reliable when the thread's error queue is
// empty before the I/O call (SSL_get_error(3)). CAF 0.17's OpenSSL session
// does not clear it, and all its connections share the multiplexer thread:
// when one connection fails (a client disconnecting, a peer killed, a
// stranger sending garbage), the error it leaves behind makes the next
// SSL_read/SSL_write of an unrelated, healthy connection look failed, and
// CAF drops that connection too. Measured here: every console disconnect
// dropped the links between the other nodes of a cluster.
//
// The same interposition bounds what a peer may hold of the node:
// connections, message sizes, buffered bytes, time and message rate (see
// "what a peer may hold" below). Connections that do not carry BASP (the
// gateway's HTTPS, the bulk channel) are exempted with
// exo_tls_guard_exempt().
//
// How: this object defines the few libssl I/O entry points. The dynamic
// linker binds libcaf_openssl's calls to these definitions (the executable
// comes first in symbol lookup), which clear the queue and forward to
// libssl's own functions found with dlsym(RTLD_NEXT, ...). It is linked
// into every program that runs CAF's TLS (exo-node, exo-console, tests).

#include "core/tls/connection_limits.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace {

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

// -- what a peer may hold ----------------------------------------------------
//
// CAF 0.17's BASP reads a 32-byte header (operation, 2 padding bytes, flags,
// payload length as a big-endian uint32, operation data, source and
// destination actor ids) and then allocates and reads exactly the payload
// length the peer claims, up to 4 GiB, before anything can look at it. Any
// holder of a certificate from the cluster CA could make a node allocate
// gigabytes with one header, or hold memory with many connections that
// announce large messages and send nothing. The guard follows each
// connection's decrypted stream (header, payload, header, ...) and asks
// exo::tls::connection_limits (connection_limits.hpp) about every
// connection, header and handshake: a refused connection's next TLS call
// fails, CAF sees an SSL error and drops it, and nothing is allocated. A
// watchdog thread refuses handshakes and messages that stall and shuts
// their sockets down so that CAF notices. exo sends bulk data in chunks of
// at most 4 MiB (messages/device.hpp) or over the bulk channel.
constexpr std::size_t header_size = 32;

using clock = exo::tls::connection_limits::clock;

struct stream_state {
  unsigned char header[header_size];
  std::size_t have = 0;           // header bytes seen
  std::uint64_t payload_left = 0; // payload bytes still to come
  bool exempt = false; // not BASP: not followed
  bool admitted = false;
  int fd = -1;
  sockaddr_storage peer{};
  socklen_t peer_len = 0;
  std::uint64_t bytes_acked = 0; // by the peer, at the last sample
  unsigned char out_header[header_size]; // what the node writes
  std::size_t out_have = 0;
  std::uint64_t out_payload_left = 0;
};

std::mutex states_mutex;
std::unordered_map<const SSL*, stream_state>& states() {
  static auto* m = new std::unordered_map<const SSL*, stream_state>;
  return *m;
}

exo::tls::connection_limits& limits() {
  static auto* l = new exo::tls::connection_limits;
  return *l;
}

std::string address_of(const sockaddr_storage& a, socklen_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (len >= sizeof(sockaddr_in) && a.ss_family == AF_INET) {
    auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
    port = ntohs(v4.sin_port);
  } else if (len >= sizeof(sockaddr_in6) && a.ss_family == AF_INET6) {
    auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
    port = ntohs(v6.sin6_port);
  }
  return std::string{host} + ":" + std::to_string(port);
}

void watchdog();

/// Registers `ssl` on its first TLS call (under states_mutex). False: the
/// connection is refused.
bool open_locked(const SSL* ssl, stream_state& st) {
  if (st.fd >= 0 || st.exempt)
    return !limits().refused(ssl);
  static std::once_flag started;
  std::call_once(started, [] { std::thread{watchdog}.detach(); });
  st.fd = SSL_get_fd(ssl);
  if (st.fd >= 0) {
    // Every exo message is a request or answer someone waits for (a
    // pipeline step, a heartbeat): Nagle's algorithm held a step's second
    // segment for the peer's delayed ACK, 40 ms per hop — a three-node
    // pipeline ran at 11 tokens/s instead of 23 on one machine. CAF 0.17
    // leaves the option off and has no setting for it.
    int one = 1;
    (void) ::setsockopt(st.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  st.peer_len = sizeof st.peer;
  if (st.fd < 0
      || getpeername(st.fd, reinterpret_cast<sockaddr*>(&st.peer),
                     &st.peer_len)
           != 0)
    st.peer_len = 0;
  return limits().open(ssl, address_of(st.peer, st.peer_len), clock::now());
}

/// Admits `ssl` once its handshake is done (under states_mutex): the peer
/// is its certificate's name, a node when it may serve (serverAuth).
bool admit_locked(const SSL* ssl, stream_state& st) {
  if (st.admitted || st.exempt || !SSL_is_init_finished(ssl))
    return !limits().refused(ssl);
  st.admitted = true;
  std::string name;
  bool node = false;
  if (X509* cert = SSL_get0_peer_certificate(ssl)) {
    char cn[256] = "";
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert),
                                  NID_commonName, cn, sizeof cn)
        > 0)
      name = cn;
    node = (X509_get_extended_key_usage(cert) & XKU_SSL_SERVER) != 0;
  }
  return limits().admit(ssl, name, node, clock::now());
}

/// The big-endian number in `n` bytes at `p` (BASP's byte order).
std::uint64_t big_endian(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v = (v << 8) | p[i];
  return v;
}

exo::tls::basp_fields fields(const unsigned char* header) {
  exo::tls::basp_fields h;
  h.operation = header[0];
  h.flags = header[3];
  h.source = big_endian(header + 16, 8);
  h.dest = big_endian(header + 24, 8);
  return h;
}

/// Follows `n` bytes the node wrote to `ssl` (whole frames as CAF writes
/// them: headers and payloads), telling the limits the headers.
void follow_out(const SSL* ssl, const unsigned char* p, std::size_t n) {
  std::lock_guard<std::mutex> guard{states_mutex};
  auto i = states().find(ssl);
  if (i == states().end() || i->second.exempt || !i->second.admitted)
    return;
  auto& st = i->second;
  while (n > 0) {
    if (st.out_payload_left > 0) {
      auto k = st.out_payload_left < n
                 ? static_cast<std::size_t>(st.out_payload_left)
                 : n;
      st.out_payload_left -= k;
      p += k;
      n -= k;
      continue;
    }
    auto k = header_size - st.out_have < n ? header_size - st.out_have : n;
    std::memcpy(st.out_header + st.out_have, p, k);
    st.out_have += k;
    p += k;
    n -= k;
    if (st.out_have == header_size) {
      st.out_have = 0;
      st.out_payload_left = big_endian(st.out_header + 4, 4);
      limits().sent(ssl, fields(st.out_header));
    }
  }
}

/// Follows `n` decrypted bytes of `ssl`'s stream; false once refused.
bool follow(const SSL* ssl, const unsigned char* p, std::size_t n) {
  std::lock_guard<std::mutex> guard{states_mutex};
  auto& st = states()[ssl];
  if (st.exempt)
    return true;
  // Once admitted (the usual case: SSL_accept/SSL_connect did it), a read
  // costs no more lookups; a refusal since is caught by refused() before
  // the read.
  if (!st.admitted && (!open_locked(ssl, st) || !admit_locked(ssl, st)))
    return false;
  auto now = clock::now();
  // Only a message underway can stall (announce() stamps a new one).
  if (st.payload_left > 0)
    limits().progress(ssl, n, now);
  while (n > 0) {
    if (st.payload_left > 0) {
      auto k = st.payload_left < n ? static_cast<std::size_t>(st.payload_left)
                                   : n;
      st.payload_left -= k;
      p += k;
      n -= k;
      if (st.payload_left == 0)
        limits().complete(ssl);
      continue;
    }
    auto k = header_size - st.have < n ? header_size - st.have : n;
    for (std::size_t i = 0; i < k; ++i)
      st.header[st.have + i] = p[i];
    st.have += k;
    p += k;
    n -= k;
    if (st.have == header_size) {
      auto len = static_cast<std::uint32_t>(big_endian(st.header + 4, 4));
      st.have = 0;
      if (!limits().announce(ssl, len, now)) {
        std::fprintf(stderr,
                     "exo: dropping a TLS connection whose peer announced "
                     "a %u-byte message (a limit of network.limits)\n",
                     static_cast<unsigned>(len));
        return false;
      }
      auto h = fields(st.header);
      if (!limits().address(ssl, h)) {
        std::fprintf(stderr,
                     "exo: dropping a client's TLS connection: it addressed "
                     "actor %llu with BASP operation %u (a client may "
                     "message the gate only)\n",
                     static_cast<unsigned long long>(h.dest),
                     static_cast<unsigned>(h.operation));
        return false;
      }
      st.payload_left = len;
    }
  }
  return true;
}

bool refused(const SSL* ssl) {
  std::lock_guard<std::mutex> guard{states_mutex};
  auto i = states().find(ssl);
  return i != states().end() && !i->second.exempt && limits().refused(ssl);
}

int refuse_call() {
  ERR_raise(ERR_LIB_SSL, SSL_R_EXCESSIVE_MESSAGE_SIZE);
  return -1;
}

/// Before a handshake call: registers the connection; false when refused.
bool before_handshake(const SSL* ssl) {
  std::lock_guard<std::mutex> guard{states_mutex};
  auto& st = states()[ssl];
  if (st.exempt)
    return true;
  return open_locked(ssl, st);
}

/// After a handshake call that returned `rc`: admits the peer, or reports
/// a handshake that failed for a reason other than waiting for bytes.
bool after_handshake(SSL* ssl, int rc) {
  std::lock_guard<std::mutex> guard{states_mutex};
  auto& st = states()[ssl];
  if (st.exempt)
    return true;
  if (rc == 1)
    return admit_locked(ssl, st);
  if (SSL_get_error(ssl, rc) == SSL_ERROR_SSL) {
    char why[256] = "TLS handshake failed";
    if (auto e = ERR_peek_error(); e != 0) {
      std::string text = "TLS handshake failed: ";
      text += ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "?";
      std::snprintf(why, sizeof why, "%s", text.c_str());
    }
    limits().handshake_failed(ssl, why);
  }
  return true;
}

/// What the kernel holds of the node's output to a peer: CAF writes to a
/// socket only when it has room (epoll), so a peer that stops reading
/// shows as bytes the kernel cannot send, never as a failed SSL_write; CAF
/// keeps the rest in memory. Sampled by the watchdog for each admitted
/// connection: the bytes not yet acknowledged, the socket's send buffer,
/// whether the kernel takes more (poll: writable), and whether the peer
/// acknowledged anything since the last sample.
void sample_output(const SSL* ssl, stream_state& st, clock::time_point now) {
  tcp_info info{};
  socklen_t len = sizeof info;
  int unsent = 0;
  int buffer = 0;
  socklen_t blen = sizeof buffer;
  if (getsockopt(st.fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0
      || ioctl(st.fd, SIOCOUTQ, &unsent) != 0
      || getsockopt(st.fd, SOL_SOCKET, SO_SNDBUF, &buffer, &blen) != 0)
    return;
  auto acked = len >= offsetof(tcp_info, tcpi_bytes_acked)
                        + sizeof info.tcpi_bytes_acked
                 ? static_cast<std::uint64_t>(info.tcpi_bytes_acked)
                 : 0;
  pollfd writable{st.fd, POLLOUT, 0};
  bool full = unsent > 0 && poll(&writable, 1, 0) == 0;
  limits().output(ssl, static_cast<std::uint64_t>(unsent < 0 ? 0 : unsent),
                  static_cast<std::uint64_t>(buffer < 0 ? 0 : buffer), full,
                  acked != st.bytes_acked, now);
  st.bytes_acked = acked;
}

/// Every 250 ms: samples each connection's output, refuses the connections
/// whose handshake, message or output stalled and shuts their sockets down
/// (reading, so CAF's next read sees the end and drops the connection; the
/// descriptor stays CAF's).
void watchdog() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    std::lock_guard<std::mutex> guard{states_mutex};
    auto now = clock::now();
    for (auto& [ssl, st] : states())
      if (st.admitted && !st.exempt && st.fd >= 0)
        sample_output(ssl, st, now);
    for (auto id : limits().expired(now)) {
      auto* ssl = static_cast<const SSL*>(id);
      auto it = states().find(ssl);
      if (it == states().end() || it->second.fd < 0
          || it->second.peer_len == 0)
        continue;
      // The descriptor is still this connection's (not closed and reused
      // for another socket) when it still has the same peer.
      sockaddr_storage now{};
      socklen_t len = sizeof now;
      if (getpeername(it->second.fd, reinterpret_cast<sockaddr*>(&now), &len)
            == 0
          && len == it->second.peer_len
          && std::memcmp(&now, &it->second.peer, len) == 0)
        ::shutdown(it->second.fd, SHUT_RDWR);
    }
  }
}

} // namespace

namespace exo::tls {

void configure_connection_guard(const connection_limits_config& cfg) {
  std::lock_guard<std::mutex> guard{states_mutex};
  limits().configure(cfg);
}

std::vector<connection_refusal> take_connection_refusals() {
  std::lock_guard<std::mutex> guard{states_mutex};
  return limits().take_refusals();
}

connection_stats connection_guard_stats() {
  std::lock_guard<std::mutex> guard{states_mutex};
  return limits().stats();
}

} // namespace exo::tls

extern "C" void exo_tls_guard_exempt(const SSL* ssl);

extern "C" {

/// Marks `ssl` as a connection that does not carry BASP (HTTPS): its
/// stream is not followed. Programs without the guard do not define it;
/// callers declare it weak.
void exo_tls_guard_exempt(const SSL* ssl) {
  std::lock_guard<std::mutex> guard{states_mutex};
  states()[ssl].exempt = true;
  limits().close(ssl);
}

int SSL_read(SSL* ssl, void* buf, int num) {
  static auto real = next<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  if (refused(ssl))
    return refuse_call();
  int rc = real(ssl, buf, num);
  if (rc > 0 && !follow(ssl, static_cast<const unsigned char*>(buf),
                        static_cast<std::size_t>(rc)))
    return refuse_call();
  return rc;
}

void SSL_free(SSL* ssl) {
  static auto real = next<void (*)(SSL*)>("SSL_free");
  {
    std::lock_guard<std::mutex> guard{states_mutex};
    states().erase(ssl);
    limits().close(ssl);
  }
  real(ssl);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static auto real = next<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  auto rc = real(ssl, buf, num);
  if (rc > 0)
    follow_out(ssl, static_cast<const unsigned char*>(buf),
               static_cast<std::size_t>(rc));
  return rc;
}

int SSL_accept(SSL* ssl) {
  static auto real = next<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  if (!before_handshake(ssl))
    return refuse_call();
  auto rc = real(ssl);
  if (!after_handshake(ssl, rc))
    return refuse_call();
  return rc;
}

int SSL_connect(SSL* ssl) {
  static auto real = next<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  if (!before_handshake(ssl))
    return refuse_call();
  auto rc = real(ssl);
  if (!after_handshake(ssl, rc))
    return refuse_call();
  return rc;
}

int SSL_shutdown(SSL* ssl) {
  static auto real = next<int (*)(SSL*)>("SSL_shutdown");
  ERR_clear_error();
  auto rc = real(ssl);
  // A failed shutdown of a dead connection must not poison the next call.
  ERR_clear_error();
  return rc;
}

} // extern "C"
