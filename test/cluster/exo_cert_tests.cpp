// Tests of the exo-cert program, run as a child process.

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sys/wait.h>

#include "core/tls/cert_tool.hpp"
#include "core/tls/material.hpp"
#include "core/tls/tls_error.hpp"
#include "test/cluster/tls_test_util.hpp"

using namespace exo::tls;
using exo::tls::test::temp_dir;

namespace {

struct run_result {
  int status = -1;
  std::string output;
};

/// Runs exo-cert with `args` (already shell-quoted), stdin from /dev/null so
/// that any prompt would fail instead of hanging.
run_result exo_cert(const std::string& args) {
  std::string cmd =
      std::string{"'"} + EXO_CERT_PATH + "' " + args + " </dev/null 2>&1";
  run_result result;
  auto* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0)
    result.output.append(buf, n);
  auto status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string q(const std::string& path) {
  return "'" + path + "'";
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out{path};
  out << text;
}

} // namespace

TEST_CASE("exo-cert --help lists every command and exits 0") {
  auto r = exo_cert("--help");
  CHECK(r.status == 0);
  for (auto* cmd : {"init-ca", "issue-node", "issue-client", "show"})
    CHECK_THAT(r.output, Catch::Contains(cmd));
  CHECK(exo_cert("issue-node --help").status == 0);
}

TEST_CASE("exo-cert refuses bad usage with exit 2 and a reason") {
  temp_dir dir;
  auto r = exo_cert("");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("no command given"));
  r = exo_cert("frobnicate");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("unknown command \"frobnicate\""));
  r = exo_cert("init-ca");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("missing --dir"));
  r = exo_cert("init-ca --dir " + q(dir / "ca") + " --colour blue");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("unknown option \"--colour\""));
  r = exo_cert("init-ca --dir " + q(dir / "ca") + " --days soon");
  CHECK(r.status == 2);
  CHECK_THAT(r.output,
             Catch::Contains("--days: 'soon' is not an integer (digits only) "
                             "(a whole number of days, 1 to 36500)"));
  // std::stoi took these: a sign, a space, a fraction cut to 5.
  for (auto bad : {"-5", "+5", "5.5", "0", "36501"}) {
    r = exo_cert("init-ca --dir " + q(dir / "ca") + " --days " + bad);
    INFO(bad << ": " << r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains("--days: '"));
  }
  r = exo_cert("init-ca --dir " + q(dir / "ca") + " --days");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("--days: 1 required N missing"));
  r = exo_cert("issue-node --ca-dir " + q(dir / "none") + " --name n --out " +
               q(dir / "o"));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("ca.crt"));
  r = exo_cert("show " + q(dir / "missing.pem"));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("missing.pem"));
  write_text(dir / "junk.txt", "junk");
  r = exo_cert("show " + q(dir / "junk.txt"));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("no PEM certificate or private key"));
}

TEST_CASE("exo-cert creates a CA and issues node and client material that "
          "passes the check") {
  temp_dir dir;
  auto r = exo_cert("init-ca --dir " + q(dir / "ca") + " --name 'Test CA'");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("created CA 'Test CA'"));
  r = exo_cert("issue-node --ca-dir " + q(dir / "ca") +
               " --name node-a --out " + q(dir / "a") +
               " --san IP:127.0.0.1 --days 30");
  REQUIRE(r.status == 0);
  auto node = check_material(material{
      dir / "a/node-a.crt", dir / "a/node-a.key", {}, dir / "a/ca.crt"});
  CHECK(node.common_name == "node-a");
  auto days_left = std::chrono::duration_cast<std::chrono::hours>(
                       node.not_after - std::chrono::system_clock::now())
                       .count() /
                   24;
  CHECK(days_left >= 29);
  CHECK(days_left <= 30);

  r = exo_cert("issue-client --ca-dir " + q(dir / "ca") +
               " --name alice --out " + q(dir / "alice"));
  REQUIRE(r.status == 0);
  material client{dir / "alice/alice.crt",
                  dir / "alice/alice.key",
                  {},
                  dir / "ca/ca.crt",
                  cert_role::client};
  CHECK(check_material(client).common_name == "alice");
  client.role = cert_role::node;
  CHECK_THROWS_AS(check_material(client), tls_error);

  r = exo_cert("show " + q(dir / "a/node-a.crt"));
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("common name:  node-a"));
  CHECK_THAT(r.output, Catch::Contains("issuer:       CN=Test CA"));
  CHECK_THAT(r.output, Catch::Contains("DNS:node-a, IP:127.0.0.1"));
  CHECK_THAT(r.output, Catch::Contains("serverAuth, clientAuth"));
  r = exo_cert("show " + q(dir / "ca/ca.key"));
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("encrypted:    no"));
  CHECK_THAT(r.output, Catch::Contains("EC P-256"));
}

