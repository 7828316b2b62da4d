// Node config files: defaults, every key, and a table of bad files each with
// the message it must give.

#include "core/config/node_config.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

#include <sys/stat.h>

using namespace exo::config;

TEST_CASE("an empty config gives a single local node with every default") {
  auto cfg = parse("{}", "test");
  CHECK_FALSE(cfg.node.name.empty());
  CHECK_FALSE(cfg.node.state_dir.empty());
  CHECK(cfg.network.listen == "127.0.0.1");
  CHECK(cfg.network.port == 7700);
  CHECK(cfg.network.seeds.empty());
  // Discovery is on, but announces only from a non-loopback address.
  CHECK(cfg.network.discovery.enabled);
  CHECK(cfg.network.discovery.group == "239.255.77.77");
  CHECK(cfg.network.discovery.port == 7707);
  CHECK(cfg.network.discovery.interval.count() == 2000);
  CHECK(cfg.tls.unset());
  CHECK(cfg.devices.include.empty());
  CHECK(cfg.devices.simulated.empty());
  CHECK(cfg.devices.cpu_weights_in_place);
  CHECK(cfg.devices.cpu_pack_weights);
  CHECK(cfg.factory_options().cpu.pack_weights);
  CHECK(cfg.devices.cpu_pack_q6_k);
  CHECK(cfg.factory_options().cpu.pack_q6_k);
  CHECK(cfg.devices.cpu_llama_threads == 1);
  CHECK(cfg.devices.cpu_bind_threads);
  CHECK(cfg.devices.cpu_measure_rates);
  CHECK(cfg.devices.vulkan_measure_rates);
  CHECK(cfg.devices.cpu_peak_gflops == 0);
  CHECK(cfg.factory_options().cpu.measure_rates);
  CHECK(cfg.factory_options().vulkan_measure_rates);
  CHECK(cfg.factory_options().cpu.bind_threads);
  CHECK(cfg.factory_options().gpu.prompt_gemm_rows == 32);
  CHECK(cfg.models.backup_jobs);
  CHECK(cfg.models.admission_wait == std::chrono::milliseconds{30000});
  CHECK(cfg.log_level == "info");
}

