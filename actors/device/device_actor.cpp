#include "actors/device/device_actor.hpp"

#include "core/access/audit_event.hpp"
#include "core/audit/event.hpp"
#include "core/device/buffer_pool.hpp"
#include "actors/device/device_task.hpp"
#include "core/device/pool_ops.hpp"
#include "messages/audit.hpp"
#include "messages/errors.hpp"

#include "core/text/line.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <deque>
#include <map>
#include <random>

namespace exo::device {

device_info describe(backend::device& dev, const std::string& node) {
  const auto& p = dev.properties();
  device_info info;
  info.id = p.id;
  info.node = node;
  info.backend = backend::to_string(p.kind);
  info.name = p.name;
  info.vendor = p.vendor;
  info.architecture = p.architecture;
  info.driver_version = p.driver_version;
  info.pci_bus_id = p.pci_bus_id;
  info.support = backend::to_string(p.support);
  info.simulated = p.simulated;
  info.total_memory = p.total_memory;
  info.free_memory = dev.memory().free;
  info.max_allocation = p.max_allocation;
  info.compute_units = p.compute_units;
  info.clock_mhz = p.clock_mhz.value_or(0);
  info.peak_flops = p.peak_flops.value_or(0);
  info.memory_bandwidth = p.memory_bandwidth.value_or(0);
  info.launch_seconds = p.launch_seconds.value_or(0);
  info.capabilities = p.capabilities;
  return info;
}

namespace {

struct device_actor_state {
  static inline const char* name = "exo.device";

  backend::device* dev = nullptr;
  device_actor_config cfg;
  /// Destroyed with the state when the actor exits: buffers go back to the
  /// device, which outlives the actor.
  std::unique_ptr<buffer_pool> pool;
  /// The device over the pool for device tasks (a hosted stage keeps it;
  /// detached when the actor exits).
  std::shared_ptr<pool_ops> ops;
  /// Tasks held while the device is paused, in order (device_task). Those
  /// still held when the actor exits are answered with an error: their
  /// requesters (a job's steps) would otherwise wait for nothing.
  struct held_task {
    device_task task;
    caf::response_promise rp;
  };
  std::deque<held_task> held;
  std::uint64_t tasks = 0;         ///< device tasks run
  std::uint64_t compute_tasks = 0; ///< of which compute (a shard's steps)
  device_state state = device_state::ready;
  std::string state_reason;
  std::uint64_t operations = 0;
  std::uint64_t kernel_calls = 0; ///< compute calls run, batched or single
  std::uint64_t errors = 0;
  std::string last_error;
  /// Quota held by token-bearing allocations: handle -> (principal, bytes).
  std::unordered_map<handle_id, std::pair<std::string, std::uint64_t>>
    owners;
  std::uint64_t denials = 0;
  /// Compute events not yet sent to the audit sink (cfg.audit_batch_interval).
  std::vector<audit_entry> audit_batch;
  bool audit_tick_armed = false; ///< a tick_atom will send audit_batch
  /// cfg.measure_again: the work counted at the last look, and the looks
  /// since the rates were last measured (0 after work).
  std::uint64_t work_seen = 0;
  std::uint64_t idle_looks = 0;
  bool measured_since_work = false;
  /// What tasks asked the device to keep (task_context::keep), by ticket:
  /// tickets grow, so the first is the oldest.
  struct kept_object {
    std::shared_ptr<void> obj;
    std::uint64_t bytes = 0;
  };
  std::map<std::uint64_t, kept_object> kept;
  std::uint64_t kept_bytes = 0;
  std::uint64_t next_keep_ticket = 1;
  std::uint64_t kept_released = 0; ///< let go for room
  std::uint64_t kept_expired = 0;  ///< let go when their time passed

  /// Lets go of a kept object; whether it was kept.
  bool let_go(std::uint64_t ticket) {
    auto it = kept.find(ticket);
    if (it == kept.end())
      return false;
    auto obj = std::move(it->second.obj);
    kept_bytes -= it->second.bytes;
    kept.erase(it);
    obj.reset(); // after the map is consistent: it frees through ops
    return true;
  }

  /// An allocation found no room: lets go of the oldest kept object;
  /// whether there was one (the allocation is tried again).
  bool give_way() {
    if (kept.empty())
      return false;
    ++kept_released;
    return let_go(kept.begin()->first);
  }

  ~device_actor_state() {
    // On the actor's thread, while its buffers still exist.
    while (!kept.empty())
      let_go(kept.begin()->first);
    if (ops) // before the pool goes: a stage elsewhere may still hold it
      ops->detach();
    for (auto& h : held)
      h.rp.deliver(make_exo_error(exo_errc::failed_state,
                                  "the device actor exited while the task "
                                  "waited for the device to resume"));
    if (cfg.audit && !audit_batch.empty())
      caf::anon_send(cfg.audit, audit_atom::value, std::move(audit_batch));
  }

