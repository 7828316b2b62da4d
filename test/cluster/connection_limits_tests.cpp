// exo::tls::connection_limits: what one TLS peer may hold of a node
// (issue 23), driven without sockets.

#include "core/tls/connection_limits.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace exo::tls;
using namespace std::chrono;
using clk = connection_limits::clock;

namespace {

/// A BASP header's fields: operation, flags, destination, source.
basp_fields hdr(std::uint8_t op, std::uint8_t flags, std::uint64_t dest,
                std::uint64_t src = 0) {
  basp_fields h;
  h.operation = op;
  h.flags = flags;
  h.dest = dest;
  h.source = src;
  return h;
}

/// Distinct connection ids.
const void* conn(int i) {
  static char ids[4096];
  return &ids[i];
}

std::vector<std::string> limits_of(connection_limits& l) {
  std::vector<std::string> out;
  for (auto& r : l.take_refusals())
    out.push_back(r.limit);
  return out;
}

} // namespace

TEST_CASE("a client certificate may announce small messages only, a node "
          "certificate large ones") {
  connection_limits l;
  auto t = clk::now();
  REQUIRE(l.open(conn(1), "127.0.0.1:1000", t));
  REQUIRE(l.admit(conn(1), "ops", false, t));
  CHECK(l.announce(conn(1), 4096, t));
  CHECK(l.announce(conn(1), 1 << 20, t));
  CHECK_FALSE(l.announce(conn(1), (1 << 20) + 1, t));
  CHECK(l.refused(conn(1)));
  auto rs = l.take_refusals();
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].limit == "frame_bytes");
  CHECK(rs[0].peer == "ops");
  CHECK(rs[0].address == "127.0.0.1:1000");
  CHECK_FALSE(rs[0].node);
  CHECK(rs[0].detail.find("client certificate is 1 MiB") != std::string::npos);
  // Once refused, always refused (every later TLS call fails).
  CHECK_FALSE(l.announce(conn(1), 10, t));
  CHECK(l.take_refusals().empty());
  REQUIRE(l.open(conn(2), "127.0.0.1:1001", t));
  REQUIRE(l.admit(conn(2), "n2", true, t));
  CHECK(l.announce(conn(2), 64u << 20, t));
  CHECK_FALSE(l.announce(conn(2), (64u << 20) + 1, t));
  CHECK(limits_of(l) == std::vector<std::string>{"frame_bytes"});
}

TEST_CASE("connections are bounded per peer and in total, and closing one "
          "frees its place") {
  connection_limits_config cfg;
  cfg.max_connections = 4;
  cfg.max_connections_per_peer = 2;
  connection_limits l{cfg};
  auto t = clk::now();
  CHECK(l.open(conn(1), "a", t));
  CHECK(l.admit(conn(1), "mallory", false, t));
  CHECK(l.open(conn(2), "a", t));
  CHECK(l.admit(conn(2), "mallory", false, t));
  CHECK(l.open(conn(3), "a", t));
  CHECK_FALSE(l.admit(conn(3), "mallory", false, t));
  // Another peer still gets in.
  CHECK(l.open(conn(4), "b", t));
  CHECK(l.admit(conn(4), "ops", false, t));
  // Four open (the refused one until CAF frees it): a fifth is refused.
  CHECK_FALSE(l.open(conn(5), "c", t));
  CHECK(limits_of(l)
        == std::vector<std::string>{"connections_per_peer", "connections"});
  l.close(conn(3));
  l.close(conn(5));
  l.close(conn(1));
  CHECK(l.stats().connections == 2);
  CHECK(l.open(conn(6), "a", t));
  CHECK(l.admit(conn(6), "mallory", false, t));
}

TEST_CASE("messages underway are bounded per peer and in total, and "
          "their bytes are released when they complete or the connection "
          "goes") {
  connection_limits_config cfg;
  cfg.max_buffered_per_peer = 100u << 20;
  cfg.max_buffered_total = 150u << 20;
  connection_limits l{cfg};
  auto t = clk::now();
  for (int i = 1; i <= 6; ++i) {
    REQUIRE(l.open(conn(i), "x", t));
    REQUIRE(l.admit(conn(i),
                    i <= 3 ? std::string{"evil-node"}
                           : "other-node-" + std::to_string(i),
                    true, t));
  }
  CHECK(l.announce(conn(1), 60u << 20, t));
  CHECK_FALSE(l.announce(conn(2), 60u << 20, t)); // 120 MiB from evil-node
  CHECK(l.stats().buffered == 60u << 20);
  l.complete(conn(1));
  CHECK(l.stats().buffered == 0);
  CHECK(l.announce(conn(3), 60u << 20, t));
  CHECK(l.announce(conn(4), 60u << 20, t));
  CHECK_FALSE(l.announce(conn(5), 60u << 20, t)); // 180 MiB in total
  CHECK(limits_of(l)
        == std::vector<std::string>{"buffered_per_peer", "buffered_total"});
  l.close(conn(3));
  CHECK(l.stats().buffered == 60u << 20);
  CHECK(l.announce(conn(6), 60u << 20, t));
  // A new header releases the message before it.
  CHECK(l.announce(conn(6), 1, t));
  CHECK(l.stats().buffered == (60u << 20) + 1);
}

