// A cluster of real exo-node processes on 127.0.0.1: forming, converging,
// noticing a SIGKILL within 3 s, re-choosing the coordinator, rejoining,
// refusing strangers, and answering the console.

#include "test/support/cluster.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <memory>
#include <thread>

using namespace exo::test;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

TEST_CASE("three nodes form a cluster, detect a SIGKILL within 3 s, "
          "re-choose the coordinator and take the node back") {
  pki p{"exo-cluster"};
  for (auto n : {"n1", "n2", "n3"})
    p.node(n);
  auto n1 = start_node(p, {"n1"});
  auto n2 = start_node(p, node_options{"n2"}.seed(n1.port));
  auto n3 = start_node(p, node_options{"n3"}.seed(n2.port)); // knows only n2: learns n1 by gossip
  for (auto* n : {&n1, &n2, &n3}) {
    INFO("view of " << n->name);
    CHECK(eventually(
      p, n->port, "nodes",
      [](const std::string& out) {
        return status_of(out, "n1") == "alive"
               && status_of(out, "n2") == "alive"
               && status_of(out, "n3") == "alive";
      },
      15s));
  }
  auto coord = console(p, n3.port, {"coordinator"});
  CHECK(coord.out == "n1\n");
  // Every node's devices are visible from any node.
  auto devs = console(p, n3.port, {"devices"});
  REQUIRE(devs.code == 0);
  for (auto n : {"n1", "n2", "n3"})
    CHECK(contains(devs.out, std::string{n} + "  "));
  CHECK(contains(devs.out, "sim:adreno-740:0"));

  // SIGKILL the coordinator: dead everywhere within 3 s, n2 takes over.
  auto killed_at = clock_type::now();
  n1.proc->signal(SIGKILL);
  CHECK(n1.proc->wait(10s) == 128 + SIGKILL);
  // The nodes' own log lines time the verdict (a console per poll would
  // add its own start-up to the measurement on a loaded machine).
  for (auto* n : {&n2, &n3}) {
    INFO("log of " << n->name);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      3s - (clock_type::now() - killed_at));
    CHECK(n->proc->wait_for_output("member n1 is dead",
                                   std::max(left, 0ms)));
  }
  auto detected = clock_type::now() - killed_at;
  CHECK(detected < 3s);
  for (auto* n : {&n2, &n3}) {
    INFO("view of " << n->name);
    CHECK(eventually(
      p, n->port, "nodes",
      [](const std::string& out) { return status_of(out, "n1") == "dead"; },
      10s));
  }
  CHECK(console(p, n3.port, {"coordinator"}).out == "n2\n");
  CHECK(console(p, n2.port, {"coordinator"}).out == "n2\n");

  // Restart n1 under its name: it rejoins and is coordinator again.
  auto again = start_node(p, node_options{"n1"}.seed(n2.port));
  for (auto* n : {&n2, &n3, &again}) {
    INFO("view of " << n->name);
    CHECK(eventually(
      p, n->port, "nodes",
      [](const std::string& out) { return status_of(out, "n1") == "alive"; },
      10s));
  }
  CHECK(eventually(
    p, n3.port, "coordinator",
    [](const std::string& out) { return contains(out, "n1"); }, 5s));

  // A graceful stop is seen at once as "left".
  n3.proc->signal(SIGTERM);
  CHECK(n3.proc->wait(20s) == 0);
  CHECK(eventually(
    p, n2.port, "nodes",
    [](const std::string& out) { return status_of(out, "n3") == "left"; },
    2s));
}

