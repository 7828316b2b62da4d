#include "actors/shard/shard_actor.hpp"

#include "actors/shard/actor_device_ops.hpp"
#include "messages/errors.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <utility>

namespace exo::shard {

namespace {

using seq_key = std::pair<std::uint64_t, std::uint32_t>; ///< (job, seq)

/// A buffer on a device that a sequence's activations are copied into.
struct inbox {
  model::device_handle buf = 0; ///< 0: none (the host path is used)
  std::uint64_t bytes = 0;
  caf::actor device;            ///< the device actor the buffer is on
};

struct shard_state {
  shard_setup cfg;
  /// Declared before the stage: the stage frees its buffers through it.
  std::unique_ptr<actor_device_ops> ops;
  std::unique_ptr<model::device_stage> stage;
  std::string init_error; ///< why the stage could not be set up
  std::map<seq_key, model::cache_id> caches;
  /// Buffers on this shard's device that the previous stage (same node)
  /// copies each sequence's activations into.
  std::map<seq_key, inbox> inboxes;
  /// The next stage's inboxes (same node), asked for once per sequence;
  /// buf 0 where it refused.
  std::map<seq_key, inbox> next_inboxes;
  std::unique_ptr<caf::scoped_actor> asker; ///< asks the next stage
  caf::actor next;
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;
  std::uint64_t device_handoffs = 0; ///< steps passed on by device copy
  std::uint64_t host_handoffs = 0;   ///< steps passed on in the message
  double busy_s = 0;
  double upload_s = 0;
  static inline const char* name = "exo.shard";

