// Tests of exo_tls_caf: checked material applied to CAF 0.17 actor systems
// that talk over caf::openssl on 127.0.0.1. Connections use the
// asynchronous connect with a timeout, so a refused handshake never hangs.

#include <catch2/catch.hpp>

#include "test/support/raw_tls.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <unistd.h>

#include "runtime/system/caf_nodes.hpp"
#include "runtime/system/caf_tls.hpp"
#include "core/tls/sigpipe_mask_cache.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/tls_error.hpp"
#include "test/cluster/tls_test_util.hpp"

using namespace exo::tls;
using exo::tls::test::temp_dir;

namespace {

constexpr auto connect_timeout = std::chrono::seconds{20};

/// A config with the TLS modules loaded, two scheduler threads and the
/// given material applied.
struct tls_config : caf::actor_system_config {
  explicit tls_config(const material& files) {
    load<caf::io::middleman>();
    load<caf::openssl::manager>();
    set("scheduler.max-threads", 2);
    apply_material(*this, files);
  }
};

/// Writes a CA and credentials named `names` into `dir`/`tag`-*.
struct test_ca {
  key_algorithm algorithm;
  credential ca;
  std::string cafile;

  test_ca(const temp_dir& dir, const std::string& tag,
          key_algorithm alg = key_algorithm::ec_p256)
      : algorithm(alg), ca(create_ca(ca_opts(alg))) {
    cafile = dir / (tag + "-ca.crt");
    write_certificate(cafile, ca.cert);
  }

  static ca_options ca_opts(key_algorithm alg) {
    ca_options result;
    result.algorithm = alg;
    return result;
  }

  material issue(const temp_dir& dir, const std::string& name,
                 cert_role role = cert_role::node,
                 const std::string& passphrase = {}) {
    cert_options opts{name, role};
    opts.algorithm = algorithm;
    auto cred = issue_certificate(ca, opts);
    auto stem = dir / name;
    write_certificate(stem + ".crt", cred.cert);
    write_private_key(stem + ".key", cred.key, passphrase);
    return material{stem + ".crt", stem + ".key", passphrase, cafile, role};
  }
};

/// Replies `prefix` + text. (It takes an argument because CAF 0.17's spawn
/// of a function without arguments dereferences a null pointer, which
/// UBSan reports.)
caf::behavior echo_impl(std::string prefix) {
  return {
      [prefix](const std::string& text) { return prefix + text; },
  };
}

/// Connects from `sys` to 127.0.0.1:`port` with a timeout; returns the
/// remote actor or the error's text.
std::pair<caf::actor, std::string> connect(caf::actor_system& sys,
                                           uint16_t port) {
  caf::scoped_actor self{sys};
  std::pair<caf::actor, std::string> result;
  self->request(sys.openssl_manager().actor_handle(), connect_timeout,
                caf::connect_atom_v, std::string{"127.0.0.1"}, port)
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& ptr,
              const std::set<std::string>&) {
            if (ptr)
              result.first = caf::actor_cast<caf::actor>(ptr);
            else
              result.second = "connected, but no actor published";
          },
          [&](caf::error& err) { result.second = sys.render(err); });
  return result;
}

std::string ask(caf::actor_system& sys, const caf::actor& whom,
                const std::string& text) {
  caf::scoped_actor self{sys};
  std::string reply;
  self->request(whom, connect_timeout, text)
      .receive([&](const std::string& r) { reply = r; },
               [&](caf::error& err) { reply = "error: " + sys.render(err); });
  return reply;
}

/// Publishes an echo actor on a system made with `server`, connects to it
/// from a second system made with `client`, and runs `f(client_system,
/// remote_echo)` while both are up.
template <class F>
void with_echo_link(const material& server, const material& client, F f) {
  tls_config cfg_a{server};
  tls_config cfg_b{client};
  caf::actor_system sys_a{cfg_a};
  auto echo = sys_a.spawn(echo_impl, std::string{"echo: "});
  auto port = caf::openssl::publish(echo, 0, "127.0.0.1");
  REQUIRE(port);
  {
    caf::actor_system sys_b{cfg_b};
    auto [remote, err] = connect(sys_b, *port);
    INFO("connect error: " << err);
    REQUIRE(remote);
    f(sys_b, remote);
  }
  sys_a.middleman().unpublish(echo, *port);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

} // namespace

