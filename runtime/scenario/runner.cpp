#include "runtime/scenario/runner.hpp"

#include "core/text/json.hpp"

#include "runtime/scenario/listen_port.hpp"
#include "runtime/scenario/netns.hpp"
#include "runtime/scenario/process.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/tls_error.hpp"

#include <fcntl.h>
#include <openssl/rand.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

namespace exo::scenario {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// A step that did not hold; what() is the reason.
struct step_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct interrupted_error : std::runtime_error {
  interrupted_error() : std::runtime_error("interrupted") {
  }
};

double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::string secs(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(s < 10 ? 2 : 1) << s << " s";
  return os.str();
}

/// "86.2 C".
std::string celsius(double c) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << c << " C";
  return os.str();
}

milliseconds ms(double seconds) {
  return milliseconds{static_cast<long long>(seconds * 1000)};
}

std::string read_text(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
  if (!out)
    throw std::runtime_error("cannot write " + path);
}

std::string tail(const std::string& text, std::size_t lines) {
  std::size_t at = text.size();
  for (std::size_t n = 0; at > 0 && n <= lines; --at)
    if (text[at - 1] == '\n')
      ++n;
  return text.substr(at == 0 ? 0 : at + 1);
}

/// The last lines of a reply for a message; a run's JSON reply is one long
/// line, so at most its last 1500 characters.
std::string last_output(const std::string& text, std::size_t lines = 20) {
  auto t = tail(text, lines);
  if (t.size() > 1500)
    t = "..." + t.substr(t.size() - 1500);
  return t;
}

std::string indent(const std::string& text, const std::string& pad = "      ") {
  std::string out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    out += pad + line + "\n";
  return out;
}

std::string self_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string{"."} : p.parent_path().string();
}

bool executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0
         && fs::is_regular_file(path);
}

/// Finds a program of the project (see runner_options::bin_dir).
std::string find_tool(const std::string& name, const std::string& sub,
                      const std::string& bin_dir) {
  std::vector<std::string> dirs;
  if (!bin_dir.empty())
    dirs.push_back(bin_dir);
  else {
    if (const char* e = std::getenv("EXO_BIN_DIR"); e && *e)
      dirs.push_back(e);
    auto here = self_dir();
    dirs.push_back(here);
    dirs.push_back(here + "/../" + sub); // the build tree: runtime/<sub>/
    if (const char* path = std::getenv("PATH")) {
      std::istringstream in{path};
      for (std::string d; std::getline(in, d, ':');)
        if (!d.empty())
          dirs.push_back(d);
    }
  }
  for (auto& d : dirs)
    if (executable(d + "/" + name))
      return fs::weakly_canonical(d + "/" + name).string();
  throw std::runtime_error("cannot find " + name
                           + (bin_dir.empty() ? " (set --bin-dir or EXO_BIN_DIR)"
                                              : " in " + bin_dir));
}

struct live_node {
  const node_spec* spec = nullptr;
  pid_t pid = -1;
  bool running = false;
  int starts = 0;
  std::uint16_t port = 0;
  std::string log;     ///< the log of the latest start
  bool frozen = false; ///< stopped with SIGSTOP by a freeze step
};

/// One console client of a run: a request in flight.
struct run_client {
  pid_t pid = -1; ///< its exo-console; -1 once it has ended
  int status = -1; ///< its exit status once it has ended
  std::string out_path, err_path;
};

/// A run that a run step started in the background ("background": LABEL),
/// or a foreground run of several requests; its await step waits for it and
/// checks every request's reply.
struct background_run {
  std::vector<run_client> clients; ///< one per request
  bool has_reference = false;
  std::vector<std::int64_t> reference; ///< the tokens of its --stages 1 run
  clock_type::time_point started;
  /// The step by whose end every request had ended ("[9/12] stop n1"),
  /// when that was before its await: a step meant to land mid-run that
  /// came later found no run (a faster machine than the scenario's
  /// author's). Said when its await fails.
  std::string ended_by;
};

/// Notes the exit status of each of `b`'s requests that has ended;
/// whether any is still going.
bool reap_clients(background_run& b) {
  bool going = false;
  for (auto& c : b.clients) {
    int status = 0;
    if (c.pid > 0 && !still_running(c.pid, status)) {
      c.status = status;
      c.pid = -1;
    }
    going = going || c.pid > 0;
  }
  return going;
}

class runner {
public:
  runner(const scenario& sc, const runner_options& o, std::ostream& out)
    : sc_(sc), opts_(o), out_(out) {
  }

  ~runner() {
    cleanup();
  }

  int go();

private:
  // -- set-up -----------------------------------------------------------------
  void make_dir();
  void make_pki();
  void make_model();
  void make_network();
  /// Starts `n`. A node's first start draws a port outside the ephemeral
  /// range (listen_port.hpp) that its restarts keep; `redraws` counts the
  /// draws that another process took before the node could listen.
  void start_node(live_node& n, bool quiet_start = false, int redraws = 0);
  void cleanup();
  /// The address `n` listens on: its namespace's, or 127.0.0.1.
  std::string host_of(const live_node& n) const {
    return net_ ? net_->plan().find(n.spec->name)->address : "127.0.0.1";
  }
  /// The PKI folder of a node's cluster, with a trailing '/'.
  std::string pki_of(const node_spec& n) const {
    return dir_ + "/pki/" + (n.cluster.empty() ? "" : n.cluster + "/");
  }
  std::string endpoint(const live_node& n) const {
    return host_of(n) + ":" + std::to_string(n.port);
  }

  // -- helpers ----------------------------------------------------------------
  live_node& node(const std::string& name) {
    return nodes_.at(name);
  }
  /// A node that runs and is not frozen (it can answer).
  live_node& running_node(const std::string& name) {
    auto& n = node(name);
    refresh(n);
    if (!n.running)
      throw step_failed("node " + name + " is not running");
    if (n.frozen)
      throw step_failed("node " + name + " is frozen (thaw or kill it first)");
    return n;
  }
  void refresh(live_node& n);
  /// The nodes that run and are not frozen, in file order; with `of`, only
  /// those of its cluster (a node of another CA can neither seed nor see
  /// it).
  std::vector<live_node*> running_nodes(const live_node* of = nullptr);
  /// The nodes of a step's `on` (each must run), else every running one.
  std::vector<live_node*> nodes_on(const step& s);
  std::vector<std::string> console_argv(live_node& n, const std::string& cmd,
                                        bool json, milliseconds timeout);
  captured console(live_node& n, const std::string& cmd, bool json,
                   milliseconds timeout);
  /// The console command of a run step; `stages` > 0 replaces its own.
  std::string run_command(const step& s, int stages) const;
  void check_interrupt() {
    if (interrupted())
      throw interrupted_error{};
  }
  void pause() {
    auto until = clock_type::now() + milliseconds{sc_.timing.poll_ms};
    while (clock_type::now() < until) {
      check_interrupt();
      std::this_thread::sleep_for(milliseconds{10});
    }
  }
  double bound(const step& s) const {
    return s.within_s > 0 ? s.within_s : sc_.timing.default_within_s;
  }
  /// Polls `probe` (which returns "" when the condition holds, else what it
  /// saw) until it holds or `seconds` pass from `t0`.
  template <class Probe>
  void eventually(clock_type::time_point t0, double seconds,
                  const std::string& what, Probe probe) {
    std::string last;
    for (;;) {
      check_interrupt();
      last = probe();
      if (last.empty())
        return;
      if (since(t0) >= seconds)
        throw step_failed(what + " not within " + secs(seconds) + "; last: "
                          + last);
      pause();
    }
  }
  /// The members as `on` sees them; "" with `members` set, or the reason.
  std::string view(live_node& on, std::vector<member_status>& members,
                   std::string& coordinator);
  void log_verbose(const std::string& text) {
    if (opts_.verbose)
      out_ << indent(text) << std::flush;
  }

