// The gateway's own cost, apart from any model: the real HTTP server
// (runtime/gateway/server) with a backend that produces tokens instantly,
// so every microsecond measured is the gateway's (parsing, admission, SSE
// framing, sockets) and the client's on the same machine.
//
//   time to first token   POST a streamed completion, until the first
//                         token's SSE chunk arrives (median of 200)
//   per token             a 2000-token stream: (last - first) / 1999
//   requests/s            GET /health and /v1/models on 8 keep-alive
//                         connections for 3 s each (and `wrk`, when
//                         installed, with 64 connections)
//
// Goals (issue 20): TTFT overhead under 1 ms, under 50 us per token.
//
// With --port P --model ID [-n N] [--repeat K] [--prompt S] it measures a
// running gateway instead (bench/gateway/serve_overhead.sh starts one):
// per stream the time to the first text chunk and the tokens/s from the
// first chunk to the last, printed one line per stream.

#include "runtime/gateway/server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using namespace exo::gateway;
using steady = std::chrono::steady_clock;

namespace {

/// Emits `n` tokens at once, honouring back-pressure.
struct instant_backend : completion_backend {
  void complete(const completion_request& req,
                std::shared_ptr<token_sink> sink) override {
    std::thread([req, sink] {
      auto n = req.max_tokens ? *req.max_tokens : 16;
      std::int64_t i = 0;
      std::atomic<bool> wait{false};
      while (i < n && !sink->closed()) {
        auto s = sink->token(0, " tok");
        ++i;
        if (s == sink_state::full) {
          wait = true;
          sink->on_ready([&wait] { wait = false; });
          while (wait && !sink->closed())
            std::this_thread::sleep_for(std::chrono::microseconds{50});
        }
      }
      sink->finish(finish_reason::length, usage{4, 0});
    }).detach();
  }
};

int connect_to(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::perror("connect");
    std::exit(1);
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void send_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    auto n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0)
      std::exit(1);
    off += std::size_t(n);
  }
}

std::string completion(int tokens) {
  std::string body = R"({"model":"bench","prompt":"hi","stream":true,)"
                     R"("max_tokens":)"
                     + std::to_string(tokens) + "}";
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
         "application/json\r\nConnection: close\r\nContent-Length: "
         + std::to_string(body.size()) + "\r\n\r\n" + body;
}

/// One streamed completion: microseconds to the first token and to the
/// last ([DONE]).
std::pair<double, double> stream_once(std::uint16_t port, int tokens) {
  auto t0 = steady::now();
  int fd = connect_to(port);
  send_all(fd, completion(tokens));
  std::string got;
  char buf[65536];
  double first = -1;
  for (;;) {
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    got.append(buf, std::size_t(n));
    if (first < 0 && got.find("\"text\":\" tok\"") != std::string::npos)
      first = std::chrono::duration<double, std::micro>(steady::now() - t0)
                .count();
    if (got.find("data: [DONE]") != std::string::npos)
      break;
  }
  ::close(fd);
  return {first, std::chrono::duration<double, std::micro>(steady::now() - t0)
                   .count()};
}

double requests_per_s(std::uint16_t port, const std::string& path,
                      int conns, double seconds) {
  std::atomic<long> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int c = 0; c < conns; ++c)
    ts.emplace_back([&] {
      int fd = connect_to(port);
      char buf[16384];
      while (!stop) {
        send_all(fd, req);
        // One response: headers, then Content-Length bytes.
        std::string got;
        std::size_t need = std::string::npos;
        while (need == std::string::npos || got.size() < need) {
          auto n = ::recv(fd, buf, sizeof buf, 0);
          if (n <= 0)
            return;
          got.append(buf, std::size_t(n));
          auto end = got.find("\r\n\r\n");
          if (need == std::string::npos && end != std::string::npos) {
            auto cl = got.find("Content-Length: ");
            need = end + 4 + std::stoul(got.substr(cl + 16));
          }
        }
        ++done;
      }
      ::close(fd);
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : ts)
    t.join();
  return double(done) / seconds;
}

