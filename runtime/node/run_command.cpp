#include "runtime/node/run_command.hpp"

#include "actors/workload/job_coordinator.hpp"
#include "core/workload/job_request.hpp"
#include "core/workload/run_options.hpp"
#include "messages/errors.hpp"
#include "messages/workload.hpp"
#include "runtime/node/runtime.hpp"

#include <caf/all.hpp>

#include <cstdio>
#include <memory>
#include <ostream>

namespace exo {

namespace {

/// How the job ended, as the listener saw it.
struct outcome {
  bool started = false;
  job_report report;
  caf::error error;
};

/// Asks `coordinator` for the job and writes its events to `out` as they
/// come: the placement, the prompt, sequence 0's tokens. Quits with the
/// report (or the error) in `result`.
caf::behavior listen(caf::event_based_actor* self, caf::actor coordinator,
                     workload::job_request req, std::ostream* out,
                     std::shared_ptr<outcome> result) {
  auto prompt = req.prompt;
  self
    ->request(coordinator, caf::infinite, run_atom::value, std::move(req),
              caf::actor_cast<caf::actor>(self))
    .then(
      [self, result](job_report& r) {
        result->report = std::move(r);
        self->quit();
      },
      [self, result](caf::error& err) {
        result->error = std::move(err);
        self->quit();
      });
  return {
    [out](job_placed& e) { *out << e.text << std::flush; },
    [out, prompt, result](job_started&) {
      result->started = true;
      *out << prompt << std::flush;
    },
    [out](job_token& e) {
      if (e.seq == 0)
        *out << e.piece << std::flush;
    },
  };
}

/// The job through a coordinator of this node alone; returns the exit
/// status.
int run_job_on(runtime& rt, const workload::run_options& o,
               workload::job_request req, std::ostream& out,
               std::ostream& err) {
  auto& sys = rt.system();
  workload::job_coordinator_config cc;
  cc.node = rt.config().node.name;
  cc.node_actor = caf::actor_cast<caf::actor>(rt.node());
  cc.shard_host = rt.service_actor("shards");
  if (!cc.shard_host) {
    err << "exo-node run: the node runs no shard host\n";
    return 1;
  }
  auto coordinator = workload::spawn_job_coordinator(sys, std::move(cc));
  auto result = std::make_shared<outcome>();
  auto listener = sys.spawn(listen, coordinator, std::move(req), &out,
                            result);
  {
    caf::scoped_actor self{sys};
    self->wait_for(listener);
    self->send_exit(coordinator, caf::exit_reason::user_shutdown);
    self->wait_for(coordinator);
  }
  if (result->started)
    out << "\n";
  if (result->error) {
    auto msg = error_message(result->error);
    err << "exo-node run: "
        << (msg.empty() ? sys.render(result->error) : msg) << "\n";
    auto bad_request = result->error.category() == exo_error_category()
                       && result->error.code()
                            == static_cast<std::uint8_t>(
                              exo_errc::invalid_argument);
    return bad_request ? 2 : 1;
  }
  auto& r = result->report;
  for (std::size_t i = 1; i < r.texts.size(); ++i)
    out << "sequence " << i << ": " << o.prompt << r.texts[i] << "\n";
  char line[256];
  std::snprintf(line, sizeof line,
                "\nprompt: %llu tokens in %.3f s (%.1f tokens/s)\n"
                "generation: %llu tokens in %.3f s (%.1f tokens/s), "
                "%u sequence(s) in flight, %u stage(s)\n",
                static_cast<unsigned long long>(r.prompt_tokens), r.prompt_s,
                r.prompt_tps(),
                static_cast<unsigned long long>(r.generated_tokens),
                r.generation_s, r.generation_tps(), o.sequences, r.stages);
  out << line << r.sharing_line();
  if (!r.draft.empty())
    out << "draft: " << r.draft << "; " << r.accepted << " of " << r.drafted
        << " proposed tokens kept\n";
  if (!o.logits_out.empty()) {
    std::FILE* f = std::fopen(o.logits_out.c_str(), "w");
    if (f == nullptr) {
      err << "exo-node run: cannot write " << o.logits_out << "\n";
      return 1;
    }
    for (auto v : r.logits)
      std::fprintf(f, "%.9g\n", v);
    std::fclose(f);
  }
  return 0;
}

} // namespace

int run_command(int argc, char** argv, std::ostream& out, std::ostream& err) {
  workload::run_options o;
  workload::job_request req;
  config::node_config cfg;
  try {
    o = workload::parse_run_options(
      std::vector<std::string>(argv + 1, argv + argc), true);
    if (o.help) {
      out << workload::run_options_help(true);
      return 0;
    }
    cfg = o.config.empty() ? config::defaults() : config::load(o.config);
    if (!o.state_dir.empty())
      cfg.node.state_dir = o.state_dir;
    if (o.llama_threads != 0)
      cfg.devices.cpu_llama_threads = static_cast<int>(o.llama_threads);
    cfg.network.port = 0;
    cfg.network.seeds.clear();
    req = workload::make_job_request(o); // --chat renders the prompt here
  } catch (const std::exception& e) {
    err << "exo-node run: " << e.what() << "\n";
    return 2;
  }
  runtime rt{cfg};
  try {
    rt.start();
  } catch (const startup_error& e) {
    err << "exo-node run: " << e.what() << "\n";
    return e.status();
  }
  // Every actor handle lives in here: runtime::stop() destroys the actor
  // system, which waits for every actor still referenced.
  auto code = run_job_on(rt, o, std::move(req), out, err);
  rt.stop();
  return code;
}

} // namespace exo
