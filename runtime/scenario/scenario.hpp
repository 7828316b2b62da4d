#pragma once

/// Scenarios: declarative heterogeneous test clusters (scenarios/README.md).
///
/// A scenario file (JSON, read with simdjson) names its nodes, their devices
/// (real backends and simulated devices by profile, with optional faults),
/// how they seed each other, timing knobs, an optional generated test model,
/// and a list of steps with expectations. This header holds the pure part:
/// the parsed form, the parser (strict: unknown keys, wrong types and bad
/// values are errors that name the key path) and the expectation checks.
/// runner.hpp brings a scenario up with real exo-node processes.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace exo::scenario {

/// A scenario file that cannot be used; what() names the key path.
class scenario_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct simulated_device {
  std::string profile; ///< a profile of config/sim-profiles.json
  int count = 1;       ///< 1..64
  std::string fault;   ///< "" or backend::sim_fault_error's names
};

struct node_spec {
  std::string name;
  std::vector<std::string> backends{"cpu"}; ///< devices.include (real ones)
  std::vector<simulated_device> simulated;
  std::vector<std::string> seeds; ///< names of other nodes
  bool seeds_given = false;       ///< false: seeds follow the topology
  bool start = true;              ///< started before the first step
  /// The cluster the node's certificate belongs to: "" the scenario's
  /// main CA, another name a CA of its own (and a console client of it).
  std::string cluster;
  std::uint64_t cpu_memory_limit_mib = 0;
  /// devices.measure_rates: the cpu and Vulkan devices measure their FLOP/s
  /// and bytes/s at start (placement works from them); off by default, the nodes
  /// sharing this machine's cores would each measure a different share.
  bool measure_rates = false;
  /// devices.sim_time_scale: wall seconds per simulated second of the
  /// node's simulated devices; 0 (the default): a simulated clock only
  /// (they neither heat nor cool with time, only with their own work).
  double sim_time_scale = 0;
  /// cpus: the CPUs the node runs on (its kernels' threads follow: one
  /// each); empty: every CPU the runner may use. Nodes sharing a machine
  /// on CPUs of their own run as machines of their own would.
  std::vector<int> cpus;
  /// link.bandwidth_mbit: the node's link, shaped both ways (namespaces
  /// only); 0: as fast as the machine goes.
  double bandwidth_mbit = 0;
  /// link.latency_ms / jitter_ms / loss_pct: added to every packet the node
  /// sends (exo-netem, namespaces only); a round trip between two nodes
  /// takes the sum of their latencies.
  double latency_ms = 0;
  double jitter_ms = 0;
  double loss_pct = 0;
};

/// How the nodes are connected (scenarios/README.md, "network").
struct network_spec {
  /// One network namespace per node on a bridge (needs root; without it
  /// the runner says so and runs on 127.0.0.1).
  bool namespaces = false;
  /// Zero-config discovery on the nodes (network.discovery of their
  /// configs); off by default so that seeds and topology decide alone.
  bool discovery = false;
};

struct timing_spec {
  int heartbeat_ms = 200;
  int failure_timeout_ms = 1500;
  int connect_timeout_ms = 1000;
  double start_timeout_s = 90;   ///< a node's "ready" line
  double stop_timeout_s = 30;    ///< a graceful stop
  int console_timeout_ms = 5000; ///< exo-console --timeout-ms
  int poll_ms = 250;             ///< between checks of a condition
  double default_within_s = 30;  ///< bound of a step that gives none
};

struct model_spec {
  int layers = 4;
  int dim = 64;
  int ff = 128;
  int heads = 4;
  int kv_heads = 4;
  int vocab = 512;
  int seed = 7;
  int ctx = 256; ///< the model's context length (exo-model make-test --ctx)
};

/// What a command's output must satisfy.
struct expectation {
  int exit_code = 0;                  ///< exo-console's exit status
  std::vector<std::string> contains;  ///< substrings of stdout (+ stderr)
  std::vector<std::string> excludes;  ///< substrings that must be absent
  std::string json;                   ///< minified JSON that must be
                                      ///< contained in stdout (see
                                      ///< json_contains); empty: none
};