TEST_CASE("every documented key is read") {
  auto cfg = parse(R"({
    "node": {"name": "gpu-box-1", "state_dir": "/var/lib/exo"},
    "network": {"listen": "0.0.0.0", "port": 0, "bulk_port": 7710,
                "seeds": ["10.0.0.2:7700", "[::1]:7701"],
                "heartbeat_ms": 100, "failure_timeout_ms": 900,
                "connect_timeout_ms": 1500,
                "discovery": {"enabled": false, "group": "239.1.2.3",
                              "port": 9999, "interval_ms": "5s"}},
    "tls": {"certificate": "n.crt", "key": "n.key", "ca": "ca.crt",
            "passphrase_file": "pw"},
    "devices": {"include": ["vulkan", "cpu", "sim"], "exclude": ["cuda"],
                "cpu_memory_limit_mib": 2048, "cpu_weights_in_place": false,
                "cpu_pack_weights": false, "cpu_pack_q6_k": false,
                "cpu_llama_threads": 4, "cpu_bind_threads": false,
                "cpu_measure_rates": false, "vulkan_measure_rates": false,
                "cpu_peak_gflops": 150,
                "cpu_memory_gbps": 12.5, "batch_wait_ms": 0.5,
                "gpu_prompt_gemm_rows": 0,
                "keep_alive_s": 1.5,
                "simulated": [{"profile": "a100-40g", "id": "sim:big"},
                              {"profile": "adreno-740", "count": 2}],
                "sim_time_scale": 0.5, "rescan_interval_s": 0,
                "telemetry_interval_ms": 250},
    "log": {"level": "debug"}
  })",
                   "test");
  CHECK(cfg.node.name == "gpu-box-1");
  CHECK(cfg.node.state_dir == "/var/lib/exo");
  CHECK(cfg.network.listen == "0.0.0.0");
  CHECK(cfg.network.port == 0);
  CHECK(cfg.network.bulk_port == 7710);
  REQUIRE(cfg.network.seeds.size() == 2);
  CHECK(cfg.network.seeds[0].host == "10.0.0.2");
  CHECK(cfg.network.seeds[0].port == 7700);
  CHECK(cfg.network.seeds[1].host == "::1");
  CHECK(cfg.network.heartbeat.count() == 100);
  CHECK(cfg.network.failure_timeout.count() == 900);
  CHECK_FALSE(cfg.network.discovery.enabled);
  CHECK(cfg.network.discovery.group == "239.1.2.3");
  CHECK(cfg.network.discovery.port == 9999);
  CHECK(cfg.network.discovery.interval.count() == 5000);
  CHECK(cfg.tls.certificate == "n.crt");
  CHECK(cfg.tls.passphrase_file == "pw");
  CHECK(cfg.devices.include.size() == 3);
  CHECK(cfg.devices.exclude == std::vector<std::string>{"cuda"});
  CHECK(cfg.devices.cpu_memory_limit == 2048ull << 20);
  CHECK(cfg.devices.cpu_llama_threads == 4);
  CHECK_FALSE(cfg.devices.cpu_bind_threads);
  CHECK_FALSE(cfg.factory_options().cpu.bind_threads);
  CHECK_FALSE(cfg.factory_options().cpu.pack_weights);
  CHECK_FALSE(cfg.devices.cpu_pack_q6_k);
  CHECK_FALSE(cfg.factory_options().cpu.pack_q6_k);
  CHECK_FALSE(cfg.factory_options().cpu.measure_rates);
  CHECK_FALSE(cfg.factory_options().vulkan_measure_rates);
  CHECK(cfg.factory_options().cpu.peak_flops == Approx(150e9));
  CHECK(cfg.factory_options().cpu.memory_bandwidth == Approx(12.5e9));
  CHECK(cfg.factory_options().gpu.prompt_gemm_rows == 0);
  REQUIRE(cfg.devices.simulated.size() == 3);
  CHECK(cfg.devices.simulated[0].id == "sim:big");
  CHECK(cfg.devices.simulated[2].profile == "adreno-740");
  CHECK(cfg.devices.sim_time_scale == 0.5);
  CHECK(cfg.devices.batch_wait.count() == 500);
  CHECK(defaults().devices.batch_wait.count() == 2000);
  CHECK(cfg.devices.keep_alive.count() == 1500);
  CHECK(defaults().devices.keep_alive.count() == 300000);
  CHECK(cfg.devices.rescan_interval.count() == 0);
  CHECK(cfg.log_level == "debug");
  CHECK(defaults().gateway.resume_grace_ms == 10000);
  CHECK(parse(R"({"gateway": {"resume_grace_ms": 0}})", "test")
          .gateway.resume_grace_ms
        == 0);
  auto f = cfg.factory_options();
  CHECK(f.cpu.memory_limit == 2048ull << 20);
  CHECK_FALSE(f.cpu.weights_in_place);
  CHECK(f.sim.devices.size() == 3);
}