TEST_CASE("a node frozen past the failure timeout joins its peers again "
          "when it thaws, and declares none of them dead") {
  pki p{"exo-thaw"};
  for (auto n : {"n1", "n2", "n3", "n4"})
    p.node(n);
  auto n1 = start_node(p, {"n1"});
  auto n2 = start_node(p, node_options{"n2"}.seed(n1.port));
  auto n3 = start_node(p, node_options{"n3"}.seed(n1.port));
  auto n4 = start_node(p, node_options{"n4"}.seed(n1.port));
  auto all_alive = [](const std::string& out) {
    return status_of(out, "n1") == "alive" && status_of(out, "n2") == "alive"
           && status_of(out, "n3") == "alive"
           && status_of(out, "n4") == "alive";
  };
  for (auto* n : {&n1, &n2, &n3, &n4}) {
    INFO("view of " << n->name);
    REQUIRE(eventually(p, n->port, "nodes", all_alive, 20s));
  }
  // Frozen until every peer declared it dead and dropped it: nothing of
  // theirs reaches it when it thaws, until it joins them again.
  n3.proc->signal(SIGSTOP);
  std::map<std::string, std::size_t> at_verdict; // each peer's log then
  for (auto* n : {&n1, &n2, &n4}) {
    INFO("log of " << n->name);
    CHECK(n->proc->wait_for_output("member n3 is dead", 20s));
    at_verdict[n->name] = n->proc->out().size();
  }
  std::this_thread::sleep_for(500ms);
  auto before = n3.proc->out().size();
  n3.proc->signal(SIGCONT);
  CHECK(n3.proc->wait_for_output("joining them again", 10s));
  for (auto* n : {&n1, &n2, &n3, &n4}) {
    INFO("view of " << n->name);
    INFO("its log: " << n->proc->out() << n->proc->err());
    CHECK(eventually(p, n->port, "nodes", all_alive, 10s));
  }
  // Twice the failure timeout later: still one view, and the thawed node
  // declared nobody dead (it used to, 1.5 s after it thawed, since its
  // peers had stopped talking to it).
  std::this_thread::sleep_for(3s);
  for (auto* n : {&n1, &n2, &n3, &n4}) {
    INFO("view of " << n->name);
    CHECK(eventually(p, n->port, "nodes", all_alive, 2s));
  }
  auto after = n3.proc->out().substr(before);
  INFO(after);
  CHECK(!contains(after, "is dead"));
  // Each peer that had dropped it took it back by a join: its gossip
  // after the thaw reached the peer ahead of the join's proof, and the
  // peer told it to join again; or the join it starts on waking finished
  // before any gossip of its reached that peer (gossip goes to a few
  // peers a round: seen under load), and the peer accepted it; or the
  // connection itself had gone meanwhile (seen under load), and the
  // thawed node joined that peer afresh.
  for (auto* n : {&n1, &n2, &n4}) {
    INFO("log of " << n->name);
    const auto since = n->proc->out().substr(at_verdict[n->name]);
    CHECK((contains(since, "asked n3 to join again")
           || contains(since, "member n3 joined from")
           || contains(after, "joined " + n->name + " (")));
  }
}

