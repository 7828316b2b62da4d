#include "actors/topology/topology_actor.hpp"

#include "actors/topology/link_stats.hpp"
#include "messages/cluster.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>

namespace exo::topology {

namespace {

using namespace std::chrono;
using steady = steady_clock;

std::int64_t wall_ns() {
  return duration_cast<nanoseconds>(system_clock::now().time_since_epoch())
    .count();
}

/// What the actor keeps between measurements.
struct topology_state {
  topology_config cfg;
  /// Per peer: the last measured bandwidth (bytes/s) and when.
  struct known {
    double bps = 0;
    steady::time_point at;
  };
  std::map<std::string, known> bandwidth;
  bool bulk_busy = false;
  std::deque<std::function<void()>> waiting; ///< bulk phases to run next
};

/// One measurement in progress: probes first, then the bulk phase.
struct measurement : std::enable_shared_from_this<measurement> {
  caf::event_based_actor* self = nullptr;
  std::shared_ptr<topology_state> st;
  std::string from, to;
  caf::actor peer;
  bool fresh = false; ///< measure the bandwidth even if it is known
  caf::response_promise rp;
  probe_results r;
  std::optional<bulk_phase> bulk;
  steady::time_point bulk_start;

  void ping() {
    if (r.probes == st->cfg.probes) {
      probes_done();
      return;
    }
    ++r.probes;
    auto me = shared_from_this();
    auto t0 = steady::now();
    self->request(peer, milliseconds{500}, ping_atom::value, wall_ns())
      .then(
        [me, t0](std::int64_t) {
          me->r.rtts_us.push_back(
            duration<double, std::micro>(steady::now() - t0).count());
          me->ping();
        },
        [me](caf::error&) { me->ping(); });
  }

  void probes_done() {
    auto it = st->bandwidth.find(to);
    if (!fresh && it != st->bandwidth.end()
        && steady::now() - it->second.at < st->cfg.bulk_interval) {
      finish(it->second.bps);
      return;
    }
    auto me = shared_from_this();
    if (st->bulk_busy) {
      st->waiting.push_back([me] { me->start_bulk(); });
      return;
    }
    start_bulk();
  }

  void start_bulk() {
    st->bulk_busy = true;
    // TCP needs some round trips to open its window: a long link gets a
    // longer budget (20 round trips), or its rate would be underestimated.
    // The smallest round trip is the link's own (the others waited behind
    // traffic): an inflated one would make the probe look fast.
    auto limits = st->cfg.bulk;
    limits.rtt_s = quantile(r.rtts_us, 0) * 1e-6;
    limits.budget_s = std::max(limits.budget_s,
                               20 * quantile(r.rtts_us, 0.5) * 1e-6);
    bulk.emplace(limits);
    bulk_start = steady::now();
    fill();
  }

  double elapsed() const {
    return duration<double>(steady::now() - bulk_start).count();
  }

  void fill() {
    while (bulk->send_more(elapsed())) {
      chunk c;
      c.bytes.assign(bulk->chunk_bytes(), 0x5a);
      bulk->sent();
      auto me = shared_from_this();
      self->request(peer, seconds{10}, bulk_atom::value, std::move(c))
        .then([me](std::uint64_t n) { me->arrived(n); },
              [me](caf::error&) { me->arrived(0); });
    }
  }

  void arrived(std::uint64_t n) {
    bulk->arrived(n, elapsed());
    if (!bulk->done()) {
      fill();
      return;
    }
    r.bulk_bytes = bulk->bytes();
    r.bulk_seconds = bulk->seconds();
    auto l = summarize(r, from, to, wall_ns());
    if (l.bandwidth_bps > 0)
      st->bandwidth[to] = {l.bandwidth_bps, steady::now()};
    rp.deliver(l);
    st->bulk_busy = false;
    if (!st->waiting.empty()) {
      auto next = std::move(st->waiting.front());
      st->waiting.pop_front();
      next();
    }
  }

  /// Without a bulk phase: the probes and the peer's known bandwidth.
  void finish(double bps) {
    auto l = summarize(r, from, to, wall_ns());
    l.bandwidth_bps = bps;
    rp.deliver(l);
  }
};

caf::behavior topology_impl(caf::event_based_actor* self,
                            topology_config cfg) {
  auto st = std::make_shared<topology_state>();
  st->cfg = cfg;
  // A measurement waiting for the bulk phase holds the state that holds
  // it (and its peer and requester): the queue goes with the actor, or
  // that cycle outlives it (LeakSanitizer, an app stopping mid-measure).
  self->attach_functor([st] { st->waiting.clear(); });
  return {
    [self, st](measure_atom, std::string& from, std::string& to,
               caf::actor& peer, bool fresh) -> caf::result<link_info> {
      auto m = std::make_shared<measurement>();
      m->self = self;
      m->st = st;
      m->from = std::move(from);
      m->to = std::move(to);
      m->peer = std::move(peer);
      m->fresh = fresh;
      m->rp = self->make_response_promise();
      m->ping();
      return m->rp;
    },
  };
}

} // namespace

caf::actor spawn_topology(caf::actor_system& sys, topology_config cfg) {
  return sys.spawn(topology_impl, cfg);
}

} // namespace exo::topology
