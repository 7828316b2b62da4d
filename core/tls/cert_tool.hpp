#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "core/tls/certificate.hpp"
#include "core/tls/private_key.hpp"

namespace exo::tls {

// -- creating certificates ----------------------------------------------------

/// A certificate together with its private key.
struct credential {
  certificate cert;
  private_key key;
};

/// How to create a cluster CA.
struct ca_options {
  /// Common name of the CA.
  std::string name = "exo cluster CA";
  /// Validity in days from `start_offset`.
  int days = 3650;
  /// Shift of notBefore from now (negative: in the past). The default allows
  /// for a few minutes of clock skew between machines.
  std::chrono::seconds start_offset = std::chrono::minutes{-5};
  key_algorithm algorithm = key_algorithm::ec_p256;
};

/// How to issue a node or client certificate.
struct cert_options {
  cert_options() = default;

  explicit cert_options(std::string cn, cert_role r = cert_role::node)
      : name(std::move(cn)), role(r) {
    // nop
  }

  /// Common name: the node or client name (see validate_name).
  std::string name;
  cert_role role = cert_role::node;
  int days = 365;
  std::chrono::seconds start_offset = std::chrono::minutes{-5};
  /// Extra subjectAltName entries in OpenSSL syntax ("IP:10.0.0.5",
  /// "DNS:gpu1.lan"); DNS:<name> is always present.
  std::vector<std::string> alt_names;
  key_algorithm algorithm = key_algorithm::ec_p256;
};

/// Checks that `name` is a valid node or client name: 1 to 64 characters of
/// [A-Za-z0-9._-], not starting with '.' or '-'. Names become file names and
/// parts of the join transcript, so nothing else is allowed.
/// @throws tls_error invalid_argument; `what` names the value ("node name").
void validate_name(std::string_view name, std::string_view what = "name");

/// Creates a self-signed CA (CA:TRUE, pathlen 0, keyCertSign + cRLSign),
/// signed with ECDSA-SHA256 (or pure Ed25519), with a random 159-bit serial.
credential create_ca(const ca_options& options = {});

/// Issues a leaf certificate signed by `ca`: CN = options.name, SAN, key
/// usage digitalSignature, EKU serverAuth+clientAuth (node) or clientAuth
/// (client), random serial.
credential issue_certificate(const credential& ca, const cert_options& options);

// -- files --------------------------------------------------------------------

/// Creates `dir` (and missing parents) with mode 0700. An existing directory
/// is kept as it is.
void make_private_dir(const std::string& dir);

/// Writes `key` as PEM (encrypted when `passphrase` is set) with mode 0600,
/// atomically. Refuses to replace an existing file unless `force`.
/// @throws tls_error exists or io.
void write_private_key(const std::string& path, const private_key& key,
                       const std::string& passphrase = {}, bool force = false);

/// Writes `cert` as PEM with mode 0644, atomically. Refuses to replace an
/// existing file unless `force`.
void write_certificate(const std::string& path, const certificate& cert,
                       bool force = false);

/// Reads a passphrase from the first line of a file (without the line end).
/// @throws tls_error io, or invalid_argument when it is empty.
std::string read_passphrase_file(const std::string& path);

/// Paths of a CA directory: <dir>/ca.crt and <dir>/ca.key.
struct ca_paths {
  std::string cert;
  std::string key;
};

/// Returns the paths of the CA files in `dir`.
ca_paths ca_paths_in(const std::string& dir);

/// Creates a CA and writes it to `dir` (created 0700). Refuses to replace an
/// existing CA unless `force`.
ca_paths init_ca(const std::string& dir, const ca_options& options = {},
                 const std::string& passphrase = {}, bool force = false);

/// Reads the CA of `dir` (ca.crt, ca.key).
credential load_ca(const std::string& dir, const std::string& passphrase = {});

/// Paths written for an issued certificate.
struct issued_paths {
  std::string cert;    ///< <out>/<name>.crt
  std::string key;     ///< <out>/<name>.key
  std::string ca_cert; ///< <out>/ca.crt (a copy of the CA certificate)
};

/// Issues a certificate from the CA in `ca_dir` and writes it, its key and a
/// copy of the CA certificate to `out_dir` (created 0700). Refuses to replace
/// existing files unless `force`.
issued_paths
issue_to_dir(const std::string& ca_dir, const std::string& ca_passphrase,
             const std::string& out_dir, const cert_options& options,
             const std::string& key_passphrase = {}, bool force = false);

} // namespace exo::tls
