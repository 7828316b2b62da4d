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
// The same interposition bounds the message length a peer may announce
// (see max_payload below). Connections that do not carry BASP (the
// gateway's HTTPS) are exempted with exo_tls_guard_exempt().
//
// How: this object defines the few libssl I/O entry points. The dynamic
// linker binds libcaf_openssl's calls to these definitions (the executable
// comes first in symbol lookup), which clear the queue and forward to
// libssl's own functions found with dlsym(RTLD_NEXT, ...). It is linked
// into every program that runs CAF's TLS (exo-node, exo-console, tests).

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <unordered_map>

namespace {

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

// -- the length a peer claims ------------------------------------------------
//
// CAF 0.17's BASP reads a 32-byte header (operation, 2 padding bytes, flags,
// payload length as a big-endian uint32, operation data, source and
// destination actor ids) and then allocates and reads exactly the payload
// length the peer claims, up to 4 GiB, before anything can look at it. Any
// holder of a certificate from the cluster CA could make a node allocate
// gigabytes with one header. The guard follows each connection's decrypted
// stream (header, payload, header, ...) and fails the read that completes
// a header claiming more than max_payload: CAF sees an SSL error and drops
// that connection, and nothing is allocated. exo sends bulk data in chunks
// of at most 4 MiB (messages/device.hpp); the largest legitimate messages
// (a full cluster view) stay far below the limit.
constexpr std::uint32_t max_payload = 64u << 20;
constexpr std::size_t header_size = 32;

struct stream_state {
  unsigned char header[header_size];
  std::size_t have = 0;           // header bytes seen
  std::uint64_t payload_left = 0; // payload bytes still to come
  bool refused = false;
  bool exempt = false; // not BASP: not followed
};

std::mutex states_mutex;
std::unordered_map<const SSL*, stream_state>& states() {
  static std::unordered_map<const SSL*, stream_state> m;
  return m;
}

/// Follows `n` decrypted bytes of `ssl`'s stream; false once a header
/// claims too much.
bool follow(const SSL* ssl, const unsigned char* p, std::size_t n) {
  std::lock_guard<std::mutex> guard{states_mutex};
  auto& st = states()[ssl];
  if (st.exempt)
    return true;
  while (n > 0 && !st.refused) {
    if (st.payload_left > 0) {
      auto k = st.payload_left < n ? static_cast<std::size_t>(st.payload_left)
                                   : n;
      st.payload_left -= k;
      p += k;
      n -= k;
      continue;
    }
    auto k = header_size - st.have < n ? header_size - st.have : n;
    for (std::size_t i = 0; i < k; ++i)
      st.header[st.have + i] = p[i];
    st.have += k;
    p += k;
    n -= k;
    if (st.have == header_size) {
      std::uint32_t len = (std::uint32_t{st.header[4]} << 24)
                          | (std::uint32_t{st.header[5]} << 16)
                          | (std::uint32_t{st.header[6]} << 8)
                          | std::uint32_t{st.header[7]};
      st.have = 0;
      if (len > max_payload) {
        st.refused = true;
        std::fprintf(stderr,
                     "exo: dropping a TLS connection whose peer announced "
                     "a %u-byte message (the limit is %u bytes)\n",
                     static_cast<unsigned>(len),
                     static_cast<unsigned>(max_payload));
      } else {
        st.payload_left = len;
      }
    }
  }
  return !st.refused;
}

bool refused(const SSL* ssl) {
  std::lock_guard<std::mutex> guard{states_mutex};
  auto i = states().find(ssl);
  return i != states().end() && i->second.refused;
}

int refuse_read() {
  ERR_raise(ERR_LIB_SSL, SSL_R_EXCESSIVE_MESSAGE_SIZE);
  return -1;
}

} // namespace

extern "C" void exo_tls_guard_exempt(const SSL* ssl);

extern "C" {

/// Marks `ssl` as a connection that does not carry BASP (HTTPS): its
/// stream is not followed. Programs without the guard do not define it;
/// callers declare it weak.
void exo_tls_guard_exempt(const SSL* ssl) {
  std::lock_guard<std::mutex> guard{states_mutex};
  states()[ssl].exempt = true;
}

int SSL_read(SSL* ssl, void* buf, int num) {
  static auto real = next<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  if (refused(ssl))
    return refuse_read();
  int rc = real(ssl, buf, num);
  if (rc > 0 && !follow(ssl, static_cast<const unsigned char*>(buf),
                        static_cast<std::size_t>(rc)))
    return refuse_read();
  return rc;
}

void SSL_free(SSL* ssl) {
  static auto real = next<void (*)(SSL*)>("SSL_free");
  {
    std::lock_guard<std::mutex> guard{states_mutex};
    states().erase(ssl);
  }
  real(ssl);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static auto real = next<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_accept(SSL* ssl) {
  static auto real = next<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}

int SSL_connect(SSL* ssl) {
  static auto real = next<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
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
