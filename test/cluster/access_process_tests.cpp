// Access control across a cluster of real exo-node processes on 127.0.0.1
// (issue 6): tokens issued on one node work on every node; expired,
// forged and truncated tokens are refused everywhere; only an admin may
// issue or revoke; a revocation made through one node's console reaches
// every node within 1 s and refuses the principal's next device operation
// everywhere; it survives a restart; every refusal is audited. The thermal
// overview of the console covers the whole cluster. Clients' console
// commands are checked against a token's permission (strictly, when the
// node requires a token), and client reads and policy changes are audited.

#include "runtime/scenario/listen_port.hpp"
#include "test/support/cluster.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <sys/stat.h>
#include <memory>
#include <thread>

using namespace exo::test;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

/// The decimal number starting at `pos` of `s` (0 when there is none).
long number_at(const std::string& s, std::size_t pos) {
  long v = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9')
    v = v * 10 + (s[pos++] - '0');
  return v;
}

/// How often `what` occurs in `s`.
std::size_t occurrences(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos;
       at = s.find(what, at + what.size()))
    ++n;
  return n;
}

/// A CA, node certificates, a client certificate and the cluster's shared
/// access key (tokens are HMAC-signed with it and checked on every node).
struct cluster {
  pki p{"exo-access"};
  std::string dir = p.dir;
  std::string key_file = dir + "/access.key";
  /// Extra keys of every node's "safety" object, e.g.
  /// `, "console_requires_token": true`.
  std::string safety_extra;

  cluster() {
    write_file(key_file, "6f1c0e4d2b8a7f3e9d5c1b0a8f7e6d5c4b3a29181706f5e4d3c2"
                         "b1a09f8e7d6c\n");
    ::chmod(key_file.c_str(), 0600);
  }

  std::string state_dir(const std::string& name) const {
    return dir + "/" + name + "/state";
  }

  /// Starts `name` on `port` (0: a new node with a fresh certificate on a
  /// free port, which is written back; else a restart on that port). The
  /// port lies outside the kernel's ephemeral range, where no other process
  /// of the machine is given it while the node is down.
  std::unique_ptr<process> start(const std::string& name,
                                 std::uint16_t& port,
                                 const std::vector<std::uint16_t>& seeds) {
    if (port == 0) {
      p.node(name);
      port = exo::scenario::stable_listen_port("127.0.0.1");
    }
    node_options o{name};
    o.port = port;
    o.seeds = seeds;
    o.state_dir = state_dir(name);
    o.devices = R"({"include": ["sim"],
                  "simulated": [{"profile": "adreno-740"}],
                  "rescan_interval_s": 0})";
    o.extra = R"(, "safety": {"access_key_file": ")" + key_file + "\""
              + safety_extra + "}";
    auto n = start_node(p, o);
    port = n.port;
    return std::move(n.proc);
  }

  /// `cmd` from the client "ops"; a command that needs a token by default
  /// and names none carries the node's admin token unless `as_operator` is
  /// false (test/support/cluster.hpp).
  run_result console(std::uint16_t port, const std::string& cmd,
                     bool json = false, bool as_operator = true) const {
    console_options o;
    o.json = json;
    o.operator_token = as_operator;
    return exo::test::console(p, port, {cmd}, o);
  }

  /// Polls `cmd` on `port` until `pred(result)` holds or `timeout` passes.
  template <class Pred>
  bool eventually(std::uint16_t port, const std::string& cmd, Pred pred,
                  std::chrono::milliseconds timeout) const {
    return poll_console(p, port, cmd, pred, timeout);
  }
};

const std::string device = "sim:adreno-740:0";

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

} // namespace

