#include "core/config/node_config.hpp"

#include "backends/sim/sim_backend.hpp"

#include "core/config/strict_json.hpp"
#include "core/text/file.hpp"

#include <cstdio>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

namespace exo::config {

namespace {

using namespace json;

std::vector<std::string> as_backend_list(element e, const std::string& path) {
  auto names = as_string_list(e, path);
  for (std::size_t i = 0; i < names.size(); ++i)
    if (!backend::parse_backend_kind(names[i]))
      bad(path + "[" + std::to_string(i) + "]",
          "unknown backend \"" + names[i]
            + "\" (expected cuda, hip, rocm, vulkan, cpu or sim)");
  return names;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0')
    return "exo-node";
  return buf;
}

std::string default_state_dir() {
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x)
    return std::string{x} + "/exo";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::string{h} + "/.local/state/exo";
  return "./exo-state";
}

void check_node_name(const std::string& name, const std::string& path) {
  if (name.size() > 64)
    bad(path, "must be at most 64 characters");
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
          || c == '.'))
      bad(path, "may contain only letters, digits, '-', '_' and '.'");
}

} // namespace

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]")
    return true;
  // 127.0.0.0/8 in dotted-quad form.
  if (host.compare(0, 4, "127.") != 0)
    return false;
  int dots = 0;
  for (char c : host) {
    if (c == '.')
      ++dots;
    else if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  }
  return dots == 3;
}

const char* to_string(gateway_auth a) noexcept {
  switch (a) {
    case gateway_auth::none:
      return "none";
    case gateway_auth::api_key:
      return "api_key";
    case gateway_auth::access_token:
      return "access_token";
  }
  return "none";
}

std::string gateway_exposure_problem(const gateway_section& g) {
  if (g.auth == gateway_auth::api_key && g.api_key.empty())
    return "auth api_key needs an api_key (--api-key)";
  if (is_loopback_host(g.host))
    return {};
  std::string missing;
  if (!g.https)
    missing = "HTTPS (\"https\": true, --https)";
  if (g.auth != gateway_auth::access_token)
    missing += std::string{missing.empty() ? "" : " and "}
               + "exo's access tokens (\"auth\": \"access_token\", --auth "
                 "access_token; issue them with the console's 'token "
                 "issue')";
  if (missing.empty())
    return {};
  return "the gateway on " + g.host
         + " (not a loopback address) is reachable by others and needs "
         + missing;
}

std::vector<std::string> client_dirs(const node_config& cfg) {
  if (!cfg.models.dirs.empty())
    return cfg.models.dirs;
  return {cfg.node.state_dir + "/models"};
}

node_config defaults() {
  node_config cfg;
  cfg.node.name = host_name();
  check_node_name(cfg.node.name, "node.name");
  cfg.node.state_dir = default_state_dir();
  return cfg;
}