TEST_CASE("applying material refuses anonymous TLS and bad material, "
          "leaving the config untouched") {
  temp_dir dir;
  test_ca ca{dir, "c"};
  caf::actor_system_config cfg;
  CHECK_THROWS_AS(require_authenticated_tls(cfg), tls_error);
  auto m = ca.issue(dir, "node-a", cert_role::node, "pass-word");
  auto bad = m;
  bad.passphrase = "wrong";
  try {
    apply_material(cfg, bad);
    FAIL("wrong passphrase accepted");
  } catch (const tls_error& err) {
    CHECK(err.code() == tls_errc::bad_passphrase);
  }
  CHECK(cfg.openssl_key.empty());
  bad = m;
  bad.cafile.clear();
  CHECK_THROWS_AS(apply_material(cfg, bad), tls_error);
  CHECK(cfg.openssl_certificate.empty());
  auto info = apply_material(cfg, m);
  CHECK(info.common_name == "node-a");
  CHECK(cfg.openssl_certificate == m.certificate);
  CHECK(cfg.openssl_key == m.key);
  CHECK(cfg.openssl_passphrase == "pass-word");
  CHECK(cfg.openssl_cafile == m.cafile);
  require_authenticated_tls(cfg);
}

TEST_CASE("actor systems with certificates from the same CA talk over TLS, "
          "clients connect, "
          "another CA or a self-signed one is refused") {
  temp_dir dir;
  test_ca cluster{dir, "cluster"};
  test_ca stranger{dir, "stranger"};
  // Node a's key is encrypted: CAF must get the passphrase from the config.
  tls_config cfg_a{cluster.issue(dir, "node-a", cert_role::node, "a-pass")};
  tls_config cfg_b{cluster.issue(dir, "node-b")};
  tls_config cfg_c{stranger.issue(dir, "node-c")};
  tls_config cfg_d{cluster.issue(dir, "alice", cert_role::client)};
  caf::actor_system sys_a{cfg_a};
  auto echo = sys_a.spawn(echo_impl, std::string{"echo: "});
  auto port = caf::openssl::publish(echo, 0, "127.0.0.1");
  REQUIRE(port);
  {
    caf::actor_system sys_c{cfg_c};
    auto [remote, err] = connect(sys_c, *port);
    INFO("stranger's connect failed with: " << err);
    CHECK_FALSE(remote);
    CHECK_FALSE(err.empty());
  }
  {
    caf::actor_system sys_b{cfg_b};
    auto [remote, err] = connect(sys_b, *port);
    INFO("connect error: " << err);
    REQUIRE(remote);
    CHECK(ask(sys_b, remote, "hello") == "echo: hello");
  }
  {
    // A self-signed certificate that trusts only itself: CAF's TLS, not
    // just exo's check, must refuse it. (apply_material would refuse this
    // material, so the config is set by hand.)
    auto selfie = exo::tls::test::self_signed_leaf("node-a");
    exo::tls::test::write_credential(dir, "selfie", selfie);
    caf::actor_system_config cfg_e;
    cfg_e.load<caf::io::middleman>();
    cfg_e.load<caf::openssl::manager>();
    cfg_e.set("scheduler.max-threads", 2);
    cfg_e.openssl_certificate = dir / "selfie.crt";
    cfg_e.openssl_key = dir / "selfie.key";
    cfg_e.openssl_cafile = dir / "selfie.crt";
    caf::actor_system sys_e{cfg_e};
    auto [remote, err] = connect(sys_e, *port);
    INFO("self-signed connect failed with: " << err);
    CHECK_FALSE(remote);
    CHECK_FALSE(err.empty());
  }
  {
    // A client certificate (clientAuth only) may connect to a node.
    caf::actor_system sys_d{cfg_d};
    auto [remote, err] = connect(sys_d, *port);
    INFO("client connect error: " << err);
    REQUIRE(remote);
    CHECK(ask(sys_d, remote, "from a client") == "echo: from a client");
  }
  sys_a.middleman().unpublish(echo, *port);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE("Ed25519 certificates also work with CAF's TLS") {
  temp_dir dir;
  test_ca cluster{dir, "ed", key_algorithm::ed25519};
  with_echo_link(cluster.issue(dir, "node-a"), cluster.issue(dir, "node-b"),
                 [](caf::actor_system& sys_b, const caf::actor& remote) {
                   CHECK(ask(sys_b, remote, "ed") == "echo: ed");
                 });
}

namespace {

/// How many threads of this process block SIGPIPE
/// (/proc/self/task/*/status, SigBlk).
int threads_blocking_sigpipe() {
  int count = 0;
  auto* dir = opendir("/proc/self/task");
  REQUIRE(dir);
  while (auto* e = readdir(dir)) {
    if (e->d_name[0] == '.')
      continue;
    std::ifstream status{std::string{"/proc/self/task/"} + e->d_name
                         + "/status"};
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("SigBlk:", 0) == 0
          && (std::stoull(line.substr(7), nullptr, 16)
              & (1ull << (SIGPIPE - 1)))
               != 0)
        ++count;
  }
  closedir(dir);
  return count;
}

} // namespace