TEST_CASE("bad config files are refused with a message naming the key") {
  struct row {
    const char* json;
    const char* message;
  };
  std::vector<row> table{
    {"{", "test: not valid JSON"},
    {"[]", "<document>: must be an object"},
    {R"({"nodes": {}})", "nodes: unknown key"},
    {R"({"node": 3})", "node: must be an object"},
    {R"({"node": {"name": 3}})", "node.name: must be a string"},
    {R"({"node": {"name": ""}})", "node.name: must not be empty"},
    {R"({"node": {"name": "a b"}})", "node.name: may contain only"},
    {R"({"node": {"colour": "red"}})", "node.colour: unknown key"},
    {R"({"network": {"port": 99999}})",
     "network.port: must be an integer in [0, 65535], got 99999"},
    {R"({"network": {"port": -1}})", "network.port: must be an integer"},
    {R"({"network": {"bulk_port": 70000}})",
     "network.bulk_port: must be an integer in [0, 65535], got 70000"},
    {R"({"network": {"port": "7700"}})", "network.port: must be an integer"},
    {R"({"network": {"port": 1.5}})", "network.port: must be an integer"},
    {R"({"network": {"seeds": "a:1"}})",
     "network.seeds: must be an array of strings"},
    {R"({"network": {"seeds": ["nohost"]}})",
     "network.seeds[0]: must be \"host:port\""},
    {R"({"network": {"seeds": ["h:1", "h:0"]}})",
     "network.seeds[1]: port must be an integer in [1, 65535]"},
    // strtol took a sign and a leading space: the strict parser does not.
    {R"({"network": {"seeds": ["h:+80"]}})",
     "network.seeds[0]: port must be an integer in [1, 65535], got \"+80\""},
    {R"({"network": {"seeds": ["h: 80"]}})",
     "network.seeds[0]: port must be an integer in [1, 65535], got \" 80\""},
    {R"({"network": {"seeds": ["h:65536"]}})",
     "network.seeds[0]: port must be an integer in [1, 65535]"},
    {R"({"network": {"discovery": {"group": "10.0.0.1"}}})",
     "network.discovery.group: must be an IPv4 multicast address"},
    {R"({"network": {"discovery": {"port": 0}}})",
     "network.discovery.port: must be an integer in [1, 65535]"},
    {R"({"network": {"discovery": {"interval_ms": 5}}})",
     "network.discovery.interval_ms: must be an integer in [100, 600000]"},
    {R"({"network": {"discovery": {"beacon": true}}})",
     "network.discovery.beacon: unknown key"},
    {R"({"network": {"heartbeat_ms": 5}})",
     "network.heartbeat_ms: must be an integer in [10, 60000]"},
    {R"({"network": {"heartbeat_ms": 500, "failure_timeout_ms": 400}})",
     "network.failure_timeout_ms: must be larger than heartbeat_ms"},
    {R"({"network": {"forget_departed_ms": 500}})",
     "network.forget_departed_ms: must be an integer in [1000, 604800000]"},
    {R"({"network": {"failure_timeout_ms": 1500, "forget_departed_ms": 3000}})",
     "network.forget_departed_ms: must be more than twice "
     "failure_timeout_ms"},
    // Duration and size keys also take a string with a unit (the strict
    // parser's rules and the key's range, in the key's unit).
    {R"({"network": {"heartbeat_ms": "5ms"}})",
     "network.heartbeat_ms: must be in [10ms, 1m], got \"5ms\""},
    {R"({"network": {"heartbeat_ms": "1e3"}})",
     "network.heartbeat_ms: must be an integer in [10, 60000] (milliseconds) "
     "or a string with a unit in [10ms, 1m]: '1e3' has an exponent"},
    {R"({"network": {"heartbeat_ms": "0.5ms"}})",
     "network.heartbeat_ms: must be an integer in [10, 60000] (milliseconds) "
     "or a string with a unit in [10ms, 1m]: '0.5ms' is not a whole number of "
     "ms"},
    {R"({"network": {"heartbeat_ms": "-1s"}})",
     "network.heartbeat_ms: must be an integer in [10, 60000] (milliseconds) "
     "or a string with a unit in [10ms, 1m]: '-1s' must not be negative"},
    {R"({"devices": {"cpu_memory_limit_mib": "4G"}})",
     "devices.cpu_memory_limit_mib: must be an integer in [0, 1073741824] "
     "(MiB) or a string with a unit in [0B, 1024TiB]: '4G' has an ambiguous unit "
     "'G': use 4GiB (2^30) or 4GB (10^9)"},
    {R"({"devices": {"cpu_memory_limit_mib": "1000kB"}})",
     "devices.cpu_memory_limit_mib: must be an integer in [0, 1073741824] "
     "(MiB) or a string with a unit in [0B, 1024TiB]: '1000kB' is not a whole "
     "number of MiB"},
    {R"({"devices": {"rescan_interval_s": "2d"}})",
     "devices.rescan_interval_s: must be in [0s, 1d], got \"2d\""},
    {R"({"tls": {"certificate": "a.crt"}})",
     "tls: certificate, key and ca must be given together"},
    {R"({"devices": {"include": ["metal"]}})",
     "devices.include[0]: unknown backend \"metal\""},
    {R"({"devices": {"cpu_weights_in_place": "yes"}})",
     "devices.cpu_weights_in_place: must be"},
    {R"({"devices": {"cpu_pack_weights": 1}})",
     "devices.cpu_pack_weights: must be"},
    {R"({"devices": {"cpu_pack_q6_k": "yes"}})",
     "devices.cpu_pack_q6_k: must be"},
    {R"({"devices": {"cpu_bind_threads": 1}})",
     "devices.cpu_bind_threads: must be"},
    {R"({"models": {"backup_jobs": 1}})", "models.backup_jobs: must be"},
    {R"({"models": {"admission_wait_ms": -1}})",
     "models.admission_wait_ms: must be a number in"},
    {R"({"models": {"admission_wait_ms": 1e9}})",
     "models.admission_wait_ms: must be a number in"},
    {R"({"devices": {"simulated": [{"profile": "a100-40g",
                                    "fault": "vanish_after:0"}]}})",
     "devices.simulated[0].fault: unknown fault \"vanish_after:0\""},
    {R"({"devices": {"cpu_measure_rates": "yes"}})",
     "devices.cpu_measure_rates: must be"},
    {R"({"devices": {"cpu_peak_gflops": 0}})",
     "devices.cpu_peak_gflops: must be"},
    {R"({"devices": {"cpu_memory_gbps": -3}})",
     "devices.cpu_memory_gbps: must be"},
    {R"({"devices": {"batch_wait_ms": 5000}})",
     "devices.batch_wait_ms: must be"},
    {R"({"devices": {"batch_wait_ms": -1}})",
     "devices.batch_wait_ms: must be"},
    {R"({"devices": {"keep_alive_s": -1}})",
     "devices.keep_alive_s: must be"},
    {R"({"devices": {"keep_alive_s": 1e9}})",
     "devices.keep_alive_s: must be"},
    {R"({"devices": {"gpu_prompt_gemm_rows": -1}})",
     "devices.gpu_prompt_gemm_rows: must be an integer in [0, 1048576]"},
    {R"({"devices": {"gpu_prompt_gemm_rows": 2.5}})",
     "devices.gpu_prompt_gemm_rows: must be an integer"},
    {R"({"devices": {"cpu_llama_threads": 0}})",
     "devices.cpu_llama_threads: must be an integer in [1, 1024]"},
    {R"({"devices": {"exclude": [1]}})",
     "devices.exclude[0]: must be a string"},
    {R"({"devices": {"simulated": [{"profile": "h9000"}]}})",
     "devices.simulated[0].profile: unknown profile \"h9000\""},
    {R"({"devices": {"simulated": [{"count": 2}]}})",
     "devices.simulated[0].profile: required"},
    {R"({"devices": {"simulated": [{"profile": "m2-max", "count": 0}]}})",
     "devices.simulated[0].count: must be an integer in [1, 64]"},
    {R"({"devices": {"simulated": [{"profile": "m2-max", "speed": 2}]}})",
     "devices.simulated[0].speed: unknown key"},
    {R"({"devices": {"simulated": [{"profile": "m2-max", "fault": "melt"}]}})",
     "devices.simulated[0].fault: unknown fault \"melt\""},
    {R"({"devices": {"sim_time_scale": -1}})",
     "devices.sim_time_scale: must be a number in"},
    {R"({"devices": {"sim_profiles_file": "/nonexistent/p.json"}})",
     "devices.sim_profiles_file: profiles file /nonexistent/p.json: cannot open"},
    {R"({"log": {"level": "loud"}})",
     "log.level: must be one of error, warning, info, debug"},
    {R"({"gateway": {"resume_grace_ms": -1}})",
     "gateway.resume_grace_ms: must be an integer in [0, 600000]"},
    {R"({"gateway": {"resume_grace_ms": "soon"}})",
     "gateway.resume_grace_ms: must be"},
  };
  for (auto& r : table) {
    INFO(r.json);
    try {
      parse(r.json, "test");
      FAIL("accepted");
    } catch (const config_error& e) {
      CHECK_THAT(e.what(), Catch::Contains(r.message));
    }
  }
}

