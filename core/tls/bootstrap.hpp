#pragma once

#include <string>

#include "core/tls/material.hpp"

namespace exo::tls {

/// The TLS material of a node that was started without TLS configured.
struct local_material {
  material files;     ///< <state>/tls/{<node>.crt,<node>.key,ca.crt}
  std::string ca_dir; ///< <state>/tls (holds ca.key too)
  bool created_ca = false;
  bool created_node_cert = false;
  std::string common_name;
  /// How to issue certificates for more nodes with exo-cert, for people.
  std::string instructions;
};

/// Makes sure a node has TLS material without any set-up: on the first start
/// creates a local CA in <state_dir>/tls/ca.{crt,key} and a node certificate
/// <state_dir>/tls/<node_name>.{crt,key}; on later starts reuses and checks
/// them (an expired node certificate is renewed from the local CA). Keys are
/// not encrypted (the directory is 0700).
/// @throws tls_error when the files exist but are unusable, or I/O fails.
local_material ensure_local_material(const std::string& state_dir,
                                     const std::string& node_name);

} // namespace exo::tls
