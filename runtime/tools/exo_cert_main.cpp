// exo-cert: creates the cluster CA and issues node and client certificates.
//
//   exo-cert init-ca --dir ca/
//   exo-cert issue-node --ca-dir ca/ --name node-a --out node-a/
//   exo-cert issue-client --ca-dir ca/ --name alice --out alice/
//   exo-cert show node-a/node-a.crt
//
// Exits 0 on success and 2 with a reason on stderr for any bad input.

#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tls/cert_tool.hpp"
#include "core/tls/certificate.hpp"
#include "core/tls/openssl_util.hpp"
#include "core/tls/private_key.hpp"
#include "core/tls/tls_error.hpp"

namespace {

using namespace exo::tls;

constexpr const char* usage_text = R"(usage: exo-cert COMMAND [OPTIONS]

Creates the TLS material of an exo cluster (keys: EC P-256, ECDSA-SHA256).

commands:
  init-ca       --dir DIR [--name NAME] [--days N] [--passphrase-file F]
                [--force]
                create a cluster CA: DIR/ca.crt and DIR/ca.key (mode 0600)
  issue-node    --ca-dir DIR --name NODE --out DIR [--days N]
                [--passphrase-file F] [--ca-passphrase-file F]
                [--san ENTRY]... [--force]
                issue a node certificate (serverAuth + clientAuth):
                OUT/NODE.crt, OUT/NODE.key and a copy of the CA as OUT/ca.crt
  issue-client  same options as issue-node, with --name CLIENT
                issue a client certificate (clientAuth)
  show          FILE [--passphrase-file F]
                describe a certificate or a private key
  help          print this text (also --help, -h)

options:
  --days N                 validity in days (CA: 3650, others: 365)
  --passphrase-file F      first line of F encrypts the new key (AES-256);
                           for show: decrypts the key
  --ca-passphrase-file F   first line of F decrypts the CA key
  --san ENTRY              extra subjectAltName, e.g. IP:10.0.0.5 or
                           DNS:gpu1.lan (DNS:NAME is always present)
  --force                  replace existing files (never done otherwise)

exit status: 0 on success, 2 on any error (the reason goes to stderr).
)";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parsed command line: positional arguments and --options.
struct arguments {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> options;
  bool force = false;

  std::optional<std::string> get(const std::string& name) const {
    auto i = options.find(name);
    if (i == options.end())
      return std::nullopt;
    if (i->second.size() > 1)
      throw usage_error("--" + name + " given more than once");
    return i->second.front();
  }

  std::string require(const std::string& name) const {
    auto value = get(name);
    if (!value)
      throw usage_error("missing --" + name);
    return *value;
  }
};

arguments parse(int argc, char** argv, const std::vector<std::string>& known) {
  arguments result;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--force") {
      result.force = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      result.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else {
      if (i + 1 >= argc)
        throw usage_error("option --" + name + " needs a value");
      value = argv[++i];
    }
    bool ok = false;
    for (auto& k : known)
      ok = ok || k == name;
    if (!ok)
      throw usage_error("unknown option --" + name);
    result.options[name].push_back(value);
  }
  return result;
}

int parse_days(const arguments& args, int fallback) {
  auto text = args.get("days");
  if (!text)
    return fallback;
  try {
    size_t used = 0;
    auto days = std::stoi(*text, &used);
    if (used != text->size())
      throw std::invalid_argument("trailing characters");
    return days;
  } catch (const std::exception&) {
    throw usage_error("--days expects a whole number of days, got '" + *text +
                      "'");
  }
}

std::string passphrase_from(const arguments& args, const std::string& name) {
  auto file = args.get(name);
  return file ? read_passphrase_file(*file) : std::string{};
}

void no_positional(const arguments& args) {
  if (!args.positional.empty())
    throw usage_error("unexpected argument '" + args.positional.front() + "'");
}

int init_ca_cmd(int argc, char** argv) {
  auto args = parse(argc, argv, {"dir", "name", "days", "passphrase-file"});
  no_positional(args);
  ca_options opts;
  auto dir = args.require("dir");
  if (auto name = args.get("name"))
    opts.name = *name;
  opts.days = parse_days(args, opts.days);
  auto pass = passphrase_from(args, "passphrase-file");
  auto paths = init_ca(dir, opts, pass, args.force);
  auto cert = certificate::load(paths.cert);
  std::cout << "created CA '" << cert.common_name() << "'\n"
            << "  certificate: " << paths.cert << '\n'
            << "  key:         " << paths.key
            << (pass.empty() ? " (not encrypted)" : " (AES-256 encrypted)")
            << '\n'
            << "  valid until: " << cert.not_after_text() << '\n';
  return 0;
}

