#include "runtime/scenario/netns.hpp"

#include "runtime/scenario/process.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace exo::scenario {

namespace {

using std::chrono::milliseconds;

constexpr int first_octet = 10;
constexpr int second_low = 200;  ///< 10.200.0.0 ...
constexpr int second_count = 50; ///< ... 10.249.255.0
constexpr std::size_t max_nodes = 200;

bool parse_ipv4(const std::string& s, std::uint32_t& out) {
  unsigned a, b, c, d;
  char tail;
  if (std::sscanf(s.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4
      || a > 255 || b > 255 || c > 255 || d > 255)
    return false;
  out = (a << 24) | (b << 16) | (c << 8) | d;
  return true;
}

/// [first, last] of "A.B.C.D/N" or "A.B.C.D" (a /32); false when neither.
bool parse_range(const std::string& s, std::uint32_t& first,
                 std::uint32_t& last) {
  auto slash = s.find('/');
  std::uint32_t addr;
  if (!parse_ipv4(s.substr(0, slash), addr))
    return false;
  int bits = 32;
  if (slash != std::string::npos) {
    try {
      bits = std::stoi(s.substr(slash + 1));
    } catch (const std::exception&) {
      return false;
    }
    if (bits < 0 || bits > 32)
      return false;
  }
  const std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
  first = addr & mask;
  last = first | ~mask;
  return true;
}

std::string find_tool(const std::string& name) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::stringstream ss{path};
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty())
      continue;
    auto p = dir + "/" + name;
    if (access(p.c_str(), X_OK) == 0)
      return p;
  }
  return "";
}

const std::string& ip_tool() {
  static const std::string p = find_tool("ip");
  return p;
}

const std::string& tc_tool() {
  static const std::string p = find_tool("tc");
  return p;
}

/// Runs a command (10 s bound, also after Ctrl-C: teardown must run).
captured run_cmd(std::vector<std::string> argv) {
  return run_captured(argv, milliseconds{10000}, false);
}

std::string joined(const std::vector<std::string>& argv) {
  std::string s;
  for (auto& a : argv)
    s += (s.empty() ? "" : " ") + a;
  return s;
}

/// Runs a command that must succeed; throws naming it and its stderr.
void must(const std::vector<std::string>& argv) {
  auto r = run_cmd(argv);
  if (r.code != 0) {
    auto err = r.err.empty() ? r.out : r.err;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' '))
      err.pop_back();
    throw std::runtime_error(
      "`" + joined(argv) + "` failed"
      + (r.code < 0 ? " (timed out)" : " (status " + std::to_string(r.code)
                                         + ")")
      + (err.empty() ? "" : ": " + err));
  }
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss{text};
  std::string line;
  while (std::getline(ss, line))
    if (!line.empty())
      out.push_back(line);
  return out;
}

} // namespace

std::vector<std::string> netns_taken_prefixes() {
  std::vector<std::string> out;
  static const std::regex cidr{"(\\d+\\.\\d+\\.\\d+\\.\\d+(/\\d+)?)"};
  for (auto* what : {"route", "addr"}) {
    auto r = run_cmd({ip_tool(), "-4", "-o", what, "show"});
    for (std::sregex_iterator it{r.out.begin(), r.out.end(), cidr}, end;
         it != end; ++it)
      out.push_back((*it)[1]);
  }
  return out;
}

const netns_node* netns_plan::find(const std::string& name) const {
  for (auto& n : nodes)
    if (n.name == name)
      return &n;
  return nullptr;
}

netns_plan make_netns_plan(const std::string& tag,
                           const std::vector<std::string>& nodes,
                           const std::vector<std::string>& taken) {
  static const std::regex tag_re{"exo[0-9a-f]{4}"};
  if (!std::regex_match(tag, tag_re))
    throw std::invalid_argument("network tag \"" + tag
                                + "\" is not exo + 4 hex digits");
  if (nodes.empty() || nodes.size() > max_nodes)
    throw std::invalid_argument("a namespace network holds 1.."
                                + std::to_string(max_nodes) + " nodes, not "
                                + std::to_string(nodes.size()));
  std::vector<std::pair<std::uint32_t, std::uint32_t>> used;
  for (auto& t : taken) {
    std::uint32_t a, b;
    if (parse_range(t, a, b))
      used.emplace_back(a, b);
  }
  const std::size_t span = std::size_t{second_count} * 256;
  const std::size_t start = std::hash<std::string>{}(tag) % span;
  for (std::size_t i = 0; i < span; ++i) {
    const std::size_t idx = (start + i) % span;
    const int second = second_low + static_cast<int>(idx / 256);
    const int third = static_cast<int>(idx % 256);
    const std::uint32_t first_addr = (std::uint32_t{first_octet} << 24)
                                     | (static_cast<std::uint32_t>(second) << 16)
                                     | (static_cast<std::uint32_t>(third) << 8);
    const std::uint32_t last_addr = first_addr | 0xffu;
    bool clash = false;
    for (auto& [a, b] : used)
      clash = clash || !(b < first_addr || a > last_addr);
    if (clash)
      continue;
    const std::string net = std::to_string(first_octet) + "."
                            + std::to_string(second) + "."
                            + std::to_string(third) + ".";
    netns_plan p;
    p.tag = tag;
    p.bridge = tag + "br";
    p.subnet = net + "0/24";
    p.bridge_address = net + "254";
    for (std::size_t n = 0; n < nodes.size(); ++n)
      p.nodes.push_back({nodes[n], tag + "-" + nodes[n],
                         tag + "h" + std::to_string(n),
                         net + std::to_string(n + 1)});
    return p;
  }
  throw std::invalid_argument("no free /24 in 10.200.0.0/16 - 10.249.0.0/16");
}