  /// Records a failed call; a lost device is gone for good.
  caf::error failed(const backend::error& err) {
    ++errors;
    last_error = err.to_string();
    if (err.code == backend::errc::device_lost) {
      state = device_state::gone;
      state_reason = err.message;
    }
    return to_caf_error(err);
  }

  /// Refuses work in states that allow none.
  caf::error unusable() const {
    if (state == device_state::failed)
      return make_exo_error(exo_errc::failed_state,
                            "device failed verification: " + state_reason);
    if (state == device_state::gone)
      return make_exo_error(exo_errc::device_lost,
                            "device is gone: " + state_reason);
    return caf::none;
  }
};

using self_ptr = exo::device_actor::stateful_pointer<device_actor_state>;

/// A device's free memory as exo can use it: what the backend reports free
/// plus the freed buffers the pool keeps for reuse (it gives them back when
/// an allocation needs the room) and what tasks keep (task_context::keep:
/// let go when an allocation needs the room), at most the device's total. Without it a
/// device looked fuller after every job, and placement refused plans that
/// fit.
std::uint64_t with_cached(const device_actor_state& st, std::uint64_t free) {
  if (!st.pool)
    return free;
  auto total = st.dev->properties().total_memory;
  auto sum = free + st.pool->cached_bytes() + st.kept_bytes;
  return total > 0 ? std::min(sum, total) : sum;
}

/// The name of a kernel call's operation, for messages: the table's, or
/// the number a peer sent.
std::string op_label(std::uint8_t op) {
  if (auto kind = backend::op_from_wire(op))
    return backend::to_string(*kind);
  return "op " + std::to_string(op);
}

/// Decodes a kernel call (its op number with the op table, its handles
/// with the pool) and runs it through backend::run, which checks the counts
/// against the table and every operand against its handle's size.
backend::status run_kernel(device_actor_state& st, const kernel_call& call) {
  using backend::errc;
  using backend::fail;
  auto kind = backend::op_from_wire(call.op);
  if (!kind)
    return fail(errc::unsupported, "compute: unknown operation number "
                                     + std::to_string(call.op));
  if (call.input_offsets.size() != call.inputs.size())
    return fail(errc::invalid_argument,
                std::string{"compute "} + backend::to_string(*kind) + ": "
                  + std::to_string(call.inputs.size()) + " inputs but "
                  + std::to_string(call.input_offsets.size()) + " offsets");
  // More operands than any operation takes: refused, named, by the table
  // (backend::run checks the counts of everything else).
  if (call.inputs.size() > backend::max_op_inputs
      || call.dims.size() > backend::max_op_dims
      || call.scalars.size() > backend::max_op_scalars)
    return backend::check_counts(*kind, call.inputs.size(), call.dims.size(),
                                 call.scalars.size());
  backend::op_call c;
  c.kind = *kind;
  c.n_inputs = call.inputs.size();
  for (std::size_t i = 0; i < call.inputs.size(); ++i) {
    auto v = st.pool->view(call.inputs[i], call.input_offsets[i]);
    if (!v)
      return v.err();
    c.inputs[i] = {v->buf, v->offset, v->limit};
  }
  auto out = st.pool->view(call.output, call.output_offset);
  if (!out)
    return out.err();
  c.output = *out;
  c.n_dims = call.dims.size();
  std::copy(call.dims.begin(), call.dims.end(), c.dims.begin());
  c.n_scalars = call.scalars.size();
  std::copy(call.scalars.begin(), call.scalars.end(), c.scalars.begin());
  return backend::run(*st.dev, c);
}

/// Writes `data` at `offset` of handle `h`: the body of a write request
/// and of a step's input, through the ops device tasks use (which count
/// the bytes and report a failure to the state). An empty error means it
/// was written.
caf::error write_into(self_ptr self, handle_id h, std::uint64_t offset,
                      const chunk& data) {
  auto w = self->state.ops->write(h, offset, data.bytes.data(),
                                  data.bytes.size());
  if (!w)
    return to_caf_error(w.err());
  return {};
}

/// Reads `len` bytes at `offset` of handle `h` into `out`: the body of a
/// read request and of a step's output. `len` must be within the chunk
/// limit.
caf::error read_from(self_ptr self, handle_id h, std::uint64_t offset,
                     std::uint64_t len, chunk& out) {
  out.bytes.resize(len);
  auto r = self->state.ops->read(h, offset, out.bytes.data(), len);
  if (!r)
    return to_caf_error(r.err());
  return {};
}

/// Sends [offset, offset + len) of a buffer to a peer device actor, one
/// bounded chunk at a time, each acknowledged before the next.
struct relay : std::enable_shared_from_this<relay> {
  self_ptr self;
  caf::actor peer;
  handle_id src, dst;
  std::uint64_t src_off, dst_off, len, done = 0;
  caf::response_promise rp;

