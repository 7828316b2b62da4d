#pragma once

/// A scenario's own network: one Linux network namespace per node, each
/// joined by a veth pair to one bridge that the runner's namespace also has
/// an address on, so every node and the runner reach every node and nothing
/// else (no route leaves the bridge). Each node's link is shaped with
/// `tc ... tbf` on both ends of its veth pair; a partition takes the link
/// down. Everything is named with a tag unique to the run (`exo` + 4 hex
/// digits) so that teardown, and the check that nothing was left behind,
/// find exactly what this run made. Needs root (CAP_NET_ADMIN) and `ip` and
/// `tc` (iproute2); `netns_unavailable()` says why not.

#include <chrono>
#include <string>
#include <vector>

namespace exo::scenario {

/// One node's place in the network.
struct netns_node {
  std::string name;      ///< the scenario's node name
  std::string ns;        ///< namespace name: TAG-NAME
  std::string veth_host; ///< the host end of its veth pair: TAGhI (<= 15)
  std::string address;   ///< its IPv4 address on the bridge
};

/// The names and addresses of a network, before anything is made (pure).
struct netns_plan {
  std::string tag;            ///< "exo" + 4 hex digits
  std::string bridge;         ///< TAG + "br"
  std::string subnet;         ///< "10.A.B.0/24"
  std::string bridge_address; ///< "10.A.B.254": the runner's address
  std::vector<netns_node> nodes;

  const netns_node* find(const std::string& name) const;
};

/// Plans a network for `nodes` (1..200 names) tagged `tag`: the first /24
/// of 10.200.0.0 - 10.249.255.0 (walked from a start derived from the tag)
/// that overlaps none of `taken` (CIDRs or addresses already routed on the
/// host, "10.1.2.0/24" or "10.1.2.3"). Throws std::invalid_argument for a
/// bad tag, too many nodes, or no free subnet.
netns_plan make_netns_plan(const std::string& tag,
                           const std::vector<std::string>& nodes,
                           const std::vector<std::string>& taken);

/// The IPv4 prefixes and addresses the host's own namespace has or routes
/// (`ip -4 route`, `ip -4 addr`): the `taken` of make_netns_plan.
std::vector<std::string> netns_taken_prefixes();

/// A tag for this process: "exo" + 4 hex digits from the pid and the clock.
std::string make_netns_tag();

/// tbf parameters for a rate in Mbit/s (burst: 10 ms of traffic, at least
/// 16 KiB; queue: 250 ms, as a home router's: a shorter one drops so often
/// that TCP stalls in retransmission timeouts). The arguments after "tbf"
/// (pure).
std::vector<std::string> tbf_args(double mbit);

/// "" when this process can make namespaces (root, iproute2 present, a
/// probe namespace could be made and removed), else why not.
std::string netns_unavailable();

/// The namespaces and host links whose names start with `tag` that exist
/// now (for teardown checks; "exo" lists every run's).
std::vector<std::string> netns_leftovers(const std::string& tag);

/// Removes the namespaces and links netns_leftovers listed (processes in
/// those namespaces are killed first).
void netns_remove(const std::vector<std::string>& leftovers);

/// Removes every namespace and link named with `tag` (processes in those
/// namespaces are killed first). Returns what it removed.
std::vector<std::string> netns_remove_all(const std::string& tag);

/// A network brought up from a plan; torn down by down() or the destructor.
class netns_network {
public:
  /// Makes the bridge, the namespaces and the links. On any failure it
  /// removes what it made and throws std::runtime_error naming the command
  /// and its error.
  explicit netns_network(netns_plan plan);
  ~netns_network();
  netns_network(const netns_network&) = delete;
  netns_network& operator=(const netns_network&) = delete;

  const netns_plan& plan() const noexcept {
    return plan_;
  }

  /// The argv prefix that runs a program in `node`'s namespace.
  std::vector<std::string> exec_prefix(const std::string& node) const;

  /// Shapes both directions of `node`'s link to `mbit` Mbit/s (0: no
  /// shaping). Throws std::runtime_error.
  void shape(const std::string& node, double mbit);

  /// Delays every packet `node` sends to the subnet by `latency_ms` (plus
  /// a uniform jitter of up to `jitter_ms` either way, order kept) and
  /// drops `loss_pct` percent of them: its traffic to the subnet is routed
  /// into a TUN device `dly0`, where `netem_bin` (exo-netem) holds it, and
  /// forwarded out of eth0 when it comes back. A round trip between two
  /// nodes takes the sum of their latencies. Once per node. Throws
  /// std::runtime_error (also when exo-netem does not start).
  void set_delay(const std::string& node, double latency_ms, double jitter_ms,
                 double loss_pct, const std::string& netem_bin,
                 const std::string& log_path);

  /// Takes `node`'s link down (a partition from every other node and the
  /// runner) or up again. Throws std::runtime_error.
  void set_connected(const std::string& node, bool up);

  /// Kills every process left in the namespaces, removes them and the
  /// bridge, and waits (up to 10 s) until the kernel has let the links go.
  /// Idempotent. Returns what is still there afterwards (empty: clean).
  std::vector<std::string> down();

private:
  const netns_node& node(const std::string& name) const;

  netns_plan plan_;
  bool up_ = false;
  std::vector<int> relays_; ///< exo-netem processes (pids)
};

} // namespace exo::scenario
