#include "core/placement/explain.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>

namespace exo::placement {

namespace {

std::string gib(std::uint64_t b) {
  return format_bytes(static_cast<double>(b));
}

std::string layers_text(std::size_t a, std::size_t b) {
  return a == b ? "layer " + std::to_string(a)
                : "layers " + std::to_string(a) + "-" + std::to_string(b);
}

} // namespace

std::vector<std::string> explain_infeasible(const problem& p) {
  std::vector<std::string> out;
  const auto L = p.layers.size();
  std::vector<std::size_t> elig;
  std::size_t excluded = 0, drained = 0;
  for (std::size_t i = 0; i < p.devices.size(); ++i) {
    if (p.devices[i].eligible())
      elig.push_back(i);
    else if (p.devices[i].excluded)
      ++excluded;
    else
      ++drained;
  }
  if (elig.empty()) {
    out.push_back("every device is excluded or drained (" +
                  std::to_string(excluded) + " excluded, " +
                  std::to_string(drained) + " drained)");
    return out;
  }
  // Pins.
  std::vector<long> owner(L, -1);
  for (const auto& pin : p.constraints.pins) {
    auto d = *p.find_device(pin.device);
    const auto& dev = p.devices[d];
    if (!dev.eligible())
      out.push_back(layers_text(pin.first_layer, pin.last_layer)
                    + " are pinned to " + dev.id + ", which is "
                    + (dev.excluded ? "excluded" : "drained"));
    for (auto l = pin.first_layer; l <= pin.last_layer; ++l) {
      if (owner[l] >= 0 && owner[l] != static_cast<long>(d)) {
        out.push_back("layer " + std::to_string(l) + " is pinned to both "
                      + p.devices[owner[l]].id + " and " + dev.id);
        break;
      }
      owner[l] = static_cast<long>(d);
    }
  }
  for (std::size_t d = 0; d < p.devices.size(); ++d) {
    std::size_t lo = L, hi = 0;
    for (std::size_t l = 0; l < L; ++l)
      if (owner[l] == static_cast<long>(d)) {
        lo = std::min(lo, l);
        hi = l;
      }
    if (lo == L || !p.devices[d].eligible())
      continue;
    const std::uint64_t need = p.stage_memory(lo, hi + 1);
    if (need > p.usable_memory(d))
      out.push_back(layers_text(lo, hi) + " pinned to " + p.devices[d].id
                    + " need " + gib(need) + " but it has "
                    + gib(p.usable_memory(d)) + " usable");
  }
  // Must-use devices against the stage limit.
  std::size_t must = 0;
  for (auto d : elig) {
    bool pinned_layers = false;
    for (const auto& pin : p.constraints.pins)
      pinned_layers = pinned_layers || pin.device == p.devices[d].id;
    if (p.devices[d].pinned || pinned_layers)
      ++must;
  }
  for (const auto& d : p.devices)
    if (d.pinned && !d.eligible())
      out.push_back("device " + d.id + " is pinned but "
                    + (d.excluded ? "excluded" : "drained"));
  const std::size_t max_st =
    p.constraints.max_stages > 0
      ? std::min(p.constraints.max_stages, elig.size())
      : elig.size();
  if (must > max_st)
    out.push_back(std::to_string(must)
                  + " devices must be used (pinned) but max_stages is "
                  + std::to_string(p.constraints.max_stages));
  // Single layers too large for every device.
  std::uint64_t largest = 0;
  std::size_t largest_d = elig[0];
  for (auto d : elig)
    if (p.usable_memory(d) > largest) {
      largest = p.usable_memory(d);
      largest_d = d;
    }
  std::size_t too_big = 0;
  for (std::size_t l = 0; l < L; ++l) {
    // The smallest stage holding layer l: the layer and its stage's
    // working memory.
    const auto alone = p.stage_memory(l, l + 1);
    if (alone <= largest)
      continue;
    const auto over = p.stage_overhead(l, l + 1);
    if (too_big++ < 3)
      out.push_back("layer " + std::to_string(l) + " alone needs "
                    + gib(alone)
                    + (over > 0 ? " (" + gib(over) + " of it the stage's "
                                    "working memory)"
                                : std::string{})
                    + " and no device has it (the most usable is "
                    + gib(largest) + " on " + p.devices[largest_d].id + ")");
  }
  if (too_big > 3)
    out.push_back("... and " + std::to_string(too_big - 3)
                  + " more layers too large for every device");
  for (std::size_t l = 0; l < L; ++l) {
    bool fits = false;
    for (auto d : elig) {
      double cap = p.devices[d].max_flops_per_token;
      fits = fits || cap == 0 || p.layers[l].flops_per_token <= cap;
    }
    if (!fits) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.3g", p.layers[l].flops_per_token);
      out.push_back("layer " + std::to_string(l) + " alone needs " + buf
                    + " FLOPs per token, over every device's thermal cap");
      break;
    }
  }
  // Total memory, over the devices a plan may use. A plan of k stages
  // needs the layers plus k stages' working memory (and the first and last
  // stages' extras) and has at most the k largest devices: the model fits
  // nowhere when every k falls short; the smallest shortfall is reported.
  const auto& extra = p.stage_memory_extra;
  std::uint64_t layers_need = 0;
  for (std::size_t l = 0; l < L; ++l)
    layers_need += p.layer_memory(l);
  auto need_k = [&](std::size_t k) {
    return layers_need + k * extra.every_stage + extra.first_stage
           + extra.last_stage;
  };
  std::vector<std::uint64_t> caps;
  for (auto d : elig)
    caps.push_back(p.usable_memory(d));
  std::sort(caps.begin(), caps.end(), std::greater<>());
  struct fit {
    std::size_t k = 0;
    std::uint64_t need = 0, have = 0;
    bool short_of() const { return need > have; }
  };
  // The k (up to `limit`) whose shortfall is smallest (or that fits).
  auto best_k = [&](std::size_t limit) {
    fit best;
    std::uint64_t have = 0;
    for (std::size_t k = 1; k <= limit && k <= caps.size(); ++k) {
      have += caps[k - 1];
      fit f{k, need_k(k), have};
      auto gap = [](const fit& x) {
        return static_cast<long double>(x.need)
               - static_cast<long double>(x.have);
      };
      if (best.k == 0 || gap(f) < gap(best))
        best = f;
    }
    return best;
  };
  const auto all = best_k(caps.size());
  const auto limited = best_k(max_st);
  const std::string working =
    extra.every_stage + extra.first_stage + extra.last_stage > 0
      ? ", with " + gib(extra.every_stage) + " of working memory per stage"
          + (extra.first_stage > 0
               ? " + " + gib(extra.first_stage) + " on the first"
               : std::string{})
          + (extra.last_stage > 0
               ? " + " + gib(extra.last_stage) + " on the last"
               : std::string{})
      : std::string{};
  const std::uint64_t need = all.need;
  const std::uint64_t have = limited.have;
  if (all.short_of())
    out.push_back("total free memory is " + gib(all.need - all.have)
                  + " short: the model needs " + gib(all.need) + " (context "
                  + std::to_string(p.request.context_length)
                  + " tokens"
                  + (p.request.sequences > 1
                       ? " x " + std::to_string(p.request.sequences)
                           + " sequences"
                       : std::string{})
                  + working + ", safety margin "
                  + std::to_string(static_cast<int>(
                      p.request.safety_margin * 100 + 0.5))
                  + "%) and "
                  + (caps.size() == 1 ? std::string{"the one usable device has "}
                     : all.k == caps.size()
                       ? "the " + std::to_string(caps.size())
                           + " usable devices have "
                     : all.k == 1 ? std::string{"the largest usable device has "}
                                  : "the " + std::to_string(all.k)
                                      + " largest usable devices have ")
                  + gib(all.have));
  else if (limited.short_of())
    out.push_back("with at most " + std::to_string(max_st)
                  + " stages the largest devices give " + gib(limited.have)
                  + ", " + gib(limited.need - limited.have)
                  + " short of the " + gib(limited.need)
                  + " needed; raise max_stages");
  if (out.empty())
    out.push_back("the layers do not pack into contiguous ranges on the "
                  "devices (need " + gib(need) + ", usable " + gib(have)
                  + "): add memory, shorten the context or relax the "
                  "constraints");
  return out;
}

} // namespace exo::placement
