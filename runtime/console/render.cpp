#include "runtime/console/render.hpp"

#include "core/text/json.hpp"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>

namespace exo::console {

namespace {

/// A table with columns sized to their widest cell.
class text_table {
public:
  explicit text_table(std::vector<std::string> header)
    : rows_{std::move(header)} {
  }
  void add(std::vector<std::string> row) {
    rows_.push_back(std::move(row));
  }
  std::string str() const {
    std::vector<std::size_t> w;
    for (auto& r : rows_)
      for (std::size_t i = 0; i < r.size(); ++i) {
        if (w.size() <= i)
          w.push_back(0);
        w[i] = std::max(w[i], r[i].size());
      }
    std::ostringstream out;
    for (auto& r : rows_) {
      for (std::size_t i = 0; i < r.size(); ++i) {
        out << r[i];
        if (i + 1 < r.size())
          out << std::string(w[i] - r[i].size() + 2, ' ');
      }
      out << "\n";
    }
    return out.str();
  }

private:
  std::vector<std::vector<std::string>> rows_;
};

std::string fixed(double v, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << v;
  return out.str();
}

std::string gib(std::uint64_t b) {
  return fixed(double(b) / double(1ull << 30), 1) + " GiB";
}

} // namespace

std::string table(const member_view& v, const std::string& coordinator) {
  text_table t{{"NODE", "ADDRESS", "STATUS", "DEVICES", "ROLE", "NOTE"}};
  for (auto& m : v.members)
    t.add({m.name, m.host + ":" + std::to_string(m.port), to_string(m.status),
           std::to_string(m.devices.size()),
           m.name == coordinator ? "coordinator" : "", m.status_reason});
  return t.str();
}

std::string table(const std::vector<device_info>& devices) {
  text_table t{{"NODE", "DEVICE", "BACKEND", "MEMORY", "FREE", "STATE",
                "NAME"}};
  for (auto& d : devices)
    t.add({d.node, d.id, d.backend, gib(d.total_memory), gib(d.free_memory),
           std::string{to_string(d.state)}
             + (d.state_reason.empty() ? "" : " (" + d.state_reason + ")"),
           d.name});
  return t.str();
}

std::string table(const std::vector<link_info>& links) {
  text_table t{{"FROM", "TO", "RTT p50", "RTT p99", "JITTER", "LOSS",
                "BANDWIDTH"}};
  for (auto& l : links)
    t.add({l.from, l.to, fixed(l.rtt_p50_us, 0) + " us",
           fixed(l.rtt_p99_us, 0) + " us", fixed(l.jitter_us, 0) + " us",
           fixed(l.loss * 100, 1) + "%",
           fixed(l.bandwidth_bps / 1e6, 1) + " MB/s"});
  return t.str();
}

std::string table(const std::vector<actor_snapshot>& actors) {
  text_table t{{"NODE", "ACTOR", "KIND", "STATE"}};
  for (auto& a : actors)
    t.add({a.node, a.name, a.kind, a.summary});
  return t.str();
}

std::string table(const actor_snapshot& a) {
  std::ostringstream out;
  out << a.name << " (" << a.kind << " on " << a.node << "): " << a.summary
      << "\n";
  text_table t{{"  FIELD", "VALUE"}};
  for (auto& [k, v] : a.fields)
    t.add({"  " + k, v});
  out << t.str();
  return out.str();
}

std::string json(const member_view& v, const std::string& coordinator) {
  text::json nodes = text::json::array();
  for (auto& m : v.members)
    nodes.push_back({{"name", m.name},
                     {"host", m.host},
                     {"port", m.port},
                     {"bulk_port", m.bulk_port},
                     {"status", to_string(m.status)},
                     {"incarnation", m.incarnation},
                     {"devices", m.devices.size()},
                     {"reason", m.status_reason}});
  return text::spaced({{"coordinator", coordinator}, {"nodes", nodes}})
         + "\n";
}

std::string json(const std::vector<device_info>& devices) {
  text::json out = text::json::array();
  for (auto& d : devices)
    out.push_back({{"node", d.node},
                   {"id", d.id},
                   {"backend", d.backend},
                   {"name", d.name},
                   {"simulated", d.simulated},
                   {"total_memory", d.total_memory},
                   {"free_memory", d.free_memory},
                   {"clock_mhz", d.clock_mhz},
                   {"compute_units", d.compute_units},
                   {"peak_flops", text::number(d.peak_flops, 12)},
                   {"memory_bandwidth", text::number(d.memory_bandwidth, 12)},
                   {"launch_seconds", text::number(d.launch_seconds, 12)},
                   {"state", to_string(d.state)}});
  return text::spaced(out) + "\n";
}

std::string json(const std::vector<link_info>& links) {
  text::json out = text::json::array();
  for (auto& l : links)
    out.push_back({{"from", l.from},
                   {"to", l.to},
                   {"rtt_p50_us", text::number(l.rtt_p50_us, 12)},
                   {"rtt_p99_us", text::number(l.rtt_p99_us, 12)},
                   {"jitter_us", text::number(l.jitter_us, 12)},
                   {"loss", text::number(l.loss, 12)},
                   {"bandwidth_bps", text::number(l.bandwidth_bps, 12)}});
  return text::spaced(out) + "\n";
}

namespace {

text::json snapshot_json(const actor_snapshot& a) {
  text::json fields = text::json::object();
  for (auto& [k, v] : a.fields)
    fields[k] = v;
  return {{"node", a.node},
          {"name", a.name},
          {"kind", a.kind},
          {"summary", a.summary},
          {"fields", fields}};
}

} // namespace

std::string json(const std::vector<actor_snapshot>& actors) {
  text::json out = text::json::array();
  for (auto& a : actors)
    out.push_back(snapshot_json(a));
  return text::spaced(out) + "\n";
}

std::string json(const actor_snapshot& a) {
  return text::spaced(snapshot_json(a)) + "\n";
}

} // namespace exo::console