TEST_CASE("duration and size keys take a number or a string with a unit") {
  auto cfg = parse(R"({"network": {"heartbeat_ms": "250ms",
                                    "failure_timeout_ms": "2s",
                                    "connect_timeout_ms": 1500,
                                    "forget_departed_ms": "1h"},
                       "devices": {"cpu_memory_limit_mib": "4GiB",
                                   "rescan_interval_s": "1h",
                                   "telemetry_interval_ms": "1.5s"},
                       "safety": {"audit_max_file_mib": 64}})",
                   "test");
  CHECK(cfg.network.heartbeat == std::chrono::milliseconds{250});
  CHECK(cfg.network.failure_timeout == std::chrono::milliseconds{2000});
  CHECK(cfg.network.connect_timeout == std::chrono::milliseconds{1500});
  CHECK(cfg.network.forget_departed == std::chrono::hours{1});
  CHECK(cfg.devices.cpu_memory_limit == (std::uint64_t{4} << 30));
  CHECK(cfg.devices.rescan_interval == std::chrono::seconds{3600});
  CHECK(cfg.devices.telemetry_interval == std::chrono::milliseconds{1500});
  CHECK(cfg.safety.audit_max_file_bytes == (std::uint64_t{64} << 20));
}

TEST_CASE("console commands need a token only when the node says so") {
  CHECK_FALSE(parse("{}", "test").safety.console_requires_token);
  CHECK(parse(R"({"safety": {"console_requires_token": true}})", "test")
          .safety.console_requires_token);
  try {
    parse(R"({"safety": {"console_requires_token": "yes"}})", "test");
    FAIL("accepted");
  } catch (const config_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("safety.console_requires_token: "
                                         "must be true or false"));
  }
}

