// exo-netem: the delay line of a scenario's link (netem is not available in
// every kernel; this is the project's own). Run by exo-scenario inside a
// node's network namespace, attached to a TUN device that the node's
// outgoing traffic to the scenario's subnet is routed into
// (runtime/scenario/netns.hpp): every packet read from the device is held
// for the latency (plus a uniform jitter), or dropped with the loss
// probability, and written back to the device, from which the kernel
// forwards it out of the node's real link. Packets keep their order (a
// jittered packet never overtakes an earlier one, as netem with a rate
// behaves), so TCP sees delay, not reordering.
//
//   exo-netem DEVICE LATENCY_MS JITTER_MS LOSS_PCT [SEED]
//
// The queue is bounded (20000 packets, 64 MiB): beyond it packets are
// dropped, as a full router queue drops them. Exits 0 on SIGTERM/SIGINT,
// 2 on bad arguments, 1 when the device cannot be used.

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

namespace {

volatile std::sig_atomic_t g_stop = 0;

void on_signal(int) {
  g_stop = 1;
}

using clock_type = std::chrono::steady_clock;

struct held {
  clock_type::time_point due;
  std::vector<char> bytes;
};

bool parse_number(const char* s, double lo, double hi, double& out) {
  char* end = nullptr;
  out = std::strtod(s, &end);
  return end != s && *end == '\0' && out >= lo && out <= hi;
}

} // namespace

int main(int argc, char** argv) {
  double latency = 0, jitter = 0, loss = 0, seed = 1;
  if ((argc != 5 && argc != 6) || std::strlen(argv[1]) >= IFNAMSIZ
      || !parse_number(argv[2], 0, 10000, latency)
      || !parse_number(argv[3], 0, 10000, jitter) || jitter > latency
      || !parse_number(argv[4], 0, 100, loss)
      || (argc == 6 && !parse_number(argv[5], 0, 4294967295.0, seed))) {
    std::fprintf(stderr,
                 "usage: exo-netem DEVICE LATENCY_MS JITTER_MS LOSS_PCT "
                 "[SEED]\n  latency 0..10000, jitter 0..latency, loss "
                 "0..100\n");
    return 2;
  }
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK);
  if (fd < 0) {
    std::perror("exo-netem: /dev/net/tun");
    return 1;
  }
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, argv[1], IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
    std::perror("exo-netem: TUNSETIFF");
    return 1;
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::mt19937_64 rng{static_cast<std::uint64_t>(seed)};
  std::uniform_real_distribution<double> unit{0.0, 1.0};
  constexpr std::size_t max_packets = 20000;
  constexpr std::size_t max_bytes = std::size_t{64} << 20;
  std::deque<held> queue;
  std::size_t queued_bytes = 0;
  clock_type::time_point last_due{};
  std::vector<char> buf(65536);
  std::printf("exo-netem on %s: %.1f ms +- %.1f ms, %.2f%% loss\n", argv[1],
              latency, jitter, loss);
  std::fflush(stdout);
  while (!g_stop) {
    int wait_ms = 100;
    if (!queue.empty()) {
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(
                    queue.front().due - clock_type::now())
                    .count();
      wait_ms = left <= 0 ? 0 : static_cast<int>((left + 999) / 1000);
      wait_ms = std::min(wait_ms, 100);
    }
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1, wait_ms);
    if (n < 0 && errno != EINTR)
      break;
    if (n > 0 && (p.revents & POLLIN)) {
      for (;;) {
        auto got = read(fd, buf.data(), buf.size());
        if (got <= 0)
          break;
        if (loss > 0 && unit(rng) * 100 < loss)
          continue;
        if (queue.size() >= max_packets
            || queued_bytes + static_cast<std::size_t>(got) > max_bytes)
          continue; // a full queue drops
        double ms = latency + (jitter > 0 ? (2 * unit(rng) - 1) * jitter : 0);
        auto due = clock_type::now()
                   + std::chrono::microseconds{
                     static_cast<long long>(ms * 1000)};
        if (due < last_due)
          due = last_due; // keep the order
        last_due = due;
        queue.push_back({due, std::vector<char>(buf.data(), buf.data() + got)});
        queued_bytes += static_cast<std::size_t>(got);
      }
    }
    auto now = clock_type::now();
    while (!queue.empty() && queue.front().due <= now) {
      auto& h = queue.front();
      // A write that fails (the device is going away) loses the packet.
      (void)!write(fd, h.bytes.data(), h.bytes.size());
      queued_bytes -= h.bytes.size();
      queue.pop_front();
    }
  }
  close(fd);
  return 0;
}
