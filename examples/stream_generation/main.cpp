// A CAF application that joins a running exo cluster as a node of its own,
// watches the membership, and streams one generation (docs/embedding.md).
//
//   stream_generation --config node.json --model m.gguf --prompt TEXT
//       [-n N] [--seed S] [--temperature T] [--stages K] [--members M]
//
// node.json is an ordinary exo-node config whose network.seeds name nodes
// of the cluster (and whose certificate the cluster's CA signed). The
// program waits until M members (itself included) are alive, runs the job
// with K stages (0: the placement solver's plan), prints each piece of text
// as it arrives, then "generated ids: ..." as `exo-model run --print-ids`
// does. Exit status 0, 1 when the node or the job fails, 2 on bad
// arguments.

#include <exo/exo.hpp>

#include <caf/all.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace {

struct options {
  std::string config;
  exo::workload::job_request job;
  std::size_t members = 1;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "stream_generation: " << why << "\n"
            << "usage: stream_generation --config node.json --model m.gguf "
               "--prompt TEXT [-n N] [--seed S] [--temperature T] "
               "[--stages K] [--members M]\n";
  std::exit(2);
}

unsigned long number(const std::string& key, const std::string& v) {
  try {
    std::size_t used = 0;
    auto x = std::stoul(v, &used);
    if (used == v.size())
      return x;
  } catch (const std::exception&) {
  }
  usage(key + " wants a number, not \"" + v + "\"");
}

options parse(int argc, char** argv) {
  options o;
  o.job.sampling.temperature = 0;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc)
      usage(k + " needs a value");
    std::string v = argv[++i];
    if (k == "--config")
      o.config = v;
    else if (k == "--model")
      o.job.model = v;
    else if (k == "--prompt")
      o.job.prompt = v;
    else if (k == "-n")
      o.job.n_gen = static_cast<std::uint32_t>(number(k, v));
    else if (k == "--seed")
      o.job.sampling.seed = number(k, v);
    else if (k == "--temperature")
      o.job.sampling.temperature = std::stof(v);
    else if (k == "--stages")
      o.job.stages = static_cast<std::uint32_t>(number(k, v));
    else if (k == "--members")
      o.members = number(k, v);
    else
      usage("unknown option " + k);
  }
  if (o.config.empty() || o.job.model.empty() || o.job.prompt.empty())
    usage("--config, --model and --prompt are required");
  return o;
}

/// Streams the job's text to stdout as its tokens arrive.
caf::behavior printer(caf::event_based_actor* self) {
  return {
    [](const exo::job_placed& p) { std::cerr << p.text; },
    [](const exo::job_started& s) {
      std::cerr << "job " << s.job << " started\n";
    },
    [](const exo::job_token& t) {
      if (t.seq == 0)
        std::cout << t.piece << std::flush;
    },
    [](const exo::job_recovered& r) {
      std::cerr << "\njob " << r.job << " survived: " << r.reason << " ("
                << r.recovery_s << " s)\n";
    },
    // Answered once everything sent to it before has been printed.
    [](caf::get_atom) { return caf::ok_atom::value; },
  };
}

/// Keeps count of the alive members from the gate's member events.
struct membership {
  std::map<std::string, exo::member_status> status;
  std::size_t alive() const {
    std::size_t n = 0;
    for (auto& [name, s] : status)
      n += s == exo::member_status::alive ? 1 : 0;
    return n;
  }
};

} // namespace

int main(int argc, char** argv) {
  auto opt = parse(argc, argv);
  std::cerr << "exo " << exo::library_version() << " (headers "
            << EXO_VERSION_STRING << ")\n";
  exo::config::node_config node;
  try {
    node = exo::config::load(opt.config);
  } catch (const std::exception& e) {
    std::cerr << "stream_generation: " << e.what() << "\n";
    return 2;
  }
  // The application's own actor system, readied for exo in one call.
  caf::actor_system_config cfg;
  try {
    exo::prepare_system(cfg, node);
  } catch (const exo::startup_error& e) {
    std::cerr << "stream_generation: " << e.what() << "\n";
    return e.status();
  }
  caf::actor_system sys{cfg};
  exo::runtime rt{sys, node};
  try {
    rt.start();
  } catch (const exo::startup_error& e) {
    std::cerr << "stream_generation: " << e.what() << "\n";
    return e.status();
  }
  caf::scoped_actor self{sys};
  int status = 0;
  // Subscribe to the member events; wait until enough members are alive.
  membership seen;
  bool ok = true;
  self->request(rt.gate(), std::chrono::seconds(5), exo::subscribe_atom::value,
                exo::members_atom::value, caf::actor_cast<caf::actor>(self))
    .receive(
      [&](exo::member_view& v) {
        for (auto& m : v.members) {
          seen.status[m.name] = m.status;
          std::cerr << "member " << m.name << ": known, "
                    << exo::to_string(m.status) << "\n";
        }
      },
      [&](caf::error& err) {
        std::cerr << "subscribe: " << exo::error_message(err) << "\n";
        ok = false;
      });
  // (A member that has just joined may not be connected to this node yet:
  // the gate holds what the job sends it until the connection is there.)
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::seconds(60);
  while (ok && seen.alive() < opt.members) {
    if (clock::now() > deadline) {
      std::cerr << "stream_generation: only " << seen.alive() << " of "
                << opt.members << " members alive after 60 s\n";
      ok = false;
      break;
    }
    self->receive(
      [&](exo::member_event& e) {
        seen.status[e.member.name] = e.member.status;
        std::cerr << "member " << e.member.name << ": "
                  << exo::to_string(e.change) << ", "
                  << exo::to_string(e.member.status) << "\n";
      },
      caf::after(std::chrono::milliseconds(200)) >> [] {});
  }
  if (!ok) {
    rt.stop();
    return 1;
  }
  // The job: tokens stream to the printer, the report comes back here.
  auto listener = sys.spawn(printer);
  self->request(rt.jobs(), caf::infinite, exo::run_atom::value, opt.job,
                caf::actor_cast<caf::actor>(listener))
    .receive(
      [&](exo::job_report& r) {
        // The job sent its tokens to the printer before this report: a
        // round trip to the printer makes sure it has printed them all
        // (it is another actor; the report may come first).
        self->request(listener, caf::infinite, caf::get_atom::value)
          .receive([](caf::ok_atom) {}, [](caf::error&) {});
        std::cout << "\n";
        std::string ids;
        if (!r.tokens.empty())
          for (auto id : r.tokens[0])
            ids += (ids.empty() ? "" : " ") + std::to_string(id);
        std::cout << "generated ids: " << ids << "\n";
        std::cerr << "job " << r.job << ": " << r.stages << " stages, "
                  << r.generated_tokens << " tokens, "
                  << r.generation_tps() << " tokens/s\n";
      },
      [&](caf::error& err) {
        std::cerr << "stream_generation: the job failed: "
                  << exo::error_message(err) << "\n";
        status = 1;
      });
  caf::anon_send_exit(listener, caf::exit_reason::user_shutdown);
  rt.stop();
  return status;
}
