#include "runtime/scenario/scenario.hpp"

#include "backends/factory/factory.hpp"
#include "backends/sim/sim_backend.hpp"

#include "core/config/strict_json.hpp"
#include "core/text/file.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <iomanip>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace exo::scenario {

namespace {

using namespace config::json;

/// A string or an array of strings (non-empty each).
std::vector<std::string> as_strings(element e, const std::string& path) {
  if (e.type() == element_type::STRING)
    return {as_nonempty_string(e, path)};
  std::vector<std::string> out;
  std::size_t i = 0;
  for (auto item : as_array(e, path, "strings"))
    out.push_back(as_nonempty_string(item, at(path, i++)));
  return out;
}

void check_name(const std::string& name, const std::string& path) {
  if (name.size() > 64)
    bad(path, "must be at most 64 characters");
  if (name.front() == '.' || name.front() == '-')
    bad(path, "must not start with '.' or '-'");
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
          || c == '.'))
      bad(path, "may contain only letters, digits, '-', '_' and '.'");
}

const std::set<std::string>& real_backends() {
  static const std::set<std::string> names{"cpu", "vulkan", "cuda", "hip",
                                           "rocm"};
  return names;
}

simulated_device parse_simulated(element e, const std::string& path) {
  simulated_device d;
  walk(e, path,
       {{"profile",
         [&](element v, const std::string& p) {
           d.profile = as_nonempty_string(v, p);
           auto& profiles = backend::builtin_sim_profiles();
           if (std::none_of(profiles.begin(), profiles.end(),
                            [&](auto& x) { return x.name == d.profile; })) {
             std::string names;
             for (auto& x : profiles)
               names += (names.empty() ? "" : ", ") + x.name;
             bad(p, "unknown profile \"" + d.profile + "\" (expected one of: "
                      + names + ")");
           }
         }},
        {"count",
         [&](element v, const std::string& p) {
           d.count = static_cast<int>(as_integer(v, p, 1, 64));
         }},
        {"fault", [&](element v, const std::string& p) {
           d.fault = as_nonempty_string(v, p);
           if (auto why = backend::sim_fault_error(d.fault); !why.empty())
             bad(p, why);
         }}});
  if (d.profile.empty())
    bad(join(path, "profile"), "required");
  return d;
}

node_spec parse_node(element e, const std::string& path) {
  node_spec n;
  bool backends_given = false;
  walk(e, path,
       {{"name",
         [&](element v, const std::string& p) {
           n.name = as_nonempty_string(v, p);
           check_name(n.name, p);
         }},
        {"devices",
         [&](element v, const std::string& p) {
           walk(v, p,
                {{"backends",
                  [&](element x, const std::string& q) {
                    backends_given = true;
                    n.backends.clear();
                    std::size_t i = 0;
                    for (auto item : as_array(x, q, "strings")) {
                      auto qi = at(q, i++);
                      auto b = as_nonempty_string(item, qi);
                      if (b == "sim")
                        bad(qi, "list simulated devices under "
                                "devices.simulated, not as a backend");
                      if (!real_backends().count(b))
                        bad(qi, "unknown backend \"" + b
                                  + "\" (expected cpu, vulkan, cuda, hip or "
                                    "rocm)");
                      n.backends.push_back(b);
                    }
                  }},
                 {"simulated",
                  [&](element x, const std::string& q) {
                    std::size_t i = 0;
                    for (auto item : as_array(x, q, "objects"))
                      n.simulated.push_back(parse_simulated(item, at(q, i++)));
                  }},
                 {"cpu_memory_limit_mib", [&](element x, const std::string& q) {
                    n.cpu_memory_limit_mib = static_cast<std::uint64_t>(
                      as_mebibytes(x, q, 0, 1 << 24));
                  }},
                 {"measure_rates", [&](element x, const std::string& q) {
                    n.measure_rates = as_bool(x, q);
                  }},
                 {"sim_time_scale", [&](element x, const std::string& q) {
                    n.sim_time_scale = as_number(x, q, 0, 1000);
                  }}});
         }},
        {"cpus",
         [&](element v, const std::string& p) {
           std::size_t i = 0;
           cpu_set_t allowed;
           CPU_ZERO(&allowed);
           bool known = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
           for (auto item : as_array(v, p, "integers")) {
             auto q = at(p, i++);
             auto c = static_cast<int>(as_integer(item, q, 0, CPU_SETSIZE - 1));
             if (known && !CPU_ISSET(c, &allowed))
               bad(q, "cpu " + std::to_string(c)
                        + " is not one this runner may use (it may use "
                        + std::to_string(CPU_COUNT(&allowed)) + ")");
             if (std::find(n.cpus.begin(), n.cpus.end(), c) != n.cpus.end())
               bad(q, "cpu " + std::to_string(c) + " is listed twice");
             n.cpus.push_back(c);
           }
           if (n.cpus.empty())
             bad(p, "must list at least one cpu (or be left out)");
         }},
        {"link",
         [&](element v, const std::string& p) {
           walk(v, p,
                {{"bandwidth_mbit",
                  [&](element x, const std::string& q) {
                    n.bandwidth_mbit = as_number(x, q, 0.1, 100000);
                  }},
                 {"latency_ms",
                  [&](element x, const std::string& q) {
                    n.latency_ms = as_number(x, q, 0, 10000);
                  }},
                 {"jitter_ms",
                  [&](element x, const std::string& q) {
                    n.jitter_ms = as_number(x, q, 0, 10000);
                  }},
                 {"loss_pct", [&](element x, const std::string& q) {
                    n.loss_pct = as_number(x, q, 0, 100);
                  }}});
           if (n.jitter_ms > n.latency_ms)
             bad(join(p, "jitter_ms"), "must not exceed latency_ms ("
                                         + std::to_string(n.latency_ms) + ")");
         }},
        {"seeds",
         [&](element v, const std::string& p) {
           n.seeds_given = true;
           std::size_t i = 0;
           for (auto item : as_array(v, p, "node names"))
             n.seeds.push_back(as_nonempty_string(item, at(p, i++)));
         }},
        {"start",
         [&](element v, const std::string& p) { n.start = as_bool(v, p); }},
        {"cluster", [&](element v, const std::string& p) {
           n.cluster = as_nonempty_string(v, p);
           check_name(n.cluster, p);
         }}});
  if (n.name.empty())
    bad(join(path, "name"), "required");
  if (n.backends.empty() && n.simulated.empty())
    bad(join(path, "devices"), "a node needs a backend or a simulated device");
  (void) backends_given;
  return n;
}

