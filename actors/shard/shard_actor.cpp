#include "actors/shard/shard_actor.hpp"

#include "messages/errors.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <utility>

namespace exo::shard {

namespace {

struct shard_state {
  shard_setup cfg;
  std::unique_ptr<model::llama_stage> stage;
  std::map<std::pair<std::uint64_t, std::uint32_t>, model::kv_cache> caches;
  caf::actor next;
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;
  double busy_s = 0;
  static inline const char* name = "exo.shard";
};

using self_ptr = caf::stateful_actor<shard_state>*;

caf::error bad(std::string what) {
  return make_exo_error(exo_errc::invalid_argument, std::move(what));
}

/// Runs the step's layers; returns an error, or none with `s` updated.
caf::error compute(shard_state& st, stage_step& s) {
  auto& hp = st.cfg.model->hparams();
  const std::size_t n = s.tokens.size();
  if (n == 0 || n > max_batch_tokens(hp.n_embd))
    return bad("shard: a step needs 1 to "
               + std::to_string(max_batch_tokens(hp.n_embd)) + " tokens");
  if (!st.stage->is_first() && s.x.size() != n * hp.n_embd)
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
    it = st.caches.emplace(key, st.stage->make_cache(st.cfg.n_ctx)).first;
  }
  auto& cache = it->second;
  if (s.pos != cache.n_past())
    return bad("shard: step at position " + std::to_string(s.pos)
               + ", cache holds " + std::to_string(cache.n_past()));
  if (s.pos + n > cache.capacity())
    return bad("shard: context of " + std::to_string(cache.capacity())
               + " tokens exceeded");
  try {
    if (st.stage->is_first()) {
      s.x.resize(n * hp.n_embd);
      st.stage->embed(s.tokens.data(), n, s.x.data());
    }
    st.stage->forward(s.x.data(), n, cache);
    if (st.stage->is_last()) {
      std::vector<float> logits(hp.n_vocab);
      st.stage->head(s.x.data() + (n - 1) * hp.n_embd, 1, logits.data());
      s.x = std::move(logits);
    }
  } catch (const std::exception& e) {
    return bad(std::string{"shard: "} + e.what());
  }
  return caf::none;
}

caf::behavior shard_impl(self_ptr self, shard_setup cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.stage = std::make_unique<model::llama_stage>(st.cfg.model, st.cfg.first,
                                                  st.cfg.last);
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
      if (st.stage->is_last())
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
      auto& caches = self->state.caches;
      for (auto it = caches.begin(); it != caches.end();)
        it = it->first.first == job ? caches.erase(it) : std::next(it);
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
      return snap;
    },
  };
}

} // namespace

std::uint32_t max_batch_tokens(std::uint32_t n_embd) {
  auto per_token = static_cast<std::uint64_t>(n_embd) * sizeof(float);
  auto n = max_chunk_bytes / (per_token == 0 ? 1 : per_token);
  return static_cast<std::uint32_t>(n == 0 ? 1 : (n > 512 ? 512 : n));
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
  if (setup.n_ctx == 0)
    setup.n_ctx = setup.model->hparams().n_ctx_train;
  return sys.spawn<caf::detached>(shard_impl, std::move(setup));
}

} // namespace exo::shard