enum class step_kind {
  converge,
  console,
  kill,
  stop,
  start,
  plan,
  run,
  await,
  freeze,
  thaw,
  sleep,
  partition,
  heal,
  shape,
  measure,
  fault,
  audit,
  thermal
};

const char* to_string(step_kind k) noexcept;

struct step {
  step_kind kind = step_kind::sleep;
  std::string path;  ///< "steps[3]" (for messages)
  std::string verb;  ///< the "do" as written ("restart" is a start)
  std::string title; ///< optional "name" of the step
  std::string node;  ///< the node it acts on / asks
  // converge
  int alive = -1;                 ///< -1: the number of running nodes
  std::vector<std::string> on;    ///< nodes asked; empty: every running one
  std::string coordinator;        ///< expected coordinator; empty: any
  // console / plan / run
  std::string command; ///< console: the command line; plan: extra args
  bool json = false;   ///< console: pass --json; run/await: a JSON reply
  expectation expect;
  // run
  std::string prompt;
  int tokens = 8;
  int stages = 0; ///< 0: the node's default
  int seed = 1;
  double temperature = -1; ///< < 0: the console's default
  /// Run first with --stages 1 on the same node; the tokens must match.
  bool reference = false;
  /// run: the label of a background run ("background"); await: the run it
  /// waits for ("run"). Empty for a run in the foreground.
  std::string label;
  /// A foreground run or an await: the number of recoveries the reply must
  /// report; -1: not checked.
  int expect_recoveries = -1;
  /// A foreground run or an await: the most tokens its recoveries may
  /// re-feed in all (planned moves and handoffs re-feed none); -1: not
  /// checked.
  long max_refed = -1;
  // Every waiting step (all but thaw and sleep): the bound
  double within_s = -1; ///< -1: timing.default_within_s
  bool poll = false;    ///< console: retry until within_s passes
  // sleep
  double seconds = 0;
  // shape: the link's new rate (0: unshaped)
  double bandwidth_mbit = -1;
  // measure: how far (percent) a measured rate may be from the shaped one
  double tolerance_pct = 20;
  // measure: > 0: each shaped link must reach this rate instead (for
  // shaping faster than the machine carries between namespaces)
  double min_mbit = 0;
  // run: this many identical requests in flight at once (each its own
  // console client); every one must end with its tokens (and the
  // reference's, when asked): none may be lost.
  int requests = 1;
  /// run: the measured time a generated token takes may differ from the
  /// step time its placement predicted (the plan's latency) by at most
  /// this many percent; < 0: not checked.
  double step_within_pct = -1;
  // fault: the simulated device (its id, "sim:rtx-4090:0") and the fault
  // (backend::sim_runtime_fault_error's names)
  std::string device;
  std::string fault;
};

struct scenario {
  std::string name;
  std::string description;
  std::string topology = "star"; ///< star, chain or none
  network_spec network;
  std::vector<node_spec> nodes;
  timing_spec timing;
  std::optional<model_spec> model; ///< generated when plan/run steps exist
  std::vector<step> steps;

  const node_spec* find(const std::string& name) const;
  /// The seeds of `node` (names) by its own list or the topology.
  std::vector<std::string> seeds_of(const node_spec& node) const;
};

/// Parses a scenario document; `source` prefixes a JSON syntax error.
/// Throws scenario_error naming the key path ("steps[2].node: ...").
scenario parse(const std::string& json, const std::string& source);

/// Reads and parses a file. Throws scenario_error (also for a missing file).
scenario load(const std::string& path);

// -- expectation checks (pure) -----------------------------------------------

/// Whether `actual` (a JSON text) contains `expected` (a JSON text): objects
/// match when every expected key is present with a matching value (extra
/// keys are fine), arrays when every expected element matches some element
/// of the actual array, scalars when equal (numbers by value). Sets `why`
/// when it does not hold.
bool json_contains(const std::string& actual, const std::string& expected,
                   std::string& why);

/// Checks a command's result against an expectation; returns "" when it
/// holds, else the reason.
std::string check(const expectation& e, int exit_code, const std::string& out,
                  const std::string& err);

