#include "core/placement/random_problem.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace exo::placement {

namespace {

/// A tiny portable generator so instances are the same everywhere.
class rng {
public:
  explicit rng(std::uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ULL + 1) {
  }
  std::uint64_t next() {
    s_ += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = s_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  std::size_t below(std::size_t n) {
    return static_cast<std::size_t>(next() % n);
  }

private:
  std::uint64_t s_;
};

} // namespace

problem random_problem(const random_problem_options& o) {
  rng r(o.seed);
  problem p;
  p.model_name = "random";
  p.request.context_length = 4096;
  p.request.safety_margin = 0.05;
  p.objective.kind = o.objective;
  p.objective.blend_weight = 0.5;
  const auto L = std::max<std::size_t>(o.layers, 1);
  const double base = 400e6;
  std::uint64_t need = 0;
  for (std::size_t l = 0; l < L; ++l) {
    layer y;
    double scale = (l == 0 || l + 1 == L) ? 2.0 : r.uniform(0.8, 1.2);
    y.weight_bytes = static_cast<std::uint64_t>(base * scale);
    y.kv_bytes_per_token = 4096;
    y.flops_per_token = 2.0 * static_cast<double>(y.weight_bytes) / 4.0;
    y.activation_bytes = l + 1 == L ? 0 : 16384;
    p.layers.push_back(y);
    need += y.weight_bytes + y.kv_bytes_per_token * p.request.context_length;
  }
  if (o.working_memory) {
    auto& x = p.stage_memory_extra;
    x.every_stage = static_cast<std::uint64_t>(base * r.uniform(0.05, 0.3));
    x.first_stage = static_cast<std::uint64_t>(base * r.uniform(0.0, 0.5));
    x.last_stage = static_cast<std::uint64_t>(base * r.uniform(0.2, 1.0));
    need += x.every_stage * std::max<std::size_t>(o.devices / 2, 1)
            + x.first_stage + x.last_stage;
  }
  const auto D = std::max<std::size_t>(o.devices, 1);
  const auto N = std::max<std::size_t>(std::min(o.nodes, D), 1);
  std::vector<double> share(D);
  for (std::size_t d = 0; d < D; ++d) {
    device dev;
    bool copy = d > 0 && d + o.identical >= D;
    if (copy) {
      dev = p.devices[d - 1];
      share[d] = share[d - 1];
    } else {
      dev.node = "n" + std::to_string(d < N ? d : r.below(N));
      dev.flops = std::pow(10.0, r.uniform(12.0, 14.0));
      dev.memory_bandwidth = dev.flops * r.uniform(5, 20);
      dev.thermal_headroom = r.uniform(0.2, 1.0);
      share[d] = r.uniform(0.5, 1.5);
      if (o.thermal_caps && r.below(3) == 0) {
        double total = 0;
        for (const auto& y : p.layers)
          total += y.flops_per_token;
        dev.max_flops_per_token = total * r.uniform(0.1, 0.4);
      }
    }
    dev.id = "dev" + std::to_string(d);
    p.devices.push_back(dev);
  }
  double sum = 0;
  for (auto s : share)
    sum += s;
  for (std::size_t d = 0; d < D; ++d)
    p.devices[d].memory_bytes = static_cast<std::uint64_t>(
      static_cast<double>(need) * o.memory_slack * share[d] / sum / 0.95);
  std::vector<char> present(N, 0);
  for (const auto& d : p.devices)
    present[std::stoul(d.node.substr(1))] = 1;
  for (std::size_t a = 0; a < N; ++a)
    for (std::size_t b = a + 1; b < N; ++b) {
      link k{"n" + std::to_string(a), "n" + std::to_string(b),
             link_spec{r.uniform(5e-5, 2e-3),
                       std::pow(10.0, r.uniform(8.0, 10.0))}};
      if (present[a] && present[b])
        p.links.push_back(k);
    }
  p.intra_node = link_spec{1e-5, 25e9};
  if (o.operator_constraints) {
    auto pd = r.below(D);
    auto first = r.below(L);
    p.constraints.pins.push_back(
      {p.devices[pd].id, first, std::min(L - 1, first + r.below(2))});
    p.devices[r.below(D)].pinned = true;
    auto ex = r.below(D);
    if (ex != pd && !p.devices[ex].pinned)
      p.devices[ex].excluded = true;
    p.constraints.max_stages = 1 + r.below(D);
    p.constraints.prefer_fewer_nodes = r.below(2) == 0;
    p.constraints.node_penalty = 1e-3;
  }
  return p;
}

} // namespace exo::placement

