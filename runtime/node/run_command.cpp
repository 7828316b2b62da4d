#include "runtime/node/run_command.hpp"

#include "actors/workload/job_actor.hpp"
#include "core/workload/run_options.hpp"
#include "actors/workload/simple_placement.hpp"
#include "actors/workload/solver_placement.hpp"
#include "actors/workload/shard_actor.hpp"
#include "messages/workload.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "runtime/node/runtime.hpp"

#include <caf/all.hpp>

#include <cstdio>
#include <ostream>

namespace exo {

namespace {

using namespace std::chrono_literals;

/// The node's device actors with what they say about themselves.
std::vector<std::pair<device_info, device_actor>>
node_devices(caf::actor_system& sys, const caf::actor& node) {
  std::vector<std::pair<device_info, device_actor>> out;
  caf::scoped_actor self{sys};
  std::vector<device_actor> hs;
  self->request(node, 10s, devices_atom::value, actors_atom::value)
    .receive([&](std::vector<device_actor>& x) { hs = std::move(x); },
             [&](caf::error&) {});
  for (auto& h : hs)
    self->request(h, 10s, info_atom::value)
      .receive([&](device_info& info) { out.emplace_back(info, h); },
               [&](caf::error&) {});
  return out;
}

} // namespace

static int run_job_on(runtime& rt, const workload::run_options& o,
               std::shared_ptr<const model::llama_model> m,
               std::shared_ptr<model::tokenizer> tok,
               const std::vector<std::int32_t>& prompt, std::ostream& out,
               std::ostream& err);

int run_command(int argc, char** argv, std::ostream& out, std::ostream& err) {
  workload::run_options o;
  std::shared_ptr<const model::llama_model> m;
  std::shared_ptr<model::tokenizer> tok;
  std::vector<std::int32_t> prompt;
  config::node_config cfg;
  try {
    o = workload::parse_run_options(
      std::vector<std::string>(argv + 1, argv + argc), true);
    cfg = o.config.empty() ? config::defaults() : config::load(o.config);
    if (!o.state_dir.empty())
      cfg.node.state_dir = o.state_dir;
    if (o.llama_threads != 0)
      cfg.devices.cpu_llama_threads = static_cast<int>(o.llama_threads);
    cfg.network.port = 0;
    cfg.network.seeds.clear();
    m = model::llama_model::load(o.model);
    tok = std::make_shared<model::tokenizer>(
      model::tokenizer::from_gguf(m->file()));
    prompt = tok->encode(o.prompt, tok->add_bos());
    if (prompt.empty())
      throw std::invalid_argument("the prompt gives no tokens");
    auto need = static_cast<std::uint32_t>(prompt.size() + o.n_gen);
    if (o.n_ctx == 0)
      o.n_ctx = need;
    if (need > o.n_ctx || o.n_ctx > m->hparams().n_ctx_train)
      throw std::invalid_argument(
        "prompt (" + std::to_string(prompt.size()) + " tokens) plus -n "
        + std::to_string(o.n_gen) + " exceed the context of "
        + std::to_string(std::min(o.n_ctx, m->hparams().n_ctx_train)));
    if (o.stages != 0 && o.stages > m->hparams().n_layer)
      throw std::invalid_argument(
        "--stages " + std::to_string(o.stages) + " exceeds the model's "
        + std::to_string(m->hparams().n_layer) + " layers");
  } catch (const std::exception& e) {
    err << "exo-node run: " << e.what() << "\n";
    return 2;
  }
  runtime rt{cfg};
  try {
    rt.start();
  } catch (const startup_error& e) {
    err << "exo-node run: " << e.what() << "\n";
    return 1;
  }
  // Every actor handle lives in here: runtime::stop() destroys the actor
  // system, which waits for every actor still referenced.
  auto code = run_job_on(rt, o, m, tok, prompt, out, err);
  rt.stop();
  return code;
}

static int run_job_on(runtime& rt, const workload::run_options& o,
               std::shared_ptr<const model::llama_model> m,
               std::shared_ptr<model::tokenizer> tok,
               const std::vector<std::int32_t>& prompt, std::ostream& out,
               std::ostream& err) {
  auto& cfg = rt.config();
  auto& sys = rt.system();
  auto devs = node_devices(sys, rt.node());
  std::vector<device_info> infos;
  for (auto& d : devs)
    infos.push_back(d.first);
  std::vector<workload::stage_place> plan;
  try {
    if (o.stages != 0) {
      plan = workload::simple_placement(m->hparams().n_layer, o.stages,
                                    {{cfg.node.name, infos}});
      out << "placement: even split into " << o.stages
          << " stage(s) (--stages)\n";
    } else {
      // The solver on this node's own devices: the same problem the
      // placement service would build for a cluster of this node alone.
      auto req = workload::run_plan_request(o.model, o.n_ctx, o.sequences,
                                        cfg.node.name);
      auto view = workload::single_node_view(cfg.node.name, infos);
      auto solved = workload::plan_locally(req, view, cfg.node.name);
      plan = workload::stages_of(solved, view, m->hparams().n_layer);
      out << "placement (solver):\n" << workload::describe_plan(solved);
    }
  } catch (const std::exception& e) {
    err << "exo-node run: " << e.what()
        << (o.stages == 0 ? " (--stages K splits evenly)" : "") << "\n";
    return 1;
  }
  out << workload::describe(plan);
  std::vector<caf::actor> stages;
  for (auto& p : plan) {
    workload::shard_setup s;
    s.model = m;
    s.first = p.first;
    s.last = p.last;
    s.n_ctx = o.n_ctx;
    s.node = cfg.node.name;
    s.device_id = p.device;
    for (auto& d : devs)
      if (d.first.id == p.device)
        s.device = d.second;
    stages.push_back(workload::spawn_shard(sys, std::move(s)));
  }
  {
    caf::scoped_actor self{sys};
    for (std::size_t i = 0; i + 1 < stages.size(); ++i)
      self->request(stages[i], 10s, next_atom::value, stages[i + 1])
        .receive([](caf::ok_atom) {}, [](caf::error&) {});
  }
  workload::job_setup j;
  j.id = 1;
  j.stages = stages;
  j.n_embd = m->hparams().n_embd;
  j.n_vocab = m->hparams().n_vocab;
  j.prompts.assign(o.sequences, prompt);
  j.n_gen = o.n_gen;
  j.sampling = o.sampling;
  j.eos = tok->eos();
  j.on_token = [&out, tok](std::uint32_t seq, std::int32_t id) {
    if (seq == 0)
      out << tok->piece(id) << std::flush;
  };
  out << o.prompt << std::flush;
  auto r = workload::run_job(sys, std::move(j));
  out << "\n";
  {
    caf::scoped_actor self{sys};
    for (auto& s : stages) {
      self->send_exit(s, caf::exit_reason::user_shutdown);
      self->wait_for(s);
    }
  }
  int code = 0;
  if (!r.error.empty()) {
    err << "exo-node run: " << r.error << "\n";
    code = 1;
  } else {
    for (std::size_t i = 1; i < r.tokens.size(); ++i)
      out << "sequence " << i << ": " << o.prompt << tok->decode(r.tokens[i])
          << "\n";
    char line[256];
    std::snprintf(line, sizeof line,
                  "\nprompt: %llu tokens in %.3f s (%.1f tokens/s)\n"
                  "generation: %llu tokens in %.3f s (%.1f tokens/s), "
                  "%u sequence(s) in flight, %u stage(s)\n",
                  static_cast<unsigned long long>(r.prompt_tokens),
                  r.prompt_s, r.prompt_tps(),
                  static_cast<unsigned long long>(r.generated_tokens),
                  r.generation_s, r.generation_tps(), o.sequences,
                  static_cast<unsigned>(plan.size()));
    out << line;
    if (!o.logits_out.empty()) {
      std::FILE* f = std::fopen(o.logits_out.c_str(), "w");
      if (f == nullptr) {
        err << "exo-node run: cannot write " << o.logits_out << "\n";
        code = 1;
      } else {
        for (auto v : r.logits[0])
          std::fprintf(f, "%.9g\n", v);
        std::fclose(f);
      }
    }
  }
  return code;
}

} // namespace exo