TEST_CASE("a handshake or a message that stalls is refused once, by the "
          "watchdog's clock") {
  connection_limits_config cfg;
  cfg.handshake_timeout = milliseconds{1000};
  cfg.idle_timeout = milliseconds{2000};
  connection_limits l{cfg};
  auto t = clk::now();
  REQUIRE(l.open(conn(1), "slow-handshake", t));
  REQUIRE(l.open(conn(2), "slow-message", t));
  REQUIRE(l.admit(conn(2), "ops", false, t));
  REQUIRE(l.open(conn(3), "idle-but-complete", t));
  REQUIRE(l.admit(conn(3), "ops", false, t));
  REQUIRE(l.announce(conn(2), 1000, t));
  CHECK(l.expired(t + milliseconds{900}).empty());
  CHECK(l.expired(t + milliseconds{1100}) == std::vector<const void*>{conn(1)});
  // Progress keeps a message alive.
  l.progress(conn(2), 10, t + milliseconds{1500});
  CHECK(l.expired(t + milliseconds{3000}).empty());
  CHECK(l.expired(t + milliseconds{3600}) == std::vector<const void*>{conn(2)});
  // Reported once; an idle connection between messages is not timed out.
  CHECK(l.expired(t + hours{1}).empty());
  CHECK(limits_of(l)
        == std::vector<std::string>{"handshake_timeout", "idle_timeout"});
}

TEST_CASE("a client's message rate is bounded by a token bucket") {
  connection_limits_config cfg;
  cfg.client_messages_per_s = 100;
  cfg.message_burst = 10;
  connection_limits l{cfg};
  auto t = clk::now();
  REQUIRE(l.open(conn(1), "a", t));
  REQUIRE(l.admit(conn(1), "ops", false, t));
  REQUIRE(l.open(conn(2), "b", t));
  REQUIRE(l.admit(conn(2), "n1", true, t)); // nodes: unlimited by default
  for (int i = 0; i < 10; ++i)
    CHECK(l.announce(conn(1), 0, t));
  // 100/s refills one token in 10 ms.
  CHECK(l.announce(conn(1), 0, t + milliseconds{10}));
  for (int i = 0; i < 1000; ++i)
    REQUIRE(l.announce(conn(2), 0, t));
  CHECK_FALSE(l.announce(conn(1), 0, t + milliseconds{10}));
  CHECK(limits_of(l) == std::vector<std::string>{"message_rate"});
}

TEST_CASE("failed handshakes are reported, and the report queue is bounded") {
  connection_limits_config cfg;
  cfg.max_connections = 1u << 20;
  connection_limits l{cfg};
  auto t = clk::now();
  REQUIRE(l.open(conn(1), "10.0.0.1:5", t));
  l.handshake_failed(conn(1), "TLS handshake failed: certificate verify failed");
  auto rs = l.take_refusals();
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].limit == "tls_handshake");
  CHECK(rs[0].peer.empty());
  l.close(conn(1));
  for (int i = 0; i < 2000; ++i) {
    l.open(conn(i % 4000), "x", t);
    l.handshake_failed(conn(i % 4000), "bad");
    l.close(conn(i % 4000));
  }
  CHECK(l.take_refusals().size() == connection_limits::max_reports);
  CHECK(l.stats().refusals_dropped == 2000 - connection_limits::max_reports);
  CHECK(l.stats().refused == 2001);
}

