#include "actors/workload/shards_service.hpp"

#include "core/audit/event.hpp"
#include "actors/workload/job_actor.hpp"
#include "core/workload/run_options.hpp"
#include "actors/workload/simple_placement.hpp"
#include "actors/workload/solver_placement.hpp"
#include "actors/placement/placement_actor.hpp"
#include "core/workload/model_cache.hpp"
#include "actors/workload/shard_actor.hpp"
#include "messages/audit.hpp"
#include "messages/cluster.hpp"
#include "messages/errors.hpp"
#include "messages/placement.hpp"
#include "messages/workload.hpp"
#include "core/model/stage_ranges.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/tls/bulk_channel.hpp"

#include <caf/all.hpp>


#include <atomic>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

namespace exo::workload {

namespace {

using namespace std::chrono_literals;

struct waiter {
  shard_spec spec;
  caf::response_promise rp;
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
};

/// A job this node coordinates (console `jobs`, `cancel`).
struct running_job {
  caf::actor job;
  std::string model;
  std::string stages;
  std::uint32_t sequences = 0;
  std::uint32_t n_gen = 0;
  std::chrono::steady_clock::time_point started;
  /// Tokens generated so far (written by the job, read by the service).
  std::shared_ptr<std::atomic<std::uint64_t>> tokens;
  bool cancel_requested = false;
};

struct service_state {
  std::string node;
  std::string state_dir;
  caf::actor node_actor;
  caf::actor gate;
  caf::actor audit; ///< job_submitted / job_finished (issue 6); optional
  std::map<std::string, std::weak_ptr<const model::llama_model>> models;
  std::map<std::string, std::string> offered; ///< sha256 -> path
  std::map<std::string, download> downloads;
  std::vector<running_shard> shards;
  tls::material tls; ///< for bulk_fetch
  /// Parts with digests per "sha256:first:last", computed once.
  std::map<std::string, std::vector<workload::model_part>> parts;
  std::shared_ptr<tls::bulk_blobs> blobs; ///< what the bulk channel serves
  std::uint64_t jobs = 0;
  std::map<std::uint64_t, running_job> running; ///< by job id
  static inline const char* name = "exo.shards";
};

using self_ptr = caf::stateful_actor<service_state>*;

caf::error fail(exo_errc code, std::string what) {
  return make_exo_error(code, std::move(what));
}

std::string render(self_ptr self, const caf::error& err) {
  auto msg = error_message(err);
  return msg.empty() ? self->system().render(err) : msg;
}

std::shared_ptr<const model::llama_model>
load_model(self_ptr self, const std::string& key, const std::string& path) {
  auto& st = self->state;
  if (auto it = st.models.find(key); it != st.models.end())
    if (auto m = it->second.lock())
      return m;
  std::shared_ptr<const model::llama_model> m = model::llama_model::load(path);
  st.models[key] = m;
  return m;
}

/// Picks the device and spawns the shard once the model file is at `path`.
void start_shard(self_ptr self, shard_spec spec, std::string path,
                 std::uint64_t received, caf::response_promise rp) {
  std::shared_ptr<const model::llama_model> m;
  try {
    m = load_model(self, spec.sha256.empty() ? path : spec.sha256, path);
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
            if (spec.device.empty() || f.first.id == spec.device)
              infos.push_back(f.first);
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
          s.device = dev;
          s.device_id = order.front().id;
          s.node = self->state.node;
          s.owner = spec.owner;
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
            {h, "layers [" + std::to_string(spec.first) + ", "
                  + std::to_string(spec.last) + ") on " + order.front().id
                  + " (" + order.front().name + ")"});
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
                    std::uint64_t received);

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
    place_or_fetch(self, std::move(w.spec), std::move(w.rp), bytes);
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
                    std::uint64_t received) {
  auto& st = self->state;
  auto sha = spec.sha256;
  if (auto it = st.downloads.find(sha); it != st.downloads.end()) {
    it->second.waiters.push_back({std::move(spec), std::move(rp)});
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
    start_shard(self, std::move(spec), path, received, std::move(rp));
    return;
  }
  auto source = spec.source_node;
  download dl;
  dl.file = std::move(file);
  dl.waiters.push_back({std::move(spec), std::move(rp)});
  st.downloads.emplace(sha, std::move(dl));
  start_download(self, sha, source, std::move(missing));
}

caf::result<shard_ready> on_shard(self_ptr self, shard_spec& spec) {
  auto& st = self->state;
  auto sender = self->current_sender();
  bool local = sender && sender->node() == self->node();
  auto rp = self->make_response_promise();
  if (local && !spec.model.empty()) {
    start_shard(self, std::move(spec), spec.model, 0, rp);
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
  if (spec.source_node.empty())
    return fail(exo_errc::invalid_argument,
                st.node + " lacks the model and no source was named");
  place_or_fetch(self, std::move(spec), rp, 0);
  return rp;
}

/// One cluster run, from placement to reply.
struct cluster_run {
  run_options opts;
  std::shared_ptr<const model::llama_model> model;
  std::shared_ptr<model::tokenizer> tok;
  std::vector<std::int32_t> prompt;
  std::string sha;
  std::uint64_t size = 0;
  std::vector<stage_place> plan;
  std::string placement_text; ///< how it was placed, for the reply
  std::vector<shard_ready> ready;
  std::size_t pending = 0;
  std::string error;
  caf::response_promise rp;
  std::string streamed;
  /// The placement job kept for this run and the node keeping it (the
  /// coordinator), dropped when the run ends; "" with --stages.
  std::string plan_job;
  std::string planner;
};

/// The parts of the run's model a stage of layers [first, last) needs,
/// with their digests (hashed once per model and range).
std::vector<workload::model_part>
stage_parts(self_ptr self, const cluster_run& run, std::uint32_t first,
            std::uint32_t last) {
  auto key = run.sha + ":" + std::to_string(first) + ":"
             + std::to_string(last);
  auto& memo = self->state.parts;
  if (auto it = memo.find(key); it != memo.end())
    return it->second;
  std::vector<workload::model_part> out;
  for (auto& r : model::stage_file_ranges(*run.model, first, last))
    out.push_back({r.offset, r.length,
                   workload::range_sha256(run.opts.model, r.offset, r.length)});
  memo[key] = out;
  return out;
}

void end_run(self_ptr self, std::shared_ptr<cluster_run> run,
             std::string error) {
  for (auto& r : run->ready)
    if (r.shard)
      self->send_exit(r.shard, caf::exit_reason::user_shutdown);
  if (!run->plan_job.empty()) {
    // The coordinator stops re-planning the ended run. A request, not a
    // send: the answer must come back to a handler (an unexpected answer
    // is refused with an error, and an error message stops an actor).
    self
      ->request(self->state.gate, 10s, service_atom::value, run->planner,
                std::string{placement::placement_service},
                caf::make_message(unplan_atom::value, run->plan_job))
      .then([](bool) {}, [](caf::error&) {});
    run->plan_job.clear();
  }
  if (!error.empty())
    run->rp.deliver(fail(exo_errc::failed_state, "run: " + error));
}

/// Sends one job event to the node's audit sink, if there is one.
void audit_job(self_ptr self, audit::event_type type,
               std::map<std::string, std::string> details,
               audit::severity level = audit::severity::info) {
  auto& st = self->state;
  if (!st.audit)
    return;
  audit_entry e;
  e.type = static_cast<std::uint8_t>(type);
  e.level = static_cast<std::uint8_t>(level);
  e.details = std::move(details);
  e.details["node"] = st.node;
  self->send(st.audit, audit_atom::value, std::move(e));
}

void start_job(self_ptr self, std::shared_ptr<cluster_run> run) {
  auto& hp = run->model->hparams();
  job_setup j;
  j.id = ++self->state.jobs;
  for (auto& r : run->ready)
    j.stages.push_back(r.shard);
  j.n_embd = hp.n_embd;
  j.n_vocab = hp.n_vocab;
  j.prompts.assign(run->opts.sequences, run->prompt);
  j.n_gen = run->opts.n_gen;
  j.sampling = run->opts.sampling;
  j.eos = run->tok->eos();
  auto tok = run->tok;
  auto produced = std::make_shared<std::atomic<std::uint64_t>>(0);
  auto cancelled = std::make_shared<bool>(false);
  auto id = j.id;
  j.on_token = [tok, run, produced](std::uint32_t seq, std::int32_t t) {
    produced->fetch_add(1, std::memory_order_relaxed);
    if (seq != 0)
      return;
    auto piece = tok->piece(t);
    std::cout << piece << std::flush;
  };
  j.finish = [self, run, tok, cancelled, id](job_result& r) {
    std::ostringstream out;
    out << "job " << id << "\n" << run->placement_text;
    *cancelled = r.cancelled;
    std::uint64_t sent = 0;
    for (auto& s : run->ready)
      sent += s.bytes_received;
    out << "model " << run->sha.substr(0, 12) << ": " << sent
        << " bytes sent to nodes that lacked it\n";
    if (!r.error.empty())
      return caf::make_message(
        fail(exo_errc::failed_state, "run: " + r.error));
    for (std::size_t i = 0; i < r.tokens.size(); ++i)
      out << (r.tokens.size() > 1 ? "sequence " + std::to_string(i) + ": "
                                  : std::string{"text: "})
          << run->opts.prompt << tok->decode(r.tokens[i]) << "\n";
    char line[256];
    std::snprintf(line, sizeof line,
                  "prompt: %llu tokens in %.3f s (%.1f tokens/s)\n"
                  "generation: %llu tokens in %.3f s (%.1f tokens/s), "
                  "%u sequence(s) in flight\n",
                  static_cast<unsigned long long>(r.prompt_tokens),
                  r.prompt_s, r.prompt_tps(),
                  static_cast<unsigned long long>(r.generated_tokens),
                  r.generation_s, r.generation_tps(),
                  static_cast<unsigned>(r.tokens.size()));
    out << line;
    if (r.cancelled)
      out << "cancelled: job " << id << " stopped after "
          << r.generated_tokens << " generated tokens (of "
          << run->opts.n_gen << " per sequence)\n";
    console_reply reply;
    reply.command = "run";
    reply.text = out.str();
    std::ostringstream js;
    js << "{\"tokens\": [";
    for (std::size_t i = 0; i < r.tokens[0].size(); ++i)
      js << (i ? ", " : "") << r.tokens[0][i];
    js << "], \"bytes_sent\": " << sent << ", \"prompt_tps\": "
       << r.prompt_tps() << ", \"generation_tps\": " << r.generation_tps()
       << ", \"job\": " << id
       << ", \"cancelled\": " << (r.cancelled ? "true" : "false") << "}";
    reply.json = js.str();
    return caf::make_message(std::move(reply));
  };
  auto job_id = std::to_string(j.id);
  std::string stages;
  for (auto& r : run->ready)
    stages += (stages.empty() ? "" : " ") + r.node + "/" + r.device;
  audit_job(self, audit::event_type::job_submitted,
            {{"job", job_id},
             {"model", run->sha.substr(0, 16)},
             {"stages", stages},
             {"sequences", std::to_string(run->opts.sequences)},
             {"n_gen", std::to_string(run->opts.n_gen)}});
  auto job = spawn_job(self->system(), std::move(j));
  auto& rj = self->state.running[id];
  rj.job = job;
  rj.model = run->sha.substr(0, 12);
  rj.stages = stages;
  rj.sequences = run->opts.sequences;
  rj.n_gen = run->opts.n_gen;
  rj.started = std::chrono::steady_clock::now();
  rj.tokens = produced;
  std::cout << "job " << job_id << " started (cancel " << job_id << ")\n"
            << run->opts.prompt << std::flush;
  self->request(job, caf::infinite, run_atom::value)
    .then(
      [self, run, job_id, id, cancelled](console_reply& r) {
        std::cout << std::endl;
        self->state.running.erase(id);
        audit_job(self, audit::event_type::job_finished,
                  {{"job", job_id},
                   {"outcome", *cancelled ? "cancelled" : "ok"}});
        end_run(self, run, "");
        run->rp.deliver(std::move(r));
      },
      [self, run, job_id, id](caf::error& err) {
        std::cout << std::endl;
        self->state.running.erase(id);
        auto why = render(self, err);
        audit_job(self, audit::event_type::job_finished,
                  {{"job", job_id}, {"outcome", "error"}, {"error", why}},
                  audit::severity::warning);
        end_run(self, run, why);
      });
}

void link_stages(self_ptr self, std::shared_ptr<cluster_run> run) {
  auto n = run->ready.size();
  if (n == 1) {
    start_job(self, run);
    return;
  }
  run->pending = n - 1;
  for (std::size_t i = 0; i + 1 < n; ++i)
    self->request(run->ready[i].shard, 10s, next_atom::value,
                  run->ready[i + 1].shard)
      .then(
        [self, run](caf::ok_atom) {
          if (--run->pending == 0)
            start_job(self, run);
        },
        [self, run](caf::error& err) {
          if (run->error.empty()) {
            run->error = render(self, err);
            end_run(self, run, run->error);
          }
        });
}

/// Starts the shards of `run->plan` through the gates, then the job.
void start_stages(self_ptr self, std::shared_ptr<cluster_run> run) {
  std::cout << run->placement_text << std::flush;
  auto k = static_cast<std::uint32_t>(run->plan.size());
  // What a node without the file receives: its stage's parts.
  std::vector<std::vector<workload::model_part>> parts(k);
  try {
    for (std::uint32_t i = 0; i < k; ++i)
      if (run->plan[i].node != self->state.node)
        parts[i] = stage_parts(self, *run, run->plan[i].first,
                               run->plan[i].last);
  } catch (const std::exception& e) {
    end_run(self, run, e.what());
    return;
  }
  run->ready.resize(k);
  run->pending = k;
  auto n_ctx = run->opts.n_ctx != 0
                 ? run->opts.n_ctx
                 : static_cast<std::uint32_t>(run->prompt.size()
                                              + run->opts.n_gen);
  for (std::uint32_t i = 0; i < k; ++i) {
    auto& p = run->plan[i];
    shard_spec spec;
    if (p.node == self->state.node)
      spec.model = run->opts.model;
    spec.sha256 = run->sha;
    spec.size = run->size;
    spec.first = p.first;
    spec.last = p.last;
    spec.n_ctx = n_ctx;
    spec.device = p.device;
    spec.source_node = self->state.node;
    spec.parts = std::move(parts[i]);
    spec.owner = caf::actor_cast<caf::actor>(self);
    self->request(self->state.gate, 600s, service_atom::value, p.node,
                  std::string{"shards"},
                  caf::make_message(shard_atom::value, std::move(spec)))
      .then(
        [self, run, i](shard_ready& r) {
          run->ready[i] = std::move(r);
          if (--run->pending == 0 && run->error.empty())
            link_stages(self, run);
        },
        [self, run, i](caf::error& err) {
          auto why = "stage " + std::to_string(i) + " on "
                     + run->plan[i].node + ": " + render(self, err);
          if (run->error.empty()) {
            run->error = why;
            if (--run->pending == 0)
              end_run(self, run, run->error);
          } else if (--run->pending == 0) {
            end_run(self, run, run->error);
          }
        });
  }
}

/// Chooses the stages: an even split with --stages K, else the plan of the
/// coordinator's placement service (the solver, on the live cluster).
void place_and_start(self_ptr self, std::shared_ptr<cluster_run> run,
                     const member_view& view, std::string coordinator) {
  auto& hp = run->model->hparams();
  auto n_ctx = run->opts.n_ctx != 0
                 ? run->opts.n_ctx
                 : static_cast<std::uint32_t>(run->prompt.size()
                                              + run->opts.n_gen);
  if (run->opts.stages != 0) {
    std::vector<std::pair<std::string, std::vector<device_info>>> members;
    for (auto& m : view.members)
      if (m.status == member_status::alive && m.name == self->state.node)
        members.emplace(members.begin(), m.name, m.devices);
    for (auto& m : view.members)
      if (m.status == member_status::alive && m.name != self->state.node)
        members.emplace_back(m.name, m.devices);
    try {
      run->plan = simple_placement(hp.n_layer, run->opts.stages, members);
    } catch (const std::exception& e) {
      end_run(self, run, e.what());
      return;
    }
    run->placement_text = "placement: even split into "
                          + std::to_string(run->opts.stages)
                          + " stages (--stages)\n" + describe(run->plan);
    start_stages(self, run);
    return;
  }
  plan_request req;
  try {
    // Kept as a job of the placement service while the run lasts.
    static std::atomic<std::uint64_t> runs{0};
    req = run_plan_request(run->opts.model, n_ctx, run->opts.sequences,
                           self->state.node,
                           self->state.node + "#" + std::to_string(++runs));
  } catch (const std::exception& e) {
    end_run(self, run, e.what());
    return;
  }
  if (coordinator.empty())
    coordinator = self->state.node;
  auto limit = std::chrono::milliseconds{req.time_limit_ms} + 30s;
  self
    ->request(self->state.gate, limit, service_atom::value, coordinator,
              std::string{placement::placement_service},
              caf::make_message(plan_atom::value, std::move(req)))
    .then(
      [self, run, view, coordinator,
       n_layer = hp.n_layer](plan_job_info& j) {
        run->plan_job = j.id;
        run->planner = coordinator;
        try {
          run->plan = stages_of(j.plan, view, n_layer);
        } catch (const std::exception& e) {
          end_run(self, run,
                  std::string{e.what()} + " (--stages K splits evenly)");
          return;
        }
        run->placement_text = "placement (solver):\n"
                              + describe_plan(j.plan) + describe(run->plan)
                              + "kept as " + j.id + " by " + coordinator
                              + ": re-planned while the run lasts "
                                "(plans)\n";
        start_stages(self, run);
      },
      [self, run, coordinator](caf::error& err) {
        end_run(self, run,
                "the placement service of " + coordinator
                  + " did not answer: " + render(self, err)
                  + " (--stages K splits evenly without it)");
      });
}

caf::result<console_reply> on_run(self_ptr self, const std::string& arg) {
  auto run = std::make_shared<cluster_run>();
  try {
    run->opts = parse_run_options(split_words(arg), false);
    run->model = model::llama_model::load(run->opts.model);
    run->tok = std::make_shared<model::tokenizer>(
      model::tokenizer::from_gguf(run->model->file()));
    run->prompt = run->tok->encode(run->opts.prompt, run->tok->add_bos());
    if (run->prompt.empty())
      throw std::invalid_argument("the prompt gives no tokens");
    auto ctx = run->prompt.size() + run->opts.n_gen;
    if (ctx > run->model->hparams().n_ctx_train
        || (run->opts.n_ctx != 0 && ctx > run->opts.n_ctx))
      throw std::invalid_argument("prompt plus -n exceed the context");
    run->sha = workload::file_sha256(run->opts.model);
    run->size = workload::file_size(run->opts.model);
  } catch (const std::exception& e) {
    return fail(exo_errc::invalid_argument, std::string{"run: "} + e.what());
  }
  if (!self->state.offered.count(run->sha)) {
    // Peers without the model fetch it from this node's bulk channel.
    try {
      if (self->state.blobs)
        self->state.blobs->add_file(run->sha, run->opts.model);
    } catch (const std::exception& e) {
      return fail(exo_errc::invalid_argument, std::string{"run: "} + e.what());
    }
    self->state.offered[run->sha] = run->opts.model;
  }
  run->rp = self->make_response_promise();
  self->request(self->state.gate, 10s, console_atom::value,
                std::string{"nodes"}, std::string{})
    .then(
      [self, run](console_reply& r) {
        // r.text names the coordinator, whose placement service plans.
        place_and_start(self, run, r.nodes, r.text);
      },
      [self, run](caf::error& err) {
        end_run(self, run, "cannot read the member view: "
                             + render(self, err));
      });
  return run->rp;
}

/// Console `jobs`: the runs this node coordinates.
console_reply list_jobs(self_ptr self) {
  auto& st = self->state;
  console_reply r;
  r.command = "jobs";
  std::ostringstream text, js;
  js << "{\"node\": \"" << st.node << "\", \"jobs\": [";
  if (st.running.empty())
    text << "no running jobs on " << st.node << "\n";
  else
    text << "JOB  MODEL         TOKENS  SEQS  N     SECONDS  STAGES\n";
  bool first = true;
  auto now = std::chrono::steady_clock::now();
  for (auto& [id, j] : st.running) {
    auto secs = std::chrono::duration<double>(now - j.started).count();
    auto tokens = j.tokens->load(std::memory_order_relaxed);
    char line[160];
    std::snprintf(line, sizeof line, "%-4llu %-13s %-7llu %-5u %-5u %-8.1f ",
                  static_cast<unsigned long long>(id), j.model.c_str(),
                  static_cast<unsigned long long>(tokens), j.sequences,
                  j.n_gen, secs);
    text << line << j.stages << (j.cancel_requested ? " (cancelling)" : "")
         << "\n";
    js << (first ? "" : ", ") << "{\"job\": " << id << ", \"model\": \""
       << j.model << "\", \"tokens\": " << tokens
       << ", \"cancelling\": " << (j.cancel_requested ? "true" : "false")
       << "}";
    first = false;
  }
  js << "]}";
  r.text = text.str();
  r.json = js.str();
  return r;
}

/// Console `cancel JOB`: the job stops at its next token boundary and its
/// `run` answers with what it produced so far.
caf::result<console_reply> cancel_job(self_ptr self, const std::string& arg) {
  auto& st = self->state;
  auto words = split_words(arg);
  auto usage = [&](const std::string& why) {
    return fail(exo_errc::invalid_argument,
                "cancel: " + why + " (cancel JOB, the id `jobs` lists)");
  };
  if (words.size() != 1)
    return usage("one job id expected");
  auto& w = words[0];
  if (w.empty() || w.size() > 19
      || w.find_first_not_of("0123456789") != std::string::npos)
    return usage("\"" + w.substr(0, 32) + "\" is not a job id");
  auto id = std::stoull(w);
  auto it = st.running.find(id);
  if (it == st.running.end())
    return fail(exo_errc::invalid_argument,
                "cancel: no running job " + w + " on " + st.node
                  + " (jobs lists the runs this node coordinates)");
  it->second.cancel_requested = true;
  auto rp = self->make_response_promise<console_reply>();
  self->request(it->second.job, 10s, cancel_atom::value)
    .then(
      [rp, w](bool stopping) mutable {
        console_reply r;
        r.command = "cancel";
        r.text = stopping ? "cancelling job " + w
                              + ": it stops at the next token\n"
                          : "job " + w + " is already ending\n";
        r.json = std::string{"{\"job\": "} + w + ", \"cancelling\": "
                 + (stopping ? "true" : "false") + "}";
        rp.deliver(std::move(r));
      },
      [rp, w](caf::error&) mutable {
        console_reply r;
        r.command = "cancel";
        r.text = "job " + w + " has ended\n";
        r.json = std::string{"{\"job\": "} + w + ", \"cancelling\": false}";
        rp.deliver(std::move(r));
      });
  return rp;
}

caf::behavior service_impl(self_ptr self, service_state init) {
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
    [self](shard_atom, shard_spec& spec) -> caf::result<shard_ready> {
      return on_shard(self, spec);
    },
    [self](fetched_atom, std::string& sha, std::string& error,
           std::uint64_t bytes) { finish_download(self, sha, error, bytes); },
    [self](console_atom, std::string& cmd,
           std::string& arg) -> caf::result<console_reply> {
      if (cmd == "run")
        return on_run(self, arg);
      if (cmd == "jobs")
        return list_jobs(self);
      if (cmd == "cancel")
        return cancel_job(self, arg);
      console_reply r;
      r.command = cmd;
      std::ostringstream js;
      js << "{\"shards\": " << self->state.shards.size()
         << ", \"models_offered\": " << self->state.offered.size() << "}";
      for (auto& s : self->state.shards)
        r.text += s.text + "\n";
      if (r.text.empty())
        r.text = "no shards on " + self->state.node + "\n";
      r.json = js.str();
      return r;
    },
  };
}

} // namespace

service spawn_shards_service(const service_context& ctx) {
  service_state init;
  init.node = ctx.cfg->node.name;
  init.state_dir = ctx.cfg->node.state_dir;
  init.node_actor = ctx.node;
  init.gate = ctx.gate;
  init.audit = ctx.audit;
  init.tls = ctx.tls;
  init.blobs = ctx.blobs;
  service s;
  s.name = "shards";
  s.kind = "shards";
  s.handle = ctx.sys->spawn<caf::detached>(service_impl, std::move(init));
  s.commands = {"shards", "run", "jobs", "cancel"};
  return s;
}

} // namespace exo::workload
