#include "actors/shard/shard_actor.hpp"

#include "actors/shard/actor_device_ops.hpp"
#include "messages/errors.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <utility>

namespace exo::shard {

namespace {

struct shard_state {
  shard_setup cfg;
  /// Declared before the stage: the stage frees its buffers through it.
  std::unique_ptr<actor_device_ops> ops;
  std::unique_ptr<model::device_stage> stage;
  std::string init_error; ///< why the stage could not be set up
  std::map<std::pair<std::uint64_t, std::uint32_t>, model::cache_id> caches;
  caf::actor next;
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;
  double busy_s = 0;
  double upload_s = 0;
  static inline const char* name = "exo.shard";
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
/// `s` updated.
caf::error compute(shard_state& st, stage_step& s) {
  if (!st.stage)
    return make_exo_error(exo_errc::failed_state,
                          "shard: " + st.init_error);
  auto& hp = st.cfg.model->hparams();
  auto& stage = *st.stage;
  const std::size_t n = s.tokens.size();
  if (n == 0 || n > max_batch_tokens(hp.n_embd))
    return bad("shard: a step needs 1 to "
               + std::to_string(max_batch_tokens(hp.n_embd)) + " tokens");
  if (!stage.is_first() && s.x.size() != n * hp.n_embd)
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
  }
  if (stage.is_last()) {
    std::vector<float> logits(hp.n_vocab);
    if (auto f = stage.forward(id, s.pos, s.x.data(), n, logits.data(), 1);
        !f)
      return device_failed(f.err());
    s.x = std::move(logits);
  } else if (auto f = stage.forward(id, s.pos, s.x.data(), n); !f) {
    return device_failed(f.err());
  }
  return caf::none;
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
      if (auto err = compute(st, s))
        return err;
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
      return self->delegate(st.next, forward_atom::value, std::move(s));
    },
    [self](next_atom, caf::actor& next) {
      self->state.next = std::move(next);
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
      snap.fields["compute"] = st.stage ? "device" : "none: " + st.init_error;
      snap.fields["upload_s"] = std::to_string(st.upload_s);
      if (st.stage) {
        snap.fields["weight_bytes"] = std::to_string(st.stage->weight_bytes());
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
