#include "actors/placement/explain.hpp"

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
    std::uint64_t need = 0;
    for (auto l = lo; l <= hi; ++l)
      need += p.layer_memory(l);
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
    if (p.layer_memory(l) <= largest)
      continue;
    if (too_big++ < 3)
      out.push_back("layer " + std::to_string(l) + " alone needs "
                    + gib(p.layer_memory(l))
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
  // Total memory, over the devices a plan may use.
  std::uint64_t need = 0;
  for (std::size_t l = 0; l < L; ++l)
    need += p.layer_memory(l);
  std::vector<std::uint64_t> caps;
  for (auto d : elig)
    caps.push_back(p.usable_memory(d));
  std::sort(caps.begin(), caps.end(), std::greater<>());
  std::uint64_t have_all = 0, have = 0;
  for (std::size_t i = 0; i < caps.size(); ++i) {
    have_all += caps[i];
    if (i < max_st)
      have += caps[i];
  }
  if (need > have_all)
    out.push_back("total free memory is " + gib(need - have_all)
                  + " short: the model needs " + gib(need) + " (context "
                  + std::to_string(p.request.context_length)
                  + " tokens, safety margin "
                  + std::to_string(static_cast<int>(
                      p.request.safety_margin * 100 + 0.5))
                  + "%) and the " + std::to_string(elig.size())
                  + " usable devices have " + gib(have_all));
  else if (need > have)
    out.push_back("with at most " + std::to_string(max_st)
                  + " stages the largest devices give " + gib(have)
                  + ", " + gib(need - have) + " short of the "
                  + gib(need) + " needed; raise max_stages");
  if (out.empty())
    out.push_back("the layers do not pack into contiguous ranges on the "
                  "devices (need " + gib(need) + ", usable " + gib(have)
                  + "): add memory, shorten the context or relax the "
                  "constraints");
  return out;
}

} // namespace exo::placement
