// The scenario runner's network namespaces (runtime/scenario/netns): the
// plan (names, addresses, a free subnet) without privileges; then, as root,
// a real network: nodes reach each other over the bridge, a shaped link
// runs at its configured rate (within 20%), a partition cuts a node off and
// healing restores it, and teardown -- also after a failure half-way up --
// leaves no namespace, link or process behind. Without root or namespaces
// the privileged cases are skipped (exit 77), loudly.

#include "runtime/scenario/netns.hpp"
#include "runtime/scenario/process.hpp"
#include "test/support/tools.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>

using namespace exo::scenario;
using std::chrono::milliseconds;

namespace {

void require_namespaces() {
  auto why = netns_unavailable();
  if (!why.empty())
    exo::test::skip_test("network namespaces: " + why);
}

std::vector<std::string> in_ns(const netns_network& net,
                               const std::string& node,
                               std::vector<std::string> argv) {
  auto p = net.exec_prefix(node);
  p.insert(p.end(), argv.begin(), argv.end());
  return p;
}

std::string read_all(const std::string& path) {
  std::ifstream in{path};
  return {std::istreambuf_iterator<char>(in), {}};
}

/// Starts the probe's server in `node`'s namespace on its address:port,
/// its output in `out`; returns once it listens (it serves one connection).
pid_t start_server(const netns_network& net, const std::string& node,
                   const std::string& port, const std::string& out) {
  auto& n = *net.plan().find(node);
  pid_t pid = spawn_to_files(
    in_ns(net, node, {EXO_NETNS_PROBE, "serve", n.address, port}), out,
    "/dev/null");
  for (int i = 0; i < 200; ++i) {
    if (read_all(out).find("listening") != std::string::npos)
      return pid;
    std::this_thread::sleep_for(milliseconds{10});
  }
  FAIL("the probe's server did not listen within 2 s");
  return pid;
}

/// Sends `bytes` from `from` to `to`'s probe; the Mbit/s `to` measured.
double measure(const netns_network& net, const std::string& from,
               const std::string& to, long long bytes) {
  auto& dst = *net.plan().find(to);
  auto out = "/tmp/" + net.plan().tag + "-serve.out";
  pid_t server = start_server(net, to, "9100", out);
  auto sent = run_captured(in_ns(net, from, {EXO_NETNS_PROBE, "send",
                                             dst.address, "9100",
                                             std::to_string(bytes)}),
                           milliseconds{60000});
  REQUIRE(sent.code == 0);
  REQUIRE(wait_exit(server, milliseconds{30000}) == 0);
  auto text = read_all(out);
  std::remove(out.c_str());
  std::smatch m;
  static const std::regex rate{"received (\\d+) bytes in [0-9.]+ s: ([0-9.]+) Mbit/s"};
  INFO(text);
  REQUIRE(std::regex_search(text, m, rate));
  CHECK(std::stoll(m[1]) == bytes);
  return std::stod(m[2]);
}

} // namespace

TEST_CASE("a namespace network is planned with short names and a free subnet") {
  auto p = make_netns_plan("exo1a2b", {"n1", "gpu-desktop", "laptop.2"}, {});
  CHECK(p.bridge == "exo1a2bbr");
  REQUIRE(p.nodes.size() == 3);
  std::set<std::string> addresses{p.bridge_address};
  for (auto& n : p.nodes) {
    CHECK(n.veth_host.size() <= 15); // IFNAMSIZ - 1
    CHECK(n.ns == "exo1a2b-" + n.name);
    CHECK(n.address.rfind("10.", 0) == 0);
    addresses.insert(n.address);
  }
  CHECK(addresses.size() == 4);
  CHECK(p.find("gpu-desktop")->veth_host == "exo1a2bh1");
  CHECK(p.find("nobody") == nullptr);
  // The host's own networks are never reused: take everything but one /24.
  std::vector<std::string> taken;
  for (int second = 200; second < 250; ++second)
    if (second != 231)
      taken.push_back("10." + std::to_string(second) + ".0.0/16");
  taken.push_back("10.231.0.0/17"); // and half of the last /16
  taken.push_back("10.231.200.7");  // and one address
  auto q = make_netns_plan("exo1a2b", {"a"}, taken);
  CHECK(q.subnet.rfind("10.231.", 0) == 0);
  CHECK(q.subnet != "10.231.200.0/24");
  const int third = std::stoi(q.subnet.substr(7));
  CHECK(third >= 128);
  taken.push_back("10.0.0.0/8");
  CHECK_THROWS_AS(make_netns_plan("exo1a2b", {"a"}, taken),
                  std::invalid_argument);
  CHECK_THROWS_AS(make_netns_plan("exo12", {"a"}, {}), std::invalid_argument);
  CHECK_THROWS_AS(make_netns_plan("exo1a2b", {}, {}), std::invalid_argument);
  CHECK(make_netns_tag().size() == 7);
  auto tbf = tbf_args(100);
  CHECK(tbf == std::vector<std::string>{"rate", "100000kbit", "burst",
                                        "125000", "latency", "250ms"});
  CHECK(tbf_args(1)[3] == "16384"); // at least 16 KiB
}

