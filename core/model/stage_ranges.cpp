#include "core/model/stage_ranges.hpp"

#include <algorithm>
#include <string>

namespace exo::model {

std::vector<byte_range> stage_file_ranges(const llama_model& m,
                                          std::uint32_t first,
                                          std::uint32_t last) {
  auto& hp = m.hparams();
  if (first >= last || last > hp.n_layer)
    throw model_error("layer range [" + std::to_string(first) + ", "
                      + std::to_string(last) + ") is not inside the "
                      + std::to_string(hp.n_layer) + " layers");
  auto& f = m.file();
  // Each range belongs to a unit (the header, one layer, one of the
  // global tensors); ranges merge only within their unit, so the parts of
  // one layer are the same whichever stage asks for it, and a node that
  // ran layers [2, 4) and now runs [3, 6) lacks only layers 4 and 5.
  struct unit_range {
    std::string unit;
    byte_range r;
  };
  std::vector<unit_range> rs{{"header", {0, f.data_offset()}}};
  for (auto& t : f.tensors()) {
    auto& n = t.name;
    std::string unit;
    if (n.rfind("blk.", 0) == 0) {
      auto dot = n.find('.', 4);
      auto layer = n.substr(4, dot == std::string::npos ? dot : dot - 4);
      if (!layer.empty()
          && layer.find_first_not_of("0123456789") == std::string::npos
          && layer.size() < 10) {
        auto l = std::stoul(layer);
        if (l >= first && l < last)
          unit = "blk." + layer;
      }
    } else if (n == "token_embd.weight") {
      if (first == 0 || (last == hp.n_layer && hp.tied_output))
        unit = n;
    } else if (n == "output_norm.weight" || n == "output.weight") {
      if (last == hp.n_layer)
        unit = n;
    } else if (n == "rope_freqs.weight") {
      unit = n;
    }
    if (!unit.empty() && t.n_bytes > 0)
      rs.push_back({unit, {f.data_offset() + t.offset, t.n_bytes}});
  }
  std::sort(rs.begin(), rs.end(), [](const unit_range& a, const unit_range& b) {
    return a.r.offset < b.r.offset;
  });
  std::vector<byte_range> out;
  std::string last_unit;
  for (auto& [unit, r] : rs) {
    if (r.length == 0)
      continue;
    auto& prev = out.empty() ? r : out.back();
    if (!out.empty() && unit == last_unit
        && r.offset <= prev.offset + prev.length + f.alignment()) {
      auto end = std::max(prev.offset + prev.length, r.offset + r.length);
      out.back().length = end - out.back().offset;
    } else {
      out.push_back(r);
      last_unit = unit;
    }
  }
  return out;
}

} // namespace exo::model
