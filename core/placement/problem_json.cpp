#include "core/placement/problem_json.hpp"
#include "core/text/file.hpp"

#include <simdjson.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <sstream>

namespace exo::placement {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw problem_error(path + ": " + what);
}

std::string join(const std::string& base, std::string_view key) {
  return base.empty() ? std::string(key) : base + "." + std::string(key);
}

std::string idx(const std::string& base, std::size_t i) {
  return base + "[" + std::to_string(i) + "]";
}

object as_object(element e, const std::string& path) {
  if (e.type() != element_type::OBJECT)
    fail(path, "expected an object");
  return e.get_object().value_unsafe();
}

simdjson::dom::array as_array(element e, const std::string& path) {
  if (e.type() != element_type::ARRAY)
    fail(path, "expected an array");
  return e.get_array().value_unsafe();
}

/// Rejects keys of `o` that are not in `known`.
void only_keys(object o, const std::string& path,
               std::initializer_list<std::string_view> known) {
  for (auto field : o) {
    bool ok = false;
    for (auto k : known)
      ok = ok || field.key == k;
    if (!ok)
      fail(join(path, field.key), "unknown key");
  }
}

bool has(object o, std::string_view key, element& out) {
  return o.at_key(key).get(out) == simdjson::SUCCESS;
}

element need(object o, std::string_view key, const std::string& path) {
  element e;
  if (!has(o, key, e))
    fail(join(path, key), "missing");
  return e;
}

double as_number(element e, const std::string& path) {
  switch (e.type()) {
    case element_type::INT64:
      return static_cast<double>(e.get_int64().value_unsafe());
    case element_type::UINT64:
      return static_cast<double>(e.get_uint64().value_unsafe());
    case element_type::DOUBLE:
      return e.get_double().value_unsafe();
    default:
      fail(path, "expected a number");
  }
}

std::uint64_t as_count(element e, const std::string& path) {
  switch (e.type()) {
    case element_type::INT64: {
      auto v = e.get_int64().value_unsafe();
      if (v < 0)
        fail(path, "must be >= 0");
      return static_cast<std::uint64_t>(v);
    }
    case element_type::UINT64:
      return e.get_uint64().value_unsafe();
    default:
      fail(path, "expected a non-negative integer");
  }
}

bool as_bool(element e, const std::string& path) {
  if (e.type() != element_type::BOOL)
    fail(path, "expected true or false");
  return e.get_bool().value_unsafe();
}

std::string as_string(element e, const std::string& path) {
  if (e.type() != element_type::STRING)
    fail(path, "expected a string");
  return std::string(e.get_string().value_unsafe());
}

std::uint64_t as_bytes(element e, const std::string& path) {
  if (e.type() == element_type::STRING)
    return parse_byte_string(e.get_string().value_unsafe(), path);
  if (e.type() == element_type::DOUBLE) {
    double v = e.get_double().value_unsafe();
    if (!(v >= 0) || v > 1.8e19 || std::floor(v) != v)
      fail(path, "expected a whole number of bytes >= 0");
    return static_cast<std::uint64_t>(v);
  }
  if (e.type() == element_type::INT64 || e.type() == element_type::UINT64)
    return as_count(e, path);
  fail(path, "expected a byte count (a number or a string like \"24GiB\")");
}

link_spec read_link_spec(element e, const std::string& path) {
  auto o = as_object(e, path);
  link_spec s;
  s.latency = as_number(need(o, "latency", path), join(path, "latency"));
  s.bandwidth = as_number(need(o, "bandwidth", path),
                          join(path, "bandwidth"));
  return s;
}

/// An array of {device, first_layer, last_layer?} (pins, resident).
std::vector<device_layers> read_device_layers(element e,
                                              const std::string& path) {
  std::vector<device_layers> out;
  std::size_t i = 0;
  for (auto x : as_array(e, path)) {
    auto at = idx(path, i++);
    auto o = as_object(x, at);
    only_keys(o, at, {"device", "first_layer", "last_layer"});
    device_layers r;
    r.device = as_string(need(o, "device", at), join(at, "device"));
    r.first_layer = as_count(need(o, "first_layer", at),
                             join(at, "first_layer"));
    element y;
    r.last_layer = has(o, "last_layer", y)
                     ? as_count(y, join(at, "last_layer"))
                     : r.first_layer;
    out.push_back(r);
  }
  return out;
}

