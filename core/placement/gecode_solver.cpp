#include "core/placement/gecode_solver.hpp"

#include <gecode/int.hh>
#include <gecode/minimodel.hh>
#include <gecode/search.hh>

#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

namespace exo::placement {

namespace {

using namespace Gecode;

/// The pipeline placement model of ../shared/notes/placement.md.
///
/// Slot s of the pipeline holds device dev[s] and layers [b[s], b[s+1]);
/// used slots come first. Devices are numbered fastest first inside the
/// model (`order` maps back to cost-model indices).
class placement_space : public IntMinimizeSpace {
public:
  placement_space(const cost_model& m, const std::vector<int>& order,
                  std::optional<std::int64_t> upper_bound) {
    const int n = static_cast<int>(m.devices());
    const int L = static_cast<int>(m.layers());
    const int N = static_cast<int>(m.nodes());
    const int W = L + 1;
    std::vector<int> inner(n);
    for (int i = 0; i < n; ++i)
      inner[order[i]] = i;
    // Tables, indexed [device + n * layer] and [pair + N * N * cut].
    IntArgs cum_a(n * W), end_a(n * W), node_a(n), xfer_a(N * N * W);
    int max_cum = 0;
    for (int i = 0; i < n; ++i) {
      node_a[i] = m.node(order[i]);
      for (int l = 0; l < W; ++l) {
        cum_a[i + n * l] = static_cast<int>(m.cum_time(order[i], l));
        end_a[i + n * l] = m.max_end(order[i], l);
        max_cum = std::max(max_cum, cum_a[i + n * l]);
      }
    }
    int max_xfer = 0;
    for (int a = 0; a < N; ++a)
      for (int b = 0; b < N; ++b)
        for (int c = 0; c < W; ++c) {
          auto v = static_cast<int>(m.transfer_nodes(a, b, c));
          xfer_a[a * N + b + N * N * c] = v;
          max_xfer = std::max(max_xfer, v);
        }
    IntSharedArray cum(cum_a), max_end(end_a), node_of(node_a), xfer(xfer_a);

    // Variables.
    dev_ = IntVarArray(*this, n, 0, n - 1);
    pos_ = IntVarArray(*this, n, 0, n - 1);
    b_ = IntVarArray(*this, n + 1, 0, L);
    used_ = BoolVarArray(*this, n, 0, 1);
    cs_ = IntVarArray(*this, n, 0, max_cum);
    t_ = IntVarArray(*this, std::max(n - 1, 0), 0, max_xfer);
    lat_ = IntVar(*this, 0, Int::Limits::max);
    bn_ = IntVar(*this, 0, Int::Limits::max);
    obj_ = IntVar(*this, 0, Int::Limits::max);
    IntVar n_used(*this, 1, n);

    // Structure: devices all different, boundaries ordered, used a prefix.
    channel(*this, dev_, pos_);
    rel(*this, b_[0], IRT_EQ, 0);
    rel(*this, b_[n], IRT_EQ, L);
    for (int s = 0; s < n; ++s) {
      rel(*this, b_[s], IRT_LQ, b_[s + 1]);
      rel(*this, b_[s], IRT_LE, b_[s + 1], Reify(used_[s]));
      if (s + 1 < n)
        rel(*this, used_[s], IRT_GQ, used_[s + 1]);
    }
    linear(*this, used_, IRT_EQ, n_used);
    rel(*this, n_used, IRT_LQ, static_cast<int>(m.max_stages()));
    for (int i = 0; i < n; ++i)
      if (m.must_use(order[i]))
        rel(*this, pos_[i], IRT_LE, n_used);

    // Memory, thermal cap and pinned layers: b[s+1] <= max_end[dev[s]][b[s]].
    for (int s = 0; s < n; ++s) {
      IntVar me(*this, 0, L);
      element(*this, max_end, dev_[s], n, b_[s], W, me);
      rel(*this, b_[s + 1], IRT_LQ, me);
    }
    // Stage compute: cum[dev[s]][b[s+1]] - cum[dev[s]][b[s]].
    for (int s = 0; s < n; ++s) {
      IntVar hi(*this, 0, max_cum), lo(*this, 0, max_cum);
      element(*this, cum, dev_[s], n, b_[s + 1], W, hi);
      element(*this, cum, dev_[s], n, b_[s], W, lo);
      linear(*this, IntArgs({1, -1, -1}), IntVarArgs({hi, lo, cs_[s]}),
             IRT_EQ, 0);
    }
    // Transfers: xfer[node pair][b[s+1]], which is 0 at cut L, so unused
    // slots cost nothing.
    IntVarArgs node_s(n);
    for (int s = 0; s < n; ++s) {
      node_s[s] = IntVar(*this, 0, N - 1);
      element(*this, node_of, dev_[s], node_s[s]);
    }
    for (int s = 0; s + 1 < n; ++s) {
      IntVar pair(*this, 0, N * N - 1);
      linear(*this, IntArgs({N, 1, -1}),
             IntVarArgs({node_s[s], node_s[s + 1], pair}), IRT_EQ, 0);
      element(*this, xfer, pair, N * N, b_[s + 1], W, t_[s]);
    }
    // Objective parts.
    IntVarArgs all_costs;
    all_costs << cs_ << t_;
    linear(*this, all_costs, IRT_EQ, lat_);
    max(*this, all_costs, bn_);
    const auto pen = static_cast<int>(m.node_penalty());
    IntVar nodes_used(*this, 1, N);
    if (pen > 0 && N > 1) {
      BoolVarArgs node_used;
      for (int j = 0; j < N; ++j) {
        BoolVarArgs on;
        for (int s = 0; s < n; ++s) {
          BoolVar eq(*this, 0, 1), here(*this, 0, 1);
          rel(*this, node_s[s], IRT_EQ, j, Reify(eq));
          rel(*this, used_[s], BOT_AND, eq, here);
          on << here;
        }
        BoolVar u(*this, 0, 1);
        rel(*this, BOT_OR, on, u);
        node_used << u;
      }
      linear(*this, node_used, IRT_EQ, nodes_used);
    } else {
      rel(*this, nodes_used, IRT_EQ, 1);
    }
    switch (m.kind()) {
      case objective_kind::latency:
        linear(*this, IntArgs({1, pen, -1}),
               IntVarArgs({lat_, nodes_used, obj_}), IRT_EQ, pen);
        break;
      case objective_kind::throughput:
        linear(*this, IntArgs({1, pen, -1}),
               IntVarArgs({bn_, nodes_used, obj_}), IRT_EQ, pen);
        break;
      case objective_kind::blend: {
        const int w = m.blend_percent();
        linear(*this, IntArgs({w, 100 - w, 100 * pen, -1}),
               IntVarArgs({lat_, bn_, nodes_used, obj_}), IRT_EQ, 100 * pen);
        break;
      }
    }
    if (upper_bound)
      rel(*this, obj_, IRT_LE, static_cast<int>(*upper_bound));

    // Redundant: the stages from s on compute at least the remaining layers
    // on the fastest device for each layer (exact: stage times telescope).
    IntArgs fast_rem(W);
    fast_rem[L] = 0;
    for (int l = L - 1; l >= 0; --l) {
      int best = Int::Limits::max;
      for (int i = 0; i < n; ++i)
        best = std::min(best, cum_a[i + n * (l + 1)] - cum_a[i + n * l]);
      fast_rem[l] = fast_rem[l + 1] + best;
    }
    for (int s = 0; s < n; ++s) {
      IntVar fr(*this, 0, fast_rem[0]);
      element(*this, fast_rem, b_[s], fr);
      linear(*this, cs_.slice(s), IRT_GQ, fr);
    }
    // Redundant: the bottleneck is at least the fastest total over the
    // stages allowed.
    const int ms = static_cast<int>(m.max_stages());
    rel(*this, bn_, IRT_GQ, (fast_rem[0] + ms - 1) / ms);

    // Symmetry breaking: interchangeable devices in index order; unused
    // slots hold the remaining devices in ascending order.
    for (std::size_t k = 0; k < m.classes(); ++k) {
      std::vector<int> in;
      for (int d : m.class_members(static_cast<int>(k)))
        in.push_back(inner[d]);
      std::sort(in.begin(), in.end());
      for (std::size_t j = 1; j < in.size(); ++j)
        rel(*this, pos_[in[j - 1]], IRT_LE, pos_[in[j]]);
    }
    for (int s = 0; s + 1 < n; ++s)
      rel(*this, (!used_[s]) >> (dev_[s] < dev_[s + 1]));

    // Branch stage by stage: the device (fastest first), then its end.
    for (int s = 0; s < n; ++s) {
      branch(*this, dev_[s], INT_VAL_MIN());
      if (s + 1 < n)
        branch(*this, b_[s + 1], INT_VAL_MAX());
    }
    branch(*this, obj_, INT_VAL_MIN());
  }