TEST_CASE("tokens are checked on every node, and a revocation through one "
          "console refuses the principal everywhere within 1 s") {
  cluster c;
  std::uint16_t p1 = 0, p2 = 0, p3 = 0;
  auto n1 = c.start("a1", p1, {});
  auto n2 = c.start("a2", p2, {p1});
  auto n3 = c.start("a3", p3, {p1});
  const std::vector<std::uint16_t> ports{p1, p2, p3};
  for (auto port : ports)
    REQUIRE(c.eventually(
      port, "nodes",
      [](const run_result& r) {
        return r.code == 0 && occurrences(r.out, "\"status\": \"alive\"") >= 3;
      },
      30s));
  // The console's cluster thermal overview covers every node's devices
  // (peers push their reports every 2 s).
  for (auto port : {p1, p3}) {
    CHECK(c.eventually(
      port, "thermal",
      [](const run_result& r) {
        return r.code == 0 && contains(r.out, "\"a1\"")
               && contains(r.out, "\"a2\"") && contains(r.out, "\"a3\"");
      },
      30s));
    auto t = c.console(port, "thermal");
    INFO(t.out << t.err);
    CHECK(contains(t.out, "hottest: "));
    CHECK(contains(t.out, "paused: none"));
    CHECK(contains(t.out, "TIME-TO-LIMIT"));
    for (auto n : {"a1", "a2", "a3"})
      CHECK(contains(t.out, std::string{n} + "/" + device));
  }
  auto admin = first_line(read_file(c.state_dir("a1") + "/access/admin.token"));
  REQUIRE(admin.rfind("exo1.", 0) == 0);

  // Issue through a1's console; the token works on every node.
  auto issue = [&](const std::string& principal, const std::string& extra) {
    auto r = c.console(p1, "token issue principal=" + principal
                             + " role=user " + extra + " auth=" + admin);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return first_line(r.out);
  };
  auto alice = issue("alice", "ttl=600");
  auto bob = issue("bob", "ttl=600");
  auto brief = issue("brief", "ttl=1");
  for (auto port : ports) {
    INFO("node port " << port);
    auto r = c.console(port, "dev sync " + device + " auth=" + alice);
    INFO(r.out << r.err);
    CHECK(r.code == 0);
    CHECK(r.out == "ok\n");
    auto h = c.console(port, "dev alloc " + device + " 4096 auth=" + bob);
    CHECK(h.code == 0);
    auto f = c.console(port, "dev free " + device + " " + first_line(h.out)
                               + " auth=" + bob);
    INFO("alloc: " << h.out << h.err << " free: " << f.out << f.err);
    CHECK(f.code == 0);
  }

  // A test cluster's device fault is an admin's: bob's user token is
  // refused (audited), the admin's heats the simulated device (audited
  // as a device_fault warning).
  {
    auto r = c.console(p2, "dev fault " + device + " heat:5 auth=" + bob);
    INFO(r.out << r.err);
    CHECK(r.code == 1);
    CHECK(contains(r.err, "policy_admin"));
    auto q = c.console(p2, "audit query type=access_denied principal=bob "
                           "limit=100",
                       true);
    CHECK(contains(q.out, "policy_admin"));
    auto ok = c.console(p2, "dev fault " + device + " heat:5 auth=" + admin);
    INFO(ok.out << ok.err);
    CHECK(ok.code == 0);
    CHECK(contains(ok.out, "now at"));
    auto f = c.console(p2, "audit query type=device_fault limit=10", true);
    CHECK(contains(f.out, "heat:5"));
  }

  // Only an admin issues or revokes: alice's own token is not enough.
  for (auto cmd : {"token issue principal=mallory role=admin auth=" + alice,
                   "token revoke principal=bob auth=" + alice,
                   std::string{"token revoke principal=bob"}}) {
    auto r = c.console(p2, cmd);
    CHECK(r.code == 1);
    CHECK(contains(r.err, "admin required"));
  }

  // Forged, truncated, empty and expired tokens are refused on every node.
  auto forged = alice;
  auto mid = forged.size() / 2;
  forged[mid] = forged[mid] == 'A' ? 'B' : 'A';
  auto truncated = alice.substr(0, alice.rfind('.'));
  REQUIRE(c.eventually(
    p1, "dev sync " + device + " auth=" + brief,
    [](const run_result& r) { return contains(r.err, "expired"); }, 20s));
  struct bad_token {
    std::string token, code;
  };
  for (auto& bt : {bad_token{forged, "bad_signature"},
                   bad_token{truncated, "truncated"},
                   bad_token{"", "malformed"},
                   bad_token{brief, "expired"}}) {
    for (auto port : ports) {
      INFO("node port " << port << ", expecting " << bt.code);
      auto r = c.console(port, "dev sync " + device + " auth=" + bt.token);
      CHECK(r.code == 1);
      CHECK(contains(r.err, bt.code));
    }
  }

  // Revoke alice through a2's console (not the node that issued).
  auto rev = c.console(p2, "token revoke principal=alice auth=" + admin, true);
  INFO(rev.out << rev.err);
  REQUIRE(rev.code == 0);
  CHECK(contains(rev.out, "\"peers\":2"));
  auto ms_at = rev.out.find("\"broadcast_ms\":");
  REQUIRE(ms_at != std::string::npos);
  CHECK(number_at(rev.out, ms_at + 15) < 1000);
  // The revoke has returned: alice's very next operation fails everywhere,
  // with no waiting; bob is untouched.
  for (auto port : ports) {
    INFO("node port " << port);
    auto r = c.console(port, "dev sync " + device + " auth=" + alice);
    CHECK(r.code == 1);
    CHECK(contains(r.err, "revoked"));
    CHECK(c.console(port, "dev sync " + device + " auth=" + bob).code == 0);
  }

  // The revocation survives a restart of a node (a3, under its state dir).
  n3->signal(SIGTERM);
  CHECK(n3->wait(30s) == 0);
  n3 = c.start("a3", p3, {p1});
  {
    auto r = c.console(p3, "dev sync " + device + " auth=" + alice);
    CHECK(r.code == 1);
    CHECK(contains(r.err, "revoked"));
    CHECK(c.console(p3, "dev sync " + device + " auth=" + bob).code == 0);
  }

  // Every refusal is audited on the node that refused it.
  for (auto port : ports) {
    INFO("node port " << port);
    auto q = c.console(port, "audit query type=access_denied principal=alice "
                             "limit=100",
                       true);
    CHECK(q.code == 0);
    CHECK(contains(q.out, "\"type\":\"access_denied\""));
    CHECK(contains(q.out, "revoked"));
  }
  auto forged_q = c.console(p1, "audit query type=access_denied limit=1000",
                            true);
  CHECK(contains(forged_q.out, "bad_signature"));
  CHECK(contains(forged_q.out, "truncated"));
  auto revoked_q = c.console(p3, "audit query type=token_revoked limit=10",
                             true);
  CHECK(contains(revoked_q.out, "alice"));
}

