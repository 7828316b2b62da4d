#include "actors/workload/shard_host.hpp"

#include "core/text/json.hpp"

#include "actors/workload/shard_actor.hpp"
#include "actors/workload/simple_placement.hpp"
#include "core/tls/bulk_channel.hpp"
#include "core/workload/model_cache.hpp"
#include "core/workload/step_batcher.hpp"
#include "messages/cluster.hpp"
#include "messages/errors.hpp"
#include "messages/workload.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <iterator>
#include <optional>
#include <set>

#include <map>
#include <memory>

namespace exo::workload {

namespace {

using namespace std::chrono_literals;

struct waiter {
  shard_spec spec;
  caf::response_promise rp;
  /// A prefetch (prefetch_atom): answered with the file's path once every
  /// part is here; no shard starts.
  bool whole = false;
};

/// Parts of a model on their way from a peer's bulk channel. The fetching
/// worker writes `file` until it reports back; the service does not touch
/// it meanwhile. Shards asking for the same model meanwhile wait, then are
/// served (or fetch what they still miss) when it is done.
struct download {
  std::shared_ptr<workload::partial_model> file;
  std::vector<waiter> waiters;
};

/// (fetched_atom, sha256, error, bytes): a download worker is done
/// ("" = ok), having received `bytes`.
using fetched_atom = caf::atom_constant<caf::atom("fetched")>;

struct running_shard {
  caf::actor handle;
  std::string text;
  /// Its job is coordinated by another node (a graceful stop moves those
  /// off first).
  bool foreign = false;
};

struct host_state {
  std::string node;
  std::string state_dir;
  std::chrono::microseconds batch_wait{2000}; ///< devices.batch_wait_ms
  std::uint64_t prefix_cache_bytes = 0; ///< devices.prefix_cache_mib
  std::chrono::milliseconds keep_alive{0}; ///< devices.keep_alive_s
  caf::actor node_actor;
  caf::actor gate;
  /// The models loaded, by file: the model file a local coordinator
  /// names (whole), or a partial copy in this node's cache (its parts
  /// that were there when it was loaded: a model loaded from a copy with
  /// other layers' parts only must not serve these layers).
  struct loaded_model {
    std::weak_ptr<const model::llama_model> model;
    bool whole = false;
    std::set<std::uint64_t> parts; ///< offsets held when it was loaded
  };
  std::map<std::string, loaded_model> models;
  /// A whole file of each model (by sha256) a local coordinator named: a
  /// peer's shard of that model uses it while it is loaded.
  std::map<std::string, std::string> whole_files;
  std::map<std::string, download> downloads;
  std::vector<running_shard> shards;
  tls::material tls; ///< for bulk_fetch
  static inline const char* name = "exo.shard_host";
};

using self_ptr = caf::stateful_actor<host_state>*;

caf::error fail(exo_errc code, std::string what) {
  return make_exo_error(code, std::move(what));
}

std::string render(self_ptr self, const caf::error& err) {
  auto msg = error_message(err);
  return msg.empty() ? self->system().render(err) : msg;
}

/// The model in the file at `path` (whole: a local coordinator's file;
/// else a partial copy that holds `parts` now): the one loaded already
/// when it can serve them, else loaded anew. A model loaded from a copy
/// that lacked some of `parts` then is never reused for them: the soak
/// found a local job's first stage built on a copy that held only another
/// stage's layers (its weights zeros, every token wrong).
std::shared_ptr<const model::llama_model>
load_model(self_ptr self, const std::string& path, bool whole,
           const std::vector<workload::model_part>& parts) {
  auto& st = self->state;
  auto covers = [&](const host_state::loaded_model& x) {
    return x.whole
           || std::all_of(parts.begin(), parts.end(), [&](auto& p) {
                return x.parts.count(p.offset) != 0;
              });
  };
  if (auto it = st.models.find(path); it != st.models.end() && covers(it->second))
    if (auto m = it->second.model.lock())
      return m;
  std::shared_ptr<const model::llama_model> m = model::llama_model::load(path);
  auto& entry = st.models[path];
  entry.model = m;
  entry.whole = whole;
  entry.parts.clear();
  for (auto& p : parts)
    entry.parts.insert(p.offset);
  return m;
}

/// The KV cache type a spec names ("" = f16), none for an unknown name.
std::optional<backend::kv_type> kv_of(const shard_spec& spec) {
  return spec.kv_type.empty() ? std::optional{backend::kv_type::f16}
                              : backend::parse_kv_type(spec.kv_type);
}

/// Picks the device and spawns the shard once the model file is at `path`.
void start_shard(self_ptr self, shard_spec spec, std::string path,
                 bool whole, std::uint64_t received, caf::response_promise rp) {
  if (!kv_of(spec)) {
    rp.deliver(fail(exo_errc::invalid_argument,
                    self->state.node + ": unknown KV cache type '"
                      + spec.kv_type.substr(0, 16) + "'"));
    return;
  }
  std::shared_ptr<const model::llama_model> m;
  try {
    m = load_model(self, path, whole, spec.parts);
  } catch (const std::exception& e) {
    rp.deliver(fail(exo_errc::invalid_argument,
                    self->state.node + ": model " + path + ": " + e.what()));
    return;
  }
  self->request(self->state.node_actor, 10s, devices_atom::value,
                actors_atom::value)
    .then(
      [self, spec, m, received, rp](std::vector<device_actor>& hs) mutable {
        struct gather {
          std::vector<std::pair<device_info, device_actor>> found;
          std::size_t pending = 0;
        };
        auto g = std::make_shared<gather>();
        g->pending = hs.size();
        auto done = [self, spec, m, received, rp, g]() mutable {
          std::vector<device_info> infos;
          for (auto& f : g->found)
            if (spec.device.empty() || f.first.id == spec.device) {
              infos.push_back(f.first);
              // Named for the stage while paused for heat (a job with
              // nowhere else to go): the stage waits there to run.
              if (!spec.device.empty()
                  && infos.back().state == device_state::paused)
                infos.back().state = device_state::busy;
            }
          auto order = stage_order(infos);
          if (order.empty()) {
            rp.deliver(fail(exo_errc::no_device,
                            self->state.node + ": no usable device"
                              + (spec.device.empty() ? ""
                                                     : " " + spec.device)));
            return;
          }
          device_actor dev;
          for (auto& f : g->found)
            if (f.first.id == order.front().id)
              dev = f.second;
          workload::shard_setup s;
          s.model = m;
          s.first = spec.first;
          s.last = spec.last;
          s.n_ctx = spec.n_ctx;
          s.kv = *kv_of(spec);
          s.device = dev;
          s.device_id = order.front().id;
          s.node = self->state.node;
          s.model_sha256 = spec.sha256;
          s.owner = spec.owner;
          s.host = caf::actor_cast<caf::actor>(self);
          s.batch_wait = self->state.batch_wait;
          s.prefix_cache_bytes = self->state.prefix_cache_bytes;
          s.keep_alive = self->state.keep_alive;
          caf::actor h;
          try {
            h = workload::spawn_shard(self->system(), std::move(s));
          } catch (const std::exception& e) {
            rp.deliver(fail(exo_errc::invalid_argument,
                            self->state.node + ": " + e.what()));
            return;
          }
          self->link_to(h);
          self->state.shards.push_back(
            {h,
             "layers [" + std::to_string(spec.first) + ", "
               + std::to_string(spec.last) + ") on " + order.front().id
               + " (" + order.front().name + ")",
             spec.owner && spec.owner.node() != self->node()});
          rp.deliver(shard_ready{h, self->state.node, order.front().id,
                                 order.front().name, received});
        };
        if (hs.empty()) {
          done();
          return;
        }
        for (auto& h : hs)
          self->request(h, 5s, info_atom::value)
            .then(
              [g, h, done](device_info& info) mutable {
                g->found.emplace_back(std::move(info), h);
                if (--g->pending == 0)
                  done();
              },
              [g, done](caf::error&) mutable {
                if (--g->pending == 0)
                  done();
              });
      },
      [self, rp](caf::error& err) mutable {
        rp.deliver(fail(exo_errc::no_device,
                        "cannot list devices: " + render(self, err)));
      });
}

void fail_download(self_ptr self, const std::string& sha,
                   const std::string& why) {
  auto it = self->state.downloads.find(sha);
  if (it == self->state.downloads.end())
    return;
  auto waiters = std::move(it->second.waiters);
  self->state.downloads.erase(it);
  for (auto& w : waiters)
    w.rp.deliver(fail(exo_errc::invalid_argument,
                      self->state.node + ": model transfer: " + why));
}

void place_or_fetch(self_ptr self, shard_spec spec, caf::response_promise rp,
                    std::uint64_t received, bool whole = false);

/// Ends a download: its parts are verified and recorded (or not), and every
/// shard waiting for the model starts, fetches what it still misses, or
/// fails.
void finish_download(self_ptr self, const std::string& sha,
                     const std::string& error, std::uint64_t bytes) {
  auto& st = self->state;
  auto it = st.downloads.find(sha);
  if (it == st.downloads.end())
    return;
  if (!error.empty()) {
    fail_download(self, sha, error);
    return;
  }
  auto waiters = std::move(it->second.waiters);
  st.downloads.erase(it);
  st.models.erase(sha); // new shards map the file with its new parts
  // The bytes crossed once: count them for the first shard only.
  for (auto& w : waiters) {
    place_or_fetch(self, std::move(w.spec), std::move(w.rp), bytes, w.whole);
    bytes = 0;
  }
}

/// Fetches `parts` of the model from `source`'s bulk channel, whose address
/// this node takes from its own member view (never from the request), on a
/// detached worker: the transfer blocks, the service does not.
void start_download(self_ptr self, const std::string& sha,
                    const std::string& source,
                    std::vector<workload::model_part> parts) {
  self
    ->request(self->state.gate, 10s, console_atom::value,
              std::string{"nodes"}, std::string{})
    .then(
      [self, sha, source, parts](console_reply& r) {
        auto& st = self->state;
        auto it = st.downloads.find(sha);
        if (it == st.downloads.end())
          return;
        const member_info* m = nullptr;
        for (auto& x : r.nodes.members)
          if (x.name == source && x.status == member_status::alive)
            m = &x;
        if (m == nullptr || m->bulk_port == 0) {
          fail_download(self, sha,
                        source + " is not a live member with a bulk channel");
          return;
        }
        auto file = it->second.file;
        auto service = caf::actor_cast<caf::actor>(self);
        // The id goes as an argument: CAF 0.17 dereferences a null
        // shared_ptr<tuple<>> for a spawn without one (UBSan reports it).
        self->system().spawn<caf::detached>(
          [file, parts, source, service, files = st.tls, host = m->host,
           port = m->bulk_port](caf::event_based_actor* w, std::string sha) {
            std::string error;
            std::uint64_t bytes = 0;
            try {
              tls::bulk_session session{files, host, port, source};
              for (auto& part : parts) {
                file->begin(part);
                session.fetch(sha, part.offset, part.length,
                              [&](const std::uint8_t* d, std::size_t n) {
                                file->write(d, n);
                              });
                file->commit();
                bytes += part.length;
              }
            } catch (const std::exception& e) {
              error = e.what();
            }
            w->send(service, fetched_atom::value, sha, error, bytes);
          },
          sha);
      },
      [self, sha](caf::error& err) {
        fail_download(self, sha,
                      "cannot read the member view: " + render(self, err));
      });
}

/// Starts the shard when this node holds every part of the model it
/// needs, else fetches the missing ones first.
void place_or_fetch(self_ptr self, shard_spec spec, caf::response_promise rp,
                    std::uint64_t received, bool whole) {
  auto& st = self->state;
  auto sha = spec.sha256;
  if (auto it = st.downloads.find(sha); it != st.downloads.end()) {
    it->second.waiters.push_back({std::move(spec), std::move(rp), whole});
    return;
  }
  std::shared_ptr<workload::partial_model> file;
  std::vector<workload::model_part> missing;
  try {
    file = std::make_shared<workload::partial_model>(st.state_dir, sha,
                                                  spec.size);
    missing = file->missing(spec.parts);
  } catch (const std::exception& e) {
    rp.deliver(fail(exo_errc::invalid_argument,
                    st.node + ": model cache: " + e.what()));
    return;
  }
  if (missing.empty()) {
    auto path = file->path();
    if (whole)
      rp.deliver(path);
    else
      start_shard(self, std::move(spec), path, false, received,
                  std::move(rp));
    return;
  }
  auto source = spec.source_node;
  download dl;
  dl.file = std::move(file);
  dl.waiters.push_back({std::move(spec), std::move(rp), whole});
  st.downloads.emplace(sha, std::move(dl));
  start_download(self, sha, source, std::move(missing));
}

caf::result<shard_ready> on_shard(self_ptr self, shard_spec& spec) {
  auto& st = self->state;
  auto sender = self->current_sender();
  bool local = sender && sender->node() == self->node();
  auto rp = self->make_response_promise();
  if (local && !spec.model.empty()) {
    auto path = spec.model;
    if (!spec.sha256.empty())
      st.whole_files[spec.sha256] = path;
    start_shard(self, std::move(spec), path, true, 0, rp);
    return rp;
  }
  if (!workload::is_sha256(spec.sha256))
    return fail(exo_errc::invalid_argument,
                "shard: the model's sha256 is missing or malformed");
  try {
    workload::check_parts(spec.parts, spec.size);
  } catch (const std::exception& e) {
    return fail(exo_errc::invalid_argument,
                std::string{"shard: "} + e.what());
  }
  // The whole file a local job loaded serves a peer's shard too (one copy
  // of the weights, one stage for both).
  if (auto w = st.whole_files.find(spec.sha256); w != st.whole_files.end())
    if (auto it = st.models.find(w->second);
        it != st.models.end() && it->second.whole
        && !it->second.model.expired()) {
      start_shard(self, std::move(spec), w->second, true, 0, rp);
      return rp;
    }
  if (spec.source_node.empty())
    return fail(exo_errc::invalid_argument,
                st.node + " lacks the model and no source was named");
  place_or_fetch(self, std::move(spec), rp, 0);
  return rp;
}

/// Fetches the whole model `sha` (of `size` bytes) from `source` into the
/// model cache, unless it is there already; answers with its path. For a
/// node that backs a job up (job_replica): it may have to run every layer.
caf::result<std::string> on_prefetch(self_ptr self, std::string& sha,
                                     std::uint64_t size, std::string& source) {
  if (!workload::is_sha256(sha))
    return fail(exo_errc::invalid_argument,
                "prefetch: the model's sha256 is missing or malformed");
  if (size == 0 || size > workload::max_model_bytes)
    return fail(exo_errc::invalid_argument,
                "prefetch: a model of " + std::to_string(size)
                  + " bytes is out of range");
  if (source.empty())
    return fail(exo_errc::invalid_argument, "prefetch: no source node");
  shard_spec spec;
  spec.sha256 = sha;
  spec.size = size;
  spec.source_node = source;
  spec.parts = {{0, size, sha}}; // the whole file: its digest is its name
  auto rp = self->make_response_promise();
  place_or_fetch(self, std::move(spec), rp, 0, true);
  return caf::delegated<std::string>{};
}

caf::behavior shard_host_impl(self_ptr self, host_state init) {
  self->state = std::move(init);
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& shards = self->state.shards;
    for (auto it = shards.begin(); it != shards.end(); ++it)
      if (it->handle.address() == msg.source) {
        shards.erase(it);
        return;
      }
    self->quit(msg.reason);
  });
  return {
    [self](inspect_atom) {
      auto& st = self->state;
      actor_snapshot s;
      s.name = "shards";
      s.kind = "shards";
      s.node = st.node;
      s.summary = std::to_string(st.shards.size()) + " shards, "
                  + std::to_string(st.downloads.size()) + " downloads";
      // The process's stages so far: forwards, and steps that shared one
      // with another job's (continuous batching).
      const auto totals = workload::batching_totals();
      auto foreign = std::count_if(st.shards.begin(), st.shards.end(),
                                   [](auto& x) { return x.foreign; });
      s.fields = {{"shards", std::to_string(st.shards.size())},
                  {"foreign_shards", std::to_string(foreign)},
                  {"downloads", std::to_string(st.downloads.size())},
                  {"models", std::to_string(st.models.size())},
                  {"stage_forwards", std::to_string(totals.forwards)},
                  {"merged_steps", std::to_string(totals.merged_steps)}};
      // Each device stage of the process ("stage N": one JSON object;
      // the gateway's /metrics and dashboard read them,
      // core/gateway/cluster_view.hpp stage_entries).
      auto stages = workload::stage_figures_now();
      s.fields["stages"] = std::to_string(stages.size());
      for (std::size_t i = 0; i < stages.size(); ++i) {
        const auto& f = stages[i];
        s.fields["stage " + std::to_string(i)] = text::compact(
          text::json{{"device", f.device},
                     {"model", f.model},
                     {"first", f.first},
                     {"last", f.last},
                     {"kv_type", f.kv_type},
                     {"jobs", f.jobs},
                     {"sequences", f.sequences},
                     {"kv_bytes", f.kv_bytes},
                     {"kv_blocks", f.kv_blocks},
                     {"kv_blocks_used", f.kv_blocks_used},
                     {"kv_blocks_shared", f.kv_blocks_shared},
                     {"kv_block_positions", f.kv_block_positions},
                     {"forwards", f.forwards},
                     {"rows", f.rows},
                     {"merged_steps", f.merged_steps},
                     {"wait_le",
                      std::vector<double>(
                        std::begin(workload::batch_wait_bounds),
                        std::end(workload::batch_wait_bounds))},
                     {"wait_counts", f.wait_counts},
                     {"wait_sum_s", f.wait_sum_s}});
      }
      return s;
    },
    [self](shard_atom, shard_spec& spec) -> caf::result<shard_ready> {
      return on_shard(self, spec);
    },
    [self](adopt_atom, caf::actor& shard, bool foreign) {
      // One of its shards has a new owner (a job handed over): from that
      // shard only.
      if (!shard || self->current_sender() != shard.address())
        return;
      for (auto& x : self->state.shards)
        if (x.handle == shard)
          x.foreign = foreign;
    },
    [self](prefetch_atom, std::string& sha, std::uint64_t size,
           std::string& source) -> caf::result<std::string> {
      return on_prefetch(self, sha, size, source);
    },
    [self](fetched_atom, std::string& sha, std::string& error,
           std::uint64_t bytes) { finish_download(self, sha, error, bytes); },
    [self](console_atom, std::string& cmd, std::string&) {
      console_reply r;
      r.command = cmd;
      for (auto& s : self->state.shards)
        r.text += s.text + "\n";
      if (r.text.empty())
        r.text = "no shards on " + self->state.node + "\n";
      r.json = text::spaced({{"shards", self->state.shards.size()}});
      return r;
    },
  };
}

} // namespace

service spawn_shard_host(const service_context& ctx) {
  host_state init;
  init.node = ctx.cfg->node.name;
  init.state_dir = ctx.cfg->node.state_dir;
  init.batch_wait = ctx.cfg->devices.batch_wait;
  init.prefix_cache_bytes = ctx.cfg->devices.prefix_cache_bytes;
  init.keep_alive = ctx.cfg->devices.keep_alive;
  init.node_actor = ctx.node;
  init.gate = ctx.gate;
  init.tls = ctx.tls;
  service s;
  s.name = "shards";
  s.kind = "shards";
  s.handle = ctx.sys->spawn<caf::detached>(shard_host_impl, std::move(init));
  s.commands = {"shards"};
  return s;
}

} // namespace exo::workload
