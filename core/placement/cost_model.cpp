#include "core/placement/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace exo::placement {

cost_model::cost_model(const problem& p) : p_(&p) {
  layers_ = p.layers.size();
  const auto L = layers_;
  kind_ = p.objective.kind;
  blend_pct_ = static_cast<int>(std::lround(p.objective.blend_weight * 100));
  for (std::size_t i = 0; i < p.devices.size(); ++i)
    if (p.devices[i].eligible())
      dev_.push_back(i);
  const auto n = dev_.size();
  // Nodes of the eligible devices, in order of first appearance.
  std::map<std::string, int> node_index;
  std::vector<std::string> node_names;
  for (auto i : dev_) {
    auto [it, fresh] = node_index.emplace(p.devices[i].node,
                                          static_cast<int>(node_names.size()));
    if (fresh)
      node_names.push_back(p.devices[i].node);
    node_.push_back(it->second);
  }
  node_count_ = node_names.size();
  // Transfer seconds per node pair and cut: latency + activation bytes /
  // bandwidth, computed again below in ticks (not kept as a table of
  // doubles: 64 MB for 250 nodes and 128 layers). The largest over the cuts
  // is the one of the largest activation, as the division and the addition
  // are monotone.
  const link_index links(p);
  std::vector<link_spec> specs;
  specs.reserve(node_count_ * node_count_);
  for (std::size_t a = 0; a < node_count_; ++a)
    for (std::size_t b = 0; b < node_count_; ++b)
      specs.push_back(links.between(node_names[a], node_names[b]));
  auto seconds = [&p](const link_spec& spec, std::size_t cut) {
    return spec.latency
           + static_cast<double>(p.layers[cut - 1].activation_bytes)
               / spec.bandwidth;
  };
  double max_x = 0;
  if (L > 1) {
    // Cut c passes layer c - 1's activations: cuts 1 .. L - 1.
    const auto widest = std::max_element(
      p.layers.begin(), p.layers.begin() + (L - 1),
      [](const layer& x, const layer& y) {
        return x.activation_bytes < y.activation_bytes;
      });
    const auto cut = static_cast<std::size_t>(widest - p.layers.begin()) + 1;
    for (const auto& spec : specs)
      max_x = std::max(max_x, seconds(spec, cut));
  }
  // Pick the tick so that the worst conceivable objective stays far below
  // Gecode's integer limit (~2.1e9).
  double worst = 0;
  for (std::size_t l = 0; l < L; ++l) {
    double m = 0;
    for (auto i : dev_)
      m = std::max(m, p.layer_seconds(i, l));
    worst += m;
  }
  double pen_s = p.constraints.prefer_fewer_nodes ? p.constraints.node_penalty
                                                  : 0.0;
  worst += static_cast<double>(n) * (max_x + pen_s);
  const double units_per_tick = kind_ == objective_kind::blend ? 100 : 1;
  tick_ = 1e-7;
  while (worst / tick_ * units_per_tick > 1e9)
    tick_ *= 10;
  auto ticks = [this](double s) {
    return static_cast<std::int64_t>(std::llround(s / tick_));
  };
  xfer_.assign(specs.size() * (L + 1), 0);
  for (std::size_t ab = 0; ab < specs.size(); ++ab)
    for (std::size_t c = 1; c < L; ++c)
      xfer_[ab * (L + 1) + c] = ticks(seconds(specs[ab], c));
  cheapest_.assign(node_count_ * node_count_, 0);
  for (std::size_t ab = 0; ab < cheapest_.size() && L > 1; ++ab)
    cheapest_[ab] = *std::min_element(xfer_.begin() + ab * (L + 1) + 1,
                                      xfer_.begin() + ab * (L + 1) + L);
  node_penalty_ = ticks(pen_s);
  // Time prefix sums of per-layer ticks: identical layers cost identical
  // ticks wherever they sit, so a stage's time depends on its layers, not
  // on its position (the lower bounds count layers, the node-block program
  // moves ranges; neither would meet a plan whose cost drifts by a tick
  // with the position of its cuts).
  cum_.assign(n * (L + 1), 0);
  for (std::size_t d = 0; d < n; ++d) {
    std::int64_t acc = 0;
    for (std::size_t l = 0; l < L; ++l) {
      acc += ticks(p.layer_seconds(dev_[d], l));
      cum_[d * (L + 1) + l + 1] = acc;
    }
  }
  // Pinned layers: owner per layer (-1 none, -2 conflicting pins).
  std::vector<long> owner(L, -1);
  std::vector<char> has_pins(p.devices.size(), 0);
  for (const auto& pin : p.constraints.pins) {
    auto d = static_cast<long>(*p.find_device(pin.device));
    has_pins[d] = 1;
    for (auto l = pin.first_layer; l <= pin.last_layer; ++l)
      owner[l] = (owner[l] == -1 || owner[l] == d) ? d : -2;
  }
  // max_end: memory (layers plus the stage's working memory: every stage's,
  // the first stage's from b = 0, the last stage's at e = L), thermal cap
  // and foreign pinned layers, all exact. Feasible ends stay a range
  // b+1..max_end: the last stage's extra only removes e = L.
  max_end_.assign(n * (L + 1), 0);
  const auto& extra = p.stage_memory_extra;
  for (std::size_t d = 0; d < n; ++d) {
    auto pd = dev_[d];
    const auto cap = p.usable_memory(pd);
    const double fcap = p.devices[pd].max_flops_per_token;
    for (std::size_t b = 0; b <= L; ++b) {
      std::size_t e = b;
      std::uint64_t mem = extra.every_stage + (b == 0 ? extra.first_stage : 0);
      double fl = 0;
      while (e < L) {
        if (owner[e] != -1 && owner[e] != static_cast<long>(pd))
          break;
        mem += p.layer_memory(e);
        fl += p.layers[e].flops_per_token;
        const auto need = mem + (e + 1 == L ? extra.last_stage : 0);
        if (need > cap || (fcap > 0 && fl > fcap))
          break;
        ++e;
      }
      max_end_[d * (L + 1) + b] = static_cast<int>(e);
    }
  }
  // Resident layers: what each device would have to receive per layer, in
  // bytes (reported) and in time over the links (the tie-break): from the
  // fastest device that holds the layer (drained and excluded ones too:
  // their weights are still there), through the link between their nodes
  // (intra_node on one node); a layer nobody holds is read from a local
  // cache, as fast everywhere.
  if (!p.resident.empty()) {
    std::vector<std::vector<char>> holds(n, std::vector<char>(L, 0));
    std::vector<std::vector<std::size_t>> holders(L);
    std::map<std::string, std::size_t> model_index;
    for (std::size_t d = 0; d < n; ++d)
      model_index[p.devices[dev_[d]].id] = d;
    for (const auto& r : p.resident) {
      auto pd = p.find_device(r.device);
      if (!pd)
        continue;
      for (auto l = r.first_layer; l <= r.last_layer && l < L; ++l)
        holders[l].push_back(*pd);
      auto it = model_index.find(r.device);
      if (it == model_index.end())
        continue; // an excluded or drained device: not in the model
      for (auto l = r.first_layer; l <= r.last_layer && l < L; ++l)
        holds[it->second][l] = 1;
    }
    // Seconds to bring `bytes` from node a to node b.
    std::map<std::pair<std::string, std::string>, double> per_byte, fixed;
    auto link = [&](const std::string& a, const std::string& b) {
      auto key = std::make_pair(a, b);
      if (per_byte.count(key) == 0) {
        double pb = -1, lat = 0;
        try {
          const auto spec = links.between(a, b);
          if (spec.bandwidth > 0) {
            pb = 1.0 / spec.bandwidth;
            lat = spec.latency;
          }
        } catch (const problem_error&) {
        }
        per_byte[key] = pb;
        fixed[key] = lat;
      }
      return std::make_pair(per_byte[key], fixed[key]);
    };
    const double local = 1.0 / p.intra_node.bandwidth;
    moved_.assign(n * (L + 1), 0);
    moved_bytes_.assign(n * (L + 1), 0);
    for (std::size_t d = 0; d < n; ++d) {
      const auto& to = p.devices[dev_[d]].node;
      for (std::size_t l = 0; l < L; ++l) {
        const auto bytes = static_cast<double>(p.layers[l].weight_bytes);
        std::int64_t us = 0, b = 0;
        if (!holds[d][l]) {
          double best = bytes * local;
          bool found = false;
          for (auto h : holders[l]) {
            auto [pb, lat] = link(p.devices[h].node, to);
            if (pb < 0)
              continue;
            const double t = lat + bytes * pb;
            if (!found || t < best)
              best = t;
            found = true;
          }
          us = std::max<std::int64_t>(1, std::llround(best * 1e6));
          b = static_cast<std::int64_t>(p.layers[l].weight_bytes);
        }
        moved_[d * (L + 1) + l + 1] = moved_[d * (L + 1) + l] + us;
        moved_bytes_[d * (L + 1) + l + 1] = moved_bytes_[d * (L + 1) + l] + b;
      }
    }
  }
  must_use_.resize(n);
  for (std::size_t d = 0; d < n; ++d)
    must_use_[d] = p.devices[dev_[d]].pinned || has_pins[dev_[d]];
  max_stages_ = n;
  if (p.constraints.max_stages > 0)
    max_stages_ = std::min(max_stages_, p.constraints.max_stages);
  // Kinds of alike devices, then classes: a kind's devices on one node.
  kind_of_.assign(n, -1);
  for (std::size_t d = 0; d < n; ++d) {
    if (kind_of_[d] >= 0)
      continue;
    auto k = static_cast<int>(kind_rep_.size());
    kind_rep_.push_back(static_cast<int>(d));
    kind_of_[d] = k;
    for (std::size_t e = d + 1; e < n; ++e) {
      if (kind_of_[e] >= 0 || must_use_[e] != must_use_[d])
        continue;
      bool same = true;
      for (std::size_t l = 0; l <= L && same; ++l)
        same = cum_[d * (L + 1) + l] == cum_[e * (L + 1) + l]
               && max_end_[d * (L + 1) + l] == max_end_[e * (L + 1) + l]
               && (moved_.empty()
                   || moved_[d * (L + 1) + l] == moved_[e * (L + 1) + l]);
      if (same)
        kind_of_[e] = k;
    }
  }
  class_of_.assign(n, -1);
  for (std::size_t d = 0; d < n; ++d) {
    if (class_of_[d] >= 0)
      continue;
    auto k = static_cast<int>(members_.size());
    members_.push_back({static_cast<int>(d)});
    class_of_[d] = k;
    for (std::size_t e = d + 1; e < n; ++e)
      if (class_of_[e] < 0 && node_[e] == node_[d]
          && kind_of_[e] == kind_of_[d]) {
        class_of_[e] = k;
        members_[k].push_back(static_cast<int>(e));
      }
  }
}

