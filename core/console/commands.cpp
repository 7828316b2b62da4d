#include "core/console/commands.hpp"

#include "core/cli/words.hpp"
#include "core/text/number.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace exo::console {

namespace {

using vt = value_type;

option_spec kv(std::string name, vt type, std::string meta, std::string help) {
  option_spec o;
  o.name = std::move(name);
  o.type = type;
  o.meta = std::move(meta);
  o.help = std::move(help);
  return o;
}

option_spec dashed(std::string name, vt type, std::string meta,
                   std::string help) {
  auto o = kv(std::move(name), type, std::move(meta), std::move(help));
  o.dashed = true;
  return o;
}

option_spec ranged(option_spec o, double min, double max) {
  o.min = min;
  o.max = max;
  return o;
}

option_spec choice(option_spec o, std::vector<std::string> choices) {
  o.type = vt::choice;
  o.choices = std::move(choices);
  return o;
}

option_spec internal(option_spec o) {
  o.internal = true;
  return o;
}

argument_spec arg(std::string name, vt type = vt::text,
                  bool required = true) {
  return {std::move(name), type, required};
}

std::vector<command_spec> make_table() {
  std::vector<command_spec> t;
  auto add = [&](std::string name, std::string sub,
                 std::vector<argument_spec> args,
                 std::vector<option_spec> options, std::string help) {
    command_spec c;
    c.name = std::move(name);
    c.sub = std::move(sub);
    c.args = std::move(args);
    c.options = std::move(options);
    c.help = std::move(help);
    t.push_back(std::move(c));
    return &t.back();
  };
  // The gate's own commands.
  add("nodes", "", {}, {}, "members of the cluster and their status");
  add("devices", "", {}, {}, "every device of every live node");
  add("links", "", {}, {}, "measured links (RTT, jitter, loss, bandwidth)");
  add("measure", "", {}, {}, "measure the links from the connected node now");
  add("actors", "", {arg("NODE", vt::text, false)}, {},
      "actors of a node (default: the connected one)");
  add("inspect", "", {arg("[NODE:]ACTOR")}, {}, "the state of one actor");
  add("coordinator", "", {}, {}, "the current coordinator");
  add("services", "", {}, {}, "the commands of this node's services");
  add("leave", "", {}, {}, "this node leaves the cluster (admin)");
  // Placement.
  add("plan", "", {arg("MODEL.gguf", vt::text, false)},
      {[] {
         auto o = ranged(kv("ctx", vt::count, "N", "context length in tokens"),
                         0, 1e9);
         o.aliases = {"context"};
         return o;
       }(),
       choice(kv("objective", vt::text, "latency|throughput|blend",
                 "what the plan minimises"),
              {"latency", "throughput", "blend"}),
       ranged(kv("blend", vt::number, "W", "weight of latency in blend"), 0,
              1),
       ranged(kv("time-limit", vt::count, "MS", "solver time limit"), 1,
              50000),
       choice(kv("keep", vt::text, "yes|no",
                 "keep the plan as a job the coordinator re-plans"),
              {"yes", "no"}),
       dashed("json", vt::flag, "", "the plan as JSON"),
       dashed("problem", vt::text, "FILE.json",
              "plan a problem file instead of a model")},
      "place a model on the cluster's devices (the solver's plan)");
  add("plans", "", {}, {}, "the plans kept as jobs and their re-plans");
  // Thermal.
  add("thermal", "", {}, {}, "temperatures, predictions and paused devices");
  // Audit.
  add("audit", "query", {},
      {kv("type", vt::text, "T", "event type"),
       kv("principal", vt::text, "P", "who acted"),
       kv("since", vt::text, "TIME", "µs since the epoch or ISO 8601 UTC"),
       kv("until", vt::text, "TIME", "as since"),
       kv("after", vt::count, "SEQ", "records after this sequence number"),
       ranged(kv("limit", vt::count, "N", "at most N records"), 1, 10000)},
      "the records of this node's audit log that match");
  add("audit", "verify", {}, {}, "check this node's audit hash chain");
  // Access tokens.
  add("token", "check", {arg("TOKEN")},
      {kv("perm", vt::text, "PERMISSION", "the permission to check"),
       kv("device", vt::text, "DEVICE", "the device to check")},
      "what the access policy decides for a token");
  add("token", "issue", {},
      {kv("principal", vt::text, "P", "whom the token names (required)"),
       kv("role", vt::text, "ROLE", "granted role (user)"),
       kv("devices", vt::text, "D,D...", "devices it may use (*)"),
       kv("quota", vt::size, "SIZE", "memory quota: 4294967296, 4GiB, 512MB"),
       kv("ttl", vt::duration, "DURATION",
          "lifetime: 3600 (seconds), 90m, 12h, 7d (86400)")},
      "issue a bearer token (admin)");
  add("token", "revoke", {arg("TOKEN_ID", vt::text, false)},
      {kv("principal", vt::text, "P", "revoke every token of P"),
       internal(kv("through", vt::count, "T", "")),
       internal(kv("relay", vt::text, "1", ""))},
      "revoke a token, or every token of principal=P (admin)");
  add("token", "limit", {},
      {kv("principal", vt::text, "P", "whose rate (required)"),
       kv("rate", vt::text, "N[/s]", "operations per second (0: none)"),
       kv("burst", vt::text, "N", "burst size"),
       internal(kv("relay", vt::text, "1", ""))},
      "set a principal's rate limit (admin)");
  add("token", "limits", {}, {}, "the rate limits set on this node");
  // Device operations with a client's token.
  add("dev", "info", {arg("DEVICE")}, {}, "a device's state");
  add("dev", "alloc",
      {arg("DEVICE"), arg("SIZE", vt::size)},
      {}, "allocate memory (4096, 64MiB); prints the handle");
  add("dev", "free",
      {arg("DEVICE"), arg("HANDLE", vt::count)},
      {}, "free an allocation");
  add("dev", "sync", {arg("DEVICE")}, {}, "wait for the device's work");
  add("dev", "fault", {arg("DEVICE"), arg("FAULT")}, {},
      "inject a fault into a simulated device now (admin; test clusters): "
      "fail_allocations[:off], fail_next_allocation, vanished, "
      "vanish_after:N, heat:C, heat_after:N:C");
  // The workload.
  add("shards", "", {}, {}, "the shards hosted on this node");
  add("run", "", {},
      {dashed("model", vt::text, "FILE", "the model (GGUF, required)"),
       dashed("prompt", vt::text, "TEXT", "the prompt"),
       ranged(dashed("n", vt::count, "N", "tokens to generate (16)"), 0,
              1 << 20),
       dashed("seed", vt::count, "S", "sampling seed"),
       dashed("temperature", vt::number, "T", "0: greedy"),
       ranged(dashed("top-k", vt::count, "K", "sample from the K most likely"),
              0, 1 << 30),
       dashed("top-p", vt::number, "P", "nucleus sampling"),
       ranged(dashed("min-p", vt::number, "P",
                     "keep tokens at least P times as likely as the best"),
              0, 1),
       ranged(dashed("repetition-penalty", vt::number, "R",
                     "divide the logits of seen tokens by R"),
              0, 2),
       ranged(dashed("frequency-penalty", vt::number, "F",
                     "subtract F per time a token was generated"),
              -2, 2),
       ranged(dashed("presence-penalty", vt::number, "F",
                     "subtract F once from a token generated before"),
              -2, 2),
       dashed("json", vt::flag, "",
              "JSON mode: the text is one JSON object"),
       dashed("logit-bias", vt::text, "LIST",
              "ID=BIAS[,ID=BIAS...]: add BIAS to token ID's logit"),
       ranged(dashed("stages", vt::count, "K", "split evenly into K stages"),
              1, 1024),
       ranged(dashed("sequences", vt::count, "M",
                     "M copies of the prompt in flight at once"),
              1, 256),
       ranged(dashed("batch", vt::count, "B",
                     "at most B sequences in one step (batched decoding)"),
              1, 256),
       dashed("no-prompt-sharing", vt::flag, "",
              "compute each sequence's copy of the prompt (by default it "
              "is computed once: the same tokens)"),
       dashed("no-prefix-cache", vt::flag, "",
              "compute the whole prompt (by default rows an earlier job "
              "read on the same stages are copied: the same tokens)"),
       dashed("draft", vt::text, "FILE",
              "speculative decoding with this draft model (greedy runs)"),
       ranged(dashed("draft-tokens", vt::count, "K",
                     "tokens the draft proposes a round (4)"),
              1, 31),
       ranged(dashed("ctx", vt::count, "C", "context length"), 1, 1 << 24),
       choice(dashed("kv-type", vt::text, "f16|q8_0|f32",
                     "the KV cache's type: f16 (default), q8_0 (llama.cpp's "
                     "8-bit cache) or f32"),
              {"f16", "q8_0", "f32"}),
       dashed("chat", vt::flag, "",
              "the prompt is a user message in the model's chat template"),
       dashed("system", vt::text, "TEXT", "with --chat: a system message"),
       dashed("id", vt::text, "NAME",
              "name the job: attach NAME finds it from any node, also after "
              "its node died (exo-console names every run)")},
      "run a job on the cluster and print its text");
  t.back().options[0].min = 0; // --model: no range
  add("jobs", "", {}, {}, "the runs this node coordinates");
  add("cancel", "", {arg("JOB", vt::count)}, {},
      "stop a run at its next token");
  add("attach", "", {arg("JOB", vt::text)}, {},
      "wait for a running job (its --id, or NODE:ID as jobs shows it) from "
      "any node, also one taken over after its node died, and print its "
      "text");
  add("drain", "", {arg("NODE", vt::text)}, {},
      "move the stages that every run has on NODE (this node's and the "
      "other nodes') to other nodes, KV caches and all, before NODE "
      "leaves");
  // The client's own.
  add("help", "", {arg("COMMAND", vt::text, false)}, {},
      "this text, or one command's arguments and options")
    ->local = true;
  add("quit", "", {}, {}, "leave the console (also exit)")->local = true;
  add("exit", "", {}, {}, "leave the console")->local = true;
  t.back().internal = true; // listed with quit
  return t;
}

/// The subcommand word's noun in errors ("dev" calls them operations).
std::string sub_noun(const std::string& name) {
  return name == "dev" ? "operation" : "subcommand";
}

constexpr auto u64_max = std::numeric_limits<std::uint64_t>::max();

/// The table's double bounds as integers: [ceil(min), floor(max)], max
/// 2^64 (the default) meaning no bound.
std::uint64_t bound(double v) {
  if (!(v > 0))
    return 0;
  if (v >= 18446744073709551615.0)
    return u64_max;
  return static_cast<std::uint64_t>(v);
}

std::uint64_t lower_bound_of(double min) {
  auto b = bound(min);
  return static_cast<double>(b) < min ? b + 1 : b;
}

bool parse_count(const std::string& text, std::uint64_t& out) {
  try {
    out = text::parse_integer<std::uint64_t>(text);
    return true;
  } catch (const text::number_error&) {
    return false;
  }
}

bool parse_number(const std::string& text, double& out) {
  try {
    out = text::parse_real(text);
    return true;
  } catch (const text::number_error&) {
    return false;
  }
}

/// Checks `value` against a type; returns the error (empty when fine).
std::string check_value(const std::string& who, const std::string& value,
                        vt type, double min, double max,
                        const std::vector<std::string>& choices) {
  try {
    switch (type) {
      case vt::count:
        text::parse_integer<std::uint64_t>(value, lower_bound_of(min),
                                           bound(max), who);
        return {};
      case vt::number:
        text::parse_real(value, min, max, who);
        return {};
      case vt::size: {
        auto n = text::parse_size(value, bound(max), who);
        if (n < lower_bound_of(min))
          return who + ": '" + value + "' must be at least "
                 + text::format_size(lower_bound_of(min));
        return {};
      }
      case vt::duration:
        text::parse_duration_as<std::chrono::seconds>(
          value,
          std::chrono::seconds{static_cast<std::int64_t>(
            std::min<std::uint64_t>(bound(max), INT64_MAX))},
          who);
        return {};
      default:
        break;
    }
  } catch (const text::number_error& e) {
    return e.what();
  }
  switch (type) {
    case vt::choice: {
      std::string list;
      for (auto& c : choices) {
        if (c == value)
          return {};
        list += (list.empty() ? "" : ", ") + c;
      }
      return who + " must be one of " + list + ", not \""
             + value.substr(0, 64) + "\"";
    }
    default:
      return {};
  }
}

const option_spec* find_option(const command_spec& c, const std::string& key,
                               bool dashed_form) {
  for (auto& o : c.options) {
    if (o.dashed != dashed_form)
      continue;
    if (o.name == key)
      return &o;
    for (auto& a : o.aliases)
      if (a == key)
        return &o;
  }
  return nullptr;
}

std::string who_of(const command_spec& c) {
  return c.sub.empty() ? c.name : c.name + " " + c.sub;
}

parsed_command parse_words(const std::string& name,
                           std::vector<std::string> words) {
  const auto& table = command_table();
  const command_spec* plain = nullptr;
  bool has_subs = false;
  for (auto& c : table) {
    if (c.name != name)
      continue;
    if (c.sub.empty())
      plain = &c;
    else
      has_subs = true;
  }
  if (plain == nullptr && !has_subs)
    throw command_error("unknown command \"" + name.substr(0, 64) + "\"");
  parsed_command p;
  p.name = name;
  // auth=TOKEN goes with any command, anywhere on the line.
  for (auto it = words.begin(); it != words.end();) {
    if (it->rfind("auth=", 0) == 0) {
      if (p.has_auth)
        throw command_error("auth= given twice");
      p.has_auth = true;
      p.auth = it->substr(5);
      it = words.erase(it);
    } else {
      ++it;
    }
  }
  const command_spec* spec = plain;
  if (has_subs) {
    // The first word that is not a key=value option names the form.
    std::size_t first = 0;
    while (first < words.size() && words[first].find('=') != std::string::npos)
      ++first;
    const command_spec* sub = nullptr;
    if (first < words.size())
      for (auto& c : table)
        if (c.name == name && c.sub == words[first])
          sub = &c;
    if (sub != nullptr) {
      spec = sub;
      words.erase(words.begin() + static_cast<std::ptrdiff_t>(first));
    } else if (plain == nullptr) {
      auto noun = sub_noun(name);
      if (first >= words.size())
        throw command_error("no " + noun + " given");
      throw command_error("unknown " + noun + " \""
                          + words[first].substr(0, 64) + "\"");
    }
  }
  p.spec = spec;
  p.sub = spec->sub;
  auto who = who_of(*spec);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const auto& w = words[i];
    // A dashed word is an option; "-5" is a (bad) value, checked below.
    if (w.size() > 1 && w[0] == '-'
        && !std::isdigit(static_cast<unsigned char>(w[1])) && w[1] != '.') {
      auto key = w.substr(w[1] == '-' ? 2 : 1);
      std::string value;
      bool inline_value = false;
      if (auto eq = key.find('='); eq != std::string::npos) {
        value = key.substr(eq + 1);
        key.resize(eq);
        inline_value = true;
      }
      auto* o = find_option(*spec, key, true);
      if (o == nullptr)
        throw command_error("unknown option \"" + w.substr(0, 64) + "\"");
      if (o->type == vt::flag) {
        if (inline_value)
          throw command_error("--" + o->name + " takes no value");
        p.values[o->name] = "1";
        continue;
      }
      if (!inline_value) {
        if (i + 1 >= words.size())
          throw command_error("--" + o->name + " needs a value ("
                              + o->meta + ")");
        value = words[++i];
      }
      auto e = check_value("--" + o->name, value, o->type, o->min, o->max,
                           o->choices);
      if (!e.empty())
        throw command_error(e);
      p.values[o->name] = value;
      continue;
    }
    if (auto eq = w.find('='); eq != std::string::npos && eq > 0) {
      auto key = w.substr(0, eq);
      auto value = w.substr(eq + 1);
      auto* o = find_option(*spec, key, false);
      if (o == nullptr)
        throw command_error("unknown option \"" + key.substr(0, 64) + "\"");
      auto e = check_value(o->name, value, o->type, o->min, o->max,
                           o->choices);
      if (!e.empty())
        throw command_error(e);
      p.values[o->name] = value;
      continue;
    }
    p.args.push_back(w);
  }
  std::size_t min_args = 0;
  for (auto& a : spec->args)
    min_args += a.required ? 1 : 0;
  auto max_args = spec->args.size();
  if (p.args.size() > max_args && max_args <= 1 && min_args == 0)
    throw command_error("unexpected argument \""
                        + p.args[max_args].substr(0, 64) + "\"");
  if (p.args.size() < min_args || p.args.size() > max_args)
    throw command_error(
      (spec->sub.empty() ? spec->name : spec->sub) + " expects "
      + (min_args == max_args
           ? std::to_string(min_args)
           : std::to_string(min_args) + " to " + std::to_string(max_args))
      + " argument(s), got " + std::to_string(p.args.size()));
  for (std::size_t k = 0; k < p.args.size(); ++k) {
    auto& a = spec->args[k];
    auto e = check_value((spec->sub.empty() ? spec->name : spec->sub) + " "
                           + a.name,
                         p.args[k], a.type, 0, 18446744073709551616.0, {});
    if (!e.empty())
      throw command_error(e);
  }
  return p;
}