TEST_CASE("the console lists links, actors and inspects one, in tables and "
          "JSON") {
  pki p{"exo-cluster"};
  p.node("a");
  p.node("b");
  auto a = start_node(p, {"a"});
  auto b = start_node(p, node_options{"b"}.seed(a.port));
  REQUIRE(eventually(
    p, a.port, "nodes",
    [](const std::string& out) { return status_of(out, "b") == "alive"; },
    15s));
  auto m = console(p, a.port, {"measure"});
  REQUIRE(m.code == 0);
  CHECK(contains(m.out, "RTT p50"));
  CHECK(contains(m.out, "MB/s"));
  auto links = console(p, a.port, {"links"}, {true});
  CHECK(contains(links.out, "\"from\": \"a\", \"to\": \"b\""));
  auto actors = console(p, b.port, {"actors a"});
  REQUIRE(actors.code == 0);
  CHECK(contains(actors.out, "device/cpu:0"));
  CHECK(contains(actors.out, "gate"));
  CHECK(contains(actors.out, "node"));
  // Every actor of the node answers inspection, the services included.
  INFO(actors.out);
  CHECK_FALSE(contains(actors.out, "no answer"));
  for (auto svc : {"jobs", "shards", "audit", "dev", "placement", "thermal"})
    CHECK(contains(actors.out, std::string{"a     "} + svc));
  auto insp = console(p, b.port, {"inspect a:device/sim:adreno-740:0"});
  INFO(insp.out << insp.err);
  REQUIRE(insp.code == 0);
  CHECK(contains(insp.out, "live_handles"));
  auto j = console(p, b.port, {"inspect gate"}, {true});
  CHECK(contains(j.out, "\"kind\": \"gate\""));
  // Clear errors for bad input.
  auto bad = console(p, a.port, {"frobnicate"});
  CHECK(bad.code == 1);
  CHECK(contains(bad.err, "unknown command \"frobnicate\""));
  bad = console(p, a.port, {"inspect"});
  CHECK(bad.code == 1);
  CHECK(contains(bad.err, "inspect expects 1 argument(s), got 0"));
  bad = console(p, a.port, {"actors nowhere"});
  CHECK(bad.code == 1);
  CHECK(contains(bad.err, "no live node named \"nowhere\""));
  CHECK(console(p, a.port, {"help"}).out.find("inspect") != std::string::npos);
  // Several nodes named: one that cannot be reached (a port bound but not
  // listening refuses at once) gives way to the next.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  auto closed = ntohs(addr.sin_port);
  console_options o;
  o.fallback = {a.port};
  auto fell = console(p, closed, {"coordinator"}, o);
  INFO(fell.out << fell.err);
  CHECK(fell.code == 0);
  CHECK(fell.out == "a\n");
  CHECK(contains(fell.err, "cannot connect to 127.0.0.1:"
                             + std::to_string(closed)));
  CHECK(contains(fell.err, "; trying 127.0.0.1:" + std::to_string(a.port)));
  // None answers: the last one's error, exit 1.
  o.fallback = {closed};
  auto none = console(p, closed, {"coordinator"}, o);
  CHECK(none.code == 1);
  CHECK(contains(none.err, "cannot connect"));
  close(fd);
}

TEST_CASE("strangers are refused and the node stays healthy") {
  pki p{"exo-cluster"};
  p.node("h1");
  auto h1 = start_node(p, {"h1"});
  auto port = std::to_string(h1.port);
  // A client from another CA.
  pki other{"exo-cluster"};
  auto r = console(other, h1.port, {"nodes"});
  CHECK(r.code == 1);
  CHECK(contains(r.err, "cannot connect"));
  // A self-signed client certificate: a CA certificate used as a client.
  {
    std::vector<std::string> argv{exo_console(),          "--connect",
                                  "127.0.0.1:" + port,    "--cert",
                                  other.dir + "/ca/ca.crt", "--key",
                                  other.dir + "/ca/ca.key", "--ca",
                                  p.dir + "/ca/ca.crt",   "--exec",
                                  "nodes"};
    auto s = run(argv, 30s);
    CHECK(s.code != 0);
  }
  // No client certificate at all.
  r = run({exo_console(), "--connect", "127.0.0.1:" + port, "--exec",
           "nodes"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "never connects without a client certificate"));
  // Plain TCP with garbage, and a plain-text CAF handshake attempt.
  for (std::string junk : {std::string(4096, 'x'),
                           std::string("\x00\x00\x00\x20garbage", 11)}) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(h1.port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))
            == 0);
    auto n = write(fd, junk.data(), junk.size());
    CHECK(n > 0);
    char buf[256];
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void) read(fd, buf, sizeof(buf));
    close(fd);
  }
  // A node that claims the name of the live node h1 (a real certificate
  // for "h1" from our CA, as a second process), joining through h2.
  p.node("h2");
  auto h2 = start_node(p, node_options{"h2"}.seed(h1.port));
  REQUIRE(eventually(
    p, h2.port, "nodes",
    [](const std::string& out) { return status_of(out, "h1") == "alive"; },
    15s));
  p.node("h1"); // re-issue: same name, new key
  auto impostor_cfg = write_node_config(p, node_options{"h1"}.seed(h2.port).seed(h1.port));
  process impostor{{exo_node(), "--config", impostor_cfg}};
  CHECK(impostor.wait_for_output("is in use by a live member", 20s));
  // h2 refuses the impostor's proof (and audits it): wait for that answer.
  CHECK(impostor.wait_for_output("join refused by h2", 20s));
  impostor.signal(SIGKILL);
  impostor.wait(10s);
  // Still healthy: the console works and both know the real h1 alive.
  r = console(p, h1.port, {"nodes"}, {true});
  REQUIRE(r.code == 0);
  CHECK(status_of(r.out, "h1") == "alive");
  r = console(p, h2.port, {"nodes"}, {true});
  CHECK(contains(r.out, "\"port\": " + port));
  CHECK(status_of(r.out, "h1") == "alive");
  CHECK(h1.proc->running());
  auto g = console(p, h1.port, {"inspect gate"});
  CHECK(contains(g.out, "joins_refused"));
  // The refusal is in h2's audit log (the sink flushes every second).
  auto refused_audited = [&] {
    auto q = console(p, h2.port, {"audit query type=join_refused limit=10"},
                     {true});
    return q.code == 0 && contains(q.out, "\"claimed\":\"h1\"")
           && contains(q.out, "is in use by a live member");
  };
  bool seen = false;
  for (int i = 0; i < 60 && !(seen = refused_audited()); ++i)
    std::this_thread::sleep_for(250ms);
  CHECK(seen);
}

