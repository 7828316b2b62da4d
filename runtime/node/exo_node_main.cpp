// exo-node: one node of an exo cluster.
//
//   exo-node [--config FILE]          run until SIGINT/SIGTERM
//   exo-node --check-config FILE      validate a config (exit 0, or 2)
//   exo-node --devices [--json] [--config FILE]
//                                     discover, verify, print, exit
//   exo-node serve --model FILE ...   serve models over the OpenAI API
//   exo-node perplexity --url URL --model ID --file TEXT
//                                     a served model's perplexity
//   exo-node plan --problem FILE ...  place a model on devices (no cluster)
//   exo-node audit verify [--checkpoints FILE --ca CA] FILE...
//                                     verify audit logs
//   exo-node --version | --help

#include "core/text/line.hpp"
#include "core/audit/audit_command.hpp"
#include "core/cli/program.hpp"
#include "core/placement/plan_command.hpp"
#include "core/text/json.hpp"
#include "messages/atoms.hpp"
#include "messages/sequence_bound.hpp"
#include "runtime/node/gateway_service.hpp"
#include "runtime/node/perplexity_command.hpp"
#include "runtime/node/run_command.hpp"
#include "runtime/node/runtime.hpp"
#include "runtime/node/serve_command.hpp"

#include <caf/all.hpp>

#if defined(__SANITIZE_ADDRESS__)
#  include <sanitizer/lsan_interface.h>
#endif

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <unistd.h>

#ifndef EXO_VERSION
#  define EXO_VERSION "0.0.0"
#endif

namespace {

/// How long releasing the actor system may take once every actor of the
/// node has stopped, the audit log is closed and the registry saved.
constexpr auto release_deadline = std::chrono::seconds(5);

/// rt.stop(), bounded where nothing is left to lose: CAF 0.17's actor
/// system waits, as it is destroyed, until every detached actor's private
/// thread has seen its actor destroyed, and that thread can deadlock on
/// shutdown (upstream issue 1196, fixed in CAF 0.18 by pull request 1202;
/// Debian ships 0.17.6). Seen here with the audit sink, about one graceful
/// stop in eight under a rolling restart. By then the node has left the
/// cluster, its services and devices have stopped and its audit log is
/// closed: after release_deadline the program says so and exits.
void stop_within_bounds(exo::runtime& rt, const std::string& name) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread guard([&] {
    std::unique_lock<std::mutex> lock(mu);
    // Wait for the release step (or the end), then for the deadline.
    while (!done && rt.stop_step() != "releasing the actor system")
      cv.wait_for(lock, std::chrono::milliseconds(50));
    if (done || cv.wait_for(lock, release_deadline, [&] { return done; }))
      return;
    exo::text::line(std::cout) << "exo-node " << name << ": the actor system is still being "
              << "released " << release_deadline.count()
              << " s after every actor stopped (a detached actor that ended "
                 "is still referenced); state is saved, exiting now"
              << std::endl;
    std::_Exit(0);
  });
  rt.stop();
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_one();
  guard.join();
}

constexpr const char* description
  = "Runs one node of an exo cluster until SIGINT or SIGTERM.";

constexpr const char* footer = R"(Commands (each answers --help):
  exo-node plan --problem FILE.json [--objective latency|throughput|blend]
                [--time-limit MS] [--json] [--solver exact|gecode|both|baseline]
  exo-node audit verify [--checkpoints FILE]... [--ca CA] FILE...
  exo-node audit query --dir D [...]
  exo-node run --model FILE.gguf --prompt TEXT [-n N] [--stages K]
               [--sequences M] [--batch B] [--draft FILE] [--ctx C]
               [--llama-threads N] [...]
               (one job on this node: the solver places it on the node's
               devices; --stages K splits evenly)
  exo-node serve --model FILE.gguf [--model-id ID] [--draft FILE]
                 [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--ctx C]
                 [--config FILE]
               (serve models over the OpenAI API; alone, or as the node of
               --config in its cluster; also a config's gateway section)
  exo-node perplexity --url http://HOST:PORT --model ID --file TEXT
                      [--ctx 512] [--chunks N] [--batch 4] [--api-key KEY]
               (a served model's perplexity on a text, as llama.cpp's
               llama-perplexity computes it, through its gateway)

Without --config every setting has its default: a single local node
(config/README.md describes the file).

Environment:
  EXO_BACKENDS          comma-separated backends to use (cuda,hip,vulkan,cpu,sim)
)";

