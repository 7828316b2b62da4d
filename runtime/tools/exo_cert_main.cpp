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
#include <optional>
#include <string>
#include <vector>

#include "core/cli/program.hpp"
#include "core/text/number.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/certificate.hpp"
#include "core/tls/openssl_util.hpp"
#include "core/tls/private_key.hpp"
#include "core/tls/tls_error.hpp"

namespace {

using namespace exo::tls;

constexpr const char* description
  = "Creates the TLS material of an exo cluster (keys: EC P-256, "
    "ECDSA-SHA256).";

constexpr const char* footer = R"(commands:
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
Each command answers --help.

exit status: 0 on success, 2 on any error (the reason goes to stderr).
)";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The values of every command; what a command does not take stays empty.
struct arguments {
  std::string dir, ca_dir, name, out, days, passphrase_file;
  std::string ca_passphrase_file, file;
  std::vector<std::string> san;
  bool force = false;
  const CLI::App* cmd = nullptr;

  bool given(const char* option) const {
    return cmd->count(option) > 0;
  }

  std::optional<std::string> get(const char* option,
                                 const std::string& value) const {
    if (!given(option))
      return std::nullopt;
    return value;
  }

  std::string require(const char* option, const std::string& value) const {
    if (!given(option))
      throw usage_error(std::string{"missing "} + option);
    return value;
  }
};

int parse_days(const arguments& args, int fallback) {
  auto text = args.get("--days", args.days);
  if (!text)
    return fallback;
  // The one strict parser: whole days in [1, 36500] ("+5", " 5", "-5" and
  // "5.5" were taken or cut by std::stoi; 0 or fewer gave a certificate
  // that was never valid).
  try {
    return exo::text::parse_integer<int>(*text, 1, 36500, "--days");
  } catch (const exo::text::number_error& e) {
    throw usage_error(std::string{e.what()}
                      + " (a whole number of days, 1 to 36500)");
  }
}

std::string passphrase_from(const arguments& args, const char* option,
                            const std::string& file) {
  return args.given(option) ? read_passphrase_file(file) : std::string{};
}

int init_ca_cmd(const arguments& args) {
  ca_options opts;
  auto dir = args.require("--dir", args.dir);
  if (auto name = args.get("--name", args.name))
    opts.name = *name;
  opts.days = parse_days(args, opts.days);
  auto pass = passphrase_from(args, "--passphrase-file", args.passphrase_file);
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

int issue_cmd(const arguments& args, cert_role role) {
  cert_options opts;
  opts.role = role;
  auto ca_dir = args.require("--ca-dir", args.ca_dir);
  opts.name = args.require("--name", args.name);
  auto out = args.require("--out", args.out);
  opts.days = parse_days(args, opts.days);
  opts.alt_names = args.san;
  auto key_pass = passphrase_from(args, "--passphrase-file",
                                  args.passphrase_file);
  auto ca_pass = passphrase_from(args, "--ca-passphrase-file",
                                 args.ca_passphrase_file);
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

int show_cmd(const arguments& args) {
  if (!args.given("file"))
    throw usage_error("show expects exactly one FILE");
  auto path = args.file;
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
    auto pass = passphrase_from(args, "--passphrase-file",
                                args.passphrase_file);
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
  CLI::App app{description, "exo-cert"};
  exo::cli::configure(app);
  app.require_subcommand(1);
  app.footer(footer);
  arguments args;
  // One value per option, except --san: a second --name is a mistake.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  auto add_days = [&](CLI::App* c) {
    c->add_option("--days", args.days,
                  "validity in days (CA: 3650, others: 365)")
      ->type_name("N");
  };
  auto add_force = [&](CLI::App* c) {
    c->add_flag("--force", args.force,
                "replace existing files (never done otherwise)");
  };
  auto* init_ca = app.add_subcommand("init-ca", "create a cluster CA: "
                                     "DIR/ca.crt and DIR/ca.key (mode 0600)");
  init_ca->add_option("--dir", args.dir, "where the CA goes")
    ->type_name("DIR");
  init_ca->add_option("--name", args.name, "the CA's common name");
  add_days(init_ca);
  init_ca->add_option("--passphrase-file", args.passphrase_file,
                      "first line of F encrypts the new key (AES-256)")
    ->type_name("F");
  add_force(init_ca);
  std::vector<CLI::App*> issuers;
  for (auto role : {cert_role::node, cert_role::client}) {
    bool node = role == cert_role::node;
    auto* c = app.add_subcommand(
      node ? "issue-node" : "issue-client",
      node ? "issue a node certificate (serverAuth + clientAuth): "
             "OUT/NODE.crt, OUT/NODE.key and a copy of the CA as OUT/ca.crt"
           : "issue a client certificate (clientAuth)");
    c->add_option("--ca-dir", args.ca_dir, "the CA's folder")
      ->type_name("DIR");
    c->add_option("--name", args.name, node ? "the node's name"
                                            : "the client's name");
    c->add_option("--out", args.out, "where the material goes")
      ->type_name("DIR");
    add_days(c);
    c->add_option("--passphrase-file", args.passphrase_file,
                  "first line of F encrypts the new key (AES-256)")
      ->type_name("F");
    c->add_option("--ca-passphrase-file", args.ca_passphrase_file,
                  "first line of F decrypts the CA key")
      ->type_name("F");
    c->add_option("--san", args.san,
                  "extra subjectAltName, e.g. IP:10.0.0.5 or DNS:gpu1.lan "
                  "(DNS:NAME is always present); repeatable")
      ->type_name("ENTRY")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    add_force(c);
    issuers.push_back(c);
  }
  auto* show = app.add_subcommand("show",
                                  "describe a certificate or a private key");
  show->add_option("file", args.file, "a PEM file")->type_name("FILE");
  show->add_option("--passphrase-file", args.passphrase_file,
                   "first line of F decrypts the key")
    ->type_name("F");
  auto* help = app.add_subcommand("help", "print this text (also --help)");
  if (argc < 2) {
    std::cerr << app.help();
    std::cerr << "\nexo-cert: error: no command given\n";
    return 2;
  }
  if (auto code = exo::cli::parse(app, argc, argv, std::cout, std::cerr,
                                  "exo-cert: error: "))
    return *code;
  try {
    if (help->parsed()) {
      std::cout << app.help();
      return 0;
    }
    if (init_ca->parsed()) {
      args.cmd = init_ca;
      return init_ca_cmd(args);
    }
    for (auto* c : issuers)
      if (c->parsed()) {
        args.cmd = c;
        return issue_cmd(args, c == issuers[0] ? cert_role::node
                                               : cert_role::client);
      }
    args.cmd = show;
    return show_cmd(args);
  } catch (const usage_error& err) {
    std::cerr << "exo-cert: error: " << err.what() << '\n';
  } catch (const tls_error& err) {
    std::cerr << "exo-cert: error: " << err.what() << '\n';
  } catch (const std::exception& err) {
    std::cerr << "exo-cert: error: " << err.what() << '\n';
  }
  return 2;
}