device read_device(element e, const std::string& path) {
  auto o = as_object(e, path);
  only_keys(o, path,
            {"id", "node", "memory", "flops", "memory_bandwidth",
             "launch_seconds", "layer_seconds", "thermal_headroom", "max_flops_per_token",
             "pinned", "excluded", "drained"});
  device d;
  d.id = as_string(need(o, "id", path), join(path, "id"));
  d.node = as_string(need(o, "node", path), join(path, "node"));
  d.memory_bytes = as_bytes(need(o, "memory", path), join(path, "memory"));
  element v;
  if (has(o, "flops", v))
    d.flops = as_number(v, join(path, "flops"));
  if (has(o, "memory_bandwidth", v))
    d.memory_bandwidth = as_number(v, join(path, "memory_bandwidth"));
  if (has(o, "launch_seconds", v))
    d.launch_seconds = as_number(v, join(path, "launch_seconds"));
  if (has(o, "layer_seconds", v)) {
    auto p = join(path, "layer_seconds");
    std::size_t i = 0;
    for (auto x : as_array(v, p))
      d.layer_seconds.push_back(as_number(x, idx(p, i++)));
    if (d.layer_seconds.empty())
      fail(p, "must not be empty");
  }
  if (has(o, "thermal_headroom", v))
    d.thermal_headroom = as_number(v, join(path, "thermal_headroom"));
  if (has(o, "max_flops_per_token", v))
    d.max_flops_per_token = as_number(v, join(path, "max_flops_per_token"));
  if (has(o, "pinned", v))
    d.pinned = as_bool(v, join(path, "pinned"));
  if (has(o, "excluded", v))
    d.excluded = as_bool(v, join(path, "excluded"));
  if (has(o, "drained", v))
    d.drained = as_bool(v, join(path, "drained"));
  return d;
}

void read_model(element e, problem& p) {
  const std::string path = "model";
  auto o = as_object(e, path);
  only_keys(o, path,
            {"name", "layers", "stage_bytes", "first_stage_bytes",
             "last_stage_bytes"});
  element v;
  if (has(o, "name", v))
    p.model_name = as_string(v, "model.name");
  if (has(o, "stage_bytes", v))
    p.stage_memory_extra.every_stage = as_bytes(v, "model.stage_bytes");
  if (has(o, "first_stage_bytes", v))
    p.stage_memory_extra.first_stage = as_bytes(v, "model.first_stage_bytes");
  if (has(o, "last_stage_bytes", v))
    p.stage_memory_extra.last_stage = as_bytes(v, "model.last_stage_bytes");
  const std::string lp = "model.layers";
  std::size_t i = 0;
  for (auto x : as_array(need(o, "layers", path), lp)) {
    auto path_i = idx(lp, i++);
    auto lo = as_object(x, path_i);
    only_keys(lo, path_i,
              {"count", "weight_bytes", "kv_bytes_per_token",
               "flops_per_token", "activation_bytes", "operations"});
    layer y;
    std::uint64_t count = 1;
    if (has(lo, "count", v)) {
      count = as_count(v, join(path_i, "count"));
      if (count == 0)
        fail(join(path_i, "count"), "must be >= 1");
    }
    if (p.layers.size() + count > 100000)
      fail(join(path_i, "count"), "more than 100000 layers in total");
    y.weight_bytes = as_bytes(need(lo, "weight_bytes", path_i),
                              join(path_i, "weight_bytes"));
    if (has(lo, "kv_bytes_per_token", v))
      y.kv_bytes_per_token = as_bytes(v, join(path_i, "kv_bytes_per_token"));
    y.flops_per_token = as_number(need(lo, "flops_per_token", path_i),
                                  join(path_i, "flops_per_token"));
    if (has(lo, "activation_bytes", v))
      y.activation_bytes = as_bytes(v, join(path_i, "activation_bytes"));
    if (has(lo, "operations", v))
      y.operations = as_number(v, join(path_i, "operations"));
    p.layers.insert(p.layers.end(), count, y);
  }
  if (p.layers.empty())
    fail(lp, "must not be empty");
}

} // namespace