  void step() {
    auto& st = self->state;
    if (done == len) {
      rp.deliver(caf::ok_atom::value);
      return;
    }
    if (auto err = st.unusable()) {
      rp.deliver(err);
      return;
    }
    auto n = std::min(max_chunk_bytes, len - done);
    chunk c;
    if (auto err = read_from(self, src, src_off + done, n, c)) {
      rp.deliver(err);
      return;
    }
    auto me = shared_from_this();
    self
      ->request(peer, st.cfg.peer_timeout, write_atom::value, dst,
                dst_off + done, std::move(c))
      .then(
        [me, n](caf::atom_value) {
          me->done += n;
          me->step();
        },
        [me](caf::error& err) { me->rp.deliver(std::move(err)); });
  }
};

// -- audit and access (issue 6) ---------------------------------------------

/// The most compute events sent to the sink in one message.
constexpr std::size_t audit_batch_max = 256;

/// Sends the compute events held back so far (see audit_batch_interval).
void send_audit_batch(self_ptr self) {
  auto& st = self->state;
  if (st.audit_batch.empty())
    return;
  caf::anon_send(st.cfg.audit, audit_atom::value, std::move(st.audit_batch));
  st.audit_batch = {};
  st.audit_batch.reserve(16);
}

/// Sends one audit event to the node's sink, if there is one. A `batched`
/// one (a compute batch) may wait in audit_batch, with its own time.
void audit_op(self_ptr self, audit::event_type type, std::string principal,
              std::map<std::string, std::string> details,
              audit::severity level = audit::severity::info,
              bool batched = false) {
  auto& st = self->state;
  if (!st.cfg.audit)
    return;
  details.emplace("device", st.dev->properties().id);
  audit_entry e;
  e.type = static_cast<std::uint8_t>(type);
  e.level = static_cast<std::uint8_t>(level);
  e.principal = std::move(principal);
  e.details = std::move(details);
  if (batched && st.cfg.audit_batch_interval.count() > 0) {
    e.time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
    st.audit_batch.push_back(std::move(e));
    if (st.audit_batch.size() >= audit_batch_max) {
      send_audit_batch(self);
    } else if (!st.audit_tick_armed) {
      st.audit_tick_armed = true;
      self->delayed_send(self, st.cfg.audit_batch_interval, tick_atom::value);
    }
    return;
  }
  send_audit_batch(self); // the device's events reach the sink in order
  caf::anon_send(st.cfg.audit, audit_atom::value, std::move(e));
}

/// Turns a refusal into an exo error (and an audit event).
caf::error denied(self_ptr self, const access::decision& d,
                  access::permission p) {
  auto& st = self->state;
  ++st.denials;
  if (st.cfg.audit) {
    auto ev = access::make_audit_event(d, p, st.dev->properties().id);
    audit_entry e;
    e.type = static_cast<std::uint8_t>(ev.type);
    e.level = static_cast<std::uint8_t>(ev.level);
    e.principal = d.principal;
    e.details = std::move(ev.details);
    send_audit_batch(self);
    caf::anon_send(st.cfg.audit, audit_atom::value, std::move(e));
  }
  auto code = d.code == access::decision_code::quota_exceeded
                ? exo_errc::quota_exceeded
                : exo_errc::access_denied;
  return make_exo_error(code, std::string{access::to_string(d.code)} + ": "
                                + d.reason);
}

/// Operations without a token are for actors of this node only (shards,
/// thermal monitors, the node and its console services): they are trusted
/// in-process principals. A device actor is never published or handed to
/// a peer, but should a handle leak, a message from another node (or one
/// without a sender, whose origin cannot be told) must carry a token: it is
/// refused, and audited, like any other denial.
caf::error foreign(self_ptr self, access::permission p) {
  const auto& sender = self->current_sender();
  if (sender && sender->node() == self->node())
    return caf::none;
  access::decision d;
  d.code = access::decision_code::permission_denied;
  d.reason = "an operation without a token is accepted only from an actor "
             "of this node";
  return denied(self, d, p);
}

/// Checks `token` for `p` on this device; the principal on success.
caf::expected<std::string> authorize(self_ptr self, const std::string& token,
                                     access::permission p) {
  auto& st = self->state;
  if (!st.cfg.access) {
    access::decision d;
    d.code = access::decision_code::permission_denied;
    d.reason = "no access policy on this node";
    return denied(self, d, p);
  }
  auto d = st.cfg.access->check(token, p, st.dev->properties().id);
  if (!d)
    return denied(self, d, p);
  return std::move(d.principal);
}

caf::result<handle_id> do_allocate(self_ptr self, std::uint64_t bytes,
                                   const std::string& principal) {
  auto& st = self->state;
  if (auto err = st.unusable())
    return err;
  ++st.operations;
  auto h = st.pool->allocate(bytes);
  // What tasks keep gives way, the oldest first.
  while (!h && h.err().code == backend::errc::out_of_memory
         && st.give_way())
    h = st.pool->allocate(bytes);
  if (!h)
    return st.failed(h.err());
  audit_op(self, audit::event_type::device_allocate, principal,
           {{"bytes", std::to_string(bytes)}});
  return *h;
}

/// Host memory of this process read in place (host devices); a device that
/// cannot says unsupported, which is an answer, not a device error.
caf::result<handle_id> do_adopt(self_ptr self, host_region r) {
  auto& st = self->state;
  if (auto err = st.unusable())
    return err;
  ++st.operations;
  auto h = st.pool->adopt(r.data, r.bytes, std::move(r.keep));
  if (!h)
    return h.err().code == backend::errc::unsupported
             ? to_caf_error(h.err())
             : st.failed(h.err());
  audit_op(self, audit::event_type::device_allocate, {},
           {{"bytes", std::to_string(r.bytes)}, {"in_place", "true"}});
  return *h;
}

caf::result<caf::atom_value> do_free(self_ptr self, handle_id h,
                                     const std::string& principal) {
  auto& st = self->state;
  ++st.operations;
  auto r = st.pool->release(h);
  if (!r)
    return make_exo_error(exo_errc::unknown_handle, r.err().message);
  if (auto it = st.owners.find(h); it != st.owners.end()) {
    if (st.cfg.access)
      st.cfg.access->release(it->second.first, it->second.second);
    st.owners.erase(it);
  }
  audit_op(self, audit::event_type::device_free, principal, {});
  return caf::ok_atom::value;
}

caf::result<caf::atom_value> do_compute(self_ptr self, const kernel_call& call,
                                        const std::string& principal) {
  auto& st = self->state;
  if (auto err = st.unusable())
    return err;
  if (st.state == device_state::paused)
    return make_exo_error(exo_errc::paused,
                          "device is paused: " + st.state_reason);
  ++st.operations;
  ++st.kernel_calls;
  auto r = run_kernel(st, call);
  if (!r)
    return st.failed(r.err());
  audit_op(self, audit::event_type::device_compute, principal,
           {{"op", op_label(call.op)}});
  return caf::ok_atom::value;
}

/// Runs a batch of kernel calls in order (one reply for a shard's step);
/// the first failure stops it. One audit event for the whole batch.
caf::result<caf::atom_value>
do_compute_batch(self_ptr self, const std::vector<kernel_call>& calls,
                 const std::string& principal) {
  auto& st = self->state;
  if (auto err = st.unusable())
    return err;
  if (st.state == device_state::paused)
    return make_exo_error(exo_errc::paused,
                          "device is paused: " + st.state_reason);
  if (calls.size() > max_kernel_batch)
    return make_exo_error(exo_errc::invalid_argument,
                          "compute: a batch of " + std::to_string(calls.size())
                            + " calls exceeds the limit of "
                            + std::to_string(max_kernel_batch));
  ++st.operations;
  st.kernel_calls += calls.size();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    auto r = run_kernel(st, calls[i]);
    if (!r)
      return st.failed(backend::fail(
        r.err().code, "batch call " + std::to_string(i) + " ("
                        + op_label(calls[i].op) + "): " + r.err().message));
  }
  audit_op(self, audit::event_type::device_compute, principal,
           {{"op", "batch"}, {"calls", std::to_string(calls.size())}},
           audit::severity::info, true);
  return caf::ok_atom::value;
}

caf::result<caf::atom_value> do_sync(self_ptr self,
                                     const std::string& principal) {
  auto& st = self->state;
  if (auto err = st.unusable())
    return err;
  ++st.operations;
  auto s = st.dev->synchronize();
  if (!s)
    return st.failed(s.err());
  audit_op(self, audit::event_type::device_sync, principal, {});
  return caf::ok_atom::value;
}

// -- device tasks ---------------------------------------------------------------

} // namespace