namespace {

/// The first admin token of a node, and tokens issued with it.
struct tokens {
  const cluster& c;
  std::uint16_t port;
  std::string admin;

  tokens(const cluster& cl, std::uint16_t p, const std::string& node)
    : c(cl), port(p),
      admin(first_line(read_file(cl.state_dir(node) + "/access/admin.token"))) {
  }

  std::string issue(const std::string& principal, const std::string& role) {
    auto r = c.console(port, "token issue principal=" + principal + " role="
                               + role + " ttl=600 auth=" + admin);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return first_line(r.out);
  }
};

/// Polls the node's audit log (with the admin token) until a record of
/// `type` holding every string of `needles` appears (the sink flushes
/// every second).
bool audited(const cluster& c, std::uint16_t port, const std::string& admin,
             const std::string& type,
             const std::vector<std::string>& needles) {
  return c.eventually(
    port, "audit query type=" + type + " limit=1000 auth=" + admin,
    [&](const run_result& r) {
      if (r.code != 0 || !contains(r.out, "\"type\":\"" + type + "\""))
        return false;
      for (auto& n : needles)
        if (!contains(r.out, n))
          return false;
      return true;
    },
    15s);
}

} // namespace

TEST_CASE("a monitor token may list devices but is refused run and audit, "
          "client reads, device info and policy changes are audited") {
  cluster c;
  std::uint16_t p1 = 0;
  auto n1 = c.start("m1", p1, {});
  tokens t{c, p1, "m1"};
  auto watcher = t.issue("watcher", "monitor");

  // Allowed by the monitor role.
  auto d = c.console(p1, "devices auth=" + watcher);
  INFO(d.out << d.err);
  CHECK(d.code == 0);
  CHECK(contains(d.out, device));
  auto th = c.console(p1, "thermal auth=" + watcher);
  CHECK(th.code == 0);
  auto info = c.console(p1, "dev info " + device + " auth=" + watcher);
  INFO(info.out << info.err);
  CHECK(info.code == 0);

  // Refused: job_submit and audit_read are not the monitor's.
  auto run = c.console(p1, "run --model model.gguf --prompt hi auth="
                                 + watcher);
  INFO(run.out << run.err);
  CHECK(run.code == 1);
  CHECK(contains(run.err, "permission_denied"));
  auto aud = c.console(p1, "audit query type=access_denied auth=" + watcher);
  INFO(aud.out << aud.err);
  CHECK(aud.code == 1);
  CHECK(contains(aud.err, "permission_denied"));
  auto plan = c.console(p1, "plan model.gguf keep=no auth=" + watcher);
  CHECK(plan.code == 1);
  CHECK(contains(plan.err, "permission_denied"));

  // Lenient (the default): no token is served on the certificate alone, but
  // a token that is shown is checked.
  CHECK(c.console(p1, "devices").code == 0);
  auto forged = c.console(p1, "devices auth=exo1.not.valid");
  CHECK(forged.code == 1);
  CHECK(contains(forged.err, "devices: "));

  // A policy change: a revocation.
  auto rev = c.console(p1, "token revoke principal=nobody auth=" + t.admin);
  INFO(rev.out << rev.err);
  CHECK(rev.code == 0);

  // Every refusal is audited with the command, and the four read/change
  // types appear.
  CHECK(audited(c, p1, t.admin, "access_denied",
                {"\"principal\":\"watcher\"", "\"command\":\"run\"",
                 "\"command\":\"audit\"", "\"command\":\"plan\"",
                 "\"permission\":\"job_submit\"",
                 "\"permission\":\"audit_read\""}));
  CHECK(audited(c, p1, t.admin, "device_list",
                {"\"principal\":\"watcher\"", "\"client\":\"ops\""}));
  CHECK(audited(c, p1, t.admin, "monitoring_read",
                {"\"principal\":\"watcher\"", "\"command\":\"thermal\""}));
  CHECK(audited(c, p1, t.admin, "device_info",
                {"\"principal\":\"watcher\"", device}));
  CHECK(audited(c, p1, t.admin, "policy_change",
                {"revocation_added", "nobody"}));
}