  placement_space(placement_space& s) : IntMinimizeSpace(s) {
    dev_.update(*this, s.dev_);
    pos_.update(*this, s.pos_);
    b_.update(*this, s.b_);
    used_.update(*this, s.used_);
    cs_.update(*this, s.cs_);
    t_.update(*this, s.t_);
    lat_.update(*this, s.lat_);
    bn_.update(*this, s.bn_);
    obj_.update(*this, s.obj_);
  }

  Space* copy() override { return new placement_space(*this); }

  IntVar cost() const override { return obj_; }

  /// The plan of a solution, in cost-model device indices.
  assignment to_assignment(const std::vector<int>& order) const {
    assignment a;
    for (int s = 0; s < dev_.size(); ++s)
      if (used_[s].val() == 1)
        a.push_back({order[dev_[s].val()], b_[s].val(), b_[s + 1].val()});
    return a;
  }

  std::int64_t objective() const { return obj_.val(); }

private:
  IntVarArray dev_;
  IntVarArray pos_;
  IntVarArray b_;
  BoolVarArray used_;
  IntVarArray cs_;
  IntVarArray t_;
  IntVar lat_;
  IntVar bn_;
  IntVar obj_;
};

/// Stops the search at a deadline or when a cancel flag is raised.
class deadline_stop : public Search::Stop {
public:
  deadline_stop(const std::atomic<bool>* cancel,
                std::chrono::steady_clock::time_point deadline)
    : cancel_(cancel), deadline_(deadline) {
  }