std::string option_synopsis(const option_spec& o) {
  std::string s = o.dashed ? (o.name.size() == 1 ? "-" : "--") + o.name
                           : o.name + "=";
  if (o.type != vt::flag)
    s += (o.dashed ? " " : "") + o.meta;
  return "[" + s + "]";
}

} // namespace

const std::vector<command_spec>& command_table() {
  static const std::vector<command_spec> table = make_table();
  return table;
}

bool parsed_command::has(const std::string& option) const {
  return values.count(option) != 0;
}

std::string parsed_command::text(const std::string& option,
                                 const std::string& fallback) const {
  auto it = values.find(option);
  return it == values.end() ? fallback : it->second;
}

std::uint64_t parsed_command::count(const std::string& option,
                                    std::uint64_t fallback) const {
  std::uint64_t n = fallback;
  auto it = values.find(option);
  if (it != values.end() && !parse_count(it->second, n))
    n = fallback;
  return n;
}

double parsed_command::number(const std::string& option,
                              double fallback) const {
  double x = fallback;
  auto it = values.find(option);
  if (it != values.end() && !parse_number(it->second, x))
    x = fallback;
  return x;
}

std::uint64_t parsed_command::size(const std::string& option,
                                   std::uint64_t fallback) const {
  auto it = values.find(option);
  if (it == values.end())
    return fallback;
  try {
    return text::parse_size(it->second);
  } catch (const text::number_error&) {
    return fallback;
  }
}