std::int64_t cost_model::combine(std::int64_t latency, std::int64_t bottleneck,
                                 std::int64_t penalty) const {
  switch (kind_) {
    case objective_kind::latency:
      return latency + penalty;
    case objective_kind::throughput:
      return bottleneck + penalty;
    case objective_kind::blend:
      return blend_pct_ * latency + (100 - blend_pct_) * bottleneck
             + 100 * penalty;
  }
  return 0;
}

evaluation cost_model::evaluate(const assignment& a) const {
  evaluation ev;
  std::vector<char> seen(node_count_, 0);
  for (std::size_t s = 0; s < a.size(); ++s) {
    auto c = stage_time(a[s].device, a[s].first, a[s].end);
    ev.latency += c;
    ev.bottleneck = std::max(ev.bottleneck, c);
    if (!seen[node_[a[s].device]]) {
      seen[node_[a[s].device]] = 1;
      ++ev.nodes_used;
    }
    ev.moved += moving_cost(a[s].device, a[s].first, a[s].end);
    ev.moved_bytes += moved_bytes(a[s].device, a[s].first, a[s].end);
    if (s + 1 < a.size()) {
      auto t = transfer(a[s].device, a[s + 1].device, a[s].end);
      ev.latency += t;
      ev.bottleneck = std::max(ev.bottleneck, t);
    }
  }
  ev.penalty = ev.nodes_used > 1 ? node_penalty_ * (ev.nodes_used - 1) : 0;
  ev.objective = combine(ev.latency, ev.bottleneck, ev.penalty);
  return ev;
}

} // namespace exo::placement
