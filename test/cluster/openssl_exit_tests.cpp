// exo's programs keep OpenSSL from freeing its global state at exit
// (core/tls/openssl_exit.cpp): that cleanup raced threads still ending and
// aborted an application with "double free or corruption".

#include "test/support/process.hpp"

#include <catch2/catch.hpp>

using namespace std::chrono_literals;

TEST_CASE("a program linked with exo's TLS guard returns from main without "
          "OpenSSL's exit-time cleanup, which a program without it runs",
          "[tls][process]") {
  auto guarded = exo::test::run({OPENSSL_EXIT_PROBE_GUARDED}, 60s);
  INFO("guarded: " << guarded.out << guarded.err);
  CHECK(guarded.out == "used OpenSSL on a thread\n");
  CHECK(guarded.err.empty());
  CHECK(guarded.code == 0);
  // Without the guard the probe sees the cleanup: the check above is not
  // vacuous.
  auto plain = exo::test::run({OPENSSL_EXIT_PROBE_PLAIN}, 60s);
  INFO("plain: " << plain.out << plain.err);
  CHECK(plain.out == "used OpenSSL on a thread\n");
  CHECK(plain.err == "OPENSSL_cleanup ran at exit\n");
  CHECK(plain.code == 3);
}
