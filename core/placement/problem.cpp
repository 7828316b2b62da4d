#include "core/placement/problem.hpp"

#include <cmath>
#include <cstdio>
#include <set>

namespace exo::placement {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw problem_error(path + ": " + what);
}

std::string at(const char* base, std::size_t i) {
  return std::string(base) + "[" + std::to_string(i) + "]";
}

bool finite_non_negative(double x) {
  return std::isfinite(x) && x >= 0;
}

bool finite_positive(double x) {
  return std::isfinite(x) && x > 0;
}

/// Links between 1 KB/s and 100 TB/s with at most a minute of latency: a
/// figure outside is a typo or an attack, and its arithmetic (1e308 s,
/// 1e-300 B/s) would overflow the cost model into NaN or 0.
void check_link(const std::string& path, const link_spec& s) {
  if (!finite_non_negative(s.latency))
    fail(path + ".latency", "must be >= 0 seconds");
  if (s.latency > 60)
    fail(path + ".latency", "must be at most 60 seconds");
  if (!finite_positive(s.bandwidth))
    fail(path + ".bandwidth", "must be > 0 bytes/s");
  if (s.bandwidth < 1e3 || s.bandwidth > 1e14)
    fail(path + ".bandwidth", "must be in [1e3, 1e14] bytes/s");
}

} // namespace

const char* to_string(objective_kind k) {
  switch (k) {
    case objective_kind::latency:
      return "latency";
    case objective_kind::throughput:
      return "throughput";
    case objective_kind::blend:
      return "blend";
  }
  return "?";
}

std::optional<objective_kind> parse_objective_kind(const std::string& s) {
  if (s == "latency")
    return objective_kind::latency;
  if (s == "throughput")
    return objective_kind::throughput;
  if (s == "blend")
    return objective_kind::blend;
  return std::nullopt;
}

double problem::layer_seconds(std::size_t d, std::size_t l) const {
  const auto& dev = devices[d];
  if (!dev.layer_seconds.empty())
    return dev.layer_seconds[l];
  double t = layers[l].flops_per_token / dev.flops;
  if (dev.memory_bandwidth > 0)
    t = std::max(t, static_cast<double>(layers[l].weight_bytes)
                      / dev.memory_bandwidth);
  return t + layers[l].operations * dev.launch_seconds;
}

std::uint64_t problem::layer_memory(std::size_t l) const {
  return layers[l].weight_bytes
         + layers[l].kv_bytes_per_token * request.kv_positions()
             * request.sequences;
}

std::uint64_t problem::stage_overhead(std::size_t first,
                                      std::size_t end) const {
  const auto& x = stage_memory_extra;
  return x.every_stage + (first == 0 ? x.first_stage : 0)
         + (end == layers.size() ? x.last_stage : 0);
}

std::uint64_t problem::stage_memory(std::size_t first,
                                    std::size_t end) const {
  std::uint64_t m = stage_overhead(first, end);
  for (auto l = first; l < end; ++l)
    m += layer_memory(l);
  return m;
}

std::uint64_t problem::usable_memory(std::size_t d) const {
  auto m = static_cast<long double>(devices[d].memory_bytes);
  return static_cast<std::uint64_t>(
    std::floor(m * (1.0L - static_cast<long double>(request.safety_margin))));
}

namespace {

problem_error no_link(const std::string& a, const std::string& b) {
  return problem_error("links: no link between nodes \"" + a + "\" and \""
                       + b + "\" (add one, or a default_link)");
}

std::string pair_key(const std::string& a, const std::string& b) {
  const auto& lo = a < b ? a : b;
  const auto& hi = a < b ? b : a;
  std::string key;
  key.reserve(lo.size() + hi.size() + 1);
  key += lo;
  key += '\0';
  key += hi;
  return key;
}

} // namespace

link_spec problem::link_between(const std::string& a,
                                const std::string& b) const {
  return link_index(*this).between(a, b);
}

link_index::link_index(const problem& p) : p_(p) {
  by_pair_.reserve(p.links.size());
  for (const auto& l : p.links)
    if (l.a != l.b)
      by_pair_.emplace(pair_key(l.a, l.b), l.spec); // the first one listed
}

link_spec link_index::between(const std::string& a,
                              const std::string& b) const {
  if (a == b)
    return p_.intra_node;
  auto it = by_pair_.find(pair_key(a, b));
  if (it != by_pair_.end())
    return it->second;
  if (p_.default_link)
    return *p_.default_link;
  throw no_link(a, b);
}