task_context::~task_context() = default;

namespace {

/// What a task sees of this actor (device_task.hpp).
class actor_task_context final : public task_context {
public:
  actor_task_context(self_ptr self, bool waited)
    : self_(self), waited_(waited) {
  }

  std::shared_ptr<model::device_ops> ops() override {
    return self_->state.ops;
  }

  backend::status copy(handle_id src, std::uint64_t src_off, handle_id dst,
                       std::uint64_t dst_off, std::uint64_t bytes) override {
    return self_->state.ops->copy(src, src_off, dst, dst_off, bytes);
  }

  void write_to_peer(const caf::actor& peer, handle_id dst,
                     std::uint64_t offset, chunk data,
                     std::function<void(const caf::error&)> done) override {
    self_
      ->request(peer, self_->state.cfg.peer_timeout, write_atom::value, dst,
                offset, std::move(data))
      .then([done](caf::atom_value) { done(caf::none); },
            [done](caf::error& err) { done(err); });
  }

  caf::actor device() const override {
    return caf::actor_cast<caf::actor>(self_);
  }

  bool waited_for_resume() const override {
    return waited_;
  }

  std::uint64_t keep(std::shared_ptr<void> obj, std::uint64_t bytes,
                     std::chrono::milliseconds keep_for) override {
    auto& st = self_->state;
    const auto ticket = st.next_keep_ticket++;
    st.kept.emplace(ticket,
                    device_actor_state::kept_object{std::move(obj), bytes});
    st.kept_bytes += bytes;
    // The timer holds the ticket only: dropped with the mailbox, it frees
    // nothing off the actor's thread.
    device_task t;
    t.kind = task_kind::immediate;
    t.run = [ticket](task_context& ctx, caf::response_promise&) {
      static_cast<actor_task_context&>(ctx).expire(ticket);
    };
    self_->delayed_send(self_, keep_for, task_atom::value, std::move(t));
    return ticket;
  }

