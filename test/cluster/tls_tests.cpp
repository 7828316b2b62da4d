// Tests of exo_tls: certificate creation, material checks, the local
// bootstrap and the join handshake's signed challenge.

#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <set>
#include <sys/stat.h>

#include "core/tls/bootstrap.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/challenge.hpp"
#include "core/tls/material.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"
#include "test/cluster/tls_test_util.hpp"

using namespace exo::tls;
using exo::tls::test::temp_dir;
using exo::tls::test::write_credential;

namespace {

/// Runs `fn` and checks it throws a tls_error with `code` whose message
/// contains `text`; returns the message.
std::string expect_error(const std::function<void()>& fn, tls_errc code,
                         const std::string& text) {
  try {
    fn();
  } catch (const tls_error& err) {
    INFO("message: " << err.what());
    CHECK(to_string(err.code()) == std::string{to_string(code)});
    CHECK_THAT(err.what(), Catch::Contains(text));
    return err.what();
  }
  FAIL("no tls_error thrown, expected " << to_string(code));
  return {};
}

mode_t mode_of(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out{path};
  out << text;
}

/// A CA and a node credential written to a temp dir, as valid material.
struct cluster_files {
  temp_dir dir;
  credential ca = create_ca();
  material node;

  explicit cluster_files(const std::string& passphrase = {}) {
    write_certificate(dir / "ca.crt", ca.cert);
    auto issued = issue_certificate(ca, cert_options{"node-a"});
    write_credential(dir, "node-a", issued, passphrase);
    node.certificate = dir / "node-a.crt";
    node.key = dir / "node-a.key";
    node.passphrase = passphrase;
    node.cafile = dir / "ca.crt";
  }

  /// Issues another credential from this CA and writes it as <stem>.*.
  material issue(const std::string& stem, cert_options opts) {
    auto issued = issue_certificate(ca, opts);
    write_credential(dir, stem, issued);
    return material{dir / (stem + ".crt"),
                    dir / (stem + ".key"),
                    {},
                    dir / "ca.crt",
                    opts.role};
  }
};

} // namespace

// -- certificates -------------------------------------------------------------

TEST_CASE("a node certificate names the node and allows server and client "
          "authentication") {
  auto ca = create_ca();
  cert_options opts{"node-a"};
  opts.alt_names = {"IP:127.0.0.1"};
  auto node = issue_certificate(ca, opts);
  CHECK(node.cert.common_name() == "node-a");
  CHECK(node.cert.issuer() == ca.cert.subject());
  CHECK(node.cert.matches(node.key));
  CHECK_FALSE(node.cert.matches(ca.key));
  CHECK_FALSE(node.cert.is_ca());
  CHECK(ca.cert.is_ca());
  CHECK(ca.cert.is_self_signed());
  CHECK(node.cert.has_digital_signature());
  CHECK(node.cert.has_server_auth());
  CHECK(node.cert.has_client_auth());
  auto sans = node.cert.subject_alt_names();
  CHECK(sans == std::vector<std::string>{"DNS:node-a", "IP:127.0.0.1"});
  CHECK_THAT(node.cert.describe(), Catch::Contains("EC P-256"));
  trust_store{ca.cert}.verify(node.cert, "node-a");
}

TEST_CASE("a client certificate allows client authentication only") {
  auto ca = create_ca();
  auto client = issue_certificate(ca, cert_options{"alice", cert_role::client});
  CHECK(client.cert.has_client_auth());
  CHECK_FALSE(client.cert.has_server_auth());
  check_usage(client.cert, cert_role::client, "alice");
  expect_error([&] { check_usage(client.cert, cert_role::node, "alice"); },
               tls_errc::wrong_usage, "serverAuth");
}

TEST_CASE("serial numbers are random and positive") {
  auto ca = create_ca();
  std::set<std::string> serials{ca.cert.serial_hex()};
  for (int i = 0; i < 8; ++i)
    serials.insert(issue_certificate(ca, cert_options{"n"}).cert.serial_hex());
  CHECK(serials.size() == 9);
  for (auto& s : serials) {
    CHECK(s.size() >= 30);
    CHECK(s.front() != '-');
  }
}