TEST_CASE("the threads that ran CAF's TLS keep SIGPIPE blocked after "
          "traffic (CAF's per-call masking is replaced)") {
  REQUIRE(exo::tls::sigpipe_cache::finds_caf_openssl());
  temp_dir dir;
  test_ca cluster{dir, "mask"};
  with_echo_link(cluster.issue(dir, "node-a"), cluster.issue(dir, "node-b"),
                 [](caf::actor_system& sys_b, const caf::actor& remote) {
                   for (int i = 0; i < 20; ++i)
                     REQUIRE(ask(sys_b, remote, "x") == "echo: x");
                   // CAF restores the mask after each call; with the
                   // cache, the two multiplexer threads (at least) keep
                   // SIGPIPE blocked.
                   CHECK(threads_blocking_sigpipe() >= 2);
                 });
  // The test's own thread was never touched.
  sigset_t cur;
  pthread_sigmask(SIG_BLOCK, nullptr, &cur);
  CHECK(sigismember(&cur, SIGPIPE) == 0);
}

namespace {

/// Sends one BASP header announcing `payload_len` bytes over a raw TLS
/// connection made with `m`, then reads until the peer closes or
/// `patience` passes. Returns whether the peer closed the connection.
bool peer_closes_after_header(std::uint16_t port, const material& m,
                              std::uint32_t payload_len,
                              std::chrono::seconds patience) {
  exo::test::raw_tls peer{port, m.certificate, m.key, m.cafile};
  REQUIRE(peer.handshake());
  REQUIRE(peer.announce(payload_len));
  return peer.closed_within(patience);
}

} // namespace

/// The process's peak resident set, in KiB (VmHWM).
long peak_rss_kib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  long kib = -1;
  char line[256];
  while (f && std::fgets(line, sizeof(line), f))
    if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1)
      break;
  if (f)
    std::fclose(f);
  return kib;
}

TEST_CASE("a peer announcing an oversized message is dropped before "
          "anything is allocated, and the node stays healthy") {
  temp_dir dir;
  test_ca cluster{dir, "cluster"};
  tls_config cfg_a{cluster.issue(dir, "node-a")};
  auto peer = cluster.issue(dir, "mallory");
  caf::actor_system sys_a{cfg_a};
  auto echo = sys_a.spawn(echo_impl, std::string{"echo: "});
  auto port = caf::openssl::publish(echo, 0, "127.0.0.1");
  REQUIRE(port);
  // 4000 MiB announced: without the guard CAF sizes (and zeroes) a buffer
  // for it, which took 11 s and 4 GB here before the connection went.
  auto rss_before = peak_rss_kib();
  auto t0 = std::chrono::steady_clock::now();
  CHECK(peer_closes_after_header(*port, peer, 4000u << 20,
                                 std::chrono::seconds{20}));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds{5});
  CHECK(peak_rss_kib() - rss_before < 256 * 1024);
  // Healthy afterwards: a real peer connects and talks.
  tls_config cfg_b{cluster.issue(dir, "node-b")};
  caf::actor_system sys_b{cfg_b};
  auto [remote, err] = connect(sys_b, *port);
  INFO("connect error: " << err);
  REQUIRE(remote);
  CHECK(ask(sys_b, remote, "still there?") == "echo: still there?");
  sys_a.middleman().unpublish(echo, *port);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE("a node forgets what CAF kept of each peer that has gone, and "
          "keeps it for a peer still connected") {
  temp_dir dir;
  test_ca cluster{dir, "cluster"};
  tls_config cfg_a{cluster.issue(dir, "node-a")};
  tls_config cfg_b{cluster.issue(dir, "alice", cert_role::client)};
  tls_config cfg_c{cluster.issue(dir, "node-c")};
  caf::actor_system sys_a{cfg_a};
  auto echo = sys_a.spawn(echo_impl, std::string{"echo: "});
  auto port = caf::openssl::publish(echo, 0, "127.0.0.1");
  REQUIRE(port);
  caf::actor_system sys_c{cfg_c}; // stays connected throughout
  auto [kept, kept_err] = connect(sys_c, *port);
  INFO("connect error: " << kept_err);
  REQUIRE(kept);
  // Clients that come and go, each a new CAF node (as each exo-console
  // run is): CAF 0.17 keeps a spawn-server helper for each.
  constexpr std::size_t clients = 12;
  for (std::size_t i = 0; i < clients; ++i) {
    caf::actor_system sys_b{cfg_b};
    auto [remote, err] = connect(sys_b, *port);
    INFO("connect error: " << err);
    REQUIRE(remote);
    CHECK(ask(sys_b, remote, "hi") == "echo: hi");
  }
  // The node notices each client's connection close a moment later.
  std::size_t forgotten = 0;
  std::optional<remote_node_counts> n;
  for (int i = 0; i < 200 && forgotten < clients; ++i) {
    n = forget_departed_nodes(sys_a, std::chrono::seconds(10));
    REQUIRE(n);
    forgotten += n->forgotten;
    if (forgotten < clients)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(forgotten == clients);
  n = forget_departed_nodes(sys_a, std::chrono::seconds(10));
  REQUIRE(n);
  CHECK(n->forgotten == 0);
  CHECK(n->known == 1); // node-c's, still connected
  CHECK(ask(sys_c, kept, "still here") == "echo: still here");
  sys_a.middleman().unpublish(echo, *port);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}