  void let_go(std::uint64_t ticket) override {
    self_->state.let_go(ticket);
  }

  /// keep()'s timer.
  void expire(std::uint64_t ticket) {
    auto& st = self_->state;
    if (st.let_go(ticket))
      ++st.kept_expired;
  }

private:
  self_ptr self_;
  bool waited_;
};

/// Runs a task now; the kernels it ran count as one compute batch.
void run_task(self_ptr self, device_task& t, caf::response_promise& rp,
              bool waited) {
  auto& st = self->state;
  if (auto err = st.unusable()) {
    if (t.refused)
      t.refused(err);
    rp.deliver(err);
    return;
  }
  ++st.tasks;
  if (t.kind == task_kind::compute)
    ++st.compute_tasks;
  const auto ops_before = st.ops->ops_run();
  const auto copies_before = st.ops->copies();
  actor_task_context ctx{self, waited};
  t.run(ctx, rp);
  const auto n = st.ops->ops_run() - ops_before;
  const auto copies = st.ops->copies() - copies_before;
  if (n > 0 || copies > 0) {
    ++st.operations;
    st.kernel_calls += n;
    std::map<std::string, std::string> details{
      {"op", "batch"}, {"calls", std::to_string(n)}};
    if (copies > 0)
      details.emplace("copies", std::to_string(copies));
    audit_op(self, audit::event_type::device_compute, {}, std::move(details),
             audit::severity::info, true);
  }
}

/// Runs the compute tasks held while the device was paused, in order.
void run_held(self_ptr self) {
  auto& st = self->state;
  while (!st.held.empty() && st.state != device_state::paused) {
    auto h = std::move(st.held.front());
    st.held.pop_front();
    run_task(self, h.task, h.rp, true);
  }
}

/// cfg.measure_again's look: measures the device's rates again when it ran
/// nothing since the last look and has not been measured since its last
/// work (or ten looks ago). False: the device measures nothing itself.
bool measure_if_idle(self_ptr self) {
  auto& st = self->state;
  auto work = st.operations + st.tasks + st.kernel_calls;
  bool idle = work == st.work_seen && st.held.empty()
              && st.state == device_state::ready;
  if (work != st.work_seen) {
    st.work_seen = work;
    st.measured_since_work = false;
    st.idle_looks = 0;
  }
  if (!idle)
    return st.state != device_state::gone;
  if (st.measured_since_work && ++st.idle_looks < 10)
    return true;
  auto before = describe(*st.dev, st.cfg.node);
  if (!st.dev->measure_rates_again())
    return false;
  st.measured_since_work = true;
  st.idle_looks = 0;
  auto after = describe(*st.dev, st.cfg.node);
  auto moved = [](double a, double b) {
    return a > 0 ? std::abs(b - a) / a > 0.1 : b > 0;
  };
  if (moved(before.peak_flops, after.peak_flops)
      || moved(before.memory_bandwidth, after.memory_bandwidth)) {
    char line[256];
    std::snprintf(line, sizeof line,
                  ": %s measured its rates again while idle: %.0f GFLOP/s, "
                  "%.1f GB/s of weights (were %.0f, %.1f)",
                  after.id.c_str(), after.peak_flops / 1e9,
                  after.memory_bandwidth / 1e9, before.peak_flops / 1e9,
                  before.memory_bandwidth / 1e9);
    text::line(std::cout) << "exo-node " << st.cfg.node << line << std::endl;
  }
  return true;
}

exo::device_actor::behavior_type device_impl(self_ptr self,
                                             backend::device* dev,
                                             device_actor_config cfg) {
  auto& st = self->state;
  st.dev = dev;
  st.cfg = std::move(cfg);
  std::random_device rd;
  auto salt = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  st.pool = std::make_unique<buffer_pool>(*dev, st.cfg.pool_cache_limit, salt,
                                         st.cfg.pool_cache_idle);
  // Device tasks allocate and free through these, audited like requests.
  pool_ops::hooks hooks;
  hooks.on_error = [self](const backend::error& err) {
    (void) self->state.failed(err);
  };
  hooks.on_allocate = [self](std::uint64_t bytes, bool in_place) {
    ++self->state.operations;
    std::map<std::string, std::string> details{
      {"bytes", std::to_string(bytes)}};
    if (in_place)
      details.emplace("in_place", "true");
    audit_op(self, audit::event_type::device_allocate, {},
             std::move(details));
  };
  hooks.on_resize = [self](std::uint64_t bytes) {
    ++self->state.operations;
    audit_op(self, audit::event_type::device_allocate, {},
             {{"bytes", std::to_string(bytes)}, {"resize", "true"}});
  };
  hooks.on_free = [self] {
    ++self->state.operations;
    audit_op(self, audit::event_type::device_free, {}, {});
  };
  hooks.on_no_room = [self] { return self->state.give_way(); };
  st.ops = std::make_shared<pool_ops>(*dev, *st.pool, std::move(hooks));
  if (!st.cfg.failed_reason.empty()) {
    st.state = device_state::failed;
    st.state_reason = st.cfg.failed_reason;
  }
  if (st.cfg.measure_again.count() > 0 && st.state == device_state::ready)
    self->delayed_send(self, st.cfg.measure_again, tick_atom::value,
                       measure_atom::value);
  return {
    [self](info_atom) -> caf::result<device_info> {
      if (auto err = foreign(self, access::permission::device_info))
        return err;
      auto& st = self->state;
      auto info = describe(*st.dev, st.cfg.node);
      info.free_memory = with_cached(st, info.free_memory);
      info.state = st.state;
      info.state_reason = st.state_reason;
      return info;
    },
    [self](allocate_atom, std::uint64_t bytes) -> caf::result<handle_id> {
      if (auto err = foreign(self, access::permission::memory_allocate))
        return err;
      return do_allocate(self, bytes, {});
    },
    [self](adopt_atom, host_region& r) -> caf::result<handle_id> {
      if (auto err = foreign(self, access::permission::memory_allocate))
        return err;
      return do_adopt(self, std::move(r));
    },
    [self](free_atom, handle_id h) -> caf::result<caf::atom_value> {
      if (auto err = foreign(self, access::permission::memory_free))
        return err;
      return do_free(self, h, {});
    },
    [self](write_atom, handle_id h, std::uint64_t offset,
           chunk& data) -> caf::result<caf::atom_value> {
      if (auto err = foreign(self, access::permission::memory_copy))
        return err;
      auto& st = self->state;
      if (auto err = st.unusable())
        return err;
      ++st.operations;
      if (auto err = write_into(self, h, offset, data))
        return err;
      return caf::ok_atom::value;
    },
    [self](read_atom, handle_id h, std::uint64_t offset,
           std::uint64_t len) -> caf::result<chunk> {
      if (auto err = foreign(self, access::permission::memory_copy))
        return err;
      auto& st = self->state;
      if (auto err = st.unusable())
        return err;
      ++st.operations;
      if (len > max_chunk_bytes)
        return make_exo_error(exo_errc::invalid_argument,
                              "read: " + std::to_string(len)
                                + " bytes exceeds the chunk limit of "
                                + std::to_string(max_chunk_bytes));
      chunk c;
      if (auto err = read_from(self, h, offset, len, c))
        return err;
      return c;
    },
    [self](copy_atom, handle_id src, std::uint64_t src_off, caf::actor peer,
           handle_id dst, std::uint64_t dst_off,
           std::uint64_t len) -> caf::result<caf::atom_value> {
      if (auto err = foreign(self, access::permission::p2p_copy))
        return err;
      auto& st = self->state;
      if (auto err = st.unusable())
        return err;
      ++st.operations;
      auto from = st.pool->resolve(src, src_off, len);
      if (!from)
        return st.failed(from.err());
      if (!peer)
        return make_exo_error(exo_errc::invalid_argument,
                              "copy: no destination device");
      if (peer == caf::actor_cast<caf::actor>(self)) {
        auto to = st.pool->resolve(dst, dst_off, len);
        if (!to)
          return st.failed(to.err());
        auto c = st.dev->copy(**from, src_off, **to, dst_off, len);
        if (!c)
          return st.failed(c.err());
        audit_op(self, audit::event_type::device_copy, {},
                 {{"bytes", std::to_string(len)}});
        return caf::ok_atom::value;
      }
      audit_op(self, audit::event_type::device_p2p_copy, {},
               {{"bytes", std::to_string(len)}});
      auto r = std::make_shared<relay>();
      r->self = self;
      r->peer = std::move(peer);
      r->src = src;
      r->dst = dst;
      r->src_off = src_off;
      r->dst_off = dst_off;
      r->len = len;
      r->rp = self->make_response_promise();
      r->step();
      return r->rp;
    },
    [self](compute_atom, handle_id in, std::uint64_t in_off, chunk& data,
           std::vector<kernel_call>& calls, handle_id out,
           std::uint64_t out_off, std::uint64_t out_len)
      -> caf::result<chunk, std::vector<kernel_call>> {
      if (auto err = foreign(self, access::permission::compute_run))
        return err;
      if (auto err = foreign(self, access::permission::memory_copy))
        return err;
      auto& st = self->state;
      if (auto err = st.unusable())
        return err;
      if (st.state == device_state::paused) // before the write
        return make_exo_error(exo_errc::paused,
                              "device is paused: " + st.state_reason);
      if (out_len > max_chunk_bytes)
        return make_exo_error(exo_errc::invalid_argument,
                              "step: reading " + std::to_string(out_len)
                                + " bytes exceeds the chunk limit of "
                                + std::to_string(max_chunk_bytes));
      if (!data.bytes.empty())
        if (auto err = write_into(self, in, in_off, data))
          return err;
      auto r = do_compute_batch(self, calls, {});
      if (r.flag == caf::rt_error)
        return std::move(r.err);
      chunk c;
      if (out_len > 0)
        if (auto err = read_from(self, out, out_off, out_len, c))
          return err;
      return {std::move(c), std::move(calls)};
    },
    [self](compute_atom, kernel_call& call) -> caf::result<caf::atom_value> {
      if (auto err = foreign(self, access::permission::compute_run))
        return err;
      return do_compute(self, call, {});
    },
    [self](compute_atom,
           std::vector<kernel_call>& calls) -> caf::result<caf::atom_value> {
      if (auto err = foreign(self, access::permission::compute_run))
        return err;
      return do_compute_batch(self, calls, {});
    },
    [self](sync_atom) -> caf::result<caf::atom_value> {
      if (auto err = foreign(self, access::permission::compute_sync))
        return err;
      return do_sync(self, {});
    },
    // Not checked with foreign(): a device_task holds a closure, so it can
    // only come from this process (CAF cannot deserialize it).
    [self](task_atom, device_task& t) -> caf::result<void> {
      auto& st = self->state;
      // Checked before the promise is made: making it takes the sender
      // from the request, and an error returned after that reaches no one.
      if (!t.run)
        return make_exo_error(exo_errc::invalid_argument,
                              "task: nothing to run");
      if (auto err = st.unusable()) {
        if (t.refused)
          t.refused(err);
        return err;
      }
      auto rp = self->make_response_promise();
      // Held while paused (compute), or behind what is held (ordered).
      bool hold = (t.kind == task_kind::compute
                   && st.state == device_state::paused)
                  || (t.kind == task_kind::ordered && !st.held.empty());
      if (hold) {
        st.held.push_back({std::move(t), rp});
        return rp;
      }
      run_task(self, t, rp, false);
      return rp;
    },
    [self](tick_atom) { // audit_batch_interval after a held-back event
      self->state.audit_tick_armed = false;
      send_audit_batch(self);
    },
    [self](tick_atom, measure_atom) { // cfg.measure_again, from itself only
      if (self->current_sender() != self->ctrl())
        return;
      if (measure_if_idle(self))
        self->delayed_send(self, self->state.cfg.measure_again,
                           tick_atom::value, measure_atom::value);
    },
    [self](telemetry_atom) -> caf::result<telemetry_sample> {
      if (auto err = foreign(self, access::permission::monitoring_read))
        return err;
      auto& st = self->state;
      st.pool->trim_idle(); // the monitor's steady beat (pool_cache_idle)
      auto t = st.dev->read_telemetry();
      telemetry_sample s;
      s.device = st.dev->properties().id;
      s.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
      if (t.temperature_c)
        s.temperature_c = *t.temperature_c;
      if (t.power_w)
        s.power_w = *t.power_w;
      if (t.clock_mhz)
        s.clock_mhz = *t.clock_mhz;
      if (t.utilization)
        s.utilization = *t.utilization;
      s.memory_total = t.memory.total;
      s.memory_free = with_cached(st, t.memory.free);
      s.memory_used_by_exo = t.memory.used_by_exo;
      return s;
    },
    [self](pause_atom, std::string& reason) -> caf::result<caf::atom_value> {
      if (auto err = foreign(self, access::permission::policy_admin))
        return err;
      auto& st = self->state;
      if (auto err = st.unusable())
        return err;
      st.state = device_state::paused;
      st.state_reason = std::move(reason);
      return caf::ok_atom::value;
    },
    [self](resume_atom) -> caf::result<caf::atom_value> {
      if (auto err = foreign(self, access::permission::policy_admin))
        return err;
      auto& st = self->state;
      if (auto err = st.unusable())
        return err;
      st.state = device_state::ready;
      st.state_reason.clear();
      run_held(self);
      return caf::ok_atom::value;
    },
    // -- token-bearing variants (messages/access.hpp) ------------------------
    [self](info_atom, const std::string& token) -> caf::result<device_info> {
      auto who = authorize(self, token, access::permission::device_info);
      if (!who)
        return std::move(who.error());
      // A client's read (console "dev info"); the token-less info the
      // node's own actors ask for all the time is not audited.
      audit_op(self, audit::event_type::device_info, std::move(*who), {});
      auto& st = self->state;
      auto info = describe(*st.dev, st.cfg.node);
      info.free_memory = with_cached(st, info.free_memory);
      info.state = st.state;
      info.state_reason = st.state_reason;
      return info;
    },
    [self](allocate_atom, std::uint64_t bytes,
           const std::string& token) -> caf::result<handle_id> {
      auto& st = self->state;
      if (!st.cfg.access)
        return std::move(
          authorize(self, token, access::permission::memory_allocate)
            .error());
      auto d = st.cfg.access->reserve(token, st.dev->properties().id, bytes);
      if (!d)
        return denied(self, d, access::permission::memory_allocate);
      auto r = do_allocate(self, bytes, d.principal);
      if (r.flag == caf::rt_value && r.value.match_elements<handle_id>()) {
        auto h = r.value.get_as<handle_id>(0);
        st.owners.emplace(h, std::make_pair(d.principal, bytes));
        return h;
      }
      st.cfg.access->release(d.principal, bytes);
      return r;
    },
    [self](free_atom, handle_id h,
           const std::string& token) -> caf::result<caf::atom_value> {
      auto who = authorize(self, token, access::permission::memory_free);
      if (!who)
        return std::move(who.error());
      return do_free(self, h, *who);
    },
    [self](compute_atom, kernel_call& call,
           const std::string& token) -> caf::result<caf::atom_value> {
      auto who = authorize(self, token, access::permission::compute_run);
      if (!who)
        return std::move(who.error());
      return do_compute(self, call, *who);
    },
    [self](sync_atom,
           const std::string& token) -> caf::result<caf::atom_value> {
      auto who = authorize(self, token, access::permission::compute_sync);
      if (!who)
        return std::move(who.error());
      return do_sync(self, *who);
    },
    // A test cluster's fault (console "dev fault"): admins only, audited
    // as a warning; a real device refuses it.
    [self](fault_atom, const std::string& spec,
           const std::string& token) -> caf::result<std::string> {
      auto who = authorize(self, token, access::permission::policy_admin);
      if (!who)
        return std::move(who.error());
      auto& st = self->state;
      if (spec.empty() || spec.size() > 64)
        return make_exo_error(exo_errc::invalid_argument,
                              "dev fault: a fault name of 1 to 64 characters");
      auto done = st.dev->inject_fault(spec);
      audit_op(self, audit::event_type::device_fault, std::move(*who),
               {{"fault", spec},
                {"result", done ? *done : done.err().message}},
               audit::severity::warning);
      if (!done)
        return make_exo_error(exo_errc::invalid_argument,
                              "dev fault: " + done.err().message);
      return std::move(*done);
    },
    // Not limited to this node: the console's `inspect NODE/device/...`
    // reaches it delegated by the peer's gate (the sender stays the asking
    // node), and a snapshot reads counters only, no memory or compute.
    [self](inspect_atom) -> caf::result<actor_snapshot> {
      auto& st = self->state;
      actor_snapshot snap;
      snap.name = "device/" + st.dev->properties().id;
      snap.kind = "device";
      snap.node = st.cfg.node;
      snap.summary = std::string{to_string(st.state)} + ", "
                     + std::to_string(st.pool->live_handles()) + " buffers";
      snap.fields = {
        {"state", to_string(st.state)},
        {"state_reason", st.state_reason},
        {"live_handles", std::to_string(st.pool->live_handles())},
        {"live_bytes", std::to_string(st.pool->live_bytes())},
        {"cached_bytes", std::to_string(st.pool->cached_bytes())},
        {"pool_reuses", std::to_string(st.pool->reuse_count())},
        {"operations", std::to_string(st.operations)},
        {"kernel_calls", std::to_string(st.kernel_calls)},
        {"errors", std::to_string(st.errors)},
        {"bytes_in", std::to_string(st.ops->bytes_written())},
        {"bytes_out", std::to_string(st.ops->bytes_read())},
        {"tasks", std::to_string(st.tasks)},
        {"compute_tasks", std::to_string(st.compute_tasks)},
        {"held_tasks", std::to_string(st.held.size())},
        {"kept", std::to_string(st.kept.size())},
        {"kept_bytes", std::to_string(st.kept_bytes)},
        {"kept_released", std::to_string(st.kept_released)},
        {"kept_expired", std::to_string(st.kept_expired)},
        {"last_error", st.last_error},
        {"access_denials", std::to_string(st.denials)},
        {"queue_depth", std::to_string(self->mailbox().size())},
      };
      return snap;
    },
  };
}

} // namespace

exo::device_actor spawn_device_actor(caf::actor_system& sys,
                                     backend::device& dev,
                                     device_actor_config cfg) {
  return sys.spawn<caf::detached>(device_impl, &dev, std::move(cfg));
}

} // namespace exo::device