  // -- steps ------------------------------------------------------------------
  std::string run_step(const step& s);
  std::string do_converge(const step& s);
  std::string do_console(const step& s);
  std::string do_kill(const step& s);
  std::string do_stop(const step& s);
  std::string do_start(const step& s);
  std::string do_plan(const step& s);
  std::string do_run(const step& s);
  std::string start_background(const step& s);
  /// Starts the run of `s` (s.requests console clients) as runs_[label].
  background_run& spawn_run(const step& s, live_node& n,
                            const std::string& label);
  /// Waits up to `seconds` for every request of runs_[label] to end and
  /// checks each reply as `s` says (the step's expect, reference and
  /// recoveries); a request that fails or times out is lost.
  std::string finish_run(const step& s, const std::string& label,
                         double seconds);
  /// Notes in each background run that has just ended that it ended by
  /// the end of step `label` (background_run::ended_by).
  void note_ended_runs(const std::string& label);
  std::string finish_run_checked(const step& s, const std::string& label,
                                 double seconds);
  std::set<std::uint64_t> job_ids(live_node& n, const std::string& name);
  std::string do_await(const step& s);
  std::string do_fault(const step& s);
  std::string do_audit(const step& s);
  std::string do_thermal(const step& s);
  /// `command` with --json on `n` (bounded by `s`), parsed: a failed
  /// command or a reply that is not JSON fails the step, named.
  text::json console_json(live_node& n, const std::string& command,
                          const step& s);
  std::string do_freeze(const step& s);
  std::string do_thaw(const step& s);
  std::string do_network(const step& s);
  std::string do_measure(const step& s);
  /// The tokens of `s` run with --stages 1 on `n` (its "reference").
  std::vector<std::int64_t> reference_tokens(const step& s, live_node& n,
                                             double& seconds);
  /// Checks a run's JSON reply (tokens, the reference's, the recoveries);
  /// returns what it saw.
  std::string check_reply(const step& s, const std::string& out,
                          const std::string& err,
                          const std::vector<std::int64_t>* reference);
  /// After `victim` was killed or frozen at `t0`: every survivor must see
  /// it dead, and when it coordinated (`before`, or `s.coordinator` is
  /// given) they must agree on a new coordinator.
  std::string seen_dead(const step& s, const std::string& before,
                        clock_type::time_point t0,
                        const std::vector<live_node*>& survivors);
  std::string expect_seen(const std::string& who, const std::string& status,
                          clock_type::time_point t0, double seconds,
                          const std::vector<live_node*>& observers);

  const scenario& sc_;
  runner_options opts_;
  std::ostream& out_;
  std::string dir_;
  std::string node_bin_, console_bin_, model_bin_;
  std::string model_path_;
  std::map<std::string, live_node> nodes_;
  std::vector<std::string> order_; ///< node names in file order
  std::map<std::string, background_run> runs_; ///< by label
  /// The namespace network ("network": {"namespaces": true}) when it could
  /// be made; null on 127.0.0.1.
  std::unique_ptr<netns_network> net_;
  std::string no_net_; ///< why namespaces were not used, when asked for
  std::map<std::string, link_shaping> shaped_; ///< the links now
  /// The --report document: the steps as they ran (a timeline).
  text::json steps_report_ = text::json::array();
  clock_type::time_point t_all_ = clock_type::now();
  /// Writes the --report file (when asked for) and returns `code`.
  int finish(const std::string& result, int code,
             const std::string& why = {});
  std::string netem_bin_;
  bool cleaned_ = false;
};

void runner::make_dir() {
  std::string tmpl = "/tmp/exo-scenario-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr)
    throw std::runtime_error("cannot create a temp dir in /tmp");
  dir_ = buf.data();
}

void runner::make_pki() {
  // One CA per cluster named by the nodes ("" the main one, in pki/; the
  // others in pki/NAME/), each with its nodes' certificates and a console
  // client of its own.
  std::set<std::string> clusters{""};
  for (auto& n : sc_.nodes)
    clusters.insert(n.cluster);
  tls::make_private_dir(dir_ + "/pki");
  for (auto& c : clusters) {
    auto pki = c.empty() ? dir_ + "/pki" : dir_ + "/pki/" + c;
    tls::make_private_dir(pki);
    auto ca = tls::create_ca(tls::ca_options{});
    tls::write_certificate(pki + "/ca.crt", ca.cert);
    tls::write_private_key(pki + "/ca.key", ca.key);
    for (auto& n : sc_.nodes) {
      if (n.cluster != c)
        continue;
      auto cert = tls::issue_certificate(ca, tls::cert_options{n.name});
      tls::write_certificate(pki + "/" + n.name + ".crt", cert.cert);
      tls::write_private_key(pki + "/" + n.name + ".key", cert.key);
    }
    auto client = tls::issue_certificate(
      ca, tls::cert_options{"scenario-runner", tls::cert_role::client});
    tls::write_certificate(pki + "/client.crt", client.cert);
    tls::write_private_key(pki + "/client.key", client.key);
  }
  auto pki = dir_ + "/pki";
  // One access key for the whole cluster (config/README.md).
  unsigned char key[32];
  if (RAND_bytes(key, sizeof key) != 1)
    throw std::runtime_error("OpenSSL's RAND_bytes failed");
  std::string hex;
  char b[3];
  for (auto k : key) {
    std::snprintf(b, sizeof b, "%02x", k);
    hex += b;
  }
  write_text(pki + "/access.key", hex + "\n");
  chmod((pki + "/access.key").c_str(), 0600);
}

void runner::make_model() {
  auto& m = *sc_.model;
  model_path_ = dir_ + "/model.gguf";
  std::vector<std::string> argv{model_bin_, "make-test", "--out", model_path_,
                                "--layers", std::to_string(m.layers),
                                "--dim", std::to_string(m.dim),
                                "--ff", std::to_string(m.ff),
                                "--heads", std::to_string(m.heads),
                                "--kv-heads", std::to_string(m.kv_heads),
                                "--vocab", std::to_string(m.vocab),
                                "--ctx", std::to_string(m.ctx),
                                "--seed", std::to_string(m.seed)};
  auto r = run_captured(argv, milliseconds{120000});
  if (r.code != 0)
    throw std::runtime_error("exo-model make-test failed (status "
                             + std::to_string(r.code) + "): " + r.err);
  // On the disk before a node starts: a node measuring its rates at start
  // would otherwise share the memory and the CPUs with the kernel writing
  // the fresh file back (830 MB for step-time).
  int fd = ::open(model_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fdatasync(fd) != 0) {
    int err = errno;
    if (fd >= 0)
      ::close(fd);
    throw std::runtime_error("cannot sync the model " + model_path_ + ": "
                             + std::strerror(err));
  }
  ::close(fd);
}

void runner::refresh(live_node& n) {
  int status = 0;
  if (n.running && !still_running(n.pid, status)) {
    n.running = false;
    n.frozen = false;
    n.pid = -1;
  }
}

std::vector<live_node*> runner::running_nodes(const live_node* of) {
  std::vector<live_node*> out;
  for (auto& name : order_) {
    auto& n = node(name);
    refresh(n);
    if (n.running && !n.frozen
        && (of == nullptr || n.spec->cluster == of->spec->cluster))
      out.push_back(&n);
  }
  return out;
}

void runner::make_network() {
  if (!sc_.network.namespaces)
    return;
  no_net_ = netns_unavailable();
  if (!no_net_.empty()) {
    out_ << "  network namespaces unavailable (" << no_net_
         << "): the nodes run on 127.0.0.1, links unshaped\n";
    return;
  }
  std::vector<std::string> names;
  for (auto& n : sc_.nodes)
    names.push_back(n.name);
  net_ = std::make_unique<netns_network>(
    make_netns_plan(make_netns_tag(), names, netns_taken_prefixes()));
  auto& plan = net_->plan();
  out_ << "  network " << plan.tag << ": a namespace per node on " << plan.subnet
       << " (bridge " << plan.bridge << ")";
  for (auto& n : sc_.nodes) {
    if (n.bandwidth_mbit > 0) {
      net_->shape(n.name, n.bandwidth_mbit);
      shaped_[n.name].mbit = n.bandwidth_mbit;
      out_ << ", " << n.name << " " << n.bandwidth_mbit << " Mbit/s";
    }
    if (n.latency_ms > 0 || n.loss_pct > 0) {
      if (netem_bin_.empty())
        netem_bin_ = find_tool("exo-netem", "scenario", opts_.bin_dir);
      net_->set_delay(n.name, n.latency_ms, n.jitter_ms, n.loss_pct,
                      netem_bin_, dir_ + "/netem-" + n.name + ".log");
      shaped_[n.name].latency_ms = n.latency_ms;
      out_ << ", " << n.name << " +" << n.latency_ms << " ms";
      if (n.jitter_ms > 0)
        out_ << " (+-" << n.jitter_ms << ")";
      if (n.loss_pct > 0)
        out_ << " " << n.loss_pct << "% loss";
    }
  }
  out_ << "\n" << std::flush;
}