namespace {

/// `network.limits`: what one TLS peer may hold of the node.
void parse_limits(element e, const std::string& p,
                  tls::connection_limits_config& l) {
  auto ms = [](element v, const std::string& q) {
    return std::chrono::milliseconds{as_milliseconds(v, q, 100, 3600000)};
  };
  auto bytes = [](element v, const std::string& q, std::int64_t lo,
                  std::int64_t hi) {
    return static_cast<std::uint64_t>(as_bytes(v, q, lo, hi));
  };
  constexpr std::int64_t gib = 1ll << 30;
  walk(e, p,
       {{"max_connections",
         [&](element v, const std::string& q) {
           l.max_connections =
             static_cast<std::uint32_t>(as_integer(v, q, 1, 1 << 20));
         }},
        {"max_connections_per_peer",
         [&](element v, const std::string& q) {
           l.max_connections_per_peer =
             static_cast<std::uint32_t>(as_integer(v, q, 1, 1 << 20));
         }},
        {"max_node_message_bytes",
         [&](element v, const std::string& q) {
           l.max_node_frame_bytes = bytes(v, q, 1 << 20, 4 * gib - 1);
         }},
        {"max_client_message_bytes",
         [&](element v, const std::string& q) {
           l.max_client_frame_bytes = bytes(v, q, 4096, 4 * gib - 1);
         }},
        {"max_buffered_bytes_per_peer",
         [&](element v, const std::string& q) {
           l.max_buffered_per_peer = bytes(v, q, 1 << 20, 1024 * gib);
         }},
        {"max_buffered_bytes",
         [&](element v, const std::string& q) {
           l.max_buffered_total = bytes(v, q, 1 << 20, 1024 * gib);
         }},
        {"handshake_timeout_ms",
         [&](element v, const std::string& q) {
           l.handshake_timeout = ms(v, q);
         }},
        {"idle_timeout_ms",
         [&](element v, const std::string& q) { l.idle_timeout = ms(v, q); }},
        {"node_messages_per_s",
         [&](element v, const std::string& q) {
           l.node_messages_per_s = as_number(v, q, 0, 1e9);
         }},
        {"client_messages_per_s",
         [&](element v, const std::string& q) {
           l.client_messages_per_s = as_number(v, q, 0, 1e9);
         }},
        {"message_burst",
         [&](element v, const std::string& q) {
           l.message_burst = as_number(v, q, 1, 1e9);
         }},
        {"max_client_unread_messages",
         [&](element v, const std::string& q) {
           l.max_client_unread_messages =
             static_cast<std::uint32_t>(as_integer(v, q, 0, 1 << 30));
         }}});
  if (l.max_buffered_per_peer < l.max_node_frame_bytes)
    bad(p + ".max_buffered_bytes_per_peer",
        "must be at least max_node_message_bytes");
  if (l.max_buffered_total < l.max_buffered_per_peer)
    bad(p + ".max_buffered_bytes", "must be at least "
                                   "max_buffered_bytes_per_peer");
}

node_config parse_document(const std::string& json, const std::string& source) {
  simdjson::dom::parser parser;
  element doc;
  if (auto err = parser.parse(json).get(doc))
    throw config_error(source + ": not valid JSON: "
                       + simdjson::error_message(err));
  auto cfg = defaults();
  cfg.source = source;
  walk(doc, "",
       {{"node",
         [&](element e, const std::string& p) {
           walk(e, p,
                {{"name",
                  [&](element v, const std::string& q) {
                    cfg.node.name = as_nonempty_string(v, q);
                    check_node_name(cfg.node.name, q);
                  }},
                 {"state_dir", [&](element v, const std::string& q) {
                    cfg.node.state_dir = as_nonempty_string(v, q);
                  }}});
         }},
        {"network",
         [&](element e, const std::string& p) {
           auto& n = cfg.network;
           walk(e, p,
                {{"listen",
                  [&](element v, const std::string& q) {
                    n.listen = as_nonempty_string(v, q);
                  }},
                 {"port",
                  [&](element v, const std::string& q) {
                    n.port = static_cast<std::uint16_t>(
                      as_integer(v, q, 0, 65535));
                  }},
                 {"bulk_port",
                  [&](element v, const std::string& q) {
                    n.bulk_port = static_cast<std::uint16_t>(
                      as_integer(v, q, 0, 65535));
                  }},
                 {"seeds",
                  [&](element v, const std::string& q) {
                    auto list = as_string_list(v, q);
                    n.seeds.clear();
                    for (std::size_t i = 0; i < list.size(); ++i)
                      n.seeds.push_back(parse_peer(
                        list[i], q + "[" + std::to_string(i) + "]"));
                  }},
                 {"heartbeat_ms",
                  [&](element v, const std::string& q) {
                    n.heartbeat = std::chrono::milliseconds{
                      as_milliseconds(v, q, 10, 60000)};
                  }},
                 {"failure_timeout_ms",
                  [&](element v, const std::string& q) {
                    n.failure_timeout = std::chrono::milliseconds{
                      as_milliseconds(v, q, 50, 600000)};
                  }},
                 {"connect_timeout_ms",
                  [&](element v, const std::string& q) {
                    n.connect_timeout = std::chrono::milliseconds{
                      as_milliseconds(v, q, 50, 600000)};
                  }},
                 {"forget_departed_ms",
                  [&](element v, const std::string& q) {
                    n.forget_departed = std::chrono::milliseconds{
                      as_milliseconds(v, q, 1000, 604800000)};
                  }},
                 {"limits",
                  [&](element v, const std::string& q) {
                    parse_limits(v, q, n.limits);
                  }},
                 {"discovery", [&](element v, const std::string& q) {
                    auto& d = n.discovery;
                    walk(v, q,
                         {{"enabled",
                           [&](element x, const std::string& r) {
                             d.enabled = as_bool(x, r);
                           }},
                          {"group",
                           [&](element x, const std::string& r) {
                             d.group = as_nonempty_string(x, r);
                             unsigned a = 0, b = 0, c = 0, e = 0;
                             char tail = 0;
                             if (std::sscanf(d.group.c_str(), "%u.%u.%u.%u%c",
                                             &a, &b, &c, &e, &tail)
                                   != 4
                                 || a < 224 || a > 239 || b > 255 || c > 255
                                 || e > 255)
                               bad(r, "must be an IPv4 multicast address "
                                      "(224.0.0.0 - 239.255.255.255), got \""
                                        + d.group + "\"");
                           }},
                          {"port",
                           [&](element x, const std::string& r) {
                             d.port = static_cast<std::uint16_t>(
                               as_integer(x, r, 1, 65535));
                           }},
                          {"interval_ms", [&](element x, const std::string& r) {
                             d.interval = std::chrono::milliseconds{
                               as_milliseconds(x, r, 100, 600000)};
                           }}});
                  }}});
           if (n.failure_timeout <= n.heartbeat)
             bad(p + ".failure_timeout_ms",
                 "must be larger than heartbeat_ms");
           if (n.forget_departed <= 2 * n.failure_timeout)
             bad(p + ".forget_departed_ms",
                 "must be more than twice failure_timeout_ms (gossip of a "
                 "death must have reached every member first)");
         }},
        {"tls",
         [&](element e, const std::string& p) {
           auto& t = cfg.tls;
           walk(e, p,
                {{"certificate",
                  [&](element v, const std::string& q) {
                    t.certificate = as_nonempty_string(v, q);
                  }},
                 {"key",
                  [&](element v, const std::string& q) {
                    t.key = as_nonempty_string(v, q);
                  }},
                 {"passphrase_file",
                  [&](element v, const std::string& q) {
                    t.passphrase_file = as_nonempty_string(v, q);
                  }},
                 {"ca", [&](element v, const std::string& q) {
                    t.ca = as_nonempty_string(v, q);
                  }}});
           if (!t.unset()
               && (t.certificate.empty() || t.key.empty() || t.ca.empty()))
             bad(p, "certificate, key and ca must be given together");
         }},
        {"devices",
         [&](element e, const std::string& p) {
           auto& d = cfg.devices;
           walk(e, p,
                {{"include",
                  [&](element v, const std::string& q) {
                    d.include = as_backend_list(v, q);
                  }},
                 {"exclude",
                  [&](element v, const std::string& q) {
                    d.exclude = as_backend_list(v, q);
                  }},
                 {"cpu_memory_limit_mib",
                  [&](element v, const std::string& q) {
                    d.cpu_memory_limit
                      = static_cast<std::uint64_t>(
                          as_mebibytes(v, q, 0, std::int64_t{1} << 30))
                        << 20;
                  }},
                 {"cpu_weights_in_place",
                  [&](element v, const std::string& q) {
                    d.cpu_weights_in_place = as_bool(v, q);
                  }},
                 {"cpu_pack_weights",
                  [&](element v, const std::string& q) {
                    d.cpu_pack_weights = as_bool(v, q);
                  }},
                 {"cpu_pack_q6_k",
                  [&](element v, const std::string& q) {
                    d.cpu_pack_q6_k = as_bool(v, q);
                  }},
                 {"cpu_bind_threads",
                  [&](element v, const std::string& q) {
                    d.cpu_bind_threads = as_bool(v, q);
                  }},
                 {"cpu_measure_rates",
                  [&](element v, const std::string& q) {
                    d.cpu_measure_rates = as_bool(v, q);
                  }},
                 {"vulkan_measure_rates",
                  [&](element v, const std::string& q) {
                    d.vulkan_measure_rates = as_bool(v, q);
                  }},
                 {"cpu_measure_again_s",
                  [&](element v, const std::string& q) {
                    d.cpu_measure_again
                      = std::chrono::seconds{as_seconds(v, q, 0, 86400)};
                  }},
                 {"cpu_peak_gflops",
                  [&](element v, const std::string& q) {
                    d.cpu_peak_gflops = as_number(v, q, 0.001, 1e9);
                  }},
                 {"cpu_memory_gbps",
                  [&](element v, const std::string& q) {
                    d.cpu_memory_gbps = as_number(v, q, 0.001, 1e9);
                  }},
                 {"batch_wait_ms",
                  [&](element v, const std::string& q) {
                    d.batch_wait = std::chrono::microseconds{
                      static_cast<std::int64_t>(
                        as_number(v, q, 0, 1000) * 1000.0)};
                  }},
                 {"prefix_cache_mib",
                  [&](element v, const std::string& q) {
                    d.prefix_cache_bytes =
                      static_cast<std::uint64_t>(as_integer(v, q, 0, 1 << 20))
                      << 20;
                  }},
                 {"keep_alive_s",
                  [&](element v, const std::string& q) {
                    d.keep_alive = std::chrono::milliseconds{
                      static_cast<std::int64_t>(
                        as_number(v, q, 0, 86400) * 1000.0)};
                  }},
                 {"gpu_prompt_gemm_rows",
                  [&](element v, const std::string& q) {
                    d.gpu_prompt_gemm_rows = static_cast<std::size_t>(
                      as_integer(v, q, 0, 1 << 20));
                  }},
                 {"cpu_llama_threads",
                  [&](element v, const std::string& q) {
                    d.cpu_llama_threads =
                      static_cast<int>(as_integer(v, q, 1, 1024));
                  }},
                 {"simulated",
                  [&](element v, const std::string& q) {
                    if (v.type() != element_type::ARRAY)
                      bad(q, "must be an array of objects");
                    std::size_t i = 0;
                    simdjson::dom::array items;
                    if (v.get_array().get(items))
                      bad(q, "must be an array of objects");
                    for (auto item : items) {
                      auto ip = q + "[" + std::to_string(i++) + "]";
                      backend::sim_device_spec spec;
                      std::size_t count = 1;
                      walk(item, ip,
                           {{"profile",
                             [&](element x, const std::string& r) {
                               spec.profile = as_nonempty_string(x, r);
                             }},
                            {"id",
                             [&](element x, const std::string& r) {
                               spec.id = as_nonempty_string(x, r);
                             }},
                            {"count",
                             [&](element x, const std::string& r) {
                               count = static_cast<std::size_t>(
                                 as_integer(x, r, 1, 64));
                             }},
                            {"fault", [&](element x, const std::string& r) {
                               spec.fault = as_nonempty_string(x, r);
                               if (auto why
                                   = backend::sim_fault_error(spec.fault);
                                   !why.empty())
                                 bad(r, why);
                             }}});
                      if (spec.profile.empty())
                        bad(ip + ".profile", "required");
                      if (!spec.id.empty() && count > 1)
                        bad(ip + ".id", "cannot be combined with count > 1");
                      for (std::size_t k = 0; k < count; ++k)
                        d.simulated.push_back(spec);
                    }
                  }},
                 {"sim_profiles_file",
                  [&](element v, const std::string& q) {
                    d.sim_profiles_file = as_nonempty_string(v, q);
                  }},
                 {"sim_time_scale",
                  [&](element v, const std::string& q) {
                    d.sim_time_scale = as_number(v, q, 0, 1000);
                  }},
                 {"rescan_interval_s",
                  [&](element v, const std::string& q) {
                    d.rescan_interval
                      = std::chrono::seconds{as_seconds(v, q, 0, 86400)};
                  }},
                 {"telemetry_interval_ms",
                  [&](element v, const std::string& q) {
                    d.telemetry_interval
                      = std::chrono::milliseconds{
                        as_milliseconds(v, q, 10, 3600000)};
                  }}});
         }},
        {"safety",
         [&](element e, const std::string& p) {
           // Issue 6: audit sink, thermal monitors, access control.
           auto& sf = cfg.safety;
           walk(e, p,
                {{"audit_fsync",
                  [&](element v, const std::string& q) {
                    auto f = as_string(v, q);
                    if (f != "every_record" && f != "every_flush"
                        && f != "never")
                      bad(q, "must be one of every_record, every_flush, "
                             "never");
                    sf.audit_fsync = f;
                  }},
                 {"audit_flush_interval_ms",
                  [&](element v, const std::string& q) {
                    sf.audit_flush_interval = std::chrono::milliseconds{
                      as_milliseconds(v, q, 10, 600000)};
                  }},
                 {"audit_max_file_mib",
                  [&](element v, const std::string& q) {
                    sf.audit_max_file_bytes
                      = static_cast<std::uint64_t>(
                          as_mebibytes(v, q, 1, 65536))
                        << 20;
                  }},
                 // Signed audit checkpoints (core/audit/checkpoint.hpp).
                 {"audit_checkpoint_records",
                  [&](element v, const std::string& q) {
                    sf.audit_checkpoint_records = static_cast<std::uint64_t>(
                      as_integer(v, q, 1, 1000000000));
                  }},
                 {"audit_checkpoint_interval_ms",
                  [&](element v, const std::string& q) {
                    sf.audit_checkpoint_interval = std::chrono::milliseconds{
                      as_milliseconds(v, q, 100, 86400000)};
                  }},
                 {"audit_checkpoint_keep",
                  [&](element v, const std::string& q) {
                    sf.audit_checkpoint_keep = static_cast<std::size_t>(
                      as_integer(v, q, 1, 1000000));
                  }},
                 {"thermal_limit_c",
                  [&](element v, const std::string& q) {
                    sf.thermal_limit_c = as_number(v, q, 30, 150);
                  }},
                 {"thermal_margin_c",
                  [&](element v, const std::string& q) {
                    sf.thermal_margin_c = as_number(v, q, 0, 50);
                  }},
                 {"thermal_hysteresis_c",
                  [&](element v, const std::string& q) {
                    sf.thermal_hysteresis_c = as_number(v, q, 0.5, 60);
                  }},
                 {"thermal_horizon_s",
                  [&](element v, const std::string& q) {
                    sf.thermal_horizon_s = as_number(v, q, 0.01, 3600);
                  }},
                 {"thermal_min_dwell_s",
                  [&](element v, const std::string& q) {
                    sf.thermal_min_dwell_s = as_number(v, q, 0, 3600);
                  }},
                 {"access_key_file",
                  [&](element v, const std::string& q) {
                    sf.access_key_file = as_nonempty_string(v, q);
                  }},
                 {"access_rate_per_s",
                  [&](element v, const std::string& q) {
                    sf.access_rate_per_s = as_number(v, q, 0, 1e9);
                  }},
                 {"access_burst",
                  [&](element v, const std::string& q) {
                    sf.access_burst = as_number(v, q, 0, 1e9);
                  }},
                 {"console_requires_token",
                  [&](element v, const std::string& q) {
                    sf.console_requires_token = as_bool(v, q);
                  }}});
           if (sf.thermal_hysteresis_c <= sf.thermal_margin_c)
             bad(p + ".thermal_hysteresis_c", "must exceed thermal_margin_c");
           if (sf.access_rate_per_s > 0 && sf.access_burst < 1)
             bad(p + ".access_burst", "must be at least 1 when a rate is set");
         }},
        {"gateway",
         [&](element e, const std::string& p) {
           auto& g = cfg.gateway;
           bool auth_given = false;
           walk(e, p,
                {{"host",
                  [&](element v, const std::string& q) {
                    g.host = as_nonempty_string(v, q);
                  }},
                 {"port",
                  [&](element v, const std::string& q) {
                    g.port = static_cast<std::uint16_t>(
                      as_integer(v, q, 0, 65535));
                  }},
                 {"api_key",
                  [&](element v, const std::string& q) {
                    g.api_key = as_nonempty_string(v, q);
                  }},
                 {"https",
                  [&](element v, const std::string& q) {
                    g.https = as_bool(v, q);
                  }},
                 {"auth",
                  [&](element v, const std::string& q) {
                    auto a = as_string(v, q);
                    if (a == "none")
                      g.auth = gateway_auth::none;
                    else if (a == "api_key")
                      g.auth = gateway_auth::api_key;
                    else if (a == "access_token")
                      g.auth = gateway_auth::access_token;
                    else
                      bad(q, "must be one of none, api_key, access_token");
                    auth_given = true;
                  }},
                 {"ctx",
                  [&](element v, const std::string& q) {
                    g.ctx = static_cast<std::uint32_t>(
                      as_integer(v, q, 16, 1 << 24));
                  }},
                 {"max_queued",
                  [&](element v, const std::string& q) {
                    g.max_queued = static_cast<std::uint32_t>(
                      as_integer(v, q, 1, 65536));
                  }},
                 {"resume_grace_ms",
                  [&](element v, const std::string& q) {
                    g.resume_grace_ms = static_cast<std::uint32_t>(
                      as_integer(v, q, 0, 600000));
                  }},
                 {"kv_type",
                  [&](element v, const std::string& q) {
                    g.kv_type = as_string(v, q);
                    if (!backend::parse_kv_type(g.kv_type))
                      bad(q, "must be one of f16, q8_0, f32");
                  }},
                 {"models", [&](element v, const std::string& q) {
                    std::size_t i = 0;
                    for (auto item : as_array(v, q, "objects")) {
                      auto ip = at(q, i++);
                      gateway_model m;
                      walk(item, ip,
                           {{"id",
                             [&](element x, const std::string& r) {
                               m.id = as_nonempty_string(x, r);
                             }},
                            {"path",
                             [&](element x, const std::string& r) {
                               m.path = as_nonempty_string(x, r);
                             }},
                            {"draft", [&](element x, const std::string& r) {
                               m.draft = as_nonempty_string(x, r);
                             }}});
                      if (m.path.empty())
                        bad(ip + ".path", "required");
                      g.models.push_back(std::move(m));
                    }
                  }}});
           if (!auth_given && !g.api_key.empty())
             g.auth = gateway_auth::api_key;
           if (auto why = gateway_exposure_problem(g); !why.empty())
             bad(p + ".host", why);
         }},
        {"models",
         [&](element e, const std::string& p) {
           walk(e, p, {{"dirs", [&](element v, const std::string& q) {
                          cfg.models.dirs = as_string_list(v, q);
                          for (std::size_t i = 0; i < cfg.models.dirs.size();
                               ++i)
                            if (cfg.models.dirs[i].empty()
                                || cfg.models.dirs[i][0] != '/')
                              bad(at(q, i), "must be an absolute path");
                        }},
                       {"backup_jobs", [&](element v, const std::string& q) {
                          cfg.models.backup_jobs = as_bool(v, q);
                        }},
                       {"admission_wait_ms",
                        [&](element v, const std::string& q) {
                          cfg.models.admission_wait = std::chrono::milliseconds{
                            static_cast<std::int64_t>(
                              as_number(v, q, 0, 3600000))};
                        }}});
         }},
        {"log",
         [&](element e, const std::string& p) {
           walk(e, p, {{"level", [&](element v, const std::string& q) {
                          auto l = as_string(v, q);
                          if (l != "error" && l != "warning" && l != "info"
                              && l != "debug")
                            bad(q, "must be one of error, warning, info, "
                                   "debug");
                          cfg.log_level = l;
                        }}});
         }}});
  // Simulated profiles must exist (built-in or from the named file).
  auto profiles = backend::builtin_sim_profiles();
  if (!cfg.devices.sim_profiles_file.empty()) {
    std::string doc;
    try {
      doc = text::read_file(cfg.devices.sim_profiles_file,
                             max_config_bytes, "profiles file");
    } catch (const text::file_error& e) {
      bad("devices.sim_profiles_file", e.what());
    }
    auto extra = backend::parse_sim_profiles(doc);
    if (!extra)
      bad("devices.sim_profiles_file", extra.err().message);
    profiles.insert(profiles.end(), extra->begin(), extra->end());
  }
  for (std::size_t i = 0; i < cfg.devices.simulated.size(); ++i) {
    auto& name = cfg.devices.simulated[i].profile;
    bool known = false;
    for (auto& p : profiles)
      known = known || p.name == name;
    if (!known) {
      std::string names;
      for (auto& p : profiles)
        names += (names.empty() ? "" : ", ") + p.name;
      bad("devices.simulated[" + std::to_string(i) + "].profile",
          "unknown profile \"" + name + "\" (known: " + names + ")");
    }
  }
  return cfg;
}

} // namespace

