// The signed hello of zero-config discovery (core/tls/hello): a node of our
// CA is admitted with its address; another cluster's, a stale, forged,
// renamed, oversized or malformed hello is refused with the reason.

#include <catch2/catch.hpp>

#include "core/tls/cert_tool.hpp"
#include "core/tls/hello.hpp"
#include "core/tls/trust_store.hpp"

using namespace exo::tls;

TEST_CASE("a hello of our cluster is admitted, others are refused with the reason") {
  auto ca = create_ca();
  auto other = create_ca();
  auto node = issue_certificate(ca, cert_options{"n2"});
  auto stranger = issue_certificate(other, cert_options{"n2"});
  trust_store ours{ca.cert};
  const auto cluster = ca.cert.fingerprint_sha256();
  const std::int64_t now = 1'800'000'000'000;
  hello_info me{"n2", "10.200.1.2", 41000};
  auto h = make_hello(node.key, node.cert.to_pem(), cluster, me, now);
  std::string why;
  auto got = check_hello(h, ours, cluster, now + 1000, why);
  INFO(why);
  REQUIRE(got);
  CHECK(got->name == "n2");
  CHECK(got->host == "10.200.1.2");
  CHECK(got->port == 41000);

  auto refused = [&](const std::string& datagram, const std::string& reason) {
    std::string w;
    INFO(datagram.substr(0, 200));
    CHECK_FALSE(check_hello(datagram, ours, cluster, now, w));
    CHECK_THAT(w, Catch::Contains(reason));
  };
  // Another cluster on the same LAN: its own id, or ours copied.
  const auto theirs = other.cert.fingerprint_sha256();
  refused(make_hello(stranger.key, stranger.cert.to_pem(), theirs, me, now),
          "another cluster");
  refused(make_hello(stranger.key, stranger.cert.to_pem(), cluster, me, now),
          "");
  // Stale and future.
  refused(make_hello(node.key, node.cert.to_pem(), cluster, me,
                     now - hello_max_skew_ms - 1),
          "stale or future");
  refused(make_hello(node.key, node.cert.to_pem(), cluster, me,
                     now + hello_max_skew_ms + 1),
          "stale or future");
  // A changed address under the old signature.
  auto forged = h;
  forged.replace(forged.find("10.200.1.2"), 10, "10.200.1.9");
  refused(forged, "signature");
  // Another node's certificate with this name's hello.
  auto n3 = issue_certificate(ca, cert_options{"n3"});
  refused(make_hello(n3.key, n3.cert.to_pem(), cluster, me, now),
          "certificate of n3 in a hello of n2");
  // Shapes.
  refused(std::string(max_hello_size + 1, 'x'), "bytes (at most");
  refused("hello\n", "not an exo hello");
  refused("exo-hello-v1\ncluster=" + cluster + "\n", "no name");
  refused("exo-hello-v1\nnonsense", "a line without its end");
  refused("exo-hello-v1\nname=a\nname=b\n", "key name twice");
  hello_info bad_host{"n2", "gpu.lan", 41000};
  refused(make_hello(node.key, node.cert.to_pem(), cluster, bad_host, now),
          "not an IPv4 address");
  hello_info bad_port{"n2", "10.200.1.2", 0};
  refused(make_hello(node.key, node.cert.to_pem(), cluster, bad_port, now),
          "bad port");
  auto bad_sig = h;
  bad_sig.replace(bad_sig.find("sig=") + 4, 2, "zz");
  refused(bad_sig, "bad signature encoding");
}