TEST_CASE("a node that requires tokens refuses console commands without "
          "one, and audits the refusal") {
  cluster c;
  c.safety_extra = R"(, "console_requires_token": true)";
  std::uint16_t p1 = 0;
  auto n1 = c.start("s1", p1, {});
  tokens t{c, p1, "s1"};
  // "token" and "dev" check auth= themselves: issuing still works.
  auto watcher = t.issue("watcher", "monitor");
  auto user = t.issue("worker", "user");
  for (auto cmd : {"devices", "nodes", "thermal", "audit query limit=1"}) {
    INFO(cmd);
    auto r = c.console(p1, cmd, false, false);
    CHECK(r.code == 1);
    CHECK(contains(r.err, "no auth=TOKEN given"));
  }
  auto d = c.console(p1, "devices auth=" + watcher);
  INFO(d.out << d.err);
  CHECK(d.code == 0);
  CHECK(contains(d.out, device));
  CHECK(c.console(p1, "nodes auth=" + watcher).code == 0);
  CHECK(c.console(p1, "dev sync " + device + " auth=" + user).code == 0);
  CHECK(c.console(p1, "leave auth=" + user).code == 1);
  CHECK(audited(c, p1, t.admin, "access_denied",
                {"\"command\":\"devices\"", "\"token\":\"no\"",
                 "\"client\":\"ops\"", "\"command\":\"leave\""}));
  // An allowed leave is audited too, before it happens.
  CHECK(c.console(p1, "leave auth=" + t.admin).code == 0);
  CHECK(audited(c, p1, t.admin, "node_leave",
                {"\"client\":\"ops\"", "\"token\":\"yes\""}));
}

