// exo-console: look inside a running exo cluster.
//
//   exo-console --connect HOST:PORT[,HOST:PORT...] --cert C --key K --ca CA
//               [--exec CMD] [--json] [--token-file FILE]
//
// Connects to one node (the first of those named that answers) over mutual
// TLS with a client certificate (made with
// `exo-cert issue-client`), proves its name, and runs commands: nodes,
// devices, links, measure, actors [NODE], inspect [NODE:]ACTOR, coordinator.
// With --token-file every command carries auth=TOKEN (the file's first
// line) unless it names one itself; the token is never printed.

#include "core/cli/program.hpp"
#include "core/config/peer_address.hpp"
#include "core/console/commands.hpp"
#include "core/text/json.hpp"
#include "core/text/number.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/tls_error.hpp"
#include "runtime/console/client.hpp"
#include "runtime/console/line_editor.hpp"
#include "runtime/console/render.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <iostream>

namespace {

constexpr const char* description = R"(Connects to an exo node with a client certificate and inspects the cluster.
Without --exec it reads commands interactively (line editing, history in
~/.exo_console_history). Type "help" for the commands.)";

struct options {
  std::vector<std::string> connect;
  exo::tls::material files;
  std::string passphrase_file;
  std::string token_file;
  std::vector<std::string> exec;
  bool json = false;
  long timeout_ms = 5000;
};

[[noreturn]] void die(int code, const std::string& msg) {
  std::cerr << "exo-console: " << msg << "\n";
  std::exit(code);
}

options parse(int argc, char** argv) {
  options o;
  std::string timeout;
  CLI::App app{description, "exo-console"};
  exo::cli::configure(app);
  app.add_option("--connect", o.connect,
                 "the node to connect to; more than one (repeated, or "
                 "HOST:PORT,HOST:PORT) are tried in order until one answers")
    ->type_name("HOST:PORT")
    ->delimiter(',');
  app.add_option("--cert", o.files.certificate, "client certificate")
    ->type_name("FILE");
  app.add_option("--key", o.files.key, "its private key")->type_name("FILE");
  app.add_option("--ca", o.files.cafile, "the cluster CA")->type_name("FILE");
  app.add_option("--passphrase-file", o.passphrase_file,
                 "first line decrypts the key")
    ->type_name("FILE");
  app.add_option("--exec", o.exec,
                 "run COMMAND and exit (repeatable; exit 1 if one fails)")
    ->type_name("COMMAND")
    ->allow_extra_args(false)
    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--json", o.json, "print replies as JSON");
  app.add_option("--timeout-ms", timeout, "reply timeout (5000)")
    ->type_name("N");
  app.add_option("--token-file", o.token_file,
                 "send the bearer token in FILE's first line with every "
                 "command (as auth=TOKEN; a command that names auth= itself "
                 "keeps its own), for nodes that check tokens "
                 "(safety.console_requires_token) and for dev/token")
    ->type_name("FILE");
  if (auto code = exo::cli::parse(app, argc, argv, std::cout, std::cerr,
                                  "exo-console: "))
    std::exit(*code);
  if (app.count("--token-file") > 0 && o.token_file.empty())
    die(2, "--token-file needs a file name");
  if (app.count("--timeout-ms") > 0) {
    try {
      o.timeout_ms
        = exo::text::parse_integer<long>(timeout, 100, 600000, "--timeout-ms");
    } catch (const exo::text::number_error& e) {
      die(2, std::string{e.what()} + " (an integer in [100, 600000])");
    }
  }
  if (o.connect.empty())
    die(2, "--connect HOST:PORT is required (see --help)");
  if (o.files.certificate.empty() || o.files.key.empty()
      || o.files.cafile.empty())
    die(2, "--cert, --key and --ca are required: the console never connects "
           "without a client certificate");
  return o;
}

/// The gate's own commands, whose replies the console renders as tables.
bool built_in(const std::string& cmd) {
  for (auto* name : {"nodes", "devices", "links", "measure", "actors",
                     "inspect", "coordinator"})
    if (cmd == name)
      return true;
  return false;
}

/// `line` without its first word (a prompt's quotes and spacing kept).
std::string rest_of(const std::string& line) {
  auto b = line.find_first_not_of(" \t");
  if (b == std::string::npos)
    return {};
  auto e = line.find_first_of(" \t", b);
  if (e == std::string::npos)
    return {};
  auto r = line.find_first_not_of(" \t", e);
  return r == std::string::npos ? std::string{} : line.substr(r);
}

/// A name for a run that names none (run --id): what the console
/// re-attaches to when its node dies while it waits.
std::string run_name() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "console-%08x%04x", rd(), rd() & 0xffff);
  return buf;
}