std::string make_netns_tag() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  const auto mix = static_cast<std::uint64_t>(getpid()) * 2654435761u
                   ^ static_cast<std::uint64_t>(now);
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04x",
                static_cast<unsigned>((mix ^ (mix >> 16) ^ (mix >> 32)) & 0xffff));
  return std::string{"exo"} + buf;
}

std::vector<std::string> tbf_args(double mbit) {
  const double bytes_per_s = mbit * 1e6 / 8;
  const auto burst = static_cast<long long>(std::max(16384.0, bytes_per_s / 100));
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.0fkbit", mbit * 1000);
  return {"rate", rate, "burst", std::to_string(burst), "latency", "250ms"};
}

std::string netns_unavailable() {
  if (geteuid() != 0)
    return "not running as root (network namespaces need CAP_NET_ADMIN)";
  if (ip_tool().empty())
    return "iproute2's `ip` was not found";
  if (tc_tool().empty())
    return "iproute2's `tc` was not found";
  const std::string probe = make_netns_tag() + "-probe";
  auto r = run_cmd({ip_tool(), "netns", "add", probe});
  if (r.code != 0)
    return "`ip netns add` failed: "
           + (r.err.empty() ? "status " + std::to_string(r.code) : r.err);
  run_cmd({ip_tool(), "netns", "del", probe});
  return "";
}

std::vector<std::string> netns_leftovers(const std::string& tag) {
  std::vector<std::string> out;
  if (ip_tool().empty())
    return out;
  auto ns = run_cmd({ip_tool(), "netns", "list"});
  auto links = run_cmd({ip_tool(), "-o", "link", "show"});
  if (ns.code != 0 || links.code != 0) {
    // Unknown is not clean.
    out.push_back("unknown (`ip` could not list namespaces and links: "
                  + (ns.code != 0 ? ns.err : links.err) + ")");
    return out;
  }
  for (auto& line : lines_of(ns.out)) {
    auto name = line.substr(0, line.find(' '));
    if (name.rfind(tag, 0) == 0)
      out.push_back("namespace " + name);
  }
  // "7: exo1234h0@if2: <...> ..." (one line per link with -o)
  static const std::regex link_re{"^\\d+: ([^:@ ]+)"};
  for (auto& line : lines_of(links.out)) {
    std::smatch m;
    if (std::regex_search(line, m, link_re)
        && std::string{m[1]}.rfind(tag, 0) == 0)
      out.push_back("link " + std::string{m[1]});
  }
  return out;
}

std::vector<std::string> netns_remove_all(const std::string& tag) {
  auto found = netns_leftovers(tag);
  netns_remove(found);
  return found;
}

void netns_remove(const std::vector<std::string>& found) {
  for (auto& what : found) {
    if (what.rfind("unknown", 0) == 0)
      continue;
    auto name = what.substr(what.find(' ') + 1);
    if (what.rfind("namespace ", 0) == 0) {
      auto pids = run_cmd({ip_tool(), "netns", "pids", name});
      for (auto& p : lines_of(pids.out))
        kill(static_cast<pid_t>(std::atol(p.c_str())), SIGKILL);
      run_cmd({ip_tool(), "netns", "del", name});
    } else {
      run_cmd({ip_tool(), "link", "del", name});
    }
  }
}

netns_network::netns_network(netns_plan plan) : plan_(std::move(plan)) {
  if (ip_tool().empty() || tc_tool().empty())
    throw std::runtime_error("iproute2 (ip, tc) is not installed");
  up_ = true;
  try {
    const auto& ip = ip_tool();
    must({ip, "link", "add", plan_.bridge, "type", "bridge"});
    must({ip, "addr", "add", plan_.bridge_address + "/24", "dev", plan_.bridge});
    must({ip, "link", "set", plan_.bridge, "up"});
    for (auto& n : plan_.nodes) {
      must({ip, "netns", "add", n.ns});
      must({ip, "link", "add", n.veth_host, "type", "veth", "peer", "name",
            "eth0", "netns", n.ns});
      must({ip, "link", "set", n.veth_host, "master", plan_.bridge});
      must({ip, "link", "set", n.veth_host, "up"});
      must({ip, "-n", n.ns, "addr", "add", n.address + "/24", "dev", "eth0"});
      must({ip, "-n", n.ns, "link", "set", "eth0", "up"});
      must({ip, "-n", n.ns, "link", "set", "lo", "up"});
    }
  } catch (...) {
    down();
    throw;
  }
}