TEST_CASE("members that left or died are forgotten after "
          "network.forget_departed_ms, with their links, on every node, and "
          "may join again") {
  pki p{"exo-forget"};
  for (auto n : {"n1", "n2", "n3", "n4"})
    p.node(n);
  // 4 s: the least a 1.5 s failure timeout allows (more than twice it).
  auto opts = [](const char* name) {
    node_options o{name};
    o.network_extra = R"(, "forget_departed_ms": 4000)";
    return o;
  };
  auto n1 = start_node(p, opts("n1"));
  auto n2 = start_node(p, opts("n2").seed(n1.port));
  auto n3 = start_node(p, opts("n3").seed(n1.port));
  auto n4 = start_node(p, opts("n4").seed(n1.port));
  REQUIRE(eventually(
    p, n1.port, "nodes",
    [](const std::string& out) {
      return status_of(out, "n2") == "alive" && status_of(out, "n3") == "alive"
             && status_of(out, "n4") == "alive";
    },
    15s));
  // Links to every member measured and listed.
  REQUIRE(console(p, n1.port, {"measure"}).code == 0);
  auto links = console(p, n1.port, {"links"}, {true});
  INFO(links.out);
  REQUIRE(contains(links.out, "\"from\": \"n1\", \"to\": \"n3\""));
  REQUIRE(contains(links.out, "\"from\": \"n1\", \"to\": \"n4\""));
  // n3 leaves, n4 dies: listed as such at first, then forgotten.
  n3.proc->signal(SIGTERM);
  CHECK(n3.proc->wait(20s) == 0);
  n4.proc->signal(SIGKILL);
  CHECK(n4.proc->wait(10s) == 128 + SIGKILL);
  CHECK(eventually(
    p, n2.port, "nodes",
    [](const std::string& out) {
      return status_of(out, "n3") == "left" && status_of(out, "n4") == "dead";
    },
    10s));
  for (auto* n : {&n1, &n2}) {
    INFO("log of " << n->name << ": " << n->proc->out());
    CHECK(n->proc->wait_for_output("member n3 forgotten (departed longer "
                                   "than network.forget_departed_ms)",
                                   20s));
    CHECK(n->proc->wait_for_output("member n4 forgotten", 20s));
    auto view = console(p, n->port, {"nodes"}, {true});
    INFO(view.out);
    CHECK(!contains(view.out, "\"n3\""));
    CHECK(!contains(view.out, "\"n4\""));
  }
  // Our record of links no longer lists them, nor do the others'.
  CHECK(eventually(
    p, n1.port, "links",
    [](const std::string& out) {
      return contains(out, "\"to\": \"n2\"") && !contains(out, "n3")
             && !contains(out, "n4");
    },
    10s, {true}));
  // A forgotten member comes back as a member like any other.
  auto again = start_node(p, opts("n3").seed(n2.port));
  for (auto* n : {&n1, &n2}) {
    INFO("view of " << n->name);
    CHECK(eventually(
      p, n->port, "nodes",
      [](const std::string& out) { return status_of(out, "n3") == "alive"; },
      15s));
  }
}