/// One member as `exo-console --json --exec nodes` reports it.
struct member_status {
  std::string name;
  std::string status; ///< alive, suspect, dead, left, ...
};

/// Parses the output of `nodes --json`: the members and the coordinator.
/// Returns false (with `why`) when it is not that shape.
bool parse_nodes(const std::string& json, std::vector<member_status>& out,
                 std::string& coordinator, std::string& why);

/// The status of `name` in `members`, or "" when it is not listed.
std::string status_of(const std::vector<member_status>& members,
                      const std::string& name);

/// Whether a `run` step's prompt can pass through the console's command line
/// (no '"', '\\' or line break).
bool prompt_ok(const std::string& prompt);

/// One recovery of a run, as the console's `run --json` reports it.
struct recovery {
  std::string reason;         ///< what was lost
  std::uint64_t replayed = 0; ///< tokens re-fed
  double recovery_s = 0;      ///< from noticing the loss to the next token
  double gap_s = 0;           ///< between the tokens around the loss
};

/// The reply of the console's `run --json`.
struct run_reply {
  std::uint64_t job = 0;
  bool cancelled = false;
  std::vector<std::int64_t> tokens; ///< sequence 0's generated token ids
  std::vector<recovery> recoveries;
};

/// Parses the output of `run --json`. Returns false (with `why`) when it is
/// not that shape.
bool parse_run_reply(const std::string& json, run_reply& out, std::string& why);

/// A run's step time: what its placement predicted for one token (the
/// plan's "latency: ") and what a generated token took ("generation: N
/// tokens in T s", T / N), both in seconds.
struct step_times {
  double predicted_s = 0;
  double measured_s = 0;
};

/// Reads them from the text of a run's reply. Returns false (with `why`)
/// when either is missing or not a positive figure.
bool parse_step_times(const std::string& text, step_times& out,
                      std::string& why);

/// "predicted 12.6 ms a token, measured 14.0 ms (+11%, within 25%)"; throws
/// nothing: `ok` says whether |measured - predicted| <= pct% of measured.
std::string compare_step_times(const step_times& t, double pct, bool& ok);

/// One job as `jobs --json` lists it.
struct job_status {
  std::uint64_t job = 0;
  std::string state; ///< running (the list "jobs"), or how it ended
  std::uint64_t tokens = 0;
};

/// Parses the output of `jobs --json`: the running jobs (its "jobs" list).
/// Returns false (with `why`) when it is not that shape.
bool parse_jobs(const std::string& json, std::vector<job_status>& running,
                std::string& why);

/// One link as `measure --json` reports it.
struct measured_link {
  std::string from, to;
  double bandwidth_bps = 0; ///< bytes per second
  double rtt_p50_us = 0;
};

/// Parses the output of `measure --json` (or `links --json`). Returns false
/// (with `why`) when it is not that shape.
bool parse_links(const std::string& json, std::vector<measured_link>& out,
                 std::string& why);

/// The shaping of one node's link, as the runner has set it now.
struct link_shaping {
  double mbit = 0;       ///< 0: unshaped
  double latency_ms = 0; ///< added to what it sends
};

/// Checks measured links against the shaping (per node; a node missing is
/// unshaped): a link from A to B runs at most at min(rate A, rate B), and
/// the measured rate must be within tolerance_pct of it; its round trip
/// takes latency A + latency B, and the measured median must be within
/// tolerance_pct of that plus 1 ms. Links with neither end shaped are not
/// checked. Returns "" when every checked link holds (with `summary`
/// listing them), else the reason. With `min_mbit` > 0 a rate is held to
/// that floor instead of the tolerance (a 10 Gbit/s shaping on a machine
/// whose namespaces carry less).
std::string check_link_rates(const std::vector<measured_link>& links,
                             const std::map<std::string, link_shaping>& shaped,
                             double tolerance_pct, std::string& summary,
                             double min_mbit = 0);

/// Compares a run's tokens with its reference's: "" when they are equal,
/// else where they first differ.
std::string compare_tokens(const std::vector<std::int64_t>& got,
                           const std::vector<std::int64_t>& reference);

} // namespace exo::scenario