std::uint64_t parsed_command::seconds(const std::string& option,
                                      std::uint64_t fallback) const {
  auto it = values.find(option);
  if (it == values.end())
    return fallback;
  try {
    return static_cast<std::uint64_t>(
      text::parse_duration_as<std::chrono::seconds>(it->second).count());
  } catch (const text::number_error&) {
    return fallback;
  }
}

parsed_command parse_command(const std::string& name,
                             const std::string& arg) {
  std::vector<std::string> words;
  try {
    words = cli::split_words(arg);
  } catch (const std::invalid_argument& e) {
    throw command_error(e.what());
  }
  return parse_words(name, std::move(words));
}

parsed_command parse_line(const std::string& line) {
  std::vector<std::string> words;
  try {
    words = cli::split_words(line);
  } catch (const std::invalid_argument& e) {
    throw command_error(e.what());
  }
  if (words.empty())
    return {};
  auto name = words.front();
  words.erase(words.begin());
  return parse_words(name, std::move(words));
}

bool is_command(const std::string& name) {
  for (auto& c : command_table())
    if (c.name == name)
      return true;
  return false;
}

std::string synopsis(const command_spec& c) {
  std::string s = who_of(c);
  for (auto& a : c.args)
    s += " " + (a.required ? a.name : "[" + a.name + "]");
  for (auto& o : c.options)
    if (!o.internal)
      s += " " + option_synopsis(o);
  return s;
}