/// Reads "expect" into `x`.
void parse_expect(element e, const std::string& path, expectation& x) {
  walk(e, path,
       {{"exit",
         [&](element v, const std::string& p) {
           x.exit_code = static_cast<int>(as_integer(v, p, 0, 255));
         }},
        {"contains",
         [&](element v, const std::string& p) { x.contains = as_strings(v, p); }},
        {"excludes",
         [&](element v, const std::string& p) { x.excludes = as_strings(v, p); }},
        {"json", [&](element v, const std::string& p) {
           (void) p;
           x.json = simdjson::minify(v);
         }}});
}

struct step_fields {
  std::set<std::string> allowed;
  std::set<std::string> required;
};

const std::map<step_kind, step_fields>& step_table() {
  static const std::map<step_kind, step_fields> t{
    {step_kind::converge,
     {{"alive", "on", "coordinator", "within_s"}, {}}},
    {step_kind::console,
     {{"node", "command", "json", "expect", "within_s", "poll"},
      {"node", "command"}}},
    {step_kind::kill, {{"node", "within_s", "coordinator"}, {"node"}}},
    {step_kind::stop, {{"node", "within_s"}, {"node"}}},
    {step_kind::start, {{"node", "within_s"}, {"node"}}},
    {step_kind::plan,
     {{"node", "args", "json", "expect", "within_s"}, {"node"}}},
    {step_kind::run,
     {{"node", "prompt", "tokens", "stages", "seed", "temperature", "expect",
       "within_s", "reference", "background", "expect_recoveries",
       "max_refed", "requests", "expect_step_within_pct"},
      {"node", "prompt"}}},
    {step_kind::await,
     {{"run", "expect", "expect_recoveries", "max_refed", "within_s"},
      {"run"}}},
    {step_kind::freeze, {{"node", "within_s", "coordinator"}, {"node"}}},
    {step_kind::thaw, {{"node"}, {"node"}}},
    {step_kind::sleep, {{"seconds"}, {"seconds"}}},
    {step_kind::partition, {{"node"}, {"node"}}},
    {step_kind::heal, {{"node"}, {"node"}}},
    {step_kind::shape, {{"node", "bandwidth_mbit"}, {"node", "bandwidth_mbit"}}},
    {step_kind::measure,
     {{"node", "tolerance_pct", "min_mbit", "within_s"}, {"node"}}},
    {step_kind::fault,
     {{"node", "device", "fault", "expect", "within_s"},
      {"node", "device", "fault"}}},
    {step_kind::audit, {{"on", "within_s"}, {}}},
    {step_kind::thermal, {{"on", "within_s"}, {}}},
  };
  return t;
}

/// "a \"kill\" step", "an \"await\" step".
std::string a_step(const std::string& verb) {
  auto vowel = !verb.empty()
               && std::string{"aeiou"}.find(verb.front()) != std::string::npos;
  return std::string{vowel ? "an" : "a"} + " \"" + verb + "\" step";
}

/// The names of the steps, for messages.
std::string kind_names() {
  return "converge, console, kill, stop, start, restart, plan, run, await, "
         "freeze, thaw, sleep, partition, heal, shape, measure, fault, "
         "audit, thermal";
}

std::optional<step_kind> parse_kind(const std::string& s) {
  static const std::map<std::string, step_kind> names{
    {"converge", step_kind::converge}, {"console", step_kind::console},
    {"kill", step_kind::kill},         {"stop", step_kind::stop},
    {"start", step_kind::start},       {"restart", step_kind::start},
    {"plan", step_kind::plan},         {"run", step_kind::run},
    {"await", step_kind::await},       {"freeze", step_kind::freeze},
    {"thaw", step_kind::thaw},         {"sleep", step_kind::sleep},
    {"partition", step_kind::partition}, {"heal", step_kind::heal},
    {"shape", step_kind::shape},         {"measure", step_kind::measure},
    {"fault", step_kind::fault},         {"audit", step_kind::audit},
    {"thermal", step_kind::thermal}};
  auto it = names.find(s);
  if (it == names.end())
    return std::nullopt;
  return it->second;
}