namespace exo::placement {

problem random_cluster(const random_cluster_options& o) {
  rng r(o.seed);
  problem p;
  p.model_name = "cluster";
  p.request.context_length = 4096;
  p.request.safety_margin = 0.05;
  p.objective.kind = o.objective;
  p.objective.blend_weight = 0.5;
  const auto L = std::max<std::size_t>(o.layers, 2);
  // A transformer: identical blocks; the first carries the embeddings, the
  // last the output head.
  const double block = 400e6;
  std::uint64_t need = 0;
  for (std::size_t l = 0; l < L; ++l) {
    layer y;
    double scale = l == 0 ? 1.5 : l + 1 == L ? 2.5 : 1.0;
    y.weight_bytes = static_cast<std::uint64_t>(block * scale);
    y.kv_bytes_per_token = 8192;
    y.flops_per_token = 2.0 * block / 2.0 * scale;
    y.activation_bytes = l + 1 == L ? 0 : 16384;
    p.layers.push_back(y);
    need += y.weight_bytes + y.kv_bytes_per_token * p.request.context_length;
  }
  struct gpu {
    double flops, bandwidth, share;
  };
  struct kind {
    gpu a, b;
    link_spec nic;
  };
  const auto K = std::max<std::size_t>(o.node_kinds, 1);
  const auto N = std::max<std::size_t>(o.nodes, 1);
  const auto per = std::max<std::size_t>(o.devices_per_node, 1);
  auto make_gpu = [&] {
    gpu g;
    g.flops = std::pow(10.0, r.uniform(12.5, 14.5));
    g.bandwidth = g.flops * r.uniform(2, 10);
    g.share = r.uniform(0.5, 2.0);
    return g;
  };
  std::vector<kind> kinds;
  for (std::size_t k = 0; k < K; ++k) {
    kind x;
    x.a = make_gpu();
    x.b = o.two_device_kinds ? make_gpu() : x.a;
    x.nic = o.mixed_nics
              ? link_spec{r.uniform(5e-6, 5e-5),
                          std::pow(10.0, r.uniform(9.0, 10.1))}
              : link_spec{1e-5, 1.25e9};
    kinds.push_back(x);
  }
  std::vector<double> share;
  for (std::size_t i = 0; i < N; ++i) {
    const auto& x = kinds[i % K];
    for (std::size_t j = 0; j < per; ++j) {
      const gpu& g = j < (per + 1) / 2 ? x.a : x.b;
      device d;
      d.node = "n" + std::to_string(i);
      d.id = d.node + "/gpu" + std::to_string(j);
      d.flops = g.flops;
      d.memory_bandwidth = g.bandwidth;
      p.devices.push_back(d);
      share.push_back(g.share);
    }
  }
  double sum = 0;
  for (auto s : share)
    sum += s;
  for (std::size_t d = 0; d < p.devices.size(); ++d)
    p.devices[d].memory_bytes = static_cast<std::uint64_t>(
      static_cast<double>(need) * o.memory_slack * share[d] / sum / 0.95);
  for (std::size_t a = 0; a < N; ++a)
    for (std::size_t b = a + 1; b < N; ++b) {
      const auto& x = kinds[a % K].nic;
      const auto& y = kinds[b % K].nic;
      p.links.push_back({"n" + std::to_string(a), "n" + std::to_string(b),
                         link_spec{x.latency + y.latency,
                                   std::min(x.bandwidth, y.bandwidth)}});
    }
  p.intra_node = link_spec{5e-6, 50e9};
  return p;
}

} // namespace exo::placement