std::optional<std::size_t> problem::find_device(const std::string& id) const {
  for (std::size_t i = 0; i < devices.size(); ++i)
    if (devices[i].id == id)
      return i;
  return std::nullopt;
}

void validate(const problem& p) {
  if (p.layers.empty())
    fail("model.layers", "must not be empty");
  if (p.layers.size() > 100000)
    fail("model.layers", "more than 100000 layers");
  if (p.devices.empty())
    fail("devices", "must not be empty");
  if (p.devices.size() > 250)
    fail("devices", "more than 250 devices");
  const auto n_layers = p.layers.size();
  std::set<std::string> ids;
  std::set<std::string> nodes;
  for (std::size_t i = 0; i < p.devices.size(); ++i) {
    const auto& d = p.devices[i];
    auto path = at("devices", i);
    if (d.id.empty())
      fail(path + ".id", "must not be empty");
    if (!ids.insert(d.id).second)
      fail(path + ".id", "duplicate device id \"" + d.id + "\"");
    if (d.node.empty())
      fail(path + ".node", "must not be empty");
    nodes.insert(d.node);
    if (d.memory_bytes == 0)
      fail(path + ".memory", "must be > 0");
    if (d.memory_bytes > (std::uint64_t{1} << 60))
      fail(path + ".memory", "must be < 1 EiB");
    if (!finite_non_negative(d.flops) || d.flops > 1e18)
      fail(path + ".flops", "must be in [0, 1e18]");
    if (d.layer_seconds.empty()) {
      if (!(d.flops > 0))
        fail(path + ".flops",
             "must be > 0 (or give layer_seconds for every layer)");
    } else {
      if (d.layer_seconds.size() != n_layers)
        fail(path + ".layer_seconds",
             "has " + std::to_string(d.layer_seconds.size())
               + " entries, the model has " + std::to_string(n_layers)
               + " layers");
      for (std::size_t l = 0; l < n_layers; ++l)
        if (!finite_non_negative(d.layer_seconds[l])
            || d.layer_seconds[l] > 3600)
          fail(path + ".layer_seconds[" + std::to_string(l) + "]",
               "must be in [0, 3600] seconds");
    }
    if (!finite_non_negative(d.memory_bandwidth) || d.memory_bandwidth > 1e16)
      fail(path + ".memory_bandwidth", "must be in [0, 1e16] bytes/s");
    if (!finite_non_negative(d.launch_seconds) || d.launch_seconds > 1)
      fail(path + ".launch_seconds", "must be in [0, 1] seconds");
    if (!(d.thermal_headroom >= 0 && d.thermal_headroom <= 1))
      fail(path + ".thermal_headroom", "must be in [0, 1]");
    if (!finite_non_negative(d.max_flops_per_token))
      fail(path + ".max_flops_per_token", "must be >= 0");
  }
  long double total = 0;
  for (std::size_t l = 0; l < n_layers; ++l) {
    const auto& y = p.layers[l];
    auto path = "model.layers[" + std::to_string(l) + "]";
    if (!finite_non_negative(y.flops_per_token) || y.flops_per_token > 1e18)
      fail(path + ".flops_per_token", "must be in [0, 1e18]");
    long double need = static_cast<long double>(y.weight_bytes)
                       + static_cast<long double>(y.kv_bytes_per_token)
                           * p.request.kv_positions()
                           * p.request.sequences;
    if (need > 1e18L)
      fail(path, "needs more than 1e18 bytes (weights + KV cache)");
    total += need;
    if (y.activation_bytes > (std::uint64_t{1} << 50))
      fail(path + ".activation_bytes", "must be < 1 PiB");
    if (!finite_non_negative(y.operations) || y.operations > 1e6)
      fail(path + ".operations", "must be in [0, 1e6]");
  }
  const auto& extra = p.stage_memory_extra;
  const std::pair<const char*, std::uint64_t> extras[] = {
    {"model.stage_bytes", extra.every_stage},
    {"model.first_stage_bytes", extra.first_stage},
    {"model.last_stage_bytes", extra.last_stage}};
  for (const auto& [path, bytes] : extras)
    if (bytes > (std::uint64_t{1} << 60))
      fail(path, "must be < 1 EiB");
  total += static_cast<long double>(p.devices.size() + 2)
           * static_cast<long double>(extra.every_stage + extra.first_stage
                                      + extra.last_stage);
  if (total > 1e18L)
    fail("model.layers", "need more than 1e18 bytes in total");
  for (std::size_t i = 0; i < p.devices.size(); ++i)
    if (p.devices[i].layer_seconds.empty())
      for (std::size_t l = 0; l < n_layers; ++l)
        if (p.layer_seconds(i, l) > 3600)
          fail(at("devices", i) + ".flops",
               "is too low: layer " + std::to_string(l)
                 + " would take more than an hour per token");
  check_link("intra_node_link", p.intra_node);
  if (p.default_link)
    check_link("default_link", *p.default_link);
  for (std::size_t i = 0; i < p.links.size(); ++i) {
    const auto& k = p.links[i];
    auto path = at("links", i);
    if (!nodes.count(k.a))
      fail(path + ".a", "unknown node \"" + k.a + "\"");
    if (!nodes.count(k.b))
      fail(path + ".b", "unknown node \"" + k.b + "\"");
    if (k.a == k.b)
      fail(path, "links a node to itself (use intra_node_link)");
    check_link(path, k.spec);
  }
  // Every solver shares a transfer table of (nodes x nodes) x (layers + 1)
  // entries: bound it (250 nodes of 100000 layers would ask for 100 GB).
  {
    const auto cells = static_cast<long double>(nodes.size()) * nodes.size()
                       * static_cast<long double>(n_layers + 1);
    if (cells > max_transfer_cells)
      fail("devices", std::to_string(nodes.size()) + " nodes and "
                        + std::to_string(n_layers)
                        + " layers are too many to plan together (nodes^2 x "
                          "(layers + 1) must be at most "
                        + std::to_string(max_transfer_cells) + ")");
  }
  const link_index links(p);
  for (auto i = nodes.begin(); i != nodes.end(); ++i)
    for (auto j = std::next(i); j != nodes.end(); ++j)
      links.between(*i, *j); // throws when missing
  if (!(p.request.safety_margin >= 0 && p.request.safety_margin < 1))
    fail("request.safety_margin", "must be in [0, 1)");
  if (p.request.context_length > (std::uint64_t{1} << 32))
    fail("request.context_length", "must be < 2^32 tokens");
  if (const auto B = p.request.kv_block_positions;
      B > 4096 || (B & (B - 1)) != 0)
    fail("request.kv_block_positions",
         "must be 0 or a power of two up to 4096");
  if (p.request.sequences == 0 || p.request.sequences > 65536)
    fail("request.sequences", "must be in [1, 65536]");
  // A device's layer range: a known device, first <= last < layers.
  auto check_range = [&](const std::string& key,
                         const std::vector<device_layers>& xs) {
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const auto& x = xs[i];
      auto path = key + "[" + std::to_string(i) + "]";
      if (!p.find_device(x.device))
        fail(path + ".device", "unknown device \"" + x.device + "\"");
      if (x.first_layer > x.last_layer)
        fail(path + ".first_layer", "must be <= last_layer");
      if (x.last_layer >= n_layers)
        fail(path + ".last_layer", "must be < " + std::to_string(n_layers)
                                     + " (the number of layers)");
    }
  };
  check_range("constraints.pins", p.constraints.pins);
  if (p.resident.size() > 100000)
    fail("resident", "more than 100000 ranges");
  check_range("resident", p.resident);
  if (!finite_non_negative(p.constraints.node_penalty)
      || p.constraints.node_penalty > 3600)
    fail("constraints.node_penalty", "must be in [0, 3600] seconds");
  if (!(p.objective.blend_weight >= 0 && p.objective.blend_weight <= 1))
    fail("objective.blend_weight", "must be in [0, 1]");
}

std::vector<layer>
make_layers(const std::vector<std::uint64_t>& weight_bytes,
            const std::vector<std::uint64_t>& kv_bytes_per_token,
            const std::vector<double>& flops_per_token,
            const std::vector<std::uint64_t>& activation_bytes) {
  auto n = weight_bytes.size();
  if (kv_bytes_per_token.size() != n || flops_per_token.size() != n
      || activation_bytes.size() != n)
    throw problem_error("make_layers: the four per-layer lists differ in "
                        "length");
  std::vector<layer> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = layer{weight_bytes[i], kv_bytes_per_token[i], flops_per_token[i],
                   activation_bytes[i]};
  return out;
}

std::vector<layer> uniform_layers(std::size_t count, const layer& l) {
  return std::vector<layer>(count, l);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%.0f B", v);
  else
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

std::string format_seconds(double s) {
  char buf[64];
  if (s >= 1)
    std::snprintf(buf, sizeof(buf), "%.3f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof(buf), "%.2f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.1f us", s * 1e6);
  return buf;
}

} // namespace exo::placement