step parse_step(element e, const std::string& path) {
  simdjson::dom::object fields;
  if (e.type() != element_type::OBJECT || e.get_object().get(fields))
    bad(path, "must be an object");
  element doel;
  if (fields["do"].get(doel))
    bad(join(path, "do"), "required (one of " + kind_names() + ")");
  auto name = as_nonempty_string(doel, join(path, "do"));
  auto kind = parse_kind(name);
  if (!kind)
    bad(join(path, "do"),
        "unknown step \"" + name + "\" (expected one of " + kind_names() + ")");
  step s;
  s.kind = *kind;
  s.path = path;
  s.verb = name;
  auto& rules = step_table().at(*kind);
  std::set<std::string> seen;
  std::map<std::string, handler> h{
    {"do", [](element, const std::string&) {}},
    {"name",
     [&](element v, const std::string& p) { s.title = as_nonempty_string(v, p); }},
    {"node",
     [&](element v, const std::string& p) { s.node = as_nonempty_string(v, p); }},
    {"alive",
     [&](element v, const std::string& p) {
       s.alive = static_cast<int>(as_integer(v, p, 0, 64));
     }},
    {"on",
     [&](element v, const std::string& p) {
       std::size_t i = 0;
       for (auto item : as_array(v, p, "node names"))
         s.on.push_back(as_nonempty_string(item, at(p, i++)));
     }},
    {"coordinator",
     [&](element v, const std::string& p) {
       s.coordinator = as_nonempty_string(v, p);
     }},
    {"command",
     [&](element v, const std::string& p) {
       s.command = as_nonempty_string(v, p);
     }},
    {"args",
     [&](element v, const std::string& p) { s.command = as_string(v, p); }},
    {"json", [&](element v, const std::string& p) { s.json = as_bool(v, p); }},
    {"poll", [&](element v, const std::string& p) { s.poll = as_bool(v, p); }},
    {"expect",
     [&](element v, const std::string& p) { parse_expect(v, p, s.expect); }},
    {"prompt",
     [&](element v, const std::string& p) {
       s.prompt = as_nonempty_string(v, p);
       if (!prompt_ok(s.prompt))
         bad(p, "must not contain '\"', '\\' or a line break");
     }},
    {"tokens",
     [&](element v, const std::string& p) {
       s.tokens = static_cast<int>(as_integer(v, p, 1, 4096));
     }},
    {"temperature",
     [&](element v, const std::string& p) {
       s.temperature = as_number(v, p, 0, 2);
     }},
    {"reference",
     [&](element v, const std::string& p) { s.reference = as_bool(v, p); }},
    {"background",
     [&](element v, const std::string& p) {
       s.label = as_nonempty_string(v, p);
       check_name(s.label, p);
     }},
    {"run",
     [&](element v, const std::string& p) {
       s.label = as_nonempty_string(v, p);
     }},
    {"expect_recoveries",
     [&](element v, const std::string& p) {
       s.expect_recoveries = static_cast<int>(as_integer(v, p, 0, 1000));
     }},
    {"max_refed",
     [&](element v, const std::string& p) {
       s.max_refed = static_cast<long>(as_integer(v, p, 0, 1000000));
     }},
    {"stages",
     [&](element v, const std::string& p) {
       s.stages = static_cast<int>(as_integer(v, p, 1, 64));
     }},
    {"seed",
     [&](element v, const std::string& p) {
       s.seed = static_cast<int>(as_integer(v, p, 0, 1 << 30));
     }},
    {"within_s",
     [&](element v, const std::string& p) {
       s.within_s = as_number(v, p, 0.1, 600);
     }},
    {"seconds",
     [&](element v, const std::string& p) {
       s.seconds = as_number(v, p, 0, 600);
     }},
    {"tolerance_pct",
     [&](element v, const std::string& p) {
       s.tolerance_pct = as_number(v, p, 1, 100);
     }},
    {"min_mbit",
     [&](element v, const std::string& p) {
       s.min_mbit = as_number(v, p, 0.1, 100000);
     }},
    {"requests",
     [&](element v, const std::string& p) {
       s.requests = static_cast<int>(as_integer(v, p, 1, 32));
     }},
    {"expect_step_within_pct",
     [&](element v, const std::string& p) {
       s.step_within_pct = as_number(v, p, 1, 1000);
     }},
    {"device",
     [&](element v, const std::string& p) {
       s.device = as_nonempty_string(v, p);
       if (s.device.size() > 128
           || s.device.find_first_of(" \t\"\\\n") != std::string::npos)
         bad(p, "a device id without spaces, quotes or line breaks (at most "
                "128 characters)");
     }},
    {"fault",
     [&](element v, const std::string& p) {
       s.fault = as_nonempty_string(v, p);
       if (auto why = backend::sim_runtime_fault_error(s.fault); !why.empty())
         bad(p, why);
     }},
    {"bandwidth_mbit",
     [&](element v, const std::string& p) {
       s.bandwidth_mbit = as_number(v, p, 0, 100000);
       if (s.bandwidth_mbit > 0 && s.bandwidth_mbit < 0.1)
         bad(p, "0 (unshaped) or 0.1..100000");
     }},
  };
  for (auto field : fields) {
    std::string key{field.key};
    auto p = join(path, key);
    if (key != "do" && key != "name" && !rules.allowed.count(key)) {
      std::string known = "do, name";
      for (auto& k : rules.allowed)
        known += ", " + k;
      bad(p, "unknown key for " + a_step(name) + " (expected one of: "
               + known + ")");
    }
    seen.insert(key);
    h.at(key)(field.value, p);
  }
  for (auto& k : rules.required)
    if (!seen.count(k))
      bad(join(path, k), "required for " + a_step(name));
  if (s.kind == step_kind::console && s.expect.json.size() > 0 && !s.json)
    bad(join(path, "expect.json"), "needs \"json\": true (the command's JSON "
                                   "output)");
  if (s.kind == step_kind::console && s.poll && s.within_s < 0)
    bad(join(path, "poll"), "needs within_s (the bound of the retries)");
  if (s.kind == step_kind::plan && s.expect.json.size() > 0)
    s.json = true;
  if (s.kind == step_kind::run && !s.label.empty()) {
    // A background run's result is checked by its await step.
    for (auto key : {"expect", "expect_recoveries", "max_refed"})
      if (seen.count(key))
        bad(join(path, key), "goes on the \"await\" step of a background "
                             "run (\"" + s.label + "\")");
  }
  // The step times are read from the text of one foreground run.
  if (s.kind == step_kind::run && s.step_within_pct >= 0) {
    std::string clash = s.expect.json.empty() ? "" : "expect.json";
    for (auto key : {"reference", "expect_recoveries", "max_refed",
                     "background", "requests"})
      if (seen.count(key))
        clash = key;
    if (!clash.empty())
      bad(join(path, "expect_step_within_pct"),
          "compares one foreground run's text reply: it does not go with \""
            + clash + "\"");
  }
  // The run's JSON reply carries the tokens and the recoveries.
  if ((s.kind == step_kind::run || s.kind == step_kind::await)
      && (s.reference || s.expect_recoveries >= 0 || s.max_refed >= 0
          || !s.expect.json.empty()
          || !s.label.empty() || s.requests > 1))
    s.json = true;
  return s;
}