/// Signals arrive on a pipe: a handler may run on any thread (libraries
/// may start threads before main, so masking in main alone is not enough).
int signal_pipe[2] = {-1, -1};

extern "C" void on_signal(int sig) {
  unsigned char b = static_cast<unsigned char>(sig);
  auto n = ::write(signal_pipe[1], &b, 1);
  (void) n;
}

int wait_for_signal() {
  unsigned char b = 0;
  while (::read(signal_pipe[0], &b, 1) != 1) {
  }
  return b;
}

void install_signal_handlers() {
  if (::pipe(signal_pipe) != 0)
    return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

/// Ends the process once its work is done, without the destructors of
/// static objects and libraries: detached actor threads (a device actor's,
/// which ran OpenMP regions as their master) may still be in their last
/// steps (their thread-specific data's destructors) after the runtime has
/// stopped them, and libgomp's and the GPU runtimes' exit-time destructors
/// racing them aborted one exo-node of a full test suite with "double
/// free or corruption" in __nptl_deallocate_tsd (the same race as
/// OpenBLAS's, commit 41240d1). OpenSSL's atexit cleanup, which frees
/// every thread's stop handlers under threads still ending, is one such
/// destructor; programs that return from main are kept from it by
/// core/tls/openssl_exit.cpp. Everything of exo's is stopped and written by then:
/// the runtime stops its services and devices and closes the audit log;
/// the standard streams are flushed here. Sanitizer builds still check
/// for leaks.
[[noreturn]] void end_process(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
#if defined(__SANITIZE_ADDRESS__)
  __lsan_do_leak_check();
#endif
  std::_Exit(code);
}

[[noreturn]] void die(int code, const std::string& msg) {
  std::cerr << "exo-node: " << msg << "\n";
  end_process(code);
}

struct options {
  std::string config_file;
  std::string check_file;
  std::string state_dir;
  std::string name;
  bool devices = false;
  bool json = false;
};

options parse_args(int argc, char** argv) {
  options o;
  bool version = false;
  CLI::App app{description, "exo-node"};
  exo::cli::configure(app);
  app.add_option("--config", o.config_file,
                 "node settings (JSON; see config/README.md)")
    ->type_name("FILE");
  app.add_option("--check-config", o.check_file,
                 "validate FILE and exit (0 valid, 2 invalid)")
    ->type_name("FILE");
  app.add_flag("--devices", o.devices,
               "discover and verify every device, print them, exit");
  app.add_flag("--json", o.json, "with --devices: print JSON");
  app.add_option("--state-dir", o.state_dir, "override node.state_dir")
    ->type_name("DIR");
  app.add_option("--name", o.name, "override node.name")->type_name("NAME");
  app.add_flag("--version", version, "print the version and exit");
  app.footer(footer);
  if (auto code = exo::cli::parse(app, argc, argv, std::cout, std::cerr,
                                  "exo-node: "))
    std::exit(*code);
  if (version) {
    exo::text::line(std::cout) << "exo-node " << EXO_VERSION << "\n";
    std::exit(0);
  }
  if (o.json && !o.devices)
    die(2, "--json goes with --devices");
  return o;
}

exo::config::node_config load_config(const options& o) {
  try {
    auto cfg = o.config_file.empty() ? exo::config::defaults()
                                     : exo::config::load(o.config_file);
    if (!o.state_dir.empty())
      cfg.node.state_dir = o.state_dir;
    if (!o.name.empty()) {
      // The name goes through the config's own checks, as if written in a
      // file (text::compact escapes it).
      auto doc = exo::text::compact({{"node", {{"name", o.name}}}});
      cfg.node.name = exo::config::parse(doc, "--name").node.name;
    }
    return cfg;
  } catch (const exo::config::config_error& e) {
    die(2, std::string{"invalid config: "} + e.what());
  }
}

int run_node(const exo::config::node_config& cfg,
             std::chrono::steady_clock::time_point t0) {
  using clock = std::chrono::steady_clock;
  install_signal_handlers();
  exo::runtime rt{cfg};
  try {
    rt.start();
  } catch (const exo::startup_error& e) {
    die(e.status(), e.what());
  }
  auto ready_ms
    = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  exo::text::line(std::cout) << "exo-node " << cfg.node.name << " (config: " << cfg.source
            << ", state: " << cfg.node.state_dir << ")\n"
            << exo::discovery::format_table(rt.discovery());
  if (!rt.tls_note().empty())
    std::cout << rt.tls_note() << "\n";
  if (!exo::sequence_bound_in_force())
    std::cerr << "exo-node: warning: the bound on sequence lengths a peer may "
                 "claim is not in force (CAF's binary_deserializer is not "
                 "interposed; see messages/sequence_bound.hpp): a peer's "
                 "message can make this node allocate up to 4 GiB\n";
  exo::text::line(std::cout) << "exo-node " << cfg.node.name << " listening on "
            << cfg.network.listen << ":" << rt.port() << " (TLS)\n";
  std::unique_ptr<exo::gateway_service> gateway;
  if (cfg.gateway.enabled()) {
    try {
      gateway = std::make_unique<exo::gateway_service>(rt, cfg.gateway);
    } catch (const exo::startup_error& e) {
      std::cerr << "exo-node: " << e.what() << "\n";
      rt.stop();
      return 1;
    }
    std::string ids;
    for (auto& id : gateway->model_ids())
      ids += (ids.empty() ? "" : ", ") + id;
    auto& g = cfg.gateway;
    exo::text::line(std::cout) << "exo-node " << cfg.node.name << " serving " << ids << " on "
              << (g.https ? "https://" : "http://") << g.host << ":"
              << gateway->port() << "/v1 (OpenAI API, "
              << (g.auth == exo::config::gateway_auth::none
                    ? "no bearer token"
                    : g.auth == exo::config::gateway_auth::api_key
                        ? "api key"
                        : "exo access tokens")
              << (g.https ? ", the cluster CA's certificate" : "") << ")\n";
  }
  exo::text::line(std::cout) << "exo-node " << cfg.node.name << " ready in " << std::fixed
            << std::setprecision(1) << ready_ms << " ms" << std::endl;
  int sig = wait_for_signal();
  exo::text::line(std::cout) << "exo-node " << cfg.node.name << ": "
            << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", shutting down"
            << std::endl;
  if (gateway)
    gateway->stop(); // closes the streams: their jobs are cancelled
  gateway.reset();
  stop_within_bounds(rt, cfg.node.name);
  exo::text::line(std::cout) << "exo-node " << cfg.node.name << " stopped" << std::endl;
  return 0;
}

} // namespace