TEST_CASE("a missing config file is an error that names it") {
  try {
    load("/nonexistent/exo.json");
    FAIL("accepted");
  } catch (const config_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("/nonexistent/exo.json"));
  }
}

TEST_CASE("a profile file extends the simulated profiles") {
  auto path = std::string{"/tmp/exo-config-test-profiles.json"};
  {
    std::ofstream out{path};
    out << R"({"profiles": [{"name": "tiny", "memory_gib": 1, "tflops": 1,
      "bandwidth_gbs": 10, "peak_power_w": 5, "thermal_resistance_c_per_w": 2,
      "thermal_capacitance_j_per_c": 3}]})";
  }
  auto cfg = parse(R"({"devices": {"sim_profiles_file": ")" + path
                     + R"(", "simulated": [{"profile": "tiny"}]}})",
                   "test");
  auto f = cfg.factory_options();
  CHECK(std::any_of(f.sim.profiles.begin(), f.sim.profiles.end(),
                    [](auto& p) { return p.name == "tiny"; }));
  std::remove(path.c_str());
}

TEST_CASE("config and profile files that are not regular files or are too "
          "large are refused, never read without bound or waited on") {
  auto message = [](const std::string& path) {
    try {
      load(path);
    } catch (const config_error& e) {
      return std::string{e.what()};
    }
    return std::string{"(accepted)"};
  };
  CHECK(message("/dev/zero")
        == "config file /dev/zero: is a character device, not a regular "
           "file");
  auto fifo = std::string{"/tmp/exo-config-test.fifo"};
  std::remove(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THAT(message(fifo), Catch::Contains("is a FIFO"));
  std::remove(fifo.c_str());
  auto big = std::string{"/tmp/exo-config-test-big.json"};
  {
    std::ofstream out{big};
    out << std::string(max_config_bytes + 1, ' ');
  }
  CHECK(message(big) == "config file " + big + ": larger than 16 MiB");
  std::remove(big.c_str());
  try {
    parse(R"({"devices": {"sim_profiles_file": "/dev/zero"}})", "test");
    FAIL("accepted");
  } catch (const config_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("devices.sim_profiles_file"));
    CHECK_THAT(e.what(), Catch::Contains("not a regular file"));
  }
}