void check_model(model_spec& m, const std::string& path) {
  if (m.dim % m.heads != 0)
    bad(join(path, "heads"), "must divide dim (" + std::to_string(m.dim) + ")");
  if (m.heads % m.kv_heads != 0)
    bad(join(path, "kv_heads"),
        "must divide heads (" + std::to_string(m.heads) + ")");
  if ((m.dim / m.heads) % 2 != 0)
    bad(join(path, "dim"), "dim / heads must be even (rotary embedding)");
}

/// Cross-checks: names unique, seeds and step nodes known, counts possible.
void validate(scenario& sc) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < sc.nodes.size(); ++i) {
    auto& n = sc.nodes[i];
    auto p = at("nodes", i);
    if (!names.insert(n.name).second)
      bad(p + ".name", "duplicate node name \"" + n.name + "\"");
  }
  if (sc.network.discovery && !sc.network.namespaces)
    bad("network.discovery", "needs \"namespaces\": true (nodes announce "
                             "from their own non-loopback addresses)");
  for (std::size_t i = 0; i < sc.nodes.size(); ++i) {
    auto& n = sc.nodes[i];
    if ((n.bandwidth_mbit > 0 || n.latency_ms > 0 || n.loss_pct > 0)
        && !sc.network.namespaces)
      bad(at("nodes", i) + ".link",
          "needs \"network\": {\"namespaces\": true} (links are shaped "
          "in network namespaces)");
    for (std::size_t k = 0; k < n.seeds.size(); ++k) {
      auto p = at(at("nodes", i) + ".seeds", k);
      if (!names.count(n.seeds[k]))
        bad(p, "no node named \"" + n.seeds[k] + "\"");
      if (n.seeds[k] == n.name)
        bad(p, "a node cannot seed itself");
    }
  }
  bool needs_model = false;
  // Background runs: label -> the path of its run step, and of its await.
  std::map<std::string, std::string> runs, awaited;
  for (auto& s : sc.steps) {
    if (s.kind == step_kind::run && !s.label.empty()) {
      if (runs.count(s.label))
        bad(s.path + ".background", "label \"" + s.label
                                      + "\" is already used by "
                                      + runs[s.label]);
      runs[s.label] = s.path;
    }
    if (s.kind == step_kind::await) {
      if (!runs.count(s.label))
        bad(s.path + ".run",
            "no background run \"" + s.label + "\" before this step");
      if (awaited.count(s.label))
        bad(s.path + ".run", "\"" + s.label + "\" is already awaited by "
                               + awaited[s.label]);
      awaited[s.label] = s.path;
    }
    if (!s.node.empty() && !names.count(s.node))
      bad(s.path + ".node", "no node named \"" + s.node + "\"");
    if ((s.kind == step_kind::partition || s.kind == step_kind::heal
         || s.kind == step_kind::shape || s.kind == step_kind::measure)
        && !sc.network.namespaces)
      bad(s.path + ".do", a_step(s.verb) + " needs \"network\": "
                          "{\"namespaces\": true}");
    if (s.kind == step_kind::fault) {
      // The ids the sim backend gives: sim:PROFILE:N, N counted per profile.
      std::set<std::string> ids;
      std::string listed;
      if (auto* n = sc.find(s.node)) {
        std::map<std::string, int> counts;
        for (auto& d : n->simulated)
          for (int k = 0; k < d.count; ++k) {
            auto id = "sim:" + d.profile + ":"
                      + std::to_string(counts[d.profile]++);
            ids.insert(id);
            listed += (listed.empty() ? "" : ", ") + id;
          }
      }
      if (!ids.count(s.device))
        bad(s.path + ".device",
            "node " + s.node + " has no simulated device \"" + s.device
              + "\" (faults go to simulated devices; it has "
              + (listed.empty() ? std::string{"none"} : listed) + ")");
    }
    for (std::size_t k = 0; k < s.on.size(); ++k)
      if (!names.count(s.on[k]))
        bad(at(s.path + ".on", k), "no node named \"" + s.on[k] + "\"");
    if (!s.coordinator.empty() && !names.count(s.coordinator))
      bad(s.path + ".coordinator",
          "no node named \"" + s.coordinator + "\"");
    if (s.alive > static_cast<int>(sc.nodes.size()))
      bad(s.path + ".alive", "the scenario has only "
                               + std::to_string(sc.nodes.size()) + " node(s)");
    needs_model = needs_model || s.kind == step_kind::plan
                  || s.kind == step_kind::run;
  }
  for (auto& [label, path] : runs)
    if (!awaited.count(label))
      bad(path + ".background", "background run \"" + label
                                  + "\" is never awaited (add an \"await\" "
                                    "step)");
  if (needs_model && !sc.model)
    sc.model = model_spec{};
  // The prompt's tokens are at most its bytes, a leading space and BOS.
  for (auto& s : sc.steps) {
    if (s.kind != step_kind::run)
      continue;
    auto need = s.tokens + static_cast<int>(s.prompt.size()) + 2;
    if (need > sc.model->ctx)
      bad(s.path + ".tokens",
          std::to_string(s.tokens) + " tokens after a "
            + std::to_string(s.prompt.size()) + "-byte prompt need model.ctx "
            + ">= " + std::to_string(need) + " (it is "
            + std::to_string(sc.model->ctx) + ")");
  }
}

} // namespace