TEST_CASE("exo-cert never overwrites keys without --force") {
  temp_dir dir;
  REQUIRE(exo_cert("init-ca --dir " + q(dir / "ca")).status == 0);
  auto before = certificate::load(dir / "ca/ca.crt").fingerprint_sha256();
  auto r = exo_cert("init-ca --dir " + q(dir / "ca"));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("refusing to overwrite"));
  CHECK(certificate::load(dir / "ca/ca.crt").fingerprint_sha256() == before);

  auto issue = "issue-node --ca-dir " + q(dir / "ca") + " --name n1 --out " +
               q(dir / "n1");
  REQUIRE(exo_cert(issue).status == 0);
  auto node_fp = certificate::load(dir / "n1/n1.crt").fingerprint_sha256();
  r = exo_cert(issue);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("n1.key"));
  CHECK(certificate::load(dir / "n1/n1.crt").fingerprint_sha256() == node_fp);
  CHECK(exo_cert(issue + " --force").status == 0);
  CHECK(certificate::load(dir / "n1/n1.crt").fingerprint_sha256() != node_fp);

  r = exo_cert("issue-node --ca-dir " + q(dir / "ca") +
               " --name ../evil --out " + q(dir / "e"));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("invalid node name"));

  // A node named "ca" would replace the CA's own files.
  auto ca_key = certificate::load(dir / "ca/ca.crt").fingerprint_sha256();
  r = exo_cert("issue-node --ca-dir " + q(dir / "ca") + " --name ca --out " +
               q(dir / "ca") + " --force");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("reserved"));
  CHECK(certificate::load(dir / "ca/ca.crt").fingerprint_sha256() == ca_key);
}

TEST_CASE("exo-cert protects keys with a passphrase file and needs it to "
          "issue") {
  temp_dir dir;
  write_text(dir / "ca.pass", "ca passphrase\n");
  write_text(dir / "wrong.pass", "not it\n");
  write_text(dir / "node.pass", "node passphrase\n");
  write_text(dir / "empty.pass", "\n");
  REQUIRE(exo_cert("init-ca --dir " + q(dir / "ca") + " --passphrase-file " +
                   q(dir / "ca.pass"))
              .status == 0);
  auto r = exo_cert("show " + q(dir / "ca/ca.key"));
  CHECK_THAT(r.output, Catch::Contains("encrypted:    yes"));
  auto issue = "issue-node --ca-dir " + q(dir / "ca") + " --name n1 --out " +
               q(dir / "n1");
  r = exo_cert(issue);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("needs a passphrase"));
  r = exo_cert(issue + " --ca-passphrase-file " + q(dir / "wrong.pass"));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("wrong passphrase"));
  r = exo_cert(issue + " --ca-passphrase-file " + q(dir / "empty.pass"));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("is empty"));
  r = exo_cert(issue + " --ca-passphrase-file " + q(dir / "ca.pass") +
               " --passphrase-file " + q(dir / "node.pass"));
  REQUIRE(r.status == 0);
  material m{dir / "n1/n1.crt", dir / "n1/n1.key", "node passphrase",
             dir / "n1/ca.crt"};
  CHECK(check_material(m).common_name == "n1");
  m.passphrase = "ca passphrase";
  CHECK_THROWS_AS(check_material(m), tls_error);
}