std::uint64_t parse_byte_string(std::string_view s, const std::string& path) {
  auto bad = [&]() {
    fail(path, "\"" + std::string(s)
                 + "\" is not a byte count (e.g. 24GiB, 1.5 GB, 4096)");
  };
  std::size_t i = 0;
  while (i < s.size()
         && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.'))
    ++i;
  if (i == 0)
    bad();
  double v = 0;
  try {
    std::size_t used = 0;
    v = std::stod(std::string(s.substr(0, i)), &used);
    if (used != i)
      bad();
  } catch (const std::exception&) {
    bad();
  }
  while (i < s.size() && s[i] == ' ')
    ++i;
  auto unit = s.substr(i);
  double mult = 0;
  struct u {
    std::string_view name;
    double mult;
  };
  static const u units[] = {{"", 1},          {"B", 1},
                            {"KB", 1e3},      {"MB", 1e6},
                            {"GB", 1e9},      {"TB", 1e12},
                            {"KiB", 1024.0},  {"MiB", 1048576.0},
                            {"GiB", 1073741824.0},
                            {"TiB", 1099511627776.0}};
  for (const auto& x : units)
    if (unit == x.name)
      mult = x.mult;
  if (mult == 0)
    bad();
  double bytes = v * mult;
  // llround is defined only within long long: past 2^63 it wrapped (1e19
  // bytes became 2^63; refused later only by the 1 EiB bound).
  if (!std::isfinite(bytes) || bytes >= 9.2e18)
    bad();
  return static_cast<std::uint64_t>(std::llround(bytes));
}

problem parse_problem_json(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  element root;
  auto err = parser.parse(padded).get(root);
  if (err)
    throw problem_error(std::string("problem file: not valid JSON: ")
                        + simdjson::error_message(err));
  auto o = as_object(root, "(top level)");
  only_keys(o, "",
            {"name", "devices", "links", "intra_node_link", "default_link",
             "model", "request", "constraints", "objective", "resident"});
  problem p;
  element v;
  if (has(o, "name", v))
    p.model_name = as_string(v, "name");
  {
    std::size_t i = 0;
    for (auto d : as_array(need(o, "devices", ""), "devices")) {
      p.devices.push_back(read_device(d, idx("devices", i)));
      ++i;
    }
  }
  if (has(o, "links", v)) {
    std::size_t i = 0;
    for (auto x : as_array(v, "links")) {
      auto path = idx("links", i++);
      auto lo = as_object(x, path);
      only_keys(lo, path, {"a", "b", "latency", "bandwidth"});
      link k;
      k.a = as_string(need(lo, "a", path), join(path, "a"));
      k.b = as_string(need(lo, "b", path), join(path, "b"));
      k.spec = read_link_spec(x, path);
      p.links.push_back(k);
    }
  }
  if (has(o, "intra_node_link", v)) {
    only_keys(as_object(v, "intra_node_link"), "intra_node_link",
              {"latency", "bandwidth"});
    p.intra_node = read_link_spec(v, "intra_node_link");
  }
  if (has(o, "default_link", v)) {
    only_keys(as_object(v, "default_link"), "default_link",
              {"latency", "bandwidth"});
    p.default_link = read_link_spec(v, "default_link");
  }
  read_model(need(o, "model", ""), p);
  if (has(o, "request", v)) {
    auto ro = as_object(v, "request");
    only_keys(ro, "request", {"context_length", "sequences", "safety_margin",
                              "kv_block_positions"});
    element x;
    if (has(ro, "context_length", x))
      p.request.context_length = as_count(x, "request.context_length");
    if (has(ro, "sequences", x))
      p.request.sequences = as_count(x, "request.sequences");
    if (has(ro, "safety_margin", x))
      p.request.safety_margin = as_number(x, "request.safety_margin");
    if (has(ro, "kv_block_positions", x)) {
      const auto b = as_count(x, "request.kv_block_positions");
      if (b > 4096)
        throw problem_error("request.kv_block_positions: must be at most "
                            "4096");
      p.request.kv_block_positions = static_cast<std::uint32_t>(b);
    }
  }
  if (has(o, "constraints", v)) {
    auto co = as_object(v, "constraints");
    only_keys(co, "constraints",
              {"max_stages", "pins", "prefer_fewer_nodes", "node_penalty"});
    element x;
    if (has(co, "max_stages", x))
      p.constraints.max_stages = as_count(x, "constraints.max_stages");
    if (has(co, "prefer_fewer_nodes", x))
      p.constraints.prefer_fewer_nodes = as_bool(
        x, "constraints.prefer_fewer_nodes");
    if (has(co, "node_penalty", x))
      p.constraints.node_penalty = as_number(x, "constraints.node_penalty");
    if (has(co, "pins", x))
      p.constraints.pins = read_device_layers(x, "constraints.pins");
  }
  if (has(o, "resident", v))
    p.resident = read_device_layers(v, "resident");
  if (has(o, "objective", v)) {
    auto oo = as_object(v, "objective");
    only_keys(oo, "objective", {"kind", "blend_weight"});
    element x;
    if (has(oo, "kind", x)) {
      auto s = as_string(x, "objective.kind");
      auto k = parse_objective_kind(s);
      if (!k)
        fail("objective.kind", "must be latency, throughput or blend, not \""
                                 + s + "\"");
      p.objective.kind = *k;
    }
    if (has(oo, "blend_weight", x))
      p.objective.blend_weight = as_number(x, "objective.blend_weight");
  }
  validate(p);
  return p;
}

problem read_problem_file(const std::string& path) {
  std::string json;
  try {
    json = text::read_file(path, 16ull << 20, "problem file");
  } catch (const text::file_error& e) {
    throw problem_error(e.what());
  }
  try {
    return parse_problem_json(json);
  } catch (const problem_error& e) {
    throw problem_error(path + ": " + e.what());
  }
}

} // namespace exo::placement