const char* to_string(step_kind k) noexcept {
  switch (k) {
    case step_kind::converge: return "converge";
    case step_kind::console: return "console";
    case step_kind::kill: return "kill";
    case step_kind::stop: return "stop";
    case step_kind::start: return "start";
    case step_kind::plan: return "plan";
    case step_kind::run: return "run";
    case step_kind::await: return "await";
    case step_kind::freeze: return "freeze";
    case step_kind::thaw: return "thaw";
    case step_kind::sleep: return "sleep";
    case step_kind::partition: return "partition";
    case step_kind::heal: return "heal";
    case step_kind::shape: return "shape";
    case step_kind::measure: return "measure";
    case step_kind::fault: return "fault";
    case step_kind::audit: return "audit";
    case step_kind::thermal: return "thermal";
  }
  return "?";
}

const node_spec* scenario::find(const std::string& n) const {
  for (auto& x : nodes)
    if (x.name == n)
      return &x;
  return nullptr;
}

std::vector<std::string> scenario::seeds_of(const node_spec& node) const {
  if (node.seeds_given)
    return node.seeds;
  std::size_t i = 0;
  while (i < nodes.size() && nodes[i].name != node.name)
    ++i;
  if (i == 0 || i >= nodes.size() || topology == "none")
    return {};
  if (topology == "chain")
    return {nodes[i - 1].name};
  return {nodes[0].name}; // star
}

bool prompt_ok(const std::string& prompt) {
  return prompt.find_first_of("\"\\\r\n") == std::string::npos;
}

namespace {

scenario parse_document(const std::string& json, const std::string& source) {
  simdjson::dom::parser parser;
  element doc;
  if (auto err = parser.parse(json).get(doc))
    throw scenario_error(source + ": not valid JSON: "
                         + simdjson::error_message(err));
  scenario sc;
  bool have_nodes = false, have_steps = false;
  walk(doc, "",
       {{"name",
         [&](element v, const std::string& p) {
           sc.name = as_nonempty_string(v, p);
         }},
        {"description",
         [&](element v, const std::string& p) {
           sc.description = as_string(v, p);
         }},
        {"network",
         [&](element v, const std::string& p) {
           walk(v, p,
                {{"namespaces",
                  [&](element x, const std::string& q) {
                    sc.network.namespaces = as_bool(x, q);
                  }},
                 {"discovery", [&](element x, const std::string& q) {
                    sc.network.discovery = as_bool(x, q);
                  }}});
         }},
        {"topology",
         [&](element v, const std::string& p) {
           sc.topology = as_string(v, p);
           if (sc.topology != "star" && sc.topology != "chain"
               && sc.topology != "none")
             bad(p, "must be one of star, chain, none");
         }},
        {"nodes",
         [&](element v, const std::string& p) {
           have_nodes = true;
           std::size_t i = 0;
           for (auto item : as_array(v, p, "objects"))
             sc.nodes.push_back(parse_node(item, at(p, i++)));
           if (sc.nodes.empty())
             bad(p, "must name at least one node");
           if (sc.nodes.size() > 16)
             bad(p, "at most 16 nodes");
         }},
        {"timing",
         [&](element v, const std::string& p) {
           auto& t = sc.timing;
           walk(v, p,
                {{"heartbeat_ms",
                  [&](element x, const std::string& q) {
                    t.heartbeat_ms
                      = static_cast<int>(as_milliseconds(x, q, 10, 60000));
                  }},
                 {"failure_timeout_ms",
                  [&](element x, const std::string& q) {
                    t.failure_timeout_ms
                      = static_cast<int>(as_milliseconds(x, q, 50, 600000));
                  }},
                 {"connect_timeout_ms",
                  [&](element x, const std::string& q) {
                    t.connect_timeout_ms
                      = static_cast<int>(as_milliseconds(x, q, 50, 600000));
                  }},
                 {"start_timeout_s",
                  [&](element x, const std::string& q) {
                    t.start_timeout_s = as_number(x, q, 1, 600);
                  }},
                 {"stop_timeout_s",
                  [&](element x, const std::string& q) {
                    t.stop_timeout_s = as_number(x, q, 1, 600);
                  }},
                 {"console_timeout_ms",
                  [&](element x, const std::string& q) {
                    t.console_timeout_ms
                      = static_cast<int>(as_milliseconds(x, q, 100, 600000));
                  }},
                 {"poll_ms",
                  [&](element x, const std::string& q) {
                    t.poll_ms
                      = static_cast<int>(as_milliseconds(x, q, 10, 10000));
                  }},
                 {"default_within_s", [&](element x, const std::string& q) {
                    t.default_within_s = as_number(x, q, 0.1, 600);
                  }}});
           if (t.failure_timeout_ms <= t.heartbeat_ms)
             bad(join(p, "failure_timeout_ms"),
                 "must be larger than heartbeat_ms");
         }},
        {"model",
         [&](element v, const std::string& p) {
           model_spec m;
           auto num = [&](int& field, std::int64_t lo, std::int64_t hi) {
             return [&field, lo, hi](element x, const std::string& q) {
               field = static_cast<int>(as_integer(x, q, lo, hi));
             };
           };
           walk(v, p,
                {{"layers", num(m.layers, 1, 64)},
                 {"dim", num(m.dim, 8, 1024)},
                 {"ff", num(m.ff, 8, 4096)},
                 {"heads", num(m.heads, 1, 64)},
                 {"kv_heads", num(m.kv_heads, 1, 64)},
                 {"vocab", num(m.vocab, 300, 32000)},
                 {"seed", num(m.seed, 0, 1 << 30)},
                 {"ctx", num(m.ctx, 16, 65536)}});
           check_model(m, p);
           sc.model = m;
         }},
        {"steps", [&](element v, const std::string& p) {
           have_steps = true;
           std::size_t i = 0;
           for (auto item : as_array(v, p, "objects"))
             sc.steps.push_back(parse_step(item, at(p, i++)));
           if (sc.steps.empty())
             bad(p, "must list at least one step");
         }}});
  if (sc.name.empty())
    bad("name", "required");
  if (!have_nodes)
    bad("nodes", "required");
  if (!have_steps)
    bad("steps", "required");
  validate(sc);
  return sc;
}

} // namespace

