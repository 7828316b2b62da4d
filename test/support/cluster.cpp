#include "test/support/cluster.hpp"

#include <catch2/catch.hpp>

#include <regex>
#include <stdexcept>
#include <thread>

namespace exo::test {

std::string write_node_config(const pki& p, const node_options& o) {
  auto cert = o.cert.empty() ? o.name : o.cert;
  auto dir = p.dir + "/" + cert;
  auto state = o.state_dir.empty() ? dir + "/state-" + o.name : o.state_dir;
  std::string seeds = "[";
  for (std::size_t i = 0; i < o.seeds.size(); ++i)
    seeds += (i ? ", \"" : "\"") + std::string{"127.0.0.1:"} +
             std::to_string(o.seeds[i]) + "\"";
  seeds += "]";
  auto path = dir + "/" + o.name + "-node.json";
  write_file(path, R"({"node": {"name": ")" + o.name + R"(", "state_dir": ")" +
                       state + R"("},
    "network": {"port": )" +
                       std::to_string(o.port) + R"(, "seeds": )" + seeds +
                       R"(, "heartbeat_ms": )" +
                       std::to_string(o.heartbeat_ms) +
                       R"(, "failure_timeout_ms": )" +
                       std::to_string(o.failure_timeout_ms) +
                       R"(, "connect_timeout_ms": )" +
                       std::to_string(o.connect_timeout_ms) + R"(},
    "tls": {"certificate": ")" +
                       dir + "/" + cert + R"(.crt", "key": ")" + dir + "/" +
                       cert + R"(.key", "ca": ")" + dir + R"(/ca.crt"},
    "devices": )" + o.devices +
                       o.extra + "}");
  return path;
}

node_proc start_node(const pki& p, const node_options& o) {
  node_proc n;
  n.name = o.name;
  auto cfg = write_node_config(p, o);
  n.proc = std::make_unique<process>(
      std::vector<std::string>{exo_node(), "--config", cfg});
  if (!n.proc->wait_for_output("ready in", o.ready_timeout))
    throw std::runtime_error(
        "node " + o.name + " did not start: " + n.proc->out() + n.proc->err());
  std::smatch m;
  auto out = n.proc->out();
  if (!std::regex_search(out, m, std::regex{"listening on [^:]+:(\\d+)"}))
    throw std::runtime_error("node " + o.name +
                             " did not say where it listens: " + out);
  n.port = static_cast<std::uint16_t>(std::stoi(m[1]));
  return n;
}

run_result console(const pki& p, std::uint16_t port,
                   const std::vector<std::string>& cmds,
                   const console_options& o) {
  auto client = p.dir + "/" + o.client + "/" + o.client;
  std::vector<std::string> argv{exo_console(),
                                "--connect",
                                "127.0.0.1:" + std::to_string(port),
                                "--cert",
                                client + ".crt",
                                "--key",
                                client + ".key",
                                "--ca",
                                p.dir + "/ca/ca.crt",
                                "--timeout-ms",
                                std::to_string(o.timeout.count())};
  for (auto& c : cmds) {
    argv.push_back("--exec");
    argv.push_back(c);
  }
  if (o.json)
    argv.push_back("--json");
  return run(argv, o.timeout + std::chrono::seconds(60));
}

bool poll_console(const pki& p, std::uint16_t port, const std::string& cmd,
                  const std::function<bool(const run_result&)>& accept,
                  std::chrono::milliseconds timeout, const console_options& o) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto r = console(p, port, {cmd}, o);
    if (accept(r))
      return true;
    if (std::chrono::steady_clock::now() >= deadline) {
      UNSCOPED_INFO("last output of " << cmd << ": " << r.out << r.err);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

} // namespace exo::test