int issue_cmd(int argc, char** argv, cert_role role) {
  auto args = parse(argc, argv,
                    {"ca-dir", "name", "out", "days", "passphrase-file",
                     "ca-passphrase-file", "san"});
  no_positional(args);
  cert_options opts;
  opts.role = role;
  auto ca_dir = args.require("ca-dir");
  opts.name = args.require("name");
  auto out = args.require("out");
  opts.days = parse_days(args, opts.days);
  if (auto i = args.options.find("san"); i != args.options.end())
    opts.alt_names = i->second;
  auto key_pass = passphrase_from(args, "passphrase-file");
  auto ca_pass = passphrase_from(args, "ca-passphrase-file");
  auto paths = issue_to_dir(ca_dir, ca_pass, out, opts, key_pass, args.force);
  auto cert = certificate::load(paths.cert);
  std::cout << "issued " << to_string(role) << " certificate '"
            << cert.common_name() << "'\n"
            << "  certificate: " << paths.cert << '\n'
            << "  key:         " << paths.key
            << (key_pass.empty() ? " (not encrypted)" : " (AES-256 encrypted)")
            << '\n'
            << "  CA:          " << paths.ca_cert << '\n'
            << "  valid until: " << cert.not_after_text() << '\n';
  return 0;
}

int show_cmd(int argc, char** argv) {
  auto args = parse(argc, argv, {"passphrase-file"});
  if (args.positional.size() != 1)
    throw usage_error("show expects exactly one FILE");
  auto path = args.positional.front();
  auto pem = exo::tls::detail::read_file(path, "file");
  if (pem.find("-----BEGIN CERTIFICATE-----") != std::string::npos) {
    auto certs = certificate::all_from_pem(pem, "'" + path + "'");
    for (size_t i = 0; i < certs.size(); ++i) {
      if (i > 0)
        std::cout << '\n';
      std::cout << "certificate " << path;
      if (certs.size() > 1)
        std::cout << " [" << i << "]";
      std::cout << '\n' << certs[i].describe();
    }
    return 0;
  }
  if (pem.find("PRIVATE KEY-----") != std::string::npos) {
    bool encrypted = is_encrypted_key_pem(pem);
    std::cout << "private key " << path << '\n'
              << "encrypted:    " << (encrypted ? "yes" : "no") << '\n';
    auto pass = passphrase_from(args, "passphrase-file");
    if (encrypted && pass.empty()) {
      std::cout << "(give --passphrase-file to check and describe it)\n";
      return 0;
    }
    auto key = private_key::from_pem(pem, pass, "key file '" + path + "'");
    std::cout << "algorithm:    " << key.algorithm_name() << '\n';
    return 0;
  }
  throw tls_error(tls_errc::not_pem,
                  "'" + path + "' holds no PEM certificate or private key");
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << usage_text;
    std::cerr << "\nexo-cert: error: no command given\n";
    return 2;
  }
  std::string cmd = argv[1];
  try {
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      std::cout << usage_text;
      return 0;
    }
    for (int i = 2; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::cout << usage_text;
        return 0;
      }
    }
    if (cmd == "init-ca")
      return init_ca_cmd(argc, argv);
    if (cmd == "issue-node")
      return issue_cmd(argc, argv, cert_role::node);
    if (cmd == "issue-client")
      return issue_cmd(argc, argv, cert_role::client);
    if (cmd == "show")
      return show_cmd(argc, argv);
    throw usage_error("unknown command '" + cmd + "' (try exo-cert --help)");
  } catch (const usage_error& err) {
    std::cerr << "exo-cert: error: " << err.what() << '\n';
  } catch (const tls_error& err) {
    std::cerr << "exo-cert: error: " << err.what() << '\n';
  } catch (const std::exception& err) {
    std::cerr << "exo-cert: error: " << err.what() << '\n';
  }
  return 2;
}