/// Rounds over the members in a row in which none had the job a console
/// follows, a second apart, before it gives up (a takeover takes a
/// failure timeout, a placement and perhaps a model's transfer).
constexpr int max_quiet_rounds = 30;

/// Moves of one job a console follows at most (each a node lost or a
/// takeover): beyond that it is going round in circles.
constexpr int max_job_moves = 32;

/// Rounds in a row in which every member answered that it has no trace
/// of the job (not running, starting, backed up or ended there) before a
/// console's own `run` is submitted again: the job was lost before any
/// backup held it (its node died between starting it and its first
/// replication, or before it was submitted at all). A backup holds its
/// replica from the job's first replication on, so a job that can still
/// go on is found in the first round; the later rounds let a replica in
/// flight arrive. The client has seen nothing of the run (its reply comes
/// at the end), so running it again loses nothing and repeats nothing the
/// client saw; the lost copy may have run part of the way, never twice to
/// the client.
constexpr int lost_run_rounds = 3;

/// Times a console submits its `run` again (each after lost_run_rounds).
constexpr int max_resubmissions = 2;

/// A `run` (or `attach`) whose node died while the console waited, or
/// whose node ended its copy because the job's backup took it over: the
/// console connects to another member (the one that took the job over
/// first, the node it lost last) and attaches to the job by its name, and
/// does so again each time the job moves on (the node it re-attached
/// through goes too, or its copy is taken over in turn) or is not there
/// yet (a takeover under way); the members come from the last node that
/// answered. `rerun`: the console's own `run` (its argument line, with its
/// --id), submitted again through a member when none has any trace of
/// the job (lost_run_rounds); empty for an `attach`. Returns the job's
/// reply; throws client_error for an error about the job itself, when no
/// member could be reached in a round, or when no member has had it for
/// max_quiet_rounds rounds.
exo::console_reply reattach(exo::console::client& c, exo::member_view view,
                            std::string lost_node, const std::string& name,
                            const std::string& auth, std::string why,
                            const std::string& rerun) {
  using namespace exo;
  auto prefer = console::taken_over_by(why);
  int quiet = 0;
  int moves = 0;
  int unanimous = 0; // rounds in a row in which every member had no trace
  int resubmitted = 0;
  for (;;) {
    // The node a takeover named is asked even when the view holds it dead:
    // a node that froze and came back may be listed so a while.
    std::vector<std::string> names;
    for (auto& m : view.members)
      if (m.port != 0
          && (m.status == member_status::alive || m.name == prefer))
        names.push_back(m.name);
    // The node lost first is asked only after the others (it may be gone
    // for good); in a later round it may know where its job went.
    auto order = console::follow_order(names, prefer, lost_node);
    if (moves == 0 && quiet == 0 && !order.empty() && order.back() == lost_node
        && console::follow_reading(why) == console::job_follow::node_lost)
      order.pop_back();
    std::string tried;
    bool moved = false;
    bool reached = false; // a member answered (it may have the job later)
    bool none_has = !order.empty(); // each member: "no job" (none missed)
    std::string answered;           // the last member that did
    // This round's members, copied: a member's answer below replaces the
    // view, which may no longer list a member later in the order (a
    // restarted node that has not met it yet). Looking each one up in the
    // new view dereferenced its end (the soak's exit 139).
    std::vector<member_info> round;
    for (auto& n : order)
      if (auto m = std::find_if(view.members.begin(), view.members.end(),
                                [&](const member_info& x) {
                                  return x.name == n;
                                });
          m != view.members.end())
        round.push_back(*m);
    for (const auto& m : round) {
      auto where = m.host + ":" + std::to_string(m.port);
      std::cerr << "exo-console: " << why << "; re-attaching to job " << name
                << " through " << m.name << " at " << where << "\n";
      auto node = m.name;
      try {
        c.connect(m.host, m.port);
      } catch (const console::client_error& e) { // not there now
        std::cerr << "exo-console: " << node << ": " << e.what() << "\n";
        tried += std::string{tried.empty() ? "" : "; "} + node + ": "
                 + e.what();
        none_has = false;
        continue;
      }
      reached = true;
      try { // the members as this node sees them now
        auto v = c.ask("nodes", auth).nodes;
        if (!v.members.empty())
          view = std::move(v);
      } catch (const console::client_error&) {
      }
      try {
        return c.ask("attach",
                     name + (auth.empty() ? std::string{} : " " + auth));
      } catch (const console::client_error& e) {
        std::string msg = e.what();
        std::cerr << "exo-console: " << node << ": " << msg << "\n";
        tried += std::string{tried.empty() ? "" : "; "} + node + ": " + msg;
        switch (console::follow_reading(msg)) {
          case console::job_follow::ended:
            throw;
          case console::job_follow::not_found:
            answered = node;
            continue;
          case console::job_follow::node_lost:
            prefer.clear();
            break;
          case console::job_follow::taken_over:
            prefer = console::taken_over_by(msg);
            break;
        }
        lost_node = node;
        why = msg;
        moved = true;
      }
      if (moved)
        break;
    }
    if (moved) {
      quiet = 0;
      unanimous = 0;
      if (++moves > max_job_moves)
        throw console::client_error(why + "; job " + name + " moved "
                                    + std::to_string(max_job_moves)
                                    + " times: the console stops following it");
      // Nodes may disagree a moment about where it went: not a busy loop.
      if (moves > 2)
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      continue;
    }
    unanimous = none_has ? unanimous + 1 : 0;
    if (!rerun.empty() && unanimous >= lost_run_rounds
        && resubmitted < max_resubmissions && !answered.empty()) {
      ++resubmitted;
      unanimous = 0;
      quiet = 0;
      auto m = std::find_if(view.members.begin(), view.members.end(),
                            [&](const member_info& x) {
                              return x.name == answered;
                            });
      std::cerr << "exo-console: no node has job " << name
                << " (lost before any backup held it); running it again "
                   "through "
                << answered << "\n";
      try {
        if (m == view.members.end())
          throw console::client_error(answered + " left the member view");
        c.connect(m->host, m->port);
        return c.ask("run", rerun);
      } catch (const console::client_error& e) {
        std::string msg = e.what();
        std::cerr << "exo-console: " << answered << ": " << msg << "\n";
        if (console::follow_reading(msg) == console::job_follow::ended)
          throw; // the run's own answer (e.g. refused): the client's
        lost_node = answered;
        prefer = console::taken_over_by(msg);
        why = msg;
        continue;
      }
    }
    // No member to wait for (none could be reached), or waited enough.
    if (!reached || ++quiet >= max_quiet_rounds)
      throw console::client_error(why + "; no other node has job " + name
                                  + (tried.empty() ? std::string{}
                                                   : " (" + tried + ")"));
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

/// Runs one command line; returns false when the console should quit.
/// Errors are printed and counted in `failures`. The line is checked
/// against the command table (core/console/commands.hpp) before anything
/// is sent. `given`: the nodes of --connect, the members a run re-attaches
/// through when its node could not list them (it went before it answered).
bool run_command(exo::console::client& c, const std::string& line, bool json,
                 int& failures, const std::string& token,
                 const exo::member_view& given) {
  using namespace exo;
  auto fail = [&](const std::string& msg) {
    std::cerr << "error: " << msg << "\n";
    ++failures;
    return true;
  };
  console::parsed_command p;
  try {
    p = console::parse_line(line);
  } catch (const console::command_error& e) {
    return fail(std::string{e.what()} + " (type help)");
  }
  const auto& cmd = p.name;
  if (cmd.empty())
    return true;
  if (cmd == "quit" || cmd == "exit")
    return false;
  if (cmd == "help") {
    if (!p.args.empty()) {
      try {
        std::cout << console::help_text(p.args[0]);
      } catch (const console::command_error& e) {
        return fail(std::string{e.what()} + " (type help)");
      }
      return true;
    }
    std::cout << console::help_text();
    try {
      auto services = c.ask("services",
                            token.empty() ? "" : "auth=" + token);
      if (!services.text.empty())
        std::cout << "commands of this node's services:\n" << services.text;
    } catch (const console::client_error&) {
    }
    return true;
  }
  // --token-file: the token goes with every command that names none. The
  // gate checks auth= (and takes it out) before the command runs.
  std::string auth = p.has_auth ? "auth=" + p.auth
                                : token.empty() ? std::string{}
                                                : "auth=" + token;
  if (!built_in(cmd)) {
    // A service of the node answers it (e.g. "plan"): the argument goes as
    // typed, the service parses it with the same table.
    auto rest = rest_of(line);
    // A run gets a name, and the console the member view: if the node dies
    // while the run goes on, the console re-attaches through another.
    // An attach follows its job the same way.
    std::string name;
    member_view members;
    if (cmd == "run" || (cmd == "attach" && !p.args.empty())) {
      if (cmd == "attach") {
        name = p.args[0];
      } else if (!p.has("id")) {
        name = run_name();
        rest += " --id " + name;
      } else {
        name = p.text("id");
      }
      try {
        members = c.ask("nodes", auth).nodes;
      } catch (const console::client_error&) {
      }
      if (members.members.empty())
        members = given;
    }
    if (!p.has_auth && !auth.empty())
      rest += (rest.empty() ? "" : " ") + auth;
    try {
      console_reply reply;
      try {
        reply = c.ask(cmd, rest);
      } catch (const console::client_error& e) {
        // The node went, or it was frozen or cut off long enough for the
        // job's backup to take it over and ended its own copy when it came
        // back: either way the job goes on elsewhere.
        auto msg = std::string{e.what()};
        if (name.empty()
            || (msg.rfind("lost node ", 0) != 0
                && msg.find(console::job_taken_over) == std::string::npos))
          throw;
        reply = reattach(c, members, c.node_name(), name, auth, msg,
                         cmd == "run" ? rest : std::string{});
      }
      std::cout << (json ? reply.json : reply.text);
      if (!json && !reply.text.empty() && reply.text.back() != '\n')
        std::cout << "\n";
      std::cout.flush();
    } catch (const console::client_error& e) {
      auto msg = std::string{e.what()};
      if (msg.find("unknown command") != std::string::npos)
        return fail("unknown command \"" + cmd + "\" (type help)");
      return fail(msg);
    }
    return true;
  }
  std::string arg = p.args.empty() ? "" : p.args[0];
  if (!auth.empty())
    arg += (arg.empty() ? "" : " ") + auth;
  console_reply reply;
  try {
    reply = c.ask(cmd, arg);
  } catch (const console::client_error& e) {
    return fail(e.what());
  }
  if (cmd == "nodes") {
    std::cout << (json ? console::json(reply.nodes, reply.text)
                       : console::table(reply.nodes, reply.text));
  } else if (cmd == "devices") {
    std::cout << (json ? console::json(reply.devices)
                       : console::table(reply.devices));
  } else if (cmd == "links" || cmd == "measure") {
    std::cout << (json ? console::json(reply.links)
                       : console::table(reply.links));
  } else if (cmd == "actors") {
    std::cout << (json ? console::json(reply.actors)
                       : console::table(reply.actors));
  } else if (cmd == "inspect") {
    if (reply.actors.size() != 1)
      return fail("unexpected reply");
    std::cout << (json ? console::json(reply.actors[0])
                       : console::table(reply.actors[0]));
  } else if (cmd == "coordinator") {
    std::cout << (json ? exo::text::spaced({{"coordinator", reply.text}}) + "\n"
                       : reply.text + "\n");
  }
  std::cout.flush();
  return true;
}

} // namespace

int main(int argc, char** argv) {
  auto o = parse(argc, argv);
  std::vector<exo::config::peer_address> nodes;
  try {
    for (auto& text : o.connect)
      nodes.push_back(exo::config::parse_peer(text, "--connect"));
  } catch (const exo::config::config_error& e) {
    die(2, e.what());
  }
  if (!o.passphrase_file.empty()) {
    try {
      o.files.passphrase = exo::tls::read_passphrase_file(o.passphrase_file);
    } catch (const exo::tls::tls_error& e) {
      die(2, e.what());
    }
  }
  std::string token;
  if (!o.token_file.empty()) {
    try {
      token = exo::console::read_token_file(o.token_file);
    } catch (const exo::console::client_error& e) {
      die(2, e.what());
    }
  }
  // Named by their addresses until a node that answers lists the members.
  exo::member_view given;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    exo::member_info m;
    m.name = o.connect[i];
    m.host = nodes[i].host;
    m.port = nodes[i].port;
    given.members.push_back(std::move(m));
  }
  try {
    exo::console::client c{o.files, std::chrono::milliseconds{o.timeout_ms}};
    // The nodes in the order given: one that is down or restarting does
    // not keep a client that named others from its cluster.
    std::size_t at = 0;
    for (;; ++at) {
      try {
        c.connect(nodes[at].host, nodes[at].port);
        break;
      } catch (const exo::console::client_error& e) {
        if (at + 1 == nodes.size())
          throw;
        std::cerr << "exo-console: " << e.what() << "; trying "
                  << o.connect[at + 1] << "\n";
      }
    }
    int failures = 0;
    if (!o.exec.empty()) {
      for (auto& line : o.exec)
        if (!run_command(c, line, o.json, failures, token, given))
          break;
      return failures == 0 ? 0 : 1;
    }
    std::cout << "connected to " << c.node_name() << " at " << o.connect[at]
              << " (type help)\n";
    const char* home = std::getenv("HOME");
    exo::console::line_editor ed{home ? std::string{home}
                                          + "/.exo_console_history"
                                      : std::string{}};
    while (auto line = ed.read("exo> ")) {
      ed.add_history(*line);
      if (!run_command(c, *line, o.json, failures, token, given))
        break;
    }
    return 0;
  } catch (const exo::console::client_error& e) {
    die(1, e.what());
  }
}
