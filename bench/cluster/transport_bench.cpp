// Transport benchmark (issue 3): between two actor systems over mutual TLS
// (CAF's OpenSSL middleman) on 127.0.0.1:
//   - small-message request/response round trip, p50 and p99;
//   - a pipeline hop (issue 22): a stage_step carrying one row of 1024
//     floats (a 4 KB activation) sent to the far end and sent back, so
//     one hop is half the round trip, beside the small message's;
//   - one-way small-message throughput;
//   - bulk streaming in 4 MiB chunks (a window in flight) in GB/s;
//   - the bulk channel (core/tls/bulk_channel.hpp): one 1 GiB range
//     fetched over its own mutual-TLS connection, in GB/s;
// and raw loopback TCP measured in the same run, for comparison.

#include "messages/cluster.hpp"
#include "messages/registration.hpp"
#include "messages/workload.hpp"
#include "core/tls/bulk_channel.hpp"
#include "runtime/system/caf_tls.hpp"
#include "core/tls/cert_tool.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

using namespace std::chrono;
using clock_type = steady_clock;

namespace {

struct pki {
  std::string dir;
  exo::tls::material node(const std::string& name) const {
    exo::tls::material m;
    m.certificate = dir + "/" + name + ".crt";
    m.key = dir + "/" + name + ".key";
    m.cafile = dir + "/ca.crt";
    return m;
  }
};

pki make_pki() {
  char tmpl[] = "/tmp/exo-bench-tls-XXXXXX";
  pki p{mkdtemp(tmpl)};
  auto ca = exo::tls::create_ca();
  exo::tls::write_certificate(p.dir + "/ca.crt", ca.cert);
  for (auto name : {"a", "b"}) {
    auto c = exo::tls::issue_certificate(ca, exo::tls::cert_options{name});
    exo::tls::write_certificate(p.dir + "/" + name + ".crt", c.cert);
    exo::tls::write_private_key(p.dir + "/" + name + ".key", c.key);
  }
  return p;
}

struct config : caf::actor_system_config {
  config(const exo::tls::material& m) {
    exo::register_messages(*this);
    load<caf::io::middleman>();
    load<caf::openssl::manager>();
    exo::tls::apply_material(*this, m);
    exo::tls::apply_transport_settings(*this);
  }
};

/// The far end: echoes pings, counts one-way messages, acknowledges chunks.
caf::behavior echo(caf::event_based_actor* self) {
  auto count = std::make_shared<std::uint64_t>(0);
  return {
    [](exo::ping_atom, std::int64_t t) { return t; },
    // A stage's step, as the next stage would get it: sent back whole.
    [](exo::forward_atom, exo::stage_step& s) { return std::move(s); },
    [count](exo::tick_atom) { ++*count; },
    [count](exo::tick_atom, exo::measure_atom) { return *count; },
    [](exo::bulk_atom, exo::chunk& c) {
      return static_cast<std::uint64_t>(c.bytes.size());
    },
  };
}

double raw_tcp_gbs(std::size_t total) {
  int srv = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return 0;
  socklen_t len = sizeof(addr);
  getsockname(srv, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(srv, 1);
  std::thread reader{[&] {
    int c = accept(srv, nullptr, nullptr);
    std::vector<char> buf(1 << 20);
    std::size_t got = 0;
    while (got < total) {
      auto n = read(c, buf.data(), buf.size());
      if (n <= 0)
        break;
      got += static_cast<std::size_t>(n);
    }
    close(c);
  }};
  int cli = socket(AF_INET, SOCK_STREAM, 0);
  connect(cli, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  std::vector<char> buf(1 << 20, 'x');
  auto t0 = clock_type::now();
  std::size_t sent = 0;
  while (sent < total) {
    auto n = write(cli, buf.data(), std::min(buf.size(), total - sent));
    if (n <= 0)
      break;
    sent += static_cast<std::size_t>(n);
  }
  close(cli);
  reader.join();
  auto s = duration<double>(clock_type::now() - t0).count();
  close(srv);
  return double(total) / s / 1e9;
}

} // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto p = make_pki();
  config cfg_a{p.node("a")};
  config cfg_b{p.node("b")};
  // CAF options (for example --scheduler.policy=sharing) apply to both ends.
  for (auto* cfg : {&cfg_a, &cfg_b})
    if (auto err = cfg->parse(argc, argv)) {
      std::fprintf(stderr, "bad option: %s\n", caf::to_string(err).c_str());
      return 2;
    }
  caf::actor_system sys_a{cfg_a};
  caf::actor_system sys_b{cfg_b};
  auto far = sys_b.spawn(echo);
  auto port = caf::openssl::publish(far, 0, "127.0.0.1", true);
  if (!port) {
    std::fprintf(stderr, "publish failed: %s\n",
                 sys_b.render(port.error()).c_str());
    return 1;
  }
  caf::scoped_actor self{sys_a};
  caf::actor remote;
  self
    ->request(sys_a.openssl_manager().actor_handle(), seconds(10),
              caf::connect_atom::value, std::string{"127.0.0.1"}, *port)
    .receive(
      [&](const caf::node_id&, caf::strong_actor_ptr& ptr,
          const std::set<std::string>&) {
        remote = caf::actor_cast<caf::actor>(ptr);
      },
      [&](caf::error& err) {
        std::fprintf(stderr, "connect: %s\n", sys_a.render(err).c_str());
      });
  if (!remote)
    return 1;
  std::printf("== transport: CAF OpenSSL middleman, TLS 1.3, 127.0.0.1 ==\n");
  // 1. Round trips.
  std::vector<double> rtts;
  for (int i = 0; i < 5000; ++i) {
    auto t0 = clock_type::now();
    self->request(remote, seconds(5), exo::ping_atom::value, std::int64_t{i})
      .receive([](std::int64_t) {}, [](caf::error&) {});
    rtts.push_back(duration<double, std::micro>(clock_type::now() - t0).count());
  }
  std::sort(rtts.begin(), rtts.end());
  std::printf("small-message round trip: p50 %.0f us, p99 %.0f us "
              "(%zu requests)\n",
              rtts[rtts.size() / 2], rtts[rtts.size() * 99 / 100],
              rtts.size());
  // 1b. A pipeline hop: a 4 KB activation as a stage_step, both ways,
  // alternating with small pings so both see the same moments.
  {
    exo::stage_step step;
    step.job = 1;
    step.seq = 0;
    step.pos = 17;
    step.tokens = {0};
    step.x.assign(1024, 0.25f);
    std::vector<double> hop, small;
    for (int i = 0; i < 4000; ++i) {
      auto t1 = clock_type::now();
      self->request(remote, seconds(5), exo::forward_atom::value, step)
        .receive([](exo::stage_step&) {}, [](caf::error&) {});
      auto t2 = clock_type::now();
      self->request(remote, seconds(5), exo::ping_atom::value,
                    std::int64_t{i})
        .receive([](std::int64_t) {}, [](caf::error&) {});
      auto t3 = clock_type::now();
      hop.push_back(duration<double, std::micro>(t2 - t1).count());
      small.push_back(duration<double, std::micro>(t3 - t2).count());
    }
    std::sort(hop.begin(), hop.end());
    std::sort(small.begin(), small.end());
    const double h50 = hop[hop.size() / 2], s50 = small[small.size() / 2];
    std::printf("pipeline hop (stage_step, 4 KB activation, there and "
                "back): p50 %.0f us, p99 %.0f us; one hop %.0f us (target "
                "<= 200 us), %.0f us more than a small message's\n",
                h50, hop[hop.size() * 99 / 100], h50 / 2, (h50 - s50) / 2);
  }
  // 2. One-way throughput.
  constexpr std::uint64_t n = 200000;
  auto t0 = clock_type::now();
  for (std::uint64_t i = 0; i < n; ++i)
    self->send(remote, exo::tick_atom::value);
  std::uint64_t seen = 0;
  while (seen < n) {
    self
      ->request(remote, seconds(30), exo::tick_atom::value,
                exo::measure_atom::value)
      .receive([&](std::uint64_t c) { seen = c; }, [&](caf::error&) {
        seen = n;
      });
  }
  auto secs = duration<double>(clock_type::now() - t0).count();
  std::printf("one-way small messages: %.0f msgs/s (%llu in %.2f s)\n",
              double(n) / secs, static_cast<unsigned long long>(n), secs);
  // 3. Bulk streaming, 4 MiB chunks, 4 in flight.
  constexpr int chunks = 128;
  constexpr int window = 4;
  exo::chunk c;
  c.bytes.assign(exo::max_chunk_bytes, 0x5a);
  t0 = clock_type::now();
  int sent = 0, acked = 0;
  std::uint64_t bytes = 0;
  while (acked < chunks) {
    while (sent < chunks && sent - acked < window) {
      // A plain send: the echo's result comes back as an ordinary message,
      // which a blocking receive matches (an unawaited request's response
      // would not be).
      self->send(remote, exo::bulk_atom::value, c);
      ++sent;
    }
    self->receive(
      [&](std::uint64_t b) {
        bytes += b;
        ++acked;
      },
      caf::after(seconds(30)) >> [&] { acked = chunks; });
  }
  secs = duration<double>(clock_type::now() - t0).count();
  double tls_gbs = double(bytes) / secs / 1e9;
  std::printf("bulk streaming (4 MiB chunks, %d in flight): %.2f GB/s "
              "(%llu MiB in %.2f s)\n",
              window, tls_gbs, static_cast<unsigned long long>(bytes >> 20),
              secs);
  // 4. The bulk channel: node b fetches a 1 GiB blob from node a.
  double channel_gbs = 0;
  {
    constexpr std::uint64_t blob_bytes = std::uint64_t{1} << 30;
    auto blob = std::make_shared<std::vector<std::uint8_t>>(blob_bytes, 0x5a);
    auto blobs = std::make_shared<exo::tls::bulk_blobs>();
    blobs->add_memory("bench", blob, blob->data(), blob->size());
    exo::tls::bulk_server srv{p.node("a"), blobs, {}};
    std::uint64_t got = 0;
    auto t1 = clock_type::now();
    exo::tls::bulk_fetch(p.node("b"), "127.0.0.1", srv.port(), "a", "bench",
                         0, blob_bytes,
                         [&](const std::uint8_t*, std::size_t n) { got += n; });
    auto s1 = duration<double>(clock_type::now() - t1).count();
    channel_gbs = double(got) / s1 / 1e9;
    std::printf("bulk channel (one 1 GiB range, own TLS connection): %.2f "
                "GB/s (%llu MiB in %.2f s, handshake included)\n",
                channel_gbs, static_cast<unsigned long long>(got >> 20), s1);
  }
  double raw = raw_tcp_gbs(std::size_t{2} << 30);
  std::printf("raw loopback TCP (same run): %.2f GB/s; TLS bulk over CAF is "
              "%.0f%% of it, the bulk channel %.0f%%\n",
              raw, raw > 0 ? 100 * tls_gbs / raw : 0.0,
              raw > 0 ? 100 * channel_gbs / raw : 0.0);
  self->send_exit(far, caf::exit_reason::user_shutdown);
  std::string cmd = "rm -rf " + p.dir;
  (void) std::system(cmd.c_str());
  return 0;
}