node_config parse(const std::string& json, const std::string& source) {
  try {
    return parse_document(json, source);
  } catch (const json::json_error& e) {
    throw config_error(e.what());
  }
}

node_config load(const std::string& path) {
  std::string doc;
  try {
    doc = text::read_file(path, max_config_bytes, "config file");
  } catch (const text::file_error& e) {
    throw config_error(e.what());
  }
  return parse(doc, path);
}

backend::factory_options node_config::factory_options() const {
  backend::factory_options o;
  o.include = devices.include;
  o.exclude = devices.exclude;
  o.cpu.memory_limit = devices.cpu_memory_limit;
  o.cpu.weights_in_place = devices.cpu_weights_in_place;
  o.cpu.pack_weights = devices.cpu_pack_weights;
  o.cpu.pack_q6_k = devices.cpu_pack_q6_k;
  o.cpu.llama_threads = devices.cpu_llama_threads;
  o.cpu.bind_threads = devices.cpu_bind_threads;
  o.cpu.measure_rates = devices.cpu_measure_rates;
  o.vulkan_measure_rates = devices.vulkan_measure_rates;
  o.gpu.prompt_gemm_rows = devices.gpu_prompt_gemm_rows;
  o.cpu.peak_flops = devices.cpu_peak_gflops * 1e9;
  o.cpu.memory_bandwidth = devices.cpu_memory_gbps * 1e9;
  o.sim.devices = devices.simulated;
  o.sim.time_scale = devices.sim_time_scale;
  if (!devices.sim_profiles_file.empty()) {
    o.sim.profiles = backend::builtin_sim_profiles();
    // Checked when the config was parsed; a file gone since reads empty.
    std::string doc;
    try {
      doc = text::read_file(devices.sim_profiles_file, max_config_bytes,
                             "profiles file");
    } catch (const text::file_error&) {
    }
    if (auto extra = backend::parse_sim_profiles(doc))
      o.sim.profiles.insert(o.sim.profiles.end(), extra->begin(),
                            extra->end());
  }
  return o;
}

} // namespace exo::config