scenario parse(const std::string& json, const std::string& source) {
  try {
    return parse_document(json, source);
  } catch (const config::json::json_error& e) {
    throw scenario_error(e.what());
  }
}

scenario load(const std::string& path) {
  std::string doc;
  try {
    doc = text::read_file(path, 16ull << 20, "scenario file");
  } catch (const text::file_error& e) {
    throw scenario_error(e.what());
  }
  return parse(doc, path);
}

// -- expectation checks -------------------------------------------------------

namespace {

bool contains_el(element a, element e, const std::string& path,
                 std::string& why) {
  auto where = path.empty() ? std::string{"<top>"} : path;
  auto is_num = [](element_type t) {
    return t == element_type::INT64 || t == element_type::UINT64
           || t == element_type::DOUBLE;
  };
  auto num = [](element x) {
    switch (x.type()) {
      case element_type::INT64: return double(x.get_int64().value_unsafe());
      case element_type::UINT64: return double(x.get_uint64().value_unsafe());
      default: return x.get_double().value_unsafe();
    }
  };
  if (is_num(e.type())) {
    if (!is_num(a.type()) || num(a) != num(e)) {
      why = where + ": expected " + simdjson::minify(e) + ", got "
            + simdjson::minify(a);
      return false;
    }
    return true;
  }
  if (a.type() != e.type()) {
    why = where + ": expected " + simdjson::minify(e) + ", got "
          + simdjson::minify(a);
    return false;
  }
  switch (e.type()) {
    case element_type::OBJECT: {
      simdjson::dom::object ao, eo;
      if (a.get_object().get(ao) || e.get_object().get(eo))
        return false;
      for (auto field : eo) {
        element av;
        std::string key{field.key};
        if (ao[key].get(av)) {
          why = join(path, key) + ": missing";
          return false;
        }
        if (!contains_el(av, field.value, join(path, key), why))
          return false;
      }
      return true;
    }
    case element_type::ARRAY: {
      simdjson::dom::array aa, ea;
      if (a.get_array().get(aa) || e.get_array().get(ea))
        return false;
      for (auto ev : ea) {
        bool found = false;
        std::string inner;
        for (auto av : aa) {
          if (contains_el(av, ev, path + "[]", inner)) {
            found = true;
            break;
          }
        }
        if (!found) {
          why = where + ": no element matches " + simdjson::minify(ev);
          return false;
        }
      }
      return true;
    }
    default:
      if (simdjson::minify(a) != simdjson::minify(e)) {
        why = where + ": expected " + simdjson::minify(e) + ", got "
              + simdjson::minify(a);
        return false;
      }
      return true;
  }
}

} // namespace

bool json_contains(const std::string& actual, const std::string& expected,
                   std::string& why) {
  simdjson::dom::parser pa, pe;
  element a, e;
  if (auto err = pa.parse(actual).get(a)) {
    why = std::string{"the output is not JSON: "} + simdjson::error_message(err);
    return false;
  }
  if (auto err = pe.parse(expected).get(e)) {
    why = std::string{"the expected value is not JSON: "}
          + simdjson::error_message(err);
    return false;
  }
  return contains_el(a, e, "", why);
}

