// The bulk channel (core/tls/bulk_channel.hpp): blobs streamed over
// mutually authenticated TLS on 127.0.0.1, and everything it must refuse.

#include "core/tls/bulk_channel.hpp"
#include "core/tls/tls_error.hpp"
#include "test/cluster/tls_test_util.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <numeric>

using namespace exo::tls;
using exo::tls::test::temp_dir;
using exo::tls::test::write_credential;

namespace {

/// A CA, two node certificates (alpha, beta), a client certificate and a
/// node certificate from another CA, written to a temp dir.
struct pki {
  temp_dir dir;
  credential ca = create_ca();

  pki() {
    write_certificate(dir / "ca.crt", ca.cert);
    write_credential(dir, "alpha", issue_certificate(ca, cert_options{"alpha"}));
    write_credential(dir, "beta", issue_certificate(ca, cert_options{"beta"}));
    write_credential(dir, "client",
                     issue_certificate(ca, cert_options{"client",
                                                        cert_role::client}));
    auto other = create_ca();
    write_certificate(dir / "other-ca.crt", other.cert);
    write_credential(dir, "stranger",
                     issue_certificate(other, cert_options{"alpha"}));
  }

  material files(const std::string& stem, cert_role role = cert_role::node,
                 const std::string& ca_stem = "ca") const {
    material m;
    m.certificate = dir / (stem + ".crt");
    m.key = dir / (stem + ".key");
    m.cafile = dir / (ca_stem + ".crt");
    m.role = role;
    return m;
  }
};

std::vector<std::uint8_t> pattern(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::uint8_t>((i * 131u + (i >> 12)) & 0xff);
  return v;
}

std::vector<std::uint8_t> fetch(const pki& p, const bulk_server& srv,
                                const std::string& stem,
                                const std::string& expected,
                                const std::string& id, std::uint64_t off,
                                std::uint64_t len,
                                cert_role role = cert_role::node,
                                const std::string& ca_stem = "ca") {
  std::vector<std::uint8_t> out;
  bulk_fetch(p.files(stem, role, ca_stem), "127.0.0.1", srv.port(), expected,
             id, off, len,
             [&](const std::uint8_t* d, std::size_t n) {
               out.insert(out.end(), d, d + n);
             },
             std::chrono::milliseconds{5000});
  return out;
}

bulk_server::options local() {
  bulk_server::options o;
  o.io_timeout = std::chrono::milliseconds{3000};
  return o;
}

} // namespace

TEST_CASE("the bulk channel streams byte ranges of registered blobs") {
  pki p;
  auto blobs = std::make_shared<bulk_blobs>();
  auto data = pattern((9u << 20) + 12345); // crosses several 4 MiB pieces
  auto owner = std::make_shared<std::vector<std::uint8_t>>(data);
  blobs->add_memory("mem", owner, owner->data(), owner->size());
  auto file = p.dir / "blob.bin";
  {
    std::ofstream f{file, std::ios::binary};
    f.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size()));
  }
  blobs->add_file("file", file);
  bulk_server srv{p.files("alpha"), blobs, local()};
  REQUIRE(srv.port() != 0);

  SECTION("whole blobs, from memory and from a mapped file") {
    CHECK(fetch(p, srv, "beta", "alpha", "mem", 0, data.size()) == data);
    CHECK(fetch(p, srv, "beta", "alpha", "file", 0, data.size()) == data);
    CHECK(srv.stats().served == 2);
    CHECK(srv.stats().bytes == 2 * data.size());
  }
  SECTION("a range in the middle, an empty range, the last byte") {
    auto got = fetch(p, srv, "beta", "alpha", "file", 5000001, 777777);
    CHECK(got == std::vector<std::uint8_t>(data.begin() + 5000001,
                                           data.begin() + 5000001 + 777777));
    CHECK(fetch(p, srv, "beta", "alpha", "file", 17, 0).empty());
    auto last = fetch(p, srv, "beta", "alpha", "mem", data.size() - 1, 1);
    REQUIRE(last.size() == 1);
    CHECK(last[0] == data.back());
  }
  SECTION("ranges outside the blob and unknown blobs are refused by name") {
    CHECK_THROWS_WITH(fetch(p, srv, "beta", "alpha", "mem", 1, data.size()),
                      Catch::Contains("lies outside blob mem"));
    CHECK_THROWS_WITH(fetch(p, srv, "beta", "alpha", "mem", ~0ull, 2),
                      Catch::Contains("lies outside"));
    CHECK_THROWS_WITH(fetch(p, srv, "beta", "alpha", "nope", 0, 1),
                      Catch::Contains("blob nope is not served here"));
    blobs->remove("mem");
    CHECK_THROWS_WITH(fetch(p, srv, "beta", "alpha", "mem", 0, 1),
                      Catch::Contains("not served here"));
    // The server is still healthy.
    CHECK(fetch(p, srv, "beta", "alpha", "file", 0, 10).size() == 10);
  }
  SECTION("one session fetches several ranges over one connection") {
    bulk_session s{p.files("beta"), "127.0.0.1", srv.port(), "alpha"};
    std::vector<std::uint8_t> got;
    auto sink = [&](const std::uint8_t* d, std::size_t n) {
      got.insert(got.end(), d, d + n);
    };
    s.fetch("file", 0, 1000, sink);
    s.fetch("mem", 1000, data.size() - 1000, sink);
    CHECK(got == data);
    CHECK(srv.stats().connections == 1);
    CHECK(srv.stats().served == 2);
    // A refused request ends the session.
    CHECK_THROWS_WITH(s.fetch("nope", 0, 1, sink),
                      Catch::Contains("not served here"));
    CHECK_THROWS_WITH(s.fetch("file", 0, 1, sink),
                      Catch::Contains("failed before"));
  }
  SECTION("a sink that throws aborts the fetch with its error") {
    CHECK_THROWS_WITH(bulk_fetch(p.files("beta"), "127.0.0.1", srv.port(),
                                 "alpha", "file", 0, data.size(),
                                 [](const std::uint8_t*, std::size_t) {
                                   throw std::runtime_error("disk full");
                                 }),
                      "disk full");
    CHECK(fetch(p, srv, "beta", "alpha", "file", 0, 10).size() == 10);
  }
}

