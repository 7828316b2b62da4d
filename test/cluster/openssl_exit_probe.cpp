// A program that uses OpenSSL on a thread of its own and returns from main,
// as an application embedding exo does. It reports whether OpenSSL's
// exit-time cleanup (OPENSSL_cleanup) ran: exit status 3 and a line on
// stderr if it did, 0 if not. Built twice: with exo_ssl_guard
// (core/tls/openssl_exit.cpp, which asks for no cleanup at exit) and
// without it, as the check that the probe sees the cleanup at all.

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <unistd.h>

#include <cstdio>
#include <thread>

namespace {

void cleanup_ran() {
  static const char msg[] = "OPENSSL_cleanup ran at exit\n";
  (void) !::write(2, msg, sizeof msg - 1);
  ::_exit(3);
}

} // namespace

int main() {
  if (OPENSSL_atexit(cleanup_ran) != 1) {
    std::fprintf(stderr, "OPENSSL_atexit failed\n");
    return 1;
  }
  bool ok = false;
  std::thread worker([&] {
    unsigned char bytes[16];
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    SSL_CTX* ctx = SSL_CTX_new(TLS_method());
    ok = RAND_bytes(bytes, sizeof bytes) == 1
         && EVP_Digest(bytes, sizeof bytes, md, &len, EVP_sha256(), nullptr)
              == 1
         && ctx != nullptr;
    SSL_CTX_free(ctx);
  });
  worker.join();
  if (!ok) {
    std::fprintf(stderr, "OpenSSL calls failed\n");
    return 1;
  }
  std::printf("used OpenSSL on a thread\n");
  std::fflush(stdout); // before the exit handlers: cleanup_ran ends with _exit
  return 0;
}
