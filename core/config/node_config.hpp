#pragma once

/// The settings of one exo-node, read from a JSON file with simdjson.
///
/// Every option has a default, so a node without a config file runs a single
/// local node. Unknown keys, wrong types and out-of-range values are errors
/// that name the key path ("network.port: must be an integer in [0, 65535]").
/// config/README.md documents every key.

#include "core/tls/connection_limits.hpp"
#include "backends/factory/factory.hpp"
#include "core/config/peer_address.hpp"

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace exo::config {

struct node_section {
  std::string name;      ///< default: the host name
  std::string state_dir; ///< default: $XDG_STATE_HOME/exo or ~/.local/state/exo
};

/// Zero-config discovery on a LAN (`network.discovery`): signed hellos on a
/// multicast group (core/tls/hello.hpp, core/lan/beacon.hpp). Runs only
/// when enabled and the node listens on a concrete non-loopback IPv4
/// address (the hello tells where to connect).
struct discovery_section {
  bool enabled = true;
  std::string group = "239.255.77.77";
  std::uint16_t port = 7707;
  std::chrono::milliseconds interval{2000};
};

struct network_section {
  std::string listen = "127.0.0.1";
  std::uint16_t port = 7700; ///< 0 picks a free port
  /// The bulk channel's TLS port (core/tls/bulk_channel.hpp) on the same
  /// address; 0 picks a free one (members learn it by gossip).
  std::uint16_t bulk_port = 0;
  std::vector<peer_address> seeds;
  std::chrono::milliseconds heartbeat{250};
  std::chrono::milliseconds failure_timeout{1500};
  std::chrono::milliseconds connect_timeout{2000};
  /// How long a member that died or left stays in the view (then it is
  /// forgotten: names that come and go do not fill the view).
  std::chrono::milliseconds forget_departed{600000};
  /// What one TLS peer may hold of this node (`network.limits`).
  tls::connection_limits_config limits;
  discovery_section discovery;
};

/// The folders whose files clients may name (`models.dirs`): console
/// `run --model`, `plan MODEL` and `plan --problem` read only files inside
/// them (after following links). Empty: `<state_dir>/models`.
struct models_section {
  std::vector<std::string> dirs;
  /// Each job this node coordinates is replicated to a backup node (which
  /// fetches the whole model file once) so that it survives this node's
  /// loss; off: no copies, the job ends with this node.
  bool backup_jobs = true;
  /// How long a job that finds no room waits for the memory of the jobs
  /// running (`admission_wait_ms`); 0: it fails at once.
  std::chrono::milliseconds admission_wait{30000};
};

struct tls_section {
  std::string certificate;
  std::string key;
  std::string passphrase_file;
  std::string ca;

  /// True when no TLS file is named (the node then bootstraps its own).
  bool unset() const {
    return certificate.empty() && key.empty() && ca.empty()
           && passphrase_file.empty();
  }
};

struct devices_section {
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  std::uint64_t cpu_memory_limit = 0; ///< bytes; 0: what the host has
  /// The cpu device reads weights in place from the mapped model file.
  bool cpu_weights_in_place = true;
  /// The cpu device holds Q4_K matrices packed for its kernels
  /// (backend::cpu_options::pack_weights).
  bool cpu_pack_weights = true;
  /// With cpu_pack_weights, Q6_K packed too
  /// (backend::cpu_options::pack_q6_k).
  bool cpu_pack_q6_k = true;
  /// The cpu device gives the attention bits of llama.cpp run with this
  /// many threads (1: one thread's, whatever the device runs).
  int cpu_llama_threads = 1;
  /// The cpu device binds its kernels' threads one CPU each (off where
  /// several nodes share a machine's cores: test clusters, scenarios).
  bool cpu_bind_threads = true;
  /// The cpu device measures its FLOP/s and weight bytes/s at discovery
  /// (placement works from them); off: it reports none, placement assumes.
  bool cpu_measure_rates = true;
  /// Vulkan devices measure theirs when opened (the driver reports none):
  /// backend::measure_device_rates.
  bool vulkan_measure_rates = true;
  /// CUDA/HIP devices multiply a prompt's products of at least this many
  /// rows through decoded weights (gpu_options::prompt_gemm_rows); 0:
  /// every product, and so every stage, with the cpu device's bits.
  std::size_t gpu_prompt_gemm_rows = 32;
  /// It measures them again after this long without work (and after each
  /// later spell of work): device_actor_config::measure_again. 0: never.
  std::chrono::seconds cpu_measure_again{60};
  /// Figures given instead of measured (0: measure): GFLOP/s, GB/s.
  double cpu_peak_gflops = 0;
  double cpu_memory_gbps = 0;
  /// Jobs that run the same layers on one device share its stage; a step
  /// waits at most this long for the other jobs of the stage's last batch
  /// to run with them (continuous batching). 0: steps never wait (jobs
  /// still share the weights, and steps that meet still batch).
  std::chrono::microseconds batch_wait{2000};
  /// Bytes of prompt prefixes each stage keeps after the jobs that read
  /// them, for later jobs that start with the same tokens (a system
  /// prompt, a chat's history): prefix_cache_mib, 0 keeps none.
  std::uint64_t prefix_cache_bytes = std::uint64_t{256} << 20;
  /// A stage (its weights and kept prompt prefixes) stays on its device
  /// this long after its last job, for the next job of those layers (a
  /// chat's next turn reads only its new message); it gives way at once
  /// when the device needs the room. keep_alive_s, 0: freed at once.
  std::chrono::milliseconds keep_alive{std::chrono::minutes(5)};
  std::vector<backend::sim_device_spec> simulated;
  std::string sim_profiles_file;      ///< extra profiles (JSON)
  double sim_time_scale = 0;
  std::chrono::seconds rescan_interval{30}; ///< 0 disables periodic rescans
  std::chrono::milliseconds telemetry_interval{1000};
};

/// Safety (issue 6): the audit sink, thermal monitors and access control.
struct safety_section {
  // audit
  std::string audit_fsync = "every_flush"; ///< every_record|every_flush|never
  std::chrono::milliseconds audit_flush_interval{1000};
  std::uint64_t audit_max_file_bytes = 64ull << 20;
  /// Signed checkpoints (core/audit/checkpoint.hpp): every N records, or
  /// every interval when the head moved; the last K kept.
  std::uint64_t audit_checkpoint_records = 1000;
  std::chrono::milliseconds audit_checkpoint_interval{60000};
  std::size_t audit_checkpoint_keep = 1000;
  // thermal (limits in C; the sampling interval is devices.telemetry_interval)
  double thermal_limit_c = 90;
  double thermal_margin_c = 5;
  double thermal_hysteresis_c = 10;
  double thermal_horizon_s = 10;
  double thermal_min_dwell_s = 5;
  // access
  std::string access_key_file; ///< default: <state_dir>/access.key
  double access_rate_per_s = 0; ///< per principal; 0: unlimited
  double access_burst = 0;
  /// Console commands from clients need a token with the command's
  /// permission (core/access/console_rule.hpp). Off: a command without a
  /// token is served on the client certificate alone; one with a token is
  /// still checked.
  bool console_requires_token = false;
};

/// One model the gateway serves.
struct gateway_model {
  std::string id;   ///< empty: the file's name without ".gguf"
  std::string path; ///< the GGUF file on this node
  /// A draft model for its greedy requests (speculative decoding); "" none.
  std::string draft;
};

/// The OpenAI-compatible HTTP gateway (`exo-node serve`, or a node with a
/// `gateway` section): on when it names at least one model.
/// How the gateway checks the bearer token of a request.
enum class gateway_auth {
  none,         ///< no check (loopback only)
  api_key,      ///< the one `api_key` (loopback only)
  access_token, ///< exo's access tokens: roles, scopes, limits, revocation
};

/// "none", "api_key", "access_token".
const char* to_string(gateway_auth a) noexcept;

struct gateway_section {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080; ///< 0 picks a free port
  /// HTTPS with the node's TLS certificate (the cluster CA's).
  bool https = false;
  /// The check; the config's default is api_key when one is given, else
  /// none.
  gateway_auth auth = gateway_auth::none;
  /// The bearer token clients must send with auth api_key.
  std::string api_key;
  std::vector<gateway_model> models;
  /// Context per request (prompt + completion), at most each model's.
  std::uint32_t ctx = 4096;
  /// Completions admitted at once (waiting or running); more get 429.
  std::uint32_t max_queued = 64;
  /// How long a streamed completion's job goes on after its client's
  /// connection dropped, so that the client may resume it (X-Exo-Resume)
  /// through any node; cancelled when no client came back. 0: at once.
  std::uint32_t resume_grace_ms = 10000;
  /// The KV cache type of every request's job ("f16", "q8_0", "f32"; ""
  /// = f16): job_request::kv_type.
  std::string kv_type;

  bool enabled() const { return !models.empty(); }
};

/// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost).
bool is_loopback_host(const std::string& host);

/// Why the gateway may not start as `g` says, or "": a non-loopback
/// address needs HTTPS (with the cluster CA's server certificate) and
/// exo's access tokens; auth api_key needs a key.
std::string gateway_exposure_problem(const gateway_section& g);

struct node_config {
  node_section node;
  gateway_section gateway;
  models_section models;
  safety_section safety;
  network_section network;
  tls_section tls;
  devices_section devices;
  std::string log_level = "info";
  std::string source = "<defaults>"; ///< where the settings came from

  /// The factory options these settings ask for.
  backend::factory_options factory_options() const;
};

/// The folders clients may name files in: models.dirs, or
/// `<state_dir>/models` when none is configured.
std::vector<std::string> client_dirs(const node_config& cfg);

/// The defaults: a single local node.
node_config defaults();

/// Parses a JSON document. Throws config_error.
node_config parse(const std::string& json, const std::string& source);

/// Reads and parses a file. Throws config_error (also for a missing file).
node_config load(const std::string& path);

/// The largest config (and simulated-profiles) file read: 16 MiB. Larger
/// files, FIFOs, devices and directories are refused with config_error.
constexpr std::uint64_t max_config_bytes = 16ull << 20;

} // namespace exo::config