TEST_CASE("the bulk channel refuses strangers, clients and impostors") {
  pki p;
  auto blobs = std::make_shared<bulk_blobs>();
  auto owner = std::make_shared<std::vector<std::uint8_t>>(pattern(1000));
  blobs->add_memory("b", owner, owner->data(), owner->size());
  bulk_server srv{p.files("alpha"), blobs, local()};

  // The client expects another node at that address.
  CHECK_THROWS_AS(fetch(p, srv, "beta", "gamma", "b", 0, 10), tls_error);
  CHECK_THROWS_WITH(fetch(p, srv, "beta", "gamma", "b", 0, 10),
                    Catch::Contains("presented a certificate for \"alpha\""));
  // A certificate from another CA: the handshake fails on both sides.
  CHECK_THROWS(fetch(p, srv, "stranger", "alpha", "b", 0, 10, cert_role::node,
                     "other-ca"));
  // A client certificate may talk to nodes, not pull their blobs.
  CHECK_THROWS_WITH(fetch(p, srv, "client", "alpha", "b", 0, 10,
                          cert_role::client),
                    Catch::Contains("serves cluster nodes only"));
  // Plain TCP garbage, then a silent connection that only times out.
  for (int i = 0; i < 2; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(srv.port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    if (i == 0) {
      const char junk[] = "GET / HTTP/1.1\r\n\r\n\x16\x03\x01\xff\xff";
      (void) !::write(fd, junk, sizeof(junk));
    }
    ::close(fd);
  }
  // Still serving the right peer afterwards.
  CHECK(fetch(p, srv, "beta", "alpha", "b", 0, 1000) == *owner);
  CHECK(srv.stats().refused >= 4);
}

TEST_CASE("the bulk channel refuses malformed requests and a dead server") {
  pki p;
  CHECK_THROWS_WITH(bulk_fetch(p.files("beta"), "127.0.0.1", 1, "alpha", "",
                               0, 1, [](const std::uint8_t*, std::size_t) {}),
                    Catch::Contains("blob id"));
  CHECK_THROWS_WITH(bulk_fetch(p.files("beta"), "127.0.0.1", 1, "alpha",
                               std::string(200, 'x'), 0, 1,
                               [](const std::uint8_t*, std::size_t) {}),
                    Catch::Contains("blob id"));
  // Nothing listens on port 1.
  CHECK_THROWS_WITH(bulk_fetch(p.files("beta"), "127.0.0.1", 1, "alpha", "b",
                               0, 1, [](const std::uint8_t*, std::size_t) {}),
                    Catch::Contains("cannot connect to alpha"));
  auto blobs = std::make_shared<bulk_blobs>();
  CHECK_THROWS(blobs->add_file("x", p.dir / "missing"));
  CHECK_THROWS(blobs->add_file("x", p.dir.path()));
  CHECK_THROWS(blobs->add_memory("", nullptr, nullptr, 0));
}

TEST_CASE("a bulk server stops promptly with a stalled peer connected") {
  pki p;
  auto opts = local();
  opts.io_timeout = std::chrono::milliseconds{60000};
  auto srv = std::make_unique<bulk_server>(p.files("alpha"), nullptr, opts);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(srv->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  // Wait until the server has accepted it (its worker now blocks in the
  // handshake), then destroy the server: shutdown() must wake the worker.
  for (int i = 0; i < 200 && srv->stats().connections == 0; ++i)
    ::usleep(10000);
  auto t0 = std::chrono::steady_clock::now();
  srv.reset();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds{10});
  ::close(fd);
}