std::string check(const expectation& x, int exit_code, const std::string& out,
                  const std::string& err) {
  if (exit_code != x.exit_code)
    return "exit status " + std::to_string(exit_code) + ", expected "
           + std::to_string(x.exit_code);
  auto all = out + err;
  for (auto& s : x.contains)
    if (all.find(s) == std::string::npos)
      return "output lacks \"" + s + "\"";
  for (auto& s : x.excludes)
    if (all.find(s) != std::string::npos)
      return "output has \"" + s + "\"";
  if (!x.json.empty()) {
    std::string why;
    if (!json_contains(out, x.json, why))
      return "JSON does not match: " + why;
  }
  return {};
}

namespace {

/// Parses a console reply into `doc` (owned by `p`); false with `why` when
/// it is not JSON.
bool parse_reply(simdjson::dom::parser& p, const std::string& json,
                 element& doc, std::string& why) {
  if (auto err = p.parse(json).get(doc)) {
    why = std::string{"not JSON: "} + simdjson::error_message(err);
    return false;
  }
  return true;
}

} // namespace

bool parse_nodes(const std::string& json, std::vector<member_status>& out,
                 std::string& coordinator, std::string& why) {
  simdjson::dom::parser p;
  element doc;
  if (!parse_reply(p, json, doc, why))
    return false;
  std::string_view co;
  simdjson::dom::array nodes;
  if (doc["coordinator"].get_string().get(co)
      || doc["nodes"].get_array().get(nodes)) {
    why = "not the output of nodes --json";
    return false;
  }
  coordinator = std::string{co};
  out.clear();
  for (auto n : nodes) {
    std::string_view name, status;
    if (n["name"].get_string().get(name)
        || n["status"].get_string().get(status)) {
      why = "a member without name or status";
      return false;
    }
    out.push_back({std::string{name}, std::string{status}});
  }
  return true;
}

std::string status_of(const std::vector<member_status>& members,
                      const std::string& name) {
  for (auto& m : members)
    if (m.name == name)
      return m.status;
  return {};
}

namespace {

/// A number of a reply (integer or not) as a double.
bool number_of(element e, double& out) {
  switch (e.type()) {
    case element_type::INT64:
      out = double(e.get_int64().value_unsafe());
      return true;
    case element_type::UINT64:
      out = double(e.get_uint64().value_unsafe());
      return true;
    case element_type::DOUBLE:
      out = e.get_double().value_unsafe();
      return true;
    default: return false;
  }
}

} // namespace

bool parse_step_times(const std::string& text, step_times& out,
                      std::string& why) {
  // "objective (latency): 12.64 ms   latency: 12.64 ms   bottleneck: ...":
  // the placement's last plan (a re-placement prints another) counts.
  static const std::regex predicted_re{
    "(^|[^(])latency: ([0-9.]+) (s|ms|us)"};
  static const std::regex measured_re{
    "generation: ([0-9]+) tokens in ([0-9.]+) s"};
  std::smatch m;
  double predicted = -1;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), predicted_re);
       it != std::sregex_iterator(); ++it) {
    double v = std::strtod((*it)[2].str().c_str(), nullptr);
    auto unit = (*it)[3].str();
    predicted = unit == "s" ? v : unit == "ms" ? v * 1e-3 : v * 1e-6;
  }
  if (!(predicted > 0)) {
    why = "the reply shows no predicted step time (the placement's "
          "\"latency: \")";
    return false;
  }
  if (!std::regex_search(text, m, measured_re)) {
    why = "the reply shows no generation time (\"generation: N tokens in T "
          "s\")";
    return false;
  }
  auto n = std::strtod(m[1].str().c_str(), nullptr);
  auto t = std::strtod(m[2].str().c_str(), nullptr);
  if (!(n >= 1) || !(t > 0)) {
    why = "the reply's generation time is not a positive figure: "
          + m[0].str();
    return false;
  }
  out.predicted_s = predicted;
  out.measured_s = t / n;
  return true;
}

std::string compare_step_times(const step_times& t, double pct, bool& ok) {
  auto ms = [](double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g ms", s * 1e3);
    return std::string{b};
  };
  double off = (t.measured_s - t.predicted_s) / t.measured_s * 100;
  ok = std::abs(off) <= pct;
  char b[96];
  std::snprintf(b, sizeof b, " (%+.0f%% of the measured, %s %g%%)", off,
                ok ? "within" : "beyond", pct);
  return "predicted " + ms(t.predicted_s) + " a token, measured "
         + ms(t.measured_s) + b;
}

bool parse_run_reply(const std::string& json, run_reply& out,
                     std::string& why) {
  simdjson::dom::parser p;
  element doc;
  if (!parse_reply(p, json, doc, why))
    return false;
  simdjson::dom::array tokens, recoveries;
  std::uint64_t job = 0;
  bool cancelled = false;
  if (doc["tokens"].get_array().get(tokens)
      || doc["recoveries"].get_array().get(recoveries)
      || doc["job"].get_uint64().get(job)
      || doc["cancelled"].get_bool().get(cancelled)) {
    why = "not the output of run --json (tokens, recoveries, job, cancelled)";
    return false;
  }
  run_reply r;
  r.job = job;
  r.cancelled = cancelled;
  for (auto t : tokens) {
    std::int64_t id = 0;
    if (t.get_int64().get(id)) {
      why = "a token that is not an integer: " + simdjson::minify(t);
      return false;
    }
    r.tokens.push_back(id);
  }
  for (auto e : recoveries) {
    recovery x;
    std::string_view reason;
    element replayed, rs, gs;
    if (e["reason"].get_string().get(reason) || e["replayed"].get(replayed)
        || e["recovery_s"].get(rs) || e["gap_s"].get(gs)) {
      why = "a recovery without reason, replayed, recovery_s or gap_s: "
            + simdjson::minify(e);
      return false;
    }
    double n = 0;
    if (!number_of(replayed, n) || !number_of(rs, x.recovery_s)
        || !number_of(gs, x.gap_s) || n < 0) {
      why = "a recovery with a value that is not a number: "
            + simdjson::minify(e);
      return false;
    }
    x.reason = std::string{reason};
    x.replayed = static_cast<std::uint64_t>(n);
    r.recoveries.push_back(std::move(x));
  }
  out = std::move(r);
  return true;
}