namespace {

/// Waits until every node of `ports` sees `n` members alive.
void all_alive(const cluster& c, const std::vector<std::uint16_t>& ports,
               std::size_t n) {
  for (auto port : ports)
    REQUIRE(c.eventually(
      port, "nodes",
      [n](const run_result& r) {
        return r.code == 0 && occurrences(r.out, "\"status\": \"alive\"") >= n;
      },
      60s));
}

/// The value of "key":"VALUE" in a JSON reply ("" when absent).
std::string json_string(const std::string& s, const std::string& key) {
  auto at = s.find("\"" + key + "\":\"");
  if (at == std::string::npos)
    return "";
  at += key.size() + 4;
  return s.substr(at, s.find('"', at) - at);
}

} // namespace

TEST_CASE("a node that was down during a revocation learns it from its "
          "peers within seconds of rejoining and persists it") {
  cluster c;
  std::uint16_t p1 = 0, p2 = 0, p3 = 0;
  auto n1 = c.start("c1", p1, {});
  auto n2 = c.start("c2", p2, {p1});
  auto n3 = c.start("c3", p3, {p1});
  all_alive(c, {p1, p2, p3}, 3);
  tokens t{c, p1, "c1"};
  auto alice = t.issue("alice", "user");
  auto bob = t.issue("bob", "user");
  auto dave_r = c.console(p1, "token issue principal=dave role=user ttl=600 "
                              "auth=" + t.admin, true);
  INFO(dave_r.out << dave_r.err);
  REQUIRE(dave_r.code == 0);
  auto dave = json_string(dave_r.out, "token");
  auto dave_id = json_string(dave_r.out, "id");
  REQUIRE(!dave_id.empty());
  for (auto& tk : {alice, bob, dave})
    REQUIRE(c.console(p3, "dev sync " + device + " auth=" + tk).code == 0);

  // c3 goes down; alice (by principal) and dave's token (by id) are
  // revoked meanwhile, through c1 and c2.
  n3->signal(SIGTERM);
  REQUIRE(n3->wait(30s) == 0);
  auto r1 = c.console(p1, "token revoke principal=alice auth=" + t.admin);
  INFO(r1.out << r1.err);
  REQUIRE(r1.code == 0);
  auto r2 = c.console(p2, "token revoke " + dave_id + " auth=" + t.admin);
  INFO(r2.out << r2.err);
  REQUIRE(r2.code == 0);
  CHECK(c.console(p2, "dev sync " + device + " auth=" + alice).code == 1);

  // c3 comes back with its old state: its own file lacks both.
  auto before = read_file(c.state_dir("c3") + "/access/revocations");
  CHECK(!contains(before, "alice"));
  CHECK(!contains(before, dave_id));
  n3 = c.start("c3", p3, {p1});
  auto t0 = clock_type::now();
  CHECK(c.eventually(
    p3, "dev sync " + device + " auth=" + alice,
    [](const run_result& r) {
      return r.code == 1 && contains(r.err, "revoked");
    },
    30s));
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                clock_type::now() - t0)
                .count();
  UNSCOPED_INFO("c3 refused alice " << took << " ms after it was ready");
  CHECK(took < 20000); // ~1-2 s unloaded; generous for a loaded machine
  auto d = c.console(p3, "dev sync " + device + " auth=" + dave);
  CHECK(d.code == 1);
  CHECK(contains(d.err, "revoked"));
  CHECK(c.console(p3, "dev sync " + device + " auth=" + bob).code == 0);

  // Learnt for good: in c3's revocations file, and audited as caught up.
  auto after = read_file(c.state_dir("c3") + "/access/revocations");
  CHECK(contains(after, "principal alice "));
  CHECK(contains(after, "token " + dave_id + " "));
  CHECK(audited(c, p3, t.admin, "policy_change",
                {"revocation_added", "\"relayed\":\"sync\"", "alice",
                 dave_id}));
  // And after another restart without peers' help it still refuses.
  n3->signal(SIGTERM);
  auto stopped = n3->wait(30s);
  INFO("c3's output: " << n3->out() << "\nc3's errors: " << n3->err());
  REQUIRE(stopped == 0);
  n1->signal(SIGTERM);
  n2->signal(SIGTERM);
  CHECK(n1->wait(30s) == 0);
  CHECK(n2->wait(30s) == 0);
  std::uint16_t alone = 0;
  n3 = c.start("c3", alone, {});
  auto r = c.console(alone, "dev sync " + device + " auth=" + alice);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "revoked"));
}