std::string help_text() {
  std::string out = "commands (help COMMAND for its options):\n";
  for (auto& c : command_table()) {
    if (c.internal)
      continue;
    auto s = who_of(c);
    for (auto& a : c.args)
      s += " " + (a.required ? a.name : "[" + a.name + "]");
    bool has_options = false;
    for (auto& o : c.options)
      has_options = has_options || !o.internal;
    if (has_options)
      s += " [OPTIONS]";
    out += "  " + s;
    out += s.size() < 26 ? std::string(26 - s.size(), ' ')
                         : "\n" + std::string(28, ' ');
    out += c.help + "\n";
  }
  out += "any command takes auth=TOKEN: checked against the token's "
         "permissions\n(exo-console --token-file FILE adds it to every "
         "command)\n";
  return out;
}

std::string help_text(const std::string& name) {
  std::string out;
  for (auto& c : command_table()) {
    if (c.name != name || c.internal)
      continue;
    out += synopsis(c) + "\n    " + c.help + "\n";
    for (auto& o : c.options) {
      if (o.internal)
        continue;
      auto s = option_synopsis(o);
      s = s.substr(1, s.size() - 2);
      out += "    " + s
             + (s.size() < 24 ? std::string(24 - s.size(), ' ')
                              : "\n" + std::string(28, ' '))
             + o.help + "\n";
    }
  }
  if (out.empty())
    throw command_error("unknown command \"" + name.substr(0, 64) + "\"");
  return out;
}

