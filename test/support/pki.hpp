#pragma once

/// Test support for the tests that run real exo-node processes: the
/// programs of this build tree, and a cluster CA with a client certificate
/// and node certificates made by exo-cert (as an operator would).
///
///   dir/ca/           the cluster CA (exo-cert init-ca)
///   dir/ops/          client certificate "ops" (console)
///   dir/NAME/         node certificate of NAME, NAME.crt/.key and ca.crt

#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <string>

namespace exo::test {

inline std::string exo_node() {
  return build_path("runtime/node/exo-node");
}
inline std::string exo_cert() {
  return build_path("runtime/tools/exo-cert");
}
inline std::string exo_console() {
  return build_path("runtime/console/exo-console");
}
inline std::string exo_model() {
  return build_path("runtime/tools/exo-model");
}

/// Requires a zero exit, showing the program's output otherwise.
inline void must(const run_result& r) {
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
}

/// The CA in dir/ca and the client certificate "ops" in dir/ops.
inline void make_ca(const std::string& dir) {
  must(run({exo_cert(), "init-ca", "--dir", dir + "/ca"}));
  must(run({exo_cert(), "issue-client", "--ca-dir", dir + "/ca", "--name",
            "ops", "--out", dir + "/ops"}));
}

/// A node certificate for `name` in dir/name (replacing one there).
inline void issue_node(const std::string& dir, const std::string& name) {
  must(run({exo_cert(), "issue-node", "--ca-dir", dir + "/ca", "--name",
            name, "--out", dir + "/" + name, "--force"}));
}

/// A CA and client certificate in a fresh temporary directory.
struct pki {
  std::string dir;
  explicit pki(const std::string& prefix) : dir(temp_dir(prefix)) {
    make_ca(dir);
  }
  void node(const std::string& name) {
    issue_node(dir, name);
  }
};

} // namespace exo::test