namespace {

int node_main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "plan") == 0)
    return exo::placement::run_plan_command(argc - 1, argv + 1, std::cout,
                                            std::cerr);
  if (argc >= 2 && std::strcmp(argv[1], "audit") == 0)
    return exo::audit::run_audit_command(argc - 1, argv + 1, std::cout,
                                         std::cerr);
  if (argc >= 2 && std::strcmp(argv[1], "run") == 0)
    return exo::run_command(argc - 1, argv + 1, std::cout, std::cerr);
  if (argc >= 2 && std::strcmp(argv[1], "perplexity") == 0)
    return exo::run_perplexity_command(argc - 1, argv + 1, std::cout,
                                       std::cerr);
  if (argc >= 2 && std::strcmp(argv[1], "serve") == 0) {
    auto t0 = std::chrono::steady_clock::now();
    auto s = exo::parse_serve_command(argc - 1, argv + 1, std::cout,
                                      std::cerr);
    if (!s.cfg)
      return s.exit_code;
    return run_node(*s.cfg, t0);
  }
  auto o = parse_args(argc, argv);
  if (!o.check_file.empty()) {
    try {
      auto cfg = exo::config::load(o.check_file);
      std::cout << o.check_file << ": valid (node " << cfg.node.name << ")\n";
      return 0;
    } catch (const exo::config::config_error& e) {
      std::cerr << "exo-node: invalid config: " << e.what() << "\n";
      return 2;
    }
  }
  if (o.devices) {
    auto cfg = load_config(o);
    try {
      auto r = exo::discover_devices(cfg);
      std::cout << (o.json ? exo::discovery::format_json(r)
                           : exo::discovery::format_table(r));
      return 0;
    } catch (const exo::startup_error& e) {
      die(e.status(), e.what());
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  return run_node(load_config(o), t0);
}

} // namespace

int main(int argc, char** argv) {
  end_process(node_main(argc, argv));
}