bool parse_jobs(const std::string& json, std::vector<job_status>& running,
                std::string& why) {
  simdjson::dom::parser p;
  element doc;
  if (!parse_reply(p, json, doc, why))
    return false;
  simdjson::dom::array jobs;
  if (doc["jobs"].get_array().get(jobs)) {
    why = "not the output of jobs --json";
    return false;
  }
  running.clear();
  for (auto j : jobs) {
    job_status x;
    std::string_view state;
    if (j["job"].get_uint64().get(x.job) || j["state"].get_string().get(state)
        || j["tokens"].get_uint64().get(x.tokens)) {
      why = "a job without job, state or tokens: " + simdjson::minify(j);
      return false;
    }
    x.state = std::string{state};
    running.push_back(std::move(x));
  }
  return true;
}

bool parse_links(const std::string& json, std::vector<measured_link>& out,
                 std::string& why) {
  simdjson::dom::parser p;
  element doc;
  if (!parse_reply(p, json, doc, why))
    return false;
  simdjson::dom::array links;
  if (doc.get_array().get(links)) {
    why = "not the output of measure --json";
    return false;
  }
  out.clear();
  for (auto l : links) {
    measured_link x;
    std::string_view from, to;
    if (l["from"].get_string().get(from) || l["to"].get_string().get(to)
        || l["bandwidth_bps"].get_double().get(x.bandwidth_bps)
        || l["rtt_p50_us"].get_double().get(x.rtt_p50_us)) {
      why = "a link without from, to, bandwidth_bps or rtt_p50_us: "
            + simdjson::minify(l);
      return false;
    }
    x.from = std::string{from};
    x.to = std::string{to};
    out.push_back(std::move(x));
  }
  return true;
}

std::string check_link_rates(const std::vector<measured_link>& links,
                             const std::map<std::string, link_shaping>& shaped,
                             double tolerance_pct, std::string& summary,
                             double min_mbit) {
  auto of = [&](const std::string& n) {
    auto it = shaped.find(n);
    return it == shaped.end() ? link_shaping{} : it->second;
  };
  summary.clear();
  std::size_t checked = 0;
  const double tol = tolerance_pct / 100;
  // Three significant digits, whole numbers from 100 up ("3540", "19.2").
  auto num = [](double v) {
    std::ostringstream f;
    if (std::fabs(v) >= 100)
      f << std::llround(v);
    else
      f << std::setprecision(3) << v;
    return f.str();
  };
  for (auto& l : links) {
    const auto a = of(l.from), b = of(l.to);
    const bool rate = a.mbit > 0 || b.mbit > 0;
    const bool delay = a.latency_ms > 0 || b.latency_ms > 0;
    if (!rate && !delay)
      continue;
    std::ostringstream o;
    o.precision(3);
    o << l.from << "->" << l.to;
    std::string off;
    if (rate) {
      const double want = a.mbit <= 0   ? b.mbit
                          : b.mbit <= 0 ? a.mbit
                                        : std::min(a.mbit, b.mbit);
      const double got = l.bandwidth_bps * 8 / 1e6;
      o << " " << num(got) << " of " << num(want) << " Mbit/s";
      if (min_mbit > 0) {
        o << " (at least " << num(min_mbit) << ")";
        if (got < min_mbit)
          off = "floor";
      } else if (std::fabs(got - want) > want * tol) {
        off = "rate";
      }
    }
    if (delay) {
      const double want = a.latency_ms + b.latency_ms;
      const double got = l.rtt_p50_us / 1000;
      o << (rate ? "," : "") << " rtt " << num(got) << " of " << num(want)
        << " ms";
      if (off.empty() && std::fabs(got - want) > want * tol + 1)
        off = "round trip";
    }
    summary += (summary.empty() ? "" : ", ") + o.str();
    ++checked;
    if (!off.empty())
      return "measured " + o.str()
             + (off == "floor"
                  ? std::string{": the rate is below the floor"}
                  : ": the " + off + " is more than "
                      + std::to_string(static_cast<int>(tolerance_pct))
                      + "% off");
  }
  if (checked == 0)
    return "no measured link has a shaped end (" + std::to_string(links.size())
           + " link(s) measured)";
  return "";
}

std::string compare_tokens(const std::vector<std::int64_t>& got,
                           const std::vector<std::int64_t>& reference) {
  auto n = std::min(got.size(), reference.size());
  for (std::size_t i = 0; i < n; ++i)
    if (got[i] != reference[i])
      return "token " + std::to_string(i) + " is " + std::to_string(got[i])
             + ", the reference's " + std::to_string(reference[i]) + " (of "
             + std::to_string(got.size()) + " and "
             + std::to_string(reference.size()) + " tokens)";
  if (got.size() != reference.size())
    return std::to_string(got.size()) + " tokens, the reference has "
           + std::to_string(reference.size()) + " (the first "
           + std::to_string(n) + " are equal)";
  return {};
}

} // namespace exo::scenario
