#include "actors/topology/topology_actor.hpp"

#include "actors/topology/link_stats.hpp"
#include "messages/cluster.hpp"

#include <caf/all.hpp>

namespace exo::topology {

namespace {

using namespace std::chrono;
using steady = steady_clock;

std::int64_t wall_ns() {
  return duration_cast<nanoseconds>(system_clock::now().time_since_epoch())
    .count();
}

/// One measurement in progress: probes first, then the bulk phase.
struct measurement : std::enable_shared_from_this<measurement> {
  caf::event_based_actor* self = nullptr;
  topology_config cfg;
  std::string from, to;
  caf::actor peer;
  caf::response_promise rp;
  probe_results r;
  int bulk_sent = 0, bulk_done = 0;
  steady::time_point bulk_start;

  void ping() {
    if (r.probes == cfg.probes) {
      bulk_start = steady::now();
      for (int i = 0; i < cfg.bulk_window; ++i)
        send_chunk();
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

  void send_chunk() {
    if (bulk_sent == cfg.bulk_chunks)
      return;
    ++bulk_sent;
    chunk c;
    c.bytes.assign(std::size_t{1} << 20, 0x5a);
    auto me = shared_from_this();
    self->request(peer, seconds{10}, bulk_atom::value, std::move(c))
      .then(
        [me](std::uint64_t n) {
          me->r.bulk_bytes += n;
          me->chunk_done();
        },
        [me](caf::error&) { me->chunk_done(); });
  }

  void chunk_done() {
    if (++bulk_done == cfg.bulk_chunks) {
      r.bulk_seconds = duration<double>(steady::now() - bulk_start).count();
      rp.deliver(summarize(r, from, to, wall_ns()));
      return;
    }
    send_chunk();
  }
};

caf::behavior topology_impl(caf::event_based_actor* self,
                            topology_config cfg) {
  return {
    [self, cfg](measure_atom, std::string& from, std::string& to,
                caf::actor& peer) -> caf::result<link_info> {
      auto m = std::make_shared<measurement>();
      m->self = self;
      m->cfg = cfg;
      m->from = std::move(from);
      m->to = std::move(to);
      m->peer = std::move(peer);
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
