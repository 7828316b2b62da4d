#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/placement/problem.hpp"

namespace exo::placement {

/// One stage of a candidate plan in cost-model indices: device `device`
/// (an index into the eligible devices) runs layers [first, end).
struct stage_assignment {
  int device = 0;
  int first = 0;
  int end = 0;
};

/// Stages in pipeline order.
using assignment = std::vector<stage_assignment>;

/// The figures of an assignment, in ticks (see cost_model::tick_seconds).
struct evaluation {
  std::int64_t latency = 0;
  std::int64_t bottleneck = 0;
  std::int64_t penalty = 0;
  int nodes_used = 0;
  /// The objective in objective units (ticks, or ticks * 100 for a blend).
  std::int64_t objective = 0;
  /// Microseconds to bring the weights the plan puts on devices that do
  /// not hold them now (problem::resident) over the links; 0 without
  /// resident layers.
  std::int64_t moved = 0;
  /// The bytes of those weights.
  std::int64_t moved_bytes = 0;
};

/// (objective, moving cost), compared in that order: the weights that
/// arrive sooner over the links break a tie of objectives.
inline bool better(std::int64_t objective, std::int64_t moved,
                   std::int64_t than_objective, std::int64_t than_moved) {
  return objective < than_objective
         || (objective == than_objective && moved < than_moved);
}

/// A problem compiled to the integer tables that every solver shares, so
/// that the exact solver and the Gecode model optimise the very same numbers.
///
/// Times are in ticks (0.1 us, coarser only when a problem's times would
/// overflow Gecode's integers). A stage's time is the sum of its layers'
/// times, each rounded to whole ticks (identical layers cost the same
/// ticks wherever they sit; rounding errs by at most half a tick a layer). Memory (a stage's layers
/// plus its working memory, problem::stage_memory), thermal caps and
/// pinned layers are folded exactly (in bytes and FLOPs) into one table,
/// max_end(d, b): the largest end e such that device d may run [b, e).
/// Only eligible devices (not excluded, not drained) are in the model.
class cost_model {
public:
  /// Compiles `p`, which must be valid (see validate()). `p` must outlive
  /// the model.
  explicit cost_model(const problem& p);

  const problem& source() const { return *p_; }
  std::size_t devices() const { return dev_.size(); }
  std::size_t layers() const { return layers_; }
  /// Index in problem::devices of model device `d`.
  std::size_t problem_device(int d) const { return dev_[d]; }

  double tick_seconds() const { return tick_; }
  objective_kind kind() const { return kind_; }
  /// Latency weight of a blend in percent.
  int blend_percent() const { return blend_pct_; }
  /// Objective units per tick: 100 for a blend, else 1.
  int scale() const { return kind_ == objective_kind::blend ? 100 : 1; }

  /// Ticks device `d` needs for layers [0, l).
  std::int64_t cum_time(int d, int l) const {
    return cum_[d * (layers_ + 1) + l];
  }
  /// Ticks device `d` needs for layers [b, e).
  std::int64_t stage_time(int d, int b, int e) const {
    return cum_time(d, e) - cum_time(d, b);
  }
  /// Largest e such that device `d` may run layers [b, e) (e == b: none).
  int max_end(int d, int b) const { return max_end_[d * (layers_ + 1) + b]; }
  /// The whole table, row-major [d][b], for the Gecode model.
  const std::vector<int>& max_end_table() const { return max_end_; }
  const std::vector<std::int64_t>& cum_table() const { return cum_; }

  /// Node index of device `d`.
  int node(int d) const { return node_[d]; }
  std::size_t nodes() const { return node_count_; }
  /// Ticks to pass the activations at cut `cut` (after layer cut-1) from
  /// node `a` to node `b`; 0 at cut 0 and cut L.
  std::int64_t transfer_nodes(int a, int b, int cut) const {
    return xfer_[(a * node_count_ + b) * (layers_ + 1) + cut];
  }
  std::int64_t transfer(int from, int to, int cut) const {
    return transfer_nodes(node_[from], node_[to], cut);
  }
  const std::vector<std::int64_t>& transfer_table() const { return xfer_; }
  /// The cheapest transfer_nodes(a, b, cut) over the cuts (0 with one
  /// layer): what any cut from node a to node b costs at least.
  std::int64_t cheapest_transfer(int a, int b) const {
    return cheapest_[a * node_count_ + b];
  }