TEST_CASE("a peer that does not read what the node sends it, output that "
          "waits unacknowledged is dropped, and a client that is behind may "
          "not keep asking") {
  connection_limits_config cfg;
  cfg.idle_timeout = milliseconds{2000};
  cfg.max_client_unread_messages = 3;
  connection_limits l{cfg};
  auto t = clk::now();
  REQUIRE(l.open(conn(1), "reads-slowly", t));
  REQUIRE(l.admit(conn(1), "ops", false, t));
  REQUIRE(l.open(conn(2), "never-reads", t));
  REQUIRE(l.admit(conn(2), "ops", false, t));
  REQUIRE(l.open(conn(3), "asks-and-never-reads", t));
  REQUIRE(l.admit(conn(3), "ops", false, t));
  REQUIRE(l.open(conn(4), "a-node", t));
  REQUIRE(l.admit(conn(4), "n2", true, t));
  constexpr std::uint64_t buf = 100000;
  // Nothing waiting: nothing to watch.
  l.output(conn(1), 0, buf, false, false, t);
  CHECK(l.expired(t + hours{1}).empty());
  // Output waits: the clock starts; an acknowledgement resets it.
  l.output(conn(1), 10, buf, false, false, t);
  l.output(conn(2), 10, buf, false, true, t);
  l.output(conn(1), 10, buf, false, true, t + milliseconds{1500});
  l.output(conn(2), 10, buf, false, false, t + milliseconds{1500});
  CHECK(l.expired(t + milliseconds{1900}).empty());
  CHECK(l.expired(t + milliseconds{2100}) == std::vector<const void*>{conn(2)});
  l.output(conn(1), 0, buf, false, false, t + milliseconds{3000}); // all read
  CHECK(l.expired(t + milliseconds{6000}).empty());
  // Behind (half the buffer unread or more), a client may send 3 messages,
  // not 4; once it caught up the count starts again. Not behind, it may
  // send as many as its rate allows.
  l.output(conn(3), buf / 4, buf, false, true, t);
  for (int i = 0; i < 10; ++i)
    CHECK(l.announce(conn(3), 10, t));
  l.output(conn(3), buf / 2, buf, false, true, t);
  for (int i = 0; i < 3; ++i)
    CHECK(l.announce(conn(3), 10, t));
  l.output(conn(3), buf / 4, buf, false, true, t);
  l.output(conn(3), buf, buf, false, false, t);
  for (int i = 0; i < 3; ++i)
    CHECK(l.announce(conn(3), 10, t));
  CHECK_FALSE(l.announce(conn(3), 10, t));
  // A full kernel buffer is behind too, though its bookkeeping leaves
  // less than half of it in bytes (what Linux shows for small writes).
  REQUIRE(l.open(conn(5), "fills-the-kernel", t));
  REQUIRE(l.admit(conn(5), "ops", false, t));
  l.output(conn(5), buf * 45 / 100, buf, true, true, t);
  for (int i = 0; i < 3; ++i)
    CHECK(l.announce(conn(5), 10, t));
  CHECK_FALSE(l.announce(conn(5), 10, t));
  // A node may (its messages are the cluster's work), but not stall.
  l.output(conn(4), buf, buf, false, false, t);
  for (int i = 0; i < 100; ++i)
    CHECK(l.announce(conn(4), 0, t));
  CHECK(l.expired(t + milliseconds{2100}) == std::vector<const void*>{conn(4)});
  CHECK(limits_of(l) == std::vector<std::string>{"output_stalled",
                                                 "unread_replies",
                                                 "unread_replies",
                                                 "output_stalled"});
}

TEST_CASE("a client certificate may message the gate only, a node any "
          "actor") {
  connection_limits_config cfg;
  connection_limits open_all{cfg};
  auto t = clk::now();
  REQUIRE(open_all.open(conn(1), "a", t));
  REQUIRE(open_all.admit(conn(1), "ops", false, t));
  CHECK(open_all.address(conn(1), hdr(2, 0, 99))); // no targets: any
  cfg.client_targets = {7};
  cfg.client_named_targets = {42};
  connection_limits l{cfg};
  for (int i = 1; i <= 8; ++i) {
    REQUIRE(l.open(conn(i), "x", t));
    REQUIRE(l.admit(conn(i), i == 7 ? "n2" : "ops", i == 7, t));
  }
  // What a console sends: its handshake, requests to the gate, monitors
  // of the actors whose handles it got (CAF announces its proxies; nothing
  // is delivered to them), heartbeats, its own actors' ends.
  CHECK(l.address(conn(1), hdr(1, 0, 0)));
  CHECK(l.address(conn(1), hdr(2, 0, 7)));
  CHECK(l.address(conn(1), hdr(4, 0, 7)));
  CHECK(l.address(conn(1), hdr(4, 0, 3)));
  CHECK(l.address(conn(1), hdr(6, 0, 0)));
  CHECK(l.address(conn(1), hdr(5, 0, 0)));
  CHECK(l.address(conn(1), hdr(2, 1, 42))); // CAF's greeting
  // The node's actors that messaged it (CAF's greeting the other way)
  // may be answered, on that connection.
  l.sent(conn(1), hdr(2, 0, 5, 31));
  CHECK(l.address(conn(1), hdr(2, 0, 31)));
  CHECK(l.address(conn(1), hdr(2, 0, 31)));
  // Another actor, another named one, a routed message, a server's
  // handshake, an operation that does not exist.
  CHECK_FALSE(l.address(conn(2), hdr(2, 0, 8)));
  CHECK_FALSE(l.address(conn(3), hdr(2, 1, 7)));
  CHECK_FALSE(l.address(conn(4), hdr(0, 0, 0)));
  CHECK_FALSE(l.address(conn(5), hdr(3, 0, 7)));
  CHECK_FALSE(l.address(conn(6), hdr(9, 0, 7)));
  CHECK_FALSE(l.address(conn(8), hdr(2, 0, 31))); // not its contact
  CHECK_FALSE(l.address(conn(3), hdr(2, 0, 7))); // refused stays refused
  // A node certificate is a member: any actor.
  CHECK(l.address(conn(7), hdr(2, 0, 12345)));
  CHECK(l.address(conn(7), hdr(3, 1, 1)));
  CHECK(limits_of(l) == std::vector<std::string>(6, "client_target"));
}