/// Against a running gateway: one streamed completion of `n` tokens.
/// Prints "ttft_us tokens tokens_per_s" (tokens/s from the first text
/// chunk to the last).
void measure_remote(std::uint16_t port, const std::string& model, int n,
                    const std::string& prompt) {
  std::string body = R"({"model":")" + model + R"(","prompt":")" + prompt
                     + R"(","stream":true,"temperature":0,"max_tokens":)"
                     + std::to_string(n) + "}";
  auto t0 = steady::now();
  int fd = connect_to(port);
  send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
               "application/json\r\nConnection: close\r\nContent-Length: "
                 + std::to_string(body.size()) + "\r\n\r\n" + body);
  std::string got;
  char buf[65536];
  std::size_t scanned = 0;
  int chunks = 0;
  steady::time_point first{}, last{};
  for (;;) {
    auto k = ::recv(fd, buf, sizeof buf, 0);
    if (k <= 0)
      break;
    got.append(buf, std::size_t(k));
    auto now = steady::now();
    for (;;) {
      auto at = got.find("\"text\":\"", scanned);
      if (at == std::string::npos)
        break;
      scanned = at + 8;
      if (scanned < got.size() && got[scanned] == '"')
        continue; // an empty text (the last chunk)
      if (!chunks++)
        first = now;
      last = now;
    }
    if (got.find("data: [DONE]") != std::string::npos)
      break;
  }
  ::close(fd);
  auto ttft = std::chrono::duration<double, std::micro>(first - t0).count();
  auto span = std::chrono::duration<double>(last - first).count();
  std::printf("%.0f %d %.2f\n", ttft, chunks,
              chunks > 1 && span > 0 ? (chunks - 1) / span : 0.0);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    std::uint16_t port = 0;
    std::string model, prompt = "Once upon a time";
    int n = 128, repeat = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
      std::string k = argv[i], v = argv[i + 1];
      if (k == "--port")
        port = static_cast<std::uint16_t>(std::stoi(v));
      else if (k == "--model")
        model = v;
      else if (k == "-n")
        n = std::stoi(v);
      else if (k == "--repeat")
        repeat = std::stoi(v);
      else if (k == "--prompt")
        prompt = v;
      else {
        std::fprintf(stderr, "gateway_bench: unknown option %s\n", k.c_str());
        return 2;
      }
    }
    if (!port || model.empty()) {
      std::fprintf(stderr, "gateway_bench --port P --model ID [-n N] "
                           "[--repeat K] [--prompt S]\n");
      return 2;
    }
    for (int i = 0; i < repeat; ++i)
      measure_remote(port, model, n, prompt);
    return 0;
  }
  server_options o;
  o.models = {{"bench", 1700000000, "exo"}};
  o.backend = std::make_shared<instant_backend>();
  o.threads = 2;
  o.limits.max_queued = 1024;
  server srv{o};
  auto port = srv.start();
  for (int i = 0; i < 20; ++i) // warm up
    stream_once(port, 4);
  std::vector<double> ttft;
  for (int i = 0; i < 200; ++i)
    ttft.push_back(stream_once(port, 1).first);
  std::vector<double> per_token;
  for (int i = 0; i < 10; ++i) {
    auto [first, last] = stream_once(port, 2000);
    per_token.push_back((last - first) / 1999);
  }
  auto health = requests_per_s(port, "/health", 8, 3);
  auto models = requests_per_s(port, "/v1/models", 8, 3);
  std::printf("gateway (instant backend, loopback, 2 server threads)\n");
  std::printf("  time to first token    median %.0f us (goal < 1000 us)\n",
              median(ttft));
  std::printf("  per token (2000-token stream) median %.2f us (goal < 50 us)\n",
              median(per_token));
  std::printf("  GET /health            %.0f requests/s (8 keep-alive "
              "connections)\n",
              health);
  std::printf("  GET /v1/models         %.0f requests/s (8 keep-alive "
              "connections)\n",
              models);
  std::fflush(stdout);
  if (std::system("command -v wrk >/dev/null 2>&1") == 0) {
    for (auto path : {"/health", "/v1/models"}) {
      std::printf("  wrk -t2 -c64 -d3s %s:\n", path);
      std::fflush(stdout);
      auto cmd = "wrk -t2 -c64 -d3s http://127.0.0.1:" + std::to_string(port)
                 + path + " | grep -E 'Requests/sec|Latency'";
      if (std::system(cmd.c_str()) != 0)
        std::printf("    (wrk failed)\n");
    }
  } else {
    std::printf("  (wrk is not installed: no wrk figures)\n");
  }
  srv.stop();
  return 0;
}