job_follow follow_reading(const std::string& msg) {
  if (msg.rfind("lost node ", 0) == 0)
    return job_follow::node_lost;
  if (msg.find(job_taken_over) != std::string::npos)
    return job_follow::taken_over;
  // The attach service's answer when no node has the job (its errc's
  // name first on the console's side).
  for (auto* head : {"attach: no job ", "invalid_argument: attach: no job "})
    if (msg.rfind(head, 0) == 0)
      return job_follow::not_found;
  return job_follow::ended;
}

std::string taken_over_by(const std::string& msg) {
  const std::string sep = job_taken_over;
  auto at = msg.rfind(sep);
  if (at == std::string::npos)
    return {};
  auto from = at + sep.size();
  auto end = msg.find_first_of(" \t\n;,()", from);
  return msg.substr(from, end == std::string::npos ? std::string::npos
                                                   : end - from);
}

std::vector<std::string> follow_order(const std::vector<std::string>& members,
                                      const std::string& prefer,
                                      const std::string& last) {
  std::vector<std::string> order;
  auto has = [&](const std::string& n) {
    return std::find(members.begin(), members.end(), n) != members.end();
  };
  if (!prefer.empty() && prefer != last && has(prefer))
    order.push_back(prefer);
  for (auto& m : members)
    if (m != prefer && m != last
        && std::find(order.begin(), order.end(), m) == order.end())
      order.push_back(m);
  if (!last.empty() && has(last))
    order.push_back(last);
  return order;
}

} // namespace exo::console
