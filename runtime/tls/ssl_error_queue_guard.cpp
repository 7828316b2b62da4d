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
// How: this object defines the few libssl I/O entry points. The dynamic
// linker binds libcaf_openssl's calls to these definitions (the executable
// comes first in symbol lookup), which clear the queue and forward to
// libssl's own functions found with dlsym(RTLD_NEXT, ...). It is linked
// into every program that runs CAF's TLS (exo-node, exo-console, tests).

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <dlfcn.h>

namespace {

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

} // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static auto real = next<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
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