TEST_CASE("Ed25519 keys work for the CA, nodes and challenges") {
  ca_options ca_opts;
  ca_opts.algorithm = key_algorithm::ed25519;
  auto ca = create_ca(ca_opts);
  cert_options opts{"node-e"};
  opts.algorithm = key_algorithm::ed25519;
  auto node = issue_certificate(ca, opts);
  CHECK(node.key.algorithm_name() == "Ed25519");
  auto n = make_nonce();
  auto sig = sign_join(node.key, n, "node-e", "node-r");
  CHECK(verify_join(node.cert.to_pem(), trust_store{ca.cert}, n, "node-e",
                    "node-r", sig) == "node-e");
}

TEST_CASE("names that are not plain node names are refused") {
  auto ca = create_ca();
  std::vector<std::string> bad_names{
      "",        "../etc", "a/b",         "-rf",
      ".hidden", "a|b",    "white space", std::string(65, 'x')};
  for (auto& bad : bad_names)
    expect_error([&] { issue_certificate(ca, cert_options{bad}); },
                 tls_errc::invalid_argument, "invalid node name");
  expect_error(
      [&] {
        cert_options opts{"ok"};
        opts.alt_names = {"DNS:x,URI:evil"};
        issue_certificate(ca, opts);
      },
      tls_errc::invalid_argument, "subjectAltName");
  expect_error(
      [&] {
        cert_options opts{"ok"};
        opts.days = 0;
        issue_certificate(ca, opts);
      },
      tls_errc::invalid_argument, "validity");
}

TEST_CASE("keys are written 0600, certificates 0644, new directories 0700") {
  temp_dir dir;
  auto paths = init_ca(dir / "a/b/ca");
  CHECK(mode_of(dir / "a") == 0700);
  CHECK(mode_of(dir / "a/b/ca") == 0700);
  CHECK(mode_of(paths.key) == 0600);
  CHECK(mode_of(paths.cert) == 0644);
  auto issued =
      issue_to_dir(dir / "a/b/ca", {}, dir / "out", cert_options{"node-a"});
  CHECK(mode_of(dir / "out") == 0700);
  CHECK(mode_of(issued.key) == 0600);
  CHECK(mode_of(issued.cert) == 0644);
  CHECK(mode_of(issued.ca_cert) == 0644);
}

TEST_CASE("an existing key is never overwritten unless forced") {
  temp_dir dir;
  auto paths = init_ca(dir / "ca");
  auto before = certificate::load(paths.cert).fingerprint_sha256();
  expect_error([&] { init_ca(dir / "ca"); }, tls_errc::exists,
               "refusing to overwrite");
  CHECK(certificate::load(paths.cert).fingerprint_sha256() == before);
  init_ca(dir / "ca", {}, {}, true);
  CHECK(certificate::load(paths.cert).fingerprint_sha256() != before);
  auto key = private_key::generate();
  write_private_key(dir / "k.key", key);
  expect_error([&] { write_private_key(dir / "k.key", key); }, tls_errc::exists,
               "k.key");
}

TEST_CASE("an encrypted key is AES-256 PKCS#8 and loads only with its "
          "passphrase") {
  auto key = private_key::generate();
  auto pem = key.to_pem("correct horse");
  CHECK(is_encrypted_key_pem(pem));
  CHECK_FALSE(is_encrypted_key_pem(key.to_pem()));
  auto back = private_key::from_pem(pem, "correct horse");
  CHECK(EVP_PKEY_eq(back.native(), key.native()) == 1);
  expect_error([&] { private_key::from_pem(pem, "wrong"); },
               tls_errc::bad_passphrase, "wrong passphrase");
  expect_error([&] { private_key::from_pem(pem); },
               tls_errc::passphrase_required, "needs a passphrase");
}

// -- material checks ----------------------------------------------------------

TEST_CASE("valid material passes the check and yields the common name") {
  cluster_files files;
  auto info = check_material(files.node);
  CHECK(info.common_name == "node-a");
  CHECK(info.fingerprint.size() == 95);
  CHECK(info.not_after > std::chrono::system_clock::now());
}

TEST_CASE("valid material with an encrypted key passes with its passphrase") {
  cluster_files files{"s3cret-pass"};
  CHECK(check_material(files.node).common_name == "node-a");
}

