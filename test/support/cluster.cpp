#include "test/support/cluster.hpp"

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <thread>

namespace exo::test {

namespace {

/// The admin token file of the node listening on each port (its state
/// directory's admin.token, written when it starts).
std::mutex admin_tokens_mutex;
std::map<std::uint16_t, std::string>& admin_tokens() {
  static std::map<std::uint16_t, std::string> m;
  return m;
}

/// Commands that need a token by default (least privilege): the harness is
/// the operator and shows the node's admin token with them.
bool needs_token(const std::string& cmd) {
  auto word = cmd.substr(0, cmd.find(' '));
  for (const char* w : {"run", "plan", "cancel", "leave", "audit", "drain",
                        "attach"})
    if (word == w)
      return true;
  return false;
}

std::string with_admin_token(std::uint16_t port, const std::string& cmd) {
  if (!needs_token(cmd) || cmd.find("auth=") != std::string::npos)
    return cmd;
  std::string file;
  {
    std::lock_guard<std::mutex> guard{admin_tokens_mutex};
    auto it = admin_tokens().find(port);
    if (it == admin_tokens().end())
      return cmd;
    file = it->second;
  }
  std::ifstream in{file};
  std::string token;
  std::getline(in, token);
  return token.empty() ? cmd : cmd + " auth=" + token;
}

} // namespace

void register_admin_token(std::uint16_t port, const std::string& state_dir) {
  std::lock_guard<std::mutex> guard{admin_tokens_mutex};
  admin_tokens()[port] = state_dir + "/access/admin.token";
}

std::string slow_small_sim(const std::string& dir, int mib) {
  auto profiles = dir + "/tiny.json";
  std::ofstream f{profiles};
  f.precision(17);
  f << R"({"profiles": [{"name": "tiny", "display_name": "tiny",
    "vendor": "test", "architecture": "t", "memory_gib": )"
    << mib / 1024.0 << R"(, "compute_units": 8, "tflops": 1,
    "bandwidth_gbs": 1, "idle_power_w": 10, "peak_power_w": 50,
    "thermal_resistance_c_per_w": 0.5, "thermal_capacitance_j_per_c": 100,
    "ambient_c": 30, "throttle_c": 90}]})";
  return R"({"include": ["cpu", "sim"], "cpu_memory_limit_mib": 1,
             "sim_profiles_file": ")"
         + profiles + R"(", "simulated": [{"profile": "tiny"}],
             "sim_time_scale": 1, "rescan_interval_s": 0})";
}

std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw std::runtime_error("free_port: no socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) {
    ::close(fd);
    throw std::runtime_error("free_port: cannot bind 127.0.0.1:0");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

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
  // The test's nodes share this machine's cores: none pins its threads.
  auto devices = o.devices;
  if (devices.find("cpu_bind_threads") == std::string::npos
      && !devices.empty() && devices.front() == '{')
    devices.insert(1, R"("cpu_bind_threads": false, )");
  // Nor measures its rates (they would differ from node to node under the
  // suite's load, and with them the plans the tests expect): placement
  // assumes the same figures for each, unless a test says otherwise.
  if (devices.find("cpu_measure_rates") == std::string::npos
      && !devices.empty() && devices.front() == '{')
    devices.insert(1, R"("cpu_measure_rates": false, )");
  if (devices.find("vulkan_measure_rates") == std::string::npos
      && !devices.empty() && devices.front() == '{')
    devices.insert(1, R"("vulkan_measure_rates": false, )");
  // Clients name models and problems from the test's folder, unless the
  // test writes its own "models" section (an object; the gateway's
  // "models" is a list).
  std::string models = o.extra.find("\"models\": {") == std::string::npos
                           ? R"(, "models": {"dirs": [")" + p.dir + R"("]})"
                           : std::string{};
  write_file(path, R"({"node": {"name": ")" + o.name + R"(", "state_dir": ")" +
                       state + R"("},
    "network": {"port": )" +
                       std::to_string(o.port) + R"(, "seeds": )" + seeds +
                       R"(, "heartbeat_ms": )" +
                       std::to_string(o.heartbeat_ms) +
                       R"(, "failure_timeout_ms": )" +
                       std::to_string(o.failure_timeout_ms) +
                       R"(, "connect_timeout_ms": )" +
                       std::to_string(o.connect_timeout_ms) + o.network_extra
                       + R"(},
    "tls": {"certificate": ")" +
                       dir + "/" + cert + R"(.crt", "key": ")" + dir + "/" +
                       cert + R"(.key", "ca": ")" + dir + R"(/ca.crt"},
    "devices": )" + devices +
                       models + o.extra + "}");
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
  auto cert = o.cert.empty() ? o.name : o.cert;
  register_admin_token(n.port, o.state_dir.empty() ? p.dir + "/" + cert
                                                         + "/state-" + o.name
                                                   : o.state_dir);
  return n;
}

std::vector<std::string> console_argv(const pki& p, std::uint16_t port,
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
  for (auto more : o.fallback) {
    argv.push_back("--connect");
    argv.push_back("127.0.0.1:" + std::to_string(more));
  }
  for (auto& c : cmds) {
    argv.push_back("--exec");
    argv.push_back(o.operator_token ? with_admin_token(port, c) : c);
  }
  if (o.json)
    argv.push_back("--json");
  return argv;
}

run_result console(const pki& p, std::uint16_t port,
                   const std::vector<std::string>& cmds,
                   const console_options& o) {
  return run(console_argv(p, port, cmds, o), o.timeout + std::chrono::seconds(60));
}

std::string running_job_with_tokens(const std::string& jobs_json) {
  auto at = jobs_json.find("\"jobs\": [");
  auto end = jobs_json.find("\"recent\"");
  if (at == std::string::npos || end == std::string::npos || end < at)
    return "";
  auto running = jobs_json.substr(at, end - at);
  std::smatch m;
  if (!std::regex_search(running, std::regex{"\"tokens\": [1-9]"})
      || !std::regex_search(running, m, std::regex{"\"job\": ([0-9]+)"}))
    return "";
  return m[1];
}

std::string status_of(const std::string& json, const std::string& name) {
  std::smatch m;
  std::regex re{"\"name\": \"" + name
                + "\", \"host\": \"[^\"]*\", \"port\": \\d+, "
                  "\"bulk_port\": [1-9]\\d*, \"status\": \"(\\w+)\""};
  return std::regex_search(json, m, re) ? std::string{m[1]} : "";
}

std::string job_backup(const pki& p, std::uint16_t port,
                       const std::string& name,
                       std::chrono::milliseconds timeout) {
  // (Each job's record: its name, then its backup.)
  std::regex re{"\"name\": \"" + (name.empty() ? "[^\"]*" : name)
                + "\", \"backup\": \"([^\"]+)\""};
  std::string backup;
  eventually(
    p, port, "jobs",
    [&](const std::string& out) {
      std::smatch m;
      if (!std::regex_search(out, m, re))
        return false;
      backup = m[1];
      return true;
    },
    timeout);
  return backup;
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
