#pragma once

/// Test support: a cluster of real exo-node processes on 127.0.0.1, and the
/// console that talks to it. Every multi-process test uses this one harness:
///
///   pki p{"exo-cluster"};              // CA + client certificate "ops"
///   p.node("n1");                      // node certificate
///   auto n1 = start_node(p, {"n1"});   // exo-node on a free port
///   auto n2 = start_node(p, node_options{"n2"}.seed(n1.port));
///   auto r = console(p, n1.port, {"nodes"});
///   CHECK(eventually(p, n1.port, "nodes", [](const std::string& json) {
///     return json.find("\"alive\"") != std::string::npos; }, 10s));

#include "test/support/pki.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace exo::test {

/// The devices most tests give a node: the CPU and one simulated phone GPU.
inline const char* cpu_and_sim_devices = R"({"include": ["cpu", "sim"],
                "simulated": [{"profile": "adreno-740"}],
                "rescan_interval_s": 0})";

/// How to start one node. The config file is written from these fields.
struct node_options {
  std::string name;
  std::uint16_t port = 0; ///< 0: a free port (read back from the node)
  std::vector<std::uint16_t> seeds;
  /// Which certificate (dir/CERT/CERT.crt); empty: the node's name.
  std::string cert;
  /// The node's state directory; empty: dir/CERT/state-NAME.
  std::string state_dir;
  int heartbeat_ms = 200;
  int failure_timeout_ms = 1500;
  int connect_timeout_ms = 1000;
  /// The "devices" object (JSON text).
  std::string devices = cpu_and_sim_devices;
  /// More keys of the "network" section, JSON text starting with a comma
  /// (`, "limits": {...}`); empty for none.
  std::string network_extra;
  /// More top-level sections, JSON text starting with a comma
  /// (`, "safety": {...}`); empty for none.
  std::string extra;
  std::chrono::seconds ready_timeout{60};

  node_options() = default;
  node_options(std::string n) : name(std::move(n)) { // NOLINT: implicit
  }
  node_options& seed(std::uint16_t p) {
    seeds.push_back(p);
    return *this;
  }
};

/// One running exo-node (killed with SIGKILL when destroyed).
struct node_proc {
  std::string name;
  std::uint16_t port = 0;
  std::unique_ptr<process> proc;
};

/// A "devices" object (JSON text) with one simulated device "tiny" of
/// `mib` MiB that reads 1 GB/s on the wall clock (sim_time_scale 1: 25 ms
/// a token of a 25 MiB model) and the cpu at 1 MiB (it takes no layer);
/// its profile is written to dir/tiny.json.
std::string slow_small_sim(const std::string& dir, int mib);

/// A port on 127.0.0.1 nobody listens on now (bound to 0 and released):
/// for a server whose port must stay the same across restarts.
std::uint16_t free_port();

/// Writes the node's config file and returns its path.
std::string write_node_config(const pki& p, const node_options& o);

/// Starts exo-node with the config of `o`, waits for "ready in" and reads
/// the port it listens on. Throws (a test failure naming the node and its
/// output) when it does not come up.
node_proc start_node(const pki& p, const node_options& o);

/// How the console is run.
struct console_options {
  bool json = false;
  std::chrono::milliseconds timeout{10000}; ///< --timeout-ms
  std::string client = "ops";               ///< dir/CLIENT/CLIENT.crt
  /// Commands that need a token by default (run, plan, cancel, leave,
  /// audit) and name none carry the node's admin token (its state
  /// directory's admin.token), as the operator's would; false sends them
  /// as a client without a token.
  bool operator_token = true;
  /// More nodes (ports on 127.0.0.1) the console tries, in order, when the
  /// first cannot be reached (--connect given once for each).
  std::vector<std::uint16_t> fallback = {};
};

/// Remembers that the node listening on `port` keeps its state (and
/// admin.token) in `state_dir` (start_node does it).
void register_admin_token(std::uint16_t port, const std::string& state_dir);

/// The command line of exo-console against 127.0.0.1:port with one --exec
/// per command (for a console that runs beside the test: process{...}).
std::vector<std::string> console_argv(const pki& p, std::uint16_t port,
                                      const std::vector<std::string>& cmds,
                                      const console_options& o = {});

/// Runs exo-console against 127.0.0.1:port with one --exec per command.
run_result console(const pki& p, std::uint16_t port,
                   const std::vector<std::string>& cmds,
                   const console_options& o = {});

/// Runs `cmd` (as JSON) until `accept` holds or `timeout` passes, pausing
/// between tries. On a timeout it logs the last output.
bool poll_console(const pki& p, std::uint16_t port, const std::string& cmd,
                  const std::function<bool(const run_result&)>& accept,
                  std::chrono::milliseconds timeout,
                  const console_options& o = {true});

/// poll_console with a predicate on the whole result, or on the output of a
/// successful run.
template<class Pred>
bool eventually(const pki& p, std::uint16_t port, const std::string& cmd,
                Pred pred, std::chrono::milliseconds timeout,
                const console_options& o = {true}) {
  return poll_console(
      p, port, cmd,
      [&](const run_result& r) {
        if constexpr (std::is_invocable_r_v<bool, Pred&, const run_result&>)
          return pred(r);
        else
          return r.code == 0 && pred(r.out);
      },
      timeout, o);
}
/// The id of the first running job in a `jobs` JSON answer (not those
/// that ended, listed under "recent") that has generated tokens (its
/// prompt is read); "" when none.
std::string running_job_with_tokens(const std::string& jobs_json);

/// The node that backs up a job the node at `port` coordinates: the one
/// named `name` (run --id), or any when "", as `jobs` shows it once it has
/// one; "" when none within `timeout`.
std::string job_backup(const pki& p, std::uint16_t port,
                       const std::string& name,
                       std::chrono::milliseconds timeout);


/// The status ("alive", "dead", ...) of member `name` in the output of
/// `nodes --json`; "" when it is not listed.
std::string status_of(const std::string& json, const std::string& name);

inline bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

} // namespace exo::test