TEST_CASE("an admin lowers a principal's rate limit on every node and "
          "its device operations beyond it are refused and audited") {
  cluster c;
  std::uint16_t p1 = 0, p2 = 0;
  auto n1 = c.start("l1", p1, {});
  auto n2 = c.start("l2", p2, {p1});
  all_alive(c, {p1, p2}, 2);
  tokens t{c, p1, "l1"};
  auto carol = t.issue("carol", "user");
  auto erin = t.issue("erin", "user");
  for (int i = 0; i < 3; ++i)
    REQUIRE(c.console(p2, "dev sync " + device + " auth=" + carol).code == 0);

  // Bad input and non-admins are refused with a clear error.
  for (auto& [cmd, why] :
       std::vector<std::pair<std::string, std::string>>{
         {"token limit principal=carol rate=fast auth=" + t.admin, "rate="},
         {"token limit principal=carol rate=-1 auth=" + t.admin, "rate="},
         {"token limit principal=carol rate=0.0001 auth=" + t.admin,
          "at most 3 decimals"},
         {"token limit principal=carol rate=1e3 auth=" + t.admin, "rate="},
         {"token limit principal=carol rate=5 burst=0.5 auth=" + t.admin,
          "burst"},
         {"token limit rate=5 auth=" + t.admin, "principal=P"},
         {"token limit principal=carol auth=" + t.admin, "rate=N"},
         {"token limit principal=carol rate=5 auth=" + erin, "admin required"},
         {"token limits", "no auth=TOKEN"}}) {
    INFO(cmd);
    auto r = c.console(p1, cmd);
    CHECK(r.code == 1);
    CHECK(contains(r.err, why));
  }

  // One operation per 100 s, burst 1: the next one passes, then refused.
  auto set = c.console(p1, "token limit principal=carol rate=0.01/s burst=1 "
                           "auth=" + t.admin, true);
  INFO(set.out << set.err);
  REQUIRE(set.code == 0);
  CHECK(contains(set.out, "\"peers\":1"));
  auto shown = c.console(p2, "token limits auth=" + erin, true);
  INFO(shown.out << shown.err);
  CHECK(shown.code == 0);
  CHECK(contains(shown.out, "{\"principal\":\"carol\",\"rate_per_s\":0.01,"
                            "\"burst\":1}"));
  for (auto port : {p1, p2}) {
    INFO("node port " << port);
    auto ok = c.console(port, "dev sync " + device + " auth=" + carol);
    INFO(ok.out << ok.err);
    CHECK(ok.code == 0);
    auto refused = c.console(port, "dev sync " + device + " auth=" + carol);
    CHECK(refused.code == 1);
    CHECK(contains(refused.err, "rate_limited"));
    // Others keep the default (no limit).
    CHECK(c.console(port, "dev sync " + device + " auth=" + erin).code == 0);
    CHECK(c.console(port, "dev sync " + device + " auth=" + erin).code == 0);
    CHECK(audited(c, port, t.admin, "rate_limited",
                  {"\"principal\":\"carol\"", "\"decision\":\"rate_limited\"",
                   device}));
    CHECK(audited(c, port, t.admin, "policy_change",
                  {"\"change\":\"rate_limit\"", "\"subject\":\"carol\"",
                   "\"rate_per_s\":\"0.01\""}));
  }
  // Raised again (0: unlimited): carol works at once.
  REQUIRE(c.console(p2, "token limit principal=carol rate=0 auth=" + t.admin)
            .code
          == 0);
  for (auto port : {p1, p2})
    CHECK(c.console(port, "dev sync " + device + " auth=" + carol).code == 0);
}