  /// Microseconds to bring the weights of layers [b, e) that device `d`
  /// does not hold now, each from the fastest device that holds it over
  /// the link between their nodes (problem::link_between; a layer nobody
  /// holds at intra_node speed). The solvers' tie-break.
  std::int64_t moving_cost(int d, int b, int e) const {
    if (moved_.empty())
      return 0;
    return moved_[d * (layers_ + 1) + e] - moved_[d * (layers_ + 1) + b];
  }
  /// Weight bytes of layers [b, e) that device `d` does not hold now.
  std::int64_t moved_bytes(int d, int b, int e) const {
    if (moved_bytes_.empty())
      return 0;
    return moved_bytes_[d * (layers_ + 1) + e]
           - moved_bytes_[d * (layers_ + 1) + b];
  }
  /// Some device holds resident layers: plans differ in weights moved.
  bool has_resident() const { return !moved_.empty(); }

  /// The device must be part of every plan (pinned, or holds pinned layers).
  bool must_use(int d) const { return must_use_[d] != 0; }
  /// Some device must be part of every plan (the programs that place whole
  /// nodes or walks skip such problems).
  bool any_must_use() const {
    return std::any_of(must_use_.begin(), must_use_.end(),
                       [](char x) { return x != 0; });
  }
  /// Most stages allowed (already capped at the device count).
  std::size_t max_stages() const { return max_stages_; }
  /// Ticks added per node used beyond the first.
  std::int64_t node_penalty() const { return node_penalty_; }

  /// Class of device `d`: devices of one class are interchangeable (same
  /// node, same time and max_end rows, same must_use).
  int device_class(int d) const { return class_of_[d]; }
  std::size_t classes() const { return members_.size(); }
  /// Devices of class `k`, ascending.
  const std::vector<int>& class_members(int k) const { return members_[k]; }
  /// Kind of device `d`: devices of one kind are alike wherever they sit
  /// (same time, max_end and resident rows, same must_use); a class is a
  /// kind on one node.
  int device_kind(int d) const { return kind_of_[d]; }
  std::size_t kinds() const { return kind_rep_.size(); }
  /// The first device of kind `k`.
  int kind_representative(int k) const { return kind_rep_[k]; }

  /// Combines latency, bottleneck and penalty ticks into objective units.
  std::int64_t combine(std::int64_t latency, std::int64_t bottleneck,
                       std::int64_t penalty) const;
  /// Objective units in seconds.
  double to_seconds(std::int64_t units) const {
    return static_cast<double>(units) * tick_ / scale();
  }
  /// Figures of `a`, assumed structurally valid.
  evaluation evaluate(const assignment& a) const;

private:
  const problem* p_;
  std::size_t layers_ = 0;
  double tick_ = 1e-7;
  objective_kind kind_ = objective_kind::latency;
  int blend_pct_ = 50;
  std::vector<std::size_t> dev_;
  std::vector<std::int64_t> cum_;
  std::vector<int> max_end_;
  std::vector<int> node_;
  std::size_t node_count_ = 0;
  std::vector<std::int64_t> xfer_;
  std::vector<std::int64_t> cheapest_;
  std::vector<char> must_use_;
  /// Prefix sums of the moving cost (microseconds) and bytes of layers not
  /// resident, [d][l]; empty without resident layers.
  std::vector<std::int64_t> moved_;
  std::vector<std::int64_t> moved_bytes_;
  std::size_t max_stages_ = 0;
  std::int64_t node_penalty_ = 0;
  std::vector<int> class_of_;
  std::vector<std::vector<int>> members_;
  std::vector<int> kind_of_;
  std::vector<int> kind_rep_;
};

} // namespace exo::placement