TEST_CASE("namespaced nodes reach each other and a shaped link runs at its rate") {
  require_namespaces();
  auto tag = make_netns_tag();
  auto plan = make_netns_plan(tag, {"a", "b"}, netns_taken_prefixes());
  netns_network net{plan};
  CHECK(netns_leftovers(tag).size() == 5); // 2 namespaces, bridge, 2 veths
  net.shape("a", 40);
  const double mbit = measure(net, "a", "b", 6'000'000);
  INFO(mbit << " Mbit/s through a 40 Mbit/s link");
  CHECK(mbit >= 40 * 0.8);
  CHECK(mbit <= 40 * 1.2);
  // The other direction is shaped too (the host end of a's pair).
  const double back = measure(net, "b", "a", 6'000'000);
  INFO(back << " Mbit/s into a");
  CHECK(back >= 40 * 0.8);
  CHECK(back <= 40 * 1.2);
  net.shape("a", 0);
  CHECK(measure(net, "a", "b", 20'000'000) > 40 * 1.5);
  CHECK(net.down().empty());
  CHECK(netns_leftovers(tag).empty());
}

TEST_CASE("a partition cuts a node off and healing restores it") {
  require_namespaces();
  auto tag = make_netns_tag();
  netns_network net{make_netns_plan(tag, {"a", "b"}, netns_taken_prefixes())};
  auto& a = *net.plan().find("a");
  pid_t server =
    start_server(net, "a", "9101", "/tmp/" + tag + "-partition.out");
  auto reach = [&] {
    return run_captured(in_ns(net, "b", {EXO_NETNS_PROBE, "connect",
                                         a.address, "9101", "500"}),
                        milliseconds{5000})
      .code;
  };
  REQUIRE(reach() == 0); // (the server took that connection and ended)
  wait_exit(server, milliseconds{5000});
  server = start_server(net, "a", "9101", "/tmp/" + tag + "-partition.out");
  net.set_connected("a", false);
  CHECK(reach() == 1);
  net.set_connected("a", true);
  int code = 1;
  for (int i = 0; i < 50 && code != 0; ++i) {
    code = reach();
    if (code != 0)
      std::this_thread::sleep_for(milliseconds{100});
  }
  CHECK(code == 0);
  wait_exit(server, milliseconds{5000});
  // A process still running in a namespace is killed by the teardown.
  pid_t sleeper = spawn_to_files(in_ns(net, "b", {"/bin/sleep", "600"}),
                                 "/dev/null", "/dev/null");
  std::this_thread::sleep_for(milliseconds{200});
  CHECK(net.down().empty());
  CHECK(wait_exit(sleeper, milliseconds{5000}) == 128 + SIGKILL);
  CHECK(netns_leftovers(tag).empty());
  std::remove(("/tmp/" + tag + "-partition.out").c_str());
}

TEST_CASE("a delayed link adds its latency to round trips and drops its loss") {
  require_namespaces();
  auto tag = make_netns_tag();
  netns_network net{
    make_netns_plan(tag, {"a", "b", "c"}, netns_taken_prefixes())};
  auto log = "/tmp/" + tag + "-netem";
  net.set_delay("a", 30, 0, 0, EXO_NETEM, log + "-a.log");
  net.set_delay("c", 5, 0, 100, EXO_NETEM, log + "-c.log"); // drops all
  auto& b = *net.plan().find("b");
  auto rtt = [&](const std::string& from) {
    pid_t server = start_server(net, "b", "9102", log + "-serve.out");
    auto r = run_captured(in_ns(net, from, {EXO_NETNS_PROBE, "connect",
                                            b.address, "9102", "2000"}),
                          milliseconds{10000});
    terminate(server, milliseconds{500});
    std::smatch m;
    static const std::regex re{"connected in ([0-9.]+) ms"};
    if (r.code != 0 || !std::regex_search(r.out, m, re))
      return -1.0;
    return std::stod(m[1]);
  };
  // a's packets wait 30 ms (its SYN), b's answer goes at once: one round
  // trip of about 30 ms.
  const double ms = rtt("a");
  INFO("a -> b: " << ms << " ms");
  CHECK(ms >= 29);
  CHECK(ms <= 45);
  CHECK(rtt("c") < 0); // c loses every packet: it never connects
  // The shaping still works behind the delay line.
  net.shape("a", 40);
  const double mbit = measure(net, "a", "b", 4'000'000);
  INFO(mbit << " Mbit/s through a delayed 40 Mbit/s link");
  CHECK(mbit >= 40 * 0.7);
  CHECK(mbit <= 40 * 1.2);
  CHECK(net.down().empty());
  CHECK(netns_leftovers(tag).empty());
  for (auto* f : {"-a.log", "-c.log", "-serve.out"})
    std::remove((log + f).c_str());
}

TEST_CASE("a network that fails half-way up leaves nothing behind") {
  require_namespaces();
  auto tag = make_netns_tag();
  auto plan = make_netns_plan(tag, {"a", "b"}, netns_taken_prefixes());
  plan.nodes[1].ns = plan.nodes[0].ns; // the second `ip netns add` fails
  try {
    netns_network net{plan};
    FAIL("a duplicate namespace was accepted");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("ip netns add " + plan.nodes[0].ns));
  }
  CHECK(netns_leftovers(tag).empty());
}