TEST_CASE("exo-console --token-file sends the token with every command "
          "and never prints it and a missing or empty file is a clear error") {
  cluster c;
  c.safety_extra = R"(, "console_requires_token": true)";
  std::uint16_t p1 = 0;
  auto n1 = c.start("f1", p1, {});
  tokens t{c, p1, "f1"};
  auto watcher = t.issue("watcher", "monitor");
  auto with_file = [&](const std::string& file, const std::string& cmd) {
    return run({exo_console(), "--connect",
                "127.0.0.1:" + std::to_string(p1), "--cert",
                c.dir + "/ops/ops.crt", "--key", c.dir + "/ops/ops.key",
                "--ca", c.dir + "/ca/ca.crt", "--timeout-ms", "10000",
                "--token-file", file, "--exec", cmd},
               60s);
  };
  auto good = c.dir + "/watcher.token";
  write_file(good, "  " + watcher + "  \n");
  for (auto cmd : {"devices", "nodes", "thermal"}) {
    INFO(cmd);
    auto r = with_file(good, cmd);
    INFO(r.out << r.err);
    CHECK(r.code == 0);
    CHECK(!contains(r.out + r.err, watcher));
  }
  CHECK(contains(with_file(good, "devices").out, device));
  // The token's permissions still hold: a monitor may not run jobs.
  auto run_r = with_file(good, "run --model model.gguf --prompt hi");
  CHECK(run_r.code == 1);
  CHECK(contains(run_r.err, "permission_denied"));
  CHECK(!contains(run_r.out + run_r.err, watcher));
  // A command naming its own auth= keeps it.
  auto own = with_file(good, "devices auth=exo1.not.valid");
  CHECK(own.code == 1);
  // Without the file the node refuses.
  CHECK(c.console(p1, "devices").code == 1);

  auto empty = c.dir + "/empty.token";
  write_file(empty, "\n");
  auto spaced = c.dir + "/spaced.token";
  write_file(spaced, watcher.substr(0, 10) + " " + watcher.substr(10) + "\n");
  for (auto& [file, why] :
       std::vector<std::pair<std::string, std::string>>{
         {c.dir + "/missing.token", "cannot read the token"},
         {empty, "holds no token"},
         {spaced, "whitespace"},
         {c.dir, "token"}}) {
    INFO(file);
    auto r = with_file(file, "devices");
    INFO(r.out << r.err);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "--token-file " + file));
    CHECK(contains(r.err, why));
    CHECK(!contains(r.err, watcher.substr(10)));
  }
}

TEST_CASE("a node refuses an access key other users may read, and says how "
          "to fix it") {
  cluster c;
  c.p.node("k1");
  ::chmod(c.key_file.c_str(), 0644);
  node_options o{"k1"};
  o.state_dir = c.state_dir("k1");
  o.devices = R"({"include": ["sim"], "rescan_interval_s": 0})";
  o.extra = R"(, "safety": {"access_key_file": ")" + c.key_file + "\"}";
  auto r = run({exo_node(), "--config", write_node_config(c.p, o)}, 60s);
  INFO(r.out << r.err);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "access key " + c.key_file + ": mode 0644 lets other users read it"));
  CHECK(contains(r.err, "chmod 600 " + c.key_file));
  ::chmod(c.key_file.c_str(), 0600);
}

TEST_CASE("a node whose certificate names another node exits 2 with the "
          "reason") {
  cluster c;
  c.p.node("m1");
  node_options o{"m2"};
  o.cert = "m1";
  o.devices = R"({"include": ["sim"], "rescan_interval_s": 0})";
  o.extra = R"(, "safety": {"access_key_file": ")" + c.key_file + "\"}";
  auto r = run({exo_node(), "--config", write_node_config(c.p, o)}, 60s);
  INFO(r.out << r.err);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "is for \"m1\", but this node is named \"m2\""));
}