  bool stop(const Search::Statistics&, const Search::Options&) override {
    if (cancel_ && cancel_->load(std::memory_order_relaxed)) {
      cancelled_ = true;
      return true;
    }
    return std::chrono::steady_clock::now() >= deadline_;
  }

  bool cancelled() const { return cancelled_; }

private:
  const std::atomic<bool>* cancel_;
  std::chrono::steady_clock::time_point deadline_;
  bool cancelled_ = false;
};

} // namespace

gecode_result solve_gecode(const cost_model& m, const gecode_options& opts,
                           const gecode_solution_callback& on_solution) {
  gecode_result res;
  const int n = static_cast<int>(m.devices());
  if (n == 0 || m.layers() == 0) {
    res.complete = true;
    return res;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  const auto L = static_cast<int>(m.layers());
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return m.cum_time(a, L) < m.cum_time(b, L);
  });
  auto* root = new placement_space(m, order, opts.upper_bound);
  if (root->status() == SS_FAILED) {
    delete root;
    res.complete = true;
    return res;
  }
  deadline_stop stop(opts.cancel,
                     std::chrono::steady_clock::now() + opts.time_limit);
  Search::Options o;
  o.threads = 1;
  o.stop = &stop;
  {
    BAB<placement_space> engine(root, o);
    delete root;
    while (placement_space* s = engine.next()) {
      auto a = s->to_assignment(order);
      res.objective = s->objective();
      ++res.solutions;
      delete s;
      if (on_solution)
        on_solution(a, res.objective);
      res.best = std::move(a);
    }
    res.complete = !engine.stopped();
    res.nodes = engine.statistics().node;
  }
  res.cancelled = stop.cancelled();
  return res;
}

} // namespace exo::placement
