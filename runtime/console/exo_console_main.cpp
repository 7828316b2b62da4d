// exo-console: look inside a running exo cluster.
//
//   exo-console --connect HOST:PORT --cert C --key K --ca CA [--exec CMD]
//               [--json] [--token-file FILE]
//
// Connects to one node over mutual TLS with a client certificate (made with
// `exo-cert issue-client`), proves its name, and runs commands: nodes,
// devices, links, measure, actors [NODE], inspect [NODE:]ACTOR, coordinator.
// With --token-file every command carries auth=TOKEN (the file's first
// line) unless it names one itself; the token is never printed.

#include "core/config/peer_address.hpp"
#include "runtime/console/client.hpp"
#include "runtime/console/line_editor.hpp"
#include "runtime/console/render.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/tls_error.hpp"

#include <caf/all.hpp>

#include <cstdlib>
#include <iostream>

namespace {

constexpr const char* usage = R"(usage: exo-console --connect HOST:PORT --cert FILE --key FILE --ca FILE
                   [--passphrase-file FILE] [--exec "COMMAND"] [--json]
                   [--timeout-ms N] [--token-file FILE]

Connects to an exo node with a client certificate and inspects the cluster.
Without --exec it reads commands interactively (line editing, history in
~/.exo_console_history). Type "help" for the commands.

--token-file FILE  send the bearer token in FILE's first line with every
                   command (as auth=TOKEN; a command that names auth=
                   itself keeps its own), for nodes that check tokens
                   (safety.console_requires_token) and for dev/token.
)";

struct options {
  std::string connect;
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
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(2, a + " needs a value (see --help)");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (a == "--connect") {
      o.connect = value();
    } else if (a == "--cert") {
      o.files.certificate = value();
    } else if (a == "--key") {
      o.files.key = value();
    } else if (a == "--ca") {
      o.files.cafile = value();
    } else if (a == "--passphrase-file") {
      o.passphrase_file = value();
    } else if (a == "--token-file") {
      o.token_file = value();
      if (o.token_file.empty())
        die(2, "--token-file needs a file name");
    } else if (a == "--exec") {
      o.exec.push_back(value());
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--timeout-ms") {
      char* end = nullptr;
      auto v = value();
      o.timeout_ms = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || o.timeout_ms < 100 || o.timeout_ms > 600000)
        die(2, "--timeout-ms must be an integer in [100, 600000]");
    } else {
      die(2, "unknown argument \"" + a + "\" (see --help)");
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

/// Runs one command line; returns false when the console should quit.
/// Errors are printed and counted in `failures`.
bool run_command(exo::console::client& c, const std::string& line, bool json,
                 int& failures, const std::string& token) {
  using namespace exo;
  auto words = console::split_words(line);
  if (words.empty())
    return true;
  // --token-file: the token goes with every command that names none.
  if (!token.empty()) {
    bool named = false;
    for (std::size_t i = 1; i < words.size(); ++i)
      named = named || words[i].rfind("auth=", 0) == 0;
    if (!named)
      words.push_back("auth=" + token);
  }
  auto& cmd = words[0];
  auto fail = [&](const std::string& msg) {
    std::cerr << "error: " << msg << "\n";
    ++failures;
    return true;
  };
  if (cmd == "quit" || cmd == "exit")
    return false;
  if (cmd == "help") {
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
  struct arity {
    const char* name;
    std::size_t min, max;
  };
  static const arity known[] = {{"nodes", 0, 0},   {"devices", 0, 0},
                                {"links", 0, 0},   {"measure", 0, 0},
                                {"actors", 0, 1},  {"inspect", 1, 1},
                                {"coordinator", 0, 0}};
  const arity* a = nullptr;
  for (auto& k : known)
    if (cmd == k.name)
      a = &k;
  // auth=TOKEN is not an argument of a built-in command: it is sent along
  // and the gate checks it (and takes it out) before the command runs.
  std::string auth;
  if (a != nullptr) {
    for (auto it = words.begin() + 1; it != words.end();) {
      if (it->rfind("auth=", 0) == 0) {
        auth += (auth.empty() ? "" : " ") + *it;
        it = words.erase(it);
      } else {
        ++it;
      }
    }
  }
  auto nargs = words.size() - 1;
  if (a == nullptr) {
    // Not built in: a service of the node may answer it (e.g. "plan").
    std::string rest;
    for (std::size_t i = 1; i < words.size(); ++i)
      rest += (i > 1 ? " " : "") + words[i];
    try {
      auto reply = c.ask(cmd, rest);
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
  if (nargs < a->min || nargs > a->max)
    return fail(cmd + ": expected "
                + (a->min == a->max ? std::to_string(a->min)
                                    : std::to_string(a->min) + " to "
                                        + std::to_string(a->max))
                + " argument(s), got " + std::to_string(nargs)
                + " (type help)");
  std::string arg = nargs > 0 ? words[1] : "";
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
    std::cout << (json ? "{\"coordinator\": \"" + reply.text + "\"}\n"
                       : reply.text + "\n");
  }
  std::cout.flush();
  return true;
}

} // namespace

int main(int argc, char** argv) {
  auto o = parse(argc, argv);
  exo::config::peer_address where;
  try {
    where = exo::config::parse_peer(o.connect, "--connect");
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
  try {
    exo::console::client c{o.files, std::chrono::milliseconds{o.timeout_ms}};
    c.connect(where.host, where.port);
    int failures = 0;
    if (!o.exec.empty()) {
      for (auto& line : o.exec)
        if (!run_command(c, line, o.json, failures, token))
          break;
      return failures == 0 ? 0 : 1;
    }
    std::cout << "connected to " << c.node_name() << " at " << o.connect
              << " (type help)\n";
    const char* home = std::getenv("HOME");
    exo::console::line_editor ed{home ? std::string{home}
                                          + "/.exo_console_history"
                                      : std::string{}};
    while (auto line = ed.read("exo> ")) {
      ed.add_history(*line);
      if (!run_command(c, *line, o.json, failures, token))
        break;
    }
    return 0;
  } catch (const exo::console::client_error& e) {
    die(1, e.what());
  }
}