  ~shard_state() {
    if (ops)
      for (auto& kv : inboxes)
        (void) ops->free(kv.second.buf);
  }
};

using self_ptr = caf::stateful_actor<shard_state>*;

caf::error bad(std::string what) {
  return make_exo_error(exo_errc::invalid_argument, std::move(what));
}

caf::error device_failed(const backend::error& err) {
  auto e = err;
  e.message = "shard: " + e.message;
  return to_caf_error(e);
}

/// Runs the step's layers on the device; returns an error, or none with
/// `s` updated (x: the activations out, unless io.keep_out leaves them on
/// the device; the logits on the last stage).
caf::error compute(shard_state& st, stage_step& s,
                   const model::device_stage::device_io& io) {
  if (!st.stage)
    return make_exo_error(exo_errc::failed_state,
                          "shard: " + st.init_error);
  auto& hp = st.cfg.model->hparams();
  auto& stage = *st.stage;
  const std::size_t n = s.tokens.size();
  if (n == 0 || n > max_batch_tokens(hp.n_embd))
    return bad("shard: a step needs 1 to "
               + std::to_string(max_batch_tokens(hp.n_embd)) + " tokens");
  if (!stage.is_first() && !s.on_device && s.x.size() != n * hp.n_embd)
    return bad("shard: expected " + std::to_string(n * hp.n_embd)
               + " activations, got " + std::to_string(s.x.size()));
  auto key = std::make_pair(s.job, s.seq);
  auto it = st.caches.find(key);
  if (it == st.caches.end()) {
    if (s.pos != 0)
      return bad("shard: sequence " + std::to_string(s.seq)
                 + " starts at position " + std::to_string(s.pos));
    if (st.caches.size() >= max_sequences_per_shard)
      return make_exo_error(exo_errc::out_of_memory,
                            "shard: too many sequences");
    auto c = stage.new_cache(st.cfg.n_ctx);
    if (!c)
      return device_failed(c.err());
    it = st.caches.emplace(key, *c).first;
  }
  auto id = it->second;
  auto past = stage.n_past(id);
  auto cap = stage.capacity(id);
  if (!past || !cap)
    return device_failed(!past ? past.err() : cap.err());
  if (s.pos != *past)
    return bad("shard: step at position " + std::to_string(s.pos)
               + ", cache holds " + std::to_string(*past));
  if (std::uint64_t{s.pos} + n > *cap)
    return bad("shard: context of " + std::to_string(*cap)
               + " tokens exceeded");
  if (stage.is_first()) {
    s.x.resize(n * hp.n_embd);
    if (auto e = stage.embed(s.tokens.data(), n, s.x.data()); !e)
      return bad("shard: " + e.err().message);
  } else if (s.on_device && !io.keep_out && !stage.is_last()) {
    s.x.resize(n * hp.n_embd); // the activations out come to the host
  }
  float* x = s.x.empty() ? nullptr : s.x.data();
  if (stage.is_last()) {
    std::vector<float> logits(hp.n_vocab);
    if (auto f = stage.forward(id, s.pos, x, n, logits.data(), 1, io); !f)
      return device_failed(f.err());
    s.x = std::move(logits);
  } else if (auto f = stage.forward(id, s.pos, x, n, nullptr, 1, io); !f) {
    return device_failed(f.err());
  }
  return caf::none;
}

/// The next stage's inbox for the step's sequence when the next stage is
/// on this node and has one large enough, else null (the activations go
/// in the message). Asks the next stage once per sequence.
const inbox* next_inbox(self_ptr self, const stage_step& s,
                        std::uint64_t bytes) {
  auto& st = self->state;
  if (!st.next || st.next.node() != self->node() || !st.stage
      || st.stage->is_last())
    return nullptr;
  auto key = seq_key{s.job, s.seq};
  auto it = st.next_inboxes.find(key);
  if (it == st.next_inboxes.end()) {
    inbox ib;
    if (!st.asker)
      st.asker = std::make_unique<caf::scoped_actor>(self->system());
    (*st.asker)
      ->request(st.next, std::chrono::minutes(5), inbox_atom::value, s.job,
                s.seq, bytes)
      .receive(
        [&](handle_id h, caf::actor& dev) {
          ib.buf = h;
          ib.bytes = bytes;
          ib.device = std::move(dev);
        },
        [](caf::error&) {}); // refused: this sequence takes the host path
    it = st.next_inboxes.emplace(key, std::move(ib)).first;
  }
  auto& ib = it->second;
  return ib.buf != 0 && ib.device && bytes <= ib.bytes ? &ib : nullptr;
}

/// Allocates (or finds) the inbox of a sequence on this shard's device.
caf::result<handle_id, caf::actor>
open_inbox(self_ptr self, std::uint64_t job, std::uint32_t seq,
           std::uint64_t bytes) {
  auto& st = self->state;
  auto sender = self->current_sender();
  if (!sender || sender->node() != self->node())
    return make_exo_error(exo_errc::access_denied,
                          "shard: inboxes are for stages of this node");
  if (!st.stage)
    return make_exo_error(exo_errc::failed_state, "shard: " + st.init_error);
  const auto& hp = st.cfg.model->hparams();
  const std::uint64_t most = std::uint64_t{max_batch_tokens(hp.n_embd)}
                             * hp.n_embd * 4;
  if (st.stage->is_first())
    return bad("shard: the first stage takes tokens, not activations");
  if (bytes == 0 || bytes > most || bytes % (std::uint64_t{hp.n_embd} * 4))
    return bad("shard: an inbox holds whole rows of at most "
               + std::to_string(most) + " bytes, not "
               + std::to_string(bytes));
  auto key = seq_key{job, seq};
  auto it = st.inboxes.find(key);
  if (it != st.inboxes.end() && it->second.bytes >= bytes)
    return caf::make_result(handle_id{it->second.buf}, it->second.device);
  if (it == st.inboxes.end() && st.inboxes.size() >= max_sequences_per_shard)
    return make_exo_error(exo_errc::out_of_memory,
                          "shard: too many sequences");
  auto h = st.ops->allocate(bytes);
  if (!h)
    return device_failed(h.err());
  if (it != st.inboxes.end())
    (void) st.ops->free(it->second.buf);
  inbox ib{*h, bytes, caf::actor_cast<caf::actor>(st.cfg.device)};
  st.inboxes[key] = ib;
  return caf::make_result(handle_id{ib.buf}, ib.device);
}

/// Uploads the stage's weights to the device (blocking: the shard is
/// detached). A failure is kept and answered to every step.
void set_up(self_ptr self) {
  auto& st = self->state;
  auto t0 = std::chrono::steady_clock::now();
  st.ops = std::make_unique<actor_device_ops>(self->system(), st.cfg.device,
                                              st.cfg.device_id);
  // The options placement counts with (model::device_stage_memory).
  auto o = model::shard_stage_options(st.cfg.model->hparams());
  o.upload_chunk_bytes = max_chunk_bytes;
  o.max_ops_per_run = max_kernel_batch;
  auto stage = model::device_stage::create(st.cfg.model, st.cfg.first,
                                           st.cfg.last, *st.ops, o);
  if (stage)
    st.stage = std::move(*stage);
  else
    st.init_error = stage.err().to_string();
  st.upload_s = std::chrono::duration<double>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
}

caf::behavior shard_impl(self_ptr self, shard_setup cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  set_up(self);
  if (st.cfg.owner) {
    self->monitor(st.cfg.owner);
    self->set_down_handler([self](caf::down_msg& dm) {
      if (dm.source == self->state.cfg.owner)
        self->quit(caf::exit_reason::user_shutdown);
    });
  }
  return {
    [self](forward_atom, stage_step& s) -> caf::result<caf::message> {
      auto& st = self->state;
      auto t0 = std::chrono::steady_clock::now();
      const std::uint64_t row_bytes =
        std::uint64_t{st.cfg.model->hparams().n_embd} * 4;
      model::device_stage::device_io io;
      if (s.on_device) { // the previous stage copied x into our inbox
        auto ib = st.inboxes.find(seq_key{s.job, s.seq});
        if (ib == st.inboxes.end() || !s.x.empty())
          return bad("shard: sequence " + std::to_string(s.seq)
                     + " has no activations on this device");
        if (s.tokens.size() * row_bytes > ib->second.bytes)
          return bad("shard: the step is larger than its inbox");
        io.in = {ib->second.buf, 0};
      }
      const inbox* out = nullptr;
      if (st.next && !s.tokens.empty()
          && s.tokens.size() <= max_batch_tokens(
               st.cfg.model->hparams().n_embd))
        out = next_inbox(self, s, s.tokens.size() * row_bytes);
      io.keep_out = out != nullptr;
      if (auto err = compute(st, s, io))
        return err;
      s.on_device = false;
      if (out) { // a device copy into the next stage's inbox
        auto bytes = s.tokens.size() * row_bytes;
        auto act = st.stage->activations();
        if (auto c = st.ops->copy_to(act.buf, act.offset, out->device,
                                     out->buf, 0, bytes)) {
          s.x.clear();
          s.on_device = true;
        } else { // the copy failed: send this step through the host
          s.x.resize(bytes / 4);
          if (auto r = st.ops->read(act.buf, act.offset, s.x.data(), bytes);
              !r)
            return device_failed(r.err());
        }
      }
      st.busy_s += std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - t0)
                     .count();
      ++st.steps;
      st.tokens += s.tokens.size();
      if (st.cfg.last == st.cfg.model->hparams().n_layer)
        return caf::make_message(std::move(s));
      if (!st.next)
        return make_exo_error(exo_errc::failed_state,
                              "shard: no next stage set");
      ++(s.on_device ? st.device_handoffs : st.host_handoffs);
      return self->delegate(st.next, forward_atom::value, std::move(s));
    },
    [self](inbox_atom, std::uint64_t job, std::uint32_t seq,
           std::uint64_t bytes) { return open_inbox(self, job, seq, bytes); },
    [self](next_atom, caf::actor& next) {
      self->state.next = std::move(next);
      self->state.next_inboxes.clear(); // they were the old next stage's
      return caf::ok_atom::value;
    },
    [self](release_atom, std::uint64_t job) {
      auto& st = self->state;
      auto& caches = st.caches;
      for (auto it = caches.begin(); it != caches.end();) {
        if (it->first.first != job) {
          ++it;
          continue;
        }
        if (st.stage)
          (void) st.stage->drop_cache(it->second);
        it = caches.erase(it);
      }
      for (auto it = st.inboxes.begin(); it != st.inboxes.end();) {
        if (it->first.first != job) {
          ++it;
          continue;
        }
        (void) st.ops->free(it->second.buf);
        it = st.inboxes.erase(it);
      }
      for (auto it = st.next_inboxes.begin(); it != st.next_inboxes.end();)
        it = it->first.first == job ? st.next_inboxes.erase(it) : ++it;
      return caf::ok_atom::value;
    },
    [self](inspect_atom) {
      auto& st = self->state;
      actor_snapshot snap;
      snap.name = "shard-" + std::to_string(st.cfg.first) + "-"
                  + std::to_string(st.cfg.last);
      snap.kind = "shard";
      snap.node = st.cfg.node;
      snap.summary = "layers [" + std::to_string(st.cfg.first) + ", "
                     + std::to_string(st.cfg.last) + ") on "
                     + st.cfg.device_id;
      snap.fields["device"] = st.cfg.device_id;
      snap.fields["sequences"] = std::to_string(st.caches.size());
      snap.fields["steps"] = std::to_string(st.steps);
      snap.fields["tokens"] = std::to_string(st.tokens);
      snap.fields["busy_s"] = std::to_string(st.busy_s);
      snap.fields["device_handoffs"] = std::to_string(st.device_handoffs);
      snap.fields["host_handoffs"] = std::to_string(st.host_handoffs);
      snap.fields["inboxes"] = std::to_string(st.inboxes.size());
      snap.fields["compute"] = st.stage ? "device" : "none: " + st.init_error;
      snap.fields["upload_s"] = std::to_string(st.upload_s);
      if (st.stage) {
        snap.fields["weight_bytes"] = std::to_string(st.stage->weight_bytes());
        snap.fields["weight_bytes_in_place"] =
          std::to_string(st.stage->weight_bytes_in_place());
        snap.fields["kv_cache_bytes"] =
          std::to_string(st.stage->cache_bytes());
        snap.fields["device_ops"] = std::to_string(st.stage->ops_run());
      }
      if (st.ops) {
        snap.fields["device_requests"] = std::to_string(st.ops->requests());
        snap.fields["pause_waits"] = std::to_string(st.ops->pause_waits());
      }
      return snap;
    },
  };
}

} // namespace

// Placement sizes a stage's scratch with model::shard_stage_options(),
// which cannot see the wire's limit.
static_assert(max_chunk_bytes == model::default_upload_chunk_bytes,
              "model::default_upload_chunk_bytes must be max_chunk_bytes");

std::uint32_t max_batch_tokens(std::uint32_t n_embd) {
  return model::batch_tokens_for(n_embd, max_chunk_bytes);
}

caf::actor spawn_shard(caf::actor_system& sys, shard_setup setup) {
  if (!setup.model)
    throw model::model_error("shard: no model");
  auto n_layer = setup.model->hparams().n_layer;
  if (setup.first >= setup.last || setup.last > n_layer)
    throw model::model_error("shard: layer range [" + std::to_string(setup.first)
                             + ", " + std::to_string(setup.last)
                             + ") is not inside [0, "
                             + std::to_string(n_layer) + ")");
  if (!setup.device)
    throw model::model_error("shard: no device to compute on");
  if (setup.n_ctx == 0)
    setup.n_ctx = setup.model->hparams().n_ctx_train;
  return sys.spawn<caf::detached>(shard_impl, std::move(setup));
}

} // namespace exo::shard