void runner::start_node(live_node& n, bool quiet_start, int redraws) {
  auto& spec = *n.spec;
  auto& t = sc_.timing;
  auto ndir = dir_ + "/" + spec.name;
  fs::create_directories(ndir);
  // On 127.0.0.1 every process of the machine shares the ports: a port the
  // kernel gave (port 0) may go to any of them while the node is down, and
  // its restart could not listen where its peers look for it. In its own
  // namespace a node is alone with its port.
  bool drawn = false;
  if (n.port == 0 && !net_) {
    n.port = stable_listen_port(host_of(n));
    drawn = true;
  }
  // Seeds: the named ones that run (and are not frozen); when none of them
  // does (or the topology gives none, as to the first node of a star), every
  // running node, so that a restarted node finds the cluster. Only an
  // explicit "seeds": [] or the topology "none" keep a node alone.
  std::vector<std::string> seeds;
  auto names = sc_.seeds_of(spec);
  for (auto& s : names) {
    auto& peer = node(s);
    refresh(peer);
    if (peer.running && !peer.frozen)
      seeds.push_back(endpoint(peer));
  }
  bool alone = spec.seeds_given ? spec.seeds.empty() : sc_.topology == "none";
  if (seeds.empty() && !alone)
    for (auto* p : running_nodes(&n))
      if (p != &n)
        seeds.push_back(endpoint(*p));
  text::json seed_list = text::json::array();
  for (auto& e : seeds)
    seed_list.push_back(e);
  text::json include = spec.backends;
  if (!spec.simulated.empty())
    include.push_back("sim");
  text::json sims = text::json::array();
  for (auto& d : spec.simulated) {
    text::json sim = {{"profile", d.profile}, {"count", d.count}};
    if (!d.fault.empty())
      sim["fault"] = d.fault;
    sims.push_back(std::move(sim));
  }
  auto pki = pki_of(spec);
  text::json cfg_json = {
    {"node", {{"name", spec.name}, {"state_dir", ndir + "/state"}}},
    {"network",
     {{"listen", host_of(n)},
      // A restarted node keeps its address, as a configured node would
      // (clients and peers find it where it was; the listener reuses it).
      {"port", n.port},
      {"seeds", seed_list},
      {"heartbeat_ms", t.heartbeat_ms},
      {"failure_timeout_ms", t.failure_timeout_ms},
      {"connect_timeout_ms", t.connect_timeout_ms},
      {"discovery", {{"enabled", sc_.network.discovery}}}}},
    {"tls",
     {{"certificate", pki + spec.name + ".crt"},
      {"key", pki + spec.name + ".key"},
      {"ca", pki + "ca.crt"}}},
    {"devices",
     {{"include", include},
      {"simulated", sims},
      {"cpu_memory_limit_mib", spec.cpu_memory_limit_mib},
      // Its nodes share this machine's cores: none pins its threads.
      {"cpu_bind_threads", false},
      {"cpu_measure_rates", spec.measure_rates},
      {"vulkan_measure_rates", spec.measure_rates},
      {"sim_time_scale", spec.sim_time_scale},
      {"rescan_interval_s", 0}}},
    {"safety", {{"access_key_file", dir_ + "/pki/access.key"}}},
    // The scenario's model is the one file its clients name.
    {"models", {{"dirs", {dir_}}}}};
  auto cfg = cfg_json.dump(2) + "\n";
  auto cfg_path = ndir + "/node.json";
  write_text(cfg_path, cfg);
  ++n.starts;
  n.log = ndir + "/node-" + std::to_string(n.starts) + ".log";
  log_verbose("start " + spec.name + ": " + node_bin_ + " --config "
              + cfg_path + " (log " + n.log + ")");
  auto t0 = clock_type::now();
  std::vector<std::string> argv{node_bin_, "--config", cfg_path};
  if (net_) {
    auto prefix = net_->exec_prefix(spec.name);
    argv.insert(argv.begin(), prefix.begin(), prefix.end());
  }
  n.pid = spawn_logged(argv, n.log, spec.cpus);
  n.running = true;
  static const std::regex port_re{"listening on [^ ]*:(\\d+)"};
  for (;;) {
    check_interrupt();
    auto text = read_text(n.log);
    if (text.find(" ready in ") != std::string::npos) {
      std::smatch m;
      if (!std::regex_search(text, m, port_re))
        throw step_failed("node " + spec.name
                          + " is ready but named no port; log:\n"
                          + indent(tail(text, 15)));
      n.port = static_cast<std::uint16_t>(std::stoi(m[1]));
      break;
    }
    int status = 0;
    if (!still_running(n.pid, status)) {
      n.running = false;
      n.pid = -1;
      // Another process bound the drawn port between the draw and the
      // node's listen: draw again (a few times).
      if (drawn && redraws < 3
          && text.find("cannot listen on") != std::string::npos) {
        log_verbose(spec.name + ": port " + std::to_string(n.port)
                    + " was taken before it listened; drawing another");
        n.port = 0;
        start_node(n, quiet_start, redraws + 1);
        return;
      }
      throw step_failed("node " + spec.name + " exited with status "
                        + std::to_string(status) + " while starting; log:\n"
                        + indent(tail(text, 15)));
    }
    if (since(t0) > t.start_timeout_s)
      throw step_failed("node " + spec.name + " not ready within "
                        + secs(t.start_timeout_s) + "; log:\n"
                        + indent(tail(text, 15)));
    std::this_thread::sleep_for(milliseconds{50});
  }
  if (quiet_start)
    return;
  out_ << "  started " << spec.name << " on " << endpoint(n) << " in "
       << secs(since(t0)) << "\n"
       << std::flush;
}