TEST_CASE("material with a missing or unreadable file is refused naming "
          "the file") {
  cluster_files files;
  auto m = files.node;
  m.certificate = files.dir / "nope.crt";
  expect_error([&] { check_material(m); }, tls_errc::io, "nope.crt");
  m = files.node;
  m.key = files.dir / "nope.key";
  expect_error([&] { check_material(m); }, tls_errc::io, "nope.key");
  m = files.node;
  m.cafile = files.dir.path();
  expect_error([&] { check_material(m); }, tls_errc::io,
               "is not a regular file");
}

TEST_CASE("material that is not PEM is refused") {
  cluster_files files;
  write_text(files.dir / "junk.pem", "hello, I am not a certificate\n");
  write_text(files.dir / "broken.crt",
             "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
  auto m = files.node;
  m.certificate = files.dir / "junk.pem";
  expect_error([&] { check_material(m); }, tls_errc::not_pem, "not PEM");
  m.certificate = files.dir / "broken.crt";
  expect_error([&] { check_material(m); }, tls_errc::not_pem,
               "not a valid PEM certificate");
  m = files.node;
  m.key = files.dir / "junk.pem";
  expect_error([&] { check_material(m); }, tls_errc::not_pem, "not PEM");
  m = files.node;
  m.key = files.node.certificate;
  expect_error([&] { check_material(m); }, tls_errc::not_pem,
               "no PEM private key");
  m = files.node;
  m.cafile = files.node.key;
  expect_error([&] { check_material(m); }, tls_errc::not_pem,
               "no PEM certificate");
}

TEST_CASE("material with a wrong passphrase is refused without hanging") {
  cluster_files files{"right-one"};
  auto m = files.node;
  m.passphrase = "wrong-one";
  expect_error([&] { check_material(m); }, tls_errc::bad_passphrase,
               "wrong passphrase for key file");
}

TEST_CASE("an encrypted key without a passphrase is refused, never "
          "prompting") {
  cluster_files files{"right-one"};
  auto m = files.node;
  m.passphrase.clear();
  expect_error([&] { check_material(m); }, tls_errc::passphrase_required,
               "needs a passphrase");
}

TEST_CASE("a key that does not match the certificate is refused") {
  cluster_files files;
  auto other = files.issue("node-b", cert_options{"node-b"});
  auto m = files.node;
  m.key = other.key;
  expect_error([&] { check_material(m); }, tls_errc::key_mismatch,
               "does not belong to");
}

TEST_CASE("an expired certificate is refused") {
  cluster_files files;
  cert_options opts{"old"};
  opts.start_offset = std::chrono::hours{-24 * 10};
  opts.days = 5;
  auto m = files.issue("old", opts);
  expect_error([&] { check_material(m); }, tls_errc::expired, "expired on");
}

TEST_CASE("a certificate that is not yet valid is refused") {
  cluster_files files;
  cert_options opts{"future"};
  opts.start_offset = std::chrono::hours{48};
  auto m = files.issue("future", opts);
  expect_error([&] { check_material(m); }, tls_errc::not_yet_valid,
               "not valid yet");
}

TEST_CASE("a certificate from another CA is refused") {
  cluster_files files;
  cluster_files stranger;
  auto m = stranger.node;
  m.cafile = files.node.cafile;
  expect_error([&] { check_material(m); }, tls_errc::untrusted,
               "not signed by the cluster CA");
}

TEST_CASE("a self-signed certificate is refused") {
  cluster_files files;
  write_credential(files.dir, "selfie",
                   exo::tls::test::self_signed_leaf("node-a"));
  auto m = files.node;
  m.certificate = files.dir / "selfie.crt";
  m.key = files.dir / "selfie.key";
  expect_error([&] { check_material(m); }, tls_errc::self_signed,
               "self-signed");
}

TEST_CASE("a certificate with the wrong key usage is refused") {
  cluster_files files;
  // A client certificate cannot serve as a node's.
  auto client = files.issue("alice", cert_options{"alice", cert_role::client});
  CHECK(check_material(client).common_name == "alice");
  client.role = cert_role::node;
  expect_error([&] { check_material(client); }, tls_errc::wrong_usage,
               "serverAuth");
  // Nor can the CA certificate itself.
  write_private_key(files.dir / "ca.key", files.ca.key);
  auto m = files.node;
  m.certificate = files.node.cafile;
  m.key = files.dir / "ca.key";
  expect_error([&] { check_material(m); }, tls_errc::wrong_usage,
               "is a CA certificate");
  // A CA file must hold a CA.
  m = files.node;
  m.cafile = files.node.certificate;
  expect_error([&] { check_material(m); }, tls_errc::wrong_usage,
               "not a CA certificate");
}

TEST_CASE("material without a CA file, key or certificate is refused as "
          "anonymous TLS") {
  cluster_files files;
  for (auto field :
       {&material::certificate, &material::key, &material::cafile}) {
    auto m = files.node;
    m.*field = "";
    expect_error([&] { check_material(m); }, tls_errc::invalid_argument,
                 "never runs without");
  }
}

// -- bootstrap ----------------------------------------------------------------

TEST_CASE("a node's first start creates a local CA and certificate, later "
          "starts reuse them") {
  temp_dir dir;
  auto first = ensure_local_material(dir / "state", "node-a");
  CHECK(first.created_ca);
  CHECK(first.created_node_cert);
  CHECK(first.common_name == "node-a");
  CHECK(first.ca_dir == dir / "state/tls");
  CHECK(mode_of(first.ca_dir) == 0700);
  CHECK(mode_of(first.ca_dir + "/ca.key") == 0600);
  CHECK(mode_of(first.files.key) == 0600);
  CHECK_THAT(first.instructions,
             Catch::Contains("exo-cert issue-node --ca-dir " + first.ca_dir));
  auto fp = check_material(first.files).fingerprint;

  auto second = ensure_local_material(dir / "state", "node-a");
  CHECK_FALSE(second.created_ca);
  CHECK_FALSE(second.created_node_cert);
  CHECK(second.files.certificate == first.files.certificate);
  CHECK(check_material(second.files).fingerprint == fp);

  // Another node issued from the bootstrap CA is trusted by the first.
  auto paths =
      issue_to_dir(first.ca_dir, {}, dir / "b", cert_options{"node-b"});
  auto info =
      check_material(material{paths.cert, paths.key, {}, first.files.cafile});
  CHECK(info.common_name == "node-b");
}

TEST_CASE("bootstrap refuses a half-present local CA") {
  temp_dir dir;
  auto first = ensure_local_material(dir / "state", "node-a");
  std::filesystem::remove(first.ca_dir + "/ca.key");
  expect_error([&] { ensure_local_material(dir / "state", "node-a"); },
               tls_errc::io, "incomplete");
  expect_error([&] { ensure_local_material(dir / "state2", "../x"); },
               tls_errc::invalid_argument, "invalid node name");
  expect_error([&] { ensure_local_material(dir / "state3", "ca"); },
               tls_errc::invalid_argument, "reserved");
}

// -- join handshake primitives ------------------------------------------------

namespace {

struct handshake_fixture {
  credential ca = create_ca();
  credential node_a = issue_certificate(ca, cert_options{"node-a"});
  credential node_b = issue_certificate(ca, cert_options{"node-b"});
  trust_store trust{ca.cert};
  nonce challenge = make_nonce();
};

} // namespace

TEST_CASE("nonces are 32 fresh random bytes") {
  auto a = make_nonce();
  auto b = make_nonce();
  CHECK(a.size() == 32);
  CHECK(a != b);
  CHECK(join_context("node-a", "node-r") == "exo-join-v1|node-a|node-r");
}

TEST_CASE("a valid join signature verifies and yields the certificate's "
          "name") {
  handshake_fixture f;
  auto sig = sign_join(f.node_a.key, f.challenge, "node-a", "node-r");
  CHECK(verify_join(f.node_a.cert.to_pem(), f.trust, f.challenge, "node-a",
                    "node-r", sig) == "node-a");
  auto ctx = join_context("node-a", "node-r");
  CHECK(verify_challenge(f.node_a.cert.to_pem(), f.trust, f.challenge, ctx,
                         sig) == "node-a");
}

TEST_CASE("a join signature by another node's key is refused") {
  handshake_fixture f;
  auto sig = sign_join(f.node_b.key, f.challenge, "node-a", "node-r");
  expect_error(
      [&] {
        verify_join(f.node_a.cert.to_pem(), f.trust, f.challenge, "node-a",
                    "node-r", sig);
      },
      tls_errc::bad_signature, "does not verify");
}

TEST_CASE("a join certificate from another CA is refused") {
  handshake_fixture f;
  auto other_ca = create_ca();
  auto intruder = issue_certificate(other_ca, cert_options{"node-a"});
  auto sig = sign_join(intruder.key, f.challenge, "node-a", "node-r");
  expect_error(
      [&] {
        verify_join(intruder.cert.to_pem(), f.trust, f.challenge, "node-a",
                    "node-r", sig);
      },
      tls_errc::untrusted, "not signed by the cluster CA");
}

TEST_CASE("a self-signed join certificate is refused") {
  handshake_fixture f;
  auto selfie = exo::tls::test::self_signed_leaf("node-a");
  auto sig = sign_join(selfie.key, f.challenge, "node-a", "node-r");
  expect_error(
      [&] {
        verify_join(selfie.cert.to_pem(), f.trust, f.challenge, "node-a",
                    "node-r", sig);
      },
      tls_errc::self_signed, "self-signed");
}

TEST_CASE("a join signature over an altered nonce is refused") {
  handshake_fixture f;
  auto sig = sign_join(f.node_a.key, f.challenge, "node-a", "node-r");
  auto altered = f.challenge;
  altered[7] ^= 0x01;
  expect_error(
      [&] {
        verify_join(f.node_a.cert.to_pem(), f.trust, altered, "node-a",
                    "node-r", sig);
      },
      tls_errc::bad_signature, "altered nonce");
}

TEST_CASE("a join claiming a name other than the certificate's is refused") {
  handshake_fixture f;
  // node-b signs honestly for the name it claims, but holds node-b's cert.
  auto sig = sign_join(f.node_b.key, f.challenge, "node-a", "node-r");
  expect_error(
      [&] {
        verify_join(f.node_b.cert.to_pem(), f.trust, f.challenge, "node-a",
                    "node-r", sig);
      },
      tls_errc::name_mismatch, "claims the name 'node-a'");
}

TEST_CASE("a join proof made for another responder is refused") {
  handshake_fixture f;
  auto sig = sign_join(f.node_a.key, f.challenge, "node-a", "node-x");
  expect_error(
      [&] {
        verify_join(f.node_a.cert.to_pem(), f.trust, f.challenge, "node-a",
                    "node-r", sig);
      },
      tls_errc::bad_signature, "does not verify");
}

TEST_CASE("a join with an expired, client or malformed certificate is "
          "refused") {
  handshake_fixture f;
  cert_options old{"node-a"};
  old.start_offset = std::chrono::hours{-24 * 10};
  old.days = 2;
  auto expired = issue_certificate(f.ca, old);
  auto sig = sign_join(expired.key, f.challenge, "node-a", "node-r");
  expect_error(
      [&] {
        verify_join(expired.cert.to_pem(), f.trust, f.challenge, "node-a",
                    "node-r", sig);
      },
      tls_errc::expired, "expired");
  auto client =
      issue_certificate(f.ca, cert_options{"node-a", cert_role::client});
  sig = sign_join(client.key, f.challenge, "node-a", "node-r");
  expect_error(
      [&] {
        verify_join(client.cert.to_pem(), f.trust, f.challenge, "node-a",
                    "node-r", sig);
      },
      tls_errc::wrong_usage, "serverAuth");
  expect_error(
      [&] {
        verify_join("garbage", f.trust, f.challenge, "node-a", "node-r", sig);
      },
      tls_errc::not_pem, "peer certificate");
  expect_error(
      [&] {
        verify_join(f.node_a.cert.to_pem(), f.trust, f.challenge, "node-a",
                    "node-r", signature(4096, 0x30));
      },
      tls_errc::invalid_argument, "bad size");
  expect_error(
      [&] {
        verify_join(f.node_a.cert.to_pem(), f.trust, f.challenge, "node-a",
                    "node-r", signature(70, 0x30));
      },
      tls_errc::bad_signature, "does not verify");
  expect_error(
      [&] {
        verify_join(std::string(20000, 'A'), f.trust, f.challenge, "node-a",
                    "node-r", sig);
      },
      tls_errc::invalid_argument, "too large");
}