TEST_CASE("network.limits and models.dirs: safe defaults, every key read, "
          "bad values named") {
  auto d = parse("{}", "test");
  CHECK(d.network.limits.max_connections == 512);
  CHECK(d.network.limits.max_client_frame_bytes == 1u << 20);
  CHECK(d.network.limits.max_node_frame_bytes == 64u << 20);
  CHECK(d.models.dirs.empty());
  CHECK(exo::config::client_dirs(d)
        == std::vector<std::string>{d.node.state_dir + "/models"});
  auto c = parse(R"({"network": {"limits": {
      "max_connections": 64, "max_connections_per_peer": 4,
      "max_node_message_bytes": 8388608, "max_client_message_bytes": 65536,
      "max_buffered_bytes_per_peer": 16777216, "max_buffered_bytes": 33554432,
      "handshake_timeout_ms": 2000, "idle_timeout_ms": 5000,
      "node_messages_per_s": 100, "client_messages_per_s": 10,
      "message_burst": 20, "max_client_unread_messages": 8}},
    "models": {"dirs": ["/srv/models", "/opt/llm"], "backup_jobs": false,
               "admission_wait_ms": 0}})",
                 "test");
  CHECK_FALSE(c.models.backup_jobs);
  CHECK(c.models.admission_wait.count() == 0);
  auto& l = c.network.limits;
  CHECK(l.max_connections == 64);
  CHECK(l.max_connections_per_peer == 4);
  CHECK(l.max_node_frame_bytes == 8u << 20);
  CHECK(l.max_client_frame_bytes == 65536);
  CHECK(l.max_buffered_per_peer == 16u << 20);
  CHECK(l.max_buffered_total == 32u << 20);
  CHECK(l.handshake_timeout == std::chrono::milliseconds{2000});
  CHECK(l.idle_timeout == std::chrono::milliseconds{5000});
  CHECK(l.node_messages_per_s == 100);
  CHECK(l.client_messages_per_s == 10);
  CHECK(l.message_burst == 20);
  CHECK(l.max_client_unread_messages == 8);
  CHECK(d.network.limits.max_client_unread_messages == 64);
  CHECK(exo::config::client_dirs(c)
        == std::vector<std::string>{"/srv/models", "/opt/llm"});
  // Sizes and durations may carry units.
  auto u = parse(R"({"network": {"limits": {
      "max_node_message_bytes": "8MiB", "max_buffered_bytes_per_peer": "1GiB",
      "idle_timeout_ms": "5s", "handshake_timeout_ms": "1500ms"}}})",
                 "test");
  CHECK(u.network.limits.max_node_frame_bytes == 8u << 20);
  CHECK(u.network.limits.max_buffered_per_peer == 1u << 30);
  CHECK(u.network.limits.idle_timeout == std::chrono::seconds{5});
  CHECK(u.network.limits.handshake_timeout == std::chrono::milliseconds{1500});
  struct row {
    const char* json;
    const char* message;
  };
  for (auto& r : std::vector<row>{
         {R"({"network": {"limits": {"max_connections": 0}}})",
          "network.limits.max_connections: must be an integer in [1,"},
         {R"({"network": {"limits": {"max_node_message_bytes": 4294967296}}})",
          "network.limits.max_node_message_bytes: must be an integer in"},
         {R"({"network": {"limits": {"idle_timeout_ms": 10}}})",
          "network.limits.idle_timeout_ms: must be an integer in [100,"},
         {R"({"network": {"limits": {"max_buffered_bytes_per_peer": 2097152}}})",
          "network.limits.max_buffered_bytes_per_peer: must be at least "
          "max_node_message_bytes"},
         {R"({"network": {"limits": {"max_buffered_bytes": 134217728}}})",
          "network.limits.max_buffered_bytes: must be at least "
          "max_buffered_bytes_per_peer"},
         {R"({"network": {"limits": {"client_messages_per_s": -1}}})",
          "network.limits.client_messages_per_s: must be a number in"},
         {R"({"network": {"limits": {"frames": 3}}})",
          "network.limits.frames: unknown key"},
         {R"({"models": {"dirs": ["models"]}})",
          "models.dirs[0]: must be an absolute path"},
         {R"({"models": {"dirs": "/srv"}})",
          "models.dirs: must be an array of strings"},
       }) {
    INFO(r.json);
    try {
      parse(r.json, "test");
      FAIL("accepted");
    } catch (const config_error& e) {
      CHECK_THAT(e.what(), Catch::Contains(r.message));
    }
  }
}