netns_network::~netns_network() {
  down();
}

const netns_node& netns_network::node(const std::string& name) const {
  auto* n = plan_.find(name);
  if (n == nullptr)
    throw std::runtime_error("no node " + name + " in the network");
  return *n;
}

std::vector<std::string> netns_network::exec_prefix(
  const std::string& name) const {
  return {ip_tool(), "netns", "exec", node(name).ns};
}

void netns_network::shape(const std::string& name, double mbit) {
  auto& n = node(name);
  std::vector<std::vector<std::string>> sides{
    {ip_tool(), "netns", "exec", n.ns, tc_tool(), "qdisc"},
    {tc_tool(), "qdisc"}};
  const std::string dev_ns = "eth0";
  for (std::size_t s = 0; s < sides.size(); ++s) {
    auto argv = sides[s];
    const std::string& dev = s == 0 ? dev_ns : n.veth_host;
    if (mbit <= 0) {
      argv.insert(argv.end(), {"del", "dev", dev, "root"});
      run_cmd(argv); // none there is fine
      continue;
    }
    argv.insert(argv.end(), {"replace", "dev", dev, "root", "tbf"});
    for (auto& a : tbf_args(mbit))
      argv.push_back(a);
    must(argv);
  }
}

void netns_network::set_delay(const std::string& name, double latency_ms,
                              double jitter_ms, double loss_pct,
                              const std::string& netem_bin,
                              const std::string& log_path) {
  auto& n = node(name);
  const auto& ip = ip_tool();
  must({ip, "-n", n.ns, "tuntap", "add", "dev", "dly0", "mode", "tun"});
  must({ip, "-n", n.ns, "link", "set", "dly0", "up"});
  // Forward what comes back from the delay line; accept it although its
  // source is our own address; no redirects, no reverse-path filter.
  must({ip, "netns", "exec", n.ns, "/bin/sh", "-c",
        "for f in ipv4/ip_forward ipv4/conf/dly0/accept_local; do "
        "echo 1 > /proc/sys/net/$f; done; "
        "for c in all default eth0 dly0; do "
        "echo 0 > /proc/sys/net/ipv4/conf/$c/rp_filter; "
        "echo 0 > /proc/sys/net/ipv4/conf/$c/send_redirects; done"});
  // The node's own traffic to the subnet goes into the delay line; what
  // comes out of it (iif dly0) leaves by eth0.
  must({ip, "-n", n.ns, "route", "replace", plan_.subnet, "dev", "dly0", "src",
        n.address});
  must({ip, "-n", n.ns, "route", "add", plan_.subnet, "dev", "eth0", "src",
        n.address, "table", "100"});
  must({ip, "-n", n.ns, "rule", "add", "pref", "100", "iif", "dly0", "lookup",
        "100"});
  char lat[32], jit[32], los[32];
  std::snprintf(lat, sizeof lat, "%g", latency_ms);
  std::snprintf(jit, sizeof jit, "%g", jitter_ms);
  std::snprintf(los, sizeof los, "%g", loss_pct);
  auto argv = exec_prefix(name);
  argv.insert(argv.end(), {netem_bin, "dly0", lat, jit, los,
                           std::to_string(relays_.size() + 1)});
  const pid_t pid = spawn_logged(argv, log_path);
  relays_.push_back(pid);
  // Until it is attached to the device (it says so), or it ended.
  for (int i = 0; i < 200; ++i) {
    int status = 0;
    if (!still_running(pid, status))
      throw std::runtime_error("exo-netem for " + name + " exited with status "
                               + std::to_string(status) + " (log "
                               + log_path + ")");
    std::ifstream in{log_path};
    std::string text{std::istreambuf_iterator<char>(in), {}};
    if (text.find("exo-netem on") != std::string::npos)
      return;
    std::this_thread::sleep_for(milliseconds{25});
  }
  throw std::runtime_error("exo-netem for " + name + " did not start within "
                           "5 s (log " + log_path + ")");
}

void netns_network::set_connected(const std::string& name, bool up) {
  must({ip_tool(), "link", "set", node(name).veth_host, up ? "up" : "down"});
}

std::vector<std::string> netns_network::down() {
  if (!up_)
    return netns_leftovers(plan_.tag);
  up_ = false;
  for (int pid : relays_)
    terminate(pid, milliseconds{1000});
  relays_.clear();
  netns_remove_all(plan_.tag);
  // Namespace removal is asynchronous: the kernel drops the veth pairs a
  // moment later.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  auto left = netns_leftovers(plan_.tag);
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds{50});
    netns_remove_all(plan_.tag);
    left = netns_leftovers(plan_.tag);
  }
  return left;
}

} // namespace exo::scenario