void runner::cleanup() {
  if (cleaned_)
    return;
  cleaned_ = true;
  for (auto& [label, b] : runs_)
    for (auto& c : b.clients) {
      if (c.pid > 0)
        terminate(c.pid, milliseconds{2000});
      c.pid = -1;
  }
  for (auto& [name, n] : nodes_) {
    if (n.pid > 0 && n.frozen) {
      // A stopped process would hold SIGTERM until it is continued; the
      // cluster has declared it dead anyway, so it goes without a goodbye.
      kill(n.pid, SIGKILL);
      wait_exit(n.pid, milliseconds{5000});
    } else if (n.pid > 0) {
      terminate(n.pid, milliseconds{5000});
    }
    n.pid = -1;
    n.running = false;
    n.frozen = false;
  }
  if (net_) {
    auto left = net_->down();
    if (left.empty()) {
      out_ << "  network " << net_->plan().tag << " removed\n";
    } else {
      out_ << "  network " << net_->plan().tag << ": still there after "
           << "teardown:";
      for (auto& l : left)
        out_ << " " << l;
      out_ << "\n";
    }
    net_.reset();
  }
  if (dir_.empty())
    return;
  if (opts_.keep) {
    out_ << "kept " << dir_ << " (configs, logs, PKI)\n";
  } else {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::vector<std::string> runner::console_argv(live_node& n,
                                              const std::string& cmd,
                                              bool json,
                                              milliseconds timeout) {
  auto pki = pki_of(*n.spec);
  auto request_ms = std::max<long long>(
    100, std::min<long long>(600000, timeout.count()));
  std::vector<std::string> argv{console_bin_,
                                "--connect",
                                endpoint(n),
                                "--cert",
                                pki + "client.crt",
                                "--key",
                                pki + "client.key",
                                "--ca",
                                pki + "ca.crt",
                                "--timeout-ms",
                                std::to_string(request_ms),
                                // The runner is the operator: its commands
                                // (run, plan) need a token by default.
                                "--token-file",
                                dir_ + "/" + n.spec->name
                                  + "/state/access/admin.token",
                                "--exec",
                                cmd};
  if (json)
    argv.push_back("--json");
  return argv;
}

captured runner::console(live_node& n, const std::string& cmd, bool json,
                         milliseconds timeout) {
  auto argv = console_argv(n, cmd, json, timeout);
  // The console's own connect and request are bounded; leave it room.
  auto r = run_captured(argv, timeout + milliseconds{15000});
  check_interrupt();
  if (opts_.verbose) {
    out_ << "      " << n.spec->name << "> " << cmd << (json ? " --json" : "")
         << "  (status " << r.code << ", " << secs(r.seconds) << ")\n"
         << indent(r.out + r.err, "        ") << std::flush;
  }
  return r;
}

std::string runner::view(live_node& on, std::vector<member_status>& members,
                         std::string& coordinator) {
  auto r = console(on, "nodes", true,
                   milliseconds{sc_.timing.console_timeout_ms});
  if (r.code != 0)
    return on.spec->name + ": exo-console status " + std::to_string(r.code)
           + " " + tail(r.err, 2);
  std::string why;
  if (!parse_nodes(r.out, members, coordinator, why))
    return on.spec->name + ": " + why;
  return {};
}

std::vector<live_node*> runner::nodes_on(const step& s) {
  if (s.on.empty())
    return running_nodes();
  std::vector<live_node*> on;
  for (auto& name : s.on)
    on.push_back(&running_node(name));
  return on;
}

std::string runner::do_converge(const step& s) {
  auto on = nodes_on(s);
  if (on.empty())
    throw step_failed("no node is running");
  auto want = s.alive >= 0 ? s.alive : static_cast<int>(running_nodes().size());
  auto t0 = clock_type::now();
  std::string agreed;
  eventually(t0, bound(s), std::to_string(want) + " alive members", [&] {
    std::string common;
    for (auto* n : on) {
      std::vector<member_status> members;
      std::string co;
      if (auto err = view(*n, members, co); !err.empty())
        return err;
      int alive = 0;
      std::string seen;
      for (auto& m : members) {
        alive += m.status == "alive";
        seen += (seen.empty() ? "" : ", ") + m.name + "=" + m.status;
      }
      if (alive != want)
        return n->spec->name + " sees " + std::to_string(alive)
               + " alive (" + seen + ")";
      if (!s.coordinator.empty() && co != s.coordinator)
        return n->spec->name + " names coordinator \"" + co + "\"";
      if (!common.empty() && co != common)
        return "coordinators differ: " + common + " and " + co;
      common = co;
    }
    agreed = common;
    return std::string{};
  });
  std::string names;
  for (auto* n : on)
    names += (names.empty() ? "" : ", ") + n->spec->name;
  return std::to_string(want) + " alive as seen by " + names
         + "; coordinator " + agreed;
}

std::string runner::do_console(const step& s) {
  auto& n = running_node(s.node);
  auto t0 = clock_type::now();
  auto timeout = milliseconds{sc_.timing.console_timeout_ms};
  if (!s.poll) {
    auto r = console(n, s.command, s.json, std::max(timeout, ms(bound(s))));
    if (auto why = check(s.expect, r.code, r.out, r.err); !why.empty())
      throw step_failed(why + "; output:\n" + indent(tail(r.out + r.err, 20)));
    return "\"" + s.command + "\" on " + s.node;
  }
  captured last;
  eventually(t0, bound(s), "\"" + s.command + "\" as expected", [&] {
    last = console(n, s.command, s.json, timeout);
    auto why = check(s.expect, last.code, last.out, last.err);
    return why.empty() ? why
                       : why + "; output:\n" + indent(tail(last.out + last.err, 20));
  });
  return "\"" + s.command + "\" on " + s.node + " after " + secs(since(t0));
}

/// Polls every observer until it reports `who` with `status`.
std::string runner::expect_seen(const std::string& who,
                                const std::string& status,
                                clock_type::time_point t0, double seconds,
                                const std::vector<live_node*>& observers) {
  std::vector<bool> done(observers.size(), false);
  std::vector<double> when(observers.size(), 0);
  eventually(t0, seconds, who + " " + status + " everywhere", [&] {
    for (std::size_t i = 0; i < observers.size(); ++i) {
      if (done[i])
        continue;
      std::vector<member_status> members;
      std::string co;
      if (auto err = view(*observers[i], members, co); !err.empty())
        return err;
      auto st = status_of(members, who);
      if (st != status)
        return observers[i]->spec->name + " sees " + who + " as \""
               + (st.empty() ? "absent" : st) + "\"";
      done[i] = true;
      when[i] = since(t0);
    }
    return std::string{};
  });
  std::string out;
  for (std::size_t i = 0; i < observers.size(); ++i)
    out += (out.empty() ? "" : ", ") + observers[i]->spec->name + " after "
           + secs(when[i]);
  return out;
}

std::string runner::do_kill(const step& s) {
  // A frozen node can be killed too (SIGKILL ends a stopped process).
  auto& victim = node(s.node);
  refresh(victim);
  if (!victim.running)
    throw step_failed("node " + s.node + " is not running");
  std::vector<live_node*> survivors;
  for (auto* n : running_nodes(&victim))
    if (n != &victim)
      survivors.push_back(n);
  // Who coordinates now (as a survivor sees it)?
  std::string before;
  if (!survivors.empty()) {
    std::vector<member_status> members;
    if (auto err = view(*survivors.front(), members, before); !err.empty())
      throw step_failed("before the kill: " + err);
  }
  auto t0 = clock_type::now();
  kill(victim.pid, SIGKILL);
  auto code = wait_exit(victim.pid, milliseconds{10000});
  victim.running = false;
  victim.frozen = false;
  victim.pid = -1;
  if (code != 128 + SIGKILL)
    throw step_failed("node " + s.node + " ended with status "
                      + std::to_string(code) + " instead of SIGKILL");
  if (survivors.empty())
    return "killed " + s.node + " (no node left to notice)";
  return seen_dead(s, before, t0, survivors);
}

std::string runner::seen_dead(const step& s, const std::string& before,
                              clock_type::time_point t0,
                              const std::vector<live_node*>& survivors) {
  auto seen = expect_seen(s.node, "dead", t0, bound(s), survivors);
  std::string result = "dead on " + seen;
  if (!s.coordinator.empty() || before == s.node) {
    std::string now;
    eventually(t0, bound(s), "a new coordinator", [&] {
      std::string common;
      for (auto* n : survivors) {
        std::vector<member_status> members;
        std::string co;
        if (auto err = view(*n, members, co); !err.empty())
          return err;
        if (co == s.node || co.empty())
          return n->spec->name + " still names \"" + co + "\"";
        if (!s.coordinator.empty() && co != s.coordinator)
          return n->spec->name + " names \"" + co + "\", expected "
                 + s.coordinator;
        if (!common.empty() && co != common)
          return "coordinators differ: " + common + " and " + co;
        common = co;
      }
      now = common;
      return std::string{};
    });
    result += "; coordinator " + before + " -> " + now + " after "
              + secs(since(t0));
  }
  return result;
}

std::string runner::do_stop(const step& s) {
  auto& n = running_node(s.node);
  std::vector<live_node*> others;
  for (auto* o : running_nodes(&n))
    if (o != &n)
      others.push_back(o);
  auto t0 = clock_type::now();
  kill(n.pid, SIGTERM);
  auto code = wait_exit(n.pid, ms(sc_.timing.stop_timeout_s));
  if (code < 0) {
    terminate(n.pid, milliseconds{1000});
    n.running = false;
    n.pid = -1;
    throw step_failed("node " + s.node + " did not stop within "
                      + secs(sc_.timing.stop_timeout_s) + " (killed); log:\n"
                      + indent(tail(read_text(n.log), 10)));
  }
  n.running = false;
  n.pid = -1;
  if (code != 0)
    throw step_failed("node " + s.node + " stopped with status "
                      + std::to_string(code) + "; log:\n"
                      + indent(tail(read_text(n.log), 10)));
  auto stopped = since(t0);
  if (others.empty())
    return "stopped in " + secs(stopped);
  return "stopped in " + secs(stopped) + "; left on "
         + expect_seen(s.node, "left", t0, bound(s), others);
}

std::string runner::do_start(const step& s) {
  auto& n = node(s.node);
  refresh(n);
  if (n.running)
    throw step_failed("node " + s.node + " is already running");
  auto t0 = clock_type::now();
  start_node(n, true);
  auto ready = since(t0);
  auto seen = expect_seen(s.node, "alive", t0, bound(s), running_nodes(&n));
  return "ready on " + endpoint(n) + " in " + secs(ready)
         + "; alive on " + seen;
}

std::string runner::do_plan(const step& s) {
  auto& n = running_node(s.node);
  auto cmd = "plan " + model_path_ + (s.command.empty() ? "" : " " + s.command);
  auto r = console(n, cmd, s.json,
                   std::max(milliseconds{sc_.timing.console_timeout_ms},
                            ms(bound(s))));
  if (auto why = check(s.expect, r.code, r.out, r.err); !why.empty())
    throw step_failed(why + "; output:\n" + indent(tail(r.out + r.err, 20)));
  if (s.json)
    return "planned on " + s.node + " (JSON as expected)";
  auto first = r.out.substr(0, r.out.find('\n'));
  if (first.size() > 100)
    first = first.substr(0, 100) + "...";
  return "planned on " + s.node + ": " + first;
}

std::string runner::run_command(const step& s, int stages) const {
  auto cmd = "run --model " + model_path_ + " --prompt \"" + s.prompt
             + "\" -n " + std::to_string(s.tokens) + " --seed "
             + std::to_string(s.seed);
  if (s.temperature >= 0) {
    char t[32];
    std::snprintf(t, sizeof t, "%g", s.temperature);
    cmd += std::string{" --temperature "} + t;
  }
  if (stages > 0)
    cmd += " --stages " + std::to_string(stages);
  else if (s.stages > 0)
    cmd += " --stages " + std::to_string(s.stages);
  return cmd;
}

std::vector<std::int64_t> runner::reference_tokens(const step& s,
                                                   live_node& n,
                                                   double& seconds) {
  auto r = console(n, run_command(s, 1), true,
                   std::max(milliseconds{sc_.timing.console_timeout_ms},
                            ms(bound(s))));
  seconds = r.seconds;
  if (r.code != 0)
    throw step_failed("the reference run (--stages 1) ended with status "
                      + std::to_string(r.code) + "; output:\n"
                      + indent(last_output(r.out + r.err)));
  run_reply reply;
  std::string why;
  if (!parse_run_reply(r.out, reply, why))
    throw step_failed("the reference run (--stages 1): " + why + "; output:\n"
                      + indent(last_output(r.out + r.err)));
  if (reply.tokens.empty())
    throw step_failed("the reference run (--stages 1) generated no tokens");
  return reply.tokens;
}

/// The recoveries of a run for its PASS line: each one's stall, as the
/// time from noticing the loss to the next token (recovery_s) and between
/// the tokens around it (gap_s).
std::string describe_recoveries(const std::vector<recovery>& rs) {
  if (rs.empty())
    return "no recovery";
  std::ostringstream os;
  os << rs.size() << (rs.size() == 1 ? " recovery" : " recoveries");
  for (std::size_t i = 0; i < rs.size(); ++i) {
    auto& r = rs[i];
    os << (i == 0 ? ": " : "; ") << "[" << (i + 1) << "] recovery_s "
       << std::fixed << std::setprecision(3) << r.recovery_s << " s, gap_s "
       << r.gap_s << " s, " << r.replayed << " tokens re-fed (" << r.reason
       << ")";
  }
  return os.str();
}

std::string runner::check_reply(const step& s, const std::string& out,
                                const std::string& err,
                                const std::vector<std::int64_t>* reference) {
  run_reply reply;
  std::string why;
  if (!parse_run_reply(out, reply, why))
    throw step_failed(why + "; output:\n" + indent(last_output(out + err)));
  if (reply.tokens.empty())
    throw step_failed("no tokens generated; output:\n"
                      + indent(last_output(out + err)));
  std::string d = "job " + std::to_string(reply.job) + ": "
                  + std::to_string(reply.tokens.size()) + " tokens";
  if (reference) {
    if (auto diff = compare_tokens(reply.tokens, *reference); !diff.empty())
      throw step_failed("the tokens differ from the reference's: " + diff
                        + "; " + describe_recoveries(reply.recoveries));
    d += ", equal to the reference's";
  }
  if (reply.cancelled)
    d += " (cancelled)";
  if (s.expect_recoveries >= 0
      && reply.recoveries.size()
           != static_cast<std::size_t>(s.expect_recoveries))
    throw step_failed(std::to_string(reply.recoveries.size())
                      + " recoveries, expected "
                      + std::to_string(s.expect_recoveries) + " ("
                      + describe_recoveries(reply.recoveries) + ")");
  if (s.max_refed >= 0) {
    std::uint64_t refed = 0;
    for (auto& r : reply.recoveries)
      refed += r.replayed;
    if (refed > static_cast<std::uint64_t>(s.max_refed))
      throw step_failed("its recoveries re-fed " + std::to_string(refed)
                        + " tokens, at most " + std::to_string(s.max_refed)
                        + " expected ("
                        + describe_recoveries(reply.recoveries) + ")");
  }
  return d + "; " + describe_recoveries(reply.recoveries);
}

std::string runner::do_run(const step& s) {
  if (!s.label.empty())
    return start_background(s);
  auto& n = running_node(s.node);
  std::vector<std::int64_t> reference;
  std::string ref_detail;
  if (s.reference) {
    double took = 0;
    reference = reference_tokens(s, n, took);
    ref_detail = "reference (--stages 1): "
                 + std::to_string(reference.size()) + " tokens in "
                 + secs(took) + "; ";
  }
  if (s.requests > 1) {
    // Several requests at once: as a background run, awaited here.
    auto label = "run-" + s.path;
    auto& run = spawn_run(s, n, label);
    run.has_reference = s.reference;
    run.reference = std::move(reference);
    return ref_detail + finish_run(s, label, bound(s)) + "\n  on " + s.node;
  }
  auto r = console(n, run_command(s, 0), s.json,
                   std::max(milliseconds{sc_.timing.console_timeout_ms},
                            ms(bound(s))));
  if (auto why = check(s.expect, r.code, r.out, r.err); !why.empty())
    throw step_failed(why + "; output:\n"
                      + indent(last_output(r.out + r.err)));
  if (s.expect.exit_code != 0)
    return "failed as expected";
  if (s.json)
    return ref_detail
           + check_reply(s, r.out, r.err, s.reference ? &reference : nullptr)
           + " on " + s.node;
  static const std::regex gen_re{
    "generation: (\\d+) tokens in [0-9.]+ s \\(([0-9.]+) tokens/s\\)"};
  std::smatch m;
  if (!std::regex_search(r.out, m, gen_re) || std::stoi(m[1]) < 1)
    throw step_failed("no tokens generated; output:\n"
                      + indent(last_output(r.out + r.err)));
  auto text_at = r.out.find("text: ");
  if (text_at == std::string::npos)
    throw step_failed("no text in the reply; output:\n"
                      + indent(last_output(r.out)));
  std::string steps;
  if (s.step_within_pct >= 0) {
    const double pct = opts_.step_within_pct >= 0 ? opts_.step_within_pct
                                                   : s.step_within_pct;
    step_times t;
    std::string why;
    if (!parse_step_times(r.out, t, why))
      throw step_failed(why + "; output:\n" + indent(last_output(r.out)));
    bool ok = false;
    steps = "; step time " + compare_step_times(t, pct, ok);
    if (!ok)
      throw step_failed("the step time is not what placement predicted: "
                        + steps.substr(2));
  }
  return std::string{m[1]} + " tokens at " + std::string{m[2]}
         + " tokens/s on " + s.node + steps;
}

/// The ids of the jobs `n` lists now.
std::set<std::uint64_t> runner::job_ids(live_node& n, const std::string& name) {
  auto r = console(n, "jobs", true, milliseconds{sc_.timing.console_timeout_ms});
  std::vector<job_status> jobs;
  std::string why;
  if (r.code != 0)
    throw step_failed("jobs on " + name + ": exo-console status "
                      + std::to_string(r.code) + " " + tail(r.err, 2));
  if (!parse_jobs(r.out, jobs, why))
    throw step_failed("jobs on " + name + ": " + why);
  std::set<std::uint64_t> ids;
  for (auto& j : jobs)
    ids.insert(j.job);
  return ids;
}

background_run& runner::spawn_run(const step& s, live_node& n,
                                  const std::string& label) {
  background_run b;
  auto runs_dir = dir_ + "/runs";
  fs::create_directories(runs_dir);
  // The await bounds the run; the console's own bound is the longest it
  // takes.
  auto argv = console_argv(n, run_command(s, 0), true, milliseconds{600000});
  log_verbose("run \"" + label + "\" on " + s.node + ": " + run_command(s, 0)
              + " --json, " + std::to_string(s.requests) + " request(s) (output "
              + runs_dir + "/" + label + ".*)");
  b.started = clock_type::now();
  auto& run = runs_[label] = std::move(b); // cleanup() ends it from here
  for (int i = 0; i < s.requests; ++i) {
    run_client c;
    auto base = runs_dir + "/" + label
                + (s.requests > 1 ? "." + std::to_string(i + 1) : "");
    c.out_path = base + ".out";
    c.err_path = base + ".err";
    c.pid = spawn_to_files(argv, c.out_path, c.err_path);
    run.clients.push_back(std::move(c));
  }
  return run;
}

std::string runner::start_background(const step& s) {
  auto& n = running_node(s.node);
  auto timeout = milliseconds{sc_.timing.console_timeout_ms};
  std::vector<std::int64_t> reference;
  std::string ref_detail;
  if (s.reference) {
    double took = 0;
    reference = reference_tokens(s, n, took);
    ref_detail = "reference (--stages 1): " + std::to_string(reference.size())
                 + " tokens in " + secs(took) + "; ";
  }
  // The jobs that run already are not this one.
  auto before = job_ids(n, s.node);
  auto& run = spawn_run(s, n, s.label);
  run.has_reference = s.reference;
  run.reference = std::move(reference);
  auto t0 = run.started;
  std::uint64_t job = 0, tokens = 0;
  std::size_t running = 0;
  eventually(t0, bound(s), "a running job with tokens on " + s.node, [&] {
    for (std::size_t i = 0; i < run.clients.size(); ++i) {
      auto& c = run.clients[i];
      int status = 0;
      if (c.pid > 0 && !still_running(c.pid, status)) {
        c.pid = -1;
        c.status = status;
        throw step_failed(
          "the run" + (run.clients.size() > 1
                         ? " (request " + std::to_string(i + 1) + ")"
                         : std::string{})
          + " ended (status " + std::to_string(status)
          + ") before it was seen running; a longer run (more tokens) lets "
            "the next step land mid-run; output:\n"
          + indent(last_output(read_text(c.out_path) + read_text(c.err_path),
                               10)));
      }
    }
    auto r = console(n, "jobs", true, timeout);
    if (r.code != 0)
      return "jobs: exo-console status " + std::to_string(r.code) + " "
             + tail(r.err, 2);
    std::vector<job_status> jobs;
    std::string why;
    if (!parse_jobs(r.out, jobs, why))
      return "jobs: " + why;
    std::string seen;
    running = 0;
    for (auto& j : jobs) {
      if (before.count(j.job))
        continue;
      if (j.state == "running" && j.tokens > 0) {
        ++running;
        if (job == 0 || j.tokens < tokens) {
          job = j.job;
          tokens = j.tokens;
        }
        continue;
      }
      seen += (seen.empty() ? "" : ", ") + std::string{"job "}
              + std::to_string(j.job) + " " + j.state + " with "
              + std::to_string(j.tokens) + " tokens";
    }
    if (running > 0)
      return std::string{};
    return seen.empty() ? std::string{"no new job yet"} : seen;
  });
  if (run.clients.size() > 1)
    return ref_detail + std::to_string(run.clients.size())
           + " requests in flight, " + std::to_string(running)
           + " running with tokens on " + s.node + " after "
           + secs(since(t0));
  return ref_detail + "job " + std::to_string(job) + " running on " + s.node
         + ", " + std::to_string(tokens) + " token(s) after "
         + secs(since(t0));
}

void runner::note_ended_runs(const std::string& label) {
  for (auto& [name, b] : runs_) {
    if (b.ended_by.empty() && !reap_clients(b))
      b.ended_by = label;
  }
}

std::string runner::finish_run(const step& s, const std::string& label,
                               double seconds) {
  try {
    return finish_run_checked(s, label, seconds);
  } catch (const step_failed& e) {
    auto& b = runs_.at(label);
    if (b.ended_by.empty())
      throw;
    throw step_failed(std::string{e.what()} + "\n(run \"" + label
                      + "\" had ended by the end of step " + b.ended_by
                      + ": a step after that one found it over)");
  }
}

std::string runner::finish_run_checked(const step& s, const std::string& label,
                                       double seconds) {
  auto& b = runs_.at(label);
  auto t0 = clock_type::now();
  auto many = b.clients.size() > 1;
  auto which = [&](std::size_t i) {
    return many ? "request " + std::to_string(i + 1) + " of "
                    + std::to_string(b.clients.size()) + " of "
                : std::string{};
  };
  for (;;) {
    check_interrupt();
    if (!reap_clients(b))
      break;
    if (since(t0) >= seconds) {
      std::string late;
      for (std::size_t i = 0; i < b.clients.size(); ++i) {
        auto& c = b.clients[i];
        if (c.pid <= 0)
          continue;
        terminate(c.pid, milliseconds{2000});
        c.pid = -1;
        late += "\n  " + which(i) + "run \"" + label + "\" (stopped), its "
                "output:\n"
                + indent(last_output(read_text(c.out_path)
                                       + read_text(c.err_path),
                                     10));
      }
      throw step_failed("run \"" + label + "\" did not end within "
                        + secs(seconds) + late);
    }
    std::this_thread::sleep_for(milliseconds{20});
  }
  auto took = "after " + secs(since(b.started));
  std::string details;
  std::set<std::uint64_t> jobs;
  for (std::size_t i = 0; i < b.clients.size(); ++i) {
    auto& c = b.clients[i];
    if (c.status < 0)
      throw step_failed(which(i) + "run \"" + label + "\" had already ended");
    auto out = read_text(c.out_path);
    auto err = read_text(c.err_path);
    // Every request must end as expected: one that does not is lost.
    if (auto why = check(s.expect, c.status, out, err); !why.empty())
      throw step_failed((many ? which(i) + "\"" + label + "\" lost: " : "")
                        + why + "; output:\n"
                        + indent(last_output(out + err)));
    if (s.expect.exit_code != 0)
      continue;
    std::string d;
    try {
      d = check_reply(s, out, err, b.has_reference ? &b.reference : nullptr);
    } catch (const step_failed& x) {
      throw step_failed((many ? which(i) + "\"" + label + "\" lost: " : "")
                        + x.what());
    }
    run_reply reply;
    std::string why;
    if (parse_run_reply(out, reply, why) && !jobs.insert(reply.job).second)
      throw step_failed(which(i) + "\"" + label + "\" reports job "
                        + std::to_string(reply.job)
                        + ", which another request reported too");
    details += many ? "\n  [" + std::to_string(i + 1) + "] " + d : d;
  }
  if (s.expect.exit_code != 0)
    return (many ? "every request failed as expected " : "failed as expected ")
           + took;
  if (many)
    return "ended " + took + ", all " + std::to_string(b.clients.size())
           + " requests completed, none lost:" + details;
  return "ended " + took + ", " + details;
}

std::string runner::do_await(const step& s) {
  return finish_run(s, s.label, bound(s));
}

std::string runner::do_freeze(const step& s) {
  auto& victim = running_node(s.node);
  std::vector<live_node*> survivors;
  for (auto* n : running_nodes(&victim))
    if (n != &victim)
      survivors.push_back(n);
  std::string before;
  if (!survivors.empty()) {
    std::vector<member_status> members;
    if (auto err = view(*survivors.front(), members, before); !err.empty())
      throw step_failed("before the freeze: " + err);
  }
  auto t0 = clock_type::now();
  kill(victim.pid, SIGSTOP);
  victim.frozen = true; // from here cleanup() kills it
  while (!is_stopped(victim.pid)) {
    if (since(t0) > 10)
      throw step_failed("node " + s.node + " did not stop within 10 s of "
                        "SIGSTOP");
    std::this_thread::sleep_for(milliseconds{5});
  }
  if (survivors.empty())
    return "froze " + s.node + " (no node left to notice)";
  return seen_dead(s, before, t0, survivors);
}

std::string runner::do_thaw(const step& s) {
  auto& n = node(s.node);
  refresh(n);
  if (!n.running)
    throw step_failed("node " + s.node + " is not running");
  if (!n.frozen)
    throw step_failed("node " + s.node + " is not frozen");
  auto t0 = clock_type::now();
  kill(n.pid, SIGCONT);
  n.frozen = false;
  while (is_stopped(n.pid)) {
    if (since(t0) > 10)
      throw step_failed("node " + s.node + " did not continue within 10 s "
                        "of SIGCONT");
    std::this_thread::sleep_for(milliseconds{5});
  }
  // What the others make of a node they declared dead is for later steps
  // to check (converge, console with poll); this one says what they see.
  std::string seen;
  for (auto* o : running_nodes(&n)) {
    if (o == &n)
      continue;
    std::vector<member_status> members;
    std::string co;
    auto err = view(*o, members, co);
    auto st = err.empty() ? status_of(members, s.node) : "?";
    seen += (seen.empty() ? "" : ", ") + o->spec->name + " sees it "
            + (st.empty() ? "absent" : st);
  }
  return "continued" + (seen.empty() ? std::string{} : "; " + seen);
}

std::string runner::do_network(const step& s) {
  if (!net_)
    throw step_failed("needs network namespaces, which are unavailable: "
                      + no_net_);
  switch (s.kind) {
    case step_kind::partition:
      net_->set_connected(s.node, false);
      return s.node + "'s link is down";
    case step_kind::heal:
      net_->set_connected(s.node, true);
      return s.node + "'s link is up";
    default:
      net_->shape(s.node, s.bandwidth_mbit);
      shaped_[s.node].mbit = s.bandwidth_mbit;
      if (s.bandwidth_mbit <= 0)
        return s.node + "'s link unshaped";
      std::ostringstream o;
      o << s.node << "'s link at " << s.bandwidth_mbit << " Mbit/s";
      return o.str();
  }
}

std::string runner::do_measure(const step& s) {
  if (!net_)
    throw step_failed("needs network namespaces, which are unavailable: "
                      + no_net_);
  auto& n = running_node(s.node);
  auto t0 = clock_type::now();
  std::string summary;
  // A measurement can meet a moment of other traffic: retried until it
  // holds or within_s passes.
  eventually(t0, bound(s),
             s.min_mbit > 0
               ? "link rates of at least "
                   + std::to_string(static_cast<long long>(s.min_mbit))
                   + " Mbit/s"
               : "link rates within "
                   + std::to_string(static_cast<int>(s.tolerance_pct))
                   + "% of the shaping",
             [&] {
               auto r = console(n, "measure", true, ms(bound(s)));
               if (r.code != 0)
                 return "measure failed: " + tail(r.out + r.err, 5);
               std::vector<measured_link> links;
               std::string why;
               if (!parse_links(r.out, links, why))
                 return why;
               return check_link_rates(links, shaped_, s.tolerance_pct,
                                       summary, s.min_mbit);
             });
  return summary;
}

std::string runner::do_fault(const step& s) {
  auto& n = running_node(s.node);
  auto r = console(n, "dev fault " + s.device + " " + s.fault, false,
                   std::max(milliseconds{sc_.timing.console_timeout_ms},
                            ms(bound(s))));
  if (auto why = check(s.expect, r.code, r.out, r.err); !why.empty())
    throw step_failed(why + "; output:\n" + indent(last_output(r.out + r.err)));
  auto said = r.code == 0 ? r.out : r.err;
  while (!said.empty() && (said.back() == '\n' || said.back() == ' '))
    said.pop_back();
  return s.node + "/" + s.device + ": " + last_output(said, 1);
}

std::string runner::do_audit(const step& s) {
  auto on = nodes_on(s);
  if (on.empty())
    throw step_failed("no running node to verify");
  std::string summary;
  for (auto* n : on) {
    auto name = n->spec->name;
    auto doc = console_json(*n, "audit verify", s);
    auto ok = doc.find("ok");
    if (!doc.is_object() || ok == doc.end() || !ok->is_boolean())
      throw step_failed("audit verify on " + name + ": no \"ok\" in "
                        + last_output(doc.dump(), 5));
    if (!ok->get<bool>())
      throw step_failed("the audit chain of " + name + " does not verify: "
                        + last_output(doc.dump(), 5));
    auto num = [&](const char* key) -> std::string {
      auto it = doc.find(key);
      return it != doc.end() && it->is_number_unsigned()
               ? std::to_string(it->get<std::uint64_t>())
               : std::string{"?"};
    };
    auto witnessed = doc.find("witnessed");
    summary += (summary.empty() ? "" : "; ") + name + " " + num("records")
               + " records, " + num("checkpoints") + " checkpoint(s)"
               + (witnessed != doc.end() && witnessed->is_array()
                    ? " (" + std::to_string(witnessed->size())
                        + " witnessed by peers)"
                    : std::string{});
  }
  return "audit chains verify: " + summary;
}

text::json runner::console_json(live_node& n, const std::string& command,
                                const step& s) {
  auto r = console(n, command, true,
                   std::max(milliseconds{sc_.timing.console_timeout_ms},
                            ms(bound(s))));
  auto name = n.spec->name;
  if (r.code != 0)
    throw step_failed(command + " on " + name + ": exo-console status "
                      + std::to_string(r.code) + ": "
                      + last_output(r.out + r.err, 5));
  try {
    return text::json::parse(r.out);
  } catch (const std::exception&) {
    throw step_failed(command + " on " + name + ": not JSON: "
                      + last_output(r.out, 5));
  }
}

std::string runner::do_thermal(const step& s) {
  auto on = nodes_on(s);
  if (on.empty())
    throw step_failed("no running node to ask");
  std::string summary;
  for (auto* n : on) {
    auto name = n->spec->name;
    auto doc = console_json(*n, "thermal", s);
    auto devices = doc.is_object() ? doc.find("devices") : doc.end();
    if (devices == doc.end() || !devices->is_array())
      throw step_failed("thermal on " + name + ": no \"devices\" in "
                        + last_output(doc.dump(), 5));
    int seen = 0;
    for (auto& d : *devices) {
      // The node's own monitors (the view holds its peers' reports too).
      if (!d.is_object() || d.value("node", "") != name
          || !d.value("has_temperature", false))
        continue;
      auto num = [&](const char* key) {
        auto it = d.find(key);
        return it != d.end() && it->is_number() ? it->get<double>() : -1e9;
      };
      auto peak = num("peak_c");
      auto limit = num("limit_c");
      auto id = name + "/" + d.value("device", std::string{"?"});
      if (peak < -1e8 || limit < -1e8)
        throw step_failed("thermal on " + name + ": " + id
                          + " reports no peak_c or limit_c");
      if (peak >= limit)
        throw step_failed(id + " crossed its thermal limit: peak "
                          + celsius(peak) + ", limit " + celsius(limit)
                          + " (now " + celsius(num("temp_c")) + ", "
                          + d.value("state", std::string{"?"}) + ")");
      summary += (summary.empty() ? "" : "; ") + id + " peak "
                 + celsius(peak) + " < limit " + celsius(limit) + " ("
                 + d.value("state", std::string{"?"}) + ")";
      ++seen;
    }
    if (seen == 0)
      summary += (summary.empty() ? "" : "; ") + name
                 + ": no device reports a temperature";
  }
  return "no thermal limit crossed: " + summary;
}

std::string runner::run_step(const step& s) {
  switch (s.kind) {
    case step_kind::converge: return do_converge(s);
    case step_kind::console: return do_console(s);
    case step_kind::kill: return do_kill(s);
    case step_kind::stop: return do_stop(s);
    case step_kind::start: return do_start(s);
    case step_kind::plan: return do_plan(s);
    case step_kind::run: return do_run(s);
    case step_kind::await: return do_await(s);
    case step_kind::freeze: return do_freeze(s);
    case step_kind::thaw: return do_thaw(s);
    case step_kind::partition:
    case step_kind::heal:
    case step_kind::shape: return do_network(s);
    case step_kind::measure: return do_measure(s);
    case step_kind::fault: return do_fault(s);
    case step_kind::audit: return do_audit(s);
    case step_kind::thermal: return do_thermal(s);
    case step_kind::sleep: {
      auto until = clock_type::now() + ms(s.seconds);
      while (clock_type::now() < until) {
        check_interrupt();
        std::this_thread::sleep_for(milliseconds{20});
      }
      return "slept " + secs(s.seconds);
    }
  }
  return {};
}

/// Whether `sc` shapes a link or partitions one (loopback cannot).
bool needs_namespaces(const scenario& sc) {
  if (sc.network.discovery)
    return true;
  for (auto& n : sc.nodes)
    if (n.bandwidth_mbit > 0 || n.latency_ms > 0 || n.loss_pct > 0)
      return true;
  for (auto& s : sc.steps)
    if (s.kind == step_kind::partition || s.kind == step_kind::heal
        || s.kind == step_kind::shape || s.kind == step_kind::measure)
      return true;
  return false;
}

std::string describe(const step& s) {
  if (!s.title.empty())
    return s.title;
  std::string d = s.verb.empty() ? to_string(s.kind) : s.verb;
  switch (s.kind) {
    case step_kind::converge:
      d += s.alive >= 0 ? " to " + std::to_string(s.alive) + " alive"
                        : " (every running node alive)";
      break;
    case step_kind::console: d += " " + s.node + ": " + s.command; break;
    case step_kind::run:
      d += " on " + s.node
           + (s.requests > 1 ? ", " + std::to_string(s.requests) + " requests"
                             : std::string{})
           + (s.label.empty() ? "" : " in the background as " + s.label)
           + ": \"" + s.prompt + "\"";
      break;
    case step_kind::await: d += " " + s.label; break;
    case step_kind::sleep: d += " " + secs(s.seconds); break;
    case step_kind::fault: d += " " + s.node + "/" + s.device + ": " + s.fault; break;
    case step_kind::audit:
    case step_kind::thermal:
      d += s.on.empty() ? " (every running node)" : " on " + [&] {
        std::string x;
        for (auto& o : s.on)
          x += (x.empty() ? "" : ", ") + o;
        return x;
      }();
      break;
    default: d += " " + s.node;
  }
  return d;
}

int runner::finish(const std::string& result, int code,
                   const std::string& why) {
  if (opts_.report.empty())
    return code;
  text::json nodes = text::json::array();
  for (auto& n : sc_.nodes) {
    text::json o{{"name", n.name}};
    if (!n.cluster.empty())
      o["cluster"] = n.cluster;
    if (n.bandwidth_mbit > 0)
      o["bandwidth_mbit"] = n.bandwidth_mbit;
    if (n.latency_ms > 0)
      o["latency_ms"] = n.latency_ms;
    if (n.jitter_ms > 0)
      o["jitter_ms"] = n.jitter_ms;
    if (n.loss_pct > 0)
      o["loss_pct"] = n.loss_pct;
    nodes.push_back(std::move(o));
  }
  text::json doc{{"scenario", sc_.name},
                 {"result", result},
                 {"exit_status", code},
                 {"seconds", since(t_all_)},
                 {"nodes", std::move(nodes)},
                 {"steps", steps_report_}};
  if (!why.empty())
    doc["reason"] = why;
  if (sc_.network.namespaces)
    doc["network"] = no_net_.empty()
                       ? text::json{{"namespaces", true},
                                    {"discovery", sc_.network.discovery}}
                       : text::json{{"namespaces", false},
                                    {"unavailable", no_net_}};
  try {
    write_text(opts_.report, doc.dump(2) + "\n");
    out_ << "report written to " << opts_.report << "\n";
  } catch (const std::exception& e) {
    out_ << "cannot write the report " << opts_.report << ": " << e.what()
         << "\n";
  }
  return code;
}

int runner::go() {
  auto t_all = clock_type::now();
  t_all_ = t_all;
  for (auto& n : sc_.nodes) {
    order_.push_back(n.name);
    nodes_[n.name].spec = &n;
  }
  auto total = sc_.steps.size();
  int failed = 0;
  std::size_t passed = 0;
  try {
    node_bin_ = find_tool("exo-node", "node", opts_.bin_dir);
    console_bin_ = find_tool("exo-console", "console", opts_.bin_dir);
    if (sc_.model)
      model_bin_ = find_tool("exo-model", "tools", opts_.bin_dir);
    make_dir();
    out_ << "scenario " << sc_.name << ": " << sc_.nodes.size() << " node(s), "
         << total << " step(s), work dir " << dir_ << "\n";
    if (!sc_.description.empty())
      out_ << "  " << sc_.description << "\n";
    out_ << std::flush;
    make_pki();
    make_network();
    if (!no_net_.empty() && needs_namespaces(sc_)) {
      out_ << "scenario " << sc_.name << ": SKIPPED: its links or steps "
           << "need network namespaces (" << no_net_ << ")\n";
      cleanup();
      return finish("skipped", skipped_exit, no_net_);
    }
    if (sc_.model)
      make_model();
    for (auto& name : order_)
      if (node(name).spec->start)
        start_node(node(name));
  } catch (const interrupted_error&) {
    out_ << "interrupted\n";
    cleanup();
    return finish("interrupted", 130);
  } catch (const std::exception& e) {
    out_ << "setup FAILED: " << e.what() << "\n";
    cleanup();
    out_ << "scenario " << sc_.name << ": FAIL (setup)\n";
    return finish("fail", 1, std::string{"setup: "} + e.what());
  }
  for (std::size_t i = 0; i < total; ++i) {
    auto& s = sc_.steps[i];
    std::ostringstream label;
    label << "[" << (i + 1) << "/" << total << "] " << describe(s);
    text::json entry{{"index", i + 1},
                     {"do", s.verb.empty() ? to_string(s.kind) : s.verb},
                     {"step", describe(s)},
                     {"at_s", since(t_all)}};
    if (!s.node.empty())
      entry["node"] = s.node;
    if (failed) {
      out_ << label.str() << " ... SKIPPED\n";
      entry["result"] = "skipped";
      steps_report_.push_back(std::move(entry));
      continue;
    }
    out_ << label.str() << " ..." << (opts_.verbose ? "\n" : " ")
         << std::flush;
    auto t0 = clock_type::now();
    try {
      auto detail = run_step(s);
      if (s.kind != step_kind::await)
        note_ended_runs("[" + std::to_string(i + 1) + "/"
                        + std::to_string(total) + "] " + describe(s));
      out_ << (opts_.verbose ? "  " : "") << "PASS (" << secs(since(t0))
           << ")" << (detail.empty() ? "" : " " + detail) << "\n";
      ++passed;
      entry["result"] = "pass";
      entry["seconds"] = since(t0);
      entry["detail"] = detail;
    } catch (const interrupted_error&) {
      out_ << "interrupted\n";
      cleanup();
      entry["result"] = "interrupted";
      steps_report_.push_back(std::move(entry));
      return finish("interrupted", 130);
    } catch (const step_failed& e) {
      out_ << (opts_.verbose ? "  " : "") << "FAIL (" << secs(since(t0))
           << ")\n"
           << indent(std::string{s.path} + ": " + e.what());
      failed = 1;
      entry["result"] = "fail";
      entry["seconds"] = since(t0);
      entry["reason"] = std::string{s.path} + ": " + e.what();
    } catch (const std::exception& e) {
      out_ << (opts_.verbose ? "  " : "") << "FAIL (" << secs(since(t0))
           << ")\n"
           << indent(std::string{s.path} + ": error: " + e.what());
      failed = 1;
      entry["result"] = "fail";
      entry["seconds"] = since(t0);
      entry["reason"] = std::string{s.path} + ": error: " + e.what();
    }
    steps_report_.push_back(std::move(entry));
    out_ << std::flush;
    if (failed) {
      // The end of every node's latest log helps to see why.
      for (auto& name : order_) {
        auto& n = node(name);
        if (!n.log.empty())
          out_ << "  log of " << name << " (" << n.log << "), last lines:\n"
               << indent(tail(read_text(n.log), 8));
      }
      for (auto& [label, b] : runs_)
        for (std::size_t i = 0; i < b.clients.size(); ++i) {
          auto& c = b.clients[i];
          out_ << "  output of the background run " << label
               << (b.clients.size() > 1
                     ? " (request " + std::to_string(i + 1) + ")"
                     : std::string{})
               << " (" << (c.pid > 0 ? "running" : "ended")
               << "), last lines:\n"
               << indent(last_output(
                    read_text(c.out_path) + read_text(c.err_path), 8));
        }
    }
  }
  cleanup();
  out_ << "scenario " << sc_.name << ": " << (failed ? "FAIL" : "PASS") << " ("
       << passed << "/" << total << " steps passed in " << secs(since(t_all))
       << ")\n"
       << std::flush;
  return finish(failed ? "fail" : "pass", failed ? 1 : 0);
}

} // namespace

int run(const scenario& sc, const runner_options& opts, std::ostream& out) {
  try {
    runner r{sc, opts, out};
    return r.go();
  } catch (const std::exception& e) {
    out << "exo-scenario: error: " << e.what() << "\n";
    return 1;
  }
}

} // namespace exo::scenario
